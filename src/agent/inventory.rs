//! GPUs without NVML: an inventory file (YAML, re-read on every poll so that a test or an
//! operator can change a GPU's health by editing it) and invented GPUs.

use std::path::PathBuf;

use serde::Deserialize;

use super::gpu::{Gpu, Health};
use super::source::{DeviceSource, Error, Result};

/// The inventory file: `gpus:` with one entry per GPU, fields as in [`Gpu`] (camelCase).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InventoryFile {
    gpus: Vec<Gpu>,
}

/// Reads the GPUs from a YAML file.
pub struct FileSource {
    path: PathBuf,
}

impl FileSource {
    pub fn new(path: PathBuf) -> Self {
        FileSource { path }
    }
}

/// Parses an inventory document; the errors name the GPU and the problem.
pub fn parse(text: &str, path: &str) -> Result<Vec<Gpu>> {
    let file: InventoryFile =
        yaml_serde::from_str(text).map_err(|e| Error::Inventory { path: path.into(), problem: e.to_string() })?;
    let mut gpus = file.gpus;
    gpus.sort_by_key(|g| g.minor);
    for pair in gpus.windows(2) {
        if pair[0].minor == pair[1].minor {
            return Err(Error::Inventory {
                path: path.into(),
                problem: format!("two GPUs have minor number {}", pair[0].minor),
            });
        }
    }
    for gpu in &gpus {
        if gpu.uuid.is_empty() {
            return Err(Error::Inventory { path: path.into(), problem: format!("GPU {} has no uuid", gpu.minor) });
        }
    }
    Ok(gpus)
}

impl DeviceSource for FileSource {
    fn read(&mut self) -> Result<Vec<Gpu>> {
        let path = self.path.display().to_string();
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| Error::Inventory { path: path.clone(), problem: e.to_string() })?;
        parse(&text, &path)
    }
}

/// `count` identical healthy GPUs named after the node, for clusters and tests without GPUs.
pub struct FakeSource {
    gpus: Vec<Gpu>,
}

impl FakeSource {
    pub fn new(node_name: &str, count: u32, product_name: &str) -> Self {
        FakeSource { gpus: (0..count).map(|minor| fake_gpu(node_name, minor, product_name)).collect() }
    }
}

/// One healthy GPU of `product_name`, named after the node: what the fake source publishes,
/// and a starting point for tests.
pub fn fake_gpu(node_name: &str, minor: u32, product_name: &str) -> Gpu {
    Gpu {
        minor,
        uuid: fake_uuid(node_name, minor),
        product_name: product_name.to_string(),
        brand: "Nvidia".into(),
        architecture: architecture_from_product(product_name).into(),
        cuda_compute_capability: "9.0".into(),
        driver_version: "580.95.05".into(),
        cuda_driver_version: "13.0".into(),
        pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + minor * 0x10),
        pcie_root: format!("pci0000:{:02x}", 0x17 + (minor / 2) * 0x20),
        memory_bytes: memory_from_product(product_name).unwrap_or(80 << 30),
        clique: None,
        mig: Vec::new(),
        health: Health::Healthy,
    }
}

impl DeviceSource for FakeSource {
    fn read(&mut self) -> Result<Vec<Gpu>> {
        Ok(self.gpus.clone())
    }
}

/// A stable UUID-shaped name per node and minor, so restarts publish the same devices.
fn fake_uuid(node_name: &str, minor: u32) -> String {
    // FNV-1a: stable across builds and platforms, unlike the standard hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node_name.bytes().chain(minor.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let h = format!("{hash:016x}");
    format!("GPU-{}-{}-{}-{}-{:04x}{}", &h[..8], &h[8..12], &h[12..16], &h[..4], minor, &h[4..12])
}

/// "NVIDIA H100 80GB HBM3" → 80 GiB, as the product names state memory.
fn memory_from_product(product: &str) -> Option<u64> {
    product.split_whitespace().find_map(|word| word.strip_suffix("GB")?.parse::<u64>().ok().map(|gb| gb << 30))
}

fn architecture_from_product(product: &str) -> &'static str {
    let p = product.to_ascii_uppercase();
    if p.contains("B200") || p.contains("GB200") || p.contains("B100") {
        "Blackwell"
    } else if p.contains("H100") || p.contains("H200") || p.contains("H800") || p.contains("GH200") {
        "Hopper"
    } else if p.contains("A100") || p.contains("A10") || p.contains("A30") || p.contains("A40") {
        "Ampere"
    } else if p.contains("L4") || p.contains("L40") {
        "Ada Lovelace"
    } else {
        "Unknown"
    }
}
