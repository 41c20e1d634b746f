//! Timed backfill (the EASY backfill of batch schedulers): the first gangs in queue order
//! that do not fit get the earliest time their capacity is expected to be free (their
//! *shadow time*), from when the pods running will end by their runtime bounds; what a gang
//! will take then beyond what ends by then is held from now. Later gangs are placed around
//! what is held, or into it when their own bound ends before every shadow time and every
//! reserved gang still fits at its shadow time afterwards. Pods that run opportunistically
//! leave whenever a reservation needs their capacity: they count as ending now, and an
//! opportunistic gang placed in held capacity is placed as one that ends now.

use super::transaction::take;
use super::{GangFit, Workspace};
use crate::engine::model::{Ending, Gang, GangKey, NodeIdx, PodKey, RunningPod};
use crate::engine::resources::{Capacity, Demand};

/// Amounts per node.
type PerNode = Vec<(NodeIdx, Demand)>;

/// A gang's timed reservation.
#[derive(Clone, Debug)]
pub struct TimedReservation {
    /// The gang as it was admitted (its pods placed at the shadow time).
    pub gang: Gang,
    /// When it is expected to fit, in seconds.
    pub shadow: i64,
    /// Per node, the part of what it takes at the shadow time that pods ending by then do
    /// not free: held from now.
    hold: PerNode,
    /// Per node, the rest: what it counts on pods ending to free.
    covered: PerNode,
}

/// What a gang that did not fit in free capacity gets from the timed reservations.
#[derive(Debug)]
pub enum Backfilled {
    /// It ends before every shadow time and no reserved gang is delayed: placed.
    Placed(GangFit),
    /// It would fit in held capacity, but would delay `gang`'s start at `shadow`.
    Delays { gang: GangKey, shadow: i64 },
    /// It would not fit even in held capacity.
    No,
}

/// One cycle's timed reservations and the endings they count on.
#[derive(Debug, Default)]
pub struct Timed {
    /// Bound pods' endings, none before the snapshot's time.
    endings: Vec<Ending>,
    /// Pods placed into held capacity in this cycle, ending by their bound.
    placed: Vec<Ending>,
    /// Pods running opportunistically: evicted when a reservation needs them, so gone as
    /// soon as it does.
    leaving: Vec<(PodKey, Ending)>,
    pub reservations: Vec<TimedReservation>,
}

impl Timed {
    /// `leaving`: the pods that run opportunistically.
    pub fn new<'p>(endings: &[Ending], leaving: impl Iterator<Item = &'p RunningPod>, now: i64) -> Timed {
        let endings = endings.iter().map(|e| Ending { at: e.at.max(now), ..e.clone() }).collect();
        let leaving = leaving
            .map(|pod| (pod.key.clone(), Ending { at: now, node: pod.node, demand: pod.demand.clone() }))
            .collect();
        Timed { endings, placed: Vec::new(), leaving, reservations: Vec::new() }
    }

    /// Opportunistic pods evicted in this cycle: what they free is taken already.
    pub fn gone(&mut self, pods: &[PodKey]) {
        self.leaving.retain(|(key, _)| !pods.contains(key));
    }

    fn all_endings(&self) -> impl Iterator<Item = &Ending> {
        self.endings.iter().chain(&self.placed).chain(self.leaving.iter().map(|(_, e)| e))
    }

    /// Whether `gang` would fit at time `at`, once the pods ending by then are gone and the
    /// first `earlier` reservations hold all they count on; changes nothing.
    fn fits_at(&self, workspace: &mut Workspace<'_>, gang: &Gang, at: i64, earlier: usize) -> Option<GangFit> {
        let mark = workspace.trial();
        for reservation in &self.reservations[..earlier] {
            for (node, covered) in &reservation.covered {
                workspace.adjust(*node, covered, 1);
            }
        }
        for ending in self.all_endings().filter(|e| e.at <= at) {
            workspace.adjust(ending.node, &ending.demand, -1);
        }
        let fit = workspace.place(gang).ok();
        workspace.undo_trial(mark);
        fit
    }

    /// The earliest time the known endings let `gang` fit, and its placement then.
    fn shadow(&self, workspace: &mut Workspace<'_>, gang: &Gang, earlier: usize) -> Option<(i64, GangFit)> {
        let mut times: Vec<i64> = self.all_endings().map(|e| e.at).collect();
        times.sort_unstable();
        times.dedup();
        let mut best = self.fits_at(workspace, gang, *times.last()?, earlier)?;
        // Capacity only grows with time: the first time it fits, by bisection.
        let (mut low, mut high) = (0, times.len() - 1);
        while low < high {
            let middle = (low + high) / 2;
            match self.fits_at(workspace, gang, times[middle], earlier) {
                Some(fit) => {
                    best = fit;
                    high = middle;
                }
                None => low = middle + 1,
            }
        }
        Some((times[high], best))
    }

    /// What `gang` placed as `fit` at `shadow` holds from now, and what it counts on.
    fn split(&self, gang: &Gang, fit: &GangFit, shadow: i64) -> (PerNode, PerNode) {
        let mut takes: Vec<(NodeIdx, Capacity, Capacity)> = Vec::new();
        for &(pod, node) in &fit.pods {
            let at = match takes.iter().position(|(n, _, _)| *n == node) {
                Some(at) => at,
                None => {
                    takes.push((node, Capacity::default(), Capacity::default()));
                    takes.len() - 1
                }
            };
            takes[at].1.add(&gang.pods[pod].demand, 1);
        }
        for ending in self.all_endings().filter(|e| e.at <= shadow) {
            if let Some((_, _, freed)) = takes.iter_mut().find(|(n, _, _)| *n == ending.node) {
                freed.add(&ending.demand, 1);
            }
        }
        let (mut hold, mut covered) = (Vec::new(), Vec::new());
        for (node, taken, freed) in takes {
            let mut short = taken.clone();
            short.sub(&freed.positive(), 1);
            let held = short.positive();
            let mut rest = taken;
            rest.sub(&held, 1);
            if !held.entries().is_empty() {
                hold.push((node, held));
            }
            let rest = rest.positive();
            if !rest.entries().is_empty() {
                covered.push((node, rest));
            }
        }
        (hold, covered)
    }

    /// Gives `gang` a timed reservation when the known endings let it fit at some time,
    /// and holds what it needs from now; returns its shadow time.
    pub fn reserve(&mut self, workspace: &mut Workspace<'_>, gang: &Gang) -> Option<i64> {
        let (shadow, fit) = self.shadow(workspace, gang, self.reservations.len())?;
        let (hold, covered) = self.split(gang, &fit, shadow);
        for (node, held) in &hold {
            workspace.adjust(*node, held, 1);
        }
        self.reservations.push(TimedReservation { gang: gang.clone(), shadow, hold, covered });
        Some(shadow)
    }

    /// Tries `gang`, which did not fit in free capacity, in the capacity held for the
    /// reservations: placed only when its bound ends before every shadow time and every
    /// reserved gang still fits at its own afterwards. `opportunistic`: it is placed to be
    /// evicted when a reserved gang needs its capacity, so it counts as ending now.
    pub fn backfill(
        &mut self,
        workspace: &mut Workspace<'_>,
        gang: &Gang,
        now: i64,
        opportunistic: bool,
    ) -> Backfilled {
        let Some(first) = self.reservations.iter().filter(|r| !r.hold.is_empty()).min_by_key(|r| r.shadow) else {
            return Backfilled::No;
        };
        let delays = Backfilled::Delays { gang: first.gang.key.clone(), shadow: first.shadow };
        let ends = if opportunistic { Some(now) } else { gang.max_run_seconds.map(|bound| now.saturating_add(bound)) };
        let short = ends.is_some_and(|end| self.reservations.iter().all(|r| end <= r.shadow));
        let mark = workspace.trial();
        for reservation in &self.reservations {
            for (node, held) in &reservation.hold {
                workspace.adjust(*node, held, -1);
            }
        }
        let Ok(fit) = workspace.place(gang) else {
            workspace.undo_trial(mark);
            return Backfilled::No;
        };
        let Some(end) = ends.filter(|_| short) else {
            workspace.undo_trial(mark);
            return delays;
        };
        let before = (self.placed.len(), self.reservations.clone());
        self.placed.extend(fit.pods.iter().map(|&(pod, node)| Ending {
            at: end,
            node,
            demand: gang.pods[pod].demand.clone(),
        }));
        for r in 0..self.reservations.len() {
            let (reserved, shadow) = (&self.reservations[r].gang, self.reservations[r].shadow);
            match self.fits_at(workspace, reserved, shadow, r) {
                Some(again) => {
                    let (hold, covered) = self.split(reserved, &again, shadow);
                    self.reservations[r].hold = hold;
                    self.reservations[r].covered = covered;
                }
                None => {
                    let delayed = Backfilled::Delays { gang: reserved.key.clone(), shadow };
                    self.placed.truncate(before.0);
                    self.reservations = before.1;
                    workspace.undo_trial(mark);
                    return delayed;
                }
            }
        }
        for reservation in &self.reservations {
            for (node, held) in &reservation.hold {
                workspace.adjust(*node, held, 1);
            }
        }
        workspace.keep_trial();
        Backfilled::Placed(fit)
    }
}

impl Workspace<'_> {
    /// Takes `k` copies of `demand` from a node's free capacity (gives them back when `k` is
    /// negative: every shape's cursor starts over, as capacity grew).
    fn adjust(&mut self, node: NodeIdx, demand: &Demand, k: i64) {
        take(&mut self.free, &mut self.domain_free, &mut self.journal, &self.snapshot.topology, node, demand, k);
        if k < 0 {
            self.grown = true;
            for shape in &mut self.shapes {
                shape.cursor = 0;
            }
        }
    }
}
