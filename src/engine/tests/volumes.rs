//! Claims that wait for their first consumer through whole cycles: a gang goes where every
//! pod's claim can have a volume, waits whole in kube-scheduler's words where none can, and
//! the plan for its binding gives each claim a volume once.

use std::sync::Arc;

use crate::engine::build::SnapshotBuilder;
use crate::engine::model::{DelayedClaim, LabelRequirement, NodeConstraints, SelectorOperator, Snapshot};
use crate::engine::volumes::{VolumeChoice, plan};
use crate::engine::{CycleConfig, schedule};

fn on(key: &str, value: &str) -> Vec<LabelRequirement> {
    vec![LabelRequirement { key: key.into(), operator: SelectorOperator::In, values: vec![value.into()] }]
}

/// Nodes n1…n4, n1 and n2 in zone a, n3 and n4 in zone b.
fn cluster() -> SnapshotBuilder {
    let mut builder = SnapshotBuilder::new();
    for (name, zone) in [("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")] {
        builder = builder.gpu_node(name, 8, 32, 0, &[("zone", zone), ("host", name)]);
    }
    builder
}

/// A gang of `pods` one-CPU pods, pod i with the claim `claim(i)`.
fn gang(builder: SnapshotBuilder, pods: usize, claim: impl Fn(usize) -> DelayedClaim) -> Snapshot {
    let mut snapshot = builder.gang("job", pods, pods, &[("cpu", 1000)]).build();
    for (i, pod) in snapshot.gangs[0].pods.iter_mut().enumerate() {
        pod.constraints = Arc::new(NodeConstraints { delayed: vec![claim(i)], ..Default::default() });
    }
    snapshot
}

fn claim(name: String) -> DelayedClaim {
    DelayedClaim { namespace: "default".into(), name, ..Default::default() }
}

#[test]
fn a_gang_goes_where_its_class_provisions_and_each_claim_is_given_its_pods_node() {
    // Provisioned in zone b only, with room on n4 only.
    let snapshot = gang(cluster(), 2, |i| DelayedClaim {
        provision: Some(vec![on("zone", "b")]),
        room: Some(vec![on("host", "n4")]),
        ..claim(format!("data-{i}"))
    });
    let outcome = schedule(&snapshot, &CycleConfig::default());
    let placement = &outcome.placements[0];
    let nodes: Vec<&str> = placement.pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.as_str()).collect();
    assert_eq!(nodes, ["n4", "n4"]);
    let pods = &snapshot.gangs[0].pods;
    let placed = placement.pods.iter().map(|(key, n)| {
        let pod = pods.iter().find(|p| &p.key == key).unwrap();
        (key, pod.constraints.delayed.as_slice(), &snapshot.nodes[*n as usize])
    });
    let writes = plan(placed, &mut Vec::new());
    assert_eq!(writes.len(), 2);
    assert!(writes.iter().all(|w| w.node == "n4" && w.choice == Ok(VolumeChoice::Provision)), "{writes:?}");
}

#[test]
fn a_gang_without_a_volume_for_every_pod_waits_whole_saying_why() {
    // One free volume per node of zone a, four pods: two fit by volume, none may bind.
    let snapshot = gang(cluster(), 4, |i| DelayedClaim {
        volumes: vec![("pv-n1".into(), vec![on("host", "n1")]), ("pv-n2".into(), vec![on("host", "n2")])],
        ..claim(format!("data-{i}"))
    });
    let outcome = schedule(&snapshot, &CycleConfig::default());
    // The engine counts no volumes: it may put all four on n1 and n2; the plan then takes
    // each volume once, and the claims it cannot serve fail the binding.
    let placement = &outcome.placements[0];
    let pods = &snapshot.gangs[0].pods;
    let placed = placement.pods.iter().map(|(key, n)| {
        let pod = pods.iter().find(|p| &p.key == key).unwrap();
        (key, pod.constraints.delayed.as_slice(), &snapshot.nodes[*n as usize])
    });
    let writes = plan(placed, &mut Vec::new());
    let bound: Vec<&VolumeChoice> = writes.iter().filter_map(|w| w.choice.as_ref().ok()).collect();
    assert!(bound.len() <= 2, "each volume given once: {writes:?}");
    assert!(
        writes.iter().any(|w| w
            .choice
            .as_ref()
            .is_err_and(|e| e.to_string().contains("didn't find available persistent volumes")))
    );
    // Nowhere to provision and no volume: the gang waits, in kube-scheduler's words.
    let snapshot = gang(cluster(), 2, |i| claim(format!("data-{i}")));
    let outcome = schedule(&snapshot, &CycleConfig::default());
    assert!(outcome.placements.is_empty());
    let why = outcome.waiting[0].to_string();
    assert!(why.contains("4 node(s) didn't find available persistent volumes to bind"), "{why}");
    // Room nowhere: kube-scheduler's other words.
    let snapshot = gang(cluster(), 1, |i| DelayedClaim {
        provision: Some(vec![Vec::new()]),
        room: Some(Vec::new()),
        ..claim(format!("d{i}"))
    });
    let why = schedule(&snapshot, &CycleConfig::default()).waiting[0].to_string();
    assert!(why.contains("4 node(s) did not have enough free storage"), "{why}");
}

#[test]
fn a_claim_shared_by_pods_on_two_nodes_cannot_follow_both() {
    let snapshot = gang(cluster(), 2, |_| DelayedClaim { provision: Some(vec![Vec::new()]), ..claim("shared".into()) });
    let pods = &snapshot.gangs[0].pods;
    let placed = [
        (&pods[0].key, pods[0].constraints.delayed.as_slice(), &snapshot.nodes[0]),
        (&pods[1].key, pods[1].constraints.delayed.as_slice(), &snapshot.nodes[2]),
    ];
    let writes = plan(placed, &mut Vec::new());
    assert_eq!(writes[0].choice, Ok(VolumeChoice::Provision));
    assert!(
        writes[1].choice.as_ref().is_err_and(|e| e.to_string().contains("used by pods placed on n1 and n3")),
        "{writes:?}"
    );
    // On one node, it is given once.
    let placed = [
        (&pods[0].key, pods[0].constraints.delayed.as_slice(), &snapshot.nodes[0]),
        (&pods[1].key, pods[1].constraints.delayed.as_slice(), &snapshot.nodes[0]),
    ];
    assert_eq!(plan(placed, &mut Vec::new()).len(), 1);
}
