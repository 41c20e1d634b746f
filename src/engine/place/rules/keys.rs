//! Each node's value of a label key, found once per cycle per key: the tables read a
//! node's topology domain by the node's index, not by looking the key up among its labels.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use crate::engine::node::Node;

/// Per node, its value of one label key (None: the node has no such label).
pub(super) type Values<'s> = Arc<Vec<Option<&'s str>>>;

/// A label key, by the order it was first asked for in the cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct KeyId(u32);

/// The keys asked for so far, each with its nodes' values.
pub(super) struct KeyValues<'s> {
    nodes: &'s [Node],
    ids: HashMap<String, KeyId>,
    values: Vec<Values<'s>>,
}

impl<'s> KeyValues<'s> {
    pub fn new(nodes: &'s [Node]) -> KeyValues<'s> {
        KeyValues { nodes, ids: HashMap::new(), values: Vec::new() }
    }

    /// The key's id, its nodes' values found on first use.
    pub fn id(&mut self, key: &str) -> KeyId {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = KeyId(self.values.len() as u32);
        self.values.push(Arc::new(self.nodes.iter().map(|n| n.labels.get(key).map(String::as_str)).collect()));
        self.ids.insert(key.to_string(), id);
        id
    }

    /// The nodes' values of a key asked for before.
    pub fn values(&self, id: KeyId) -> &Values<'s> {
        &self.values[id.0 as usize]
    }

    /// The nodes' values of `key`.
    pub fn of(&mut self, key: &str) -> Values<'s> {
        let id = self.id(key);
        self.values(id).clone()
    }
}
