//! Opportunistic backfill in the pure engine: a preemptible gang that opted in runs in
//! capacity held for a reservation (TimedBackfill's held capacity, Backfill's nodes) though
//! its runtime bound is long or unknown, and is evicted whole as soon as the reserved gang
//! can start in its place, and not before.

use muster::engine::build::{GPU, SnapshotBuilder};
use muster::engine::model::GangKey;
use muster::engine::preempt::{EvictionReason, Room};
use muster::engine::reason::WaitReason;
use muster::engine::{CycleConfig, CycleOutcome, Queueing, schedule};

use crate::backfill::*;

fn timed(opportunistic: bool) -> CycleConfig {
    CycleConfig {
        queueing: Queueing::TimedBackfill,
        reserve_after_seconds: 0,
        opportunistic_backfill: opportunistic,
        ..CycleConfig::default()
    }
}

fn backfill(opportunistic: bool) -> CycleConfig {
    CycleConfig { queueing: Queueing::Backfill, ..timed(opportunistic) }
}

fn key(name: &str) -> GangKey {
    GangKey { kind: muster::engine::model::GangKind::Muster, namespace: "default".into(), name: name.into() }
}

fn evicted(outcome: &CycleOutcome) -> Vec<(String, EvictionReason, String, bool)> {
    outcome.evictions.iter().map(|e| (e.gang.name.clone(), e.reason, e.preemptor.name.clone(), e.whole)).collect()
}

#[test]
fn an_opted_in_preemptible_gang_with_an_unknown_bound_runs_in_held_capacity_marked_for_the_reserved_gang() {
    // Two pods of 4 GPUs: only n1 and n2 have them free, and that is held for `big`.
    let snapshot = busy().gang("filler", 2, 2, &gpus(4)).build();
    let outcome = schedule(&snapshot, &timed(true));
    let mut nodes = nodes_of(&snapshot, &outcome, "filler");
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"], "{:?}", outcome.waiting);
    let placement = outcome.placements.iter().find(|p| p.gang.name == "filler").unwrap();
    assert_eq!(placement.opportunistic, Some(key("big")));
    // The reserved gang keeps its shadow time: the opportunistic gang leaves when it must.
    assert!(matches!(reason(&outcome, "big"), Some(WaitReason::Reserved { shadow: 7200, .. })), "{:?}", outcome);
    assert!(outcome.evictions.is_empty());
}

#[test]
fn a_long_bound_runs_opportunistically_too_and_a_short_one_is_placed_as_plain_backfill() {
    let snapshot =
        busy().gang("long", 1, 1, &gpus(4)).bounded(9000).gang("short", 1, 1, &gpus(4)).bounded(3000).build();
    let outcome = schedule(&snapshot, &timed(true));
    let long = outcome.placements.iter().find(|p| p.gang.name == "long").expect("long placed");
    assert_eq!(long.opportunistic.as_ref().map(|g| g.name.as_str()), Some("big"));
    // A gang that ends before the shadow time needs no eviction: it is no opportunist.
    let short = outcome.placements.iter().find(|p| p.gang.name == "short").expect("short placed");
    assert_eq!(short.opportunistic, None);
}

#[test]
fn without_the_opt_in_or_when_not_preemptible_it_waits_saying_it_would_delay_the_reservation() {
    let plain = busy().gang("filler", 1, 1, &gpus(4)).build();
    let outcome = schedule(&plain, &timed(false));
    assert!(nodes_of(&plain, &outcome, "filler").is_empty());
    assert!(matches!(reason(&outcome, "filler"), Some(WaitReason::DelaysReservation { shadow: 7200, .. })));

    let guarded = busy().gang("filler", 1, 1, &gpus(4)).with_last_gang(|g| g.preemptible = false).build();
    let outcome = schedule(&guarded, &timed(true));
    assert!(nodes_of(&guarded, &outcome, "filler").is_empty(), "a non-preemptible gang never runs opportunistically");
    assert_eq!(
        message(&outcome, "filler"),
        "would delay the reservation of gang default/big (expected to start in 2 h)"
    );
}

#[test]
fn a_queue_decides_for_its_gangs_before_the_configuration() {
    let with_queue = |opted: Option<bool>| {
        busy()
            .in_queue("team")
            .queue("team", "", &[], |q| q.opportunistic_backfill = opted)
            .gang("filler", 1, 1, &gpus(4))
            .in_queue("team")
            .build()
    };
    let snapshot = with_queue(Some(true));
    let outcome = schedule(&snapshot, &timed(false));
    assert_eq!(nodes_of(&snapshot, &outcome, "filler").len(), 1, "the queue opts in: {:?}", outcome.waiting);
    let snapshot = with_queue(Some(false));
    let outcome = schedule(&snapshot, &timed(true));
    assert!(nodes_of(&snapshot, &outcome, "filler").is_empty(), "the queue opts out");
    let snapshot = with_queue(None);
    let outcome = schedule(&snapshot, &timed(true));
    assert_eq!(nodes_of(&snapshot, &outcome, "filler").len(), 1, "unset: the configuration's");
}

/// The busy cluster later: what ended is gone, and `filler` (4 GPUs on n1) runs
/// opportunistically.
fn later(now: i64) -> SnapshotBuilder {
    let mut builder = four_nodes();
    if now < 7200 {
        builder = builder.ending("n2", &gpus(4), 7200);
    }
    builder
        .used("n3", &[(GPU, 6)])
        .used("n4", &[(GPU, 6)])
        .running("filler", "default", "n1", 1, &gpus(4), 100)
        .with_last_running(|r| r.opportunistic = true)
        .gang("big", 2, 2, &gpus(8))
        .at(now)
}

#[test]
fn the_opportunistic_gang_is_not_evicted_before_the_reserved_gang_could_start() {
    let snapshot = later(3600).build();
    let outcome = schedule(&snapshot, &timed(true));
    assert!(outcome.evictions.is_empty(), "n2 is busy until 7200: evicting now would gain nothing");
    assert!(matches!(reason(&outcome, "big"), Some(WaitReason::Reserved { shadow: 7200, .. })), "{:?}", outcome);
}

#[test]
fn it_is_evicted_whole_when_the_reserved_gang_can_start_and_the_gang_then_gets_its_nodes() {
    let snapshot = later(7200).build();
    let outcome = schedule(&snapshot, &timed(true));
    assert_eq!(evicted(&outcome), [("filler".to_string(), EvictionReason::Opportunistic, "big".to_string(), true)]);
    match reason(&outcome, "big") {
        Some(WaitReason::Room { room: Room::Evicting { reason: EvictionReason::Opportunistic, .. }, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(message(&outcome, "big").contains("evicting 1 pod(s) of gang default/filler (Opportunistic)"));
    let mut held = outcome.reservations[0].nodes.clone();
    held.sort();
    assert_eq!(held, ["n1", "n2"]);

    // The evicted pod gone, the reservation carried over: the gang starts on its nodes.
    let mut next =
        four_nodes().used("n3", &[(GPU, 6)]).used("n4", &[(GPU, 6)]).gang("big", 2, 2, &gpus(8)).at(7230).build();
    next.reservations = outcome.reservations.clone();
    let outcome = schedule(&next, &timed(true));
    let mut nodes = nodes_of(&next, &outcome, "big");
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
}

#[test]
fn a_non_preemptible_gang_marked_opportunistic_is_never_evicted_for_the_reservation() {
    let snapshot = later(7200).with_last_running(|r| r.preemptible = false).build();
    let outcome = schedule(&snapshot, &timed(true));
    assert!(outcome.evictions.is_empty());
    assert!(nodes_of(&snapshot, &outcome, "big").is_empty());
}

#[test]
fn only_as_many_opportunistic_gangs_as_the_reserved_gang_needs_are_evicted_the_least_disruptive_first() {
    // Three nodes, each half used by one opportunistic gang; the reserved gang needs one
    // whole node. The most recently started goes (the least work lost), unless its priority
    // is higher than the others'.
    let snapshot = |z_priority: i32| {
        SnapshotBuilder::new()
            .gpu_node("n1", 64, 512, 8, &[])
            .gpu_node("n2", 64, 512, 8, &[])
            .gpu_node("n3", 64, 512, 8, &[])
            .running("x", "default", "n1", 1, &gpus(4), 100)
            .with_last_running(|r| r.opportunistic = true)
            .running("y", "default", "n2", 1, &gpus(4), 200)
            .with_last_running(|r| r.opportunistic = true)
            .running("z", "default", "n3", 1, &gpus(4), 300)
            .with_last_running(|r| (r.opportunistic, r.priority) = (true, z_priority))
            .gang("big", 1, 1, &gpus(8))
            .at(1000)
            .build()
    };
    let gone = |outcome: &CycleOutcome| outcome.evictions.iter().map(|e| e.gang.name.clone()).collect::<Vec<_>>();
    assert_eq!(gone(&schedule(&snapshot(0), &timed(true))), ["z"]);
    assert_eq!(gone(&schedule(&snapshot(10), &timed(true))), ["y"]);
}

#[test]
fn under_backfill_an_opted_in_gang_runs_on_the_reserved_nodes_and_leaves_when_the_gang_fits() {
    // n1 and n2 each run 4 GPUs of a pod with no known end: `big` keeps both nodes.
    let waiting = || {
        SnapshotBuilder::new()
            .gpu_node("n1", 64, 512, 8, &[])
            .gpu_node("n2", 64, 512, 8, &[])
            .used("n1", &[(GPU, 4)])
            .used("n2", &[(GPU, 4)])
            .gang("big", 2, 2, &gpus(8))
            .gang("filler", 1, 1, &gpus(4))
    };
    let plain = waiting().build();
    let outcome = schedule(&plain, &backfill(false));
    assert!(nodes_of(&plain, &outcome, "filler").is_empty());
    assert!(
        message(&outcome, "filler").contains("node(s) reserved for an earlier gang"),
        "{}",
        message(&outcome, "filler")
    );

    let opted = waiting().build();
    let outcome = schedule(&opted, &backfill(true));
    assert_eq!(nodes_of(&opted, &outcome, "filler").len(), 1);
    let placement = outcome.placements.iter().find(|p| p.gang.name == "filler").unwrap();
    assert_eq!(placement.opportunistic, Some(key("big")));

    // Later the other pods ended; the filler runs on n1. The gang fits once it is gone.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .running("filler", "default", "n1", 1, &gpus(4), 100)
        .with_last_running(|r| r.opportunistic = true)
        .gang("big", 2, 2, &gpus(8))
        .at(5000)
        .build();
    let outcome = schedule(&snapshot, &backfill(true));
    assert_eq!(evicted(&outcome), [("filler".to_string(), EvictionReason::Opportunistic, "big".to_string(), true)]);
    // Still one pod elsewhere with no end: evicting would not let it start.
    let busy = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .used("n2", &[(GPU, 4)])
        .running("filler", "default", "n1", 1, &gpus(4), 100)
        .with_last_running(|r| r.opportunistic = true)
        .gang("big", 2, 2, &gpus(8))
        .at(5000)
        .build();
    let outcome = schedule(&busy, &backfill(true));
    assert!(outcome.evictions.is_empty(), "{:?}", outcome.evictions);
}

/// A running job in the replay: its node, GPUs, when it ends (None: unknown) and whether it
/// runs opportunistically.
#[derive(Clone, Debug)]
struct Run {
    name: String,
    node: &'static str,
    gpus: i64,
    ends: Option<i64>,
    opportunistic: bool,
}

#[test]
fn a_stream_of_unbounded_jobs_runs_in_held_capacity_and_the_reserved_gang_still_starts_by_its_shadow_time() {
    let nodes = ["n1", "n2", "n3", "n4"];
    let mut running = vec![
        Run { name: "a".into(), node: "n1", gpus: 4, ends: Some(3600), opportunistic: false },
        Run { name: "b".into(), node: "n2", gpus: 4, ends: Some(7200), opportunistic: false },
        Run { name: "c".into(), node: "n3", gpus: 6, ends: None, opportunistic: false },
        Run { name: "d".into(), node: "n4", gpus: 6, ends: None, opportunistic: false },
    ];
    let mut pending: Vec<(String, usize, i64)> = vec![("big".into(), 2, 8)];
    let (mut started, mut reservations, mut ran, mut evictions) = (None, Vec::new(), 0, 0);
    let mut now = 0;
    for step in 0..60 {
        // Unbounded 2-GPU jobs keep arriving behind the big gang.
        pending.push((format!("small-{step}"), 1, 2));
        running.retain(|r| r.ends.is_none_or(|end| end > now));
        let mut builder = four_nodes();
        for run in &running {
            builder = match (run.ends, run.opportunistic) {
                (_, true) => builder
                    .running(&run.name, "default", run.node, 1, &gpus(run.gpus), now)
                    .with_last_running(|r| r.opportunistic = true),
                (Some(end), false) => builder.ending(run.node, &gpus(run.gpus), end),
                (None, false) => builder.used(run.node, &[(GPU, run.gpus), ("cpu", 1000)]),
            };
        }
        for (name, pods, each) in &pending {
            builder = builder.gang(name, *pods, *pods, &gpus(*each));
        }
        let mut snapshot = builder.at(now).build();
        snapshot.reservations = std::mem::take(&mut reservations);
        let outcome = schedule(&snapshot, &timed(true));
        reservations = outcome.reservations.clone();
        for eviction in &outcome.evictions {
            assert_eq!(eviction.reason, EvictionReason::Opportunistic);
            assert!(eviction.whole);
            assert_eq!(eviction.preemptor.name, "big");
            running.retain(|r| r.name != eviction.gang.name);
            evictions += 1;
        }
        for placement in &outcome.placements {
            let Some(at) = pending.iter().position(|(name, ..)| *name == placement.gang.name) else { continue };
            let (name, _, each) = pending.remove(at);
            if name == "big" {
                started = Some(now);
            }
            ran += usize::from(placement.opportunistic.is_some());
            for (i, (_, node)) in placement.pods.iter().enumerate() {
                let node = nodes[*node as usize];
                let opportunistic = placement.opportunistic.is_some();
                running.push(Run { name: format!("{name}#{i}"), node, gpus: each, ends: None, opportunistic });
            }
        }
        if started.is_some() {
            break;
        }
        // The next moment anything ends, or ten minutes on; after evictions, once the
        // evicted pods are gone (their grace period).
        let next_end = running.iter().filter_map(|r| r.ends).filter(|&e| e > now).min();
        now = if outcome.evictions.is_empty() { next_end.unwrap_or(now + 600).min(now + 600) } else { now + 30 };
    }
    let started = started.expect("big started");
    assert!(started <= 7200 + 30, "started at {started}, expected at its shadow time 7200 and the victims' exit");
    assert!(ran > 0, "unbounded jobs used the held capacity meanwhile");
    assert!(evictions > 0, "and left when the reserved gang could start");
}

#[test]
fn a_second_reserved_gang_does_not_evict_what_the_first_counts_on() {
    // `mid` (one 8-GPU pod) would fit on n1 with `filler` gone now, but n1 is what `big`,
    // the first reservation, counts on at 7200.
    let snapshot = later(0).gang("mid", 1, 1, &gpus(8)).build();
    let outcome = schedule(&snapshot, &CycleConfig { backfill_depth: 2, ..timed(true) });
    assert!(outcome.evictions.is_empty(), "{:?}", outcome.evictions);
    assert!(matches!(reason(&outcome, "big"), Some(WaitReason::Reserved { shadow: 7200, .. })), "{:?}", outcome);
}
