//! What kube-scheduler's InterPodAffinity and PodTopologySpread scores make of the
//! preferences between pods, over the nodes that can take a pod now: the pod's preferred
//! pod affinity and anti-affinity terms, the terms of the pods around it that select it,
//! and its `ScheduleAnyway` spread constraints, each plugin normalised to 0..=100 over those
//! nodes as kube-scheduler 1.37 normalises it, and weighted as the configuration says (its
//! default profile's 2 each by default).

use super::tables::Reach;
use super::work::{PodWork, ShapeTables};
use crate::engine::model::NodeIdx;
use crate::engine::place::score::Weights;
use crate::engine::pods::Labels;

/// The best normalised score of one plugin.
const MAX: i64 = 100;
/// PodTopologySpread counts a hostname domain per node, not by looking its value up.
const HOSTNAME: &str = "kubernetes.io/hostname";

impl PodWork<'_> {
    /// Whether pods around a pod of `namespace` with `labels` draw or repel it in scoring.
    pub fn pulled(&mut self, namespace: &str, labels: &Labels) -> bool {
        if !self.pulls_anywhere() {
            return false;
        }
        let id = self.reached(Reach::Pull, namespace, labels);
        !self.reaches[Reach::Pull as usize].tables[id].counts.is_empty()
    }

    /// The score the rules between pods give a pod of `namespace` with `labels` (and the
    /// shape's `tables`) on each of `feasible`, in `out`.
    pub fn scores(
        &mut self,
        tables: Option<&ShapeTables>,
        namespace: &str,
        labels: &Labels,
        feasible: &[NodeIdx],
        weights: &Weights,
        out: &mut Vec<i64>,
    ) {
        out.clear();
        out.resize(feasible.len(), 0);
        let mut raw = Vec::with_capacity(feasible.len());
        self.affinity_scores(tables, namespace, labels, feasible, &mut raw);
        let (least, most) = (raw.iter().copied().min().unwrap_or(0), raw.iter().copied().max().unwrap_or(0));
        if most > least {
            for (total, &s) in out.iter_mut().zip(&raw) {
                *total += weights.inter_pod_affinity * (MAX as f64 * (s - least) as f64 / (most - least) as f64) as i64;
            }
        }
        if let Some(tables) = tables.filter(|t| !t.soft_spread.is_empty()) {
            let spread = self.spread_scores(tables, feasible);
            let counted = spread.iter().flatten();
            let (least, most) = (counted.clone().copied().min().unwrap_or(0), counted.copied().max().unwrap_or(0));
            for (total, s) in out.iter_mut().zip(spread) {
                *total += weights.pod_topology_spread
                    * match s {
                        None => 0,
                        Some(_) if most == 0 => MAX,
                        Some(s) => MAX * (most + least - s) / most,
                    };
            }
        }
    }

    /// InterPodAffinity before normalisation: per node, the weights of the pod's preferred
    /// terms times the pods they match in the node's domain (anti-affinity negative), plus
    /// what the pods around it reach it with.
    fn affinity_scores(
        &mut self,
        tables: Option<&ShapeTables>,
        namespace: &str,
        labels: &Labels,
        feasible: &[NodeIdx],
        raw: &mut Vec<i64>,
    ) {
        let pull = self.pulled(namespace, labels).then(|| self.reached(Reach::Pull, namespace, labels));
        let pull = pull.map(|id| &self.reaches[Reach::Pull as usize].tables[id]);
        let preferred = tables.map(|t| t.preferred.as_slice()).unwrap_or_default();
        for &n in feasible {
            let node = &self.nodes[n as usize];
            let mut score = pull.map_or(0, |p| p.score(node));
            for &(weight, t) in preferred {
                let table = &self.terms[t];
                if let Some(value) = node.labels.get(&table.term.topology_key) {
                    score += i64::from(weight) * i64::from(table.counts.get(value.as_str()).copied().unwrap_or(0));
                }
            }
            raw.push(score);
        }
    }

    /// PodTopologySpread before normalisation: per node (None for one without every key of
    /// the constraints, unless they are kube-scheduler's own defaults), each constraint
    /// whose key the node has: its matching pods in the node's domain, weighted by the log
    /// of how many domains the counted feasible nodes make, plus its `maxSkew` less one.
    fn spread_scores(&self, tables: &ShapeTables, feasible: &[NodeIdx]) -> Vec<Option<i64>> {
        let rules: Vec<_> = tables.soft_spread.iter().map(|&t| &self.spread[t]).collect();
        let has = |n: NodeIdx, key: &str| self.nodes[n as usize].labels.contains_key(key);
        let counted = |n: NodeIdx| tables.system_spread || rules.iter().all(|t| has(n, &t.rule.topology_key));
        let kept: Vec<NodeIdx> = feasible.iter().copied().filter(|&n| counted(n)).collect();
        let weights: Vec<f64> = rules
            .iter()
            .map(|t| {
                let size = match t.rule.topology_key.as_str() {
                    HOSTNAME => kept.len(),
                    key => {
                        // A node without the key makes the domain "" (as kube-scheduler
                        // counts it under its own defaults).
                        let value = |n: NodeIdx| self.nodes[n as usize].labels.get(key).map_or("", String::as_str);
                        let mut values: Vec<&str> = kept.iter().map(|&n| value(n)).collect();
                        values.sort_unstable();
                        values.dedup();
                        values.len()
                    }
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let score = |n: NodeIdx| -> i64 {
            let node = &self.nodes[n as usize];
            let each = rules.iter().zip(&weights).filter_map(|(t, w)| {
                let value = node.labels.get(&t.rule.topology_key)?;
                let count = t.counts.get(value.as_str()).copied().unwrap_or(0);
                Some(count as f64 * w + f64::from(t.rule.max_skew - 1))
            });
            each.sum::<f64>().round() as i64
        };
        feasible.iter().map(|&n| counted(n).then(|| score(n))).collect()
    }
}
