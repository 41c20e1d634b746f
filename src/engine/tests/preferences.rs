//! Preferences between pods through whole cycles: preferred pod affinity and anti-affinity
//! (a pod's own, and the terms of bound pods that select it) and `ScheduleAnyway` spread
//! choose among the nodes that fit, where Muster's packing alone would choose otherwise,
//! and never keep a pod from a node it fits.

use std::sync::Arc;

use super::between_pods::{cluster, labels, nodes_of, spread, term, web, zone_counts};
use crate::engine::model::PodKey;
use crate::engine::pods::{BoundPod, BoundPods, PodRules, WeightedTerm};

fn weighted(weight: i32, key: &str, app: &str) -> WeightedTerm {
    WeightedTerm { weight, term: term(key, app) }
}

/// A pod bound on node `node` (by index), labelled app=`app`, with `rules`.
fn bound(node: usize, name: &str, app: &str, rules: Option<PodRules>) -> BoundPods {
    let mut bound = BoundPods::default();
    let pod = BoundPod {
        key: PodKey { namespace: "default".into(), name: name.into() },
        labels: labels(&[("app", app)]),
        rules: rules.map(Arc::new),
        terminating: false,
    };
    bound.add(node, Arc::new(pod));
    bound
}

#[test]
fn preferred_anti_affinity_spreads_a_gang_that_packing_would_stack() {
    // Without the preference, bin-packing puts all three one-CPU pods on one node.
    let plain = web(cluster(&["a", "a", "a"]), "plain", 3, PodRules::default()).build();
    assert_eq!(nodes_of(&plain), ["n1", "n1", "n1"]);
    let rules = PodRules { preferred_anti_affinity: vec![weighted(100, "host", "web")], ..Default::default() };
    let apart = web(cluster(&["a", "a", "a"]), "apart", 3, rules.clone()).build();
    assert_eq!(nodes_of(&apart), ["n1", "n2", "n3"]);
    // Four on three nodes: a preference, not a rule; the fourth still goes.
    let four = web(cluster(&["a", "a", "a"]), "four", 4, rules).build();
    assert_eq!(nodes_of(&four).len(), 4);
}

#[test]
fn preferred_affinity_follows_a_bound_pod_into_its_zone() {
    let rules = PodRules { preferred_affinity: vec![weighted(50, "zone", "db")], ..Default::default() };
    let mut snapshot = web(cluster(&["a", "a", "b"]), "near", 2, rules).build();
    snapshot.bound = Arc::new(bound(2, "db", "db", None));
    assert_eq!(nodes_of(&snapshot), ["n3", "n3"]);
}

#[test]
fn bound_pods_terms_draw_and_repel_the_pods_they_select() {
    // A bound pod preferring no web pod on its host sends web pods elsewhere…
    let repel = PodRules { preferred_anti_affinity: vec![weighted(80, "host", "web")], ..Default::default() };
    let mut snapshot = web(cluster(&["a", "a"]), "away", 2, PodRules::default()).build();
    snapshot.bound = Arc::new(bound(0, "cache", "cache", Some(repel)));
    assert_eq!(nodes_of(&snapshot), ["n2", "n2"]);
    // …and one requiring web pods in its zone draws them there (hardPodAffinityWeight 1).
    let draw = PodRules { affinity: vec![term("zone", "web")], ..Default::default() };
    let mut snapshot = web(cluster(&["a", "b"]), "toward", 2, PodRules::default()).build();
    snapshot.bound = Arc::new(bound(1, "client", "client", Some(draw)));
    assert_eq!(nodes_of(&snapshot), ["n2", "n2"]);
}

#[test]
fn schedule_anyway_spreads_where_it_can_and_places_where_it_cannot() {
    let rules = PodRules { soft_spread: vec![spread(1, 1)], ..Default::default() };
    let snapshot = web(cluster(&["a", "a", "b", "b"]), "even", 4, rules.clone()).build();
    let placed = nodes_of(&snapshot);
    assert_eq!(zone_counts(&snapshot, &placed).into_values().collect::<Vec<_>>(), [2, 2]);
    // Zone b's only node has room for one: the rest go to zone a rather than wait.
    let mut builder = cluster(&["a"]);
    builder = builder.gpu_node("small", 1, 4, 0, &[("zone", "b"), ("host", "small")]);
    let snapshot = web(builder, "lopsided", 3, rules).build();
    let placed = nodes_of(&snapshot);
    assert_eq!(zone_counts(&snapshot, &placed).into_values().collect::<Vec<_>>(), [2, 1]);
}
