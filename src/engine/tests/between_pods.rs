//! The rules between pods through whole cycles: spread's minDomains and node inclusion,
//! pod affinity's first pod, a gang's own pods counting for each other, and a failed gang
//! leaving no count behind.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::build::SnapshotBuilder;
use crate::engine::model::{LabelRequirement, NodeConstraints, PodKey, SelectorOperator, Snapshot};
use crate::engine::pods::{BoundPod, BoundPods, Namespaces, PodRules, PodTerm, SpreadRule};
use crate::engine::{CycleConfig, schedule};

pub(super) fn labels(pairs: &[(&str, &str)]) -> crate::engine::pods::Labels {
    Arc::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>())
}

pub(super) fn app(value: &str) -> Option<Vec<LabelRequirement>> {
    Some(vec![LabelRequirement { key: "app".into(), operator: SelectorOperator::In, values: vec![value.into()] }])
}

pub(super) fn spread(max_skew: i32, min_domains: i32) -> SpreadRule {
    SpreadRule {
        max_skew,
        topology_key: "zone".into(),
        selector: app("web"),
        min_domains,
        honor_affinity: true,
        honor_taints: false,
    }
}

pub(super) fn term(key: &str, value: &str) -> PodTerm {
    PodTerm { namespaces: Namespaces::Only(vec!["default".into()]), selector: app(value), topology_key: key.into() }
}

/// Nodes `n1`… with 8 CPUs, in the zones given.
pub(super) fn cluster(zones: &[&str]) -> SnapshotBuilder {
    let mut builder = SnapshotBuilder::new();
    for (i, zone) in zones.iter().enumerate() {
        let name = format!("n{}", i + 1);
        builder = builder.gpu_node(&name, 8, 32, 0, &[("zone", zone), ("host", &name)]);
    }
    builder
}

/// A gang of `pods` one-CPU pods labelled app=web with `rules`, all needed at once.
pub(super) fn web(builder: SnapshotBuilder, name: &str, pods: usize, rules: PodRules) -> SnapshotBuilder {
    let rules = Some(Arc::new(rules));
    builder.gang(name, pods, pods, &[("cpu", 1000)]).with_last_gang(|g| {
        for pod in &mut g.pods {
            (pod.labels, pod.rules) = (labels(&[("app", "web")]), rules.clone());
        }
    })
}

/// Where each placed pod went, by node name.
pub(super) fn nodes_of(snapshot: &Snapshot) -> Vec<String> {
    let outcome = schedule(snapshot, &CycleConfig::default());
    let mut nodes: Vec<String> = outcome
        .placements
        .iter()
        .flat_map(|p| p.pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.clone()))
        .collect();
    nodes.sort();
    nodes
}

pub(super) fn zone_counts(snapshot: &Snapshot, nodes: &[String]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for name in nodes {
        let node = snapshot.nodes.iter().find(|n| &n.name == name).unwrap();
        *counts.entry(node.labels["zone"].clone()).or_default() += 1;
    }
    counts
}

#[test]
fn a_gangs_pods_spread_evenly_and_bound_pods_count() {
    let rules = PodRules { spread: vec![spread(1, 1)], ..Default::default() };
    let snapshot = web(cluster(&["a", "a", "b", "b", "c"]), "even", 6, rules.clone()).build();
    let placed = nodes_of(&snapshot);
    assert_eq!(placed.len(), 6);
    assert_eq!(zone_counts(&snapshot, &placed).into_values().collect::<Vec<_>>(), [2, 2, 2]);
    // A web pod bound in zone a already: the gang of 2 goes to b and c.
    let mut snapshot = web(cluster(&["a", "b", "c"]), "after", 2, rules).build();
    let mut bound = BoundPods::default();
    let pod = BoundPod {
        key: PodKey { namespace: "default".into(), name: "old".into() },
        labels: labels(&[("app", "web")]),
        rules: None,
        terminating: false,
    };
    bound.add(0, Arc::new(pod));
    snapshot.bound = Arc::new(bound);
    assert_eq!(nodes_of(&snapshot), ["n2", "n3"]);
}

#[test]
fn below_min_domains_the_least_domain_counts_as_empty() {
    // Two zones, minDomains 3: the global minimum is taken as 0, so with maxSkew 1 each zone
    // takes one pod and a third waits.
    let rules = PodRules { spread: vec![spread(1, 3)], ..Default::default() };
    let snapshot = cluster(&["a", "b"]);
    let snapshot = (0..3).fold(snapshot, |b, i| web(b, &format!("w{i}"), 1, rules.clone())).build();
    let placed = nodes_of(&snapshot);
    assert_eq!(placed, ["n1", "n2"]);
    let outcome = schedule(&snapshot, &CycleConfig::default());
    assert!(outcome.waiting[0].to_string().contains("2 node(s) didn't match pod topology spread constraints"));
}

#[test]
fn only_nodes_the_pod_may_use_make_domains_under_the_default_policy() {
    // Zone c's node does not match the pods' node selector: with nodeAffinityPolicy Honor it
    // is not a domain, so zones a and b take two each; ignoring it, zone c (empty) would hold
    // the minimum at 0 and only one pod would fit per zone.
    let constraints =
        Arc::new(NodeConstraints { node_selector: vec![("pool".into(), "web".into())], ..Default::default() });
    let build = |honor: bool| {
        let mut builder = SnapshotBuilder::new();
        for (name, zone, pool) in [("n1", "a", "web"), ("n2", "b", "web"), ("n3", "c", "batch")] {
            builder = builder.gpu_node(name, 8, 32, 0, &[("zone", zone), ("pool", pool)]);
        }
        let rule = SpreadRule { honor_affinity: honor, ..spread(1, 1) };
        let rules = PodRules { spread: vec![rule], ..Default::default() };
        let builder = (0..4).fold(builder, |b, i| web(b, &format!("w{i}"), 1, rules.clone()));
        let mut snapshot = builder.build();
        for gang in &mut snapshot.gangs {
            gang.pods[0].constraints = constraints.clone();
        }
        snapshot
    };
    assert_eq!(nodes_of(&build(true)).len(), 4);
    assert_eq!(nodes_of(&build(false)).len(), 2);
}

#[test]
fn the_first_pod_of_a_self_affine_gang_goes_anywhere_and_the_rest_follow_it() {
    let rules = PodRules { affinity: vec![term("zone", "web")], ..Default::default() };
    let snapshot = web(cluster(&["a", "b", "a", "b"]), "together", 4, rules).build();
    let placed = nodes_of(&snapshot);
    assert_eq!(placed.len(), 4);
    assert_eq!(zone_counts(&snapshot, &placed).len(), 1, "one zone: {placed:?}");
}

#[test]
fn a_gang_that_fails_leaves_no_count_behind() {
    // Four anti-affine workers on three nodes fail whole; a single web pod after them still
    // finds every node free of their anti-affinity.
    let anti = PodRules { anti_affinity: vec![term("host", "web")], ..Default::default() };
    let builder = web(cluster(&["a", "a", "a"]), "big", 4, anti.clone());
    let snapshot = web(builder, "one", 1, anti).build();
    let outcome = schedule(&snapshot, &CycleConfig::default());
    assert_eq!(outcome.placements.len(), 1);
    assert_eq!(outcome.placements[0].gang.name, "one");
    assert!(outcome.waiting[0].to_string().contains("3 node(s) didn't match pod anti-affinity rules"));
}

/// A gang like [`web`]'s whose pods share `rules` with other gangs (one template's pods: one
/// shape).
fn web_sharing(builder: SnapshotBuilder, name: &str, pods: usize, rules: &Arc<PodRules>) -> SnapshotBuilder {
    builder.gang(name, pods, pods, &[("cpu", 1000)]).with_last_gang(|g| {
        for pod in &mut g.pods {
            (pod.labels, pod.rules) = (labels(&[("app", "web")]), Some(rules.clone()));
        }
    })
}

#[test]
fn nodes_a_failed_gang_of_one_template_tried_stay_open_to_the_next_gang_of_it() {
    // A leader and three one-per-node workers kept off the leader's node fail whole on three
    // nodes: the workers' scan went past the leader's node, refused by their own
    // anti-affinity. Three workers of the same template after them still find all three
    // nodes: the leader is gone with its gang, and the scan starts over with it.
    let workers =
        Arc::new(PodRules { anti_affinity: vec![term("host", "lead"), term("host", "web")], ..Default::default() });
    let builder = web_sharing(cluster(&["a", "a", "a"]), "led", 4, &workers)
        .with_last_gang(|g| (g.pods[0].labels, g.pods[0].rules) = (labels(&[("app", "lead")]), None));
    let snapshot = web_sharing(builder, "fits", 3, &workers).build();
    // No reservation for the gang that cannot run (Backfill would hold the nodes for it).
    let config = CycleConfig { reserve_after_seconds: i64::MAX, ..Default::default() };
    let outcome = schedule(&snapshot, &config);
    let placed: Vec<&str> = outcome.placements.iter().map(|p| p.gang.name.as_str()).collect();
    assert_eq!(placed, ["fits"]);
    assert_eq!(outcome.placements[0].pods.len(), 3);
}

#[test]
fn a_later_gang_of_one_template_goes_past_the_nodes_its_own_kind_holds() {
    // Two one-per-node pods placed first; the third gang of the same template takes the
    // node they left, not one they hold, and a fourth finds none.
    let anti = Arc::new(PodRules { anti_affinity: vec![term("host", "web")], ..Default::default() });
    let builder = web_sharing(cluster(&["a", "a", "a"]), "pair", 2, &anti);
    let builder = web_sharing(builder, "third", 1, &anti);
    let snapshot = web_sharing(builder, "fourth", 1, &anti).build();
    let outcome = schedule(&snapshot, &CycleConfig::default());
    let placed: Vec<&str> = outcome.placements.iter().map(|p| p.gang.name.as_str()).collect();
    assert_eq!(placed, ["pair", "third"]);
    assert_eq!(nodes_of(&snapshot), ["n1", "n2", "n3"]);
    assert!(outcome.waiting[0].to_string().contains("3 node(s) didn't match pod anti-affinity rules"));
}
