//! Why a gang did not fit: each node's reason, counted as kube-scheduler counts them, and
//! whether the gang could fit at all.

use std::collections::HashMap;

use super::{Scope, Workspace};
use crate::engine::dra::allocate::Failure;
use crate::engine::model::{Gang, NodeIdx, PendingPod, PodKey};
use crate::engine::pods::PodRejection;
use crate::engine::reason::{NodeRejection, NodeRejections};
use crate::engine::resources::ResourceId;

/// Why a gang did not fit.
#[derive(Clone)]
pub struct Shortfall {
    pub fit: usize,
    pub needed: usize,
    pub never_fits: bool,
    pub nodes: NodeRejections,
    /// An error that stops the gang anywhere (a selector failing at run time), naming the pod.
    pub error: Option<(PodKey, String)>,
    /// Why no domain of its topology could hold the gang, in words.
    pub topology: Option<String>,
}

impl Workspace<'_> {
    /// Why each candidate node of a device shape cannot take one of its pods now: a trial
    /// allocation per node, undone, once per cycle.
    fn device_rejections(&mut self, shape_id: usize, pod: &PendingPod) -> Vec<(NodeIdx, String)> {
        let shape = &mut self.shapes[shape_id];
        if let Some(found) = &shape.device_rejections {
            return found.clone();
        }
        let mut found = Vec::new();
        if let Some(devices) = shape.devices.as_mut() {
            for &node in shape.candidates.iter() {
                let node_ref = &self.snapshot.nodes[node as usize];
                let demand = self.claims.node_demand(devices, &shape.demand, node_ref);
                if demand.first_shortfall(&self.free[node as usize]).is_some() {
                    continue;
                }
                let mark = self.claims.mark();
                match self.claims.fit(devices, pod, node, node_ref) {
                    Ok(_) => {}
                    Err(Failure::Node(why) | Failure::Pod(why)) => found.push((node, why)),
                    Err(Failure::GaveUp) => {}
                }
                self.claims.rollback(mark);
            }
        }
        shape.device_rejections = Some(found.clone());
        found
    }

    pub(super) fn shortfall(
        &mut self,
        gang: &Gang,
        groups: &[(usize, Vec<usize>)],
        fit: usize,
        needed: usize,
        scope: Scope,
    ) -> Shortfall {
        let in_scope = |n: NodeIdx| match scope {
            Scope::All | Scope::Spread { .. } => true,
            Scope::Domain { level, domain, .. } => self.snapshot.topology.domain_of(level, n) == Some(domain),
        };
        let total_nodes = match scope {
            Scope::All | Scope::Spread { .. } => self.snapshot.nodes.len(),
            Scope::Domain { level, domain, .. } => {
                self.snapshot.topology.levels[level].domains[domain as usize].nodes.len()
            }
        };
        let mut nodes = NodeRejections { total_nodes, ..Default::default() };
        // Counted per resource id first, and named once: a waiting gang's reasons cost no
        // allocation per node.
        let mut short: Vec<(ResourceId, usize)> = Vec::new();
        let mut reserved = 0;
        // Pods an empty cluster could hold, shape by shape (each capped at its members).
        let mut capacity_when_empty = 0usize;
        let mut available = vec![false; self.snapshot.nodes.len()];
        for (shape_id, members) in groups {
            let device_rejections: HashMap<NodeIdx, String> = if self.shapes[*shape_id].devices.is_some() {
                self.device_rejections(*shape_id, &gang.pods[members[0]]).into_iter().collect()
            } else {
                HashMap::new()
            };
            let first = &gang.pods[members[0]];
            let checked = self.checked(*shape_id);
            let tables = self.shapes[*shape_id].tables.take();
            let shape = &mut self.shapes[*shape_id];
            if !matches!(scope, Scope::Domain { .. }) {
                // Pods of different shapes may be turned away by the same nodes for the same
                // reason: a node counts once per reason, as in kube-scheduler's message.
                for (rejection, count) in &shape.static_rejections.counts {
                    let counted = nodes.counts.entry(rejection.clone()).or_default();
                    *counted = (*counted).max(*count);
                }
            }
            for &node in shape.candidates.iter() {
                if !in_scope(node) {
                    continue;
                }
                let free = &self.free[node as usize];
                let variant;
                let demand = match shape.devices.as_mut() {
                    Some(d) => {
                        variant = self.claims.node_demand(d, &shape.demand, &self.snapshot.nodes[node as usize]);
                        &*variant
                    }
                    None => &shape.demand,
                };
                // kube-scheduler's order: NodePorts before the resources fit, spread and pod
                // affinity after them.
                let rules = match checked {
                    true => self.pods.check(
                        tables.as_ref(),
                        node,
                        &first.key.namespace,
                        &first.labels,
                        first.rules.as_deref(),
                    ),
                    false => Ok(()),
                };
                if self.reserved[node as usize] {
                    reserved += 1;
                } else if rules == Err(PodRejection::Ports) {
                    nodes.add(NodeRejection::Pods(PodRejection::Ports));
                } else if let Some(id) = demand.first_shortfall(free) {
                    match short.iter_mut().find(|(r, _)| *r == id) {
                        Some((_, count)) => *count += 1,
                        None => short.push((id, 1)),
                    }
                } else if let Some(why) = device_rejections.get(&node) {
                    nodes.add(NodeRejection::Devices(why.clone()));
                } else if let Err(why) = rules {
                    nodes.add(NodeRejection::Pods(why));
                } else {
                    available[node as usize] = true;
                }
            }
            capacity_when_empty = capacity_when_empty.saturating_add(shape.capacity_when_empty.min(members.len()));
            self.shapes[*shape_id].tables = tables;
        }
        for (id, count) in short {
            let name = self.snapshot.resources.name(id).to_string();
            *nodes.counts.entry(NodeRejection::Insufficient(name)).or_default() += count;
        }
        if reserved > 0 {
            *nodes.counts.entry(NodeRejection::Reserved).or_default() += reserved;
        }
        // A node rejected for several shapes is counted once per reason, as kube-scheduler
        // counts each pod's rejections; `available` counts nodes that could take any pod.
        nodes.available = available.iter().filter(|a| **a).count();
        // Shapes that share nodes each count those nodes in full, so this can miss a gang
        // that never fits; it never calls a gang that could fit hopeless.
        let never_fits = capacity_when_empty < needed.max(1);
        Shortfall { fit, needed, never_fits, nodes, error: None, topology: None }
    }
}
