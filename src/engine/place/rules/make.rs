//! The tables a shape of pods is checked against and scored by, made on first use from the
//! bound pods and the cycle's changes, and shared by every shape that counts the same; and
//! what a kind of pod changes in them (`effects`), found on first use.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use super::kinds::Effect;
use super::tables::{AffinityCount, COUNTED, Counted, Domains, Eligibility, Reach, SpreadCount, TermCount};
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
                    let values = rules.affinity.iter().map(|t| self.keys.of(&t.topology_key)).collect();
                    let mut table = AffinityCount::new(&rules.affinity, values);
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
        let values = self.keys.of(&term.topology_key);
        let mut table = TermCount { term: term.clone(), values, counts: HashMap::with_capacity(COUNTED) };
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
                    let values = self.domains(id.2.clone(), &rule.topology_key);
                    let mut table = SpreadCount::new(namespace, rule, values);
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

    /// The nodes' values of a spread's key, and the same for the nodes it counts (its
    /// domains), found once per cycle for each way of counting them.
    fn domains(&mut self, eligibility: Eligibility, key: &str) -> Domains<'s> {
        let key = self.keys.id(key);
        let values = self.keys.values(key).clone();
        let found = self.domains.iter().find(|(e, k, _)| *k == key && *e == eligibility);
        if let Some((_, _, domains)) = found {
            return domains.clone();
        }
        let eligible = Arc::new(eligibility.eligible(self.nodes, &values));
        let mut domains: Vec<&'s str> = eligible.iter().flatten().copied().collect();
        domains.sort_unstable();
        domains.dedup();
        let domains = Arc::new(domains);
        let domains = Domains { values, eligible, domains };
        self.domains.push((eligibility, key, domains.clone()));
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

impl PodWork<'_> {
    /// How many tables there are: none is ever dropped in a cycle, so a kind of pod's
    /// effects hold while this is unchanged.
    fn made(&self) -> usize {
        self.affinity.len()
            + self.terms.len()
            + self.spread.len()
            + self.reaches.iter().map(|r| r.tables.len()).sum::<usize>()
    }

    /// The counts change `i`'s kind of pod changes, in `out`.
    pub(super) fn effects_of(&mut self, i: usize, out: &mut Vec<Effect>) {
        out.clear();
        let made = self.made();
        let k = self.changes[i].kind as usize;
        if let Some((tables, effects)) = &self.kinds.all[k].effects
            && *tables == made
        {
            out.extend_from_slice(effects);
            return;
        }
        let kind = &self.kinds.all[k];
        // Which tables take the kind's pods does not depend on their node.
        let pod = Counted {
            index: 0,
            namespace: &kind.namespace,
            labels: &kind.labels,
            rules: kind.rules.as_deref(),
            terminating: kind.terminating,
            sign: 1,
        };
        self.tables.for_labels(pod.labels, |table| match table {
            Table::Affinity(t) if self.affinity[t].takes(&pod) => out.push(Effect::Affinity(t)),
            Table::Term(t) if self.terms[t].takes(&pod) => out.push(Effect::Term(t)),
            Table::Spread(t) if self.spread[t].takes(&pod) => out.push(Effect::Spread(t)),
            _ => {}
        });
        let mut hits = Vec::new();
        for (reach, set) in Reach::ALL.into_iter().zip(self.reaches.iter()) {
            let Some(rules) = pod.rules else { break };
            reach.each_term(rules, self.hard, |weight, term| {
                hits.clear();
                if set.by_label.for_selector(&term.selector, |s| hits.push(s)).is_none() {
                    hits.extend(0..set.tables.len());
                }
                for &table in hits.iter().filter(|&&s| set.tables[s].takes(term)) {
                    let key = self.keys.id(&term.topology_key);
                    out.push(Effect::Reached { reach, table, key, weight });
                }
            });
        }
        self.kinds.all[k].effects = Some((made, out.clone()));
    }
}
