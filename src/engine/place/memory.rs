//! Free capacity kept from one cycle to the next, so that a cycle's working copy costs what
//! changed since the last one rather than the cluster's size.
//!
//! The memory keeps the snapshot's free capacity per node and per topology domain as last
//! seen (the base), and the working copies the last cycle's workspace changed. Before a
//! cycle, nodes whose allocatable or requested capacity changed are brought into the base
//! (their domains by the difference), and whatever the last workspace changed is copied
//! back from the base. Both are found by comparing small inline values, never by summing.

use super::super::model::Snapshot;
use super::super::resources::Capacity;
use super::super::topology::DomainIndex;

/// The free capacity a workspace starts from, and the domains' allocatable capacity.
pub(crate) struct Parts {
    pub free: Vec<Capacity>,
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
    free: Vec<Capacity>,
    domain_free: Vec<Vec<Capacity>>,
    domain_allocatable: Vec<Vec<Capacity>>,
    /// How many cycles started from scratch (tests).
    pub rebuilds: usize,
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
            && self.free.len() == snapshot.nodes.len()
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
        self.free = self.base_free.clone();
        self.domain_free = self.base_domain_free.clone();
    }

    fn bring_up_to_date(&mut self, snapshot: &Snapshot) {
        let topology: &DomainIndex = &snapshot.topology;
        // What the last cycle's workspace changed, back to the base.
        for (work, base) in self.free.iter_mut().zip(&self.base_free) {
            if work != base {
                work.clone_from(base);
            }
        }
        for (work, base) in self.domain_free.iter_mut().zip(&self.base_domain_free) {
            for (w, b) in work.iter_mut().zip(base) {
                if w != b {
                    w.clone_from(b);
                }
            }
        }
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
            self.free[n].clone_from(&free);
            self.base_free[n] = free;
            self.seen[n] = (node.allocatable.clone(), node.requested.clone());
        }
    }
}
