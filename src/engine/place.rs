//! Gang placement over one cycle's working copy of free capacity.
//!
//! Pods of a gang with the same demand and the same node constraints form a *shape* and are
//! placed as one set. Per shape and cycle, the nodes that pass the static filters are found
//! once and ordered once by the scoring strategy; a cursor skips the leading nodes that can
//! no longer take the shape, so placing many pods of one shape does not rescan full nodes.
//! A gang either gets at least `min_member` pods placed, committed into the working copy,
//! or nothing: every tentative change is undone.

use std::collections::HashMap;
use std::sync::Arc;

use super::filter::check_static;
use super::model::{Gang, NodeConstraints, NodeIdx, PodKey, Snapshot};
use super::reason::{NodeRejection, NodeRejections};
use super::resources::{Capacity, Demand, ResourceId};

/// How nodes are ordered for a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scoring {
    /// Fill partly used nodes first, keeping whole nodes free for large gangs; pods that ask
    /// for no accelerator go to nodes without accelerators first.
    #[default]
    BinPack,
    /// Spread pods over the emptiest nodes.
    Spread,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ShapeKey {
    demand: Demand,
    constraints: Arc<NodeConstraints>,
}

struct Shape {
    demand: Demand,
    /// Nodes passing the static filters, best first.
    candidates: Vec<NodeIdx>,
    /// Candidates before this index cannot take even one pod of the shape.
    cursor: usize,
    static_rejections: NodeRejections,
    /// Pods of the shape an empty cluster could hold (capped at `usize::MAX`).
    capacity_when_empty: usize,
}

/// A gang's tentative placement: pod index within the gang → node.
pub type Assignment = Vec<(usize, NodeIdx)>;

/// Why a gang did not fit.
pub struct Shortfall {
    pub fit: usize,
    pub needed: usize,
    pub never_fits: bool,
    pub nodes: NodeRejections,
}

pub struct Workspace<'s> {
    snapshot: &'s Snapshot,
    scoring: Scoring,
    free: Vec<Capacity>,
    reserved: Vec<bool>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<ShapeKey, usize>,
    accelerators: Vec<ResourceId>,
}

impl<'s> Workspace<'s> {
    pub fn new(snapshot: &'s Snapshot, scoring: Scoring) -> Workspace<'s> {
        let free = snapshot.nodes.iter().map(|n| n.free(&snapshot.resources)).collect();
        // Extended resources (anything but the four built-ins) are the scarce ones.
        let accelerators = (4..snapshot.resources.len()).map(|i| ResourceId(i as u16)).collect();
        Workspace {
            snapshot,
            scoring,
            free,
            reserved: vec![false; snapshot.nodes.len()],
            shapes: Vec::new(),
            shape_ids: HashMap::new(),
            accelerators,
        }
    }

    /// Free capacity of a node in the working copy.
    pub fn free(&self, node: NodeIdx) -> &Capacity {
        &self.free[node as usize]
    }

    fn shape_of(&mut self, demand: &Demand, constraints: &Arc<NodeConstraints>) -> usize {
        let key = ShapeKey { demand: demand.clone(), constraints: constraints.clone() };
        if let Some(&id) = self.shape_ids.get(&key) {
            return id;
        }
        let mut static_rejections = NodeRejections { total_nodes: self.snapshot.nodes.len(), ..Default::default() };
        let mut candidates = Vec::new();
        let mut capacity_when_empty = 0usize;
        for (i, node) in self.snapshot.nodes.iter().enumerate() {
            match check_static(node, constraints) {
                Ok(()) => {
                    candidates.push(i as NodeIdx);
                    capacity_when_empty =
                        capacity_when_empty.saturating_add(node.allocatable.fit_count(demand, usize::MAX >> 1));
                }
                Err(r) => static_rejections.add(NodeRejection::Static(r)),
            }
        }
        let key_resource = self.accelerators.iter().copied().find(|&r| demand.get(r) > 0);
        let free = &self.free;
        let nodes = &self.snapshot.nodes;
        let accelerators = &self.accelerators;
        let score = |n: NodeIdx| -> (i64, i64, i64) {
            let f = &free[n as usize];
            match key_resource {
                Some(r) => (f.get(r), f.get(ResourceId::CPU), 0),
                None => {
                    let has_accelerators = accelerators.iter().any(|&r| nodes[n as usize].allocatable.get(r) > 0);
                    (has_accelerators as i64, f.get(ResourceId::CPU), f.get(ResourceId::MEMORY))
                }
            }
        };
        match self.scoring {
            Scoring::BinPack => candidates.sort_by_key(|&n| (score(n), n)),
            Scoring::Spread => candidates.sort_by_key(|&n| {
                let (a, b, c) = score(n);
                let first = if key_resource.is_some() { -a } else { a };
                ((first, -b, -c), n)
            }),
        }
        self.shapes.push(Shape {
            demand: demand.clone(),
            candidates,
            cursor: 0,
            static_rejections,
            capacity_when_empty,
        });
        self.shape_ids.insert(key, self.shapes.len() - 1);
        self.shapes.len() - 1
    }

    /// Places as many of the gang's pods as fit, if at least its `min_member` do; otherwise
    /// changes nothing and says why.
    pub fn place(&mut self, gang: &Gang) -> Result<Assignment, Shortfall> {
        let needed = gang.still_needed();
        // Group pods by shape, largest demand first so big pods are not crowded out.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, pod) in gang.pods.iter().enumerate() {
            let shape = self.shape_of(&pod.demand, &pod.constraints);
            match groups.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, members)) => members.push(i),
                None => groups.push((shape, vec![i])),
            }
        }
        let weight = |d: &Demand| -> (i64, i64) {
            let accelerators: i64 = d.entries().iter().filter(|(r, _)| r.0 >= 4).map(|&(_, a)| a).sum();
            (accelerators, d.get(ResourceId::CPU))
        };
        groups.sort_by_key(|(shape, _)| std::cmp::Reverse(weight(&self.shapes[*shape].demand)));

        let saved_cursors: Vec<(usize, usize)> = groups.iter().map(|(s, _)| (*s, self.shapes[*s].cursor)).collect();
        let mut assignment: Assignment = Vec::with_capacity(gang.pods.len());
        let mut deltas: Vec<(NodeIdx, usize, i64)> = Vec::new();
        for (shape_id, members) in &groups {
            let shape = &mut self.shapes[*shape_id];
            let mut remaining = members.len();
            let mut next = members.iter();
            let mut i = shape.cursor;
            let mut leading = true;
            while remaining > 0 && i < shape.candidates.len() {
                let node = shape.candidates[i];
                let free = &mut self.free[node as usize];
                let k = if self.reserved[node as usize] { 0 } else { free.fit_count(&shape.demand, remaining) };
                if k == 0 {
                    if leading && !self.reserved[node as usize] {
                        shape.cursor = i + 1;
                    }
                    i += 1;
                    continue;
                }
                leading = false;
                free.sub(&shape.demand, k as i64);
                deltas.push((node, *shape_id, k as i64));
                for _ in 0..k {
                    assignment.push((*next.next().expect("counted"), node));
                }
                remaining -= k;
                i += 1;
            }
        }

        let placed_enough = if needed == 0 { !assignment.is_empty() } else { assignment.len() >= needed };
        if placed_enough {
            return Ok(assignment);
        }
        for (node, shape_id, k) in deltas {
            let demand = &self.shapes[shape_id].demand;
            self.free[node as usize].add(demand, k);
        }
        for (shape_id, cursor) in saved_cursors {
            self.shapes[shape_id].cursor = cursor;
        }
        Err(self.shortfall(&groups, assignment.len(), needed))
    }

    fn shortfall(&self, groups: &[(usize, Vec<usize>)], fit: usize, needed: usize) -> Shortfall {
        let mut nodes = NodeRejections { total_nodes: self.snapshot.nodes.len(), ..Default::default() };
        // Pods an empty cluster could hold, shape by shape (each capped at its members).
        let mut capacity_when_empty = 0usize;
        let mut available = vec![false; self.snapshot.nodes.len()];
        for (shape_id, members) in groups {
            let shape = &self.shapes[*shape_id];
            for (rejection, count) in &shape.static_rejections.counts {
                *nodes.counts.entry(rejection.clone()).or_default() += count;
            }
            for &node in &shape.candidates {
                let free = &self.free[node as usize];
                if self.reserved[node as usize] {
                    nodes.add(NodeRejection::Reserved);
                } else if let Some(short) = shape.demand.first_shortfall(free) {
                    nodes.add(NodeRejection::Insufficient(self.snapshot.resources.name(short).to_string()));
                } else {
                    available[node as usize] = true;
                }
            }
            capacity_when_empty = capacity_when_empty.saturating_add(shape.capacity_when_empty.min(members.len()));
        }
        // A node rejected for several shapes is counted once per reason, as kube-scheduler
        // counts each pod's rejections; `available` counts nodes that could take any pod.
        nodes.available = available.iter().filter(|a| **a).count();
        // Shapes that share nodes each count those nodes in full, so this can miss a gang
        // that never fits; it never calls a gang that could fit hopeless.
        let never_fits = capacity_when_empty < needed.max(1);
        Shortfall { fit, needed, never_fits, nodes }
    }

    /// Keeps the nodes a blocked gang would need free for it: the statically feasible nodes
    /// with the most free capacity for its pods, until together they could hold the pods it
    /// needs once what runs there finishes. Later gangs in the cycle avoid those nodes.
    pub fn reserve_for(&mut self, gang: &Gang) {
        let mut needed = gang.still_needed().max(1);
        let mut order: Vec<(usize, NodeIdx)> = Vec::new();
        for pod in &gang.pods {
            let shape = self.shape_of(&pod.demand, &pod.constraints);
            if !order.iter().any(|(s, _)| *s == shape) {
                for &node in &self.shapes[shape].candidates {
                    order.push((shape, node));
                }
            }
        }
        // Closest to fitting first: most pods that fit now, then most free of what the
        // pods ask for (accelerators before CPU), so the reservation drains soonest.
        let free = &self.free;
        let shapes = &self.shapes;
        order.sort_by_key(|&(shape, node)| {
            let f = &free[node as usize];
            let demand = &shapes[shape].demand;
            let asked: i64 = demand.entries().iter().filter(|(r, _)| r.0 >= 4).map(|&(r, _)| f.get(r)).sum();
            (
                std::cmp::Reverse(f.fit_count(demand, usize::MAX >> 1)),
                std::cmp::Reverse(asked),
                std::cmp::Reverse(f.get(ResourceId::CPU)),
                node,
            )
        });
        for (shape, node) in order {
            if needed == 0 {
                break;
            }
            if self.reserved[node as usize] {
                continue;
            }
            let holds = self.snapshot.nodes[node as usize].allocatable.fit_count(&self.shapes[shape].demand, needed);
            if holds > 0 {
                self.reserved[node as usize] = true;
                needed -= holds;
            }
        }
    }

    /// Pod keys of an assignment, for the outcome.
    pub fn keys(gang: &Gang, assignment: &Assignment) -> Vec<(PodKey, NodeIdx)> {
        assignment.iter().map(|&(i, node)| (gang.pods[i].key.clone(), node)).collect()
    }
}
