//! Who may be evicted for a gang, in bundles and in the order they are taken (QUEUES.md
//! §2.6–2.8): for reclaim, preemptible gangs of reclaimable queues on the other side of
//! the lowest common ancestor, most over their share first; for preemption, lower-priority
//! gangs of the same queue. Surplus pods above minMember (newest first) come before any
//! whole gang, and a gang still inside its minimum runtime offers only its surplus.

use super::PreemptionConfig;
use crate::engine::admission::QueueState;
use crate::engine::model::{Gang, RunningGang, Snapshot};
use crate::engine::queues::{QueueTree, ReclaimPolicy, WithinQueue};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Reclaim,
    Preempt,
    /// `borrowWithinParent`: lower-priority gangs of other queues over their quota, for a
    /// gang that must go over its own.
    Borrow,
}

/// Pods of one running gang taken as one.
#[derive(Clone, Debug)]
pub(super) struct Bundle {
    /// Index into `snapshot.running`.
    pub running: usize,
    /// Indices into its pods.
    pub pods: Vec<usize>,
    /// The queue below the lowest common ancestor on the victim's side (its leaf for
    /// preemption), and on the gang's side.
    pub side: usize,
    pub own_side: usize,
}

/// Bundles in the order they are taken, and when protected gangs become eligible.
#[derive(Debug, Default)]
pub(super) struct Candidates {
    pub bundles: Vec<Bundle>,
    pub protected_until: Option<i64>,
}

/// The two queues just below the lowest common ancestor of `a` and `b`: (a's side, b's
/// side). Distinct leaves give distinct sides.
pub(super) fn sides(tree: &QueueTree, a: usize, b: usize) -> (usize, usize) {
    let b_path: Vec<usize> = tree.path(b).collect();
    let mut a_side = a;
    for q in tree.path(a) {
        if let Some(i) = b_path.iter().position(|&x| x == q) {
            // q is the ancestor: the sides are one step below it.
            let b_side = if i == 0 { b } else { b_path[i - 1] };
            return (a_side, b_side);
        }
        a_side = q;
    }
    (a_side, *b_path.last().expect("a path has its queue"))
}

/// The first value `get` gives walking up from `from`.
fn inherited(tree: &QueueTree, from: usize, get: impl Fn(usize) -> Option<i64>) -> Option<i64> {
    tree.path(from).find_map(get)
}

/// How far over its share a queue is, in the resources the gang asks for.
pub(super) fn saturation(state: &QueueState, q: usize, need: &[i64]) -> f64 {
    let mut most = 0.0f64;
    for (k, &n) in need.iter().enumerate() {
        if n <= 0 {
            continue;
        }
        let (a, f) = (state.allocated[q][k], state.fair_share[q][k]);
        let s = if f > 0 {
            a as f64 / f as f64
        } else if a > 0 {
            f64::INFINITY
        } else {
            0.0
        };
        most = most.max(s);
    }
    most
}

/// Where a bundle goes: surplus before whole gangs, then most saturated side, lowest
/// priority, most recently started, most recently created (of gangs started in the same
/// second, the one that came last is what took its queue over), and snapshot order.
type Order = (bool, f64, i32, i64, i64, usize);

/// The bundles gang `gang` (in `leaf`, needing `need` per key) may take, ordered.
#[allow(clippy::too_many_arguments)]
pub(super) fn candidates(
    snapshot: &Snapshot,
    state: &QueueState,
    config: &PreemptionConfig,
    gang: &Gang,
    leaf: usize,
    need: &[i64],
    kind: Kind,
    gone: &[Vec<bool>],
    grown: &[bool],
) -> Candidates {
    let tree = &snapshot.queues;
    let now = snapshot.now;
    let own = &tree.queues[leaf].spec.preemption;
    let mut found = Candidates::default();
    let mut keyed: Vec<(Order, Bundle)> = Vec::new();
    for (r, victim) in snapshot.running.iter().enumerate() {
        // Never itself (a gang partly bound), never one that grew this cycle.
        if !victim.preemptible || grown[r] || victim.key == gang.key {
            continue;
        }
        let valid = |q: &usize| tree.queues[*q].problem.is_none() && tree.queues[*q].is_leaf();
        let Some(victim_leaf) = tree.get(&victim.queue).filter(valid) else {
            continue;
        };
        let (side, own_side, min_runtime) = match kind {
            Kind::Preempt => {
                if victim_leaf != leaf || !may_preempt(own.within, victim, gang) {
                    continue;
                }
                let min = inherited(tree, victim_leaf, |q| tree.queues[q].spec.preemption.preempt_min_runtime);
                (leaf, leaf, min.unwrap_or(config.preempt_min_runtime))
            }
            Kind::Reclaim | Kind::Borrow => {
                if victim_leaf == leaf || tree.queues[victim_leaf].spec.preemption.not_reclaimable {
                    continue;
                }
                let lower = victim.priority < gang.priority;
                let skip = match kind {
                    Kind::Borrow => {
                        !lower || own.borrow_within_parent.flatten().is_some_and(|most| victim.priority > most)
                    }
                    _ => own.reclaim == ReclaimPolicy::LowerPriority && !lower,
                };
                if skip {
                    continue;
                }
                let (own_side, side) = sides(tree, leaf, victim_leaf);
                // A fence on the gang's side below the ancestor keeps it inside.
                let fenced = tree.path(leaf).take_while(|&q| q != tree.queues[own_side].parent.unwrap_or(usize::MAX));
                if fenced.into_iter().any(|q| tree.queues[q].spec.preemption.fence) {
                    continue;
                }
                let from = if config.reclaim_min_runtime_from_leaf { victim_leaf } else { side };
                let min = inherited(tree, from, |q| tree.queues[q].spec.preemption.reclaim_min_runtime);
                (side, own_side, min.unwrap_or(config.reclaim_min_runtime))
            }
        };
        let alive: Vec<usize> = (0..victim.pods.len()).filter(|&p| !gone[r][p]).collect();
        if alive.is_empty() {
            continue;
        }
        let saturation = match kind {
            Kind::Reclaim | Kind::Borrow => saturation(state, side, need),
            Kind::Preempt => 0.0,
        };
        let order = |whole: bool| (whole, -saturation, victim.priority, -victim.last_started(), -victim.created, r);
        // Surplus pods, newest first: started, then name.
        let mut surplus = alive.clone();
        surplus.sort_by(|&a, &b| {
            let (a, b) = (&victim.pods[a], &victim.pods[b]);
            b.started.cmp(&a.started).then_with(|| b.key.cmp(&a.key))
        });
        surplus.truncate(alive.len().saturating_sub(victim.min_member));
        for p in surplus {
            keyed.push((order(false), Bundle { running: r, pods: vec![p], side, own_side }));
        }
        let protected_until = victim.first_started().saturating_add(min_runtime);
        if now < protected_until {
            found.protected_until = Some(found.protected_until.map_or(protected_until, |t| t.min(protected_until)));
            continue;
        }
        keyed.push((order(true), Bundle { running: r, pods: alive, side, own_side }));
    }
    keyed.sort_by(|(a, _), (b, _)| {
        a.0.cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
            .then(a.4.cmp(&b.4))
            .then(a.5.cmp(&b.5))
    });
    found.bundles = keyed.into_iter().map(|(_, b)| b).collect();
    found
}

/// Whether `within` lets `gang` preempt `victim` of its own queue.
fn may_preempt(within: WithinQueue, victim: &RunningGang, gang: &Gang) -> bool {
    match within {
        WithinQueue::Never => false,
        WithinQueue::LowerPriority => victim.priority < gang.priority,
        WithinQueue::LowerOrNewerEqualPriority => {
            victim.priority < gang.priority || (victim.priority == gang.priority && victim.created > gang.created)
        }
    }
}
