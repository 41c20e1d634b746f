//! CDI specs of prepared claims: which device nodes and environment a claim's GPUs give a
//! container. Pure: a claim's allocation and the node's GPUs in, a spec out; writing it to
//! disk is [`super::spec_file`]'s job.
//!
//! One spec per claim. Each allocated device is one CDI device carrying its GPU's device node
//! (a MIG device carries its parent's). What every container of the claim needs once, the
//! driver's control nodes and `NVIDIA_VISIBLE_DEVICES` with the UUIDs of all of the claim's
//! GPUs (MIG UUIDs for MIG devices), sits in the spec's own container edits, which a runtime
//! applies once whenever it injects any device of the spec. On a node that runs CUDA MPS,
//! [`super::mps`] adds what makes the containers of a claim's shares of GPUs MPS clients.

use std::fmt;

use k8s_openapi::api::resource::v1::DeviceRequestAllocationResult;
use serde::{Deserialize, Serialize};

use crate::agent::gpu::Gpu;

/// The CDI version written. The features used (device nodes, environment, spec-level edits)
/// need no more than 0.3.0; 0.6.0 is what the container runtimes that run DRA read.
pub const CDI_VERSION: &str = "0.6.0";

/// The CDI class of the devices; the vendor is the driver name (`gpu.muster.dev/gpu`).
pub const CLASS: &str = "gpu";

/// The environment variable NVIDIA's container runtime reads to expose GPUs.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// Device nodes every CUDA process needs besides its GPUs: the control device and the
/// unified memory devices.
pub const CONTROL_NODES: [&str; 3] = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"];

/// Why a claim's allocation cannot be prepared on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("device {device} is in pool {pool}, not on this node ({node})")]
    OtherNode { device: String, pool: String, node: String },
    #[error("device {device} is not a device this driver publishes (gpu-<minor> or gpu-<minor>-mig-<gi>-<ci>)")]
    UnknownName { device: String },
    #[error("device {device}: this node has no GPU with minor number {minor}")]
    NoSuchGpu { device: String, minor: u32 },
    #[error("device {device}: GPU {minor} is in MIG mode, so only its MIG devices can be prepared")]
    MigMode { device: String, minor: u32 },
    #[error(
        "device {device}: GPU {minor} has no MIG device with GPU instance {gpu_instance} and compute instance {compute_instance}"
    )]
    NoSuchMigDevice { device: String, minor: u32, gpu_instance: u32, compute_instance: u32 },
    #[error("device {device}: consumed capacity memory {value:?} is not a whole number of bytes")]
    ConsumedMemory { device: String, value: String },
}

/// A device name as the agent publishes it in its ResourceSlices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceName {
    /// `gpu-<minor>`: a whole GPU.
    Gpu { minor: u32 },
    /// `gpu-<minor>-mig-<gi>-<ci>`: a MIG device of GPU `minor`.
    Mig { minor: u32, gpu_instance: u32, compute_instance: u32 },
}

impl DeviceName {
    /// Reads a published device name; `None` for any other name, including non-canonical
    /// spellings of a number (`gpu-01`), which the agent never publishes.
    pub fn parse(name: &str) -> Option<DeviceName> {
        let parts: Vec<&str> = name.split('-').collect();
        let parsed = match parts.as_slice() {
            ["gpu", minor] => DeviceName::Gpu { minor: number(minor)? },
            ["gpu", minor, "mig", gi, ci] => {
                DeviceName::Mig { minor: number(minor)?, gpu_instance: number(gi)?, compute_instance: number(ci)? }
            }
            _ => return None,
        };
        (parsed.to_string() == name).then_some(parsed)
    }

    pub fn minor(self) -> u32 {
        match self {
            DeviceName::Gpu { minor } | DeviceName::Mig { minor, .. } => minor,
        }
    }
}

fn number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceName::Gpu { minor } => write!(f, "gpu-{minor}"),
            DeviceName::Mig { minor, gpu_instance, compute_instance } => {
                write!(f, "gpu-{minor}-mig-{gpu_instance}-{compute_instance}")
            }
        }
    }
}

/// A CDI spec file's content (the subset of the CDI format this driver writes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub cdi_version: String,
    /// `<vendor>/<class>`: `gpu.muster.dev/gpu`.
    pub kind: String,
    pub devices: Vec<SpecDevice>,
    /// Applied once per container that gets any device of this spec.
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecDevice {
    pub name: String,
    pub container_edits: ContainerEdits,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=value` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

impl ContainerEdits {
    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.device_nodes.is_empty() && self.mounts.is_empty()
    }
}

/// A host path mounted into the container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// A device node; the runtime reads its type and numbers from the host's node at `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    pub path: String,
}

impl DeviceNode {
    fn new(path: impl Into<String>) -> DeviceNode {
        DeviceNode { path: path.into() }
    }
}

/// What preparing one claim gives the kubelet, and the spec behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedClaim {
    /// `None` when no device of the claim is this driver's: there is nothing to write.
    pub spec: Option<Spec>,
    /// One entry per allocation result of this driver, in the allocation's order.
    pub devices: Vec<PreparedDevice>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedDevice {
    /// The claim's request served (the base request of a `firstAvailable` alternative, as
    /// the kubelet matches it against a container's `resources.claims[].request`).
    pub request_names: Vec<String>,
    pub pool: String,
    pub device: String,
    /// Fully qualified CDI device IDs: `gpu.muster.dev/gpu=<claim uid>-gpu-0`.
    pub cdi_device_ids: Vec<String>,
}

/// `<vendor>/<class>` of the driver's CDI devices.
pub fn kind(driver: &str) -> String {
    format!("{driver}/{CLASS}")
}

/// Whether `driver` can be a CDI vendor name: a letter first, an ASCII letter or digit
/// last, and letters, digits, `-`, `_` and `.` between.
pub fn is_valid_vendor(driver: &str) -> bool {
    let bytes = driver.as_bytes();
    bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The spec file of a claim in the CDI folder; `None` for a UID that is not a UID (a file
/// name must never climb out of the folder).
pub fn spec_file_name(driver: &str, claim_uid: &str) -> Option<String> {
    let plain = !claim_uid.is_empty() && claim_uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    plain.then(|| format!("{driver}-{claim_uid}.json"))
}

/// Maps a claim's allocation results onto this node's GPUs and builds its CDI spec.
///
/// Results of other drivers are left to their own plugins. A result of this driver in
/// another node's pool, or naming a GPU this node does not have, fails the whole claim:
/// its containers must not start with fewer GPUs than were allocated.
pub fn prepare(
    driver: &str,
    node: &str,
    claim_uid: &str,
    results: &[DeviceRequestAllocationResult],
    gpus: &[Gpu],
) -> Result<PreparedClaim, Error> {
    let mut devices = Vec::new();
    let mut spec_devices: Vec<SpecDevice> = Vec::new();
    let mut uuids: Vec<&str> = Vec::new();
    for result in results.iter().filter(|r| r.driver == driver) {
        if result.pool != node {
            return Err(Error::OtherNode {
                device: result.device.clone(),
                pool: result.pool.clone(),
                node: node.into(),
            });
        }
        let (name, uuid) = locate(&result.device, gpus)?;
        let cdi_name = format!("{claim_uid}-{}", result.device);
        // A device shared by several requests of the claim (consumable capacity) is one CDI
        // device, listed under each of its results.
        if !spec_devices.iter().any(|d| d.name == cdi_name) {
            spec_devices.push(SpecDevice {
                name: cdi_name.clone(),
                container_edits: ContainerEdits {
                    device_nodes: vec![DeviceNode::new(format!("/dev/nvidia{}", name.minor()))],
                    ..Default::default()
                },
            });
            uuids.push(uuid);
        }
        let base_request = result.request.split('/').next().unwrap_or_default();
        devices.push(PreparedDevice {
            request_names: vec![base_request.to_string()],
            pool: result.pool.clone(),
            device: result.device.clone(),
            cdi_device_ids: vec![format!("{}={cdi_name}", kind(driver))],
        });
    }
    let container_edits = ContainerEdits {
        env: vec![format!("{VISIBLE_DEVICES}={}", uuids.join(","))],
        device_nodes: CONTROL_NODES.iter().map(|path| DeviceNode::new(*path)).collect(),
        mounts: Vec::new(),
    };
    let spec = (!spec_devices.is_empty()).then(|| Spec {
        cdi_version: CDI_VERSION.into(),
        kind: kind(driver),
        devices: spec_devices,
        container_edits,
    });
    Ok(PreparedClaim { spec, devices })
}

/// The GPU or MIG device behind a published device name, and its UUID.
fn locate<'g>(device: &str, gpus: &'g [Gpu]) -> Result<(DeviceName, &'g str), Error> {
    let name = DeviceName::parse(device).ok_or_else(|| Error::UnknownName { device: device.into() })?;
    let minor = name.minor();
    let gpu =
        gpus.iter().find(|g| g.minor == minor).ok_or_else(|| Error::NoSuchGpu { device: device.into(), minor })?;
    match name {
        DeviceName::Gpu { .. } if gpu.mig.is_empty() => Ok((name, &gpu.uuid)),
        DeviceName::Gpu { .. } => Err(Error::MigMode { device: device.into(), minor }),
        DeviceName::Mig { gpu_instance, compute_instance, .. } => gpu
            .mig
            .iter()
            .find(|m| m.gpu_instance == gpu_instance && m.compute_instance == compute_instance)
            .map(|m| (name, m.uuid.as_str()))
            .ok_or(Error::NoSuchMigDevice { device: device.into(), minor, gpu_instance, compute_instance }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::gpu::MigDevice;
    use crate::agent::inventory::fake_gpu;

    const DRIVER: &str = "gpu.muster.dev";
    const NODE: &str = "node-a";
    const UID: &str = "6b1c2f0e-7d4a-4c47-9a5e-1f2d3c4b5a69";

    fn gpu(minor: u32) -> Gpu {
        Gpu {
            minor,
            uuid: format!("GPU-0000000{minor}-aaaa-bbbb-cccc-dddddddddddd"),
            pci_bus_id: format!("0000:{minor:02x}:00.0"),
            pcie_root: "pci0000:00".into(),
            ..fake_gpu("node-a", minor, "NVIDIA H100 80GB HBM3")
        }
    }

    fn mig_gpu(minor: u32) -> Gpu {
        let mig = |gi: u32| MigDevice {
            uuid: format!("MIG-{minor}{gi}000000-aaaa-bbbb-cccc-dddddddddddd"),
            profile: "3g.40gb".into(),
            gpu_instance: gi,
            compute_instance: 0,
            memory_bytes: 40 << 30,
            multiprocessors: 60,
        };
        Gpu { mig: vec![mig(1), mig(2)], ..gpu(minor) }
    }

    fn result(request: &str, driver: &str, pool: &str, device: &str) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: request.into(),
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
            ..Default::default()
        }
    }

    fn ours(request: &str, device: &str) -> DeviceRequestAllocationResult {
        result(request, DRIVER, NODE, device)
    }

    #[test]
    fn device_names_round_trip_and_reject_what_is_never_published() {
        for name in ["gpu-0", "gpu-7", "gpu-12", "gpu-3-mig-1-0", "gpu-3-mig-13-2"] {
            assert_eq!(DeviceName::parse(name).map(|n| n.to_string()).as_deref(), Some(name));
        }
        assert_eq!(
            DeviceName::parse("gpu-3-mig-9-1"),
            Some(DeviceName::Mig { minor: 3, gpu_instance: 9, compute_instance: 1 })
        );
        for name in
            ["gpu", "gpu-", "gpu-01", "gpu-+1", "gpu-x", "tpu-0", "gpu-0-mig-1", "gpu-0-mig-1-0-0", "gpu-0-mi-1-0"]
        {
            assert_eq!(DeviceName::parse(name), None, "{name}");
        }
    }

    #[test]
    fn two_gpus_of_one_request_become_one_spec_with_both_uuids() {
        let gpus = [gpu(0), gpu(1), gpu(2)];
        let prepared = prepare(DRIVER, NODE, UID, &[ours("gpu", "gpu-0"), ours("gpu", "gpu-2")], &gpus).unwrap();
        let spec = prepared.spec.expect("a spec");
        assert_eq!(spec.cdi_version, CDI_VERSION);
        assert_eq!(spec.kind, "gpu.muster.dev/gpu");
        let names: Vec<_> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, [format!("{UID}-gpu-0"), format!("{UID}-gpu-2")]);
        assert_eq!(spec.devices[1].container_edits.device_nodes, [DeviceNode::new("/dev/nvidia2")]);
        assert_eq!(spec.container_edits.env, [format!("NVIDIA_VISIBLE_DEVICES={},{}", gpus[0].uuid, gpus[2].uuid)]);
        let control: Vec<_> = spec.container_edits.device_nodes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(control, CONTROL_NODES);
        assert_eq!(
            prepared.devices,
            [
                PreparedDevice {
                    request_names: vec!["gpu".into()],
                    pool: NODE.into(),
                    device: "gpu-0".into(),
                    cdi_device_ids: vec![format!("gpu.muster.dev/gpu={UID}-gpu-0")],
                },
                PreparedDevice {
                    request_names: vec!["gpu".into()],
                    pool: NODE.into(),
                    device: "gpu-2".into(),
                    cdi_device_ids: vec![format!("gpu.muster.dev/gpu={UID}-gpu-2")],
                },
            ]
        );
    }

    #[test]
    fn mig_devices_use_their_parent_node_and_their_own_uuid() {
        let gpus = [gpu(0), mig_gpu(1)];
        let prepared = prepare(DRIVER, NODE, UID, &[ours("slice", "gpu-1-mig-2-0")], &gpus).unwrap();
        let spec = prepared.spec.unwrap();
        assert_eq!(spec.devices[0].container_edits.device_nodes, [DeviceNode::new("/dev/nvidia1")]);
        assert_eq!(spec.container_edits.env, [format!("NVIDIA_VISIBLE_DEVICES={}", gpus[1].mig[1].uuid)]);
    }

    #[test]
    fn other_drivers_are_left_alone_and_subrequests_report_their_base_request() {
        let results = [result("nic", "rdma.example.com", NODE, "nic-0"), ours("gpu/h100", "gpu-0")];
        let prepared = prepare(DRIVER, NODE, UID, &results, &[gpu(0)]).unwrap();
        assert_eq!(prepared.devices.len(), 1);
        assert_eq!(prepared.devices[0].request_names, ["gpu"]);
        assert_eq!(prepared.spec.unwrap().devices.len(), 1);

        let none = prepare(DRIVER, NODE, UID, &results[..1], &[gpu(0)]).unwrap();
        assert_eq!(none, PreparedClaim { spec: None, devices: Vec::new() });
    }

    #[test]
    fn a_device_shared_by_two_requests_is_one_cdi_device() {
        let prepared = prepare(DRIVER, NODE, UID, &[ours("a", "gpu-0"), ours("b", "gpu-0")], &[gpu(0)]).unwrap();
        let spec = prepared.spec.unwrap();
        assert_eq!(spec.devices.len(), 1);
        assert_eq!(spec.container_edits.env, [format!("NVIDIA_VISIBLE_DEVICES={}", gpu(0).uuid)]);
        assert_eq!(prepared.devices.len(), 2);
        assert_eq!(prepared.devices[0].cdi_device_ids, prepared.devices[1].cdi_device_ids);
    }

    #[test]
    fn devices_this_node_cannot_serve_fail_the_claim_naming_the_device() {
        let gpus = [gpu(0), mig_gpu(1)];
        let cases = [
            (result("gpu", DRIVER, "node-b", "gpu-0"), "device gpu-0 is in pool node-b, not on this node (node-a)"),
            (ours("gpu", "gpu-5"), "device gpu-5: this node has no GPU with minor number 5"),
            (ours("gpu", "gpu-1"), "device gpu-1: GPU 1 is in MIG mode, so only its MIG devices can be prepared"),
            (
                ours("gpu", "gpu-0-mig-1-0"),
                "device gpu-0-mig-1-0: GPU 0 has no MIG device with GPU instance 1 and compute instance 0",
            ),
            (
                ours("gpu", "nic-0"),
                "device nic-0 is not a device this driver publishes (gpu-<minor> or gpu-<minor>-mig-<gi>-<ci>)",
            ),
        ];
        for (bad, message) in cases {
            let error = prepare(DRIVER, NODE, UID, &[ours("gpu", "gpu-0"), bad], &gpus).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn the_spec_is_written_in_cdi_field_names() {
        let spec = prepare(DRIVER, NODE, "uid-1", &[ours("gpu", "gpu-0")], &[gpu(0)]).unwrap().spec.unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "cdiVersion": "0.6.0",
                "kind": "gpu.muster.dev/gpu",
                "devices": [{"name": "uid-1-gpu-0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
                "containerEdits": {
                    "env": [format!("NVIDIA_VISIBLE_DEVICES={}", gpu(0).uuid)],
                    "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia-uvm-tools"}],
                },
            })
        );
    }

    #[test]
    fn vendors_and_file_names() {
        assert!(is_valid_vendor("gpu.muster.dev"));
        assert!(is_valid_vendor("example_gpu-2.io"));
        for bad in ["", "1gpu.example.com", "gpu.example.com.", "gpu/example", "gpu example"] {
            assert!(!is_valid_vendor(bad), "{bad:?}");
        }
        assert_eq!(spec_file_name(DRIVER, UID), Some(format!("gpu.muster.dev-{UID}.json")));
        for bad in ["", "../etc", "a/b", "a.b"] {
            assert_eq!(spec_file_name(DRIVER, bad), None, "{bad:?}");
        }
    }
}
