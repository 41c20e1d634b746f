//! Opportunistic backfill, the eviction side: gangs placed in capacity held for a
//! reservation run there only until the reserved gang can start. When the gang the cycle's
//! reservation is for fits with some of them gone (and not before), the fewest of them
//! that let it fit are evicted whole, and the capacity they free is held for it as any
//! eviction's is.

use super::EvictionReason;
use super::candidates::Bundle;
use super::plan::{Evictor, Plan};
use crate::engine::admission::QueueState;
use crate::engine::model::{Gang, RunningPod};
use crate::engine::place::Workspace;

impl Evictor<'_> {
    /// Running gangs that ran opportunistically and may be evicted for a reservation now:
    /// preemptible, not the gang itself, not grown and not evicted in this cycle.
    fn held_victims(&self, gang: &Gang) -> Vec<usize> {
        let running = &self.snapshot.running;
        (0..running.len())
            .filter(|&r| {
                let victim = &running[r];
                victim.opportunistic
                    && victim.preemptible
                    && victim.key != gang.key
                    && !self.grown[r]
                    && !self.gone[r].iter().any(|&g| g)
            })
            .collect()
    }

    /// Pods that run opportunistically and are still there: a reservation counts on them
    /// leaving whenever it needs their capacity.
    pub fn leaving(&self) -> impl Iterator<Item = &RunningPod> + '_ {
        let running = &self.snapshot.running;
        (0..running.len())
            .filter(|&r| running[r].opportunistic && running[r].preemptible)
            .flat_map(move |r| (0..running[r].pods.len()).filter(move |&p| !self.gone[r][p]).map(move |p| (r, p)))
            .map(move |(r, p)| &running[r].pods[p])
    }

    /// Evicts, for `gang` (the gang a reservation is for, in `leaf`), the fewest
    /// opportunistic gangs whose going lets it be placed now; None (nothing changed) when
    /// it would not fit even with all of them gone, or the cap on evictions per cycle
    /// would be passed.
    pub(super) fn reclaim_held(
        &mut self,
        workspace: &mut Workspace<'_>,
        state: &mut QueueState,
        gang: &Gang,
        leaf: usize,
    ) -> Option<Plan> {
        let snapshot = self.snapshot;
        let mut victims = self.held_victims(gang);
        if victims.is_empty() {
            return None;
        }
        // Least disruptive first: lowest priority, then the most recently started (the
        // least work lost), then the most recently created.
        victims.sort_by_key(|&r| {
            let victim = &snapshot.running[r];
            (victim.priority, -victim.last_started(), -victim.created, r)
        });
        let bundles: Vec<Bundle> = victims
            .iter()
            .map(|&r| Bundle {
                running: r,
                pods: (0..snapshot.running[r].pods.len()).collect(),
                side: leaf,
                own_side: leaf,
            })
            .collect();
        let all: Vec<usize> = (0..bundles.len()).collect();
        self.trial(workspace, gang, &bundles, &all, false)?;
        // The shortest prefix of that order that lets it fit (more gone never makes it
        // fit less), then the fewest: each chosen gang dropped, newest choice first, when
        // the gang fits without it.
        let (mut low, mut high) = (1, bundles.len());
        while low < high {
            let middle = (low + high) / 2;
            if self.trial(workspace, gang, &bundles, &all[..middle], false).is_some() {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        let mut chosen: Vec<usize> = all[..high].to_vec();
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let mut without = chosen.clone();
            without.remove(i);
            if !without.is_empty() && self.trial(workspace, gang, &bundles, &without, false).is_some() {
                chosen = without;
            }
        }
        let cap = self.config.max_evicted_gangs;
        if cap > 0 && self.evicted_gangs + chosen.len() > cap {
            return None;
        }
        let pods = self.pods_of(&bundles, &chosen);
        let fit = self.trial(workspace, gang, &bundles, &chosen, true)?;
        workspace.hold_leftover(pods.iter().map(|&(r, p)| &snapshot.running[r].pods[p]), gang, &fit);
        Some(self.commit(state, gang, leaf, EvictionReason::Opportunistic, pods, fit))
    }
}
