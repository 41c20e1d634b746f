//! The rules between pods against the real kube-scheduler: every scenario of
//! `tests/conformance/between_pods.yaml` (host ports, pod affinity and anti-affinity,
//! topology spread, with the node filters around them) runs through Muster and then through
//! kube-scheduler 1.37 on the same API server, one scheduler at a time. Both must place the
//! pods the scenario lists, and every placement either makes must keep every rule, as the
//! independent checker of `rules_checker.rs` verifies.
//!
//! Each scenario has nodes of its own and, per scheduler, a namespace of its own; its pods
//! select its nodes by a label. So that no other node of the shared API server falls in a
//! scenario's domains (a spread with `nodeAffinityPolicy: Ignore` counts every node with the
//! key), the hostname and zone keys are renamed per scenario, in the nodes' labels and in
//! the pods' specs alike.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::rules_checker::{CheckNode, CheckPod, check};
use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::wait::node_of;
use crate::support::{TestCluster, muster as scheduler};

const SCENARIOS: &str = include_str!("../conformance/between_pods.yaml");
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
/// The label that ties a scenario's pods to its nodes.
const SCENARIO_LABEL: &str = "rules.e2e.muster.dev/scenario";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    name: String,
    about: String,
    nodes: Vec<ScenarioNode>,
    #[serde(default)]
    bound: Vec<ScenarioPod>,
    /// Headless Services made in the scenario's namespace before its pods (name to
    /// selector): kube-scheduler's default spread constraints select by them.
    #[serde(default)]
    services: BTreeMap<String, BTreeMap<String, String>>,
    pods: Vec<ScenarioPod>,
    placed: Vec<String>,
    /// Where a pod must go, where kube-scheduler's scores decide it (pod to node).
    #[serde(default)]
    on: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioNode {
    name: String,
    zone: Option<String>,
    cpu: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<Value>,
    #[serde(default)]
    unschedulable: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioPod {
    name: String,
    count: Option<usize>,
    node: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    cpu: Option<String>,
    #[serde(default)]
    ports: Vec<Value>,
    #[serde(default)]
    spec: Value,
}

impl ScenarioPod {
    /// The names of the pods it makes.
    fn names(&self) -> Vec<String> {
        match self.count {
            None => vec![self.name.clone()],
            Some(n) => (0..n).map(|i| format!("{}-{i}", self.name)).collect(),
        }
    }
}

fn scenarios() -> Vec<Scenario> {
    let scenarios: Vec<Scenario> = yaml_serde::from_str(SCENARIOS).expect("tests/conformance/between_pods.yaml");
    let mut names = BTreeSet::new();
    for s in &scenarios {
        assert!(s.name.len() <= 30 && names.insert(&s.name), "scenario name {} too long or repeated", s.name);
        let made: BTreeSet<String> = s.pods.iter().flat_map(ScenarioPod::names).collect();
        for p in &s.placed {
            assert!(made.contains(p), "{}: placed names {p}, which no pod entry makes", s.name);
        }
        assert!(s.bound.iter().all(|b| b.node.is_some()), "{}: a bound pod names no node", s.name);
    }
    scenarios
}

/// Per-scenario names: the scenario's index keeps label values and keys short and unique.
struct Names {
    id: String,
    index: usize,
}

impl Names {
    fn node(&self, node: &str) -> String {
        format!("{}-s{}-{node}", self.id, self.index)
    }
    fn selector_value(&self) -> String {
        format!("{}-s{}", self.id, self.index)
    }
    fn namespace(&self, prefix: &str) -> String {
        format!("{}-{prefix}-s{}", self.id, self.index)
    }
    fn key(&self, key: &str) -> String {
        let name = if key == HOSTNAME { "hostname" } else { "zone" };
        format!("s{}.{}.rules.e2e.muster.dev/{name}", self.index, self.id)
    }
    /// The scenario's spec with the hostname and zone keys renamed.
    fn renamed(&self, value: &Value) -> Value {
        match value {
            Value::String(s) if s == HOSTNAME || s == ZONE => Value::String(self.key(s)),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.renamed(v)).collect()),
            Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), self.renamed(v))).collect()),
            other => other.clone(),
        }
    }
}

fn node_labels(names: &Names, n: &ScenarioNode, cluster_id: &str) -> BTreeMap<String, String> {
    let full = names.node(&n.name);
    let mut labels: BTreeMap<String, String> = n
        .labels
        .iter()
        .map(|(k, v)| (if k == HOSTNAME || k == ZONE { names.key(k) } else { k.clone() }, v.clone()))
        .collect();
    labels.insert(TEST_LABEL.into(), cluster_id.into());
    labels.insert(SCENARIO_LABEL.into(), names.selector_value());
    labels.insert(names.key(HOSTNAME), full);
    if let Some(zone) = &n.zone {
        labels.insert(names.key(ZONE), zone.clone());
    }
    labels
}

async fn create_nodes(cluster: &TestCluster, scenarios: &[Scenario]) -> Vec<CheckNode> {
    let nodes: Api<Node> = cluster.cluster_api();
    let mut out = Vec::new();
    for (index, s) in scenarios.iter().enumerate() {
        let names = Names { id: cluster.id.clone(), index };
        for n in &s.nodes {
            let full = names.node(&n.name);
            let labels = node_labels(&names, n, &cluster.id);
            let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let cpu = n.cpu.unwrap_or(8);
            cluster.create_node(&builders::node(&full, cpu, 64, 0, &pairs)).await;
            if !n.taints.is_empty() || n.unschedulable {
                let spec = json!({"spec": {"taints": n.taints, "unschedulable": n.unschedulable}});
                nodes.patch(&full, &PatchParams::default(), &Patch::Merge(spec)).await.expect("node taints");
            }
            let labels =
                nodes.get(&full).await.expect("node").metadata.labels.unwrap_or_default().into_iter().collect();
            out.push(CheckNode {
                name: full,
                labels,
                taints: n.taints.clone(),
                unschedulable: n.unschedulable,
                cpu_milli: i64::from(cpu) * 1000,
            });
        }
    }
    out
}

fn pod_object(names: &Names, p: &ScenarioPod, name: &str, scheduler: &str) -> Pod {
    let mut container = json!({
        "name": "main",
        "image": "registry.invalid/app:1",
        "resources": {"requests": {"cpu": p.cpu.clone().unwrap_or_else(|| "100m".into()), "memory": "64Mi"}},
    });
    if !p.ports.is_empty() {
        container["ports"] = json!(p.ports);
    }
    let mut spec = json!({
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    });
    if let Value::Object(extra) = names.renamed(&p.spec) {
        for (k, v) in extra {
            spec[k.as_str()] = v;
        }
    }
    spec["nodeSelector"][SCENARIO_LABEL] = json!(names.selector_value());
    if let Some(node) = &p.node {
        spec["nodeName"] = json!(names.node(node));
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": p.labels},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("pod {name}: {e}"))
}

async fn create_namespace(cluster: &TestCluster, namespace: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    cluster.create(&cluster.cluster_api::<Namespace>(), &ns).await;
    // No serviceaccount controller runs; pods need the namespace's default account.
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    cluster.create(&Api::namespaced(cluster.client.clone(), namespace), &account).await;
}

/// Makes every scenario's bound pods, then its pods, for `scheduler` in namespaces `prefix`.
async fn create_pods(cluster: &TestCluster, scenarios: &[Scenario], prefix: &str, scheduler: &str) {
    for (index, s) in scenarios.iter().enumerate() {
        let names = Names { id: cluster.id.clone(), index };
        let namespace = names.namespace(prefix);
        create_namespace(cluster, &namespace).await;
        let services: Api<Service> = Api::namespaced(cluster.client.clone(), &namespace);
        for (name, selector) in &s.services {
            let service = json!({"metadata": {"name": name}, "spec": {"clusterIP": "None", "selector": selector}});
            cluster.create(&services, &serde_json::from_value(service).expect("a service")).await;
        }
        let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &namespace);
        let mut last = String::new();
        for p in s.bound.iter().chain(&s.pods) {
            for name in p.names() {
                if name < last {
                    // Among pods made in the same second Muster goes by name, kube-scheduler
                    // by arrival (docs/scheduling.md): a pod whose name sorts before the last
                    // one's is made a second later, so that both see the scenario's order.
                    tokio::time::sleep(Duration::from_millis(1100)).await;
                }
                cluster.create(&pods, &pod_object(&names, p, &name, scheduler)).await;
                last = name;
            }
        }
    }
}

/// All pods in namespaces `prefix`, once no pod is left unseen and nothing has changed for
/// a while: each scheduler retries a pod it could not place when what it waits on changes.
async fn settled(cluster: &TestCluster, scenarios: &[Scenario], prefix: &str) -> BTreeMap<usize, Vec<Pod>> {
    let pods: Api<Pod> = Api::all(cluster.client.clone());
    let mine = format!("{}-{prefix}-s", cluster.id);
    let decided = |p: &Pod| {
        node_of(p).is_some()
            || p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
    };
    let expected: usize =
        scenarios.iter().map(|s| s.bound.len() + s.pods.iter().map(|p| p.names().len()).sum::<usize>()).sum();
    within(240, &format!("every {prefix} pod bound or marked unschedulable, and no change for 8 s"), async {
        let mut last: Option<(BTreeSet<(String, String)>, Instant)> = None;
        loop {
            let list: Vec<Pod> = pods.list(&ListParams::default()).await.expect("list pods").items;
            let list: Vec<Pod> = list
                .into_iter()
                .filter(|p| p.metadata.namespace.as_deref().is_some_and(|n| n.starts_with(&mine)))
                .collect();
            let bound: BTreeSet<(String, String)> = list
                .iter()
                .filter_map(|p| {
                    Some((p.metadata.name.clone()?, format!("{}/{}", p.metadata.namespace.clone()?, node_of(p)?)))
                })
                .collect();
            let all_decided = list.len() == expected && list.iter().all(decided);
            match &last {
                Some((seen, since)) if *seen == bound && all_decided && since.elapsed() > Duration::from_secs(8) => {
                    let mut out: BTreeMap<usize, Vec<Pod>> = BTreeMap::new();
                    for p in list {
                        let ns = p.metadata.namespace.clone().unwrap();
                        let index: usize = ns[mine.len()..].parse().expect("scenario index");
                        out.entry(index).or_default().push(p);
                    }
                    return out;
                }
                Some((seen, _)) if *seen == bound => {}
                _ => last = Some((bound, Instant::now())),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
}

/// Deletes every pod in namespaces `prefix` at once, so the next scheduler starts from the
/// same free nodes.
async fn clear(cluster: &TestCluster, scenarios: &[Scenario], prefix: &str) {
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    for index in 0..scenarios.len() {
        let names = Names { id: cluster.id.clone(), index };
        let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &names.namespace(prefix));
        pods.delete_collection(&now, &ListParams::default()).await.expect("delete the pods");
    }
    let all: Api<Pod> = Api::all(cluster.client.clone());
    let mine = format!("{}-{prefix}-s", cluster.id);
    within(60, &format!("the {prefix} pods gone"), async {
        while all
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|p| p.metadata.namespace.as_deref().is_some_and(|n| n.starts_with(&mine)))
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// Per scenario: the pods the scheduler placed (sorted), and what the checker found wrong,
/// with a line for each pod of `on` that went elsewhere.
fn outcomes(
    cluster_id: &str,
    scenarios: &[Scenario],
    nodes: &[CheckNode],
    pods: &BTreeMap<usize, Vec<Pod>>,
) -> Vec<(Vec<String>, Vec<String>)> {
    scenarios
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let bound: BTreeSet<String> = s.bound.iter().map(|b| b.name.clone()).collect();
            let check_pods: Vec<CheckPod> = pods
                .get(&index)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|p| CheckPod {
                    name: p.metadata.name.clone().unwrap(),
                    namespace: p.metadata.namespace.clone().unwrap(),
                    node: node_of(p).map(str::to_string),
                    labels: p.metadata.labels.clone().unwrap_or_default().into_iter().collect(),
                    spec: serde_json::to_value(p.spec.as_ref().unwrap()).unwrap(),
                    placed: !bound.contains(p.metadata.name.as_deref().unwrap()),
                })
                .collect();
            let mut placed: Vec<String> =
                check_pods.iter().filter(|p| p.placed && p.node.is_some()).map(|p| p.name.clone()).collect();
            placed.sort();
            let mut wrong = check(nodes, &check_pods);
            let names = Names { id: cluster_id.to_string(), index };
            for (pod, node) in &s.on {
                let went = check_pods.iter().find(|p| &p.name == pod).and_then(|p| p.node.clone());
                if went.as_deref() != Some(names.node(node).as_str()) {
                    wrong.push(format!("{pod} should be on {node} by kube-scheduler's scores, went to {went:?}"));
                }
            }
            (placed, wrong)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn muster_places_the_pods_kube_scheduler_places_and_every_placement_keeps_every_rule() {
    let cluster = TestCluster::new("rules-vs-kube").await;
    let scenarios = scenarios();
    let nodes = create_nodes(&cluster, &scenarios).await;

    // Muster first, alone.
    create_pods(&cluster, &scenarios, "m", &cluster.scheduler_name).await;
    let muster = {
        let _running = scheduler::start(&cluster, scheduler::config(&cluster), None);
        settled(&cluster, &scenarios, "m").await
    };
    clear(&cluster, &scenarios, "m").await;

    // Then the real kube-scheduler, alone, on the same nodes.
    let kube_name = format!("kube-{}", cluster.id);
    cluster.control_plane.start_kube_scheduler(&kube_name);
    create_pods(&cluster, &scenarios, "k", &kube_name).await;
    let kube = settled(&cluster, &scenarios, "k").await;

    let (muster, kube) =
        (outcomes(&cluster.id, &scenarios, &nodes, &muster), outcomes(&cluster.id, &scenarios, &nodes, &kube));
    let mut problems = Vec::new();
    let mut agreements = 0;
    for (s, ((m, m_wrong), (k, k_wrong))) in scenarios.iter().zip(muster.iter().zip(&kube)) {
        let mut expected = s.placed.clone();
        expected.sort();
        if *m == expected && *k == expected {
            agreements += 1;
        } else {
            problems.push(format!(
                "{} ({}): the scenario expects {expected:?}; Muster placed {m:?}, kube-scheduler {k:?}",
                s.name, s.about
            ));
        }
        for (who, wrong) in [("Muster", m_wrong), ("kube-scheduler", k_wrong)] {
            for w in wrong {
                problems.push(format!("{}: {who}'s placement breaks a rule: {w}", s.name));
            }
        }
    }
    let report = format!(
        "rules between pods side by side, one scheduler at a time on the same nodes: {} scenarios, {agreements} where \
         Muster and kube-scheduler place the same pods as expected, {} problems\n",
        scenarios.len(),
        problems.len()
    );
    eprint!("{report}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("side-by-side-rules.txt"), &report).expect("failed to record the side-by-side result");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(scenarios.len() >= 60, "the table holds {} scenarios", scenarios.len());
}
