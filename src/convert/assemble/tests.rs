//! What the memo keeps from one snapshot to the next stays bounded by what the cluster
//! holds now, and bound pods cost only their demand.

use super::memo::MIN_NAMES_PRUNE;
use super::*;
use k8s_openapi::api::core::v1::{Node, Pod};

fn node(name: &str, version: usize, extra: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "resourceVersion": version.to_string()},
        "status": {"allocatable": {"cpu": "8", "pods": "110", "nvidia.com/gpu": "8", extra: "1"}},
    }))
    .unwrap()
}

fn pod(name: &str, node: Option<&str>, affinity_operator: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1"},
        "spec": {
            "schedulerName": "muster",
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": affinity_operator, "values": ["a"]}]}]}}},
        },
    }))
    .unwrap()
}

#[test]
fn names_no_node_offers_any_more_are_dropped_from_the_table() {
    let mut memo = Memo::default();
    for i in 0..5_000 {
        // One node publishes a new extended resource every snapshot, as a node agent
        // gone wrong (or a malicious one) could.
        let objects = ClusterObjects {
            nodes: vec![node("steady", 1, "example.com/steady"), node("churn", i + 2, &format!("example.com/r{i}"))],
            pods: vec![pod("waiting", None, "In"), pod("running", Some("steady"), "In")],
            ..Default::default()
        };
        let out = assemble_view(&objects.view(), "muster", 0, &mut memo);
        assert!(
            memo.conversions.names.len() <= 2 * MIN_NAMES_PRUNE + 16,
            "snapshot {i}: {} names",
            memo.conversions.names.len()
        );
        // Whatever the table's age, ids mean what they say.
        let gpu = out.snapshot.resources.get("nvidia.com/gpu").unwrap();
        assert_eq!(out.snapshot.gangs[0].pods[0].demand.get(gpu), 2, "snapshot {i}");
        let steady = out.snapshot.nodes.iter().find(|n| n.name == "steady").unwrap();
        assert_eq!(steady.requested.get(gpu), 2, "snapshot {i}");
        assert_eq!(steady.allocatable.get(out.snapshot.resources.get("example.com/steady").unwrap()), 1);
    }
}

#[test]
fn a_bound_pod_costs_its_demand_and_nothing_of_where_it_may_go() {
    // A node affinity with an operator the scheduler cannot read stops a pending pod; on a
    // pod already bound it is never read, and its GPUs are counted.
    let objects = ClusterObjects {
        nodes: vec![node("a", 1, "example.com/x")],
        pods: vec![pod("running", Some("a"), "Sideways"), pod("waiting", None, "Sideways")],
        ..Default::default()
    };
    let mut memo = Memo::default();
    let out = assemble_view(&objects.view(), "muster", 0, &mut memo);
    let gpu = out.snapshot.resources.get("nvidia.com/gpu").unwrap();
    assert_eq!(out.snapshot.nodes[0].requested.get(gpu), 2);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert!(out.rejected_pods.values().any(|r| r.why.contains("Sideways")), "{:?}", out.rejected_pods);
    assert!(memo.conversions.interner.is_empty(), "no constraints converted for the bound pod");
}

#[test]
fn bound_pods_are_listed_by_node_and_a_never_preempting_pod_makes_its_gang_evict_nobody() {
    let mut waiting = pod("waiting", None, "In");
    waiting.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
    let mut running = pod("running", Some("a"), "In");
    running.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    let objects = ClusterObjects {
        nodes: vec![node("a", 1, "example.com/x")],
        pods: vec![running, waiting],
        ..Default::default()
    };
    let out = assemble_view(&objects.view(), "muster", 0, &mut Memo::default());
    let on_a = out.snapshot.bound.on(0);
    assert_eq!(on_a.len(), 1);
    assert_eq!((on_a[0].key.name.as_str(), on_a[0].labels.get("app").map(String::as_str)), ("running", Some("db")));
    assert!(!out.snapshot.gangs[0].preempts);
}

#[test]
fn pods_of_one_template_share_their_rules_between_pods_and_labels() {
    // Two replicas with the same anti-affinity, each its own gang: the engine finds their
    // shape by the rules' address, so equal rules must be one Arc.
    let replica = |name: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1", "labels": {"app": "web"}},
            "spec": {
                "schedulerName": "muster",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}},
            },
        }))
        .unwrap()
    };
    let objects = ClusterObjects {
        nodes: vec![node("n1", 1, "example.com/x")],
        pods: vec![replica("web-0"), replica("web-1")],
        ..Default::default()
    };
    let mut memo = Memo::default();
    let out = assemble_view(&objects.view(), "muster", 0, &mut memo);
    let rules: Vec<_> = out.snapshot.gangs.iter().map(|g| g.pods[0].rules.clone().expect("rules")).collect();
    assert_eq!(rules.len(), 2);
    assert!(std::sync::Arc::ptr_eq(&rules[0], &rules[1]));
    // Their labels too: the engine counts pods of one kind (labels and rules) once.
    let labels: Vec<_> = out.snapshot.gangs.iter().map(|g| g.pods[0].labels.clone()).collect();
    assert!(std::sync::Arc::ptr_eq(&labels[0], &labels[1]));
}
