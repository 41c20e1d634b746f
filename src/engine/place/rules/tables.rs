//! The counts one cycle keeps for the rules between pods, as kube-scheduler's PreFilter
//! states hold them: pods matching a pod's affinity or anti-affinity per topology value,
//! the bound pods' anti-affinity against a pod, and a spread constraint's pods per domain.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use crate::engine::filter::{matches_node_affinity, untolerated_taint};
use crate::engine::model::{NodeConstraints, NodeIdx};
use crate::engine::node::Node;
use crate::engine::pods::{Labels, PodRules, PodTerm, SpreadRule};

/// A pod as a table counts it: added (`sign` 1) or taken away (-1).
pub(super) struct Counted<'p, 's> {
    pub index: NodeIdx,
    pub node: &'s Node,
    pub namespace: &'p str,
    pub labels: &'p BTreeMap<String, String>,
    pub rules: Option<&'p PodRules>,
    pub terminating: bool,
    pub sign: i32,
}

/// Adds `sign` at `key`, dropping an entry that reaches zero (an entry means "some pod").
fn bump<'s>(counts: &mut HashMap<&'s str, i32>, key: &'s str, sign: i32) {
    match counts.get_mut(key) {
        Some(count) => {
            *count += sign;
            if *count == 0 {
                counts.remove(key);
            }
        }
        None if sign != 0 => {
            counts.insert(key, sign);
        }
        None => {}
    }
}

/// Pods matching every one of a pod's required affinity terms, per term and value.
pub(super) struct AffinityCount<'s> {
    pub terms: Vec<PodTerm>,
    pub per_term: Vec<HashMap<&'s str, i32>>,
    pub total: i32,
}

impl<'s> AffinityCount<'s> {
    pub fn new(terms: &[PodTerm]) -> AffinityCount<'s> {
        AffinityCount { terms: terms.to_vec(), per_term: vec![HashMap::new(); terms.len()], total: 0 }
    }

    pub fn add(&mut self, pod: &Counted<'_, 's>) {
        if !self.terms.iter().all(|t| t.matches(pod.namespace, pod.labels)) {
            return;
        }
        for (term, counts) in self.terms.iter().zip(self.per_term.iter_mut()) {
            if let Some(value) = pod.node.labels.get(&term.topology_key) {
                bump(counts, value, pod.sign);
                self.total += pod.sign;
            }
        }
    }
}

/// Pods matching one required anti-affinity term, per value of its key.
pub(super) struct TermCount<'s> {
    pub term: PodTerm,
    pub counts: HashMap<&'s str, i32>,
}

impl<'s> TermCount<'s> {
    pub fn add(&mut self, pod: &Counted<'_, 's>) {
        if self.term.matches(pod.namespace, pod.labels)
            && let Some(value) = pod.node.labels.get(&self.term.topology_key)
        {
            bump(&mut self.counts, value, pod.sign);
        }
    }
}

/// Which terms of the pods around a pod reach it: their required anti-affinity (a shield,
/// which refuses it nodes), or the terms kube-scheduler's InterPodAffinity score counts for
/// it ([`PodRules::each_pull`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    Shield = 0,
    Pull = 1,
}

impl Reach {
    pub const ALL: [Reach; 2] = [Reach::Shield, Reach::Pull];

    /// Each such term of `rules`, with its signed weight (`hard`: a required affinity
    /// term's in scoring).
    pub fn each_term(self, rules: &PodRules, hard: i32, mut f: impl FnMut(i32, &PodTerm)) {
        match self {
            Reach::Shield => rules.anti_affinity.iter().for_each(|t| f(1, t)),
            Reach::Pull => rules.each_pull(hard, f),
        }
    }
}

/// Pods whose terms of one reach a pod of `namespace` with `labels` matches: their weights
/// summed per topology key and value of their nodes.
pub(super) struct Reached<'s> {
    pub reach: Reach,
    /// The weight of a required affinity term in scoring.
    pub hard: i32,
    pub namespace: String,
    pub labels: Labels,
    pub counts: HashMap<&'s str, HashMap<&'s str, i32>>,
}

impl<'s> Reached<'s> {
    pub fn add(&mut self, pod: &Counted<'_, 's>) {
        let Some(rules) = pod.rules else { return };
        self.reach.each_term(rules, self.hard, |weight, term| self.add_term(term, weight, pod));
    }

    pub fn add_term(&mut self, term: &PodTerm, weight: i32, pod: &Counted<'_, 's>) {
        if term.matches(&self.namespace, &self.labels)
            && let Some((key, value)) = pod.node.labels.get_key_value(&term.topology_key)
        {
            bump(self.counts.entry(key.as_str()).or_default(), value, pod.sign * weight);
        }
    }

    /// Whether a pod it shields is refused on `node`.
    pub fn refuses(&self, node: &Node) -> bool {
        self.counts.iter().any(|(key, values)| node.labels.get(*key).is_some_and(|v| values.contains_key(v.as_str())))
    }
}

/// Which nodes a spread constraint counts: the owning pod's constraint keys, and its node
/// selector, affinity and tolerations where the policies honour them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Eligibility {
    pub keys: Vec<String>,
    pub honor_affinity: bool,
    pub honor_taints: bool,
    pub constraints: Arc<NodeConstraints>,
}

impl Eligibility {
    pub fn admits(&self, node: &Node) -> bool {
        self.keys.iter().all(|k| node.labels.contains_key(k))
            && (!self.honor_affinity || matches_node_affinity(node, &self.constraints))
            && (!self.honor_taints || untolerated_taint(node, &self.constraints).is_none())
    }

    /// The values of `key` on the nodes it admits: the spread's domains.
    pub fn domains<'s>(&self, nodes: &'s [Node], key: &str) -> Vec<&'s str> {
        let mut domains: Vec<&'s str> =
            nodes.iter().filter(|n| self.admits(n)).filter_map(|n| n.labels.get(key).map(String::as_str)).collect();
        domains.sort_unstable();
        domains.dedup();
        domains
    }
}

/// Pods a hard spread constraint counts, per eligible domain, and how many domains hold
/// each count (its least is the global minimum).
pub(super) struct SpreadCount<'s> {
    pub namespace: String,
    pub rule: SpreadRule,
    pub eligibility: Eligibility,
    pub counts: HashMap<&'s str, i32>,
    histogram: BTreeMap<i32, u32>,
}

impl<'s> SpreadCount<'s> {
    pub fn new(namespace: &str, rule: &SpreadRule, eligibility: Eligibility, domains: &[&'s str]) -> SpreadCount<'s> {
        let counts: HashMap<&'s str, i32> = domains.iter().map(|&d| (d, 0)).collect();
        let histogram = if counts.is_empty() { BTreeMap::new() } else { [(0, counts.len() as u32)].into() };
        SpreadCount { namespace: namespace.to_string(), rule: rule.clone(), eligibility, counts, histogram }
    }

    pub fn add(&mut self, pod: &Counted<'_, 's>) {
        if pod.terminating
            || !self.rule.counts(&self.namespace, pod.namespace, pod.labels)
            || !self.eligibility.admits(pod.node)
        {
            return;
        }
        let Some(value) = pod.node.labels.get(&self.rule.topology_key) else { return };
        let Some(count) = self.counts.get_mut(value.as_str()) else { return };
        let old = *count;
        *count += pod.sign;
        let new = *count;
        if let Some(n) = self.histogram.get_mut(&old) {
            *n -= 1;
            if *n == 0 {
                self.histogram.remove(&old);
            }
        }
        *self.histogram.entry(new).or_default() += 1;
    }

    /// The least count of an eligible domain: none below `minDomains` domains.
    pub fn min(&self) -> i32 {
        if (self.counts.len() as i64) < self.rule.min_domains as i64 {
            return 0;
        }
        self.histogram.keys().next().copied().unwrap_or(i32::MAX)
    }

    /// How far placing a pod of `labels` (in the owning namespace) on a node of domain
    /// `value` would take the skew.
    pub fn skew(&self, value: &str, labels: &BTreeMap<String, String>) -> i64 {
        let own = self.rule.counts(&self.namespace, &self.namespace, labels) as i64;
        self.counts.get(value).copied().unwrap_or(0) as i64 + own - self.min() as i64
    }
}
