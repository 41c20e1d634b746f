//! The device allocator inside the engine: 4,000 pods, each with a claim made from a
//! template for one GPU with a CEL selector (80 GB or more), filling 500 nodes × 8 GPUs.
//!
//! Run with `cargo bench --bench dra`. Throughput is in pods placed per second, for one
//! scheduling cycle: with a warm selector cache (as the scheduler runs, cycle after cycle)
//! and with a cold one (every selector compiled and evaluated on every device first); and
//! warm, with every pod in a queue whose quotas are on devices (`deviceclass/<class>` and
//! `memory.deviceclass/<class>`), charged per device allocated.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use muster::convert::assemble::{ClusterObjects, assemble};
use muster::engine::dra::selectors::SelectorCache;
use muster::engine::model::Snapshot;
use muster::engine::{CycleConfig, schedule_with};
use serde_json::json;

const NODES: usize = 500;
const GPUS: usize = 8;
const PODS: usize = 4_000;
const DRIVER: &str = "gpu.nvidia.com";

fn typed<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("benchmark objects parse")
}

fn cluster(device_quota: bool) -> Snapshot {
    let mut objects = ClusterObjects::default();
    if device_quota {
        let queue: muster::api::queue::Queue = typed(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "team", "resourceVersion": "1"},
            "spec": {"resources": {
                "deviceclass/gpu.nvidia.com": {"quota": (NODES * GPUS).to_string()},
                "memory.deviceclass/gpu.nvidia.com": {"limit": format!("{}Gi", NODES * GPUS * 80)}}},
        }));
        objects.queues.push(queue);
    }
    for n in 0..NODES {
        let name = format!("node-{n}");
        let node: Node = typed(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "128", "memory": "2Ti", "pods": "110"}},
        }));
        objects.nodes.push(node);
        let devices: Vec<_> = (0..GPUS)
            .map(|g| {
                json!({"name": format!("gpu-{g}"),
                       "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": g},
                                      "resource.kubernetes.io/pcieRoot": {"string": format!("pci-{}", g / 4)}},
                       "capacity": {"memory": {"value": "80Gi"}}})
            })
            .collect();
        let slice: ResourceSlice = typed(json!({
            "metadata": {"name": format!("{name}-gpus"), "resourceVersion": "1"},
            "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }));
        objects.resource_slices.push(slice);
    }
    let class: DeviceClass = typed(json!({
        "metadata": {"name": "gpu.nvidia.com", "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]},
    }));
    objects.device_classes.push(class);
    let selector = format!(r#"device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0"#);
    for p in 0..PODS {
        let name = format!("train-{p}");
        let claim_name = format!("{name}-gpu");
        let claim: ResourceClaim = typed(json!({
            "metadata": {"name": claim_name, "namespace": "default", "resourceVersion": "1",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": format!("uid-{p}"), "controller": true}]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                     "selectors": [{"cel": {"expression": selector}}]}}]}},
        }));
        objects.resource_claims.push(claim);
        let pod: Pod = typed(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{p}"), "resourceVersion": "1",
                         "labels": {"muster.dev/queue": "team"}},
            "spec": {"schedulerName": "muster",
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                     "containers": [{"name": "train", "image": "train", "resources": {"requests": {"cpu": "4", "memory": "32Gi"}}}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}]},
        }));
        objects.pods.push(pod);
    }
    let assembled = assemble(&objects, &muster::config::Config::default(), 0);
    assert!(assembled.problems.is_empty(), "{:?}", assembled.problems);
    assembled.snapshot
}

fn bench(c: &mut Criterion) {
    let snapshot = cluster(false);
    let quota = cluster(true);
    let config = CycleConfig::default();
    let mut warm = SelectorCache::default();
    let outcome = schedule_with(&snapshot, &config, &mut warm);
    let placed: usize = outcome.placements.iter().map(|p| p.pods.len()).sum();
    eprintln!(
        "{PODS} pods with one-GPU claims on {NODES} nodes x {GPUS} GPUs: one cycle places {placed} pods, {} wait; \
         {} selector evaluations in a cold cycle",
        outcome.waiting.len(),
        warm.evaluations
    );
    assert_eq!(placed, PODS, "every pod fits");
    let mut quota_cache = SelectorCache::default();
    let outcome = schedule_with(&quota, &config, &mut quota_cache);
    let placed: usize = outcome.placements.iter().map(|p| p.pods.len()).sum();
    assert_eq!(placed, PODS, "every pod fits within the device quotas");
    let team = quota.queues.get("team").expect("the queue");
    let gpus = quota.resources.get("deviceclass/gpu.nvidia.com").and_then(|id| quota.queues.key_index(id));
    assert_eq!(outcome.queues.allocated[team][gpus.expect("a key")], PODS as i64, "one GPU charged per pod");
    let mut group = c.benchmark_group("dra_500_nodes_8_gpus");
    group.sample_size(10);
    group.throughput(Throughput::Elements(PODS as u64));
    group.bench_function("4000_pods_warm_selector_cache", |b| b.iter(|| schedule_with(&snapshot, &config, &mut warm)));
    group.bench_function("4000_pods_cold_selector_cache", |b| {
        b.iter(|| schedule_with(&snapshot, &config, &mut SelectorCache::default()))
    });
    group.bench_function("4000_pods_warm_device_quotas", |b| {
        b.iter(|| schedule_with(&quota, &config, &mut quota_cache))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
