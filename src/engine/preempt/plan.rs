//! An eviction plan for one gang: bundles taken in order until a full trial placement of
//! the gang succeeds, trimmed to the fewest that still let it fit, checked against the
//! reclaim post-condition, then committed at once (the trial kept in the working copy, what
//! queues hold updated) or dropped whole.

use super::candidates::{Bundle, Kind, candidates};
use super::{Eviction, EvictionReason, PreemptionConfig, Room};
use crate::engine::admission::QueueState;
use crate::engine::admission::devices::DeviceCharges;
use crate::engine::model::{Gang, Snapshot};
use crate::engine::place::{GangFit, Workspace};
use crate::engine::queues::refusal::quantity;
use crate::engine::queues::{ReclaimPolicy, WithinQueue};
use crate::engine::resources::ResourceId;

/// Evictions planned for one gang, and where it will go once they are done.
#[derive(Debug)]
pub struct Plan {
    pub evictions: Vec<Eviction>,
    pub fit: GangFit,
    /// When the reservation lapses.
    pub until: i64,
}

/// Plans evictions through one cycle: remembers which pods are already taken, so that no
/// pod is offered to two gangs, and how many gangs were evicted.
pub struct Evictor<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) config: PreemptionConfig,
    /// Per running gang, per pod: evicted in this cycle.
    pub(super) gone: Vec<Vec<bool>>,
    pub(super) evicted_gangs: usize,
    /// Running gangs that got more pods in this cycle: not victims now.
    pub(super) grown: Vec<bool>,
    /// What queues held when the cycle started, less what was evicted since: whether a
    /// queue is beyond its share is judged on this, so that gangs placed in this cycle do
    /// not make a queue's older gangs victims in the same cycle (one picture per cycle).
    start: Vec<Vec<i64>>,
    /// What running pods' devices charge.
    devices: std::sync::Arc<DeviceCharges>,
}

impl<'a> Evictor<'a> {
    /// `state` is what queues hold as the cycle starts.
    pub fn new(snapshot: &'a Snapshot, config: PreemptionConfig, state: &QueueState) -> Evictor<'a> {
        let gone = snapshot.running.iter().map(|r| vec![false; r.pods.len()]).collect();
        Evictor {
            snapshot,
            config,
            gone,
            evicted_gangs: 0,
            grown: vec![false; snapshot.running.len()],
            start: state.allocated.clone(),
            devices: state.devices.clone(),
        }
    }

    /// Notes a gang placed in this cycle: if some of its pods already run, it is no victim
    /// in this cycle (its new pods would be left without their gang).
    pub fn placed(&mut self, gang: &crate::engine::model::GangKey) {
        if let Some(r) = self.snapshot.running.iter().position(|r| &r.key == gang) {
            self.grown[r] = true;
        }
    }

    /// Whether pods of this gang were evicted in this cycle: it gets none placed now.
    pub fn is_victim(&self, gang: &crate::engine::model::GangKey) -> bool {
        self.snapshot.running.iter().position(|r| &r.key == gang).is_some_and(|r| self.gone[r].iter().any(|&g| g))
    }

    /// Tries to make room for `gang` (the pods its queue admits) in `leaf`, needing `need`
    /// per queue key now; `reservation`: the gang is the one the cycle's reservation is
    /// for, which first takes back what runs opportunistically in held capacity. On
    /// success the gang's placement is in `workspace` and `state` holds it (and no longer
    /// the victims); otherwise nothing changed, and `Err` says why evictions do not help it
    /// yet, when there is something to say.
    pub fn make_room(
        &mut self,
        workspace: &mut Workspace<'_>,
        state: &mut QueueState,
        gang: &Gang,
        leaf: usize,
        need: &[i64],
        reservation: bool,
    ) -> Result<Plan, Option<Room>> {
        let snapshot = self.snapshot;
        let tree = &snapshot.queues;
        // Only a gang short of its minMember evicts: pods beyond it are optional.
        if snapshot.running.is_empty() || gang.still_needed() == 0 {
            return Err(None);
        }
        // Gangs placed in held capacity were placed on the understanding that they leave
        // when the reserved gang can start: they go before anyone the queues would evict.
        if reservation && let Some(plan) = self.reclaim_held(workspace, state, gang, leaf) {
            return Ok(plan);
        }
        if !tree.is_configured() {
            return Err(None);
        }
        if self.config.max_evicted_gangs > 0 && self.evicted_gangs >= self.config.max_evicted_gangs {
            return Err(None);
        }
        let delay = gang
            .preemption_delay
            .or_else(|| tree.path(leaf).find_map(|q| tree.queues[q].spec.preemption.preemption_delay))
            .unwrap_or(self.config.preemption_delay);
        let since = gang.last_evicted.map_or(gang.created, |at| at.max(gang.created));
        let until = since.saturating_add(delay);
        if snapshot.now < until {
            return Err(Some(Room::InPreemptionDelay { until }));
        }

        let rules = tree.queues[leaf].spec.preemption;
        let mut why = None;
        let mut protected: Option<i64> = None;
        if rules.reclaim != ReclaimPolicy::Never {
            match self.fair_share_reached(state, leaf, need) {
                Some(room) => why = Some(room),
                None => {
                    let found = candidates(
                        snapshot,
                        state,
                        &self.config,
                        gang,
                        leaf,
                        need,
                        Kind::Reclaim,
                        &self.gone,
                        &self.grown,
                    );
                    protected = found.protected_until;
                    if let Some(plan) =
                        self.try_bundles(workspace, state, gang, leaf, need, &found.bundles, Kind::Reclaim)
                    {
                        return Ok(plan);
                    }
                }
            }
        }
        if rules.within != WithinQueue::Never {
            let found =
                candidates(snapshot, state, &self.config, gang, leaf, need, Kind::Preempt, &self.gone, &self.grown);
            protected = match (protected, found.protected_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(plan) = self.try_bundles(workspace, state, gang, leaf, need, &found.bundles, Kind::Preempt) {
                return Ok(plan);
            }
        }
        // borrowWithinParent: a gang that must go over its queue's quota may preempt
        // lower-priority gangs of queues over theirs.
        let must_borrow = need
            .iter()
            .enumerate()
            .any(|(k, &n)| n > 0 && tree.queues[leaf].rules[k].quota.is_some_and(|q| state.allocated[leaf][k] + n > q));
        if rules.borrow_within_parent.is_some() && must_borrow {
            let found =
                candidates(snapshot, state, &self.config, gang, leaf, need, Kind::Borrow, &self.gone, &self.grown);
            protected = match (protected, found.protected_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(plan) = self.try_bundles(workspace, state, gang, leaf, need, &found.bundles, Kind::Borrow) {
                return Ok(plan);
            }
        }
        Err(why.or(protected.map(|until| Room::ProtectedByMinRuntime { until })))
    }

    /// E1: a gang may reclaim only while its queue stays within its fair share.
    fn fair_share_reached(&self, state: &QueueState, leaf: usize, need: &[i64]) -> Option<Room> {
        let tree = &self.snapshot.queues;
        let names = &self.snapshot.resources;
        for (k, &n) in need.iter().enumerate() {
            let (allocated, share) = (state.allocated[leaf][k], state.fair_share[leaf][k]);
            if n > 0 && allocated + n > share {
                let id = tree.keys[k];
                return Some(Room::FairShareReached {
                    queue: tree.queues[leaf].spec.name.clone(),
                    resource: names.name(id).to_string(),
                    fair_share: quantity(names, id, share),
                    allocated: quantity(names, id, allocated),
                    needs: quantity(names, id, n),
                });
            }
        }
        None
    }

    /// Per key of the tree, what a set of pods of running gang `r` requests.
    fn amounts(&self, r: usize, pods: impl Iterator<Item = usize>) -> Vec<i64> {
        let tree = &self.snapshot.queues;
        let mut out = vec![0; tree.keys.len()];
        for p in pods {
            tree.add_demand(&mut out, &self.snapshot.running[r].pods[p].demand, 1);
            for &(k, amount) in self.devices.running(r, p) {
                out[k] += amount;
            }
        }
        out
    }

    /// Whether a reclaim bundle qualifies against its side's allocation `a` before it is
    /// taken (V2, strategy; V3, the floor of unlent quota).
    fn qualifies(&self, state: &QueueState, a: &[Vec<i64>], bundle: &Bundle, taken: &[i64], need: &[i64]) -> bool {
        let tree = &self.snapshot.queues;
        let (s, r) = (bundle.side, bundle.own_side);
        let (side, own) = (&tree.queues[s], &tree.queues[r]);
        let involved = |k: &usize| need[*k] > 0;
        let keys = 0..tree.keys.len();
        let over_share = keys.clone().filter(involved).any(|k| a[s][k] > state.deserved(tree, s, k));
        let guarantee = keys
            .clone()
            .filter(involved)
            .all(|k| own.rules[k].quota.is_none_or(|q| state.allocated[r][k] + need[k] <= q))
            && keys.clone().filter(involved).any(|k| side.rules[k].quota.is_some_and(|q| a[s][k] > q));
        let floor = keys.into_iter().all(|k| a[s][k] - taken[k] >= side.rules[k].kept().min(a[s][k]));
        (over_share || guarantee) && floor
    }

    /// Whether a `borrowWithinParent` bundle qualifies: its side is over its quota in a
    /// resource the gang asks for, and taking it leaves the side its unlent quota.
    fn over_quota(&self, a: &[Vec<i64>], bundle: &Bundle, taken: &[i64], need: &[i64]) -> bool {
        let tree = &self.snapshot.queues;
        let s = bundle.side;
        let side = &tree.queues[s];
        let over = (0..tree.keys.len()).any(|k| need[k] > 0 && side.rules[k].quota.is_some_and(|q| a[s][k] > q));
        let floor = (0..tree.keys.len()).all(|k| a[s][k] - taken[k] >= side.rules[k].kept().min(a[s][k]));
        over && floor
    }

    /// The reclaim post-condition: at every level where victims were taken, the gang's
    /// side ends within its share, or clearly less saturated than the side it took from.
    fn post_condition(&self, state: &QueueState, a: &[Vec<i64>], chosen: &[&Bundle], need: &[i64]) -> bool {
        let m = f64::from(self.config.saturation_milli.max(1000)) / 1000.0;
        let ratio = |held: i64, share: i64| {
            if share > 0 {
                held as f64 / share as f64
            } else if held > 0 {
                f64::INFINITY
            } else {
                0.0
            }
        };
        chosen.iter().all(|b| {
            let (r, s) = (b.own_side, b.side);
            let mut sigma_r = 0.0f64;
            let mut sigma_s = 0.0f64;
            for (k, &n) in need.iter().enumerate() {
                if n > 0 {
                    sigma_r = sigma_r.max(ratio(state.allocated[r][k] + n, state.fair_share[r][k]));
                    sigma_s = sigma_s.max(ratio(a[s][k], state.fair_share[s][k]));
                }
            }
            sigma_r <= 1.0 || m * sigma_r < sigma_s
        })
    }

    /// Whether the queue, with the pods of `chosen` gone and the gang placed, holds no more
    /// than its fair share, or than it holds now, of every resource the gang asks for.
    fn within_share(
        &self,
        state: &QueueState,
        leaf: usize,
        need: &[i64],
        bundles: &[Bundle],
        chosen: &[usize],
    ) -> bool {
        let mut freed = vec![0; need.len()];
        for (r, p) in self.pods_of(bundles, chosen) {
            for (k, t) in self.amounts(r, std::iter::once(p)).into_iter().enumerate() {
                freed[k] += t;
            }
        }
        need.iter().enumerate().all(|(k, &n)| {
            let held = state.allocated[leaf][k];
            n <= 0 || held - freed[k] + n <= state.fair_share[leaf][k]
        })
    }

    /// Pods of the chosen bundles, each once, as (running gang, pod).
    pub(super) fn pods_of(&self, bundles: &[Bundle], chosen: &[usize]) -> Vec<(usize, usize)> {
        let mut pods: Vec<(usize, usize)> =
            chosen.iter().flat_map(|&i| bundles[i].pods.iter().map(move |&p| (bundles[i].running, p))).collect();
        pods.sort_unstable();
        pods.dedup();
        pods
    }

    /// Places the gang with the pods of `chosen` gone; keeps the result only with `keep`.
    pub(super) fn trial(
        &self,
        workspace: &mut Workspace<'_>,
        gang: &Gang,
        bundles: &[Bundle],
        chosen: &[usize],
        keep: bool,
    ) -> Option<GangFit> {
        let mark = workspace.trial();
        for (r, p) in self.pods_of(bundles, chosen) {
            workspace.release(&self.snapshot.running[r].pods[p]);
        }
        match workspace.place(gang) {
            Ok(fit) if keep => {
                workspace.keep_trial();
                Some(fit)
            }
            result => {
                workspace.undo_trial(mark);
                result.ok()
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn try_bundles(
        &mut self,
        workspace: &mut Workspace<'_>,
        state: &mut QueueState,
        gang: &Gang,
        leaf: usize,
        need: &[i64],
        bundles: &[Bundle],
        kind: Kind,
    ) -> Option<Plan> {
        if bundles.is_empty() {
            return None;
        }
        let snapshot = self.snapshot;
        let tree = &snapshot.queues;
        // What the gang asks for, against what is free, for a cheap test before a trial.
        let wanted = gang_demand(gang);
        let mut free: Vec<i64> = wanted
            .iter()
            .map(|&(id, _)| (0..snapshot.nodes.len() as u32).map(|n| workspace.free(n).get(id).max(0)).sum())
            .collect();
        let mut a = self.start.clone();
        let mut counted: Vec<Vec<bool>> = self.gone.clone();
        let mut chosen: Vec<usize> = Vec::new();
        let mut fits = false;
        for (i, bundle) in bundles.iter().enumerate() {
            let fresh: Vec<usize> = bundle.pods.iter().copied().filter(|&p| !counted[bundle.running][p]).collect();
            if fresh.is_empty() {
                continue;
            }
            let taken = self.amounts(bundle.running, fresh.iter().copied());
            if kind == Kind::Reclaim && !self.qualifies(state, &a, bundle, &taken, need) {
                continue;
            }
            if kind == Kind::Borrow && !self.over_quota(&a, bundle, &taken, need) {
                continue;
            }
            chosen.push(i);
            let victim = &snapshot.running[bundle.running];
            if let Some(victim_leaf) = tree.get(&victim.queue) {
                for q in tree.path(victim_leaf) {
                    for (k, t) in taken.iter().enumerate() {
                        a[q][k] -= t;
                    }
                }
            }
            for &p in &fresh {
                counted[bundle.running][p] = true;
                let demand = &victim.pods[p].demand;
                for (j, &(id, _)) in wanted.iter().enumerate() {
                    free[j] += demand.get(id);
                }
            }
            if wanted.iter().zip(&free).all(|(&(_, w), &f)| f >= w)
                && self.trial(workspace, gang, bundles, &chosen, false).is_some()
            {
                fits = true;
                break;
            }
        }
        if !fits {
            return None;
        }
        // Preemption inside a queue swaps what the queue holds; it never evicts so that the
        // queue can borrow beyond its fair share (what it borrows could be reclaimed at
        // once, and the victims would have been evicted for nothing).
        let swap = |chosen: &[usize]| kind != Kind::Preempt || self.within_share(state, leaf, need, bundles, chosen);
        if !swap(&chosen) {
            return None;
        }
        // The fewest: drop, newest choice first, every bundle the gang fits without.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let mut without = chosen.clone();
            without.remove(i);
            if !without.is_empty() && swap(&without) && self.trial(workspace, gang, bundles, &without, false).is_some()
            {
                chosen = without;
            }
        }
        // What queues hold once the final set is gone.
        let pods = self.pods_of(bundles, &chosen);
        // A hard cap on gangs evicted per cycle: a set that would pass it is not taken.
        let gangs = pods.iter().map(|&(r, _)| r).collect::<std::collections::BTreeSet<usize>>().len();
        let cap = self.config.max_evicted_gangs;
        if cap > 0 && self.evicted_gangs + gangs > cap {
            return None;
        }
        let after = self.allocated_without(state, &pods);
        let picked: Vec<&Bundle> = chosen.iter().map(|&i| &bundles[i]).collect();
        if kind == Kind::Reclaim && !self.post_condition(state, &after, &picked, need) {
            return None;
        }
        let fit = self.trial(workspace, gang, bundles, &chosen, true)?;
        workspace.hold_leftover(pods.iter().map(|&(r, p)| &snapshot.running[r].pods[p]), gang, &fit);
        let reason = match kind {
            Kind::Reclaim => EvictionReason::Reclaimed,
            Kind::Preempt | Kind::Borrow => EvictionReason::Preempted,
        };
        Some(self.commit(state, gang, leaf, reason, pods, fit))
    }

    /// What each queue holds (`state.allocated`, along every queue's path) once the victim
    /// pods `pods`, as (running gang, pod), are gone.
    fn allocated_without(&self, state: &QueueState, pods: &[(usize, usize)]) -> Vec<Vec<i64>> {
        let (snapshot, tree) = (self.snapshot, &self.snapshot.queues);
        let mut after = state.allocated.clone();
        for &(r, p) in pods {
            if let Some(victim_leaf) = tree.get(&snapshot.running[r].queue) {
                let taken = self.amounts(r, std::iter::once(p));
                for q in tree.path(victim_leaf) {
                    for (k, t) in taken.iter().enumerate() {
                        after[q][k] -= t;
                    }
                }
            }
        }
        after
    }

    /// Records the evictions, and moves what the victims held in their queues to the gang.
    pub(super) fn commit(
        &mut self,
        state: &mut QueueState,
        gang: &Gang,
        leaf: usize,
        reason: EvictionReason,
        pods: Vec<(usize, usize)>,
        fit: GangFit,
    ) -> Plan {
        let snapshot = self.snapshot;
        let tree = &snapshot.queues;
        let mut evictions: Vec<Eviction> = Vec::new();
        let mut grace = 0;
        for (r, p) in pods {
            let victim = &snapshot.running[r];
            self.gone[r][p] = true;
            grace = grace.max(victim.pods[p].grace_seconds);
            if let Some(leaf) = tree.get(&victim.queue) {
                let amounts = self.amounts(r, std::iter::once(p));
                state.discharge(tree, leaf, &amounts, !victim.preemptible);
                for q in tree.path(leaf) {
                    for (k, t) in amounts.iter().enumerate() {
                        self.start[q][k] -= t;
                    }
                }
            }
            match evictions.last_mut() {
                Some(e) if e.gang == victim.key => e.pods.push(victim.pods[p].key.clone()),
                _ => evictions.push(Eviction {
                    gang: victim.key.clone(),
                    pods: vec![victim.pods[p].key.clone()],
                    whole: false,
                    reason,
                    preemptor: gang.key.clone(),
                }),
            }
        }
        for e in &mut evictions {
            let r = snapshot.running.iter().position(|r| r.key == e.gang).expect("a victim runs");
            e.whole = self.gone[r].iter().all(|&g| g);
        }
        self.evicted_gangs += evictions.len();
        state.charge_placed(tree, &snapshot.dra, leaf, gang, &fit.pods, &fit.claims);
        let until = snapshot.now.saturating_add(self.config.reservation_timeout.unwrap_or(grace.saturating_add(60)));
        Plan { evictions, fit, until }
    }
}

/// What a gang asks for in all, per resource, counting only the pods it must have (a trial
/// may add more where they fit).
fn gang_demand(gang: &Gang) -> Vec<(ResourceId, i64)> {
    let mut wanted: Vec<(ResourceId, i64)> = Vec::new();
    for pod in &gang.pods[..gang.pods_now()] {
        for &(id, amount) in pod.demand.entries() {
            match wanted.iter_mut().find(|(w, _)| *w == id) {
                Some(entry) => entry.1 += amount,
                None => wanted.push((id, amount)),
            }
        }
    }
    wanted
}
