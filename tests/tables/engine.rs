//! Data-driven tests of the pure engine: a snapshot in, placements and reasons out.

use muster::engine::build::{GIB, GPU, SnapshotBuilder};
use muster::engine::model::{Parked, Snapshot, Taint, TaintEffect, Toleration, TolerationOperator};
use muster::engine::reason::WaitReason;
use muster::engine::{CycleConfig, Queueing, Scoring, schedule};
use std::sync::Arc;

/// The outcome in words: `gang -> node, node, …` for placed gangs (nodes by pod order),
/// `gang waits: reason` for the others.
fn run(snapshot: &Snapshot, config: CycleConfig) -> Vec<String> {
    let outcome = schedule(snapshot, &config);
    let mut lines = Vec::new();
    for p in &outcome.placements {
        let mut pods = p.pods.clone();
        pods.sort();
        let nodes: Vec<&str> = pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.as_str()).collect();
        lines.push(format!("{} -> {}", p.gang.name, nodes.join(" ")));
    }
    for w in &outcome.waiting {
        lines.push(format!("{} waits: {w}", w.gang.name));
    }
    lines
}

fn check(snapshot: Snapshot, config: CycleConfig, expected: &[&str]) {
    assert_eq!(run(&snapshot, config), expected, "outcome differs");
}

fn default() -> CycleConfig {
    CycleConfig::default()
}

fn gpus(n: i64) -> [(&'static str, i64); 2] {
    [(GPU, n), ("cpu", 1000)]
}

#[test]
fn two_eight_gpu_jobs_on_eight_free_gpus_one_runs_whole_the_other_holds_nothing() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 32, 256, 4, &[])
        .gpu_node("n2", 32, 256, 4, &[])
        .gang("a", 8, 8, &gpus(1))
        .gang("b", 8, 8, &gpus(1))
        .build();
    check(
        snapshot,
        default(),
        &[
            "a -> n1 n1 n1 n1 n2 n2 n2 n2",
            "b waits: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu; gang default/b needs 8 pods at once, 0 fit",
        ],
    );
}

#[test]
fn a_gang_larger_than_the_cluster_says_it_can_never_fit_and_reserves_nothing() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 32, 256, 8, &[])
        .gang("huge", 2, 2, &gpus(16))
        .gang("small", 1, 1, &gpus(2))
        .build();
    check(
        snapshot,
        default(),
        &[
            "small -> n1",
            "huge waits: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu; gang default/huge needs 2 pods at once and only 0 would fit even on an empty cluster",
        ],
    );
}

#[test]
fn a_gang_spans_nodes_and_places_pods_beyond_min_member_when_they_fit() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .used("n2", &[(GPU, 4)])
        .gang("train", 2, 4, &gpus(4))
        .build();
    // Room for three 4-GPU pods: all three go, the fourth waits with the gang already whole.
    let outcome = schedule(&snapshot, &default());
    assert_eq!(outcome.placements.len(), 1);
    assert_eq!(outcome.placements[0].pods.len(), 3);
}

#[test]
fn bin_packing_fills_partly_used_nodes_and_spread_picks_the_emptiest() {
    let build = || {
        SnapshotBuilder::new()
            .gpu_node("empty", 64, 512, 8, &[])
            .gpu_node("half", 64, 512, 8, &[])
            .used("half", &[(GPU, 4), ("cpu", 8000)])
            .gpu_node("cpu-only", 64, 512, 0, &[])
            .gang("gpu-job", 1, 1, &gpus(2))
            .gang("cpu-job", 1, 1, &[("cpu", 2000)])
            .build()
    };
    check(build(), default(), &["gpu-job -> half", "cpu-job -> cpu-only"]);
    let spread = CycleConfig { scoring: Scoring::Spread, ..default() };
    // Pods without accelerators still go to nodes without accelerators first.
    check(build(), spread, &["gpu-job -> empty", "cpu-job -> cpu-only"]);
}

#[test]
fn filters_say_why_each_node_was_rejected() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("cordoned", 64, 512, 8, &[("pool", "a")])
        .with_last_node(|n| n.unschedulable = true)
        .gpu_node("tainted", 64, 512, 8, &[("pool", "a")])
        .with_last_node(|n| {
            std::sync::Arc::make_mut(&mut n.taints).push(Taint {
                key: "gpu".into(),
                value: "bad".into(),
                effect: TaintEffect::NoSchedule,
            })
        })
        .gpu_node("other-pool", 64, 512, 8, &[("pool", "b")])
        .gpu_node("small", 2, 4, 8, &[("pool", "a")])
        .gpu_node("busy", 64, 512, 8, &[("pool", "a")])
        .used("busy", &[(GPU, 8)])
        .gang("job", 1, 1, &[(GPU, 1), ("cpu", 4000), ("memory", 8 * GIB)])
        .with_last_gang(|g| {
            let c = Arc::make_mut(&mut g.pods[0].constraints);
            c.node_selector.push(("pool".into(), "a".into()));
        })
        .build();
    check(
        snapshot,
        default(),
        &[
            "job waits: 0/5 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {gpu: bad}, 1 node(s) were unschedulable",
        ],
    );
}

#[test]
fn tolerations_open_tainted_and_cordoned_nodes() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("tainted", 64, 512, 8, &[])
        .with_last_node(|n| {
            std::sync::Arc::make_mut(&mut n.taints).push(Taint {
                key: "gpu".into(),
                value: "bad".into(),
                effect: TaintEffect::NoSchedule,
            })
        })
        .gang("tolerant", 1, 1, &gpus(1))
        .with_last_gang(|g| {
            Arc::make_mut(&mut g.pods[0].constraints).tolerations.push(Toleration {
                key: "gpu".into(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            })
        })
        .build();
    check(snapshot, default(), &["tolerant -> tainted"]);
}

/// n1 and n2 have 4 GPUs free, n3 and n4 have 2: a gang of two 8-GPU pods waits for two
/// whole nodes, and six 1-GPU pods arrive behind it.
fn big_gang_then_small_pods() -> Snapshot {
    let mut builder = SnapshotBuilder::new();
    for (name, used) in [("n1", 4), ("n2", 4), ("n3", 6), ("n4", 6)] {
        builder = builder.gpu_node(name, 64, 512, 8, &[]).used(name, &[(GPU, used)]);
    }
    builder = builder.gang("big", 2, 2, &gpus(8));
    for i in 0..6 {
        builder = builder.gang(&format!("small-{i}"), 1, 1, &gpus(1));
    }
    builder.build()
}

fn placed(snapshot: &Snapshot, config: CycleConfig) -> Vec<String> {
    schedule(snapshot, &config).placements.iter().map(|p| p.gang.name.clone()).collect()
}

#[test]
fn backfill_keeps_the_nodes_closest_to_fitting_for_the_oldest_gang() {
    let snapshot = big_gang_then_small_pods();
    let outcome = schedule(&snapshot, &default());
    let nodes: Vec<&str> = outcome
        .placements
        .iter()
        .flat_map(|p| p.pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.as_str()))
        .collect();
    assert_eq!(nodes.len(), 4, "only the 4 GPUs outside the reservation are used: {nodes:?}");
    assert!(nodes.iter().all(|n| *n == "n3" || *n == "n4"), "small pods went into the reservation: {nodes:?}");
    let small_5 = outcome.waiting.iter().find(|w| w.gang.name == "small-5").expect("small-5 waits");
    assert!(small_5.to_string().contains("2 node(s) reserved for an earlier gang"), "{small_5}");
}

#[test]
fn best_effort_fifo_lets_small_pods_overtake_and_strict_fifo_places_nothing_behind() {
    let snapshot = big_gang_then_small_pods();
    let best_effort = CycleConfig { queueing: Queueing::BestEffortFifo, ..default() };
    assert_eq!(placed(&snapshot, best_effort).len(), 6);
    let strict = CycleConfig { queueing: Queueing::StrictFifo, ..default() };
    assert!(placed(&snapshot, strict).is_empty());
    let outcome = schedule(&snapshot, &strict);
    assert_eq!(
        outcome.waiting[1].to_string(),
        "waiting behind gang default/big, which does not fit yet (queueing StrictFIFO)"
    );
}

/// The big gang of `big_gang_then_small_pods`, parked by the caller's unschedulable pool.
fn with_big_parked(parked: Parked) -> Snapshot {
    let mut snapshot = big_gang_then_small_pods();
    snapshot.gangs[0].parked = parked;
    snapshot
}

#[test]
fn a_parked_gang_is_not_searched_but_keeps_its_place_and_its_backfill_reservation() {
    let waits = |snapshot: &Snapshot, config| {
        schedule(snapshot, &config).waiting.iter().find(|w| w.gang.name == "big").map(|w| w.reason.clone())
    };
    // Backfill: the reservation is made afresh each cycle, so the oldest gang is still
    // tried for it, and the small pods stay out of its nodes.
    let parked = with_big_parked(Parked::DidNotFit);
    assert_eq!(placed(&parked, default()).len(), 4);
    assert_ne!(waits(&parked, default()), Some(WaitReason::Unchanged));
    // StrictFIFO: it is not searched, and still holds its leaf.
    let strict = CycleConfig { queueing: Queueing::StrictFifo, ..default() };
    assert!(placed(&parked, strict).is_empty());
    assert_eq!(waits(&parked, strict), Some(WaitReason::Unchanged));
    // BestEffortFIFO: not searched; the others go.
    let best_effort = CycleConfig { queueing: Queueing::BestEffortFifo, ..default() };
    assert_eq!(placed(&parked, best_effort).len(), 6);
    assert_eq!(waits(&parked, best_effort), Some(WaitReason::Unchanged));
    // A gang that would never fit gets no reservation: not tried at all.
    let never = with_big_parked(Parked::NeverFits);
    assert_eq!(placed(&never, default()).len(), 6);
    assert_eq!(waits(&never, default()), Some(WaitReason::Unchanged));
}

#[test]
fn higher_priority_goes_first_then_older() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gang("old", 8, 8, &gpus(1))
        .gang("urgent", 8, 8, &gpus(1))
        .with_last_gang(|g| g.priority = 100)
        .build();
    let outcome = schedule(&snapshot, &default());
    assert_eq!(outcome.placements[0].gang.name, "urgent");
    assert_eq!(outcome.waiting[0].gang.name, "old");
}

#[test]
fn a_blocked_gang_waits_with_its_reason_and_blocks_nobody() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gang("orphan", 1, 1, &gpus(1))
        .with_last_gang(|g| g.blocked = Some("PodGroup default/missing does not exist".into()))
        .gang("fine", 1, 1, &gpus(1))
        .build();
    check(
        snapshot,
        CycleConfig { queueing: Queueing::StrictFifo, ..default() },
        &["fine -> n1", "orphan waits: PodGroup default/missing does not exist"],
    );
}

#[test]
fn a_gang_that_does_not_fit_leaves_capacity_to_the_next() {
    // "wide" fits 3 of its 4 pods: nothing of it may stay reserved for "narrow".
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .used("n2", &[(GPU, 4)])
        .gang("wide", 4, 4, &gpus(4))
        .gang("narrow", 2, 2, &gpus(4))
        .build();
    let best_effort = CycleConfig { queueing: Queueing::BestEffortFifo, ..default() };
    check(
        snapshot,
        best_effort,
        &["narrow -> n2 n1", "wide waits: 2/2 nodes are available; gang default/wide needs 4 pods at once, 3 fit"],
    );
}

#[test]
fn already_bound_pods_count_toward_min_member() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gang("resumed", 4, 2, &gpus(1))
        .with_last_gang(|g| g.bound = 2)
        .build();
    check(snapshot, default(), &["resumed -> n1 n1"]);
}

#[test]
fn the_same_snapshot_always_gives_the_same_outcome() {
    let snapshot = big_gang_then_small_pods();
    let first = schedule(&snapshot, &default());
    for _ in 0..5 {
        assert_eq!(schedule(&snapshot, &default()), first);
    }
}

#[test]
fn a_gang_that_has_its_minimum_waits_for_extra_pods_without_blocking_anyone() {
    // "whole" runs its 2 required pods; its 2 optional extras do not fit. Under StrictFIFO it
    // must not hold back "next", and it reserves nothing.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .used("n1", &[(GPU, 6)])
        .gang("whole", 2, 2, &gpus(8))
        .with_last_gang(|g| g.bound = 2)
        .gang("next", 1, 1, &gpus(2))
        .build();
    for queueing in [Queueing::StrictFifo, Queueing::Backfill] {
        let outcome = schedule(&snapshot, &CycleConfig { queueing, ..default() });
        assert_eq!(outcome.placements.len(), 1, "{queueing:?}: {outcome:?}");
        assert_eq!(outcome.placements[0].gang.name, "next");
    }
}

#[test]
fn a_gang_that_fits_only_by_mixing_shapes_is_not_called_hopeless() {
    // Needs 3 of its 4 pods: two 4-GPU pods and two 2-GPU pods on one 8-GPU node. No single
    // shape can give 3, together they can; the node is busy now, so it waits, hopefully.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .used("n1", &[(GPU, 8)])
        .gang("mixed", 3, 2, &gpus(4))
        .with_last_gang(|g| {
            let mut small = g.pods[0].clone();
            small.demand = muster::engine::resources::Demand::new(vec![
                (muster::engine::resources::ResourceId::PODS, 1),
                (muster::engine::resources::ResourceId(4), 2),
            ]);
            for i in 0..2 {
                let mut pod = small.clone();
                pod.key.name = format!("mixed-small-{i}");
                g.pods.push(pod);
            }
        })
        .build();
    let outcome = schedule(&snapshot, &default());
    let reason = outcome.waiting[0].to_string();
    assert!(reason.contains("needs 3 pods at once, 0 fit"), "{reason}");
    assert!(!reason.contains("even on an empty cluster"), "{reason}");
}

#[test]
fn a_gang_with_fewer_pods_than_min_member_waits_for_the_rest() {
    let snapshot = SnapshotBuilder::new().gpu_node("n1", 64, 512, 8, &[]).gang("partial", 4, 3, &gpus(1)).build();
    check(
        snapshot,
        default(),
        &[
            "partial waits: gang default/partial has 3 of the 4 pods its minMember needs; waiting for the rest to be created",
        ],
    );
}
