//! Shares of a GPU on a node that runs CUDA MPS: the container edits that make a claim's
//! containers clients of the node's MPS control daemon, each GPU's device memory capped at
//! the share the claim was allocated. Pure: the claim's results and the node's GPUs in.
//!
//! Without MPS, CUDA has no per-process memory limit: a share is accounted by the scheduler
//! but not enforced. An MPS client's limit is set by `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, a
//! comma-separated list of `<device ordinal>=<amount>` read when the client starts, ordinals
//! counting the GPUs the client sees. A claim's GPUs are numbered here in PCI bus order, and
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA number them the same way.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::resource::v1::DeviceRequestAllocationResult;

use super::cdi::{ContainerEdits, DeviceName, Error, Mount, PreparedClaim};
use crate::agent::gpu::Gpu;
use crate::quantity::Quantity;

/// The variable naming the MPS control daemon's pipe directory.
pub const PIPE_DIRECTORY: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// The variable capping an MPS client's device memory, per device.
pub const MEMORY_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
/// The variable that makes CUDA number devices in PCI bus order.
pub const DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";
/// The capacity a share of a GPU consumes.
const MEMORY: &str = "memory";

/// Adds to the spec of a claim `prepared` from `results` (any driver's) the container edits
/// that make its shares of `driver`'s GPUs MPS clients of the daemon whose pipes are in
/// `pipe_directory` (see [`client_edits`]).
pub fn add_client_edits(
    prepared: &mut PreparedClaim,
    driver: &str,
    results: &[DeviceRequestAllocationResult],
    gpus: &[Gpu],
    pipe_directory: &Path,
) -> Result<(), Error> {
    let Some(spec) = prepared.spec.as_mut() else { return Ok(()) };
    let ours: Vec<&DeviceRequestAllocationResult> = results.iter().filter(|r| r.driver == driver).collect();
    let clients = client_edits(&ours, gpus, pipe_directory)?;
    spec.container_edits.env.extend(clients.env);
    spec.container_edits.mounts.extend(clients.mounts);
    Ok(())
}

/// The container edits for a claim's `results` (this driver's) on `gpus`, with the MPS
/// control daemon's pipes in `pipe_directory`: none when no result is a share of a whole
/// GPU (`consumedCapacity` memory); otherwise the pipe directory, mounted at the same path
/// and named in `CUDA_MPS_PIPE_DIRECTORY`, and each shared GPU's limit in MiB (rounded
/// down). A GPU shared by several results of the claim is capped at their sum.
pub fn client_edits(
    results: &[&DeviceRequestAllocationResult],
    gpus: &[Gpu],
    pipe_directory: &Path,
) -> Result<ContainerEdits, Error> {
    // The claim's whole GPUs by PCI bus ID, each with the memory its shares consume.
    let mut claimed: BTreeMap<(&str, u32), Option<i64>> = BTreeMap::new();
    for result in results {
        let Some(DeviceName::Gpu { minor }) = DeviceName::parse(&result.device) else { continue };
        let Some(gpu) = gpus.iter().find(|g| g.minor == minor) else { continue };
        let consumed =
            match result.consumed_capacity.as_ref().and_then(|c| c.get(MEMORY)) {
                None => None,
                Some(quantity) => Some(bytes(&quantity.0).ok_or_else(|| Error::ConsumedMemory {
                    device: result.device.clone(),
                    value: quantity.0.clone(),
                })?),
            };
        let entry = claimed.entry((gpu.pci_bus_id.as_str(), minor)).or_insert(None);
        if let Some(amount) = consumed {
            *entry = Some(entry.unwrap_or(0).saturating_add(amount));
        }
    }
    let limits: Vec<String> = claimed
        .values()
        .enumerate()
        .filter_map(|(ordinal, consumed)| consumed.map(|bytes| format!("{ordinal}={}M", bytes >> 20)))
        .collect();
    if limits.is_empty() {
        return Ok(ContainerEdits::default());
    }
    let pipes = pipe_directory.to_string_lossy().into_owned();
    Ok(ContainerEdits {
        env: vec![
            format!("{PIPE_DIRECTORY}={pipes}"),
            format!("{MEMORY_LIMIT}={}", limits.join(",")),
            format!("{DEVICE_ORDER}=PCI_BUS_ID"),
        ],
        device_nodes: Vec::new(),
        mounts: vec![Mount {
            host_path: pipes.clone(),
            container_path: pipes,
            options: ["rw", "nosuid", "nodev", "bind"].map(String::from).to_vec(),
        }],
    })
}

/// A quantity of bytes, if it is a whole number of them.
fn bytes(text: &str) -> Option<i64> {
    Quantity::parse(text).ok()?.as_integer().filter(|b| *b >= 0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

    use super::*;
    use crate::agent::gpu::MigDevice;
    use crate::agent::inventory::fake_gpu;

    const PIPES: &str = "/tmp/nvidia-mps";

    fn gpu(minor: u32, bus: u32) -> Gpu {
        Gpu {
            minor,
            uuid: format!("GPU-{minor}"),
            pci_bus_id: format!("0000:{bus:02x}:00.0"),
            pcie_root: "pci0000:00".into(),
            ..fake_gpu("node-a", minor, "NVIDIA H100 80GB HBM3")
        }
    }

    fn result(request: &str, device: &str, memory: Option<&str>) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: request.into(),
            driver: "gpu.muster.dev".into(),
            pool: "node-a".into(),
            device: device.into(),
            consumed_capacity: memory.map(|m| BTreeMap::from([(MEMORY.to_string(), KubeQuantity(m.into()))])),
            share_id: memory.map(|_| "6b1c2f0e-7d4a-4c47-9a5e-1f2d3c4b5a69".into()),
            ..Default::default()
        }
    }

    fn edits(results: &[DeviceRequestAllocationResult], gpus: &[Gpu]) -> Result<ContainerEdits, Error> {
        client_edits(&results.iter().collect::<Vec<_>>(), gpus, Path::new(PIPES))
    }

    #[test]
    fn a_half_of_one_gpu_is_an_mps_client_capped_at_its_half() {
        let edits =
            edits(&[result("container-0-request-0", "gpu-1", Some("40Gi"))], &[gpu(0, 0x18), gpu(1, 0x3b)]).unwrap();
        assert_eq!(
            edits.env,
            [
                "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M",
                "CUDA_DEVICE_ORDER=PCI_BUS_ID"
            ]
        );
        assert_eq!(
            edits.mounts,
            [Mount {
                host_path: PIPES.into(),
                container_path: PIPES.into(),
                options: vec!["rw".into(), "nosuid".into(), "nodev".into(), "bind".into()],
            }]
        );
        assert!(edits.device_nodes.is_empty());
    }

    #[test]
    fn shares_of_several_gpus_are_numbered_in_pci_bus_order_and_rounded_down_to_mib() {
        // gpu-3 sits on an earlier bus than gpu-0, so CUDA (in PCI bus order) calls it 0.
        let gpus = [gpu(0, 0x3b), gpu(3, 0x18)];
        let results = [result("r", "gpu-0", Some("20Gi")), result("r", "gpu-3", Some("10737418241"))];
        let edits = edits(&results, &gpus).unwrap();
        assert_eq!(edits.env[1], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M,1=20480M");
    }

    #[test]
    fn one_gpu_shared_by_two_requests_is_capped_at_their_sum() {
        let results = [result("a", "gpu-0", Some("8Gi")), result("b", "gpu-0", Some("4Gi"))];
        assert_eq!(edits(&results, &[gpu(0, 0x18)]).unwrap().env[1], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=12288M");
    }

    #[test]
    fn whole_gpus_and_mig_devices_are_not_clients_but_count_in_the_numbering() {
        let mig = MigDevice {
            uuid: "MIG-1".into(),
            profile: "3g.40gb".into(),
            gpu_instance: 1,
            compute_instance: 0,
            memory_bytes: 40 << 30,
            multiprocessors: 60,
        };
        let gpus = [gpu(0, 0x18), gpu(1, 0x3b), Gpu { mig: vec![mig], ..gpu(2, 0x5e) }];
        assert_eq!(edits(&[result("r", "gpu-0", None)], &gpus).unwrap(), ContainerEdits::default());
        assert_eq!(edits(&[result("r", "gpu-2-mig-1-0", None)], &gpus).unwrap(), ContainerEdits::default());
        let mixed = [result("whole", "gpu-0", None), result("half", "gpu-1", Some("40Gi"))];
        assert_eq!(edits(&mixed, &gpus).unwrap().env[1], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=40960M");
    }

    #[test]
    fn the_spec_of_a_share_on_an_mps_node_carries_the_client_edits_in_cdi_field_names() {
        let half = result("container-0-request-0", "gpu-0", Some("40Gi"));
        let gpus = [gpu(0, 0x18)];
        let plain = super::super::cdi::prepare("gpu.muster.dev", "node-a", "uid-1", std::slice::from_ref(&half), &gpus)
            .unwrap();
        let mut prepared = plain.clone();
        add_client_edits(&mut prepared, "gpu.muster.dev", &[half], &gpus, Path::new(PIPES)).unwrap();
        assert_eq!(prepared.devices, plain.devices);
        assert_eq!(
            serde_json::to_value(&prepared.spec.unwrap().container_edits).unwrap(),
            serde_json::json!({
                "env": [
                    "NVIDIA_VISIBLE_DEVICES=GPU-0",
                    "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M",
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                ],
                "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia-uvm-tools"}],
                "mounts": [{"hostPath": "/tmp/nvidia-mps", "containerPath": "/tmp/nvidia-mps",
                            "options": ["rw", "nosuid", "nodev", "bind"]}],
            })
        );
        // Another driver's share is left to its own plugin.
        let mut other = result("r", "gpu-0", Some("40Gi"));
        other.driver = "gpu.nvidia.com".into();
        let mut prepared = plain.clone();
        add_client_edits(&mut prepared, "gpu.muster.dev", &[other], &gpus, Path::new(PIPES)).unwrap();
        assert_eq!(prepared, plain);
    }

    #[test]
    fn a_consumed_memory_that_is_no_whole_number_of_bytes_fails_the_claim() {
        let error = edits(&[result("r", "gpu-0", Some("0.5"))], &[gpu(0, 0x18)]).unwrap_err();
        assert_eq!(error.to_string(), r#"device gpu-0: consumed capacity memory "0.5" is not a whole number of bytes"#);
    }
}
