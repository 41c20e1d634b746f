//! The tables a shape of pods is checked against and scored by, made on first use from the
//! bound pods and the cycle's changes, and shared by every shape that counts the same.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use super::tables::{AffinityCount, Eligibility, SpreadCount, TermCount};
use super::work::{PodWork, ShapeTables, Table, count};
use crate::engine::model::{NodeConstraints, NodeIdx};
use crate::engine::pods::{Attachment, PodRules, PodTerm, SpreadRule};

impl<'s> PodWork<'s> {
    /// The tables for a shape of pods in `namespace` with these rules and node constraints.
    pub fn tables(&mut self, namespace: &str, rules: &PodRules, constraints: &Arc<NodeConstraints>) -> ShapeTables {
        let mut tables = ShapeTables { ports: !rules.ports.is_empty(), ..Default::default() };
        if tables.ports && self.ports.is_none() {
            self.ports = Some(self.per_node(|r| &r.ports));
        }
        tables.attach = !rules.attach.is_empty() && self.limits.on_node.iter().any(|l| !l.is_empty());
        if tables.attach && self.attached.is_none() {
            self.attached = Some(self.per_node(|r| &r.attach));
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
        tables.anti = rules.anti_affinity.iter().map(|term| self.term_table(term)).collect();
        let preferred = rules.preferred_affinity.iter().map(|w| (w.weight, &w.term));
        let preferred = preferred.chain(rules.preferred_anti_affinity.iter().map(|w| (-w.weight, &w.term)));
        tables.preferred = preferred.map(|(weight, term)| (weight, self.term_table(term))).collect();
        tables.spread = self.spread_tables(namespace, &rules.spread, constraints, rules.system_spread);
        tables.soft_spread = self.spread_tables(namespace, &rules.soft_spread, constraints, rules.system_spread);
        tables.system_spread = rules.system_spread;
        tables
    }

    /// The table of pods matching `term`, made on first use.
    fn term_table(&mut self, term: &PodTerm) -> usize {
        if let Some(&i) = self.term_ids.get(term) {
            return i;
        }
        let mut table = TermCount { term: term.clone(), counts: HashMap::new() };
        for pod in self.selected(&term.selector) {
            table.add(&self.counted(pod));
        }
        self.terms.push(table);
        self.tables.file_selector(&term.selector, Table::Term(self.terms.len() - 1));
        self.term_ids.insert(term.clone(), self.terms.len() - 1);
        self.terms.len() - 1
    }

    /// The tables of a list of spread constraints (each counts only nodes with every key
    /// of the list, or with its own key for kube-scheduler's `system` defaults), made on
    /// first use.
    fn spread_tables(
        &mut self,
        namespace: &str,
        rules: &[SpreadRule],
        constraints: &Arc<NodeConstraints>,
        system: bool,
    ) -> Vec<usize> {
        let keys: Vec<String> = rules.iter().map(|r| r.topology_key.clone()).collect();
        let mut found = Vec::with_capacity(rules.len());
        for rule in rules {
            let eligibility = Eligibility {
                keys: if system { vec![rule.topology_key.clone()] } else { keys.clone() },
                honor_affinity: rule.honor_affinity,
                honor_taints: rule.honor_taints,
                constraints: constraints.clone(),
            };
            let id = (namespace.to_string(), rule.clone(), eligibility);
            found.push(match self.spread_ids.get(&id) {
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
        found
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
}

impl PodWork<'_> {
    /// What every pod holds of a node (its host ports, its volumes), counted per node.
    fn per_node<T: Clone + PartialEq>(&self, held: impl Fn(&PodRules) -> &[T]) -> HashMap<NodeIdx, Vec<(T, i32)>> {
        let mut found: HashMap<NodeIdx, Vec<(T, i32)>> = HashMap::new();
        for pod in self.all() {
            let pod = self.counted(pod);
            if let Some(items) = pod.rules.map(&held).filter(|items| !items.is_empty()) {
                count(found.entry(pod.index).or_default(), items, pod.sign);
            }
        }
        found
    }

    /// Whether a pod attaching `attach` would take a CSI driver of `node` past its limit:
    /// the volumes attached there, each once however many pods use it, and the pod's that
    /// are not.
    pub(super) fn over_limit(&self, node: NodeIdx, attach: &[Attachment]) -> bool {
        let used = self.attached.as_ref().and_then(|a| a.get(&node)).map_or(&[][..], Vec::as_slice);
        self.limits.on(node).iter().any(|(driver, limit)| {
            let held = |a: &Attachment| used.iter().any(|(u, n)| *n > 0 && u == a);
            let now = used.iter().filter(|(a, n)| *n > 0 && &a.driver == driver).count();
            let more = attach.iter().filter(|a| &a.driver == driver && !held(a)).count();
            now + more > *limit as usize
        })
    }
}
