//! Cycles over snapshots with queues: shares, order between queues, and each admission rule
//! as the reason a person reads.

use crate::engine::admission::QueueState;
use crate::engine::build::{GPU, SnapshotBuilder};
use crate::engine::model::Snapshot;
use crate::engine::{CycleConfig, schedule};

const G: &str = GPU;

/// Placed gangs as `name -> nodes`, waiting ones as `name waits: reason`.
fn run(snapshot: &Snapshot) -> Vec<String> {
    let outcome = schedule(snapshot, &CycleConfig::default());
    let mut lines = Vec::new();
    for p in &outcome.placements {
        let nodes: Vec<&str> = p.pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.as_str()).collect();
        lines.push(format!("{} -> {}", p.gang.name, nodes.join(" ")));
    }
    for w in &outcome.waiting {
        lines.push(format!("{} waits: {w}", w.gang.name));
    }
    lines
}

fn two_nodes() -> SnapshotBuilder {
    SnapshotBuilder::new().gpu_node("n1", 64, 512, 8, &[]).gpu_node("n2", 64, 512, 8, &[])
}

/// The fair share of GPUs (queue amounts are in thousandths of a GPU), in whole GPUs.
fn share(snapshot: &Snapshot, queue: &str) -> i64 {
    let state = QueueState::of(snapshot);
    let q = snapshot.queues.get(queue).unwrap();
    let k = snapshot.queues.key_index(snapshot.resources.get(G).unwrap()).unwrap();
    assert_eq!(snapshot.queues.scale(k), 1000);
    state.fair_share[q][k] / 1000
}

#[test]
fn with_no_queue_objects_every_gang_is_in_the_implicit_default_and_placed_as_before() {
    // Even a gang that names a queue (a KAI label, say) is placed as before.
    let snapshot = two_nodes().gang("a", 2, 2, &[(G, 8)]).in_queue("kai-default").build();
    assert!(!snapshot.queues.is_configured());
    assert_eq!(run(&snapshot), vec!["a -> n1 n2"]);
}

#[test]
fn the_worked_example_two_queues_weights_one_to_three_share_six_and_ten() {
    let snapshot = two_nodes()
        .queue("a", "", &[(G, 4, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 4, 3, None, None)], |_| {})
        .gang("wa", 16, 16, &[(G, 1)])
        .in_queue("a")
        .gang("wb", 16, 16, &[(G, 1)])
        .in_queue("b")
        .build();
    assert_eq!((share(&snapshot, "a"), share(&snapshot, "b")), (6, 10));
}

#[test]
fn a_queue_within_its_quota_goes_before_an_older_gang_of_a_queue_beyond_it() {
    // a already runs 4 GPUs (its whole quota); its older gang waits for b's, which is
    // within b's quota.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .queue("a", "", &[(G, 4, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 4, 1, None, None)], |_| {})
        .running("a-running", "a", "n1", 1, &[(G, 4)], 0)
        .gang("a-second", 1, 1, &[(G, 4)])
        .in_queue("a")
        .with_last_gang(|g| g.created = 10)
        .gang("b-first", 1, 1, &[(G, 4)])
        .in_queue("b")
        .with_last_gang(|g| g.created = 20)
        .build();
    let lines = run(&snapshot);
    assert_eq!(lines[0], "b-first -> n1");
    assert!(
        lines[1].starts_with("a-second waits: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu"),
        "{lines:?}"
    );
}

#[test]
fn a_higher_priority_queue_is_served_first() {
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .queue("low", "", &[(G, 0, 1, None, None)], |_| {})
        .queue("high", "", &[(G, 0, 1, None, None)], |q| q.priority = 200)
        .gang("old", 1, 1, &[(G, 8)])
        .in_queue("low")
        .gang("new", 1, 1, &[(G, 8)])
        .in_queue("high")
        .with_last_gang(|g| g.created = 100)
        .build();
    assert_eq!(run(&snapshot)[0], "new -> n1");
}

#[test]
fn a_limit_holds_a_gang_back_and_caps_an_elastic_one() {
    let snapshot = two_nodes()
        .queue("capped", "", &[(G, 0, 1, Some(4), None)], |_| {})
        .gang("big", 2, 2, &[(G, 4)])
        .in_queue("capped")
        .gang("elastic", 1, 3, &[(G, 2)])
        .in_queue("capped")
        .with_last_gang(|g| g.created = 10)
        .build();
    assert_eq!(
        run(&snapshot),
        vec![
            "elastic -> n1 n1",
            "big waits: queue capped would exceed its limit of 4 nvidia.com/gpu (4 allocated, the gang needs 8)"
        ]
    );
}

#[test]
fn a_non_preemptible_gang_runs_only_within_quota() {
    let snapshot = two_nodes()
        .queue("team", "", &[(G, 2, 1, None, None)], |_| {})
        .gang("important", 1, 1, &[(G, 4)])
        .in_queue("team")
        .with_last_gang(|g| g.preemptible = false)
        .build();
    assert_eq!(
        run(&snapshot),
        vec![
            "important waits: a non-preemptible gang runs only within quota: queue team has 2 nvidia.com/gpu, \
             0 held by non-preemptible gangs, the gang needs 4"
        ]
    );
}

#[test]
fn idle_quota_that_a_sibling_does_not_lend_stays_free() {
    let build = |gpus: i64| {
        two_nodes()
            .queue("a", "", &[(G, 0, 1, None, None)], |_| {})
            .queue("b", "", &[(G, 8, 1, None, Some(2))], |_| {})
            .gang("want", 1, 1, &[(G, gpus)])
            .in_queue("a")
            .build()
    };
    // b keeps 6 of its 8 for itself: a may take 10 of the 16, not 12.
    assert_eq!(
        run(&build(12)),
        vec!["want waits: the free nvidia.com/gpu is quota its owners do not lend (b keeps 6 nvidia.com/gpu)"]
    );
    assert!(run(&build(10))[0].starts_with("want waits: 0/2 nodes"), "10 GPUs on two 8-GPU nodes do not fit one pod");
    let snapshot = two_nodes()
        .queue("a", "", &[(G, 0, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 8, 1, None, Some(2))], |_| {})
        .gang("want", 2, 2, &[(G, 5)])
        .in_queue("a")
        .build();
    assert_eq!(run(&snapshot), vec!["want -> n1 n2"]);
}

#[test]
fn gangs_in_a_missing_parent_stopped_or_foreign_queue_wait_with_that_reason() {
    let snapshot = two_nodes()
        .queue("org", "", &[], |_| {})
        .queue("leaf", "org", &[], |_| {})
        .queue("held", "", &[], |q| q.stopped = true)
        .queue("orphan", "gone", &[], |_| {})
        .queue("private", "", &[], |q| q.namespaces = Some(vec!["ml".into()]))
        .gang("to-org", 1, 1, &[(G, 1)])
        .in_queue("org")
        .gang("to-held", 1, 1, &[(G, 1)])
        .in_queue("held")
        .gang("to-orphan", 1, 1, &[(G, 1)])
        .in_queue("orphan")
        .gang("to-private", 1, 1, &[(G, 1)])
        .in_queue("private")
        .gang("to-nowhere", 1, 1, &[(G, 1)])
        .in_queue("nowhere")
        .gang("to-leaf", 1, 1, &[(G, 1)])
        .in_queue("leaf")
        .build();
    let lines = run(&snapshot);
    for expected in [
        "to-leaf -> n1",
        "to-org waits: queue org has child queues; only leaf queues take gangs",
        "to-held waits: queue held is stopped (stopPolicy); it admits no new gang",
        "to-orphan waits: queue orphan is invalid: its parent queue gone does not exist",
        "to-private waits: queue private does not admit namespace default (namespaceSelector)",
        "to-nowhere waits: queue nowhere does not exist",
    ] {
        assert!(lines.iter().any(|l| l == expected), "{expected:?} not in {lines:#?}");
    }
}

#[test]
fn a_hierarchy_divides_the_parents_share_among_its_children() {
    // org (quota 12) holds x and y (quota 6 and 0); z is org's sibling with quota 4.
    let snapshot = two_nodes()
        .queue("org", "", &[(G, 12, 1, None, None)], |_| {})
        .queue("x", "org", &[(G, 6, 1, None, None)], |_| {})
        .queue("y", "org", &[(G, 0, 1, None, None)], |_| {})
        .queue("z", "", &[(G, 4, 1, None, None)], |_| {})
        .gang("wx", 16, 16, &[(G, 1)])
        .in_queue("x")
        .gang("wy", 16, 16, &[(G, 1)])
        .in_queue("y")
        .gang("wz", 16, 16, &[(G, 1)])
        .in_queue("z")
        .build();
    assert_eq!((share(&snapshot, "org"), share(&snapshot, "z")), (12, 4));
    // org's 12: x its quota 6, then the surplus 6 in halves.
    assert_eq!((share(&snapshot, "x"), share(&snapshot, "y")), (9, 3));
}

#[test]
fn gang_counts_add_up_through_the_tree() {
    let snapshot = two_nodes()
        .queue("org", "", &[(G, 8, 1, None, None)], |_| {})
        .queue("team", "org", &[(G, 8, 1, None, None)], |_| {})
        .running("busy", "team", "n1", 1, &[(G, 4)], 0)
        .gang("wait", 1, 1, &[(G, 4)])
        .in_queue("team")
        .build();
    let reports = crate::engine::admission::report::report(&snapshot, &QueueState::of(&snapshot));
    let counts = |name: &str| {
        let r = reports.iter().find(|r| r.name == name).unwrap();
        (r.pending_gangs, r.running_gangs)
    };
    assert_eq!((counts("org"), counts("team"), counts("default")), ((1, 1), (1, 1), (0, 0)));
}

#[test]
fn a_running_gangs_optional_pods_that_would_borrow_go_after_gangs_that_need_their_minimum() {
    // a runs 2 GPUs of its quota of 2, and its elastic gang has one more pod pending; b
    // (quota 0) has a 6-GPU job. Placed first, a's optional pod (within a's fair share of 4,
    // beyond its quota) would leave 4 GPUs that b's job cannot use: 4 idle. After it, b's
    // job takes the 6 and the optional pod waits.
    let snapshot = SnapshotBuilder::new()
        .gpu_node("n1", 64, 512, 8, &[])
        .queue("a", "", &[(G, 2, 1, None, None)], |_| {})
        .queue("b", "", &[(G, 0, 1, None, None)], |_| {})
        .running("elastic", "a", "n1", 1, &[(G, 2)], 0)
        .gang("elastic", 1, 2, &[(G, 2)])
        .in_queue("a")
        .with_last_gang(|g| {
            g.bound = 1;
            g.pods.truncate(1);
        })
        .gang("b-job", 1, 1, &[(G, 6)])
        .in_queue("b")
        .with_last_gang(|g| g.created = 20)
        .build();
    let lines = run(&snapshot);
    assert_eq!(lines[0], "b-job -> n1", "{lines:?}");
    assert!(lines[1].starts_with("elastic waits"), "{lines:?}");
}
