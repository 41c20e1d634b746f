//! The GPUs of one node as the agent sees them: inventory, health and live readings,
//! independent of where they were read (NVML, an inventory file, fakes).

use serde::{Deserialize, Serialize};

/// One physical GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gpu {
    /// The minor number: `/dev/nvidia<minor>`, and the published device `gpu-<minor>`.
    pub minor: u32,
    pub uuid: String,
    /// "NVIDIA H100 80GB HBM3".
    pub product_name: String,
    /// "Nvidia", "Tesla", "GeForce", ... as NVML names the brand.
    #[serde(default = "default_brand")]
    pub brand: String,
    /// "Hopper", "Ampere", ...
    #[serde(default)]
    pub architecture: String,
    /// "9.0".
    #[serde(default)]
    pub cuda_compute_capability: String,
    /// Kernel driver version, "580.95.05".
    #[serde(default)]
    pub driver_version: String,
    /// The CUDA version the driver supports, "13.0".
    #[serde(default)]
    pub cuda_driver_version: String,
    /// PCI bus ID in the kernel's form, "0000:3b:00.0".
    #[serde(default)]
    pub pci_bus_id: String,
    /// The PCIe root complex the GPU hangs off, "pci0000:3a".
    #[serde(default)]
    pub pcie_root: String,
    /// Framebuffer memory in bytes.
    pub memory_bytes: u64,
    /// The NVLink or fabric clique ("<cluster uuid>.<clique id>"), where NVML reports one.
    #[serde(default)]
    pub clique: Option<String>,
    /// MIG devices, when MIG mode is on; a GPU in MIG mode is published as its MIG devices.
    #[serde(default)]
    pub mig: Vec<MigDevice>,
    #[serde(default)]
    pub health: Health,
}

fn default_brand() -> String {
    "Nvidia".into()
}

/// One MIG device of a GPU in MIG mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigDevice {
    pub uuid: String,
    /// The profile, "1g.10gb".
    pub profile: String,
    /// The GPU instance id within its parent.
    pub gpu_instance: u32,
    /// The compute instance id within its GPU instance.
    #[serde(default)]
    pub compute_instance: u32,
    pub memory_bytes: u64,
    pub multiprocessors: u32,
}

/// Whether a GPU can be given to new work, and if not, why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase", deny_unknown_fields)]
pub enum Health {
    #[default]
    Healthy,
    /// An XID error. Critical ones take the GPU out of service; the rest are informational.
    Xid { code: u64 },
    /// Uncorrectable ECC errors since the driver loaded.
    Ecc { uncorrected: u64 },
    /// The GPU fell off the bus or stopped answering.
    Lost,
}

/// What a health state means for scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Healthy,
    /// Reported (a taint with effect None), never blocks an allocation.
    Informational,
    /// Out of service for new work (effect NoSchedule).
    Failing,
}

/// XIDs that are an application's fault (illegal address, a graphics engine exception raised
/// by user code, a killed context, preemption): the GPU itself is fine. Every other XID is
/// treated as a failing GPU until it recovers, as GPU operators do by default.
const APPLICATION_XIDS: &[u64] = &[13, 31, 43, 45, 68, 109];

impl Health {
    pub fn severity(&self) -> Severity {
        match self {
            Health::Healthy => Severity::Healthy,
            Health::Xid { code } if APPLICATION_XIDS.contains(code) => Severity::Informational,
            Health::Xid { .. } | Health::Ecc { .. } | Health::Lost => Severity::Failing,
        }
    }
}

/// Live readings of one GPU for the dcgm-exporter-style metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub utilization_percent: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
    /// The last XID seen (dcgm-exporter reports the last value, 0 when none).
    pub last_xid: u64,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}
