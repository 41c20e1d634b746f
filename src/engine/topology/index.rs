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
    /// The cluster's own hierarchies (Kueue's and KAI Scheduler's Topology objects): node
    /// label keys, outermost first. An ad-hoc level one of them names is split by the
    /// levels above it there, so rack `r1` of block `b1` and of block `b2` are two racks.
    pub hierarchies: Vec<Vec<String>>,
}

/// Why a level a PodGroup names is not one the index can give.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LevelError {
    #[error("topology level {name:?} is not configured (configured: {configured}); name a level or a node label key")]
    NotConfigured { name: String, configured: String },
    #[error(
        "topology level {name:?} is a node label key beyond the {max_ad_hoc} that PodGroups may name in one cycle \
         (limits.adHocTopologyLevels); name a configured level"
    )]
    TooManyAdHoc { name: String, max_ad_hoc: usize },
}

impl DomainIndex {
    /// The level a PodGroup names: a configured level's name, or a node label key (anything
    /// with a `/` or a `.`), which is the configured level with that label or else an ad-hoc
    /// level of its own, added here while there are fewer than `max_ad_hoc`.
    pub fn resolve(&mut self, name: &str, nodes: &[Node], max_ad_hoc: usize) -> Result<usize, LevelError> {
        if let Some(i) = self.levels[..self.configured].iter().position(|l| l.name == name) {
            return Ok(i);
        }
        if !(name.contains('/') || name.contains('.')) {
            let known: Vec<&str> = self.levels[..self.configured].iter().map(|l| l.name.as_str()).collect();
            return Err(LevelError::NotConfigured { name: name.into(), configured: known.join(", ") });
        }
        if let Some(i) = self.levels.iter().position(|l| l.label == name) {
            return Ok(i);
        }
        if self.levels.len() - self.configured >= max_ad_hoc {
            return Err(LevelError::TooManyAdHoc { name: name.into(), max_ad_hoc });
        }
        let above = self.above(name);
        self.levels.push(ad_hoc(name, &above, nodes));
        Ok(self.levels.len() - 1)
    }

    /// The labels above `label` in the first hierarchy that has it, outermost first.
    fn above(&self, label: &str) -> Vec<String> {
        self.hierarchies
            .iter()
            .find_map(|h| h.iter().position(|l| l == label).map(|i| h[..i].to_vec()))
            .unwrap_or_default()
    }

    /// The domain of `level` a node is in.
    pub fn domain_of(&self, level: usize, node: NodeIdx) -> Option<u32> {
        self.levels[level].node_domain[node as usize]
    }
}

/// A level of one label key, outside the configured hierarchy: its domains are the label's
/// values, each within the values of the labels `above` it that the node has (a node without
/// one of those hangs from the closest level out that it does have, as in the configured
/// hierarchy). A value found under more than one path is shown by its path (`b1/r1`), as
/// the configured levels show theirs.
fn ad_hoc(label: &str, above: &[String], nodes: &[Node]) -> Level {
    // Each step of a path with its level, so that values of two levels never meet.
    let mut values: BTreeMap<Vec<(usize, &str)>, Vec<NodeIdx>> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let Some(v) = node.labels.get(label) else { continue };
        let mut path: Vec<(usize, &str)> = above
            .iter()
            .enumerate()
            .filter_map(|(level, key)| node.labels.get(key).map(|outer| (level, outer.as_str())))
            .collect();
        path.push((above.len(), v.as_str()));
        values.entry(path).or_default().push(i as NodeIdx);
    }
    let mut paths_per_value: BTreeMap<&str, usize> = BTreeMap::new();
    for path in values.keys() {
        *paths_per_value.entry(path[path.len() - 1].1).or_default() += 1;
    }
    let mut node_domain = vec![None; nodes.len()];
    let domains = values
        .iter()
        .enumerate()
        .map(|(id, (path, members))| {
            for &n in members {
                node_domain[n as usize] = Some(id as u32);
            }
            let own = path[path.len() - 1].1;
            let value = if paths_per_value[own] > 1 {
                path.iter().map(|(_, v)| *v).collect::<Vec<_>>().join("/")
            } else {
                own.to_string()
            };
            Domain { value, parent: None, nodes: members.clone() }
        })
        .collect();
    Level { name: label.to_string(), label: label.to_string(), domains, node_domain }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(block: &str, rack: &str) -> Node {
        let labels = [
            ("cloud.provider.com/topology-block".to_string(), block.to_string()),
            ("cloud.provider.com/topology-rack".to_string(), rack.to_string()),
        ];
        Node {
            name: format!("{block}-{rack}"),
            labels: std::sync::Arc::new(labels.into()),
            taints: Default::default(),
            unschedulable: false,
            allocatable: Default::default(),
            requested: Default::default(),
        }
    }

    #[test]
    fn a_rack_named_in_a_cluster_topology_is_split_by_its_block() {
        let mut unblocked = node("b1", "r3");
        std::sync::Arc::make_mut(&mut unblocked.labels).remove("cloud.provider.com/topology-block");
        let nodes = vec![node("b1", "r1"), node("b2", "r1"), node("b2", "r2"), unblocked];
        let rack = "cloud.provider.com/topology-rack";
        let mut flat = DomainIndex::default();
        let level = flat.resolve(rack, &nodes, 4).unwrap();
        assert_eq!(flat.levels[level].domains.len(), 3, "without a hierarchy, r1 is one rack");

        let mut index = DomainIndex {
            hierarchies: vec![vec![
                "cloud.provider.com/topology-block".into(),
                rack.into(),
                "kubernetes.io/hostname".into(),
            ]],
            ..Default::default()
        };
        let level = index.resolve(rack, &nodes, 4).unwrap();
        let shown: Vec<(&str, &[NodeIdx])> =
            index.levels[level].domains.iter().map(|d| (d.value.as_str(), d.nodes.as_slice())).collect();
        // A node without the block label is still in its rack, as in the configured levels.
        assert_eq!(shown, vec![("b1/r1", &[0][..]), ("b2/r1", &[1][..]), ("r2", &[2][..]), ("r3", &[3][..])]);
        assert_eq!(index.domain_of(level, 0), Some(0));
        assert_eq!(index.domain_of(level, 1), Some(1));
    }
}
