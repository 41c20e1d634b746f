//! The engine's model of DRA: devices in pools, device classes, and what pods claim.
//!
//! Built by the conversion (`convert::dra`) from ResourceSlices, DeviceClasses,
//! ResourceClaims and DeviceTaintRules; nothing here knows the Kubernetes API.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub use super::attribute::AttributeValue;
use super::cel::DeviceVal;
use crate::engine::node::{LabelRequirement, Node, SelectorOperator};
use crate::quantity::Quantity;

/// Index of a device in [`DraSnapshot::devices`].
pub type DeviceIdx = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceTaintEffect {
    NoSchedule,
    NoExecute,
    /// Informational: reported, never blocks an allocation.
    None,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceTaint {
    pub key: String,
    pub value: String,
    pub effect: DeviceTaintEffect,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceToleration {
    /// Empty with `exists`: tolerates every taint.
    pub key: String,
    pub exists: bool,
    pub value: String,
    /// None: every effect.
    pub effect: Option<DeviceTaintEffect>,
}

impl DeviceToleration {
    pub fn tolerates(&self, taint: &DeviceTaint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == taint.key && (self.exists || self.value == taint.value)
    }
}

/// How much of a shared device's capacity one allocation may consume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CapacityPolicy {
    pub default: Option<Quantity>,
    /// `validRange`: min, optional max, optional step (counted from min).
    pub range: Option<(Quantity, Option<Quantity>, Option<Quantity>)>,
    /// `validValues`, ascending.
    pub values: Vec<Quantity>,
}

impl CapacityPolicy {
    /// The amount an allocation that asks for `requested` consumes, or None when the
    /// policy cannot grant it.
    /// `full` is the device's whole capacity, what a request that names no amount and
    /// meets no default consumes.
    pub fn consumed(&self, requested: Option<Quantity>, full: Quantity) -> Option<Quantity> {
        let Some(requested) = requested.or(self.default) else { return Some(full) };
        if !self.values.is_empty() {
            return self.values.iter().copied().find(|v| *v >= requested);
        }
        if let Some((min, max, step)) = self.range {
            let amount = match step {
                Some(step) => requested.round_up_to_step(min, step),
                None => requested.max(min),
            };
            return max.is_none_or(|m| amount <= m).then_some(amount);
        }
        Some(requested)
    }

    /// What `milli` thousandths of a device whose capacity is `full` consumes: the share,
    /// rounded down to a step or valid value the policy grants, at least its minimum; None
    /// when the policy grants nothing that small or large.
    pub fn fraction(&self, milli: u32, full: Quantity) -> Option<Quantity> {
        let share = full.scale_milli_floor(milli);
        if !self.values.is_empty() {
            return self.values.iter().copied().rev().find(|v| *v <= share).or_else(|| self.values.first().copied());
        }
        if let Some((min, max, step)) = self.range {
            let amount = match step {
                Some(step) => share.round_down_to_step(min, step),
                None => share.max(min),
            };
            return max.is_none_or(|m| amount <= m).then_some(amount);
        }
        Some(share)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceCapacity {
    pub value: Quantity,
    pub policy: Option<CapacityPolicy>,
}

/// Which nodes can reach a device.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceNodes {
    Node(String),
    Selector(NodeSelector),
    All,
}

/// A Kubernetes NodeSelector: the node must match one of the terms.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSelector {
    /// Each term's requirements; a requirement on `metadata.name` is on the node's name.
    pub terms: Vec<Vec<LabelRequirement>>,
}

impl NodeSelector {
    pub fn matches(&self, node: &Node) -> bool {
        self.terms.iter().any(|term| term.iter().all(|r| r.matches_node(node)))
    }

    /// A selector for exactly one node, by name, as an allocation writes it.
    pub fn node_name(name: &str) -> NodeSelector {
        NodeSelector {
            terms: vec![vec![LabelRequirement {
                key: "metadata.name".into(),
                operator: SelectorOperator::In,
                values: vec![name.to_string()],
            }]],
        }
    }
}

/// One device of a ResourceSlice, with everything the allocator and selectors read.
#[derive(Debug)]
pub struct Device {
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub name: String,
    /// Attributes by fully qualified name (`gpu.nvidia.com/productName`): short names as
    /// published are qualified with the driver's name.
    pub attributes: HashMap<String, AttributeValue>,
    /// Capacity by the name it is published under.
    pub capacity: Vec<(String, DeviceCapacity)>,
    /// From its slice and from DeviceTaintRules.
    pub taints: Vec<DeviceTaint>,
    /// Counters it consumes when allocated: (counter set, counter, amount).
    pub consumes: Vec<(String, String, Quantity)>,
    pub allow_multiple_allocations: bool,
    pub nodes: DeviceNodes,
    /// What its driver must report before a pod may be bound to it; None for most devices.
    pub binding: Option<Arc<DeviceBinding>>,
    /// The `device` value selectors see.
    pub cel: DeviceVal,
    /// Identity of this version of the device for the selector cache: a device converted
    /// anew (its slice or a taint rule changed) gets a new one.
    pub revision: u64,
}

impl Device {
    /// The attribute with fully qualified name `name`.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes.get(name)
    }

    /// The capacity requested as `name`: as published, or qualified with the driver.
    pub fn capacity_index(&self, name: &str) -> Option<usize> {
        self.capacity.iter().position(|(published, _)| {
            published == name
                || name.split_once('/').is_some_and(|(domain, id)| domain == &*self.driver && published == id)
        })
    }

    /// `driver/pool/device`, as Kubernetes names a device.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.driver, self.pool, self.name)
    }
}

/// A device's binding conditions (KEP-5007), as its slice publishes them: the condition
/// types its driver sets True in the claim's `status.devices` once the device is ready for
/// the pod (an attachment over the fabric, say), those whose True means it never will be,
/// and whether the allocation is pinned to the node it was made for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceBinding {
    pub conditions: Vec<String>,
    pub failure_conditions: Vec<String>,
    pub binds_to_node: bool,
}

/// A resource pool: the slices of one driver's pool name at their newest generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub driver: String,
    pub name: String,
    pub generation: i64,
    /// All `resourceSliceCount` slices of the newest generation are present.
    pub complete: bool,
    /// Counter sets of the pool: name → counter → amount.
    pub counter_sets: HashMap<String, HashMap<String, Quantity>>,
    /// Some device of the pool has binding conditions: its devices are tried after those
    /// of every other pool, as kube-scheduler's allocator tries them.
    pub binding_conditions: bool,
}

/// A DeviceClass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceClass {
    pub name: String,
    /// CEL expressions, all of which a device must satisfy.
    pub selectors: Vec<String>,
    pub extended_resource_name: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocationMode {
    ExactCount(u32),
    All,
}

/// One way to satisfy a request: `exactly`, or one entry of `firstAvailable`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubRequest {
    /// The name results are written under: `gpu`, or `gpu/small` for an alternative.
    pub result_name: String,
    pub class: String,
    pub selectors: Vec<String>,
    pub mode: AllocationMode,
    pub admin_access: bool,
    pub tolerations: Vec<DeviceToleration>,
    /// `capacity.requests`: name → amount, for shared devices.
    pub capacity: Vec<(String, Quantity)>,
    /// A share of each device's capacity rather than an amount: what a GPU fraction asks
    /// (`gpu-fraction: "0.25"` takes a quarter of the memory of whichever GPU it gets).
    pub fraction: Option<CapacityFraction>,
    /// Each device at most once, even one that allows several allocations (the GPUs of a
    /// fraction of several GPUs are different GPUs).
    pub distinct: bool,
}

impl SubRequest {
    /// What taking `device` (one that allows several allocations) for this request
    /// consumes of its capacity `i`, as the device's policy grants it; None when the policy
    /// cannot grant it.
    pub fn consumes(&self, device: &Device, i: usize) -> Option<Quantity> {
        let capacity = &device.capacity[i].1;
        if let Some(fraction) = self.fraction.as_ref().filter(|f| device.capacity_index(&f.capacity) == Some(i)) {
            let policy = capacity.policy.clone().unwrap_or_default();
            return policy.fraction(fraction.milli, capacity.value);
        }
        let requested =
            self.capacity.iter().find(|(asked, _)| device.capacity_index(asked) == Some(i)).map(|(_, q)| *q);
        match &capacity.policy {
            Some(policy) => policy.consumed(requested, capacity.value),
            None => Some(requested.unwrap_or(capacity.value)),
        }
    }
}

/// Thousandths of a named capacity of the device allocated, rounded down to what the
/// device's request policy grants (so that four quarters always fit on one device).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CapacityFraction {
    pub capacity: String,
    pub milli: u32,
}

/// The GPU capacity fractions are taken from.
pub const SHARED_CAPACITY: &str = "memory";

/// A request of a claim: its alternatives, tried in order (one for `exactly`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub name: String,
    pub alternatives: Vec<SubRequest>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConstraintKind {
    /// All devices have the attribute, with the same value.
    Match(String),
    /// All devices have the attribute, each with a different value.
    Distinct(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Constraint {
    /// Requests it applies to (`req` or `req/sub`); empty: all of the claim's.
    pub requests: Vec<String>,
    pub kind: ConstraintKind,
}

impl Constraint {
    pub fn applies_to(&self, request: &str, result_name: &str) -> bool {
        self.requests.is_empty() || self.requests.iter().any(|r| r == request || r == result_name)
    }
}

/// What a claim asks for: its requests and constraints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClaimSpec {
    pub requests: Vec<Request>,
    pub constraints: Vec<Constraint>,
}

/// A ResourceClaim by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One device of an allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The request's result name (`gpu`, `gpu/small`, `container-0-request-0`).
    pub request: String,
    pub device: DeviceIdx,
    pub admin_access: bool,
    /// Set for devices that allow multiple allocations: what this share consumes, by
    /// capacity name.
    pub consumed: Option<Vec<(String, Quantity)>>,
}

/// Where a claim that is already allocated can be used, and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingAllocation {
    /// None: reachable from every node.
    pub node_selector: Option<NodeSelector>,
    /// Pods it is reserved for, against the API's limit.
    pub reserved: usize,
    /// The reservation includes the pods' gang (a PodGroup), so any pod of it may use it.
    pub reserved_for_gang: bool,
}

/// What a pod's entry in `spec.resourceClaims` needs from this cycle.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimNeed {
    /// The claim must be allocated, on the node the pod goes to.
    Allocate(Arc<ClaimSpec>),
    /// The claim is allocated; the pod must go where its devices are.
    Allocated(Arc<ExistingAllocation>),
}

/// One claim of a pending pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodClaim {
    /// The pod's name for it (`spec.resourceClaims[].name`), or the extended resource.
    pub name: String,
    pub claim: ClaimKey,
    /// The claim belongs to this pod alone (made from a template for it), so pods with the
    /// same template are interchangeable.
    pub private: bool,
    /// A claim of the pod's PodGroup (Kubernetes' `spec.resourceClaims` on the PodGroup):
    /// shared by the gang and reserved for the PodGroup (name, UID), not for each pod.
    pub group: Option<(String, String)>,
    pub need: ClaimNeed,
}

/// A container's extended resource that a DeviceClass may serve through DRA on nodes that
/// do not list it as allocatable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExtendedRequest {
    pub resource: crate::engine::resources::ResourceId,
    /// The resource's name (`nvidia.com/gpu`).
    pub resource_name: String,
    pub class: String,
    pub count: u32,
    pub container: String,
    /// `container-<i>-request-<j>`, as Kubernetes names it.
    pub request_name: String,
    /// A GPU fraction (KAI's `gpu-fraction` or `gpu-memory` annotation): `count` devices
    /// that allow several allocations, each shared. Always served through DRA.
    pub share: Option<GpuShare>,
}

/// How much of each device a GPU fraction takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuShare {
    /// Thousandths of the device's memory (`gpu-fraction: "0.5"` is 500).
    Fraction(u32),
    /// An amount of memory (`gpu-memory: "20480"` is 20480 MiB).
    Memory(Quantity),
}

impl ExtendedRequest {
    /// The request's one way to be satisfied, as a claim spec states it.
    pub fn sub_request(&self) -> SubRequest {
        let (capacity, fraction) = match self.share {
            None => (Vec::new(), None),
            Some(GpuShare::Memory(amount)) => (vec![(SHARED_CAPACITY.to_string(), amount)], None),
            Some(GpuShare::Fraction(milli)) => {
                (Vec::new(), Some(CapacityFraction { capacity: SHARED_CAPACITY.to_string(), milli }))
            }
        };
        SubRequest {
            result_name: self.request_name.clone(),
            class: self.class.clone(),
            selectors: Vec::new(),
            mode: AllocationMode::ExactCount(self.count),
            admin_access: false,
            tolerations: Vec::new(),
            capacity,
            fraction,
            distinct: self.share.is_some(),
        }
    }
}

/// A device in use before this cycle: by an allocated claim, or one being written.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceUse {
    pub device: DeviceIdx,
    /// Admin access: does not make the device unavailable.
    pub admin_access: bool,
    /// For a share of a device that allows multiple allocations.
    pub consumed: Option<Vec<(String, Quantity)>>,
}

/// Everything DRA in one snapshot.
#[derive(Clone, Debug, Default)]
pub struct DraSnapshot {
    pub pools: Vec<Pool>,
    pub devices: Vec<Arc<Device>>,
    /// Per device: the index of its pool in `pools`.
    pub device_pools: Vec<u32>,
    /// Per node (by `NodeIdx`): the devices it can reach, in allocation order.
    pub node_devices: Vec<Vec<DeviceIdx>>,
    pub classes: HashMap<String, Arc<DeviceClass>>,
    /// Extended resource name → the class that serves it through DRA.
    pub extended_classes: HashMap<String, String>,
    /// Devices used by claims allocated before this cycle.
    pub in_use: Vec<DeviceUse>,
}

impl PartialEq for DraSnapshot {
    fn eq(&self, other: &DraSnapshot) -> bool {
        self.pools == other.pools
            && self.devices.len() == other.devices.len()
            && self.devices.iter().zip(&other.devices).all(|(a, b)| a.revision == b.revision)
            && self.node_devices == other.node_devices
            && self.classes == other.classes
            && self.in_use == other.in_use
    }
}

impl DraSnapshot {
    pub fn pool_of(&self, device: DeviceIdx) -> &Pool {
        &self.pools[self.device_pools[device as usize] as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty() && self.classes.is_empty()
    }
}
