//! Timed backfill in the pure engine: the oldest gang that does not fit gets the earliest
//! time the running pods' runtime bounds let it start (its shadow time); later gangs start
//! now only around what is held for it, or in it when their own bound ends first.

use muster::engine::build::{GPU, SnapshotBuilder};
use muster::engine::reason::WaitReason;
use muster::engine::{CycleConfig, Queueing, schedule};

use crate::backfill::*;

fn timed() -> CycleConfig {
    CycleConfig { queueing: Queueing::TimedBackfill, reserve_after_seconds: 0, ..CycleConfig::default() }
}

#[test]
fn the_oldest_gang_that_does_not_fit_is_told_when_it_is_expected_to_start() {
    let snapshot = busy().build();
    let outcome = schedule(&snapshot, &timed());
    assert!(
        matches!(reason(&outcome, "big"), Some(WaitReason::Reserved { shadow: 7200, .. })),
        "{:?}",
        reason(&outcome, "big")
    );
    assert!(message(&outcome, "big").ends_with("capacity is held for it, expected to be enough in 2 h"));
}

#[test]
fn a_job_whose_bound_ends_before_the_shadow_time_starts_now_in_held_capacity() {
    let snapshot = busy().gang("short", 1, 1, &gpus(4)).bounded(3000).build();
    let outcome = schedule(&snapshot, &timed());
    let nodes = nodes_of(&snapshot, &outcome, "short");
    assert_eq!(nodes.len(), 1, "{:?}", outcome.waiting);
    assert!(nodes[0] == "n1" || nodes[0] == "n2", "only the held nodes have 4 GPUs free: {nodes:?}");
}

#[test]
fn a_job_that_would_overlap_the_shadow_time_waits_with_the_reservation_named() {
    let snapshot = busy().gang("long", 1, 1, &gpus(4)).bounded(9000).build();
    let outcome = schedule(&snapshot, &timed());
    assert!(nodes_of(&snapshot, &outcome, "long").is_empty());
    assert_eq!(message(&outcome, "long"), "would delay the reservation of gang default/big (expected to start in 2 h)");
}

#[test]
fn a_gang_with_an_unknown_bound_never_delays_a_reservation_but_fills_what_is_not_held() {
    let snapshot = busy().gang("unknown", 1, 1, &gpus(4)).gang("small", 1, 1, &gpus(2)).build();
    let outcome = schedule(&snapshot, &timed());
    assert!(nodes_of(&snapshot, &outcome, "unknown").is_empty());
    assert!(matches!(reason(&outcome, "unknown"), Some(WaitReason::DelaysReservation { shadow: 7200, .. })));
    let small = nodes_of(&snapshot, &outcome, "small");
    assert!(small == ["n3"] || small == ["n4"], "outside the held capacity: {small:?}");
}

#[test]
fn a_short_job_too_wide_even_for_the_held_capacity_waits_as_any_other() {
    // No node has 6 GPUs free, held or not: it does not fit, whatever its bound.
    let snapshot = busy().gang("wide", 1, 1, &gpus(6)).bounded(1000).build();
    let outcome = schedule(&snapshot, &timed());
    assert!(nodes_of(&snapshot, &outcome, "wide").is_empty());
    assert!(matches!(reason(&outcome, "wide"), Some(WaitReason::DoesNotFit { .. })), "{:?}", reason(&outcome, "wide"));
}

/// A running pod in the replay: its node, GPUs and when it ends (None: never, as far as
/// the scheduler knows).
#[derive(Clone, Debug)]
struct Run {
    node: &'static str,
    gpus: i64,
    ends: Option<i64>,
}

/// Replays the busy cluster through time: at each step the pods that ended are gone, the
/// pending jobs are offered to one cycle, and what it places runs for its bound. Small jobs
/// keep arriving (some short, some long, some unbounded). Returns when `big` started and
/// the shadow time it was first given.
fn replay(config: CycleConfig) -> (Option<i64>, Option<i64>) {
    let nodes = ["n1", "n2", "n3", "n4"];
    let mut running = vec![
        Run { node: "n1", gpus: 4, ends: Some(3600) },
        Run { node: "n2", gpus: 4, ends: Some(7200) },
        Run { node: "n3", gpus: 6, ends: None },
        Run { node: "n4", gpus: 6, ends: None },
    ];
    // Pending: name, pods, GPUs per pod, bound.
    let mut pending: Vec<(String, usize, i64, Option<i64>)> = vec![("big".into(), 2, 8, None)];
    let (mut started, mut first_shadow) = (None, None);
    let mut now = 0;
    for step in 0..40 {
        // Every step, three small jobs arrive behind the big gang.
        for (k, bound) in [(0, Some(1200)), (1, Some(20_000)), (2, None)] {
            pending.push((format!("small-{step}-{k}"), 1, 2 + k as i64, bound));
        }
        running.retain(|r| r.ends.is_none_or(|end| end > now));
        let mut builder = SnapshotBuilder::new();
        for node in nodes {
            builder = builder.gpu_node(node, 64, 512, 8, &[]);
        }
        for run in &running {
            builder = match run.ends {
                Some(end) => builder.ending(run.node, &gpus(run.gpus), end),
                None => builder.used(run.node, &[(GPU, run.gpus), ("cpu", 1000)]),
            };
        }
        for (name, pods, each, bound) in &pending {
            builder = builder.gang(name, *pods, *pods, &gpus(*each));
            if let Some(bound) = bound {
                builder = builder.bounded(*bound);
            }
        }
        let snapshot = builder.at(now).build();
        let outcome = schedule(&snapshot, &config);
        if let Some(WaitReason::Reserved { shadow, .. }) = reason(&outcome, "big") {
            first_shadow.get_or_insert(*shadow);
        }
        for placement in &outcome.placements {
            let Some(at) = pending.iter().position(|(name, ..)| *name == placement.gang.name) else { continue };
            let (name, _, each, bound) = pending.remove(at);
            if name == "big" {
                started = Some(now);
            }
            for (_, node) in &placement.pods {
                let node = nodes[*node as usize];
                running.push(Run { node, gpus: each, ends: bound.map(|b| now + b) });
            }
        }
        if started.is_some() {
            break;
        }
        // The next moment anything ends, or ten minutes on.
        let next_end = running.iter().filter_map(|r| r.ends).filter(|&e| e > now).min();
        now = next_end.unwrap_or(now + 600).min(now + 600);
    }
    (started, first_shadow)
}

#[test]
fn the_reserved_gang_starts_no_later_than_its_shadow_time_while_small_jobs_keep_arriving() {
    let (started, shadow) = replay(timed());
    let (started, shadow) = (started.expect("big started"), shadow.expect("big had a shadow time"));
    assert_eq!(shadow, 7200);
    assert!(started <= shadow, "started at {started}, expected by {shadow}");
    // Without a reservation the unbounded small jobs take what frees and it never starts.
    let (never, _) = replay(CycleConfig { queueing: Queueing::BestEffortFifo, ..timed() });
    assert_eq!(never, None, "BestEffortFIFO lets the stream of small jobs starve it");
}
