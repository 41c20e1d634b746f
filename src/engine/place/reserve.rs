//! Reservations: the nodes a blocked gang needs are kept free of later gangs in the cycle,
//! so that a large gang is not overtaken forever by smaller ones.

use super::{GangFit, Workspace};
use crate::engine::model::{Gang, NodeIdx, RunningPod};
use crate::engine::resources::ResourceId;

impl Workspace<'_> {
    /// [`Workspace::reserve_for`], choosing the nodes as if the pods of `leaving` (those
    /// that run opportunistically, and leave when the gang needs their capacity) were gone.
    pub fn reserve_around<'p>(&mut self, gang: &Gang, leaving: impl Iterator<Item = &'p RunningPod>) -> Vec<NodeIdx> {
        let mut leaving = leaving.peekable();
        if leaving.peek().is_none() {
            return self.reserve_for(gang);
        }
        let mark = self.trial();
        for pod in leaving {
            self.release(pod);
        }
        let nodes = self.reserve_for(gang);
        self.undo_trial(mark);
        nodes
    }

    /// Places `gang` with the reserved `nodes` open to it (opportunistic backfill); they
    /// stay reserved for every other gang.
    pub fn place_on_reserved(&mut self, gang: &Gang, nodes: &[NodeIdx]) -> Option<GangFit> {
        for &node in nodes {
            self.set_reserved(node, false);
        }
        let fit = self.place(gang).ok();
        for &node in nodes {
            self.set_reserved(node, true);
        }
        fit
    }

    /// Keeps the nodes a blocked gang would need free for it: the statically feasible nodes
    /// with the most free capacity for its pods, until together they could hold the pods it
    /// needs once what runs there finishes, as far as the rules between pods let them (the
    /// running pods as they are now, and the gang's own pods). Later gangs in the cycle
    /// avoid those nodes.
    /// Returns the nodes it reserved.
    pub fn reserve_for(&mut self, gang: &Gang) -> Vec<NodeIdx> {
        let mut reserved = Vec::new();
        let mut needed = gang.still_needed().max(1);
        // A gang that needs one domain is kept one domain: the best one for it.
        let domain = if gang.topology.is_some_and(|t| t.required.is_some()) {
            match self.reservation_domain(gang) {
                Some(domain) => Some(domain),
                None => return reserved,
            }
        } else {
            None
        };
        let topology = &self.snapshot.topology;
        let mut order: Vec<(usize, NodeIdx)> = Vec::new();
        for pod in &gang.pods {
            let shape = self.shape_of(pod);
            if !order.iter().any(|(s, _)| *s == shape) {
                for &node in self.shapes[shape].candidates.iter() {
                    if domain.is_none_or(|(level, d)| topology.domain_of(level, node) == Some(d)) {
                        order.push((shape, node));
                    }
                }
            }
        }
        // Closest to fitting first: most pods that fit now, then most free of what the
        // pods ask for (accelerators before CPU), so the reservation drains soonest.
        let free = &self.free;
        let shapes = &self.shapes;
        let claims = &self.claims;
        order.sort_by_cached_key(|&(shape, node)| {
            let f = &free[node as usize];
            let demand = &shapes[shape].demand;
            let mut asked: i64 = demand.entries().iter().filter(|(r, _)| r.0 >= 4).map(|&(r, _)| f.get(r)).sum();
            if shapes[shape].devices.is_some() {
                asked += claims.free_devices(node) as i64;
            }
            (
                std::cmp::Reverse(f.fit_count(demand, usize::MAX >> 1)),
                std::cmp::Reverse(asked),
                std::cmp::Reverse(f.get(ResourceId::CPU)),
                node,
            )
        });
        // Pods with rules between pods are counted on a node only as the rules let them,
        // the gang's own reserved pods counting for each other ("one worker per node" keeps
        // one node per worker), and then taken back: nothing is placed.
        let mark = self.pods.mark();
        let mut members: Vec<(usize, Vec<usize>, usize)> = Vec::new();
        let mut cut = false;
        for (shape, node) in order {
            if needed == 0 {
                break;
            }
            if self.reserved[node as usize] {
                continue;
            }
            let node_ref = &self.snapshot.nodes[node as usize];
            let s = &mut self.shapes[shape];
            let variant;
            let demand = match s.devices.as_mut() {
                Some(d) => {
                    variant = self.claims.node_demand(d, &s.demand, node_ref);
                    &*variant
                }
                None => &s.demand,
            };
            let mut holds = node_ref.allocatable.fit_count(demand, needed);
            if let Some(d) = s.devices.as_ref() {
                // As many pods as its devices hold, each taking the devices it asks for (a
                // node without devices holds none).
                let devices = self.snapshot.dra.node_devices.get(node as usize).map_or(0, Vec::len);
                holds = holds.min(devices / super::score::devices_of(&d.pod).max(1) as usize);
            }
            if holds > 0 && self.checked(shape) {
                let by_capacity = holds;
                holds = self.rules_hold(gang, shape, node, holds, &mut members);
                cut |= holds < by_capacity;
            }
            if holds > 0 {
                self.set_reserved(node, true);
                reserved.push(node);
                needed -= holds;
            }
        }
        self.pods.rollback(mark);
        if needed > 0 && cut {
            // Not even every node it may use, drained, would hold it under its rules (more
            // workers, one per node, than nodes): holding them would only starve the rest.
            for &node in &reserved {
                self.set_reserved(node, false);
            }
            reserved.clear();
        }
        reserved
    }

    /// How many of `holds` pods of `shape` the rules between pods let `node` take, each
    /// counted there for the next; `members` keeps, per shape, its pods and the next to try.
    fn rules_hold(
        &mut self,
        gang: &Gang,
        shape: usize,
        node: NodeIdx,
        holds: usize,
        members: &mut Vec<(usize, Vec<usize>, usize)>,
    ) -> usize {
        if !members.iter().any(|(s, _, _)| *s == shape) {
            let of_shape: Vec<usize> =
                (0..gang.pods.len()).filter(|&p| self.shape_of(&gang.pods[p]) == shape).collect();
            members.push((shape, of_shape, 0));
        }
        let (_, of_shape, next) = members.iter_mut().find(|(s, _, _)| *s == shape).expect("just added");
        let tables = self.shapes[shape].tables.take();
        let mut taken = 0;
        while taken < holds && !of_shape.is_empty() {
            let pod = &gang.pods[of_shape[*next % of_shape.len()]];
            let rules = pod.rules.as_deref();
            if self.pods.check(tables.as_ref(), node, &pod.key.namespace, &pod.labels, rules).is_err() {
                break;
            }
            self.pods.place(node, &pod.key.namespace, &pod.labels, &pod.rules);
            *next += 1;
            taken += 1;
        }
        self.shapes[shape].tables = tables;
        taken
    }
}
