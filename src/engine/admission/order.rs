//! Which gang goes next (QUEUES.md §2.5): from the top of the tree, the sibling queue that
//! most deserves the next gang, down to a leaf, whose own order (priority, then age) gives
//! the gang. Re-evaluated after every gang, as each placement changes what queues hold.

use std::cmp::Ordering;

use super::account::{GangNeeds, QueueState};
use crate::engine::model::Snapshot;
use crate::engine::queues::QueueTree;

/// A queue's standing for its next gang (QUEUES.md §2.5, rules 1–5), smaller first.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Standing {
    over_fair_share: bool,
    not_starved: bool,
    priority: i32,
    zero_share: bool,
    share_with: f64,
    share_without: f64,
}

impl Standing {
    fn cmp(&self, other: &Standing) -> Ordering {
        self.over_fair_share
            .cmp(&other.over_fair_share)
            .then(self.not_starved.cmp(&other.not_starved))
            .then(other.priority.cmp(&self.priority))
            .then(self.zero_share.cmp(&other.zero_share))
            .then(self.share_with.total_cmp(&other.share_with))
            .then(self.share_without.total_cmp(&other.share_without))
    }
}

/// A subtree's next gang, with its leaf and the subtree's standing for it.
#[derive(Clone, Copy, Debug)]
struct Pick {
    leaf: usize,
    gang: usize,
    standing: Standing,
}

/// Hands out the cycle's gangs in queue order. A subtree's pick is kept until something in
/// it changes (a gang handed out from it, which is also where capacity is charged), so a
/// gang costs the depth of the tree, not its size.
#[derive(Clone, Debug, Default)]
pub struct Picker {
    /// Gangs whose queue does not resolve, first: they only get their reason.
    unqueued: Vec<usize>,
    /// Per queue: its gangs in leaf order, and how many were handed out.
    lists: Vec<Vec<usize>>,
    cursor: Vec<usize>,
    /// Per queue: gangs not yet handed out in its subtree.
    left: Vec<usize>,
    /// Per gang: its leaf, and what it needs now (`Gang::pods_now`), per key.
    needs: GangNeeds,
    /// Per queue, per key: its allocatable share (fixed for the cycle).
    allocatable: Vec<Vec<i64>>,
    /// Per queue: its subtree's pick, while valid.
    picks: Vec<Option<Pick>>,
}

impl Picker {
    /// `order` is the cycle's gang order (priority, then age), which each leaf keeps.
    pub fn new(snapshot: &Snapshot, needs: GangNeeds, state: &QueueState, order: &[usize]) -> Picker {
        let tree = &snapshot.queues;
        let plain = !tree.is_configured();
        let mut picker = Picker {
            lists: vec![Vec::new(); tree.queues.len()],
            cursor: vec![0; tree.queues.len()],
            left: vec![0; tree.queues.len()],
            picks: vec![None; tree.queues.len()],
            ..Picker::default()
        };
        if !plain {
            picker.allocatable = (0..tree.queues.len())
                .map(|q| (0..tree.keys.len()).map(|k| allocatable(tree, state, q, k)).collect())
                .collect();
        }
        for &g in order {
            match needs.leaf[g] {
                Some(leaf) if !plain => {
                    picker.lists[leaf].push(g);
                    for q in tree.path(leaf) {
                        picker.left[q] += 1;
                    }
                }
                _ => picker.unqueued.push(g),
            }
        }
        picker.needs = needs;
        // A stack, popped from the end: first in the given order.
        picker.unqueued.reverse();
        picker
    }

    /// The gang's leaf queue, when it resolved.
    pub fn leaf(&self, gang: usize) -> Option<usize> {
        self.needs.leaf[gang]
    }

    /// What the gang needs now, per key.
    pub fn need_now(&self, gang: usize) -> &[i64] {
        self.needs.now(gang)
    }

    /// The next gang, given what queues hold now.
    pub fn next(&mut self, tree: &QueueTree, state: &QueueState) -> Option<usize> {
        if let Some(g) = self.unqueued.pop() {
            return Some(g);
        }
        let pick = self.best(tree, state, &tree.roots)?;
        let leaf = pick.leaf;
        self.cursor[leaf] += 1;
        for q in tree.path(leaf) {
            self.left[q] -= 1;
            self.picks[q] = None;
        }
        Some(pick.gang)
    }

    /// Forgets the picks along `leaf`'s path: what its queues hold changed outside
    /// [`Picker::next`] (evictions).
    pub fn changed(&mut self, tree: &QueueTree, leaf: usize) {
        for q in tree.path(leaf) {
            self.picks[q] = None;
        }
    }

    /// The pick of the subtree at `q` (which has gangs left).
    fn pick(&mut self, tree: &QueueTree, state: &QueueState, q: usize) -> Pick {
        if let Some(pick) = self.picks[q] {
            return pick;
        }
        let (leaf, gang) = if tree.queues[q].is_leaf() {
            (q, self.lists[q][self.cursor[q]])
        } else {
            let child = self.best(tree, state, &tree.queues[q].children).expect("a subtree with gangs left has one");
            (child.leaf, child.gang)
        };
        let pick = Pick { leaf, gang, standing: self.standing(tree, state, q, self.needs.now(gang)) };
        self.picks[q] = Some(pick);
        pick
    }

    /// The pick of the sibling whose next gang goes first.
    fn best(&mut self, tree: &QueueTree, state: &QueueState, siblings: &[usize]) -> Option<Pick> {
        let mut best: Option<(usize, Pick)> = None;
        for &q in siblings {
            if self.left[q] == 0 {
                continue;
            }
            let pick = self.pick(tree, state, q);
            best = match best {
                Some((bq, b)) if self.compare(tree, (q, &pick.standing), (bq, &b.standing)).is_ge() => Some((bq, b)),
                _ => Some((q, pick)),
            };
        }
        best.map(|(_, pick)| pick)
    }

    fn standing(&self, tree: &QueueTree, state: &QueueState, q: usize, need: &[i64]) -> Standing {
        let queue = &tree.queues[q];
        let allocated = &state.allocated[q];
        let mut starved = false;
        let mut not_starved = false;
        let (mut with, mut without) = (0.0f64, 0.0f64);
        let mut zero_share = false;
        for (k, &n) in need.iter().enumerate() {
            if queue.governed[k] {
                match queue.rules[k].quota {
                    Some(quota) if allocated[k] + n > quota => not_starved = true,
                    Some(0) => {}
                    _ => starved = true,
                }
            }
            let of = self.allocatable[q][k];
            zero_share |= n > 0 && of == 0;
            let share = |held: i64| {
                if held <= 0 {
                    0.0
                } else if of <= 0 {
                    1000.0 * held as f64
                } else {
                    held as f64 / of as f64
                }
            };
            with = with.max(share(allocated[k] + n));
            without = without.max(share(allocated[k]));
        }
        Standing {
            over_fair_share: allocated.iter().zip(&state.fair_share[q]).any(|(a, f)| a > f),
            not_starved: not_starved || !starved,
            priority: queue.spec.priority,
            zero_share,
            share_with: with,
            share_without: without,
        }
    }

    /// Rules 1–5 by standing, then 6 (the smaller allocatable share), then 7 (older, then
    /// name): `Less` when `a` goes first.
    fn compare(&self, tree: &QueueTree, a: (usize, &Standing), b: (usize, &Standing)) -> Ordering {
        let (qa, sa) = a;
        let (qb, sb) = b;
        sa.cmp(sb)
            .then_with(|| {
                let (x, y) = (&self.allocatable[qa], &self.allocatable[qb]);
                let less = x.iter().zip(y).any(|(x, y)| x < y);
                let more = x.iter().zip(y).any(|(x, y)| x > y);
                match (less, more) {
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    _ => Ordering::Equal,
                }
            })
            .then_with(|| {
                let (a, b) = (&tree.queues[qa].spec, &tree.queues[qb].spec);
                a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
            })
    }
}

/// The queue's allocatable share of key `k`: `min(limit, max(quota, fair share))`, an
/// unlimited one counting as the whole capacity.
fn allocatable(tree: &QueueTree, state: &QueueState, q: usize, k: usize) -> i64 {
    let rule = tree.queues[q].rules[k];
    let capacity = state.capacity[k].max(0);
    let deserved = rule.quota.map_or(capacity, |quota| quota.max(state.fair_share[q][k]));
    rule.limit.map_or(deserved, |limit| limit.min(deserved))
}
