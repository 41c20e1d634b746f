//! One cycle's view of the rules between pods: the tables (`tables`) made on first use from
//! the bound pods and the cycle's own changes, then kept up to date as pods are placed (a
//! gang's own pods count for each other) or given back in a trial, and undone with the
//! placement that made them. Labels (`index`) find what a change touches, so its cost
//! follows the tables it concerns, not every table made.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use super::index::LabelIndex;
use super::tables::{AffinityCount, Counted, Eligibility, Shield, SpreadCount, TermCount};
use crate::engine::model::{NodeConstraints, NodeIdx, PodKey};
use crate::engine::node::Node;
use crate::engine::pods::{BoundPods, HostPort, Labels, PodRejection, PodRules, PodTerm, SpreadRule};

/// A pod placed on a node in this cycle (`sign` 1), or a bound pod given back in a trial (-1).
#[derive(Clone, Debug)]
struct Change {
    node: NodeIdx,
    namespace: Arc<str>,
    labels: Labels,
    rules: Option<Arc<PodRules>>,
    terminating: bool,
    sign: i32,
}

impl Change {
    /// The change as the tables count it, `direction` times (-1 to take it back).
    fn counted<'p, 's>(&'p self, nodes: &'s [Node], direction: i32) -> Counted<'p, 's> {
        Counted {
            index: self.node,
            node: &nodes[self.node as usize],
            namespace: &self.namespace,
            labels: &self.labels,
            rules: self.rules.as_deref(),
            terminating: self.terminating,
            sign: self.sign * direction,
        }
    }
}

/// A table, by kind and index.
#[derive(Clone, Copy, Debug)]
enum Table {
    Affinity(usize),
    Anti(usize),
    Spread(usize),
}

/// A pod the tables count: a bound one (node, place in its list) or a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PodRef {
    Bound(u32, u32),
    Change(u32),
}

/// The bound pods and changes by label, and those with anti-affinity by their terms'
/// selectors: made when the first table is.
#[derive(Default)]
struct PodIndex {
    by_label: LabelIndex<PodRef>,
    holders: LabelIndex<PodRef>,
}

/// The tables one shape's pods are checked against: indices into [`PodWork`]'s.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShapeTables {
    affinity: Option<usize>,
    anti: Vec<usize>,
    spread: Vec<usize>,
    ports: bool,
}

/// One cycle's view of the rules between pods.
pub(crate) struct PodWork<'s> {
    nodes: &'s [Node],
    bound: &'s BoundPods,
    changes: Vec<Change>,
    /// Whether any pod, bound or placed, has required anti-affinity: every placement is then
    /// checked against it.
    holders: bool,
    ports: Option<HashMap<NodeIdx, Vec<(HostPort, i32)>>>,
    affinity: Vec<AffinityCount<'s>>,
    anti: Vec<TermCount<'s>>,
    spread: Vec<SpreadCount<'s>>,
    /// The tables above by what they count, so that a shape finds its own at once.
    affinity_ids: HashMap<Vec<PodTerm>, usize>,
    anti_ids: HashMap<PodTerm, usize>,
    spread_ids: HashMap<(String, SpreadRule, Eligibility), usize>,
    /// The tables above by their selectors.
    tables: LabelIndex<Table>,
    shields: Vec<Shield<'s>>,
    /// Shields by labels (equal labels, one shield), then namespace; and by each label.
    shield_ids: HashMap<Labels, Vec<usize>>,
    shield_labels: LabelIndex<usize>,
    pods: Option<PodIndex>,
    /// The domains of spread constraints, by who counts them and the key.
    domains: Vec<(Eligibility, String, Arc<Vec<&'s str>>)>,
    namespaces: HashMap<String, Arc<str>>,
    /// Scratch lists for [`PodWork::apply`], kept between calls.
    touched: Vec<Table>,
    reached: Vec<usize>,
}

impl<'s> PodWork<'s> {
    pub fn new(nodes: &'s [Node], bound: &'s BoundPods) -> PodWork<'s> {
        PodWork {
            nodes,
            bound,
            changes: Vec::new(),
            holders: bound.any_anti_affinity(),
            ports: None,
            affinity: Vec::new(),
            anti: Vec::new(),
            spread: Vec::new(),
            affinity_ids: HashMap::new(),
            anti_ids: HashMap::new(),
            spread_ids: HashMap::new(),
            tables: LabelIndex::default(),
            shields: Vec::new(),
            shield_ids: HashMap::new(),
            shield_labels: LabelIndex::default(),
            pods: None,
            domains: Vec::new(),
            namespaces: HashMap::new(),
            touched: Vec::new(),
            reached: Vec::new(),
        }
    }

    /// Whether some pod, bound or placed, has required anti-affinity, which may refuse any
    /// pod a node.
    pub fn anti_affinity_anywhere(&self) -> bool {
        self.holders
    }

    fn counted(&self, pod: PodRef) -> Counted<'_, 's> {
        let nodes: &'s [Node] = self.nodes;
        match pod {
            PodRef::Bound(node, i) => {
                let bound = &self.bound.on(node)[i as usize];
                Counted {
                    index: node,
                    node: &nodes[node as usize],
                    namespace: &bound.key.namespace,
                    labels: &bound.labels,
                    rules: bound.rules.as_deref(),
                    terminating: bound.terminating,
                    sign: 1,
                }
            }
            PodRef::Change(i) => self.changes[i as usize].counted(nodes, 1),
        }
    }

    /// Every pod the tables count: the bound ones, then the cycle's changes, in order.
    fn all(&self) -> impl Iterator<Item = PodRef> + '_ {
        let nodes = self.bound.on_node.iter().enumerate().take(self.nodes.len());
        let bound = nodes.flat_map(|(n, pods)| (0..pods.len()).map(move |i| PodRef::Bound(n as u32, i as u32)));
        bound.chain((0..self.changes.len()).map(|i| PodRef::Change(i as u32)))
    }

    /// The pod index, made on first use.
    fn pod_index(&mut self) -> &PodIndex {
        if self.pods.is_none() {
            let mut index = PodIndex::default();
            for pod in self.all().collect::<Vec<_>>() {
                let counted = self.counted(pod);
                index.by_label.file_labels(counted.labels, pod);
                for term in counted.rules.map(|r| r.anti_affinity.as_slice()).unwrap_or_default() {
                    index.holders.file_selector(&term.selector, pod);
                }
            }
            self.pods = Some(index);
        }
        self.pods.as_ref().expect("made")
    }

    /// The pods a selector could match (all of them when it cannot be narrowed), in order.
    fn selected(&mut self, selector: &crate::engine::pods::PodSelector) -> Vec<PodRef> {
        let mut found = Vec::new();
        match self.pod_index().by_label.for_selector(selector, |p| found.push(p)) {
            Some(()) => found.sort_unstable(),
            None => found = self.all().collect(),
        }
        found
    }

    /// The tables for a shape of pods in `namespace` with these rules and node constraints.
    pub fn tables(&mut self, namespace: &str, rules: &PodRules, constraints: &Arc<NodeConstraints>) -> ShapeTables {
        let mut tables = ShapeTables { ports: !rules.ports.is_empty(), ..Default::default() };
        if tables.ports && self.ports.is_none() {
            let mut ports: HashMap<NodeIdx, Vec<(HostPort, i32)>> = HashMap::new();
            for pod in self.all() {
                let pod = self.counted(pod);
                if let Some(r) = pod.rules.filter(|r| !r.ports.is_empty()) {
                    count_ports(ports.entry(pod.index).or_default(), &r.ports, pod.sign);
                }
            }
            self.ports = Some(ports);
        }
        if let Some(first) = rules.affinity.first() {
            tables.affinity = Some(match self.affinity_ids.get(&rules.affinity) {
                Some(&i) => i,
                None => {
                    let mut table = AffinityCount::new(&rules.affinity);
                    for pod in self.selected(&first.selector) {
                        table.add(&self.counted(pod));
                    }
                    self.affinity.push(table);
                    self.tables.file_selector(&first.selector, Table::Affinity(self.affinity.len() - 1));
                    self.affinity_ids.insert(rules.affinity.clone(), self.affinity.len() - 1);
                    self.affinity.len() - 1
                }
            });
        }
        for term in &rules.anti_affinity {
            tables.anti.push(match self.anti_ids.get(term) {
                Some(&i) => i,
                None => {
                    let mut table = TermCount { term: term.clone(), counts: HashMap::new() };
                    for pod in self.selected(&term.selector) {
                        table.add(&self.counted(pod));
                    }
                    self.anti.push(table);
                    self.tables.file_selector(&term.selector, Table::Anti(self.anti.len() - 1));
                    self.anti_ids.insert(term.clone(), self.anti.len() - 1);
                    self.anti.len() - 1
                }
            });
        }
        let keys: Vec<String> = rules.spread.iter().map(|r| r.topology_key.clone()).collect();
        for rule in &rules.spread {
            let eligibility = Eligibility {
                keys: keys.clone(),
                honor_affinity: rule.honor_affinity,
                honor_taints: rule.honor_taints,
                constraints: constraints.clone(),
            };
            let id = (namespace.to_string(), rule.clone(), eligibility);
            tables.spread.push(match self.spread_ids.get(&id) {
                Some(&i) => i,
                None => {
                    let domains = self.domains(id.2.clone(), &rule.topology_key);
                    let mut table = SpreadCount::new(namespace, rule, id.2.clone(), &domains);
                    for pod in self.selected(&rule.selector) {
                        table.add(&self.counted(pod));
                    }
                    self.spread.push(table);
                    self.tables.file_selector(&rule.selector, Table::Spread(self.spread.len() - 1));
                    self.spread_ids.insert(id, self.spread.len() - 1);
                    self.spread.len() - 1
                }
            });
        }
        tables
    }

    /// A spread's domains, found once per cycle for each way of counting them.
    fn domains(&mut self, eligibility: Eligibility, key: &str) -> Arc<Vec<&'s str>> {
        let found = self.domains.iter().find(|(e, k, _)| k == key && *e == eligibility);
        if let Some((_, _, domains)) = found {
            return domains.clone();
        }
        let domains = Arc::new(eligibility.domains(self.nodes, key));
        self.domains.push((eligibility, key.to_string(), domains.clone()));
        domains
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
        let node_ref = &self.nodes[node as usize];
        if let (Some(rules), Some(tables)) = (rules, tables) {
            if tables.ports
                && let Some(used) = self.ports.as_ref().and_then(|p| p.get(&node))
                && rules.ports.iter().any(|want| holds(used, want))
            {
                return Err(PodRejection::Ports);
            }
            for &i in &tables.spread {
                let table = &self.spread[i];
                let Some(value) = node_ref.labels.get(&table.rule.topology_key) else {
                    return Err(PodRejection::SpreadLabel);
                };
                if table.skew(value, labels) > table.rule.max_skew as i64 {
                    return Err(PodRejection::Spread);
                }
            }
            if let Some(i) = tables.affinity {
                let table = &self.affinity[i];
                let mut all = true;
                for (term, counts) in table.terms.iter().zip(&table.per_term) {
                    let Some(value) = node_ref.labels.get(&term.topology_key) else {
                        return Err(PodRejection::Affinity);
                    };
                    all &= counts.get(value.as_str()).is_some_and(|&c| c > 0);
                }
                let alone = table.total == 0 && table.terms.iter().all(|t| t.matches(namespace, labels));
                if !all && !alone {
                    return Err(PodRejection::Affinity);
                }
            }
            for &i in &tables.anti {
                let table = &self.anti[i];
                if let Some(value) = node_ref.labels.get(&table.term.topology_key)
                    && table.counts.get(value.as_str()).is_some_and(|&c| c > 0)
                {
                    return Err(PodRejection::AntiAffinity);
                }
            }
        }
        if self.holders {
            let shield = self.shield(namespace, labels);
            if self.shields[shield].refuses(node_ref) {
                return Err(PodRejection::ExistingAntiAffinity);
            }
        }
        Ok(())
    }

    /// The shield for pods of `namespace` with `labels`, made on first use.
    fn shield(&mut self, namespace: &str, labels: &Labels) -> usize {
        let found =
            self.shield_ids.get(labels).into_iter().flatten().find(|&&i| self.shields[i].namespace == namespace);
        if let Some(&i) = found {
            return i;
        }
        let mut shield = Shield { namespace: namespace.to_string(), labels: labels.clone(), counts: HashMap::new() };
        // The pods whose anti-affinity terms could match these labels, each once.
        let mut holders = Vec::new();
        self.pod_index().holders.for_labels(labels, |p| holders.push(p));
        holders.sort_unstable();
        holders.dedup();
        for pod in holders {
            shield.add(&self.counted(pod));
        }
        let id = self.shields.len();
        self.shield_labels.file_labels(labels, id);
        self.shields.push(shield);
        self.shield_ids.entry(labels.clone()).or_default().push(id);
        id
    }

    /// Where the cycle's changes stand, to undo them to.
    pub fn mark(&self) -> usize {
        self.changes.len()
    }

    /// A pod placed on `node`.
    pub fn place(&mut self, node: NodeIdx, namespace: &str, labels: &Labels, rules: &Option<Arc<PodRules>>) {
        let namespace = self.namespace(namespace);
        self.record(Change {
            node,
            namespace,
            labels: labels.clone(),
            rules: rules.clone(),
            terminating: false,
            sign: 1,
        });
    }

    /// A bound pod given back in a trial: its rules and labels stop counting.
    pub fn release(&mut self, node: NodeIdx, key: &PodKey) {
        let Some(pod) = self.bound.on(node).iter().find(|p| &p.key == key) else { return };
        let namespace = self.namespace(&key.namespace);
        self.record(Change {
            node,
            namespace,
            labels: pod.labels.clone(),
            rules: pod.rules.clone(),
            terminating: pod.terminating,
            sign: -1,
        });
    }

    /// A namespace's name, shared by the changes of its pods.
    fn namespace(&mut self, namespace: &str) -> Arc<str> {
        match self.namespaces.get(namespace) {
            Some(shared) => shared.clone(),
            None => self.namespaces.entry(namespace.to_string()).or_insert_with(|| namespace.into()).clone(),
        }
    }

    /// Undoes every change since `mark`.
    pub fn rollback(&mut self, mark: usize) {
        while self.changes.len() > mark {
            let i = self.changes.len() - 1;
            self.apply(i, -1);
            let change = self.changes.pop().expect("above the mark");
            if let Some(index) = self.pods.as_mut() {
                index.by_label.unfile_labels(&change.labels);
                for term in change.rules.iter().flat_map(|r| r.anti_affinity.iter()) {
                    index.holders.unfile_selector(&term.selector);
                }
            }
        }
    }

    fn record(&mut self, change: Change) {
        if change.rules.as_ref().is_some_and(|r| !r.anti_affinity.is_empty()) {
            self.holders = true;
        }
        let at = PodRef::Change(self.changes.len() as u32);
        if let Some(index) = self.pods.as_mut() {
            index.by_label.file_labels(&change.labels, at);
            for term in change.rules.iter().flat_map(|r| r.anti_affinity.iter()) {
                index.holders.file_selector(&term.selector, at);
            }
        }
        self.changes.push(change);
        self.apply(self.changes.len() - 1, 1);
    }

    /// Counts change `i` (`direction` 1), or takes it back (-1), in every table it concerns.
    fn apply(&mut self, i: usize, direction: i32) {
        let (mut touched, mut reached) = (std::mem::take(&mut self.touched), std::mem::take(&mut self.reached));
        let pod = self.changes[i].counted(self.nodes, direction);
        if let Some(ports) = self.ports.as_mut()
            && let Some(r) = pod.rules.filter(|r| !r.ports.is_empty())
        {
            count_ports(ports.entry(pod.index).or_default(), &r.ports, pod.sign);
        }
        touched.clear();
        self.tables.for_labels(pod.labels, |t| touched.push(t));
        for &table in &touched {
            match table {
                Table::Affinity(t) => self.affinity[t].add(&pod),
                Table::Anti(t) => self.anti[t].add(&pod),
                Table::Spread(t) => self.spread[t].add(&pod),
            }
        }
        for term in pod.rules.map(|r| r.anti_affinity.as_slice()).unwrap_or_default() {
            reached.clear();
            if self.shield_labels.for_selector(&term.selector, |s| reached.push(s)).is_none() {
                reached.extend(0..self.shields.len());
            }
            for &s in &reached {
                self.shields[s].add_term(term, &pod);
            }
        }
        (self.touched, self.reached) = (touched, reached);
    }
}

/// Counts `ports` in use on a node `sign` times more.
fn count_ports(used: &mut Vec<(HostPort, i32)>, ports: &[HostPort], sign: i32) {
    for port in ports {
        match used.iter_mut().find(|(p, _)| p == port) {
            Some((_, n)) => *n += sign,
            None => used.push((port.clone(), sign)),
        }
    }
    used.retain(|(_, n)| *n != 0);
}

/// Whether ports in use on a node conflict with `want`.
fn holds(used: &[(HostPort, i32)], want: &HostPort) -> bool {
    used.iter().any(|(p, n)| *n > 0 && p.conflicts(want))
}
