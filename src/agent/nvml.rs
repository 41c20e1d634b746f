//! GPUs read through NVML (nvml-wrapper). Reading and mapping are split: a [`NvmlReader`]
//! returns raw readings in NVML's own types, and [`gpu_from_reading`] turns one into a
//! [`Gpu`], so the mapping is tested without a GPU (see `tests/tables/agent.rs`).

use std::collections::HashMap;
use std::path::Path;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Brand, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;

use super::gpu::{Gpu, GpuSample, Health, MigDevice};
use super::source::{DeviceSource, Error, Result};

/// What NVML says about one GPU, in its own types.
#[derive(Clone, Debug)]
pub struct NvmlReading {
    pub minor: u32,
    pub uuid: String,
    pub name: String,
    pub brand: Brand,
    pub architecture: DeviceArchitecture,
    /// (major, minor)
    pub compute_capability: (i32, i32),
    /// "580.95.05"
    pub driver_version: String,
    /// NVML's encoding: 1000 × major + 10 × minor (12040 is CUDA 12.4).
    pub cuda_driver_version: i32,
    /// NVML's form, "00000000:3B:00.0".
    pub pci_bus_id: String,
    /// From sysfs, "pci0000:3a"; empty when unknown.
    pub pcie_root: String,
    pub memory_total_bytes: u64,
    pub mig: Vec<NvmlMigReading>,
    /// Set when the GPU answered with GpuLost.
    pub lost: bool,
    /// The last critical XID NVML reported for this GPU since the agent started.
    pub last_xid: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    pub sample: GpuSample,
}

/// One MIG device, as NVML reports it.
#[derive(Clone, Debug)]
pub struct NvmlMigReading {
    pub uuid: String,
    /// The MIG device's place among its parent's.
    pub index: u32,
    pub memory_total_bytes: u64,
    pub multiprocessors: u32,
    /// GPU instance slices (the "1g" of "1g.10gb").
    pub gpu_instance_slices: u32,
}

/// Anything that produces NVML readings: the live library, or recorded readings in tests.
pub trait NvmlReader {
    fn read(&mut self) -> Result<Vec<NvmlReading>>;
}

/// A [`DeviceSource`] over any [`NvmlReader`].
pub struct NvmlSource<R> {
    reader: R,
    samples: Vec<GpuSample>,
}

impl<R: NvmlReader> NvmlSource<R> {
    pub fn new(reader: R) -> Self {
        NvmlSource { reader, samples: Vec::new() }
    }
}

impl<R: NvmlReader> DeviceSource for NvmlSource<R> {
    fn read(&mut self) -> Result<Vec<Gpu>> {
        let mut readings = self.reader.read()?;
        readings.sort_by_key(|r| r.minor);
        self.samples = readings.iter().map(|r| r.sample.clone()).collect();
        Ok(readings.iter().map(gpu_from_reading).collect())
    }

    fn samples(&mut self) -> Vec<GpuSample> {
        self.samples.clone()
    }
}

/// One GPU's reading as the agent's [`Gpu`]: names as NVIDIA's DRA driver publishes them,
/// versions in semver form, health from what NVML reported.
pub fn gpu_from_reading(r: &NvmlReading) -> Gpu {
    let health = if r.lost {
        Health::Lost
    } else if let Some(uncorrected) = r.ecc_uncorrected.filter(|n| *n > 0) {
        Health::Ecc { uncorrected }
    } else if let Some(code) = r.last_xid {
        Health::Xid { code }
    } else {
        Health::Healthy
    };
    let cuda_major = r.cuda_driver_version / 1000;
    let cuda_minor = (r.cuda_driver_version % 1000) / 10;
    Gpu {
        minor: r.minor,
        uuid: r.uuid.clone(),
        product_name: r.name.clone(),
        brand: brand_name(r.brand).into(),
        architecture: architecture_name(&r.architecture),
        cuda_compute_capability: format!("{}.{}", r.compute_capability.0, r.compute_capability.1),
        driver_version: r.driver_version.clone(),
        cuda_driver_version: format!("{cuda_major}.{cuda_minor}"),
        pci_bus_id: kernel_bus_id(&r.pci_bus_id),
        pcie_root: r.pcie_root.clone(),
        memory_bytes: r.memory_total_bytes,
        clique: None,
        mig: r
            .mig
            .iter()
            .map(|m| MigDevice {
                uuid: m.uuid.clone(),
                profile: mig_profile(m.gpu_instance_slices, m.memory_total_bytes),
                gpu_instance: m.index,
                compute_instance: 0,
                memory_bytes: m.memory_total_bytes,
                multiprocessors: m.multiprocessors,
            })
            .collect(),
        health,
    }
}

/// NVML's bus ID ("00000000:3B:00.0", an 8-digit domain, upper case) in the kernel's form
/// ("0000:3b:00.0"), which is what sysfs, lspci and Kubernetes' pciBusID attribute use.
pub fn kernel_bus_id(nvml: &str) -> String {
    let lower = nvml.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => format!("{}:{rest}", &domain[domain.len() - 4..]),
        _ => lower,
    }
}

/// A MIG profile name as nvidia-smi prints it: GPU instance slices and memory rounded up to
/// whole gigabytes ("1g.10gb" for 1 slice and 9.6 GiB, "7g.40gb" for 39.25 GiB).
pub fn mig_profile(slices: u32, memory_bytes: u64) -> String {
    let gb = memory_bytes.div_ceil(1 << 30);
    format!("{slices}g.{gb}gb")
}

fn brand_name(brand: Brand) -> &'static str {
    match brand {
        Brand::Quadro => "Quadro",
        Brand::Tesla => "Tesla",
        Brand::NVS => "NVS",
        Brand::GRID => "GRID",
        Brand::GeForce => "GeForce",
        Brand::Titan => "Titan",
        Brand::VApps => "NvidiaVApps",
        Brand::VPC => "NvidiaVPC",
        Brand::VCS => "NvidiaVCS",
        Brand::VWS => "NvidiaVWS",
        Brand::CloudGaming => "NvidiaCloudGaming",
        Brand::QuadroRTX => "QuadroRTX",
        Brand::NvidiaRTX => "NvidiaRTX",
        Brand::Nvidia => "Nvidia",
        Brand::GeForceRTX => "GeForceRTX",
        Brand::TitanRTX => "TitanRTX",
        _ => "Unknown",
    }
}

fn architecture_name(architecture: &DeviceArchitecture) -> String {
    architecture.to_string()
}

/// The PCIe root complex of a device from sysfs: `/sys/bus/pci/devices/<id>` links to
/// `/sys/devices/pci0000:3a/.../<id>`, and the first component is the root.
pub fn pcie_root_from_sysfs(sysfs: &Path, kernel_bus_id: &str) -> String {
    std::fs::canonicalize(sysfs.join("bus/pci/devices").join(kernel_bus_id))
        .ok()
        .and_then(|path| {
            path.components()
                .filter_map(|c| c.as_os_str().to_str().map(str::to_string))
                .find(|c| c.starts_with("pci") && c.contains(':'))
        })
        .unwrap_or_default()
}

/// The live NVML library. It lives as long as the process (the agent's source thread),
/// which lets its event set borrow it.
pub struct LiveNvml {
    nvml: &'static Nvml,
    events: Option<EventSet<'static>>,
    xids: HashMap<String, u64>,
    /// Each GPU's last good reading, by NVML index, for reporting it once it is lost.
    last_good: HashMap<u32, NvmlReading>,
}

impl LiveNvml {
    /// Loads NVML; a clear error when the library or the driver is missing.
    pub fn open(library: Option<&Path>) -> Result<Self> {
        let nvml = match library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        };
        let nvml = nvml.map_err(|e| Error::NvmlUnavailable(e.to_string()))?;
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let mut live = LiveNvml { nvml, events: None, xids: HashMap::new(), last_good: HashMap::new() };
        live.events = live.register_events();
        Ok(live)
    }

    /// Registers every GPU for critical XID events.
    fn register_events(&self) -> Option<EventSet<'static>> {
        let mut set = self.nvml.create_event_set().ok()?;
        let count = self.nvml.device_count().ok()?;
        for index in 0..count {
            let Ok(device) = self.nvml.device_by_index(index) else { continue };
            // A failed registration releases the whole set, so only GPUs that support XID
            // events are registered; the others are watched through their queries alone.
            let supported = device.supported_event_types().is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
            if !supported {
                tracing::warn!(index, "GPU does not report XID events; its health rests on ECC and lost-GPU queries");
                continue;
            }
            set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(set) => set,
                Err(e) => {
                    tracing::warn!(index, error = %e.error, "failed to register for XID events; XIDs are not watched");
                    return None;
                }
            };
        }
        Some(set)
    }

    /// Takes every XID event that is waiting, without blocking.
    fn drain_events(&mut self) {
        let Some(set) = &self.events else { return };
        while let Ok(event) = set.wait(0) {
            if let (Ok(uuid), Some(XidError::Value(code))) = (event.device.uuid(), event.event_data) {
                record_xid(&mut self.xids, uuid, code);
            }
        }
    }
}

/// Keeps the XID that matters most per GPU: an application's XID never hides a critical
/// one seen before it, and a later critical XID replaces an earlier one.
pub fn record_xid(xids: &mut HashMap<String, u64>, uuid: String, code: u64) {
    let critical = |code: u64| Health::Xid { code }.severity() == super::gpu::Severity::Failing;
    match xids.get(&uuid) {
        Some(&seen) if critical(seen) && !critical(code) => {}
        _ => {
            xids.insert(uuid, code);
        }
    }
}

fn problem(index: u32) -> impl Fn(NvmlError) -> Error {
    move |e| Error::Nvml { index, problem: e.to_string() }
}

impl NvmlReader for LiveNvml {
    fn read(&mut self) -> Result<Vec<NvmlReading>> {
        self.drain_events();
        let nvml = self.nvml;
        let count = nvml.device_count().map_err(problem(0))?;
        let driver_version = nvml.sys_driver_version().map_err(problem(0))?;
        let cuda_driver_version = nvml.sys_cuda_driver_version().map_err(problem(0))?;
        let mut readings = Vec::with_capacity(count as usize);
        for index in 0..count {
            // A GPU that fell off the bus may not even give its UUID any more: it is reported
            // lost under the identity it had at the last good reading.
            let device = match nvml.device_by_index(index) {
                Ok(device) => device,
                Err(NvmlError::GpuLost) => {
                    readings.extend(self.lost_reading(index, &driver_version, cuda_driver_version));
                    continue;
                }
                Err(e) => return Err(problem(index)(e)),
            };
            let (uuid, minor) = match (device.uuid(), device.minor_number()) {
                (Ok(uuid), Ok(minor)) => (uuid, minor),
                (Err(NvmlError::GpuLost), _) | (_, Err(NvmlError::GpuLost)) => {
                    readings.extend(self.lost_reading(index, &driver_version, cuda_driver_version));
                    continue;
                }
                (Err(e), _) | (_, Err(e)) => return Err(problem(index)(e)),
            };
            // A GPU that fell off the bus still has a handle; its queries answer GpuLost.
            let memory = device.memory_info();
            let lost = matches!(memory, Err(NvmlError::GpuLost));
            let pci_bus_id = device.pci_info().map(|p| p.bus_id).unwrap_or_default();
            let cc = device.cuda_compute_capability().map(|c| (c.major, c.minor)).unwrap_or((0, 0));
            let mig = match device.mig_mode() {
                Ok(mode) if mode.current == 1 => read_mig(&device),
                _ => Vec::new(),
            };
            let utilization = device.utilization_rates().ok();
            let ecc_uncorrected = device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok();
            let memory = memory.ok();
            readings.push(NvmlReading {
                minor,
                name: device.name().unwrap_or_default(),
                brand: device.brand().unwrap_or(Brand::Unknown),
                architecture: device.architecture().unwrap_or(DeviceArchitecture::Unknown),
                compute_capability: cc,
                driver_version: driver_version.clone(),
                cuda_driver_version,
                pcie_root: pcie_root_from_sysfs(Path::new("/sys"), &kernel_bus_id(&pci_bus_id)),
                pci_bus_id,
                memory_total_bytes: memory.as_ref().map(|m| m.total).unwrap_or_default(),
                mig,
                lost,
                last_xid: self.xids.get(&uuid).copied(),
                ecc_uncorrected,
                sample: GpuSample {
                    utilization_percent: utilization.map(|u| f64::from(u.gpu)),
                    memory_used_bytes: memory.as_ref().map(|m| m.used),
                    memory_free_bytes: memory.as_ref().map(|m| m.free),
                    temperature_celsius: device.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                    power_watts: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                    last_xid: self.xids.get(&uuid).copied().unwrap_or(0),
                    ecc_corrected: device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile).ok(),
                    ecc_uncorrected,
                },
                uuid,
            });
            self.last_good.insert(index, readings.last().expect("just pushed").clone());
        }
        Ok(readings)
    }
}

impl LiveNvml {
    /// The last good reading of GPU `index`, marked lost; None if it was never read.
    fn lost_reading(&self, index: u32, driver_version: &str, cuda_driver_version: i32) -> Option<NvmlReading> {
        let Some(last) = self.last_good.get(&index) else {
            tracing::warn!(index, "GPU is lost and was never read; it cannot be published or tainted");
            return None;
        };
        Some(NvmlReading {
            lost: true,
            driver_version: driver_version.to_string(),
            cuda_driver_version,
            sample: GpuSample::default(),
            ..last.clone()
        })
    }
}

fn read_mig(device: &nvml_wrapper::Device<'_>) -> Vec<NvmlMigReading> {
    let count = device.mig_device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let mig = device.mig_device_by_index(index).ok()?;
            let attributes = mig.attributes().ok()?;
            Some(NvmlMigReading {
                uuid: mig.uuid().ok()?,
                index,
                memory_total_bytes: mig.memory_info().map(|m| m.total).unwrap_or(attributes.memory_size_mb << 20),
                multiprocessors: attributes.multiprocessor_count,
                gpu_instance_slices: attributes.gpu_instance_slice_count,
            })
        })
        .collect()
}
