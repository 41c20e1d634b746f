//! Kinds of pods: pods alike for the rules between pods (one namespace, the same labels and
//! rules by address, terminating or not), as the pods of one template are. The tables a
//! kind's labels select and the tables its terms reach are found for its first pod and
//! counted directly for the others (its `effects`, until a new table is made); the index
//! by label holds kinds, each with its pods, so placing a pod of a known kind files nothing.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use super::index::LabelIndex;
use super::keys::KeyId;
use super::tables::Reach;
use crate::engine::pods::{Labels, PodRules};

/// A pod the tables count: a bound one (node, place in its list) or a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PodRef {
    Bound(u32, u32),
    Change(u32),
}

/// One count a pod's placement changes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Effect {
    Affinity(usize),
    Term(usize),
    Spread(usize),
    /// A term of the pod reaches a table of pods around: its weight at the node's value of
    /// `key`.
    Reached {
        reach: Reach,
        table: usize,
        key: KeyId,
        weight: i32,
    },
}

/// Pods alike for the rules between pods.
pub(super) struct Kind {
    pub namespace: String,
    /// Held: while held, no other labels or rules can be made at their addresses.
    pub labels: Labels,
    pub rules: Option<Arc<PodRules>>,
    pub terminating: bool,
    /// What its pods change in the tables, with the number of tables there were then.
    pub effects: Option<(usize, Vec<Effect>)>,
    /// Its pods the index holds, bound then placed, in order.
    pub pods: Vec<PodRef>,
}

/// The kinds met in the cycle, by the addresses of their labels and rules.
pub(super) struct Kinds {
    by_address: HashMap<(usize, usize, bool), Vec<u32>>,
    pub all: Vec<Kind>,
    /// The kind last asked for: pods of one template are placed one after another.
    last: Option<((usize, usize, bool), u32)>,
}

impl Kinds {
    pub fn new() -> Kinds {
        Kinds { by_address: HashMap::new(), all: Vec::new(), last: None }
    }

    /// The kind of a pod, made on first sight.
    pub fn of(&mut self, namespace: &str, labels: &Labels, rules: &Option<Arc<PodRules>>, terminating: bool) -> u32 {
        let address =
            (Arc::as_ptr(labels) as usize, rules.as_ref().map_or(0, |r| Arc::as_ptr(r) as usize), terminating);
        if let Some((seen, k)) = self.last
            && seen == address
            && self.all[k as usize].namespace == namespace
        {
            return k;
        }
        let found = self.by_address.entry(address).or_default();
        if let Some(&k) = found.iter().find(|&&k| self.all[k as usize].namespace == namespace) {
            self.last = Some((address, k));
            return k;
        }
        let k = self.all.len() as u32;
        found.push(k);
        self.last = Some((address, k));
        self.all.push(Kind {
            namespace: namespace.to_string(),
            labels: labels.clone(),
            rules: rules.clone(),
            terminating,
            effects: None,
            pods: Vec::new(),
        });
        k
    }
}

/// The kinds by label, and by the selectors of their terms of each [`Reach`]: made when the
/// first table is; `filed` kinds are in it.
#[derive(Default)]
pub(super) struct KindIndex {
    pub by_label: LabelIndex<u32>,
    pub reaching: [LabelIndex<u32>; 2],
    filed: usize,
}

impl KindIndex {
    /// Files the kinds made since the last call.
    pub fn file_new(&mut self, kinds: &[Kind]) {
        for (k, kind) in kinds.iter().enumerate().skip(self.filed) {
            self.by_label.file_labels(&kind.labels, k as u32);
            for reach in Reach::ALL {
                let index = &mut self.reaching[reach as usize];
                if let Some(rules) = &kind.rules {
                    reach.each_term(rules, 1, |_, term| index.file_selector(&term.selector, k as u32));
                }
            }
        }
        self.filed = kinds.len();
    }
}
