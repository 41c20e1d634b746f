//! Trials: what placement would look like if some running pods were gone. Evictions are
//! planned by giving back their pods' capacity and devices in the working copy, placing the
//! gang they are for, and keeping the result only when the plan is chosen; everything else
//! is undone.

use super::Workspace;
use super::transaction::take;
use crate::engine::claims::ClaimMark;
use crate::engine::model::{Gang, NodeIdx, RunningPod};
use crate::engine::place::GangFit;
use crate::engine::resources::Capacity;

/// A point to undo a trial to.
pub struct TrialMark {
    journal: usize,
    claims: ClaimMark,
    pods: usize,
    cursors: Vec<usize>,
    grown: bool,
}

impl Workspace<'_> {
    /// Starts recording changes so that they can be undone to this point.
    pub fn trial(&mut self) -> TrialMark {
        let journal = self.journal.get_or_insert_with(Vec::new).len();
        TrialMark {
            journal,
            claims: self.claims.mark(),
            pods: self.pods.mark(),
            cursors: self.shapes.iter().map(|s| s.cursor).collect(),
            grown: self.grown,
        }
    }

    /// Gives back what a running pod holds: its requests on its node, its own devices, and
    /// its part in the rules between pods.
    /// Capacity grows, so every shape's cursor starts over.
    pub fn release(&mut self, pod: &RunningPod) {
        take(
            &mut self.free,
            &mut self.domain_free,
            &mut self.journal,
            &self.snapshot.topology,
            pod.node,
            &pod.demand,
            -1,
        );
        for used in &pod.devices {
            self.claims.state.release(self.claims.dra, used);
        }
        self.pods.release(pod.node, &pod.key);
        for shape in &mut self.shapes {
            shape.cursor = 0;
        }
        self.grown = true;
    }

    /// Undoes everything since `mark`.
    pub fn undo_trial(&mut self, mark: TrialMark) {
        let journal = self.journal.as_mut().expect("a trial was started");
        let undo: Vec<_> = journal.drain(mark.journal..).collect();
        for (node, demand, k) in undo.into_iter().rev() {
            take(&mut self.free, &mut self.domain_free, &mut None, &self.snapshot.topology, node, &demand, -k);
        }
        self.claims.rollback(mark.claims);
        self.pods.rollback(mark.pods);
        for (i, shape) in self.shapes.iter_mut().enumerate() {
            shape.cursor = mark.cursors.get(i).copied().unwrap_or(0);
        }
        // Capacity is as it was at the mark: grown only if it had grown then.
        self.grown = mark.grown;
        if mark.journal == 0 {
            self.journal = None;
        }
    }

    /// Keeps everything done since the trial started, and stops recording.
    pub fn keep_trial(&mut self) {
        self.journal = None;
    }

    /// After an eviction plan is kept: holds again, for the rest of the cycle, what its
    /// victims free beyond what the gang's trial took on each node (and their devices the
    /// gang did not take). The victims are still exiting: a pod bound there now would be
    /// refused by its kubelet, so only the gang the room was made for may count on it.
    pub fn hold_leftover<'p>(&mut self, victims: impl Iterator<Item = &'p RunningPod>, gang: &Gang, fit: &GangFit) {
        let mut freed: Vec<(NodeIdx, Capacity)> = Vec::new();
        for pod in victims {
            match freed.iter_mut().find(|(n, _)| *n == pod.node) {
                Some((_, amounts)) => amounts.add(&pod.demand, 1),
                None => {
                    let mut amounts = Capacity::default();
                    amounts.add(&pod.demand, 1);
                    freed.push((pod.node, amounts));
                }
            }
            for used in &pod.devices {
                self.claims.state.hold_again(self.claims.dra, used);
            }
        }
        for &(p, node) in &fit.pods {
            if let Some((_, amounts)) = freed.iter_mut().find(|(n, _)| *n == node) {
                amounts.sub(&gang.pods[p].demand, 1);
            }
        }
        for (node, amounts) in freed {
            let left = amounts.positive();
            if !left.entries().is_empty() {
                take(&mut self.free, &mut self.domain_free, &mut None, &self.snapshot.topology, node, &left, 1);
            }
        }
    }
}
