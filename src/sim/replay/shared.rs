//! GPUs shared by fractions in a trace replay. When a trace has workers that ask for a
//! fraction of a GPU, the cluster's GPUs are published as DRA devices that allow several
//! allocations, with their memory as capacity (as the agent's `--sharing` publishes them):
//! whole GPUs are asked as `nvidia.com/gpu` served by DRA, fractions with KAI's
//! `gpu-fraction` annotation read by the scheduler's own conversion, so the engine packs
//! them as it does in the scheduler (docs/fractions.md).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::cluster::{Cluster, GPU};
use super::trace::TraceJob;
use crate::config::Config;
use crate::convert::rows::{self, GpuAsk, RowNode, Rows};
use crate::engine::model::PodDevices;
use crate::engine::resources::{ResourceId, ResourceNames};

/// The memory each shared GPU is published with, unless its node's `nvidia.com/gpu.memory`
/// label (MiB, as GPU feature discovery writes it) says otherwise.
pub const DEFAULT_GPU_MEMORY_MIB: i64 = 81_920;
const MEMORY_LABEL: &str = "nvidia.com/gpu.memory";

/// `cluster` with its GPUs as shareable DRA devices and no `nvidia.com/gpu` on its nodes,
/// built by the replays' shared builder ([`rows`]).
pub fn share(cluster: &Cluster, config: &Config) -> Result<Cluster, String> {
    let mut rows = Rows::new().map_err(|e| e.to_string())?;
    let mut gpus_of: HashMap<String, u32> = HashMap::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        let mut allocatable = serde_json::Map::new();
        for id in (0..cluster.resources.len()).map(|i| ResourceId(i as u16)) {
            let amount = node.allocatable.get(id);
            let name = cluster.resources.name(id);
            if amount == 0 {
                continue;
            }
            let quantity = match name {
                GPU => continue,
                "cpu" => format!("{amount}m"),
                _ => amount.to_string(),
            };
            allocatable.insert(name.to_string(), Value::String(quantity));
        }
        let gpus = cluster.gpus_of[n];
        gpus_of.insert(node.name.clone(), gpus);
        let memory =
            node.labels.get(MEMORY_LABEL).and_then(|m| m.parse::<i64>().ok()).unwrap_or(DEFAULT_GPU_MEMORY_MIB);
        let labels = node.labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        rows.node(RowNode {
            name: &node.name,
            labels,
            allocatable,
            unschedulable: node.unschedulable,
            gpus,
            gpu_memory: format!("{memory}Mi"),
            model: None,
        })
        .map_err(|e| e.to_string())?;
    }
    let snapshot = rows.snapshot().map_err(|e| format!("sharing the cluster's GPUs: {e}"))?;
    let taints: HashMap<&str, _> = cluster.nodes.iter().map(|n| (n.name.as_str(), n.taints.clone())).collect();
    let mut nodes: Vec<_> = snapshot.nodes.iter().cloned().collect();
    for node in &mut nodes {
        node.taints = taints.get(node.name.as_str()).cloned().unwrap_or_default();
    }
    let gpus: Vec<u32> = nodes.iter().map(|n| gpus_of.get(&n.name).copied().unwrap_or(0)).collect();
    let description = format!("{}, GPUs shared by memory", cluster.description);
    let mut shared = Cluster::new(snapshot.resources, nodes, gpus, config, description);
    shared.shared = Some(Arc::new(snapshot.dra));
    Ok(shared)
}

/// What a worker of `job` asks of DRA on a shared cluster: its whole GPUs through
/// `nvidia.com/gpu`, or its fraction by the annotation.
pub fn worker_devices(job: &TraceJob, cluster: &Cluster, names: &mut ResourceNames) -> Result<PodDevices, String> {
    let dra = cluster.shared.as_ref().ok_or("the cluster's GPUs are not shared")?;
    let ask = job.gpu_fraction.map_or(GpuAsk::Whole(job.gpus), GpuAsk::Fraction);
    rows::gpu_devices(&job.id, ask, dra, names, cluster.gpu).map_err(|e| format!("job {e}"))
}

/// A job's GPU fraction per worker in thousandths; 0 for whole GPUs.
pub fn fraction_milli(job: &TraceJob) -> u32 {
    job.gpu_fraction.map_or(0, |f| (f * 1000.0).round() as u32)
}

/// The GPUs a worker of `job` holds, in thousandths: its share on shared GPUs, else its
/// whole GPUs (a fraction holding one).
pub fn held_milli(job: &TraceJob, shared: bool) -> i64 {
    match job.gpu_fraction {
        Some(_) if shared => i64::from(fraction_milli(job)),
        _ => i64::from(job.gpus_per_worker()) * 1000,
    }
}
