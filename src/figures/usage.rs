//! What each of Muster's bound pods holds in GPUs now, for the usage ledger
//! (`metrics::ledger`): its queue and namespace, its GPUs (whole devices, or the share of one
//! it holds) and the GPU memory its shares consume, from the cluster's objects.
//!
//! A pod's GPUs are those of the claims reserved for it (a shared device counts the share a
//! KAI `gpu-fraction` annotation asks for, else the part of the device's memory it
//! consumes); a pod with none counts its `nvidia.com/gpu` request (device-plugin nodes).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::gpus::{gpus_requested, is_gpu_device};
use crate::convert::assemble::{ClusterView, gang_key};
use crate::convert::dra::fraction;
use crate::convert::groups::GroupSpec;
use crate::convert::queues::QueueRules;
use crate::engine::dra::model::{GpuShare, SHARED_CAPACITY};
use crate::engine::model::GangKey;
use crate::metrics::ledger::Holding;
use crate::quantity::Quantity;

/// The GPUs Muster's bound, unfinished pods hold now.
pub fn holdings(view: &ClusterView<'_>, specs: &HashMap<GangKey, GroupSpec>, scheduler_name: &str) -> Vec<Holding> {
    // GPU devices by (driver, pool, device): their memory, for shares.
    let mut memory: HashMap<(&str, &str, &str), Option<f64>> = HashMap::new();
    for slice in &view.resource_slices {
        let driver = slice.spec.driver.as_str();
        for device in slice.spec.devices.iter().flatten().filter(|d| is_gpu_device(driver, d)) {
            let capacity = device.capacity.as_ref().and_then(|c| c.get(SHARED_CAPACITY));
            let bytes = capacity.and_then(|c| Quantity::parse(&c.value.0).ok()).map(Quantity::as_f64);
            memory.insert((driver, slice.spec.pool.name.as_str(), device.name.as_str()), bytes);
        }
    }
    // Per pod uid: (GPUs, bytes of shares) of the claims reserved for it.
    let mut claimed: HashMap<&str, (f64, f64)> = HashMap::new();
    for claim in &view.resource_claims {
        let Some(status) = claim.status.as_ref() else { continue };
        let Some(allocation) = status.allocation.as_ref() else { continue };
        let results = allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default();
        let (mut gpus, mut bytes) = (0.0, 0.0);
        for result in results {
            let Some(&device_memory) =
                memory.get(&(result.driver.as_str(), result.pool.as_str(), result.device.as_str()))
            else {
                continue;
            };
            let consumed = result.consumed_capacity.as_ref().and_then(|c| c.get(SHARED_CAPACITY));
            match (consumed.and_then(|q| Quantity::parse(&q.0).ok()), device_memory) {
                (Some(share), Some(whole)) if whole > 0.0 => {
                    gpus += (share.as_f64() / whole).min(1.0);
                    bytes += share.as_f64();
                }
                _ => gpus += 1.0,
            }
        }
        if gpus == 0.0 {
            continue;
        }
        for reserved in status.reserved_for.iter().flatten().filter(|r| r.resource == "pods") {
            let entry = claimed.entry(reserved.uid.as_str()).or_default();
            entry.0 += gpus;
            entry.1 += bytes;
        }
    }
    let rules = QueueRules::new(&view.namespaces, view.kueue_imported.then_some(view.local_queues.as_slice()));
    let mut out = Vec::new();
    for pod in &view.pods {
        let spec = pod.spec.as_ref();
        let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
        let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        if !ours || finished || spec.and_then(|s| s.node_name.as_deref()).is_none() {
            continue;
        }
        let Some(uid) = pod.metadata.uid.as_deref() else { continue };
        let (mut gpus, bytes) = claimed.get(uid).copied().unwrap_or_default();
        if let Ok(Some((GpuShare::Fraction(milli), count))) = fraction::share(pod) {
            // The share it asked for, as queues count it: two halves are one GPU.
            gpus = f64::from(milli) * f64::from(count) / 1000.0;
        } else if gpus == 0.0 {
            gpus = gpus_requested(pod) as f64;
        }
        if gpus <= 0.0 {
            continue;
        }
        out.push(Holding {
            uid: uid.to_string(),
            queue: rules.queue_of(specs.get(&gang_key(pod)), pod),
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            gpus,
            memory: bytes,
            bound: bound_at(pod),
        });
    }
    out
}

/// When `pod` was bound: its `PodScheduled` condition, else its start, else its creation.
fn bound_at(pod: &Pod) -> f64 {
    let status = pod.status.as_ref();
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref());
    let at = scheduled.or(status.and_then(|s| s.start_time.as_ref())).or(pod.metadata.creation_timestamp.as_ref());
    at.map_or(0.0, |t| t.0.as_second() as f64)
}
