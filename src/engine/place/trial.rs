//! Trials: what placement would look like if some running pods were gone. Evictions are
//! planned by giving back their pods' capacity and devices in the working copy, placing the
//! gang they are for, and keeping the result only when the plan is chosen; everything else
//! is undone.

use super::Workspace;
use super::transaction::take;
use crate::engine::claims::ClaimMark;
use crate::engine::model::RunningPod;

/// A point to undo a trial to.
pub struct TrialMark {
    journal: usize,
    claims: ClaimMark,
    cursors: Vec<usize>,
}

impl Workspace<'_> {
    /// Starts recording changes so that they can be undone to this point.
    pub fn trial(&mut self) -> TrialMark {
        let journal = self.journal.get_or_insert_with(Vec::new).len();
        TrialMark { journal, claims: self.claims.mark(), cursors: self.shapes.iter().map(|s| s.cursor).collect() }
    }

    /// Gives back what a running pod holds: its requests on its node and its own devices.
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
        for shape in &mut self.shapes {
            shape.cursor = 0;
        }
    }

    /// Undoes everything since `mark`.
    pub fn undo_trial(&mut self, mark: TrialMark) {
        let journal = self.journal.as_mut().expect("a trial was started");
        let undo: Vec<_> = journal.drain(mark.journal..).collect();
        for (node, demand, k) in undo.into_iter().rev() {
            take(&mut self.free, &mut self.domain_free, &mut None, &self.snapshot.topology, node, &demand, -k);
        }
        self.claims.rollback(mark.claims);
        for (i, shape) in self.shapes.iter_mut().enumerate() {
            shape.cursor = mark.cursors.get(i).copied().unwrap_or(0);
        }
        if mark.journal == 0 {
            self.journal = None;
        }
    }

    /// Keeps everything done since the trial started, and stops recording.
    pub fn keep_trial(&mut self) {
        self.journal = None;
    }
}
