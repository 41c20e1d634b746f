//! Free capacity kept from one cycle to the next, so that a cycle's working copy costs what
//! changed since the last one rather than the cluster's size.
//!
//! The memory keeps the snapshot's free capacity per node and per topology domain as last
//! seen (the base), and the working copies the last cycle's workspace changed. Before a
//! cycle, the nodes the last workspace changed (it notes them) are copied back from the
//! base with their domains, and nodes whose allocatable or requested capacity changed in
//! the snapshot (found by comparing small inline values) are brought into the base, their
//! domains by the difference. Nothing is summed again.

use super::super::model::{NodeIdx, Snapshot};
use super::super::resources::Capacity;
use super::super::topology::DomainIndex;

/// Free capacity per node in a workspace, noting every node changed, so that the memory
/// puts back only those.
#[derive(Debug, Default)]
pub(crate) struct FreeCapacity {
    caps: Vec<Capacity>,
    touched: Vec<NodeIdx>,
    /// Counts changes: equal generations, equal capacity (the workspace sets it back when
    /// it undoes an attempt exactly).
    pub generation: u64,
}

impl FreeCapacity {
    /// A node's free capacity, to change.
    pub fn touch(&mut self, node: NodeIdx) -> &mut Capacity {
        self.touched.push(node);
        self.generation += 1;
        &mut self.caps[node as usize]
    }
}

impl std::ops::Index<usize> for FreeCapacity {
    type Output = Capacity;
    fn index(&self, node: usize) -> &Capacity {
        &self.caps[node]
    }
}

/// The free capacity a workspace starts from, and the domains' allocatable capacity.
pub(crate) struct Parts {
    pub free: FreeCapacity,
    pub domain_free: Vec<Vec<Capacity>>,
    pub domain_allocatable: Vec<Vec<Capacity>>,
}

#[derive(Debug, Default)]
pub struct CapacityMemory {
    /// Per node: allocatable and requested as last seen.
    seen: Vec<(Capacity, Capacity)>,
    /// Per level: each node's domain as last seen (the topology's shape).
    shape: Vec<Vec<Option<u32>>>,
    names: usize,
    base_free: Vec<Capacity>,
    base_domain_free: Vec<Vec<Capacity>>,
    /// The working copies, back from the last workspace (empty while one has them).
    free: FreeCapacity,
    domain_free: Vec<Vec<Capacity>>,
    domain_allocatable: Vec<Vec<Capacity>>,
    /// How many cycles started from scratch (tests).
    pub rebuilds: usize,
    /// The kinds of GPU pods asked for recently, for fragmentation, and the gangs learned.
    pub(crate) mix: crate::engine::fragmentation::WorkloadMix,
    pub(crate) learned: super::gpu_kinds::SeenGangs,
}

impl CapacityMemory {
    /// The working copies for a cycle over `snapshot`.
    pub(crate) fn parts(&mut self, snapshot: &Snapshot) -> Parts {
        if !self.same_shape(snapshot) {
            self.rebuild(snapshot);
        } else {
            self.bring_up_to_date(snapshot);
        }
        Parts {
            free: std::mem::take(&mut self.free),
            domain_free: std::mem::take(&mut self.domain_free),
            domain_allocatable: std::mem::take(&mut self.domain_allocatable),
        }
    }

    /// The working copies back, as the cycle left them.
    pub(crate) fn give_back(&mut self, parts: Parts) {
        self.free = parts.free;
        self.domain_free = parts.domain_free;
        self.domain_allocatable = parts.domain_allocatable;
    }

    fn same_shape(&self, snapshot: &Snapshot) -> bool {
        let levels = &snapshot.topology.levels;
        self.names == snapshot.resources.len()
            && self.seen.len() == snapshot.nodes.len()
            && self.free.caps.len() == snapshot.nodes.len()
            && self.shape.len() == levels.len()
            && self.shape.iter().zip(levels).all(|(seen, level)| *seen == level.node_domain)
            && self.base_domain_free.iter().zip(levels).all(|(seen, level)| seen.len() == level.domains.len())
    }

    fn rebuild(&mut self, snapshot: &Snapshot) {
        self.rebuilds += 1;
        let names = &snapshot.resources;
        self.names = names.len();
        self.seen = snapshot.nodes.iter().map(|n| (n.allocatable.clone(), n.requested.clone())).collect();
        self.shape = snapshot.topology.levels.iter().map(|l| l.node_domain.clone()).collect();
        self.base_free = snapshot.nodes.iter().map(|n| n.free(names)).collect();
        let sum = |of: &dyn Fn(usize) -> Capacity| -> Vec<Vec<Capacity>> {
            snapshot
                .topology
                .levels
                .iter()
                .map(|level| {
                    level
                        .domains
                        .iter()
                        .map(|d| {
                            let mut total = Capacity::default();
                            for &n in &d.nodes {
                                total.add_capacity(&of(n as usize));
                            }
                            total
                        })
                        .collect()
                })
                .collect()
        };
        self.base_domain_free = sum(&|n| self.base_free[n].clone());
        self.domain_allocatable = sum(&|n| snapshot.nodes[n].allocatable.clone());
        self.free = FreeCapacity { caps: self.base_free.clone(), touched: Vec::new(), generation: 0 };
        self.domain_free = self.base_domain_free.clone();
    }

    fn bring_up_to_date(&mut self, snapshot: &Snapshot) {
        let topology: &DomainIndex = &snapshot.topology;
        // What the last cycle's workspace changed, back to the base.
        let mut touched = std::mem::take(&mut self.free.touched);
        touched.sort_unstable();
        touched.dedup();
        for &n in &touched {
            self.free.caps[n as usize].clone_from(&self.base_free[n as usize]);
            for (level, domains) in self.domain_free.iter_mut().enumerate() {
                if let Some(d) = topology.domain_of(level, n) {
                    domains[d as usize].clone_from(&self.base_domain_free[level][d as usize]);
                }
            }
        }
        touched.clear();
        self.free.touched = touched;
        // Nodes that changed since the last cycle, into the base and the working copies.
        for (n, node) in snapshot.nodes.iter().enumerate() {
            let (allocatable, requested) = &self.seen[n];
            if *allocatable == node.allocatable && *requested == node.requested {
                continue;
            }
            let free = node.free(&snapshot.resources);
            for (level, domains) in self.base_domain_free.iter_mut().enumerate() {
                if let Some(d) = topology.domain_of(level, n as u32) {
                    let d = d as usize;
                    domains[d].sub_capacity(&self.base_free[n]);
                    domains[d].add_capacity(&free);
                    self.domain_free[level][d].clone_from(&domains[d]);
                    self.domain_allocatable[level][d].sub_capacity(allocatable);
                    self.domain_allocatable[level][d].add_capacity(&node.allocatable);
                }
            }
            self.free.caps[n].clone_from(&free);
            self.base_free[n] = free;
            self.seen[n] = (node.allocatable.clone(), node.requested.clone());
        }
    }
}
