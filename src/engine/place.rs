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
use super::topology::DomainChoice;
use super::topology::DomainIndex;

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

/// Takes `k` copies of `demand` from a node's free capacity and from its domains'.
fn take(
    free: &mut [Capacity],
    domain_free: &mut [Vec<Capacity>],
    topology: &DomainIndex,
    node: NodeIdx,
    demand: &Demand,
    k: i64,
) {
    free[node as usize].sub(demand, k);
    for (level, domains) in domain_free.iter_mut().enumerate() {
        if let Some(d) = topology.domain_of(level, node) {
            domains[d as usize].sub(demand, k);
        }
    }
}

/// How many devices a pod's claims ask for at least (an `All` request asks for one).
fn devices_asked(pod: &PendingPod) -> i64 {
    use super::dra::model::{AllocationMode, ClaimNeed};
    let Some(devices) = &pod.devices else { return 0 };
    let claimed: i64 = devices
        .claims
        .iter()
        .filter_map(|c| match &c.need {
            ClaimNeed::Allocate(spec) => Some(spec),
            ClaimNeed::Allocated(_) => None,
        })
        .flat_map(|spec| spec.requests.iter())
        .map(|r| {
            r.alternatives
                .iter()
                .map(|a| match a.mode {
                    AllocationMode::ExactCount(n) => i64::from(n),
                    AllocationMode::All => 1,
                })
                .min()
                .unwrap_or(0)
        })
        .sum();
    claimed + devices.extended.iter().map(|e| i64::from(e.count)).sum::<i64>()
}

/// Which nodes a placement attempt may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    /// The nodes of one domain; with `spread`, the domains of that inner level with the most
    /// free capacity first, so that the gang spans as few of them as possible.
    Domain {
        level: usize,
        domain: u32,
        spread: Option<(usize, Key)>,
    },
    /// Every node, the domains of the inner level with the most free capacity first.
    Spread {
        inner: usize,
        key: Key,
    },
}

/// What a gang needs most, by which domains are compared: its accelerators, its devices, or
/// its CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    Resource(ResourceId),
    Devices,
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
    /// Why no domain of its topology could hold the gang, in words.
    pub topology: Option<String>,
}

pub struct Workspace<'s> {
    pub(crate) snapshot: &'s Snapshot,
    scoring: Scoring,
    pub(crate) domain_choice: DomainChoice,
    free: Vec<Capacity>,
    /// Per topology level, per domain: the free capacity of its nodes, kept with `free`.
    pub(crate) domain_free: Vec<Vec<Capacity>>,
    /// Per topology level, per domain: its nodes' allocatable capacity.
    pub(crate) domain_allocatable: Vec<Vec<Capacity>>,
    pub(crate) reserved: Vec<bool>,
    /// The level bin-packing keeps whole: the innermost configured one whose domains hold
    /// several nodes (racks, unless configured otherwise).
    pack_level: Option<usize>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<ShapeKey, usize>,
    accelerators: Vec<ResourceId>,
    pub(crate) claims: ClaimWork<'s>,
}

impl<'s> Workspace<'s> {
    pub fn new(
        snapshot: &'s Snapshot,
        scoring: Scoring,
        domain_choice: DomainChoice,
        selectors: &'s mut SelectorCache,
    ) -> Workspace<'s> {
        let free: Vec<Capacity> = snapshot.nodes.iter().map(|n| n.free(&snapshot.resources)).collect();
        let sum = |level: &crate::engine::topology::Level, of: &dyn Fn(usize) -> Capacity| -> Vec<Capacity> {
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
        };
        let levels = &snapshot.topology.levels;
        let domain_free = levels.iter().map(|l| sum(l, &|n| free[n].clone())).collect();
        let domain_allocatable = levels.iter().map(|l| sum(l, &|n| snapshot.nodes[n].allocatable.clone())).collect();
        // Extended resources (anything but the four built-ins) are the scarce ones.
        let accelerators = (4..snapshot.resources.len()).map(|i| ResourceId(i as u16)).collect();
        let topology = &snapshot.topology;
        let pack_level =
            (0..topology.configured).rev().find(|&l| topology.levels[l].domains.iter().any(|d| d.nodes.len() > 1));
        Workspace {
            snapshot,
            scoring,
            domain_choice,
            pack_level,
            free,
            domain_free,
            domain_allocatable,
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
        // Between nodes equally full, bin-packing takes the one in the fullest domain of the
        // packing level (racks, by default), so that whole domains stay free too.
        let topology = &self.snapshot.topology;
        let domain_free = &self.domain_free;
        let pack_level = self.pack_level;
        let first_fit = self.domain_choice == DomainChoice::FirstFit;
        let packed = |n: NodeIdx| -> i64 {
            let (Some(level), Some(r)) = (pack_level, key_resource) else { return 0 };
            match topology.domain_of(level, n) {
                None => i64::MAX,
                Some(d) if first_fit => i64::from(d),
                Some(d) => domain_free[level][d as usize].get(r),
            }
        };
        let scored = |n: NodeIdx| match self.scoring {
            Scoring::BinPack => {
                let (a, b, c) = score(n);
                ((packed(n), a, b, c), n)
            }
            Scoring::Spread => {
                let (a, b, c) = score(n);
                let first = if key_resource.is_some() || with_devices { -a } else { a };
                ((first, 0, -b, -c), n)
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

    /// Places as many of the gang's pods as fit, if at least its `min_member` do, within its
    /// topology constraint; otherwise changes nothing and says why.
    pub fn place(&mut self, gang: &Gang) -> Result<GangFit, Shortfall> {
        match gang.topology {
            Some(topology) => self.place_in_topology(gang, topology),
            None => self.place_in(gang, Scope::All),
        }
    }

    /// The gang's pods grouped by shape, largest demand first so big pods are not crowded out.
    pub(crate) fn groups(&mut self, gang: &Gang) -> Vec<(usize, Vec<usize>)> {
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
        groups
    }

    /// The nodes of a shape a scoped attempt tries, in order: the shape's candidates in the
    /// domain, taking first the inner domains with the most free capacity when spreading.
    fn scoped_order(&self, shape: usize, within: Option<(usize, u32)>, spread: Option<(usize, Key)>) -> Vec<NodeIdx> {
        let index = &self.snapshot.topology;
        let mut order: Vec<NodeIdx> = self.shapes[shape]
            .candidates
            .iter()
            .copied()
            .filter(|&n| within.is_none_or(|(level, domain)| index.domain_of(level, n) == Some(domain)))
            .collect();
        if let Some((inner, key)) = spread {
            order.sort_by_cached_key(|&n| {
                let free = index.domain_of(inner, n).map_or(0, |d| self.domain_key_free(inner, d, key));
                (std::cmp::Reverse(free), index.domain_of(inner, n))
            });
        }
        order
    }

    /// Places the gang within `scope`, or changes nothing.
    pub(crate) fn place_in(&mut self, gang: &Gang, scope: Scope) -> Result<GangFit, Shortfall> {
        let needed = gang.still_needed();
        let groups = self.groups(gang);
        let saved_cursors: Vec<(usize, usize)> = groups.iter().map(|(s, _)| (*s, self.shapes[*s].cursor)).collect();
        let claims_mark = self.claims.mark();
        let mut fit = GangFit { pods: Vec::with_capacity(gang.pods.len()), claims: Vec::new() };
        let mut deltas: Vec<(NodeIdx, Delta, i64)> = Vec::new();
        let mut error = None;
        'shapes: for (shape_id, members) in &groups {
            let mut next = members.iter().peekable();
            let mut remaining = members.len();
            let order = match scope {
                Scope::All => None,
                Scope::Domain { level, domain, spread } => {
                    Some(self.scoped_order(*shape_id, Some((level, domain)), spread))
                }
                Scope::Spread { inner, key } => Some(self.scoped_order(*shape_id, None, Some((inner, key)))),
            };
            let mut i = if order.is_some() { 0 } else { self.shapes[*shape_id].cursor };
            let mut leading = true;
            loop {
                let node = match &order {
                    Some(order) => order.get(i).copied(),
                    None => self.shapes[*shape_id].candidates.get(i).copied(),
                };
                let Some(node) = node else { break };
                if remaining == 0 {
                    break;
                }
                let k = match self.fill_node(*shape_id, node, remaining, gang, &mut next, &mut fit, &mut deltas) {
                    Ok(k) => k,
                    Err(e) => {
                        error = Some(e);
                        break 'shapes;
                    }
                };
                if k == 0 {
                    // A node that cannot take even one pod of the shape stays skipped for
                    // the rest of the cycle (capacity only shrinks within a cycle).
                    if leading && order.is_none() && !self.reserved[node as usize] {
                        self.shapes[*shape_id].cursor = i + 1;
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
            // Giving back is taking a negative amount.
            take(&mut self.free, &mut self.domain_free, &self.snapshot.topology, node, demand, -k);
        }
        for (shape_id, cursor) in saved_cursors {
            self.shapes[shape_id].cursor = cursor;
        }
        self.claims.rollback(claims_mark);
        let mut shortfall = self.shortfall(gang, &groups, fit.pods.len(), needed, scope);
        shortfall.error = error;
        Err(shortfall)
    }

    /// Puts as many of the shape's `remaining` pods on `node` as fit there (with their
    /// claims), recording them in `fit` and the capacity taken in `deltas`.
    #[allow(clippy::too_many_arguments)]
    fn fill_node(
        &mut self,
        shape_id: usize,
        node: NodeIdx,
        remaining: usize,
        gang: &Gang,
        next: &mut std::iter::Peekable<std::slice::Iter<'_, usize>>,
        fit: &mut GangFit,
        deltas: &mut Vec<(NodeIdx, Delta, i64)>,
    ) -> Result<usize, (PodKey, String)> {
        if self.reserved[node as usize] {
            return Ok(0);
        }
        let node_ref = &self.snapshot.nodes[node as usize];
        let shape = &mut self.shapes[shape_id];
        let Some(devices) = shape.devices.as_mut() else {
            let k = self.free[node as usize].fit_count(&shape.demand, remaining);
            if k > 0 {
                take(&mut self.free, &mut self.domain_free, &self.snapshot.topology, node, &shape.demand, k as i64);
                deltas.push((node, Delta::Shape(shape_id), k as i64));
                for _ in 0..k {
                    fit.pods.push((*next.next().expect("counted"), node));
                }
            }
            return Ok(k);
        };
        // Pod by pod: each takes the node only with all of its claims.
        let demand = self.claims.node_demand(devices, &shape.demand, node_ref);
        let mut placed = 0;
        for _ in 0..self.free[node as usize].fit_count(&demand, remaining) {
            let pod = &gang.pods[**next.peek().expect("counted")];
            match self.claims.fit(devices, pod, node, node_ref) {
                Ok(claims) => {
                    fit.claims.extend(claims);
                    fit.pods.push((*next.next().expect("counted"), node));
                    placed += 1;
                }
                Err(Failure::Node(_)) => break,
                Err(Failure::Pod(why)) => return Err((pod.key.clone(), why)),
            }
        }
        if placed > 0 {
            take(&mut self.free, &mut self.domain_free, &self.snapshot.topology, node, &demand, placed as i64);
            deltas.push((node, Delta::Own(demand), placed as i64));
        }
        Ok(placed)
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

    fn shortfall(
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
            if !matches!(scope, Scope::Domain { .. }) {
                for (rejection, count) in &shape.static_rejections.counts {
                    *nodes.counts.entry(rejection.clone()).or_default() += count;
                }
            }
            for &node in &shape.candidates {
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
        Shortfall { fit, needed, never_fits, nodes, error: None, topology: None }
    }

    /// The free amount of `key` in a domain.
    pub(crate) fn domain_key_free(&self, level: usize, domain: u32, key: Key) -> i64 {
        match key {
            Key::Resource(r) => self.domain_free[level][domain as usize].get(r),
            Key::Devices => self.snapshot.topology.levels[level].domains[domain as usize]
                .nodes
                .iter()
                .map(|&n| self.claims.free_devices(n) as i64)
                .sum(),
        }
    }

    /// What the gang's pods ask of `key`, over the pods it still needs (the largest first).
    pub(crate) fn gang_key(&mut self, gang: &Gang) -> (Key, i64) {
        let needed = gang.still_needed().max(1);
        let accelerator = self
            .accelerators
            .iter()
            .copied()
            .filter(|&r| gang.pods.iter().any(|p| p.demand.get(r) > 0))
            .max_by_key(|&r| gang.pods.iter().map(|p| p.demand.get(r)).sum::<i64>());
        let with_devices = gang.pods.iter().any(|p| p.devices.is_some());
        let (key, per_pod): (Key, Vec<i64>) = match accelerator {
            Some(r) if !with_devices => (Key::Resource(r), gang.pods.iter().map(|p| p.demand.get(r)).collect()),
            _ if with_devices => (Key::Devices, gang.pods.iter().map(|p| devices_asked(p)).collect()),
            _ => (Key::Resource(ResourceId::CPU), gang.pods.iter().map(|p| p.demand.get(ResourceId::CPU)).collect()),
        };
        let mut per_pod = per_pod;
        per_pod.sort_unstable_by(|a, b| b.cmp(a));
        (key, per_pod.iter().take(needed).sum())
    }

    /// Keeps the nodes a blocked gang would need free for it: the statically feasible nodes
    /// with the most free capacity for its pods, until together they could hold the pods it
    /// needs once what runs there finishes. Later gangs in the cycle avoid those nodes.
    pub fn reserve_for(&mut self, gang: &Gang) {
        let mut needed = gang.still_needed().max(1);
        // A gang that needs one domain is kept one domain: the best one for it.
        let domain = if gang.topology.is_some_and(|t| t.required.is_some()) {
            match self.reservation_domain(gang) {
                Some(domain) => Some(domain),
                None => return,
            }
        } else {
            None
        };
        let topology = &self.snapshot.topology;
        let mut order: Vec<(usize, NodeIdx)> = Vec::new();
        for pod in &gang.pods {
            let shape = self.shape_of(pod);
            if !order.iter().any(|(s, _)| *s == shape) {
                for &node in &self.shapes[shape].candidates {
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
