//! What placing a pod changes in the tables, found once per kind of pod: pods of one
//! template share their namespace, labels and rules, so the tables their labels select and
//! the tables their terms reach are found for the first of them and counted directly for
//! the others, until a new table is made.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use super::keys::KeyId;
use super::tables::Reach;
use crate::engine::pods::{Labels, PodRules};

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

/// Pods alike for the tables: by the addresses of their namespace (shared by the work's
/// changes), labels and rules, and whether they are terminating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Alike(pub usize, pub usize, pub usize, pub bool);

/// The effects found for a kind of pod, with the number of tables there were then.
struct Known {
    /// Held, never read: while held, no other labels or rules can be made at their address.
    _held: (Labels, Option<Arc<PodRules>>),
    tables: usize,
    effects: Vec<Effect>,
}

/// The effects found so far.
#[derive(Default)]
pub(super) struct Effects {
    known: HashMap<Alike, Known>,
}

impl Effects {
    pub fn new() -> Effects {
        Effects { known: HashMap::new() }
    }

    /// The effects found for a kind of pod when there were `tables` tables.
    pub fn find(&self, alike: &Alike, tables: usize) -> Option<&[Effect]> {
        self.known.get(alike).filter(|k| k.tables == tables).map(|k| k.effects.as_slice())
    }

    /// Remembers a kind of pod's effects, holding its labels and rules.
    pub fn remember(&mut self, alike: Alike, held: (Labels, Option<Arc<PodRules>>), tables: usize, effects: &[Effect]) {
        self.known.insert(alike, Known { _held: held, tables, effects: effects.to_vec() });
    }
}
