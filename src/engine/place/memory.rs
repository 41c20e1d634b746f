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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::engine::build::{GPU, SnapshotBuilder};
    use crate::engine::model::Snapshot;
    use crate::engine::{CycleConfig, CycleMemory, Queueing, schedule, schedule_remembering};

    fn cluster() -> Snapshot {
        let mut builder = SnapshotBuilder::new();
        for i in 0..8 {
            let rack = format!("r{}", i / 4);
            let labels = [("topology.muster.dev/rack", rack.as_str())];
            builder = builder.gpu_node(&format!("n{i}"), 64, 512, 8, &labels);
        }
        for (i, (pods, gpus)) in [(2, 8), (1, 4), (4, 2), (3, 8), (1, 1), (8, 1)].into_iter().enumerate() {
            builder = builder.gang(&format!("g{i}"), pods, pods, &[("cpu", 1000), (GPU, gpus)]);
            if pods > 1 {
                builder = builder.with_topology(Some("rack"), None);
            }
        }
        builder.build()
    }

    /// The fresh cluster's gangs, renamed for `step`.
    fn more(fresh: &Snapshot, step: usize) -> Vec<crate::engine::model::Gang> {
        let mut gangs = fresh.gangs.clone();
        for gang in &mut gangs {
            gang.key.name = format!("{}-{step}", gang.key.name);
            for pod in &mut gang.pods {
                pod.key.name = format!("{}-{step}", pod.key.name);
            }
        }
        gangs
    }

    /// Binds what `outcome` placed into the snapshot's nodes and drops the gangs placed.
    fn bind(snapshot: &mut Snapshot, outcome: &crate::engine::CycleOutcome) {
        for placement in &outcome.placements {
            let gang = snapshot.gangs.iter().find(|g| g.key == placement.gang).unwrap().clone();
            for (key, node) in &placement.pods {
                let pod = gang.pods.iter().find(|p| &p.key == key).unwrap();
                Arc::make_mut(&mut snapshot.nodes)[*node as usize].requested.add(&pod.demand, 1);
            }
            snapshot.gangs.retain(|g| g.key != placement.gang);
        }
    }

    #[test]
    fn kept_capacity_gives_the_outcomes_of_a_fresh_cycle_as_the_cluster_changes() {
        for queueing in [Queueing::Backfill, Queueing::BestEffortFifo, Queueing::TimedBackfill] {
            let config = CycleConfig { queueing, reserve_after_seconds: 0, ..Default::default() };
            let mut memory = CycleMemory::default();
            let mut snapshot = cluster();
            let fresh = cluster();
            for step in 0..5 {
                let remembered = schedule_remembering(&snapshot, &config, &mut memory);
                assert_eq!(remembered, schedule(&snapshot, &config), "{queueing:?}, step {step}");
                bind(&mut snapshot, &remembered);
                match step {
                    // Pods end: a node's requests go.
                    0 => Arc::make_mut(&mut snapshot.nodes)[0].requested = Default::default(),
                    // More gangs arrive.
                    1 => snapshot.gangs.extend(more(&fresh, step)),
                    // A node shrinks.
                    2 => {
                        let gpu = snapshot.resources.get(GPU).unwrap();
                        Arc::make_mut(&mut snapshot.nodes)[5].allocatable.set(gpu, 4);
                    }
                    // A node joins: everything is made again.
                    _ => {
                        let mut node = snapshot.nodes[7].clone();
                        node.name = format!("extra-{step}");
                        node.requested = Default::default();
                        Arc::make_mut(&mut snapshot.nodes).push(node);
                        let topology =
                            crate::engine::topology::TopologyTree::new(crate::engine::topology::default_levels());
                        let mut tree = topology;
                        tree.update(&snapshot.nodes);
                        snapshot.topology = tree.index(&snapshot.nodes);
                        snapshot.gangs.extend(more(&fresh, step));
                    }
                }
            }
            assert_eq!(memory.capacity.rebuilds, 2, "made from scratch at first and once a node joined");
        }
    }
}
