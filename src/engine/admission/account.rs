//! What each queue holds, wants and deserves in one cycle: allocated, allocated by
//! non-preemptible gangs, requested, capped demand and fair share, per resource key, each
//! a sum over the queue's subtree. Computed once per cycle from the snapshot and charged
//! as gangs are placed, so every decision of the cycle reads one consistent picture.

use std::sync::Arc;

use super::devices::DeviceCharges;
use super::share::{Claimant, Division, divide};
use crate::engine::claims::ClaimPlacement;
use crate::engine::dra::model::DraSnapshot;
use crate::engine::dra::selectors::SelectorCache;
use crate::engine::model::{Gang, NodeIdx, PendingPod, Snapshot};
use crate::engine::queues::QueueTree;
use crate::engine::queues::tree::resolve;
use crate::engine::resources::Demand;

/// Per queue, per key of the tree (`tree.keys`), amounts in the engine's units.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueState {
    /// `A`: requests of running pods in the subtree (and of gangs placed this cycle).
    pub allocated: Vec<Vec<i64>>,
    /// `N`: the part of `allocated` held by non-preemptible gangs.
    pub non_preemptible: Vec<Vec<i64>>,
    /// `P`: requests of all pods of pending gangs in the subtree.
    pub requested: Vec<Vec<i64>>,
    /// `D`: what the queue wants, capped by its limit.
    pub demand: Vec<Vec<i64>>,
    /// `F`: the queue's fair share.
    pub fair_share: Vec<Vec<i64>>,
    /// Per key: what queues divide (allocatable of the nodes, less what other schedulers'
    /// pods request).
    pub capacity: Vec<i64>,
    /// Per key: what Muster's running pods use, in any queue or none.
    pub used: Vec<i64>,
    /// Per queue: the quotas of its children did not fit in its share.
    pub oversubscribed: Vec<bool>,
    /// What devices charge the keys on devices (`deviceclass/<class>`), for the cycle.
    pub devices: Arc<DeviceCharges>,
}

/// Amounts of `demand` per key of the tree, `times` over.
pub fn per_key(tree: &QueueTree, demand: &Demand, times: i64) -> Vec<i64> {
    let mut need = vec![0; tree.keys.len()];
    tree.add_demand(&mut need, demand, times);
    need
}

/// Adds the demand of `pods` of gang `g` (pod index, pod), per key of the tree, to `need`:
/// what they request and what their devices are estimated to charge.
fn add_pods<'p>(
    tree: &QueueTree,
    devices: &DeviceCharges,
    g: usize,
    need: &mut [i64],
    pods: impl Iterator<Item = (usize, &'p PendingPod)>,
) {
    for (p, pod) in pods {
        tree.add_demand(need, &pod.demand, 1);
        for &(k, amount) in devices.pending(g, p) {
            need[k] += amount;
        }
    }
}

/// Per pending gang of the snapshot, computed once per cycle: its leaf queue (when it
/// resolves), what it needs now ([`Gang::pods_now`](crate::engine::model::Gang::pods_now)) and what all its pods request,
/// per key, in two flat arrays.
#[derive(Clone, Debug, Default)]
pub struct GangNeeds {
    pub leaf: Vec<Option<usize>>,
    keys: usize,
    now: Vec<i64>,
    all: Vec<i64>,
}

impl GangNeeds {
    pub fn new(snapshot: &Snapshot, devices: &DeviceCharges) -> GangNeeds {
        let tree = &snapshot.queues;
        let keys = tree.keys.len();
        let n = snapshot.gangs.len();
        let mut needs = GangNeeds { leaf: vec![None; n], keys, now: vec![0; n * keys], all: vec![0; n * keys] };
        for (g, gang) in snapshot.gangs.iter().enumerate() {
            // A gang whose quota another system keeps is in no queue while queues exist.
            if gang.quota_owner.is_some() && tree.is_configured() {
                continue;
            }
            needs.leaf[g] = resolve(tree, &gang.queue, &gang.key.namespace).ok();
            if keys == 0 || needs.leaf[g].is_none() {
                continue;
            }
            let now = gang.pods_now();
            let range = g * keys..(g + 1) * keys;
            add_pods(tree, devices, g, &mut needs.now[range.clone()], gang.pods[..now].iter().enumerate());
            needs.all[range.clone()].copy_from_slice(&needs.now[range.clone()]);
            add_pods(tree, devices, g, &mut needs.all[range], gang.pods.iter().enumerate().skip(now));
        }
        needs
    }

    /// What gang `g` needs now, per key.
    pub fn now(&self, g: usize) -> &[i64] {
        &self.now[g * self.keys..(g + 1) * self.keys]
    }

    /// What all of gang `g`'s pending pods request, per key.
    pub fn all(&self, g: usize) -> &[i64] {
        &self.all[g * self.keys..(g + 1) * self.keys]
    }
}

impl QueueState {
    /// The state of `snapshot`, for reports.
    pub fn of(snapshot: &Snapshot) -> QueueState {
        let devices = Arc::new(DeviceCharges::new(snapshot, &mut SelectorCache::default()));
        QueueState::new(snapshot, &GangNeeds::new(snapshot, &devices), devices)
    }

    /// The state at the start of a cycle. Empty when no queue governs any key.
    pub fn new(snapshot: &Snapshot, needs: &GangNeeds, devices: Arc<DeviceCharges>) -> QueueState {
        let tree = &snapshot.queues;
        let keys = tree.keys.len();
        let queues = tree.queues.len();
        let mut state = QueueState {
            allocated: vec![vec![0; keys]; queues],
            non_preemptible: vec![vec![0; keys]; queues],
            requested: vec![vec![0; keys]; queues],
            demand: vec![vec![0; keys]; queues],
            fair_share: vec![vec![0; keys]; queues],
            capacity: vec![0; keys],
            used: vec![0; keys],
            oversubscribed: vec![false; queues],
            devices,
        };
        if keys == 0 {
            return state;
        }
        for (k, &id) in tree.keys.iter().enumerate() {
            let allocatable: i64 = snapshot.nodes.iter().map(|n| n.allocatable.get(id)).sum();
            let requested: i64 = snapshot.nodes.iter().map(|n| n.requested.get(id)).sum();
            state.capacity[k] =
                (allocatable - requested) * tree.scale(k) + state.devices.capacity.get(k).copied().unwrap_or(0);
        }
        for (r, running) in snapshot.running.iter().enumerate() {
            let mut need = vec![0; keys];
            for (p, pod) in running.pods.iter().enumerate() {
                tree.add_demand(&mut need, &pod.demand, 1);
                for &(k, amount) in state.devices.running(r, p) {
                    need[k] += amount;
                }
            }
            for (k, &amount) in need.iter().enumerate() {
                state.used[k] += amount;
                // Ours: given back to what the queues divide.
                state.capacity[k] += amount;
            }
            if let Some(leaf) = tree.get(&running.queue).filter(|&q| tree.queues[q].problem.is_none()) {
                state.add(tree, leaf, &need, !running.preemptible, false);
            }
        }
        for (g, gang) in snapshot.gangs.iter().enumerate() {
            if gang.blocked.is_some() {
                continue;
            }
            if let Some(leaf) = needs.leaf[g] {
                for q in tree.path(leaf) {
                    for (requested, amount) in state.requested[q].iter_mut().zip(needs.all(g)) {
                        *requested += amount;
                    }
                }
            }
        }
        state.divide(tree, false);
        state
    }

    fn add(&mut self, tree: &QueueTree, leaf: usize, need: &[i64], non_preemptible: bool, used: bool) {
        for q in tree.path(leaf) {
            for (k, &amount) in need.iter().enumerate() {
                self.allocated[q][k] += amount;
                if non_preemptible {
                    self.non_preemptible[q][k] += amount;
                }
            }
        }
        if used {
            for (k, &amount) in need.iter().enumerate() {
                self.used[k] += amount;
            }
        }
    }

    /// Charges a gang placed this cycle to its queue and every ancestor.
    pub fn charge(&mut self, tree: &QueueTree, leaf: usize, need: &[i64], non_preemptible: bool) {
        self.add(tree, leaf, need, non_preemptible, true);
    }

    /// Charges the pods of `gang` placed this cycle (`placed`: pod index, node) and the
    /// devices allocated to them (`claims`) to its queue and every ancestor.
    pub fn charge_placed(
        &mut self,
        tree: &QueueTree,
        dra: &DraSnapshot,
        leaf: usize,
        gang: &Gang,
        placed: &[(usize, NodeIdx)],
        claims: &[ClaimPlacement],
    ) {
        if tree.keys.is_empty() {
            return;
        }
        let mut charged = vec![0; tree.keys.len()];
        for &(pod, _) in placed {
            tree.add_demand(&mut charged, &gang.pods[pod].demand, 1);
        }
        for (k, amount) in self.devices.placed(dra, claims) {
            charged[k] += amount;
        }
        if let Some(k) = tree.gpu_key {
            charged[k] += super::fractions::placed(dra, claims);
        }
        self.charge(tree, leaf, &charged, !gang.preemptible);
    }

    /// The most queue `q` holds of key `k` before a queue owed its share may reclaim from
    /// it (QUEUES.md §2.6): `min(limit, max(quota, fair share))`; unbounded for an unlimited
    /// quota without a limit.
    pub fn deserved(&self, tree: &QueueTree, q: usize, k: usize) -> i64 {
        let rule = tree.queues[q].rules[k];
        let deserved = rule.quota.map_or(i64::MAX, |quota| quota.max(self.fair_share[q][k]));
        rule.limit.map_or(deserved, |limit| limit.min(deserved))
    }

    /// Whether placing `need` in `leaf` would leave a queue on its path holding more than it
    /// deserves in a key the need uses: what it then holds beyond is reclaimable at once.
    pub fn beyond_deserved(&self, tree: &QueueTree, leaf: usize, need: &[i64]) -> bool {
        tree.path(leaf).any(|q| {
            need.iter().enumerate().any(|(k, &n)| n > 0 && self.allocated[q][k] + n > self.deserved(tree, q, k))
        })
    }

    /// Whether taking `need` would take `leaf` or an ancestor past its quota (borrowing).
    pub fn beyond_quota(&self, tree: &QueueTree, leaf: usize, need: &[i64]) -> bool {
        tree.path(leaf).any(|q| {
            need.iter().enumerate().any(|(k, &n)| {
                n > 0 && tree.queues[q].rules[k].quota.is_some_and(|quota| self.allocated[q][k] + n > quota)
            })
        })
    }

    /// Takes back what evicted pods held from their queue and every ancestor.
    pub fn discharge(&mut self, tree: &QueueTree, leaf: usize, need: &[i64], non_preemptible: bool) {
        let negative: Vec<i64> = need.iter().map(|a| -a).collect();
        self.add(tree, leaf, &negative, non_preemptible, true);
    }

    /// Capped demand and fair share of every queue, level by level. With `trace`, returns
    /// each division (queue or None for the top level, key index, division) in words.
    pub fn divide(&mut self, tree: &QueueTree, trace: bool) -> Vec<(Option<usize>, usize, Division)> {
        let mut steps = Vec::new();
        // Demand bottom-up: a leaf wants what it holds and what waits in it; a parent what
        // its children want; each capped by its own limit.
        let order = post_order(tree);
        for &q in &order {
            let queue = &tree.queues[q];
            for k in 0..tree.keys.len() {
                let wanted = if queue.is_leaf() {
                    self.allocated[q][k] + self.requested[q][k]
                } else {
                    queue.children.iter().map(|&c| self.demand[c][k]).sum()
                };
                let limit = queue.rules[k].limit.unwrap_or(i64::MAX);
                self.demand[q][k] = wanted.min(limit);
            }
        }
        for k in 0..tree.keys.len() {
            self.divide_level(tree, None, &tree.roots, self.capacity[k], k, trace, &mut steps);
        }
        steps
    }

    #[allow(clippy::too_many_arguments)]
    fn divide_level(
        &mut self,
        tree: &QueueTree,
        parent: Option<usize>,
        siblings: &[usize],
        capacity: i64,
        k: usize,
        trace: bool,
        steps: &mut Vec<(Option<usize>, usize, Division)>,
    ) {
        if siblings.is_empty() {
            return;
        }
        let mut ordered = siblings.to_vec();
        ordered.sort_by(|&a, &b| {
            let (a, b) = (&tree.queues[a].spec, &tree.queues[b].spec);
            a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
        });
        let claimants: Vec<Claimant<'_>> = ordered
            .iter()
            .map(|&q| {
                let queue = &tree.queues[q];
                let rule = queue.rules[k];
                Claimant {
                    name: &queue.spec.name,
                    quota: rule.quota,
                    weight_milli: rule.weight_milli,
                    kept: rule.kept(),
                    priority: queue.spec.priority,
                    demand: self.demand[q][k],
                }
            })
            .collect();
        let division = divide(capacity, &claimants, trace.then(|| tree.scale(k)));
        if let Some(p) = parent {
            self.oversubscribed[p] |= division.oversubscribed;
        }
        for (i, &q) in ordered.iter().enumerate() {
            self.fair_share[q][k] = division.shares[i];
        }
        if trace {
            steps.push((parent, k, division));
        }
        for &q in &ordered {
            let children = tree.queues[q].children.clone();
            let share = self.fair_share[q][k];
            self.divide_level(tree, Some(q), &children, share, k, trace, steps);
        }
    }
}

/// Valid queues, children before parents.
fn post_order(tree: &QueueTree) -> Vec<usize> {
    fn visit(tree: &QueueTree, q: usize, out: &mut Vec<usize>) {
        for &c in &tree.queues[q].children {
            visit(tree, c, out);
        }
        out.push(q);
    }
    let mut out = Vec::new();
    for &r in &tree.roots {
        visit(tree, r, &mut out);
    }
    out
}
