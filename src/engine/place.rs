//! Gang placement over one cycle's working copy of free capacity and devices.
//!
//! Pods of a gang with the same demand, node constraints and device needs form a *shape*
//! and are placed as one set. Per shape and cycle, the nodes that pass the static filters
//! are found once and ordered once by the scoring strategy; a cursor skips the leading
//! nodes that can no longer take the shape, so placing many pods of one shape does not
//! rescan full nodes. A pod with claims is placed on a node only when all its claims can be
//! allocated there, in the same working copy. A gang either gets at least `min_member`
//! pods placed, with every device they claim, committed into the working copy, or nothing:
//! every tentative change is undone.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::claims::{ClaimPlacement, ClaimWork, ShapeDevices};
use super::dra::allocate::Failure;
use super::dra::selectors::SelectorCache;
use super::filter::check_static;
use super::model::{Gang, NodeConstraints, NodeIdx, PendingPod, PodDevices, PodKey, Snapshot};
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

/// Device needs as part of a shape's identity: equal when pods are interchangeable.
#[derive(Clone, Debug)]
struct DevicesKey(Arc<PodDevices>);

impl PartialEq for DevicesKey {
    fn eq(&self, other: &DevicesKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.same_shape(&other.0)
    }
}
impl Eq for DevicesKey {}
impl Hash for DevicesKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.shape_hash(state);
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ShapeKey {
    demand: Demand,
    constraints: Arc<NodeConstraints>,
    devices: Option<DevicesKey>,
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
    devices: Option<ShapeDevices>,
    /// Why nodes could not allocate the shape's devices, found once per cycle for reasons.
    device_rejections: Option<Vec<(NodeIdx, String)>>,
}

/// What a tentative placement took from a node: a shape's demand, or a node's own variant.
enum Delta {
    Shape(usize),
    Own(Arc<Demand>),
}

/// A gang's tentative placement: pod index within the gang → node.
pub type Assignment = Vec<(usize, NodeIdx)>;

/// A gang that fits: its pods' nodes and every claim they allocate or reserve.
#[derive(Debug, Default)]
pub struct GangFit {
    pub pods: Assignment,
    pub claims: Vec<ClaimPlacement>,
}

/// Why a gang did not fit.
pub struct Shortfall {
    pub fit: usize,
    pub needed: usize,
    pub never_fits: bool,
    pub nodes: NodeRejections,
    /// An error that stops the gang anywhere (a selector failing at run time), naming the pod.
    pub error: Option<(PodKey, String)>,
}

pub struct Workspace<'s> {
    snapshot: &'s Snapshot,
    scoring: Scoring,
    free: Vec<Capacity>,
    reserved: Vec<bool>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<ShapeKey, usize>,
    accelerators: Vec<ResourceId>,
    claims: ClaimWork<'s>,
}

impl<'s> Workspace<'s> {
    pub fn new(snapshot: &'s Snapshot, scoring: Scoring, selectors: &'s mut SelectorCache) -> Workspace<'s> {
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
            claims: ClaimWork::new(&snapshot.dra, selectors),
        }
    }

    /// Free capacity of a node in the working copy.
    pub fn free(&self, node: NodeIdx) -> &Capacity {
        &self.free[node as usize]
    }

    fn shape_of(&mut self, pod: &PendingPod) -> usize {
        let key = ShapeKey {
            demand: pod.demand.clone(),
            constraints: pod.constraints.clone(),
            devices: pod.devices.clone().map(DevicesKey),
        };
        if let Some(&id) = self.shape_ids.get(&key) {
            return id;
        }
        let mut devices = pod.devices.as_ref().map(|d| self.claims.shape(d));
        let mut static_rejections = NodeRejections { total_nodes: self.snapshot.nodes.len(), ..Default::default() };
        let mut candidates = Vec::new();
        let mut capacity_when_empty = 0usize;
        for (i, node) in self.snapshot.nodes.iter().enumerate() {
            match check_static(node, &pod.constraints) {
                Ok(()) => {
                    candidates.push(i as NodeIdx);
                    let holds = match devices.as_mut() {
                        Some(d) => {
                            node.allocatable.fit_count(&self.claims.node_demand(d, &pod.demand, node), usize::MAX >> 1)
                        }
                        None => node.allocatable.fit_count(&pod.demand, usize::MAX >> 1),
                    };
                    capacity_when_empty = capacity_when_empty.saturating_add(holds);
                }
                Err(r) => static_rejections.add(NodeRejection::Static(r)),
            }
        }
        let key_resource = self.accelerators.iter().copied().find(|&r| pod.demand.get(r) > 0);
        let free = &self.free;
        let nodes = &self.snapshot.nodes;
        let accelerators = &self.accelerators;
        let claims = &self.claims;
        let with_devices = devices.is_some();
        let score = |n: NodeIdx| -> (i64, i64, i64) {
            let f = &free[n as usize];
            match key_resource {
                _ if with_devices => (claims.free_devices(n) as i64, f.get(ResourceId::CPU), 0),
                Some(r) => (f.get(r), f.get(ResourceId::CPU), 0),
                None => {
                    let has_accelerators = accelerators.iter().any(|&r| nodes[n as usize].allocatable.get(r) > 0)
                        || !claims.dra.node_devices.get(n as usize).is_none_or(Vec::is_empty);
                    (has_accelerators as i64, f.get(ResourceId::CPU), f.get(ResourceId::MEMORY))
                }
            }
        };
        let scored = |n: NodeIdx| match self.scoring {
            Scoring::BinPack => (score(n), n),
            Scoring::Spread => {
                let (a, b, c) = score(n);
                let first = if key_resource.is_some() || with_devices { -a } else { a };
                ((first, -b, -c), n)
            }
        };
        candidates.sort_by_cached_key(|&n| scored(n));
        self.shapes.push(Shape {
            demand: pod.demand.clone(),
            candidates,
            cursor: 0,
            static_rejections,
            capacity_when_empty,
            devices,
            device_rejections: None,
        });
        self.shape_ids.insert(key, self.shapes.len() - 1);
        self.shapes.len() - 1
    }

    /// Places as many of the gang's pods as fit, if at least its `min_member` do; otherwise
    /// changes nothing and says why.
    pub fn place(&mut self, gang: &Gang) -> Result<GangFit, Shortfall> {
        let needed = gang.still_needed();
        // Group pods by shape, largest demand first so big pods are not crowded out.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, pod) in gang.pods.iter().enumerate() {
            let shape = self.shape_of(pod);
            match groups.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, members)) => members.push(i),
                None => groups.push((shape, vec![i])),
            }
        }
        let weight = |shape: &Shape| -> (i64, i64) {
            let d = &shape.demand;
            let accelerators: i64 = d.entries().iter().filter(|(r, _)| r.0 >= 4).map(|&(_, a)| a).sum();
            (accelerators + shape.devices.is_some() as i64, d.get(ResourceId::CPU))
        };
        groups.sort_by_key(|(shape, _)| std::cmp::Reverse(weight(&self.shapes[*shape])));

        let saved_cursors: Vec<(usize, usize)> = groups.iter().map(|(s, _)| (*s, self.shapes[*s].cursor)).collect();
        let claims_mark = self.claims.mark();
        let mut fit = GangFit { pods: Vec::with_capacity(gang.pods.len()), claims: Vec::new() };
        let mut deltas: Vec<(NodeIdx, Delta, i64)> = Vec::new();
        let mut error = None;
        'shapes: for (shape_id, members) in &groups {
            let mut remaining = members.len();
            let mut next = members.iter().peekable();
            let shape = &mut self.shapes[*shape_id];
            let mut i = shape.cursor;
            let mut leading = true;
            while remaining > 0 && i < shape.candidates.len() {
                let node = shape.candidates[i];
                let node_ref = &self.snapshot.nodes[node as usize];
                let free = &mut self.free[node as usize];
                let k = if self.reserved[node as usize] {
                    0
                } else if let Some(devices) = shape.devices.as_mut() {
                    // Pod by pod: each takes the node only with all of its claims.
                    let demand = self.claims.node_demand(devices, &shape.demand, node_ref);
                    let mut placed = 0;
                    for _ in 0..free.fit_count(&demand, remaining) {
                        let pod = &gang.pods[**next.peek().expect("counted")];
                        match self.claims.fit(devices, pod, node, node_ref) {
                            Ok(claims) => {
                                fit.claims.extend(claims);
                                fit.pods.push((*next.next().expect("counted"), node));
                                placed += 1;
                            }
                            Err(Failure::Node(_)) => break,
                            Err(Failure::Pod(why)) => {
                                error = Some((pod.key.clone(), why));
                                break 'shapes;
                            }
                        }
                    }
                    if placed > 0 {
                        free.sub(&demand, placed as i64);
                        deltas.push((node, Delta::Own(demand), placed as i64));
                    }
                    placed
                } else {
                    let k = free.fit_count(&shape.demand, remaining);
                    if k > 0 {
                        free.sub(&shape.demand, k as i64);
                        deltas.push((node, Delta::Shape(*shape_id), k as i64));
                        for _ in 0..k {
                            fit.pods.push((*next.next().expect("counted"), node));
                        }
                    }
                    k
                };
                if k == 0 {
                    if leading && !self.reserved[node as usize] {
                        shape.cursor = i + 1;
                    }
                    i += 1;
                    continue;
                }
                leading = false;
                remaining -= k;
                i += 1;
            }
        }

        let placed_enough = if needed == 0 { !fit.pods.is_empty() } else { fit.pods.len() >= needed };
        if placed_enough && error.is_none() {
            return Ok(fit);
        }
        for (node, delta, k) in deltas {
            let demand = match &delta {
                Delta::Shape(shape) => &self.shapes[*shape].demand,
                Delta::Own(demand) => demand,
            };
            self.free[node as usize].add(demand, k);
        }
        for (shape_id, cursor) in saved_cursors {
            self.shapes[shape_id].cursor = cursor;
        }
        self.claims.rollback(claims_mark);
        let mut shortfall = self.shortfall(gang, &groups, fit.pods.len(), needed);
        shortfall.error = error;
        Err(shortfall)
    }

    /// Why each candidate node of a device shape cannot take one of its pods now: a trial
    /// allocation per node, undone, once per cycle.
    fn device_rejections(&mut self, shape_id: usize, pod: &PendingPod) -> Vec<(NodeIdx, String)> {
        let shape = &mut self.shapes[shape_id];
        if let Some(found) = &shape.device_rejections {
            return found.clone();
        }
        let mut found = Vec::new();
        if let Some(devices) = shape.devices.as_mut() {
            for &node in &shape.candidates {
                let node_ref = &self.snapshot.nodes[node as usize];
                let demand = self.claims.node_demand(devices, &shape.demand, node_ref);
                if demand.first_shortfall(&self.free[node as usize]).is_some() {
                    continue;
                }
                let mark = self.claims.mark();
                match self.claims.fit(devices, pod, node, node_ref) {
                    Ok(_) => {}
                    Err(Failure::Node(why) | Failure::Pod(why)) => found.push((node, why)),
                }
                self.claims.rollback(mark);
            }
        }
        shape.device_rejections = Some(found.clone());
        found
    }

    fn shortfall(&mut self, gang: &Gang, groups: &[(usize, Vec<usize>)], fit: usize, needed: usize) -> Shortfall {
        let mut nodes = NodeRejections { total_nodes: self.snapshot.nodes.len(), ..Default::default() };
        // Pods an empty cluster could hold, shape by shape (each capped at its members).
        let mut capacity_when_empty = 0usize;
        let mut available = vec![false; self.snapshot.nodes.len()];
        for (shape_id, members) in groups {
            let device_rejections: HashMap<NodeIdx, String> = if self.shapes[*shape_id].devices.is_some() {
                self.device_rejections(*shape_id, &gang.pods[members[0]]).into_iter().collect()
            } else {
                HashMap::new()
            };
            let shape = &mut self.shapes[*shape_id];
            for (rejection, count) in &shape.static_rejections.counts {
                *nodes.counts.entry(rejection.clone()).or_default() += count;
            }
            for &node in &shape.candidates {
                let free = &self.free[node as usize];
                let variant;
                let demand = match shape.devices.as_mut() {
                    Some(d) => {
                        variant = self.claims.node_demand(d, &shape.demand, &self.snapshot.nodes[node as usize]);
                        &*variant
                    }
                    None => &shape.demand,
                };
                if self.reserved[node as usize] {
                    nodes.add(NodeRejection::Reserved);
                } else if let Some(short) = demand.first_shortfall(free) {
                    nodes.add(NodeRejection::Insufficient(self.snapshot.resources.name(short).to_string()));
                } else if let Some(why) = device_rejections.get(&node) {
                    nodes.add(NodeRejection::Devices(why.clone()));
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
        Shortfall { fit, needed, never_fits, nodes, error: None }
    }

    /// Keeps the nodes a blocked gang would need free for it: the statically feasible nodes
    /// with the most free capacity for its pods, until together they could hold the pods it
    /// needs once what runs there finishes. Later gangs in the cycle avoid those nodes.
    pub fn reserve_for(&mut self, gang: &Gang) {
        let mut needed = gang.still_needed().max(1);
        let mut order: Vec<(usize, NodeIdx)> = Vec::new();
        for pod in &gang.pods {
            let shape = self.shape_of(pod);
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
            if s.devices.is_some() {
                // A node without devices cannot hold a pod that claims some.
                holds = holds.min(self.snapshot.dra.node_devices.get(node as usize).map_or(0, Vec::len));
            }
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
