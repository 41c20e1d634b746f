//! A gang whose pods say `preemptionPolicy: Never` evicts nobody, as kube-scheduler's
//! DefaultPreemption leaves such a pod to wait.

use super::preempt::{run, two_teams};
use crate::engine::build::GPU as G;

#[test]
fn a_gang_whose_pods_say_preemption_policy_never_evicts_nobody() {
    let build = |preempts: bool| {
        let running =
            two_teams().running("a-old", "a", "n1", 2, &[(G, 4)], 100).running("a-new", "a", "n2", 2, &[(G, 4)], 200);
        running.gang("b-job", 2, 2, &[(G, 4)]).in_queue("b").with_last_gang(|g| g.preempts = preempts).build()
    };
    assert_eq!(run(&build(true)).1.evictions.len(), 1, "reclaims when it may");
    let (lines, outcome) = run(&build(false));
    assert!(outcome.evictions.is_empty() && lines[0].starts_with("b-job waits: "), "{lines:?}");
}
