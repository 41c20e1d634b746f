//! Preemption that keeps the rules between pods: the victims are chosen so that the
//! preemptor's required anti-affinity, affinity and spread hold once they are gone, and a
//! running pod's anti-affinity against the preemptor still counts. In each case free room
//! exists where a rule forbids the preemptor, so a choice by capacity alone would evict
//! nobody and place it there.

use std::sync::Arc;

use super::between_pods::{app, labels, term};
use super::preempt::run;
use crate::engine::build::{GPU as G, SnapshotBuilder};
use crate::engine::model::{PodKey, Snapshot};
use crate::engine::pods::{BoundPod, BoundPods, PodRules, SpreadRule};

/// Two 8-GPU nodes, n1 in zone a and n2 in zone b, one queue owning both.
fn fleet() -> SnapshotBuilder {
    SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[("zone", "a"), ("host", "n1")])
        .gpu_node("n2", 64, 512, 8, &[("zone", "b"), ("host", "n2")])
        .queue("a", "", &[(G, 16, 1, None, None)], |_| {})
        .at(10_000)
}

/// A running one-pod gang `name` on `node` using `gpus`, at `priority`.
fn running(builder: SnapshotBuilder, name: &str, node: &str, gpus: i64, priority: i32) -> SnapshotBuilder {
    builder.running(name, "a", node, 1, &[(G, gpus)], 100).with_last_running(|r| r.priority = priority)
}

/// The preemptor: one pod of one GPU labelled app=web, at priority 100, with `rules`.
fn web(builder: SnapshotBuilder, rules: PodRules) -> Snapshot {
    let rules = (!rules.is_empty()).then(|| Arc::new(rules));
    builder
        .gang("web", 1, 1, &[(G, 1)])
        .in_queue("a")
        .with_last_gang(|g| {
            g.priority = 100;
            (g.pods[0].labels, g.pods[0].rules) = (labels(&[("app", "web")]), rules);
        })
        .build()
}

/// The running pods' labels and rules, as the rules between pods see them: `(running gang,
/// node index, app label, rules)`.
fn bound(mut snapshot: Snapshot, pods: &[(&str, u32, &str, Option<PodRules>)]) -> Snapshot {
    let mut all = BoundPods::default();
    for (gang, node, app_label, rules) in pods {
        let pod = BoundPod {
            key: PodKey { namespace: "default".into(), name: format!("{gang}-0") },
            labels: labels(&[("app", app_label)]),
            rules: rules.clone().map(Arc::new),
            terminating: false,
        };
        all.add(*node as usize, Arc::new(pod));
    }
    snapshot.bound = Arc::new(all);
    snapshot
}

/// Where the preemptor's room was made (its reservation's node), and the gangs evicted.
fn outcome(snapshot: &Snapshot) -> (Vec<String>, Option<String>) {
    let (lines, outcome) = run(snapshot);
    let evicted: Vec<String> = outcome.evictions.iter().map(|e| e.gang.name.clone()).collect();
    let node = outcome.reservations.first().and_then(|r| r.pods.first()).map(|(_, n)| n.clone());
    assert!(outcome.placements.is_empty(), "placed where a rule forbids it: {lines:?}");
    (evicted, node)
}

#[test]
fn the_pod_its_anti_affinity_refuses_is_the_victim_though_the_node_has_room() {
    // n1: a low-priority noisy pod on 1 of 8 GPUs; n2: full, at a priority web cannot
    // preempt. Only evicting the noisy pod lets web keep away from it.
    let builder = running(running(fleet(), "noisy", "n1", 1, 0), "vip", "n2", 8, 200);
    let rules = PodRules { anti_affinity: vec![term("host", "noisy")], ..Default::default() };
    let snapshot = bound(web(builder, rules), &[("noisy", 0, "noisy", None), ("vip", 1, "vip", None)]);
    assert_eq!(outcome(&snapshot), (vec!["noisy".to_string()], Some("n1".to_string())));
}

#[test]
fn a_running_pods_anti_affinity_keeps_the_preemptor_off_its_node_and_the_victim_is_elsewhere() {
    // n1: a high-priority guard that repels app=web, with 7 GPUs free; n2: full of a
    // low-priority filler. web must go to n2.
    let builder = running(running(fleet(), "guard", "n1", 1, 200), "filler", "n2", 8, 0);
    let guard = PodRules { anti_affinity: vec![term("host", "web")], ..Default::default() };
    let snapshot =
        bound(web(builder, PodRules::default()), &[("guard", 0, "guard", Some(guard)), ("filler", 1, "filler", None)]);
    assert_eq!(outcome(&snapshot), (vec!["filler".to_string()], Some("n2".to_string())));
}

#[test]
fn the_victim_is_in_the_zone_the_preemptors_spread_needs() {
    // A web pod already runs in zone a (high priority, 1 GPU); zone b is full of filler.
    // With maxSkew 1, a second web pod in zone a would be 2 against 0.
    let builder = running(running(fleet(), "web-old", "n1", 1, 200), "filler", "n2", 8, 0);
    let spread = SpreadRule {
        max_skew: 1,
        topology_key: "zone".into(),
        selector: app("web"),
        min_domains: 1,
        honor_affinity: true,
        honor_taints: false,
    };
    let rules = PodRules { spread: vec![spread], ..Default::default() };
    let snapshot = bound(web(builder, rules), &[("web-old", 0, "web", None), ("filler", 1, "filler", None)]);
    assert_eq!(outcome(&snapshot), (vec!["filler".to_string()], Some("n2".to_string())));
}

#[test]
fn the_victim_is_in_the_zone_of_the_pod_the_preemptor_must_join() {
    // The leader runs in zone b beside a low-priority filler that fills the node; zone a
    // is empty. web requires the leader's zone.
    let builder = running(running(fleet(), "leader", "n2", 1, 200), "filler", "n2", 7, 0);
    let rules = PodRules { affinity: vec![term("zone", "leader")], ..Default::default() };
    let snapshot = bound(web(builder, rules), &[("leader", 1, "leader", None), ("filler", 1, "filler", None)]);
    assert_eq!(outcome(&snapshot), (vec!["filler".to_string()], Some("n2".to_string())));
}

#[test]
fn a_backfill_reservation_keeps_a_node_per_worker_of_a_gang_that_wants_one_per_node() {
    // n1 and n2 each have 2 GPUs free, n3 none; a pair of 4-GPU workers, one per node,
    // waits. Each node could hold both by capacity, but the pair needs two nodes: both are
    // kept from the 2-GPU gang behind it.
    let nodes = |b: SnapshotBuilder| {
        b.gpu_node("n1", 64, 512, 8, &[("host", "n1")]).gpu_node("n2", 64, 512, 8, &[("host", "n2")]).gpu_node(
            "n3",
            64,
            512,
            8,
            &[("host", "n3")],
        )
    };
    let build = |rules: Option<PodRules>| {
        let builder = nodes(SnapshotBuilder::new())
            .queue("a", "", &[(G, 48, 1, None, None)], |_| {})
            .at(100_000)
            .running("r1", "a", "n1", 1, &[(G, 6)], 100)
            .running("r2", "a", "n2", 1, &[(G, 6)], 100)
            .running("r3", "a", "n3", 1, &[(G, 8)], 100);
        let rules = rules.map(Arc::new);
        builder
            .gang("pair", 2, 2, &[(G, 4)])
            .in_queue("a")
            .with_last_gang(|g| {
                for pod in &mut g.pods {
                    (pod.labels, pod.rules) = (labels(&[("app", "pair")]), rules.clone());
                }
            })
            .gang("small", 1, 1, &[(G, 2)])
            .in_queue("a")
            .with_last_gang(|g| g.created = 50_000)
            .build()
    };
    let (lines, _) = run(&build(None));
    assert!(lines.iter().any(|l| l.starts_with("small -> ")), "without rules one node is kept: {lines:?}");
    let one_per_node = PodRules { anti_affinity: vec![term("host", "pair")], ..Default::default() };
    let (lines, outcome) = run(&build(Some(one_per_node)));
    assert!(outcome.placements.is_empty(), "both nodes with room are kept for the pair: {lines:?}");
}
