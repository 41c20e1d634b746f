//! Kubernetes objects for the built-in scenarios, written as a user would write them.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::api::pod_group::{PodGroup, PodGroupSpec};
use crate::convert::assemble::MUSTER_GROUP_LABEL;

/// Seconds since the Unix epoch at which scenarios start (2026-01-01T00:00:00Z).
pub const START: i64 = 1_767_225_600;

/// Versions stamped by `touch`: never the same twice, so no change is taken for none.
static VERSION: AtomicU64 = AtomicU64::new(1);

/// Marks an object the simulator changed, as the API server would, so conversions memoised
/// by resourceVersion, and the tracker of what changed between cycles, see it anew.
pub fn touch(meta: &mut ObjectMeta) {
    let version = VERSION.fetch_add(1, Ordering::Relaxed);
    meta.resource_version = Some(format!("sim-{version}"));
}

fn timestamp(seconds: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(START + seconds).expect("valid time").to_string()
}

/// A GPU node with `gpus` GPUs, 16 cores and 128 GiB per GPU, in `rack`.
pub fn gpu_node(name: &str, rack: &str, gpus: u32) -> Node {
    let capacity = json!({
        "cpu": (16 * gpus.max(1)).to_string(),
        "memory": format!("{}Gi", 128 * gpus.max(1)),
        "pods": "110",
        "nvidia.com/gpu": gpus.to_string(),
    });
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.muster.dev/rack": rack}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }))
    .expect("node")
}

/// A training pod asking for `gpus` GPUs (and 4 cores and 32 GiB per GPU), created
/// `created` seconds after the scenario starts, in Muster's PodGroup `group` if any.
pub fn training_pod(name: &str, gpus: u32, created: i64, scheduler: &str, group: Option<&str>) -> Pod {
    let mut labels = serde_json::Map::new();
    if let Some(group) = group {
        labels.insert(MUSTER_GROUP_LABEL.into(), json!(group));
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels, "creationTimestamp": timestamp(created)},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{
                "name": "train",
                "image": "trainer:latest",
                "resources": {
                    "requests": {"cpu": (4 * gpus.max(1)).to_string(), "memory": format!("{}Gi", 32 * gpus.max(1))},
                    "limits": {"nvidia.com/gpu": gpus.to_string()},
                },
            }],
        },
    }))
    .expect("pod")
}

/// Muster's PodGroup for a job of `min_member` pods.
pub fn pod_group(name: &str, min_member: usize, created: i64) -> PodGroup {
    let mut group = PodGroup::new(name, PodGroupSpec { min_member: min_member as i32, ..Default::default() });
    group.metadata.namespace = Some("default".into());
    group.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(START + created).expect("time"),
    ));
    group
}
