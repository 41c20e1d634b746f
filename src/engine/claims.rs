//! Claims inside the gang transaction: per cycle, the devices taken so far, the claims
//! allocated so far (a claim shared by several pods is allocated once, and its other pods
//! follow its devices), and per pod and node, the allocation of everything the pod claims.
//! Every change is undone to a mark when a gang does not fit whole.

use std::collections::HashMap;
use std::sync::Arc;

use super::dra::allocate::{self, Allocator, ClaimToAllocate, Failure, ResolvedSpec, SearchLimits};
use super::dra::model::{
    AllocatedDevice, ClaimKey, ClaimNeed, ClaimSpec, DeviceNodes, DraSnapshot, ExtendedRequest, GpuShare, NodeSelector,
    Request, SHARED_CAPACITY, SubRequest,
};
use super::dra::selectors::SelectorCache;
use super::dra::state::{DeviceState, Mark};
use super::model::{Node, NodeIdx, PendingPod, PodDevices, PodKey};
use super::resources::{Demand, ResourceId};

/// A claim as this cycle decided it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimPlacement {
    pub pod: PodKey,
    /// The pod's name for the claim (its `spec.resourceClaims` entry), or, for extended
    /// resources served by DRA, the first such resource's name.
    pub name: String,
    /// The claim; for extended resources it does not exist yet (its name is empty) and the
    /// binder creates it.
    pub claim: ClaimKey,
    /// Devices allocated now; None when the claim was already allocated (by an earlier
    /// cycle, or for another pod of this gang) and only the pod's reservation is added.
    pub allocation: Option<Allocation>,
    /// For the extended-resource claim: the requests it serves, per container.
    pub extended: Vec<ExtendedRequest>,
    /// Reserved for the pod's PodGroup (name, UID) rather than for the pod.
    pub group: Option<(String, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    pub devices: Vec<AllocatedDevice>,
    /// Where the devices can be used; None when from every node.
    pub node_selector: Option<NodeSelector>,
}

/// A shape's device needs, resolved once per cycle.
pub struct ShapeDevices {
    pub pod: Arc<PodDevices>,
    /// Per claim of the pod: its resolved spec when it needs allocating.
    resolved: Vec<Option<ResolvedSpec>>,
    /// Per set of extended resources the node lacks (a bit per `pod.extended` entry): the
    /// demand left for the node and the claim DRA serves the rest with.
    variants: HashMap<u64, (Arc<Demand>, Option<ResolvedSpec>)>,
    /// A problem that stops the pod anywhere (a missing class, a selector that does not
    /// compile).
    pub error: Option<String>,
}

/// Devices of a cycle.
pub struct ClaimWork<'s> {
    pub dra: &'s DraSnapshot,
    pub state: DeviceState,
    pub selectors: &'s mut SelectorCache,
    /// Claims shared by several pods, allocated in this cycle: where their devices are.
    allocated_now: HashMap<ClaimKey, Option<NodeSelector>>,
    log: Vec<ClaimKey>,
    /// The snapshot's device set, named by its devices' revisions (found on first need).
    fingerprint: Option<u64>,
    limits: SearchLimits,
    /// Steps of the device search each pod (by its address in the snapshot) took so far in
    /// this cycle.
    pod_steps: HashMap<usize, u32>,
}

/// A point to undo to.
#[derive(Clone, Copy, Debug)]
pub struct ClaimMark {
    devices: Mark,
    log: usize,
}

fn extended_spec(requests: &[&ExtendedRequest]) -> Arc<ClaimSpec> {
    Arc::new(ClaimSpec {
        requests: requests
            .iter()
            .map(|r| Request { name: r.request_name.clone(), alternatives: vec![r.sub_request()] })
            .collect(),
        constraints: Vec::new(),
    })
}

/// Where a set of devices can be used, as Kubernetes writes it: pinned to the node if any
/// of them is local to it or binds to the node it is allocated for; otherwise the requirements of their node selectors, all in one
/// term; nowhere in particular (None) when every device is reachable from every node.
fn node_selector(dra: &DraSnapshot, devices: &[AllocatedDevice], node: &Node) -> Option<NodeSelector> {
    let mut term: Vec<crate::engine::model::LabelRequirement> = Vec::new();
    for d in devices {
        let device = &dra.devices[d.device as usize];
        if device.binding.as_ref().is_some_and(|b| b.binds_to_node) {
            return Some(NodeSelector::node_name(&node.name));
        }
        match &device.nodes {
            DeviceNodes::Node(_) => return Some(NodeSelector::node_name(&node.name)),
            DeviceNodes::Selector(s) if s.terms.len() == 1 => {
                for requirement in &s.terms[0] {
                    if !term.contains(requirement) {
                        term.push(requirement.clone());
                    }
                }
            }
            // A selector of several terms cannot be merged into one: pin to the node.
            DeviceNodes::Selector(_) => return Some(NodeSelector::node_name(&node.name)),
            DeviceNodes::All => {}
        }
    }
    (!term.is_empty()).then(|| NodeSelector { terms: vec![term] })
}

impl<'s> ClaimWork<'s> {
    pub fn new(dra: &'s DraSnapshot, selectors: &'s mut SelectorCache, limits: SearchLimits) -> ClaimWork<'s> {
        ClaimWork {
            dra,
            state: DeviceState::new(dra),
            selectors,
            allocated_now: HashMap::new(),
            log: Vec::new(),
            fingerprint: None,
            limits,
            pod_steps: HashMap::new(),
        }
    }

    /// Names a search on `node`: what is searched for (specs and the selectors they
    /// resolved to) and the node's devices as they are now.
    fn search_key(&self, claims: &[ClaimToAllocate<'_>], node: NodeIdx) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.limits.steps_per_node.hash(&mut h);
        for claim in claims {
            claim.spec.spec.hash(&mut h);
            for ids in claim.spec.selectors.iter().flatten().flatten() {
                for &(id, _) in ids {
                    self.selectors.expression(id).hash(&mut h);
                }
            }
        }
        for &d in &self.dra.node_devices[node as usize] {
            self.state.digest(self.dra, d, &mut h);
        }
        h.finish()
    }

    pub fn mark(&self) -> ClaimMark {
        ClaimMark { devices: self.state.mark(), log: self.log.len() }
    }

    pub fn rollback(&mut self, mark: ClaimMark) {
        self.state.rollback(mark.devices);
        for key in self.log.drain(mark.log..) {
            self.allocated_now.remove(&key);
        }
    }

    /// Free devices a node can reach, for scoring.
    pub fn free_devices(&self, node: NodeIdx) -> usize {
        self.dra.node_devices[node as usize].iter().filter(|&&d| self.state.is_free(d)).count()
    }

    /// For packing GPU fractions: the least capacity a partly shared device of `node`
    /// would have left after taking `sub`'s share; None when none can take it.
    pub fn share_left_after(&self, node: NodeIdx, sub: &SubRequest) -> Option<crate::quantity::Quantity> {
        let dra = self.dra;
        dra.node_devices[node as usize]
            .iter()
            .filter(|&&d| dra.devices[d as usize].allow_multiple_allocations && !self.state.is_free(d))
            .filter_map(|&d| {
                let device = &dra.devices[d as usize];
                let i = device.capacity_index(SHARED_CAPACITY)?;
                let amount = sub.consumes(device, i)?;
                let (whole, left) = self.state.left(dra, d, SHARED_CAPACITY);
                (!whole && left >= amount).then(|| left.checked_sub(amount).unwrap_or_default())
            })
            .min()
    }

    /// Resolves a shape's needs: class selectors and request selectors, compiled once.
    pub fn shape(&mut self, pod: &Arc<PodDevices>) -> ShapeDevices {
        let mut error = None;
        let resolved = pod
            .claims
            .iter()
            .map(|claim| match &claim.need {
                ClaimNeed::Allocate(spec) => {
                    let resolved = ResolvedSpec::resolve(spec, self.dra, self.selectors);
                    if error.is_none()
                        && let Some(why) = resolved.unusable()
                    {
                        error = Some(format!("claim {}, {why}", claim.name));
                    }
                    Some(resolved)
                }
                ClaimNeed::Allocated(_) => None,
            })
            .collect();
        for request in &pod.extended {
            if error.is_none() && !self.dra.classes.contains_key(&request.class) {
                error = Some(format!("{}: device class {} does not exist", request.resource_name, request.class));
            }
            if error.is_none() && request.share.is_some() {
                error = share_problem(self.dra, request);
            }
        }
        ShapeDevices { pod: pod.clone(), resolved, variants: HashMap::new(), error }
    }

    /// The error of the selectors Kubernetes evaluates on every node it tries for the pod
    /// (those of the first request of the pod's first claim to allocate, in its first
    /// alternative), when they fail at run time on a device one of `candidates` (the nodes
    /// the pod may go to) can reach: Kubernetes aborts the allocation on it, rather than
    /// try another node where the expression happens to evaluate (a driver upgrade half
    /// rolled out, an attribute published by only some nodes). Later requests and
    /// alternatives are evaluated only where the search reaches them, as the allocator
    /// does on each node it tries.
    pub fn runtime_error(&mut self, shape: &ShapeDevices, candidates: &[NodeIdx]) -> Option<String> {
        let dra = self.dra;
        let fingerprint = *self.fingerprint.get_or_insert_with(|| {
            let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(5);
            let h = dra.devices.iter().fold(dra.devices.len() as u64, |h, d| mix(h, d.revision));
            dra.pools.iter().fold(h, |h, p| mix(h, p.complete as u64))
        });
        let (claim, resolved) =
            shape.pod.claims.iter().zip(&shape.resolved).find_map(|(c, r)| r.as_ref().map(|r| (c, r)))?;
        let Ok(ids) = resolved.selectors.first()?.first()? else { return None };
        if ids.is_empty() {
            return None;
        }
        let list: Vec<_> = ids.iter().map(|&(id, _)| id).collect();
        let failures = self.selectors.failures(&list, dra, fingerprint);
        if failures.is_empty() {
            return None;
        }
        // In device order, so a device is found by binary search.
        let reachable = candidates.iter().flat_map(|&n| dra.node_devices[n as usize].iter());
        let (d, position, error) =
            reachable.filter_map(|&d| failures.binary_search_by_key(&d, |f| f.0).ok()).map(|i| &failures[i]).next()?;
        let request = &resolved.spec.requests[0];
        Some(format!(
            "claim {} (request {}): {}: CEL runtime error on device {}: {error}",
            claim.name,
            request.name,
            allocate::origin_text(ids[*position].1, &request.alternatives[0].class),
            dra.devices[*d as usize].id()
        ))
    }

    /// The demand a pod of the shape puts on `node`'s own capacity: extended resources the
    /// node does not list are left to DRA.
    pub fn node_demand(&mut self, shape: &mut ShapeDevices, demand: &Demand, node: &Node) -> Arc<Demand> {
        let mask = missing_mask(&shape.pod.extended, node);
        let dra = self.dra;
        let selectors = &mut *self.selectors;
        let (node_demand, _) = shape.variants.entry(mask).or_insert_with(|| {
            if mask == 0 {
                return (Arc::new(demand.clone()), None);
            }
            let served: Vec<&ExtendedRequest> =
                shape.pod.extended.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, r)| r).collect();
            let kept: Vec<(ResourceId, i64)> =
                demand.entries().iter().copied().filter(|(id, _)| !served.iter().any(|r| r.resource == *id)).collect();
            let spec = extended_spec(&served);
            (Arc::new(Demand::new(kept)), Some(ResolvedSpec::resolve(&spec, dra, selectors)))
        });
        node_demand.clone()
    }

    /// Allocates what `pod` claims on `node`, or says why not; on success the devices are
    /// taken until a rollback.
    pub fn fit(
        &mut self,
        shape: &mut ShapeDevices,
        pod: &PendingPod,
        node_index: NodeIdx,
        node: &Node,
    ) -> Result<Vec<ClaimPlacement>, Failure> {
        if let Some(error) = &shape.error {
            return Err(Failure::Pod(error.clone()));
        }
        let devices = pod.devices.as_ref().expect("a device shape's pods have devices");
        let mut to_allocate: Vec<usize> = Vec::new();
        for (i, claim) in devices.claims.iter().enumerate() {
            let selector = match &claim.need {
                ClaimNeed::Allocated(existing) => Some(existing.node_selector.as_ref()),
                ClaimNeed::Allocate(_) => self.allocated_now.get(&claim.claim).map(Option::as_ref),
            };
            match selector {
                Some(Some(selector)) if !selector.matches(node) => {
                    return Err(Failure::Node(format!("are not where the devices of claim {} are", claim.name)));
                }
                Some(_) => {}
                None => to_allocate.push(i),
            }
        }
        let mask = missing_mask(&devices.extended, node);
        let (_, implicit) = shape.variants.get(&mask).expect("node_demand made the variant");
        let mut claims: Vec<ClaimToAllocate<'_>> = to_allocate
            .iter()
            .map(|&i| ClaimToAllocate {
                label: &devices.claims[i].name,
                spec: shape.resolved[i].as_ref().expect("claims to allocate are resolved"),
            })
            .collect();
        if let Some(spec) = implicit {
            claims.push(ClaimToAllocate { label: &devices.extended[0].resource_name, spec });
        }
        let results = self.search(pod, node_index, &claims)?;
        let mut placements = Vec::with_capacity(devices.claims.len() + 1);
        let mut results = results.into_iter();
        for (i, claim) in devices.claims.iter().enumerate() {
            let allocation = if to_allocate.contains(&i) {
                let devices = results.next().expect("one result per claim");
                let selector = node_selector(self.dra, &devices, node);
                if !claim.private {
                    self.allocated_now.insert(claim.claim.clone(), selector.clone());
                    self.log.push(claim.claim.clone());
                }
                Some(Allocation { devices, node_selector: selector })
            } else {
                None
            };
            placements.push(ClaimPlacement {
                pod: pod.key.clone(),
                name: claim.name.clone(),
                claim: claim.claim.clone(),
                allocation,
                extended: Vec::new(),
                group: claim.group.clone(),
            });
        }
        if let Some(devices_of_implicit) = results.next() {
            let served: Vec<ExtendedRequest> = devices
                .extended
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, r)| r.clone())
                .collect();
            placements.push(ClaimPlacement {
                pod: pod.key.clone(),
                name: served[0].resource_name.clone(),
                claim: ClaimKey { namespace: pod.key.namespace.clone(), name: String::new() },
                allocation: Some(Allocation {
                    node_selector: node_selector(self.dra, &devices_of_implicit, node),
                    devices: devices_of_implicit,
                }),
                extended: served,
                group: None,
            });
        }
        Ok(placements)
    }
}

impl ClaimWork<'_> {
    /// Runs the device search for `pod` on `node`, within the pod's steps left this cycle,
    /// skipping a search that gave up before on the node's devices as they are.
    fn search(
        &mut self,
        pod: &PendingPod,
        node: NodeIdx,
        claims: &[ClaimToAllocate<'_>],
    ) -> Result<Vec<Vec<AllocatedDevice>>, Failure> {
        let SearchLimits { steps_per_node, steps_per_pod, .. } = self.limits;
        let gave_up_on_node =
            || format!("gave up the device search after {steps_per_node} steps (limits.deviceSearchStepsPerNode)");
        let used = self.pod_steps.get(&(pod as *const PendingPod as usize)).copied().unwrap_or(0);
        let left = steps_per_pod.saturating_sub(used);
        if left == 0 {
            return Err(Failure::Pod(format!(
                "the device search for this pod took its {steps_per_pod} steps of this cycle \
                 (limits.deviceSearchStepsPerPod) without a fit; it goes on next cycle, past the nodes it gave up on"
            )));
        }
        let key = self.selectors.any_gave_up().then(|| self.search_key(claims, node));
        if key.is_some_and(|key| self.selectors.gave_up(key)) {
            return Err(Failure::Node(gave_up_on_node()));
        }
        let limit = left.min(steps_per_node);
        let mut steps = 0;
        let mut allocator = Allocator { dra: self.dra, selectors: self.selectors, state: &mut self.state };
        let result = allocate::allocate(&mut allocator, node, claims, limit, &mut steps);
        *self.pod_steps.entry(pod as *const PendingPod as usize).or_default() += steps;
        match result {
            Err(Failure::GaveUp) if limit == steps_per_node => {
                let key = key.unwrap_or_else(|| self.search_key(claims, node));
                self.selectors.remember_gave_up(key);
                Err(Failure::Node(gave_up_on_node()))
            }
            // The pod's budget ran out on this node: said at its next try.
            Err(Failure::GaveUp) => Err(Failure::Node(gave_up_on_node())),
            other => other,
        }
    }
}

/// Why a GPU fraction can be had nowhere: no device allows several allocations, or none
/// can grant the memory asked for.
fn share_problem(dra: &DraSnapshot, request: &ExtendedRequest) -> Option<String> {
    let sub = request.sub_request();
    let mut shareable = 0;
    let mut largest = crate::quantity::Quantity::ZERO;
    for device in dra.devices.iter().filter(|d| d.allow_multiple_allocations) {
        let Some(i) = device.capacity_index(SHARED_CAPACITY) else { continue };
        shareable += 1;
        largest = largest.max(device.capacity[i].1.value);
        if sub.consumes(device, i).is_some_and(|q| q <= device.capacity[i].1.value) {
            return None;
        }
    }
    let mib = |q: crate::quantity::Quantity| q.units_ceil() >> 20;
    Some(match (shareable, request.share) {
        (0, _) => "a GPU fraction needs a GPU that allows several allocations (allowMultipleAllocations, with a \
                   memory capacity), and no device published does: run the node agent with --sharing"
            .to_string(),
        (_, Some(GpuShare::Memory(q))) => format!(
            "gpu-memory asks for {} MiB of one GPU, more than any shareable GPU can give (the largest has {} MiB)",
            mib(q),
            mib(largest)
        ),
        _ => "no shareable GPU's request policy grants the fraction asked for".to_string(),
    })
}

/// Which of the pod's DRA-servable extended resources `node` does not list as allocatable.
fn missing_mask(extended: &[ExtendedRequest], node: &Node) -> u64 {
    extended
        .iter()
        .take(64)
        .enumerate()
        // A GPU fraction is a share of a device: DRA serves it everywhere.
        .filter(|(_, r)| r.share.is_some() || node.allocatable.get(r.resource) <= 0)
        .fold(0u64, |mask, (i, _)| mask | (1 << i))
}
