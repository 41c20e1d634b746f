//! Builders for the objects tests create: fake GPU nodes, DeviceClasses, ResourceSlices, pods.
//!
//! Objects are written as JSON literals, the way a user writes YAML, and parsed into the
//! typed k8s-openapi structs, so a field that does not exist fails the test at once.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use serde_json::{Value, json};

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a builder produced an object that does not parse")
}

/// A fake node: `cpu` cores, `memory_gi` GiB, `gpus` × nvidia.com/gpu, the given labels,
/// Ready, schedulable. There is no kubelet behind it; see `kubelet::KubeletEmulator`.
pub fn node(name: &str, cpu: u32, memory_gi: u32, gpus: u32, labels: &[(&str, &str)]) -> Node {
    let mut all_labels = serde_json::Map::new();
    all_labels.insert("kubernetes.io/hostname".into(), json!(name));
    for (k, v) in labels {
        all_labels.insert((*k).into(), json!(v));
    }
    let capacity = json!({
        "cpu": cpu.to_string(),
        "memory": format!("{memory_gi}Gi"),
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": gpus.to_string(),
    });
    typed(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "emulated by the e2e tests"}],
        },
    }))
}

/// A fake GPU node with 8 nvidia.com/gpu, 64 cores and 512 GiB, in `rack`.
pub fn gpu_node(name: &str, rack: &str, labels: &[(&str, &str)]) -> Node {
    let mut all: Vec<(&str, &str)> = vec![("topology.muster.dev/rack", rack), ("nvidia.com/gpu.present", "true")];
    all.extend_from_slice(labels);
    node(name, 64, 512, 8, &all)
}

/// A DeviceClass selecting every device of `driver`.
pub fn device_class(name: &str, driver: &str) -> DeviceClass {
    typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{driver}'")}}]},
    }))
}

/// One ResourceSlice publishing `count` GPUs named gpu-0.. of `memory_gi` GiB for `node`,
/// in a pool named after the node, with the attribute names NVIDIA's DRA driver uses.
pub fn gpu_slice(node: &str, driver: &str, count: u32, memory_gi: u32) -> ResourceSlice {
    let devices: Vec<Value> = (0..count)
        .map(|i| {
            json!({
                "name": format!("gpu-{i}"),
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": i},
                    "uuid": {"string": format!("GPU-{node}-{i}")},
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    "architecture": {"string": "Hopper"},
                    "driverVersion": {"version": "580.95.5"},
                },
                "capacity": {"memory": {"value": format!("{memory_gi}Gi")}},
            })
        })
        .collect();
    typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-{}", driver.replace('.', "-"))},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))
}

/// A pod for `scheduler_name` whose one container asks for `gpus` × nvidia.com/gpu
/// (none when 0), with the given labels.
pub fn pod(name: &str, scheduler_name: &str, gpus: u32, labels: &[(&str, &str)]) -> Pod {
    let mut limits = serde_json::Map::new();
    if gpus > 0 {
        limits.insert("nvidia.com/gpu".into(), json!(gpus.to_string()));
    }
    let labels: serde_json::Map<String, Value> = labels.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
    typed(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main",
                "image": "registry.invalid/train:latest",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits},
            }],
        },
    }))
}
