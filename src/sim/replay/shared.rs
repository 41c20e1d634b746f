//! GPUs shared by fractions in a trace replay. When a trace has workers that ask for a
//! fraction of a GPU, the cluster's GPUs are published as DRA devices that allow several
//! allocations, with their memory as capacity (as the agent's `--sharing` publishes them):
//! whole GPUs are asked as `nvidia.com/gpu` served by DRA, fractions with KAI's
//! `gpu-fraction` annotation read by the scheduler's own conversion, so the engine packs
//! them as it does in the scheduler (docs/fractions.md).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::cluster::{Cluster, GPU};
use super::trace::TraceJob;
use crate::config::Config;
use crate::convert::assemble::{ClusterObjects, Memo, assemble_view};
use crate::convert::dra::gpu_fraction;
use crate::engine::dra::model::ExtendedRequest;
use crate::engine::model::PodDevices;
use crate::engine::resources::{ResourceId, ResourceNames};

/// The memory each shared GPU is published with, unless its node's `nvidia.com/gpu.memory`
/// label (MiB, as GPU feature discovery writes it) says otherwise.
pub const DEFAULT_GPU_MEMORY_MIB: i64 = 81_920;
const MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
const DRIVER: &str = "gpu.muster.dev";

/// `cluster` with its GPUs as shareable DRA devices and no `nvidia.com/gpu` on its nodes.
pub fn share(cluster: &Cluster, config: &Config) -> Result<Cluster, String> {
    let mut objects = ClusterObjects::default();
    let class = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}],
                 "extendedResourceName": GPU}
    });
    objects.device_classes.push(serde_json::from_value(class).map_err(|e| e.to_string())?);
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
        let object = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": *node.labels},
            "spec": {"unschedulable": node.unschedulable},
            "status": {"allocatable": allocatable}
        });
        objects.nodes.push(serde_json::from_value(object).map_err(|e| format!("node {}: {e}", node.name))?);
        let gpus = cluster.gpus_of[n];
        gpus_of.insert(node.name.clone(), gpus);
        let memory =
            node.labels.get(MEMORY_LABEL).and_then(|m| m.parse::<i64>().ok()).unwrap_or(DEFAULT_GPU_MEMORY_MIB);
        let devices: Vec<Value> = (0..gpus)
            .map(|i| {
                json!({"name": format!("gpu-{i}"), "allowMultipleAllocations": true,
                       "attributes": {"type": {"string": "gpu"}},
                       "capacity": {"memory": {"value": format!("{memory}Mi")}}})
            })
            .collect();
        let slice = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{}-gpus", node.name)},
            "spec": {"driver": DRIVER, "nodeName": node.name,
                     "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}
        });
        objects.resource_slices.push(serde_json::from_value(slice).map_err(|e| format!("node {}: {e}", node.name))?);
    }
    let assembled = assemble_view(&objects.view(), "muster", 0, &mut Memo::default());
    if let Some(problem) = assembled.problems.first() {
        return Err(format!("sharing the cluster's GPUs: {problem}"));
    }
    let mut snapshot = assembled.snapshot;
    snapshot.resources.intern(GPU);
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
    let request = match job.gpu_fraction {
        None => ExtendedRequest {
            resource: cluster.gpu,
            resource_name: GPU.into(),
            class: DRIVER.into(),
            count: job.gpus,
            container: "main".into(),
            request_name: "container-0-request-0".into(),
            share: None,
        },
        Some(fraction) => {
            let object: Pod = serde_json::from_value(json!({
                "metadata": {"name": job.id, "annotations": {"gpu-fraction": format!("{fraction:.3}")}},
                "spec": {"containers": [{"name": "main"}]}
            }))
            .map_err(|e| e.to_string())?;
            gpu_fraction(&object, dra, names)
                .map_err(|e| format!("job {}: {e}", job.id))?
                .ok_or_else(|| format!("job {}: its fraction was not read", job.id))?
        }
    };
    Ok(PodDevices { claims: Vec::new(), extended: vec![request] })
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
