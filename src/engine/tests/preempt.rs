//! Cycles that evict: reclaim of the newest whole gang, a queue within its share left
//! alone, priority that never crosses queues, surplus pods before cores, minimum runtimes,
//! and reservations that carry the freed capacity to the next cycle.

use crate::engine::build::{GPU, SnapshotBuilder};
use crate::engine::model::{GangKey, PodKey, Reservation, Snapshot};
use crate::engine::{CycleConfig, CycleOutcome, schedule};

const G: &str = GPU;

fn pod(name: &str) -> PodKey {
    PodKey { namespace: "default".into(), name: name.into() }
}

/// Evictions as `victim pods (reason for preemptor)`, placements as `name -> nodes`,
/// waiting gangs as `name waits: reason`.
pub(super) fn run(snapshot: &Snapshot) -> (Vec<String>, CycleOutcome) {
    let outcome = schedule(snapshot, &CycleConfig::default());
    let mut lines = Vec::new();
    for e in &outcome.evictions {
        let pods: Vec<&str> = e.pods.iter().map(|p| p.name.as_str()).collect();
        let whole = if e.whole { "whole" } else { "part" };
        lines.push(format!(
            "evict {} {whole} [{}] ({} for {})",
            e.gang.name,
            pods.join(" "),
            e.reason.as_str(),
            e.preemptor.name
        ));
    }
    for p in &outcome.placements {
        let nodes: Vec<&str> = p.pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.as_str()).collect();
        lines.push(format!("{} -> {}", p.gang.name, nodes.join(" ")));
    }
    for w in &outcome.waiting {
        lines.push(format!("{} waits: {w}", w.gang.name));
    }
    (lines, outcome)
}

/// Two 8-GPU nodes and two queues with quota 8 each.
pub(super) fn two_teams() -> SnapshotBuilder {
    SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .queue("a", "", &[(G, 8, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 8, 1, None, None)], |_| {})
        .at(10_000)
}

#[test]
fn reclaim_takes_the_newest_whole_gang_of_the_queue_over_its_share() {
    let snapshot = two_teams()
        .running("a-old", "a", "n1", 2, &[(G, 4)], 100)
        .running("a-new", "a", "n2", 2, &[(G, 4)], 200)
        .gang("b-job", 2, 2, &[(G, 4)])
        .in_queue("b")
        .build();
    let (lines, outcome) = run(&snapshot);
    assert_eq!(lines[0], "evict a-new whole [a-new-0 a-new-1] (Reclaimed for b-job)");
    assert!(
        lines[1].starts_with("b-job waits: 0/2 nodes are available")
            && lines[1].contains("evicting 2 pod(s) of gang default/a-new (Reclaimed) to make room"),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        outcome.reservations,
        vec![Reservation {
            gang: snapshot.gangs[0].key.clone(),
            nodes: vec!["n2".into()],
            pods: vec![(pod("b-job-0"), "n2".into()), (pod("b-job-1"), "n2".into())],
            until: 10_000 + 90
        }]
    );
}

#[test]
fn a_queue_within_its_share_is_never_reclaimed_and_the_gang_says_its_queue_is_at_its_share() {
    // a and b each run their quota; b wants more.
    let snapshot = two_teams()
        .running("a-1", "a", "n1", 2, &[(G, 4)], 100)
        .running("b-1", "b", "n2", 2, &[(G, 4)], 100)
        .gang("b-more", 1, 1, &[(G, 4)])
        .in_queue("b")
        .build();
    let (lines, outcome) = run(&snapshot);
    assert!(outcome.evictions.is_empty());
    assert!(
        lines[0].ends_with(
            "queue b has reached its fair share of 8 nvidia.com/gpu (8 allocated, the gang needs 4); it waits for free capacity"
        ),
        "{lines:?}"
    );
}

#[test]
fn priority_preempts_inside_a_queue_and_never_across_queues() {
    // a runs within quota at low priority; b's own low-priority gang is the one preempted.
    let snapshot = two_teams()
        .running("a-low", "a", "n1", 2, &[(G, 4)], 100)
        .running("b-low", "b", "n2", 2, &[(G, 4)], 100)
        .gang("b-urgent", 2, 2, &[(G, 4)])
        .in_queue("b")
        .with_last_gang(|g| g.priority = 50)
        .build();
    let (lines, _) = run(&snapshot);
    assert_eq!(lines[0], "evict b-low whole [b-low-0 b-low-1] (Preempted for b-urgent)");
    assert_eq!(lines.len(), 2, "{lines:?}");
}

#[test]
fn an_elastic_gang_gives_up_one_surplus_pod_and_keeps_its_core() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .queue("a", "", &[(G, 0, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 8, 1, None, None)], |_| {})
        .at(10_000)
        .running("elastic", "a", "n1", 4, &[(G, 2)], 100)
        .with_last_running(|r| r.min_member = 2)
        .gang("b-small", 1, 1, &[(G, 2)])
        .in_queue("b")
        .build();
    let (lines, _) = run(&snapshot);
    assert_eq!(lines[0], "evict elastic part [elastic-3] (Reclaimed for b-small)");
}

#[test]
fn a_young_gang_is_protected_by_its_queues_minimum_runtime() {
    let snapshot = two_teams()
        .queue("c", "", &[(G, 0, 1, None, None)], |q| q.preemption.reclaim_min_runtime = Some(600))
        .running("young", "c", "n1", 2, &[(G, 4)], 9_900)
        .running("a-own", "a", "n2", 2, &[(G, 4)], 100)
        .gang("b-job", 2, 2, &[(G, 4)])
        .in_queue("b")
        .build();
    let (lines, outcome) = run(&snapshot);
    assert!(outcome.evictions.is_empty(), "{lines:?}");
    assert!(
        lines[0].ends_with(
            "the gangs that could make room are protected by their minimum runtime until 1970-01-01T02:55:00Z"
        ),
        "{lines:?}"
    );
}

#[test]
fn a_gang_in_its_preemption_delay_evicts_nobody() {
    let snapshot = two_teams()
        .queue("c", "", &[(G, 0, 1, None, None)], |_| {})
        .running("c-1", "c", "n1", 2, &[(G, 4)], 100)
        .running("c-2", "c", "n2", 2, &[(G, 4)], 100)
        .gang("b-job", 2, 2, &[(G, 4)])
        .in_queue("b")
        .with_last_gang(|g| g.created = 9_990)
        .build();
    let mut config = CycleConfig::default();
    config.preemption.preemption_delay = 60;
    let outcome = schedule(&snapshot, &config);
    assert!(outcome.evictions.is_empty());
    assert!(outcome.waiting[0].to_string().ends_with("in its preemption delay until 1970-01-01T02:47:30Z"));
}

#[test]
fn a_gangs_own_delay_wins_and_counts_from_its_last_eviction() {
    let base = || {
        SnapshotBuilder::new()
            .gpu_node("n1", 64, 512, 8, &[])
            .gpu_node("n2", 64, 512, 8, &[])
            .queue("b", "", &[(G, 8, 1, None, None)], |q| q.preemption.preemption_delay = Some(600))
            .queue("c", "", &[(G, 0, 1, None, None)], |_| {})
            .at(10_000)
            .running("c-1", "c", "n1", 2, &[(G, 4)], 100)
            .running("c-2", "c", "n2", 2, &[(G, 4)], 100)
            .gang("b-job", 2, 2, &[(G, 4)])
            .in_queue("b")
            .with_last_gang(|g| g.created = 9_000)
    };
    // Created at 9,000: its queue's 10 minutes have passed; its own 20 hold it until 10,200.
    let outcome = schedule(&base().build(), &CycleConfig::default());
    assert_eq!(outcome.evictions.len(), 1);
    let outcome =
        schedule(&base().with_last_gang(|g| g.preemption_delay = Some(1_200)).build(), &CycleConfig::default());
    assert!(outcome.evictions.is_empty());
    assert!(outcome.waiting[0].to_string().ends_with("in its preemption delay until 1970-01-01T02:50:00Z"));
    // Created at 9,900, its queue's delay would hold it; its own zero wins.
    let young = || base().with_last_gang(|g| g.created = 9_900);
    assert!(schedule(&young().build(), &CycleConfig::default()).evictions.is_empty());
    let zero = young().with_last_gang(|g| g.preemption_delay = Some(0)).build();
    assert_eq!(schedule(&zero, &CycleConfig::default()).evictions.len(), 1);
    // Evicted at 9,900, a 5-minute delay runs again from then.
    let evicted = base()
        .with_last_gang(|g| {
            g.preemption_delay = Some(300);
            g.last_evicted = Some(9_900);
        })
        .build();
    let outcome = schedule(&evicted, &CycleConfig::default());
    assert!(outcome.evictions.is_empty());
    assert!(outcome.waiting[0].to_string().ends_with("in its preemption delay until 1970-01-01T02:50:00Z"));
}

#[test]
fn the_cap_on_gangs_evicted_per_cycle_is_never_passed() {
    // b is owed all 16 GPUs, which two gangs of a hold; room for b-job takes both.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .queue("a", "", &[(G, 0, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 16, 1, None, None)], |_| {})
        .at(10_000)
        .running("a-1", "a", "n1", 2, &[(G, 4)], 100)
        .running("a-2", "a", "n2", 2, &[(G, 4)], 200)
        .gang("b-job", 2, 2, &[(G, 8)])
        .in_queue("b")
        .build();
    let mut config = CycleConfig::default();
    assert_eq!(schedule(&snapshot, &config).evictions.len(), 2);
    config.preemption.max_evicted_gangs = 1;
    let outcome = schedule(&snapshot, &config);
    assert!(outcome.evictions.is_empty(), "{:?}", outcome.evictions);
    config.preemption.max_evicted_gangs = 2;
    assert_eq!(schedule(&snapshot, &config).evictions.len(), 2);
}

#[test]
fn a_victims_reclaim_min_runtime_is_read_below_the_common_ancestor_or_from_its_own_queue() {
    // The victim's leaf org/a sets an hour; org, below the common ancestor (the top), sets none.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .queue("org", "", &[(G, 0, 1, None, None)], |_| {})
        .queue("a", "org", &[(G, 0, 1, None, None)], |q| q.preemption.reclaim_min_runtime = Some(3_600))
        .queue("b", "", &[(G, 8, 1, None, None)], |_| {})
        .at(10_000)
        .running("a-job", "a", "n1", 2, &[(G, 4)], 9_000)
        .gang("b-job", 2, 2, &[(G, 4)])
        .in_queue("b")
        .build();
    let mut config = CycleConfig::default();
    assert_eq!(schedule(&snapshot, &config).evictions.len(), 1);
    config.preemption.reclaim_min_runtime_from_leaf = true;
    let outcome = schedule(&snapshot, &config);
    assert!(outcome.evictions.is_empty());
    let reason = outcome.waiting[0].to_string();
    assert!(reason.contains("protected by their minimum runtime until 1970-01-01T03:30:00Z"), "{reason}");
}

#[test]
fn a_gang_that_must_borrow_preempts_lower_priority_gangs_over_quota_only_when_its_queue_allows() {
    // a holds 12 of its quota of 4; b holds 4 of 8 and its gang of 8 GPUs would take it to
    // 12: past its fair share of 10, so no reclaim; its own gang b-1 frees too little.
    let snapshot = |policy: Option<Option<i32>>| {
        SnapshotBuilder::new()
            .gpu_node("n1", 64, 512, 8, &[])
            .gpu_node("n2", 64, 512, 8, &[])
            .queue("a", "", &[(G, 4, 1, None, None)], |_| {})
            .queue("b", "", &[(G, 8, 1, None, None)], |q| q.preemption.borrow_within_parent = policy)
            .at(10_000)
            .running("a-1", "a", "n1", 2, &[(G, 4)], 100)
            .running("a-2", "a", "n2", 1, &[(G, 4)], 200)
            .running("b-1", "b", "n2", 1, &[(G, 4)], 300)
            .gang("b-job", 2, 2, &[(G, 4)])
            .in_queue("b")
            .with_last_gang(|g| g.priority = 100)
            .build()
    };
    let (_, never) = run(&snapshot(None));
    assert!(never.evictions.is_empty(), "{:?}", never.evictions);
    let (lines, _) = run(&snapshot(Some(None)));
    assert_eq!(lines[0], "evict a-1 whole [a-1-0 a-1-1] (Preempted for b-job)");
    // A threshold below the victims' priority protects them.
    let (_, capped) = run(&snapshot(Some(Some(-1))));
    assert!(capped.evictions.is_empty(), "{:?}", capped.evictions);
}

#[test]
fn non_preemptible_gangs_and_unreclaimable_queues_are_not_victims() {
    let snapshot = two_teams()
        .queue("c", "", &[(G, 0, 1, None, None)], |q| q.preemption.not_reclaimable = true)
        .running("kept", "c", "n1", 2, &[(G, 4)], 100)
        .running("vital", "a", "n2", 2, &[(G, 4)], 100)
        .with_last_running(|r| r.preemptible = false)
        .gang("b-job", 2, 2, &[(G, 4)])
        .in_queue("b")
        .build();
    let (lines, outcome) = run(&snapshot);
    assert!(outcome.evictions.is_empty(), "{lines:?}");
}

#[test]
fn only_as_many_gangs_as_needed_are_evicted() {
    // Four 1-node gangs of a over two nodes; b needs one node's worth.
    let snapshot = two_teams()
        .running("a-1", "a", "n1", 1, &[(G, 4)], 100)
        .running("a-2", "a", "n1", 1, &[(G, 4)], 200)
        .running("a-3", "a", "n2", 1, &[(G, 4)], 300)
        .running("a-4", "a", "n2", 1, &[(G, 4)], 400)
        .gang("b-job", 1, 1, &[(G, 8)])
        .in_queue("b")
        .build();
    let (lines, _) = run(&snapshot);
    // The newest (a-4) alone frees no whole node; a-3 with it does.
    assert_eq!(lines[0], "evict a-3 whole [a-3-0] (Reclaimed for b-job)");
    assert_eq!(lines[1], "evict a-4 whole [a-4-0] (Reclaimed for b-job)");
    assert_eq!(lines.len(), 3, "{lines:?}");
}

#[test]
fn a_reservation_keeps_the_freed_nodes_for_its_gang_in_the_next_cycle() {
    // The next cycle: the victims are gone and recreated as a pending gang of a; b-job
    // holds n2 and is placed there first, before a's older gang can take it back.
    let gang = |name: &str| GangKey {
        kind: crate::engine::model::GangKind::Muster,
        namespace: "default".into(),
        name: name.into(),
    };
    let mut snapshot = two_teams()
        .running("a-old", "a", "n1", 2, &[(G, 4)], 100)
        .gang("a-new", 2, 2, &[(G, 4)])
        .in_queue("a")
        .with_last_gang(|g| g.created = 50)
        .gang("b-job", 2, 2, &[(G, 4)])
        .in_queue("b")
        .with_last_gang(|g| g.created = 9_000)
        .build();
    snapshot.reservations = vec![Reservation {
        gang: gang("b-job"),
        nodes: vec!["n2".into()],
        pods: vec![(pod("b-job-0"), "n2".into()), (pod("b-job-1"), "n2".into())],
        until: 10_090,
    }];
    let (lines, outcome) = run(&snapshot);
    assert_eq!(lines[0], "b-job -> n2 n2", "{lines:?}");
    assert!(outcome.evictions.is_empty(), "a does not reclaim it back: {lines:?}");
    assert!(outcome.reservations.is_empty());
    // While the victims are still there, the nodes stay held and nobody else gets them.
    let mut busy = snapshot.clone();
    std::sync::Arc::make_mut(&mut busy.nodes)[1].requested.add(&busy.gangs[1].pods[0].demand, 2);
    busy.gangs.swap(0, 1);
    let (lines, outcome) = run(&busy);
    assert!(
        lines.iter().any(|l| l.starts_with("b-job waits") && l.contains("waiting for evicted pods to exit")),
        "{lines:?}"
    );
    assert_eq!(outcome.reservations, busy.reservations);
    assert!(outcome.evictions.is_empty(), "{lines:?}");
}

#[test]
fn gangs_nobody_queued_do_not_preempt_each_other_until_a_default_queue_asks_for_it() {
    let build = |default_object: bool| {
        let mut builder = SnapshotBuilder::new()
            .gpu_node("n1", 64, 512, 8, &[])
            .queue("team", "", &[(G, 0, 1, None, None)], |_| {})
            .at(10_000);
        if default_object {
            builder = builder.queue("default", "", &[(G, 0, 1, None, None)], |_| {});
        }
        builder
            .running("low", "default", "n1", 1, &[(G, 8)], 100)
            .gang("high", 1, 1, &[(G, 8)])
            .with_last_gang(|g| g.priority = 50)
            .build()
    };
    assert!(run(&build(false)).1.evictions.is_empty());
    assert_eq!(run(&build(true)).0[0], "evict low whole [low-0] (Preempted for high)");
}

#[test]
fn a_reservation_places_the_very_pods_its_trial_placed() {
    // The trial placed only b-job-1 (the gang needs one): that pod goes, not b-job-0.
    let mut snapshot = two_teams().gang("b-job", 1, 2, &[(G, 8)]).in_queue("b").build();
    snapshot.reservations = vec![Reservation {
        gang: snapshot.gangs[0].key.clone(),
        nodes: vec!["n2".into()],
        pods: vec![(pod("b-job-1"), "n2".into())],
        until: 10_090,
    }];
    let outcome = schedule(&snapshot, &CycleConfig::default());
    let placed: Vec<(&str, u32)> = outcome.placements[0].pods.iter().map(|(k, n)| (k.name.as_str(), *n)).collect();
    assert_eq!(placed, [("b-job-1", 1)]);
}

#[test]
fn what_a_whole_victim_frees_beyond_the_gang_stays_held_until_the_victims_are_gone() {
    // b reclaims a-new whole (8 GPUs on n2) for a 4-GPU pod: the other 4 stay with the
    // exiting pods in this cycle, so c's pod is not bound where its kubelet would refuse it.
    let snapshot = two_teams()
        .queue("c", "", &[(G, 0, 1, None, None)], |_| {})
        .running("a-old", "a", "n1", 2, &[(G, 4)], 100)
        .running("a-new", "a", "n2", 2, &[(G, 4)], 200)
        .gang("b-job", 1, 1, &[(G, 4)])
        .in_queue("b")
        .gang("c-job", 1, 1, &[(G, 4)])
        .in_queue("c")
        .build();
    let (lines, outcome) = run(&snapshot);
    assert_eq!(lines[0], "evict a-new whole [a-new-0 a-new-1] (Reclaimed for b-job)");
    assert!(outcome.placements.is_empty(), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("c-job waits: 0/2 nodes are available")), "{lines:?}");
}

#[test]
fn a_gang_within_its_queues_share_goes_before_one_that_would_pass_its_own() {
    // Fair shares are 4 and 4. a's head gang (8 GPUs) puts a behind b in queue order, and
    // b's 6-GPU gang would pass b's share: placed first, it would take the GPUs a-small is
    // owed and be reclaimed by it in the next cycle. It goes after every gang within its
    // queue's share instead, and a-small runs.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .queue("a", "", &[(G, 0, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 0, 1, None, None)], |_| {})
        .at(10_000)
        .gang("a-big", 1, 1, &[(G, 8)])
        .in_queue("a")
        .gang("b-mid", 1, 1, &[(G, 6)])
        .in_queue("b")
        .with_last_gang(|g| g.created = 10)
        .gang("a-small", 1, 1, &[(G, 4)])
        .in_queue("a")
        .with_last_gang(|g| g.created = 50)
        .build();
    let (lines, outcome) = run(&snapshot);
    assert_eq!(lines[0], "a-small -> n1", "{lines:?}");
    assert_eq!(outcome.placements.len(), 1, "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("b-mid waits: ")), "{lines:?}");
}

/// n1 holds `a-low` (one 4-GPU pod of queue a, priority 0) and 4 free GPUs; b runs 8 GPUs
/// on n2 and wants 8 more. With quotas 4 and 8 the fair shares are 6 and 10.
fn a_wants_more_than_its_share(a_quota: i64) -> Snapshot {
    SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .gpu_node("n2", 64, 512, 8, &[])
        .queue("a", "", &[(G, a_quota, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 8, 1, None, None)], |_| {})
        .at(10_000)
        .running("a-low", "a", "n1", 1, &[(G, 4)], 100)
        .running("b-run", "b", "n2", 2, &[(G, 4)], 100)
        .gang("a-urgent", 2, 2, &[(G, 4)])
        .in_queue("a")
        .with_last_gang(|g| g.priority = 50)
        .gang("b-more", 2, 2, &[(G, 4)])
        .in_queue("b")
        .build()
}

#[test]
fn preemption_inside_a_queue_swaps_what_it_holds_and_never_evicts_so_that_it_can_borrow() {
    // a-urgent would take a from 4 to 8 over its share of 6: evicting a-low for it would
    // make a borrower of it, reclaimable at once; it waits for free capacity instead.
    let (lines, outcome) = run(&a_wants_more_than_its_share(4));
    assert!(outcome.evictions.is_empty(), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("a-urgent waits")
            && l.ends_with("queue a has reached its fair share of 6 nvidia.com/gpu (4 allocated, the gang needs 8); it waits for free capacity")),
        "{lines:?}"
    );
    // With a quota of 8 the swap stays within a's share: a-low goes.
    let (lines, _) = run(&a_wants_more_than_its_share(8));
    assert_eq!(lines[0], "evict a-low whole [a-low-0] (Preempted for a-urgent)");
}

#[test]
fn a_gang_evicted_recently_takes_only_what_its_queue_is_owed() {
    // n1 is free. a-back (a's share is 6, it needs 8) was evicted a minute ago: borrowing
    // now, it would be the first gang reclaimed again. b's gang borrows n1 instead.
    let snapshot = |evicted: i64| {
        SnapshotBuilder::new()
            .gpu_node("n1", 64, 512, 8, &[])
            .gpu_node("n2", 64, 512, 8, &[])
            .queue("a", "", &[(G, 4, 1, None, None)], |_| {})
            .queue("b", "", &[(G, 8, 1, None, None)], |_| {})
            .at(10_000)
            .running("b-run", "b", "n2", 2, &[(G, 4)], 100)
            .gang("a-back", 2, 2, &[(G, 4)])
            .in_queue("a")
            .with_last_gang(|g| g.last_evicted = Some(evicted))
            .gang("b-more", 2, 2, &[(G, 4)])
            .in_queue("b")
            .build()
    };
    let (lines, _) = run(&snapshot(9_940));
    assert_eq!(lines[0], "b-more -> n1 n1");
    assert_eq!(
        lines[1],
        "a-back waits: it was evicted recently: until 1970-01-01T02:55:40Z it takes only what queue a is owed \
         (its fair share), not borrowed capacity it would be evicted from again"
    );
    // Ten minutes on (preemption.borrowAfterEviction), it borrows like any gang, first in
    // queue order.
    let (lines, _) = run(&snapshot(9_000));
    assert_eq!(lines[0], "a-back -> n1 n1", "{lines:?}");
}
