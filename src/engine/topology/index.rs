//! The topology of one snapshot as flat arrays the engine searches: per level, its domains
//! (with their parent one level out and their nodes) and each node's domain.

use std::collections::BTreeMap;

use crate::engine::node::{Node, NodeIdx};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Domain {
    /// The label value that names it (`r7`), or its path (`b1/r7`) where the value names
    /// domains under more than one parent.
    pub value: String,
    /// Its domain one level out, when the nodes carry that level's label.
    pub parent: Option<u32>,
    /// Its nodes, by snapshot index, ascending.
    pub nodes: Vec<NodeIdx>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Level {
    pub name: String,
    pub label: String,
    pub domains: Vec<Domain>,
    /// Per node: its domain at this level (None without the label).
    pub node_domain: Vec<Option<u32>>,
}

/// Configured levels, outermost first, then the ad-hoc levels gangs asked for by label key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainIndex {
    pub levels: Vec<Level>,
    /// How many of `levels` are configured (a hierarchy); the rest are ad hoc.
    pub configured: usize,
}

impl DomainIndex {
    /// The level a PodGroup names: a configured level's name, or a node label key (anything
    /// with a `/` or a `.`), which is the configured level with that label or else an ad-hoc
    /// level of its own, added here while there are fewer than `max_ad_hoc`.
    pub fn resolve(&mut self, name: &str, nodes: &[Node], max_ad_hoc: usize) -> Result<usize, String> {
        if let Some(i) = self.levels[..self.configured].iter().position(|l| l.name == name) {
            return Ok(i);
        }
        if !(name.contains('/') || name.contains('.')) {
            let known: Vec<&str> = self.levels[..self.configured].iter().map(|l| l.name.as_str()).collect();
            return Err(format!(
                "topology level {name:?} is not configured (configured: {}); name a level or a node label key",
                known.join(", ")
            ));
        }
        if let Some(i) = self.levels.iter().position(|l| l.label == name) {
            return Ok(i);
        }
        if self.levels.len() - self.configured >= max_ad_hoc {
            return Err(format!(
                "topology level {name:?} is a node label key beyond the {max_ad_hoc} that PodGroups may name in one cycle \
                 (limits.adHocTopologyLevels); name a configured level"
            ));
        }
        self.levels.push(ad_hoc(name, nodes));
        Ok(self.levels.len() - 1)
    }

    /// The domain of `level` a node is in.
    pub fn domain_of(&self, level: usize, node: NodeIdx) -> Option<u32> {
        self.levels[level].node_domain[node as usize]
    }
}

/// A level of one label key, outside the hierarchy: its domains are the label's values.
fn ad_hoc(label: &str, nodes: &[Node]) -> Level {
    let mut values: BTreeMap<&str, Vec<NodeIdx>> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        if let Some(v) = node.labels.get(label) {
            values.entry(v.as_str()).or_default().push(i as NodeIdx);
        }
    }
    let mut node_domain = vec![None; nodes.len()];
    let domains = values
        .into_iter()
        .enumerate()
        .map(|(id, (value, members))| {
            for &n in &members {
                node_domain[n as usize] = Some(id as u32);
            }
            Domain { value: value.to_string(), parent: None, nodes: members }
        })
        .collect();
    Level { name: label.to_string(), label: label.to_string(), domains, node_domain }
}
