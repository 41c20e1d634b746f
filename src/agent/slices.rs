//! Driver mode's ResourceSlices, computed without I/O: the devices a node's GPUs become,
//! with the attribute and capacity names NVIDIA's DRA driver uses, split at the API's
//! per-slice limit; and the writes that bring what is published to what should be.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity, DeviceTaint,
    ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::gpu::{Gpu, Health, Severity};
use crate::quantity::Quantity as ExactQuantity;

/// The API's limit on devices per slice, and the lower one when any device has taints.
pub const MAX_DEVICES: usize = 128;
pub const MAX_DEVICES_WITH_TAINTS: usize = 64;

/// Label on every object the agent writes, naming its node.
pub const NODE_LABEL: &str = "muster.dev/agent-node";

/// What driver mode publishes, and for whom.
#[derive(Clone, Debug)]
pub struct Publication {
    pub driver_name: String,
    pub node_name: String,
    /// The Node's UID: slices are owned by the Node and go when it goes.
    pub node_uid: Option<String>,
    /// Publish every GPU as shareable (consumable memory).
    pub sharing: bool,
}

/// The published name of a full GPU.
pub fn gpu_device_name(minor: u32) -> String {
    format!("gpu-{minor}")
}

/// The published name of a MIG device.
pub fn mig_device_name(minor: u32, gpu_instance: u32, compute_instance: u32) -> String {
    format!("gpu-{minor}-mig-{gpu_instance}-{compute_instance}")
}

fn string(value: &str) -> DeviceAttribute {
    DeviceAttribute { string: Some(value.to_string()), ..Default::default() }
}

fn int(value: u32) -> DeviceAttribute {
    DeviceAttribute { int: Some(i64::from(value)), ..Default::default() }
}

/// A version attribute in semver form: "580.95.05" → "580.95.5", "9.0" → "9.0.0".
/// Versions that are not numeric are published as given; the API server rejects them only
/// if they are not semver, and then the device is left without that attribute.
pub fn semver(version: &str) -> Option<String> {
    let mut parts: Vec<u64> = Vec::with_capacity(3);
    for part in version.trim().split('.') {
        parts.push(part.parse().ok()?);
    }
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    parts.resize(3, 0);
    Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

fn version(value: &str) -> Option<DeviceAttribute> {
    semver(value).map(|v| DeviceAttribute { version: Some(v), ..Default::default() })
}

/// A byte count with the largest binary suffix that divides it ("81559Mi"), the form the
/// API server keeps and people read.
fn bytes(value: u64) -> Quantity {
    const SUFFIXES: [(&str, u32); 4] = [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    for (suffix, shift) in SUFFIXES {
        if value != 0 && value.trailing_zeros() >= shift {
            return Quantity(format!("{}{suffix}", value >> shift));
        }
    }
    Quantity(value.to_string())
}

/// A quantity in the form the API server stores it, so published and desired compare equal.
fn canonical(text: &str) -> String {
    ExactQuantity::parse(text).map(|q| q.to_string()).unwrap_or_else(|_| text.to_string())
}

/// The attributes a GPU and its MIG devices share.
fn common_attributes(gpu: &Gpu, attributes: &mut BTreeMap<String, DeviceAttribute>) {
    attributes.insert("productName".into(), string(&gpu.product_name));
    attributes.insert("brand".into(), string(&gpu.brand));
    if !gpu.architecture.is_empty() {
        attributes.insert("architecture".into(), string(&gpu.architecture));
    }
    let versions = [
        ("cudaComputeCapability", &gpu.cuda_compute_capability),
        ("driverVersion", &gpu.driver_version),
        ("cudaDriverVersion", &gpu.cuda_driver_version),
    ];
    for (name, value) in versions {
        if let Some(v) = version(value) {
            attributes.insert(name.into(), v);
        }
    }
    if !gpu.pci_bus_id.is_empty() {
        attributes.insert("resource.kubernetes.io/pciBusID".into(), string(&gpu.pci_bus_id));
    }
    if !gpu.pcie_root.is_empty() {
        attributes.insert("resource.kubernetes.io/pcieRoot".into(), string(&gpu.pcie_root));
    }
    if let Some(clique) = &gpu.clique {
        attributes.insert("cliqueId".into(), string(clique));
    }
}

/// The taint a GPU's health puts on its devices, if any.
pub fn health_taint(driver_name: &str, health: &Health) -> Option<DeviceTaint> {
    let effect = match health.severity() {
        Severity::Healthy => return None,
        Severity::Informational => "None",
        Severity::Failing => "NoSchedule",
    };
    let (key, value) = match health {
        Health::Healthy => return None,
        Health::Xid { code } => ("xid", code.to_string()),
        Health::Ecc { uncorrected } => ("ecc", uncorrected.to_string()),
        Health::Lost => ("gpu-lost", "true".to_string()),
    };
    Some(DeviceTaint {
        key: format!("{driver_name}/{key}"),
        value: Some(value),
        effect: effect.into(),
        time_added: None,
    })
}

/// The devices a node's GPUs are published as: a GPU in MIG mode as its MIG devices, any
/// other as itself.
pub fn devices(gpus: &[Gpu], publication: &Publication) -> Vec<Device> {
    let mut devices = Vec::with_capacity(gpus.len());
    for gpu in gpus {
        let taints: Vec<DeviceTaint> = health_taint(&publication.driver_name, &gpu.health).into_iter().collect();
        let taints = (!taints.is_empty()).then_some(taints);
        if gpu.mig.is_empty() {
            let mut attributes = BTreeMap::new();
            attributes.insert("type".into(), string("gpu"));
            attributes.insert("uuid".into(), string(&gpu.uuid));
            attributes.insert("index".into(), int(gpu.minor));
            attributes.insert("minor".into(), int(gpu.minor));
            common_attributes(gpu, &mut attributes);
            let memory = bytes(gpu.memory_bytes);
            let request_policy = publication.sharing.then(|| {
                // Shares come in whole GiB, and the API wants the default and the maximum to
                // be multiples of the step: an H100's 81559 MiB is shared as 79 GiB.
                let whole = bytes(gpu.memory_bytes >> 30 << 30);
                CapacityRequestPolicy {
                    // A claim that asks for no memory takes all that can be shared.
                    default: Some(whole.clone()),
                    valid_range: Some(CapacityRequestPolicyRange {
                        min: Quantity("1Gi".into()),
                        max: Some(whole),
                        step: Some(Quantity("1Gi".into())),
                    }),
                    valid_values: None,
                }
            });
            let capacity = BTreeMap::from([("memory".to_string(), DeviceCapacity { value: memory, request_policy })]);
            devices.push(Device {
                name: gpu_device_name(gpu.minor),
                attributes: Some(attributes),
                capacity: Some(capacity),
                allow_multiple_allocations: publication.sharing.then_some(true),
                taints,
                ..Default::default()
            });
        } else {
            for mig in &gpu.mig {
                let mut attributes = BTreeMap::new();
                attributes.insert("type".into(), string("mig"));
                attributes.insert("uuid".into(), string(&mig.uuid));
                attributes.insert("parentUUID".into(), string(&gpu.uuid));
                attributes.insert("parentIndex".into(), int(gpu.minor));
                attributes.insert("profile".into(), string(&mig.profile));
                common_attributes(gpu, &mut attributes);
                let capacity = BTreeMap::from([
                    ("memory".to_string(), DeviceCapacity { value: bytes(mig.memory_bytes), request_policy: None }),
                    (
                        "multiprocessors".to_string(),
                        DeviceCapacity { value: Quantity(mig.multiprocessors.to_string()), request_policy: None },
                    ),
                ]);
                devices.push(Device {
                    name: mig_device_name(gpu.minor, mig.gpu_instance, mig.compute_instance),
                    attributes: Some(attributes),
                    capacity: Some(capacity),
                    taints: taints.clone(),
                    ..Default::default()
                });
            }
        }
    }
    devices
}

/// The Node as the owner of what the agent writes for it, so it goes with the Node.
pub fn node_owner(publication: &Publication) -> Option<Vec<OwnerReference>> {
    publication.node_uid.as_ref().map(|uid| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: publication.node_name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }]
    })
}

/// The name of the `index`th slice of a node's pool.
pub fn slice_name(publication: &Publication, index: usize) -> String {
    format!("{}-{}-{index}", publication.node_name, publication.driver_name.replace('.', "-"))
}

/// The slices that publish `devices` as pool `node_name` at `generation`.
pub fn desired(devices: Vec<Device>, publication: &Publication, generation: i64) -> Vec<ResourceSlice> {
    let limit = if devices.iter().any(|d| d.taints.is_some()) { MAX_DEVICES_WITH_TAINTS } else { MAX_DEVICES };
    let mut chunks: Vec<Vec<Device>> = Vec::new();
    let mut devices = devices.into_iter().peekable();
    while devices.peek().is_some() {
        chunks.push(devices.by_ref().take(limit).collect());
    }
    if chunks.is_empty() {
        // A node without GPUs still publishes its (empty) pool, so the scheduler knows the
        // pool is complete rather than still being written.
        chunks.push(Vec::new());
    }
    let count = chunks.len() as i64;
    chunks
        .into_iter()
        .enumerate()
        .map(|(index, devices)| ResourceSlice {
            metadata: ObjectMeta {
                name: Some(slice_name(publication, index)),
                labels: Some(BTreeMap::from([(NODE_LABEL.to_string(), publication.node_name.clone())])),
                owner_references: node_owner(publication),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                driver: publication.driver_name.clone(),
                node_name: Some(publication.node_name.clone()),
                pool: ResourcePool { name: publication.node_name.clone(), generation, resource_slice_count: count },
                devices: Some(devices),
                ..Default::default()
            },
        })
        .collect()
}

/// The writes that make the published slices match the wanted devices.
#[derive(Debug, Default, PartialEq)]
pub struct SlicePlan {
    pub create: Vec<ResourceSlice>,
    /// Replaced whole, each with the resourceVersion it was read at.
    pub replace: Vec<ResourceSlice>,
    pub delete: Vec<String>,
}

impl SlicePlan {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.replace.is_empty() && self.delete.is_empty()
    }
}

/// Compares what is published with what should be. Nothing is written when they match;
/// otherwise every slice of the pool is written at the next generation, so the scheduler
/// never mixes devices of two generations.
pub fn plan(published: &[ResourceSlice], devices: Vec<Device>, publication: &Publication) -> SlicePlan {
    let current = published.iter().map(|s| s.spec.pool.generation).max().unwrap_or(0);
    let same_generation = published.iter().all(|s| s.spec.pool.generation == current);
    let at_current = desired(devices.clone(), publication, current.max(1));
    if !published.is_empty() && same_generation && matches(published, &at_current) {
        return SlicePlan::default();
    }
    let wanted = desired(devices, publication, current + 1);
    let mut plan = SlicePlan::default();
    for slice in wanted {
        let name = slice.metadata.name.clone().unwrap_or_default();
        match published.iter().find(|p| p.metadata.name.as_deref() == Some(&name)) {
            Some(old) => {
                let mut slice = slice;
                slice.metadata.resource_version = old.metadata.resource_version.clone();
                plan.replace.push(slice);
            }
            None => plan.create.push(slice),
        }
    }
    for old in published {
        let name = old.metadata.name.clone().unwrap_or_default();
        if !plan.replace.iter().any(|s| s.metadata.name.as_deref() == Some(&name)) {
            plan.delete.push(name);
        }
    }
    plan
}

/// Whether the published slices say exactly what `wanted` says (names, owners, specs),
/// ignoring what the API server adds (taint times) and how it spells quantities.
fn matches(published: &[ResourceSlice], wanted: &[ResourceSlice]) -> bool {
    published.len() == wanted.len()
        && wanted.iter().all(|w| {
            published.iter().any(|p| {
                p.metadata.name == w.metadata.name
                    && p.metadata.owner_references == w.metadata.owner_references
                    && normalized(&p.spec) == normalized(&w.spec)
            })
        })
}

fn normalized(spec: &ResourceSliceSpec) -> ResourceSliceSpec {
    let mut spec = spec.clone();
    for device in spec.devices.iter_mut().flatten() {
        for taint in device.taints.iter_mut().flatten() {
            taint.time_added = None;
        }
        for capacity in device.capacity.iter_mut().flat_map(|c| c.values_mut()) {
            capacity.value.0 = canonical(&capacity.value.0);
            if let Some(policy) = &mut capacity.request_policy {
                for q in policy.default.iter_mut().chain(policy.valid_values.iter_mut().flatten()) {
                    q.0 = canonical(&q.0);
                }
                if let Some(range) = &mut policy.valid_range {
                    range.min.0 = canonical(&range.min.0);
                    for q in range.max.iter_mut().chain(range.step.iter_mut()) {
                        q.0 = canonical(&q.0);
                    }
                }
            }
        }
    }
    if spec.devices.as_ref().is_some_and(Vec::is_empty) {
        spec.devices = None;
    }
    spec
}
