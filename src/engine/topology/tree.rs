//! The topology tree: zones, blocks, racks and hosts as the nodes' labels describe them, in
//! a petgraph graph (an edge from each domain to the domains and nodes inside it), kept up to
//! date incrementally: a node whose labels did not change is not touched again.
//!
//! A domain is a level and a label value under its parent domain: rack `r1` of block `b1`
//! and rack `r1` of block `b2` are two racks, as Kueue and KAI Scheduler read a hierarchy
//! ("we do not assume global uniqueness of labels on each level"). Its parent is the domain
//! one level out, or the closest level out that the node has a label for. Where a value is
//! used under several parents, the domain is shown with its path (`b1/r1`).

use std::collections::HashMap;

use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableGraph};

use super::index::{Domain, DomainIndex, Level};
use crate::engine::node::{Node, NodeIdx};

/// A level of the hierarchy: its name (`rack`) and the node label that names its domains.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LevelSpec {
    pub name: String,
    pub label: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Vertex {
    Cluster,
    Domain { level: usize, value: String },
    Host { name: String },
}

/// Where one node is: its domain at each level (None where it lacks the label).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Placement {
    vertex: NodeIndex,
    path: Vec<Option<String>>,
}

pub struct TopologyTree {
    levels: Vec<LevelSpec>,
    graph: StableGraph<Vertex, ()>,
    root: NodeIndex,
    /// By parent vertex, level and label value.
    domains: HashMap<(NodeIndex, usize, String), NodeIndex>,
    hosts: HashMap<String, Placement>,
}

impl TopologyTree {
    /// An empty tree of `levels`, outermost first.
    pub fn new(levels: Vec<LevelSpec>) -> TopologyTree {
        let mut graph = StableGraph::new();
        let root = graph.add_node(Vertex::Cluster);
        TopologyTree { levels, graph, root, domains: HashMap::new(), hosts: HashMap::new() }
    }

    pub fn levels(&self) -> &[LevelSpec] {
        &self.levels
    }

    /// Brings the tree in line with `nodes`: new nodes are added, nodes whose topology
    /// labels changed are moved, nodes that are gone are removed, and domains left empty
    /// are pruned. Returns how many nodes were added, moved or removed.
    pub fn update(&mut self, nodes: &[Node]) -> usize {
        let mut changed = 0;
        let mut seen = std::collections::HashSet::with_capacity(nodes.len());
        for node in nodes {
            seen.insert(node.name.as_str());
            let path: Vec<Option<String>> = self.levels.iter().map(|l| node.labels.get(&l.label).cloned()).collect();
            if self.hosts.get(&node.name).is_some_and(|p| p.path == path) {
                continue;
            }
            changed += 1;
            self.remove_host(&node.name);
            let parent = self.domain_path(&path);
            let vertex = self.graph.add_node(Vertex::Host { name: node.name.clone() });
            self.graph.add_edge(parent, vertex, ());
            self.hosts.insert(node.name.clone(), Placement { vertex, path });
        }
        let gone: Vec<String> = self.hosts.keys().filter(|h| !seen.contains(h.as_str())).cloned().collect();
        for host in gone {
            changed += 1;
            self.remove_host(&host);
        }
        changed
    }

    /// The innermost domain of `path`, created (with its outer domains) if new.
    fn domain_path(&mut self, path: &[Option<String>]) -> NodeIndex {
        let mut parent = self.root;
        for (level, value) in path.iter().enumerate() {
            let Some(value) = value else { continue };
            let key = (parent, level, value.clone());
            parent = match self.domains.get(&key) {
                Some(&vertex) => vertex,
                None => {
                    let vertex = self.graph.add_node(Vertex::Domain { level, value: value.clone() });
                    self.graph.add_edge(parent, vertex, ());
                    self.domains.insert(key, vertex);
                    vertex
                }
            };
        }
        parent
    }

    fn remove_host(&mut self, name: &str) {
        let Some(placement) = self.hosts.remove(name) else { return };
        let mut parent = self.graph.neighbors_directed(placement.vertex, Direction::Incoming).next();
        self.graph.remove_node(placement.vertex);
        // Domains left with nothing inside them go too, outward.
        while let Some(vertex) = parent {
            if vertex == self.root || self.graph.neighbors_directed(vertex, Direction::Outgoing).next().is_some() {
                break;
            }
            parent = self.graph.neighbors_directed(vertex, Direction::Incoming).next();
            if let (Some(outer), Some(Vertex::Domain { level, value })) = (parent, self.graph.remove_node(vertex)) {
                self.domains.remove(&(outer, level, value));
            }
        }
    }

    /// The label values from the outermost domain down to `vertex`'s own.
    fn path_of(&self, vertex: NodeIndex) -> Vec<&str> {
        let mut path = Vec::new();
        let mut at = Some(vertex);
        while let Some(v) = at {
            if let Vertex::Domain { value, .. } = &self.graph[v] {
                path.push(value.as_str());
            }
            at = self.graph.neighbors_directed(v, Direction::Incoming).next();
        }
        path.reverse();
        path
    }

    /// The flat index the engine searches, for `nodes` in snapshot order.
    pub fn index(&self, nodes: &[Node]) -> DomainIndex {
        let mut levels: Vec<Level> = self
            .levels
            .iter()
            .map(|l| Level {
                name: l.name.clone(),
                label: l.label.clone(),
                domains: Vec::new(),
                node_domain: vec![None; nodes.len()],
            })
            .collect();
        let position: HashMap<&str, NodeIdx> =
            nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i as NodeIdx)).collect();
        // Number domains per level in label order (then by the path above them), outer
        // levels first, so a domain's parent is numbered before it.
        let mut ids: HashMap<NodeIndex, (usize, u32)> = HashMap::new();
        // Values used under more than one parent are ordered and shown by their path.
        let mut parents_per_value: HashMap<(usize, &str), usize> = HashMap::new();
        for (_, level, value) in self.domains.keys() {
            *parents_per_value.entry((*level, value.as_str())).or_default() += 1;
        }
        let mut order: Vec<(usize, &str, Vec<&str>, NodeIndex)> = self
            .domains
            .iter()
            .map(|((_, level, value), &vertex)| {
                let repeated = parents_per_value[&(*level, value.as_str())] > 1;
                (*level, value.as_str(), if repeated { self.path_of(vertex) } else { Vec::new() }, vertex)
            })
            .collect();
        order.sort_unstable();
        for (level, value, path, vertex) in &order {
            let parent = self
                .graph
                .neighbors_directed(*vertex, Direction::Incoming)
                .next()
                .and_then(|p| ids.get(&p))
                .map(|&(_, id)| id);
            let shown = if path.is_empty() { value.to_string() } else { path.join("/") };
            let id = levels[*level].domains.len() as u32;
            levels[*level].domains.push(Domain { value: shown, parent, nodes: Vec::new() });
            ids.insert(*vertex, (*level, id));
        }
        for (name, placement) in &self.hosts {
            let Some(&node) = position.get(name.as_str()) else { continue };
            // The host's domains, from its own up to the cluster.
            let mut vertex = self.graph.neighbors_directed(placement.vertex, Direction::Incoming).next();
            while let Some(v) = vertex {
                if let Some(&(level, id)) = ids.get(&v) {
                    levels[level].node_domain[node as usize] = Some(id);
                    levels[level].domains[id as usize].nodes.push(node);
                }
                vertex = self.graph.neighbors_directed(v, Direction::Incoming).next();
            }
        }
        for level in &mut levels {
            for domain in &mut level.domains {
                domain.nodes.sort_unstable();
            }
        }
        DomainIndex { configured: levels.len(), levels, hierarchies: Vec::new() }
    }
}
