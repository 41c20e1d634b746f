//! What kube-scheduler's InterPodAffinity and PodTopologySpread scores make of the
//! preferences between pods, over the nodes that can take a pod now: the pod's preferred
//! pod affinity and anti-affinity terms, the terms of the pods around it that select it,
//! and its `ScheduleAnyway` spread constraints, each plugin normalised to 0..=100 over those
//! nodes as kube-scheduler 1.37 normalises it, and weighted as the configuration says (its
//! default profile's 2 each by default).

use super::keys::Values;
use super::tables::Reach;
use super::work::{PodWork, ShapeTables};
use crate::engine::model::NodeIdx;
use crate::engine::place::score::Weights;
use crate::engine::pods::Labels;

/// The best normalised score of one plugin.
const MAX: i64 = 100;
/// PodTopologySpread counts a hostname domain per node, not by looking its value up.
const HOSTNAME: &str = "kubernetes.io/hostname";

impl<'s> PodWork<'s> {
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
        raw.clear();
        raw.resize(feasible.len(), 0);
        if self.pulled(namespace, labels) {
            let id = self.reached(Reach::Pull, namespace, labels);
            let table = &self.reaches[Reach::Pull as usize].tables[id];
            for (key, by_value) in &table.counts {
                let values = self.keys.values(*key);
                for (score, &n) in raw.iter_mut().zip(feasible) {
                    if let Some(&w) = values[n as usize].and_then(|v| by_value.get(v)) {
                        *score += i64::from(w);
                    }
                }
            }
        }
        for &(weight, t) in tables.map(|t| t.preferred.as_slice()).unwrap_or_default() {
            let values = self.terms[t].values.clone();
            let counts = &self.terms[t].counts;
            for (score, &n) in raw.iter_mut().zip(feasible) {
                if let Some(&c) = values[n as usize].and_then(|v| counts.get(v)) {
                    *score += i64::from(weight) * i64::from(c);
                }
            }
        }
    }

    /// PodTopologySpread before normalisation: per node (None for one without every key of
    /// the constraints, unless they are kube-scheduler's own defaults), each constraint
    /// whose key the node has: its matching pods in the node's domain, weighted by the log
    /// of how many domains the counted feasible nodes make, plus its `maxSkew` less one.
    fn spread_scores(&mut self, tables: &ShapeTables, feasible: &[NodeIdx]) -> Vec<Option<i64>> {
        let values: Vec<Values<'s>> = tables.soft_spread.iter().map(|&t| self.spread[t].values.clone()).collect();
        let rules: Vec<_> = tables.soft_spread.iter().map(|&t| &self.spread[t]).collect();
        let counted = |n: NodeIdx| tables.system_spread || values.iter().all(|v| v[n as usize].is_some());
        let kept: Vec<NodeIdx> = feasible.iter().copied().filter(|&n| counted(n)).collect();
        let weights: Vec<f64> = rules
            .iter()
            .zip(&values)
            .map(|(t, values)| {
                let size = match t.rule.topology_key.as_str() {
                    HOSTNAME => kept.len(),
                    // A node without the key makes the domain "" (as kube-scheduler counts
                    // it under its own defaults).
                    _ => distinct(kept.iter().map(|&n| values[n as usize].unwrap_or(""))),
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let score = |n: NodeIdx| -> i64 {
            let each = rules.iter().zip(&weights).zip(&values).filter_map(|((t, w), values)| {
                let count = t.counts.get(values[n as usize]?).copied().unwrap_or(0);
                Some(count as f64 * w + f64::from(t.rule.max_skew - 1))
            });
            each.sum::<f64>().round() as i64
        };
        feasible.iter().map(|&n| counted(n).then(|| score(n))).collect()
    }
}

/// How many distinct values `values` holds: looked up in a short list while there are few
/// (zones, racks: a handful per cluster), in a set past that.
fn distinct<'v>(values: impl Iterator<Item = &'v str>) -> usize {
    const FEW: usize = 16;
    let mut few: Vec<&str> = Vec::with_capacity(FEW);
    let mut many: Option<std::collections::HashSet<&str>> = None;
    for value in values {
        match many.as_mut() {
            Some(set) => {
                set.insert(value);
            }
            None if few.contains(&value) => {}
            None if few.len() < FEW => few.push(value),
            None => {
                let mut set: std::collections::HashSet<&str> = few.drain(..).collect();
                set.insert(value);
                many = Some(set);
            }
        }
    }
    many.map_or(few.len(), |set| set.len())
}
