//! Pods whose node the rules between pods score (their own preferred pod affinity,
//! anti-affinity or `ScheduleAnyway` spread, or the preferred terms of pods around them that
//! select them) are placed one at a time, each on the node that kube-scheduler's scores
//! rank best among those that can take it at that moment, so that each sees the pods
//! placed before it, its own gang's among them (decision 0101). Ties go to the node
//! Muster's packing order puts first.

use std::iter::Peekable;
use std::slice::Iter;

use super::Workspace;
use super::score::node_preferences;
use super::transaction::{Delta, GangFit};
use crate::engine::model::{Gang, NodeIdx, PendingPod, PodKey};

impl Workspace<'_> {
    /// Whether pods of the shape go to the node that scores best rather than the first
    /// that fits.
    pub(super) fn scored(&mut self, shape: usize, pod: &PendingPod) -> bool {
        self.shapes[shape].tables.as_ref().is_some_and(|t| t.prefers())
            || self.pods.pulled(&pod.key.namespace, &pod.labels)
    }

    /// The nodes an unscoped placement of the shape goes through: the open ones while
    /// capacity has not grown (`open`), else every candidate.
    pub(super) fn scan_list(&self, shape: usize, open: bool) -> Vec<NodeIdx> {
        match &self.shapes[shape].open {
            Some(list) if open => list.to_vec(),
            _ => self.shapes[shape].candidates.to_vec(),
        }
    }

    /// The nodes of `list` that can take `pod` (of the shape) now, each with its score
    /// (negated) and place in the list: the best is the least.
    fn ranked(&mut self, shape: usize, list: &[NodeIdx], pod: &PendingPod) -> Vec<(i64, usize, NodeIdx)> {
        let tables = self.shapes[shape].tables.take();
        let demand = &self.shapes[shape].demand;
        let (namespace, labels) = (&pod.key.namespace, &pod.labels);
        let mut feasible = Vec::new();
        for &n in list {
            if self.reserved[n as usize] || self.free[n as usize].fit_count(demand, 1) == 0 {
                continue;
            }
            if self.pods.check(tables.as_ref(), n, namespace, labels, pod.rules.as_deref()).is_ok() {
                feasible.push(n);
            }
        }
        let mut scores = Vec::new();
        self.pods.scores(tables.as_ref(), namespace, labels, &feasible, &self.weights, &mut scores);
        self.shapes[shape].tables = tables;
        if let Some(preferred) = node_preferences(&self.snapshot.nodes, &feasible, &pod.constraints, &self.weights) {
            scores.iter_mut().zip(preferred).for_each(|(s, p)| *s += p);
        }
        scores.iter().zip(feasible).enumerate().map(|(i, (&s, n))| (-s, i, n)).collect()
    }

    /// Places the shape's pods `next` gives, each on its best node of `list`, until one
    /// finds none.
    pub(super) fn place_by_score(
        &mut self,
        shape: usize,
        list: &[NodeIdx],
        gang: &Gang,
        next: &mut Peekable<Iter<'_, usize>>,
        fit: &mut GangFit,
        deltas: &mut Vec<(NodeIdx, Delta, i64)>,
    ) -> Result<(), (PodKey, String)> {
        while let Some(&&member) = next.peek() {
            let mut ranked = self.ranked(shape, list, &gang.pods[member]);
            let mut placed = false;
            // The best first; the next best only if its claims do not fit there.
            while let Some(best) = ranked.iter().enumerate().min_by_key(|(_, r)| **r).map(|(i, _)| i) {
                let (_, _, node) = ranked.swap_remove(best);
                if self.fill_node(shape, node, 1, gang, next, fit, deltas)? > 0 {
                    placed = true;
                    break;
                }
            }
            if !placed {
                break;
            }
        }
        Ok(())
    }
}
