//! Which gang goes next (QUEUES.md §2.5): from the top of the tree, the sibling queue that
//! most deserves the next gang, down to a leaf, whose own order (priority, then age) gives
//! the gang. Re-evaluated after every gang, as each placement changes what queues hold.

use std::cmp::Ordering;

use super::QueueTree;
use super::account::{QueueState, gang_need};
use super::tree::resolve;
use crate::engine::model::Snapshot;

/// Hands out the cycle's gangs in queue order.
#[derive(Clone, Debug, Default)]
pub struct Picker {
    /// Gangs whose queue does not resolve, first: they only get their reason.
    unqueued: Vec<usize>,
    /// Per queue: its gangs in leaf order, and how many were handed out.
    lists: Vec<Vec<usize>>,
    cursor: Vec<usize>,
    /// Per queue: gangs not yet handed out in its subtree.
    left: Vec<usize>,
    /// Per gang: its leaf, and what it needs now (its pods up to minMember), per key.
    leaf: Vec<Option<usize>>,
    needs: Vec<Vec<i64>>,
    /// The queues are only the implicit default: hand the gangs out in the given order.
    plain: bool,
}

impl Picker {
    /// `order` is the cycle's gang order (priority, then age), which each leaf keeps.
    pub fn new(snapshot: &Snapshot, order: &[usize]) -> Picker {
        let tree = &snapshot.queues;
        let mut picker = Picker {
            lists: vec![Vec::new(); tree.queues.len()],
            cursor: vec![0; tree.queues.len()],
            left: vec![0; tree.queues.len()],
            leaf: vec![None; snapshot.gangs.len()],
            needs: vec![Vec::new(); snapshot.gangs.len()],
            plain: !tree.is_configured(),
            ..Picker::default()
        };
        for &g in order {
            let gang = &snapshot.gangs[g];
            match resolve(tree, &gang.queue, &gang.key.namespace) {
                Ok(leaf) if !picker.plain => {
                    picker.lists[leaf].push(g);
                    picker.leaf[g] = Some(leaf);
                    picker.needs[g] = gang_need(tree, gang, gang.still_needed().min(gang.pods.len()));
                    for q in tree.path(leaf) {
                        picker.left[q] += 1;
                    }
                }
                Ok(leaf) => {
                    picker.leaf[g] = Some(leaf);
                    picker.unqueued.push(g);
                }
                Err(_) => picker.unqueued.push(g),
            }
        }
        // A stack, popped from the end: first in the given order.
        picker.unqueued.reverse();
        picker
    }

    /// The gang's leaf queue, when it resolved.
    pub fn leaf(&self, gang: usize) -> Option<usize> {
        self.leaf[gang]
    }

    /// The next gang, given what queues hold now.
    pub fn next(&mut self, tree: &QueueTree, state: &QueueState) -> Option<usize> {
        if let Some(g) = self.unqueued.pop() {
            return Some(g);
        }
        let root = self.best(tree, state, &tree.roots)?;
        let leaf = self.descend(tree, state, root);
        let g = self.lists[leaf][self.cursor[leaf]];
        self.cursor[leaf] += 1;
        for q in tree.path(leaf) {
            self.left[q] -= 1;
        }
        Some(g)
    }

    fn descend(&self, tree: &QueueTree, state: &QueueState, mut q: usize) -> usize {
        while !tree.queues[q].is_leaf() {
            q = self
                .best(tree, state, &tree.queues[q].children)
                .expect("a subtree with gangs left has a child with some");
        }
        q
    }

    /// The sibling whose next gang goes first.
    fn best(&self, tree: &QueueTree, state: &QueueState, siblings: &[usize]) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for &q in siblings.iter().filter(|&&q| self.left[q] > 0) {
            let leaf = self.descend(tree, state, q);
            let gang = self.lists[leaf][self.cursor[leaf]];
            best = match best {
                Some((bq, bg)) if compare(tree, state, (q, &self.needs[gang]), (bq, &self.needs[bg])).is_ge() => {
                    Some((bq, bg))
                }
                _ => Some((q, gang)),
            };
        }
        best.map(|(q, _)| q)
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

fn dominant(tree: &QueueTree, state: &QueueState, q: usize, need: &[i64], with: bool) -> f64 {
    let mut share = 0.0f64;
    for (k, &n) in need.iter().enumerate() {
        let held = state.allocated[q][k] + if with { n } else { 0 };
        if held <= 0 {
            continue;
        }
        let of = allocatable(tree, state, q, k);
        let s = if of <= 0 { 1000.0 * held as f64 } else { held as f64 / of as f64 };
        share = share.max(s);
    }
    share
}

/// QUEUES.md §2.5, rules 1–7: `Less` when queue `a` (with its next gang's needs) goes first.
pub fn compare(tree: &QueueTree, state: &QueueState, a: (usize, &[i64]), b: (usize, &[i64])) -> Ordering {
    let keys = tree.keys.len();
    let over = |q: usize| (0..keys).any(|k| state.allocated[q][k] > state.fair_share[q][k]);
    let starved = |q: usize, need: &[i64]| {
        let queue = &tree.queues[q];
        let mut any = false;
        for (k, &n) in need.iter().enumerate() {
            if !queue.governed[k] {
                continue;
            }
            match queue.rules[k].quota {
                Some(quota) if state.allocated[q][k] + n > quota => return false,
                Some(quota) if quota > 0 => any = true,
                Some(_) => {}
                None => any = true,
            }
        }
        any
    };
    let zero =
        |q: usize, need: &[i64]| need.iter().enumerate().any(|(k, &n)| n > 0 && allocatable(tree, state, q, k) == 0);
    let (qa, na) = a;
    let (qb, nb) = b;
    let (sa, sb) = (&tree.queues[qa].spec, &tree.queues[qb].spec);
    over(qa)
        .cmp(&over(qb))
        .then_with(|| starved(qb, nb).cmp(&starved(qa, na)))
        .then_with(|| sb.priority.cmp(&sa.priority))
        .then_with(|| zero(qa, na).cmp(&zero(qb, nb)))
        .then_with(|| dominant(tree, state, qa, na, true).total_cmp(&dominant(tree, state, qb, nb, true)))
        .then_with(|| dominant(tree, state, qa, na, false).total_cmp(&dominant(tree, state, qb, nb, false)))
        .then_with(|| {
            let smaller = |x: usize, y: usize| {
                let (mut less, mut more) = (false, false);
                for k in 0..keys {
                    let (sx, sy) = (allocatable(tree, state, x, k), allocatable(tree, state, y, k));
                    less |= sx < sy;
                    more |= sx > sy;
                }
                less && !more
            };
            if smaller(qa, qb) {
                Ordering::Less
            } else if smaller(qb, qa) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| sa.created.cmp(&sb.created))
        .then_with(|| sa.name.cmp(&sb.name))
}
