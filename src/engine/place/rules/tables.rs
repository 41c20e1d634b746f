//! The counts one cycle keeps for the rules between pods, as kube-scheduler's PreFilter
//! states hold them: pods matching a pod's affinity or anti-affinity per topology value,
//! the bound pods' anti-affinity against a pod, and a spread constraint's pods per domain.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use super::keys::{KeyId, KeyValues, Values};
use crate::engine::filter::{matches_node_affinity, untolerated_taint};
use crate::engine::model::{NodeConstraints, NodeIdx};
use crate::engine::node::Node;
use crate::engine::pods::{Labels, PodRules, PodTerm, SpreadRule};

/// A pod as a table counts it: added (`sign` 1) or taken away (-1).
pub(super) struct Counted<'p> {
    pub index: NodeIdx,
    pub namespace: &'p str,
    pub labels: &'p BTreeMap<String, String>,
    pub rules: Option<&'p PodRules>,
    pub terminating: bool,
    pub sign: i32,
}

/// The values a table of counts makes room for at once: a deployment's replicas, one per
/// node, fill one without growing it.
pub(super) const COUNTED: usize = 14;

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
    /// Per term, the nodes' values of its topology key.
    pub values: Vec<Values<'s>>,
    pub per_term: Vec<HashMap<&'s str, i32>>,
    pub total: i32,
}

impl<'s> AffinityCount<'s> {
    pub fn new(terms: &[PodTerm], values: Vec<Values<'s>>) -> AffinityCount<'s> {
        AffinityCount { terms: terms.to_vec(), values, per_term: vec![HashMap::new(); terms.len()], total: 0 }
    }

    pub fn add(&mut self, pod: &Counted<'_>) {
        if self.takes(pod) {
            self.count(pod.index, pod.sign);
        }
    }

    /// Whether it counts the pod: the pod matches every term.
    pub fn takes(&self, pod: &Counted<'_>) -> bool {
        self.terms.iter().all(|t| t.matches(pod.namespace, pod.labels))
    }

    /// Counts a pod it takes on `node` `sign` times more.
    pub fn count(&mut self, node: NodeIdx, sign: i32) {
        for (values, counts) in self.values.iter().zip(self.per_term.iter_mut()) {
            if let Some(value) = values[node as usize] {
                bump(counts, value, sign);
                self.total += sign;
            }
        }
    }
}

/// Pods matching one required anti-affinity term, per value of its key.
pub(super) struct TermCount<'s> {
    pub term: PodTerm,
    /// The nodes' values of the term's topology key.
    pub values: Values<'s>,
    pub counts: HashMap<&'s str, i32>,
}

impl<'s> TermCount<'s> {
    pub fn add(&mut self, pod: &Counted<'_>) {
        if self.takes(pod) {
            self.count(pod.index, pod.sign);
        }
    }

    /// Whether it counts the pod: the pod matches the term.
    pub fn takes(&self, pod: &Counted<'_>) -> bool {
        self.term.matches(pod.namespace, pod.labels)
    }

    /// Counts a pod matching the term on `node` `sign` times more.
    pub fn count(&mut self, node: NodeIdx, sign: i32) {
        if let Some(value) = self.values[node as usize] {
            bump(&mut self.counts, value, sign);
        }
    }

    /// Whether a pod matching the term is in `node`'s domain.
    pub fn holds(&self, node: NodeIdx) -> bool {
        self.values[node as usize].is_some_and(|v| self.counts.get(v).is_some_and(|&c| c > 0))
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
    /// Per topology key met (none is taken away), the weights per value.
    pub counts: Vec<(KeyId, HashMap<&'s str, i32>)>,
}

impl<'s> Reached<'s> {
    pub fn add(&mut self, pod: &Counted<'_>, keys: &mut KeyValues<'s>) {
        let Some(rules) = pod.rules else { return };
        self.reach.each_term(rules, self.hard, |weight, term| self.add_term(term, weight, pod, keys));
    }

    pub fn add_term(&mut self, term: &PodTerm, weight: i32, pod: &Counted<'_>, keys: &mut KeyValues<'s>) {
        if !term.matches(&self.namespace, &self.labels) {
            return;
        }
        let key = keys.id(&term.topology_key);
        if let Some(value) = keys.values(key)[pod.index as usize] {
            self.count(key, value, pod.sign * weight);
        }
    }

    /// Whether a term of a pod around reaches a pod of its namespace and labels.
    pub fn takes(&self, term: &PodTerm) -> bool {
        term.matches(&self.namespace, &self.labels)
    }

    /// Adds `weight` at `value` of `key`.
    pub fn count(&mut self, key: KeyId, value: &'s str, weight: i32) {
        let at = match self.counts.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                self.counts.push((key, HashMap::with_capacity(COUNTED)));
                self.counts.len() - 1
            }
        };
        bump(&mut self.counts[at].1, value, weight);
    }

    /// Whether a pod it shields is refused on `node`.
    pub fn refuses(&self, node: NodeIdx, keys: &KeyValues<'s>) -> bool {
        self.counts.iter().any(|(key, values)| {
            !values.is_empty() && keys.values(*key)[node as usize].is_some_and(|v| values.contains_key(v))
        })
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

    /// Per node, its value of a key (`values`) if it admits the node: the domains counted.
    pub fn eligible<'s>(&self, nodes: &[Node], values: &[Option<&'s str>]) -> Vec<Option<&'s str>> {
        nodes.iter().zip(values).map(|(n, v)| v.filter(|_| self.admits(n))).collect()
    }
}

/// The nodes' values of a spread constraint's key; the same for the nodes it counts; and
/// the values those make, each once (its domains).
#[derive(Clone)]
pub(super) struct Domains<'s> {
    pub values: Values<'s>,
    pub eligible: Values<'s>,
    pub domains: Arc<Vec<&'s str>>,
}

/// Pods a hard spread constraint counts, per eligible domain, and how many domains hold
/// each count (its least is the global minimum).
pub(super) struct SpreadCount<'s> {
    pub namespace: String,
    pub rule: SpreadRule,
    /// The nodes' values of the constraint's key, and the same for the nodes it counts.
    pub values: Values<'s>,
    eligible: Values<'s>,
    pub counts: HashMap<&'s str, i32>,
    histogram: BTreeMap<i32, u32>,
}

impl<'s> SpreadCount<'s> {
    pub fn new(
        namespace: &str,
        rule: &SpreadRule,
        Domains { values, eligible, domains }: Domains<'s>,
    ) -> SpreadCount<'s> {
        let counts: HashMap<&'s str, i32> = domains.iter().map(|&d| (d, 0)).collect();
        let histogram = if counts.is_empty() { BTreeMap::new() } else { [(0, counts.len() as u32)].into() };
        SpreadCount { namespace: namespace.to_string(), rule: rule.clone(), values, eligible, counts, histogram }
    }

    pub fn add(&mut self, pod: &Counted<'_>) {
        if self.takes(pod) {
            self.count(pod.index, pod.sign);
        }
    }

    /// Whether it counts the pod: not terminating, and selected by the constraint.
    pub fn takes(&self, pod: &Counted<'_>) -> bool {
        !pod.terminating && self.rule.counts(&self.namespace, pod.namespace, pod.labels)
    }

    /// Counts a pod it takes on `node` `sign` times more, if it counts the node.
    pub fn count(&mut self, node: NodeIdx, sign: i32) {
        let Some(value) = self.eligible[node as usize] else { return };
        let Some(count) = self.counts.get_mut(value) else { return };
        let old = *count;
        *count += sign;
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
