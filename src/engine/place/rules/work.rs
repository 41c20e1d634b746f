//! One cycle's view of the rules between pods: the tables (`tables`) made on first use
//! (`make`) from the bound pods and the cycle's own changes, then kept up to date as pods
//! are placed (a gang's own pods count for each other) or given back in a trial, and undone
//! with the placement that made them. Labels (`index`) find what a change touches, so its
//! cost follows the tables it concerns, not every table made; and pods of one kind
//! (`kinds`) are counted as the first of them was.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use super::index::LabelIndex;
use super::keys::{KeyId, KeyValues};
use super::kinds::{Effect, KindIndex, Kinds, PodRef};
use super::tables::{AffinityCount, Counted, Domains, Eligibility, Reach, Reached, SpreadCount, TermCount};
use crate::engine::model::{NodeIdx, PodKey};
use crate::engine::node::Node;
use crate::engine::pods::{
    Attachment, BoundPods, HostPort, Labels, PodRejection, PodRules, PodTerm, SpreadRule, VolumeLimits,
};

/// A pod of a kind placed on a node in this cycle (`sign` 1), or a bound pod given back in
/// a trial (-1).
#[derive(Clone, Copy, Debug)]
pub(super) struct Change {
    node: NodeIdx,
    pub(super) kind: u32,
    sign: i32,
}

/// A table, by kind and index.
#[derive(Clone, Copy, Debug)]
pub(super) enum Table {
    Affinity(usize),
    Term(usize),
    Spread(usize),
}

/// The [`Reached`] tables of one reach: by labels (one table for the pods sharing them),
/// then namespace; and by each label.
#[derive(Default)]
pub(super) struct ReachTables<'s> {
    pub(super) tables: Vec<Reached<'s>>,
    /// By the address of the labels (pods of one template share them; the tables hold
    /// them, so an address seen stays theirs for the cycle).
    ids: HashMap<usize, Vec<usize>>,
    pub(super) by_label: LabelIndex<usize>,
    /// The table last asked for: a pod is checked on node after node with the same labels.
    last: Option<usize>,
}

/// The tables one shape's pods are checked against and scored by: indices into
/// [`PodWork`]'s.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShapeTables {
    pub(super) affinity: Option<usize>,
    pub(super) anti: Vec<usize>,
    pub(super) spread: Vec<usize>,
    pub(super) ports: bool,
    /// Its pods attach volumes, and some node limits how many.
    pub(super) attach: bool,
    /// Preferred terms: signed weight (anti-affinity negative), term table.
    pub(super) preferred: Vec<(i32, usize)>,
    /// `ScheduleAnyway` constraints' spread tables.
    pub(super) soft_spread: Vec<usize>,
    /// They are kube-scheduler's own defaults ([`PodRules::system_spread`]).
    pub(super) system_spread: bool,
}

impl ShapeTables {
    /// Whether the shape's own rules score nodes.
    pub fn prefers(&self) -> bool {
        !self.preferred.is_empty() || !self.soft_spread.is_empty()
    }
}

/// One cycle's view of the rules between pods.
pub(crate) struct PodWork<'s> {
    pub(super) nodes: &'s [Node],
    bound: &'s BoundPods,
    /// The weight of a required affinity term in scoring.
    pub(super) hard: i32,
    pub(super) changes: Vec<Change>,
    /// Per [`Reach`], whether any pod, bound or placed, has such terms: every placement is
    /// then checked against the required anti-affinity, and scored by the others.
    reaching: [bool; 2],
    pub(super) ports: Option<HashMap<NodeIdx, Vec<(HostPort, i32)>>>,
    /// The volumes attached to each node, counted by the pods that use them.
    pub(super) attached: Option<HashMap<NodeIdx, Vec<(Attachment, i32)>>>,
    pub(super) limits: &'s VolumeLimits,
    pub(super) affinity: Vec<AffinityCount<'s>>,
    /// Pods matching one term per value of its key: a required anti-affinity term's, or a
    /// preferred term's.
    pub(super) terms: Vec<TermCount<'s>>,
    pub(super) spread: Vec<SpreadCount<'s>>,
    /// The tables above by what they count, so that a shape finds its own at once.
    pub(super) affinity_ids: HashMap<Vec<PodTerm>, usize>,
    pub(super) term_ids: HashMap<PodTerm, usize>,
    pub(super) spread_ids: HashMap<(String, SpreadRule, Eligibility), usize>,
    /// The tables above by their selectors.
    pub(super) tables: LabelIndex<Table>,
    /// Per [`Reach`], what the pods around a pod's labels reach it with.
    pub(super) reaches: [ReachTables<'s>; 2],
    /// The pods' kinds, and the kinds by label once the first table is made.
    pub(super) kinds: Kinds,
    index: Option<KindIndex>,
    /// The nodes' values of spread constraints' keys where they count them, by who counts
    /// them and the key.
    pub(super) domains: Vec<(Eligibility, KeyId, Domains<'s>)>,
    /// Each node's value of the label keys the tables and scores ask for.
    pub(super) keys: KeyValues<'s>,
    /// A scratch list for [`PodWork::apply`], kept between calls.
    scratch: Vec<Effect>,
}

impl<'s> PodWork<'s> {
    /// `hard`: the weight of a required affinity term in scoring (`hardPodAffinityWeight`).
    pub fn new(nodes: &'s [Node], bound: &'s BoundPods, limits: &'s VolumeLimits, hard: i32) -> PodWork<'s> {
        PodWork {
            nodes,
            hard,
            bound,
            changes: Vec::new(),
            reaching: [bound.any_anti_affinity(), bound.any_pulls()],
            ports: None,
            attached: None,
            limits,
            affinity: Vec::new(),
            terms: Vec::new(),
            spread: Vec::new(),
            affinity_ids: HashMap::new(),
            term_ids: HashMap::new(),
            spread_ids: HashMap::new(),
            tables: LabelIndex::default(),
            reaches: Default::default(),
            kinds: Kinds::new(),
            index: None,
            domains: Vec::new(),
            keys: KeyValues::new(nodes),
            scratch: Vec::new(),
        }
    }

    /// Whether some pod, bound or placed, has required anti-affinity, which may refuse any
    /// pod a node.
    pub fn anti_affinity_anywhere(&self) -> bool {
        self.reaching[Reach::Shield as usize]
    }

    /// Whether some pod, bound or placed, pulls or repels others in scoring.
    pub fn pulls_anywhere(&self) -> bool {
        self.reaching[Reach::Pull as usize]
    }

    pub(super) fn counted(&self, pod: PodRef) -> Counted<'_> {
        counted(self.bound, &self.changes, &self.kinds, pod)
    }

    /// Every pod the tables count: the bound ones, then the cycle's changes, in order.
    pub(super) fn all(&self) -> impl Iterator<Item = PodRef> + '_ {
        let nodes = self.bound.on_node.iter().enumerate().take(self.nodes.len());
        let bound = nodes.flat_map(|(n, pods)| (0..pods.len()).map(move |i| PodRef::Bound(n as u32, i as u32)));
        bound.chain((0..self.changes.len()).map(|i| PodRef::Change(i as u32)))
    }

    /// The index of kinds, made on first use: every bound pod and change given its kind.
    fn kind_index(&mut self) -> &KindIndex {
        if self.index.is_none() {
            for pod in self.all().collect::<Vec<_>>() {
                let kind = match pod {
                    PodRef::Bound(node, i) => {
                        let p = &self.bound.on(node)[i as usize];
                        self.kinds.of(&p.key.namespace, &p.labels, &p.rules, p.terminating)
                    }
                    PodRef::Change(i) => self.changes[i as usize].kind,
                };
                self.kinds.all[kind as usize].pods.push(pod);
            }
            let mut index = KindIndex::default();
            index.file_new(&self.kinds.all);
            self.index = Some(index);
        }
        self.index.as_ref().expect("made")
    }

    /// The pods of the kinds `found`, each once, in order.
    fn pods_of(&self, mut kinds: Vec<u32>) -> Vec<PodRef> {
        kinds.sort_unstable();
        kinds.dedup();
        let mut pods: Vec<PodRef> =
            kinds.iter().flat_map(|&k| self.kinds.all[k as usize].pods.iter().copied()).collect();
        pods.sort_unstable();
        pods
    }

    /// The pods a selector could match (all of them when it cannot be narrowed), in order.
    pub(super) fn selected(&mut self, selector: &crate::engine::pods::PodSelector) -> Vec<PodRef> {
        let mut kinds = Vec::new();
        match self.kind_index().by_label.for_selector(selector, |k| kinds.push(k)) {
            Some(()) => self.pods_of(kinds),
            None => self.all().collect(),
        }
    }

    /// Whether a pod of the shape (`namespace`, `labels`, `rules`) may go on `node`, in
    /// kube-scheduler's order: NodePorts, PodTopologySpread, InterPodAffinity.
    pub fn check(
        &mut self,
        tables: Option<&ShapeTables>,
        node: NodeIdx,
        namespace: &str,
        labels: &Labels,
        rules: Option<&PodRules>,
    ) -> Result<(), PodRejection> {
        if let (Some(rules), Some(tables)) = (rules, tables) {
            if tables.ports
                && let Some(used) = self.ports.as_ref().and_then(|p| p.get(&node))
                && rules.ports.iter().any(|want| holds(used, want))
            {
                return Err(PodRejection::Ports);
            }
            if tables.attach && self.over_limit(node, &rules.attach) {
                return Err(PodRejection::VolumeLimit);
            }
            for &i in &tables.spread {
                let table = &self.spread[i];
                let Some(value) = table.values[node as usize] else {
                    return Err(PodRejection::SpreadLabel);
                };
                if table.skew(value, labels) > table.rule.max_skew as i64 {
                    return Err(PodRejection::Spread);
                }
            }
            if let Some(i) = tables.affinity {
                let table = &self.affinity[i];
                let mut all = true;
                for (values, counts) in table.values.iter().zip(&table.per_term) {
                    let Some(value) = values[node as usize] else {
                        return Err(PodRejection::Affinity);
                    };
                    all &= counts.get(value).is_some_and(|&c| c > 0);
                }
                let alone = table.total == 0 && table.terms.iter().all(|t| t.matches(namespace, labels));
                if !all && !alone {
                    return Err(PodRejection::Affinity);
                }
            }
            if self.anti_refuses(tables, node) {
                return Err(PodRejection::AntiAffinity);
            }
        }
        if self.anti_affinity_anywhere() {
            let shield = self.reached(Reach::Shield, namespace, labels);
            if self.reaches[Reach::Shield as usize].tables[shield].refuses(node, &self.keys) {
                return Err(PodRejection::ExistingAntiAffinity);
            }
        }
        Ok(())
    }

    /// Whether a pod matching one of the shape's required anti-affinity terms is in
    /// `node`'s domain.
    pub fn anti_refuses(&self, tables: &ShapeTables, node: NodeIdx) -> bool {
        tables.anti.iter().any(|&i| self.terms[i].holds(node))
    }

    /// What the pods around a pod of `namespace` with `labels` reach it with, made on first
    /// use.
    pub(super) fn reached(&mut self, reach: Reach, namespace: &str, labels: &Labels) -> usize {
        let set = &mut self.reaches[reach as usize];
        // The tables hold their labels, so an address seen is theirs for the cycle.
        let same = |t: &Reached| Arc::ptr_eq(&t.labels, labels) && t.namespace == namespace;
        if let Some(i) = set.last.filter(|&i| same(&set.tables[i])) {
            return i;
        }
        let address = Arc::as_ptr(labels) as usize;
        let found = set.ids.get(&address).into_iter().flatten().find(|&&i| set.tables[i].namespace == namespace);
        if let Some(&i) = found {
            set.last = Some(i);
            return i;
        }
        let mut table = Reached {
            reach,
            hard: self.hard,
            namespace: namespace.to_string(),
            labels: labels.clone(),
            counts: Vec::new(),
        };
        // The pods whose terms could match these labels, each once.
        let mut kinds = Vec::new();
        self.kind_index().reaching[reach as usize].for_labels(labels, |k| kinds.push(k));
        for pod in self.pods_of(kinds) {
            table.add(&counted(self.bound, &self.changes, &self.kinds, pod), &mut self.keys);
        }
        let set = &mut self.reaches[reach as usize];
        let id = set.tables.len();
        set.by_label.file_labels(labels, id);
        set.tables.push(table);
        set.ids.entry(address).or_default().push(id);
        set.last = Some(id);
        id
    }

    /// Where the cycle's changes stand, to undo them to.
    pub fn mark(&self) -> usize {
        self.changes.len()
    }

    /// A pod placed on `node`.
    pub fn place(&mut self, node: NodeIdx, namespace: &str, labels: &Labels, rules: &Option<Arc<PodRules>>) {
        let kind = self.kinds.of(namespace, labels, rules, false);
        self.record(Change { node, kind, sign: 1 });
    }

    /// A bound pod given back in a trial: its rules and labels stop counting.
    pub fn release(&mut self, node: NodeIdx, key: &PodKey) {
        let Some(pod) = self.bound.on(node).iter().find(|p| &p.key == key) else { return };
        let kind = self.kinds.of(&key.namespace, &pod.labels, &pod.rules, pod.terminating);
        self.record(Change { node, kind, sign: -1 });
    }

    /// Undoes every change since `mark`.
    pub fn rollback(&mut self, mark: usize) {
        while self.changes.len() > mark {
            let i = self.changes.len() - 1;
            self.apply(i, -1);
            let change = self.changes.pop().expect("above the mark");
            if self.index.is_some() {
                let last = self.kinds.all[change.kind as usize].pods.pop();
                debug_assert_eq!(last, Some(PodRef::Change(i as u32)));
            }
        }
    }

    fn record(&mut self, change: Change) {
        let kind = &mut self.kinds.all[change.kind as usize];
        if let Some(rules) = &kind.rules {
            self.reaching[Reach::Shield as usize] |= !rules.anti_affinity.is_empty();
            self.reaching[Reach::Pull as usize] |= rules.pulls();
        }
        if let Some(index) = self.index.as_mut() {
            kind.pods.push(PodRef::Change(self.changes.len() as u32));
            index.file_new(&self.kinds.all);
        }
        self.changes.push(change);
        self.apply(self.changes.len() - 1, 1);
    }

    /// Counts change `i` (`direction` 1), or takes it back (-1), in every table it concerns.
    fn apply(&mut self, i: usize, direction: i32) {
        let pod = counted(self.bound, &self.changes, &self.kinds, PodRef::Change(i as u32));
        let (node, sign) = (pod.index, pod.sign * direction);
        if let Some(r) = pod.rules {
            if let Some(ports) = self.ports.as_mut().filter(|_| !r.ports.is_empty()) {
                count(ports.entry(node).or_default(), &r.ports, sign);
            }
            if let Some(attached) = self.attached.as_mut().filter(|_| !r.attach.is_empty()) {
                count(attached.entry(node).or_default(), &r.attach, sign);
            }
        }
        let mut effects = std::mem::take(&mut self.scratch);
        self.effects_of(i, &mut effects);
        for &effect in &effects {
            match effect {
                Effect::Affinity(t) => self.affinity[t].count(node, sign),
                Effect::Term(t) => self.terms[t].count(node, sign),
                Effect::Spread(t) => self.spread[t].count(node, sign),
                Effect::Reached { reach, table, key, weight } => {
                    if let Some(value) = self.keys.values(key)[node as usize] {
                        self.reaches[reach as usize].tables[table].count(key, value, sign * weight);
                    }
                }
            }
        }
        self.scratch = effects;
    }
}

/// A pod the tables count, from the bound pods or the cycle's changes.
fn counted<'p>(bound: &'p BoundPods, changes: &'p [Change], kinds: &'p Kinds, pod: PodRef) -> Counted<'p> {
    match pod {
        PodRef::Bound(node, i) => {
            let bound = &bound.on(node)[i as usize];
            Counted {
                index: node,
                namespace: &bound.key.namespace,
                labels: &bound.labels,
                rules: bound.rules.as_deref(),
                terminating: bound.terminating,
                sign: 1,
            }
        }
        PodRef::Change(i) => {
            let Change { node, kind, sign } = changes[i as usize];
            let kind = &kinds.all[kind as usize];
            Counted {
                index: node,
                namespace: &kind.namespace,
                labels: &kind.labels,
                rules: kind.rules.as_deref(),
                terminating: kind.terminating,
                sign,
            }
        }
    }
}

/// Counts `items` (host ports, volumes) in use on a node `sign` times more.
pub(super) fn count<T: Clone + PartialEq>(used: &mut Vec<(T, i32)>, items: &[T], sign: i32) {
    for item in items {
        match used.iter_mut().find(|(p, _)| p == item) {
            Some((_, n)) => *n += sign,
            None => used.push((item.clone(), sign)),
        }
    }
    used.retain(|(_, n)| *n != 0);
}

/// Whether ports in use on a node conflict with `want`.
fn holds(used: &[(HostPort, i32)], want: &HostPort) -> bool {
    used.iter().any(|(p, n)| *n > 0 && p.conflicts(want))
}
