//! Snapshots from rows: the one builder the trace replay and the openb replay share, as
//! both start from CSV rows rather than Kubernetes objects. A row's node is written as the
//! objects a cluster would hold for it (its Node, and a ResourceSlice publishing its GPUs as
//! devices that allow several allocations, served as `nvidia.com/gpu` by one DeviceClass)
//! and read through the scheduler's own conversion, so what a replay places on is what the
//! scheduler would see; a row's pod asks for its GPUs as a pod would (whole GPUs through
//! `nvidia.com/gpu`, a fraction by KAI's `gpu-fraction` annotation), and its gang has the
//! defaults a row does not say.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

use super::assemble::{ClusterObjects, Memo, assemble_view};
use super::dra::gpu_fraction;
use crate::engine::dra::model::{DraSnapshot, ExtendedRequest};
use crate::engine::model::{Gang, GangKey, Parked, PendingPod, PodDevices, Snapshot};
use crate::engine::queues::DEFAULT_QUEUE;
use crate::engine::resources::{ResourceId, ResourceNames};

/// The driver of the devices a row's GPUs are published as, and the DeviceClass that
/// serves them as `nvidia.com/gpu`.
pub const GPU_DRIVER: &str = "gpu.muster.dev";
const GPU_RESOURCE: &str = crate::engine::queues::GPU_RESOURCE;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("node {node}: {problem}")]
    Node { node: String, problem: String },
    #[error("{0}")]
    Conversion(String),
    #[error("{pod}: {problem}")]
    Fraction { pod: String, problem: String },
}

/// A node as a row gives it.
pub struct RowNode<'a> {
    pub name: &'a str,
    pub labels: Map<String, Value>,
    /// Its allocatable resources as quantities (`cpu: 16000m`), GPUs not among them: they
    /// are its devices.
    pub allocatable: Map<String, Value>,
    pub unschedulable: bool,
    pub gpus: u32,
    /// The memory each GPU publishes as capacity, as a quantity (`80Gi`).
    pub gpu_memory: String,
    /// The GPU model each device carries as its `model` attribute, when the row names one.
    pub model: Option<&'a str>,
}

/// The objects of a cluster made of rows, until [`Rows::snapshot`] reads them.
pub struct Rows {
    objects: ClusterObjects,
}

impl Rows {
    /// A cluster with no node yet, and the DeviceClass that serves its GPUs.
    pub fn new() -> Result<Rows, Error> {
        let mut objects = ClusterObjects::default();
        let class = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{GPU_DRIVER}'")}}],
                     "extendedResourceName": GPU_RESOURCE}
        });
        objects.device_classes.push(serde_json::from_value(class).map_err(|e| Error::Conversion(e.to_string()))?);
        Ok(Rows { objects })
    }

    /// Adds a node and the slice that publishes its GPUs.
    pub fn node(&mut self, node: RowNode<'_>) -> Result<(), Error> {
        let fail = |e: serde_json::Error| Error::Node { node: node.name.to_string(), problem: e.to_string() };
        let object = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": node.labels},
            "spec": {"unschedulable": node.unschedulable},
            "status": {"allocatable": node.allocatable}
        });
        self.objects.nodes.push(serde_json::from_value(object).map_err(fail)?);
        let devices: Vec<Value> = (0..node.gpus)
            .map(|i| {
                let mut attributes = json!({"type": {"string": "gpu"}});
                if let Some(model) = node.model {
                    attributes["model"] = json!({"string": model});
                }
                json!({"name": format!("gpu-{i}"), "allowMultipleAllocations": true, "attributes": attributes,
                       "capacity": {"memory": {"value": node.gpu_memory}}})
            })
            .collect();
        let slice = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{}-gpus", node.name)},
            "spec": {"driver": GPU_DRIVER, "nodeName": node.name,
                     "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}
        });
        self.objects.resource_slices.push(serde_json::from_value(slice).map_err(fail)?);
        Ok(())
    }

    /// The snapshot the scheduler's conversion reads from the objects, with
    /// `nvidia.com/gpu` among its resources; the first problem the conversion met fails it.
    pub fn snapshot(self) -> Result<Snapshot, Error> {
        let assembled = assemble_view(&self.objects.view(), "muster", 0, &mut Memo::default());
        if let Some(problem) = assembled.problems.first() {
            return Err(Error::Conversion(problem.clone()));
        }
        let mut snapshot = assembled.snapshot;
        snapshot.resources.intern(GPU_RESOURCE);
        Ok(snapshot)
    }
}

/// What a row's pod asks of the GPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GpuAsk {
    /// Whole GPUs, through `nvidia.com/gpu`.
    Whole(u32),
    /// A fraction of one GPU, by the `gpu-fraction` annotation.
    Fraction(f64),
}

/// What a pod named `pod` asks of DRA for `ask`, read as the scheduler reads it; `gpu` is
/// `nvidia.com/gpu` among `names`.
pub fn gpu_devices(
    pod: &str,
    ask: GpuAsk,
    dra: &DraSnapshot,
    names: &mut ResourceNames,
    gpu: ResourceId,
) -> Result<PodDevices, Error> {
    let request = match ask {
        GpuAsk::Whole(count) => ExtendedRequest {
            resource: gpu,
            resource_name: GPU_RESOURCE.into(),
            class: GPU_DRIVER.into(),
            count,
            container: "main".into(),
            request_name: "container-0-request-0".into(),
            share: None,
        },
        GpuAsk::Fraction(fraction) => {
            let fail = |problem: String| Error::Fraction { pod: pod.to_string(), problem };
            let object: Pod = serde_json::from_value(json!({
                "metadata": {"name": pod, "annotations": {"gpu-fraction": format!("{fraction:.3}")}},
                "spec": {"containers": [{"name": "main"}]}
            }))
            .map_err(|e| fail(e.to_string()))?;
            gpu_fraction(&object, dra, names)
                .map_err(|e| fail(e.to_string()))?
                .ok_or_else(|| fail("its fraction was not read".into()))?
        }
    };
    Ok(PodDevices { claims: Vec::new(), extended: vec![request] })
}

/// A gang of `pods`, all of which it needs, with what a row does not say: the default
/// queue, no topology, never evicted, no runtime bound, not parked.
pub fn gang(key: GangKey, pods: Vec<PendingPod>, priority: i32, created: i64) -> Gang {
    Gang {
        key,
        min_member: pods.len(),
        bound: 0,
        pods,
        priority,
        created,
        blocked: None,
        topology: None,
        queue: DEFAULT_QUEUE.to_string(),
        preemption_delay: None,
        last_evicted: None,
        quota_owner: None,
        preemptible: false,
        preempts: true,
        parked: Parked::No,
        max_run_seconds: None,
    }
}
