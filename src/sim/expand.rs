//! Workloads expanded into the pods their controllers would create, so that `muster
//! simulate --cluster my-job.yaml --cluster cluster.yaml` answers "would this start, where,
//! and if not why" before the job is submitted: a Job's pods, a JobSet's Jobs and their
//! pods, a training job's replicas, a RayCluster's (or RayJob's) head and workers, a
//! LeaderWorkerSet's groups. Each pod has the names, labels and owner references its
//! controller gives it and its template's spec; it is created when its workload is.
//!
//! Pure: JSON in, JSON out; the loader reads what comes out as it reads the files.

use serde_json::{Map, Value, json};

use crate::convert::workloads::WorkloadKind;

/// The objects a workload's controllers would create: child workloads (a JobSet's Jobs, a
/// RayJob's RayCluster) and pods, each with the workload's creation time. `workload` has a
/// name, a namespace, a uid and a creationTimestamp.
pub fn children(kind: WorkloadKind, workload: &Value) -> Vec<Value> {
    let spec = workload.get("spec").unwrap_or(&Value::Null);
    let name = str_at(workload, &["metadata", "name"]);
    let mut out = Vec::new();
    match kind {
        WorkloadKind::Job => job_pods(workload, &mut out),
        WorkloadKind::JobSet => {
            for rj in spec.get("replicatedJobs").and_then(Value::as_array).into_iter().flatten() {
                let rj_name = str_at(rj, &["name"]);
                for index in 0..count(rj, "replicas", 1) {
                    let template = rj.get("template").cloned().unwrap_or_default();
                    let labels = json!({
                        "jobset.sigs.k8s.io/jobset-name": name,
                        "jobset.sigs.k8s.io/replicatedjob-name": rj_name,
                        "jobset.sigs.k8s.io/job-index": index.to_string(),
                    });
                    let job =
                        child(workload, "batch/v1", "Job", &format!("{name}-{rj_name}-{index}"), &template, &labels);
                    job_pods(&job, &mut out);
                    out.push(job);
                }
            }
        }
        WorkloadKind::PyTorchJob | WorkloadKind::TFJob | WorkloadKind::XGBoostJob | WorkloadKind::MPIJob => {
            let field = match kind {
                WorkloadKind::PyTorchJob => "pytorchReplicaSpecs",
                WorkloadKind::TFJob => "tfReplicaSpecs",
                WorkloadKind::XGBoostJob => "xgbReplicaSpecs",
                _ => "mpiReplicaSpecs",
            };
            for (role, replica) in spec.get(field).and_then(Value::as_object).into_iter().flatten() {
                let role = role.to_lowercase();
                let template = replica.get("template").cloned().unwrap_or_default();
                for index in 0..count(replica, "replicas", 1) {
                    let labels = json!({
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/replica-type": role,
                        "training.kubeflow.org/replica-index": index.to_string(),
                    });
                    out.push(pod(workload, &format!("{name}-{role}-{index}"), &template, &labels, &json!({})));
                }
            }
        }
        WorkloadKind::RayCluster => ray_pods(workload, &mut out),
        WorkloadKind::RayJob => {
            let template = json!({"spec": spec.get("rayClusterSpec").cloned().unwrap_or_default()});
            let cluster =
                child(workload, "ray.io/v1", "RayCluster", &format!("{name}-raycluster"), &template, &json!({}));
            ray_pods(&cluster, &mut out);
            out.push(cluster);
        }
        WorkloadKind::LeaderWorkerSet => {
            let template = spec.get("leaderWorkerTemplate").unwrap_or(&Value::Null);
            let size = count(template, "size", 1).max(1);
            let worker = template.get("workerTemplate").cloned().unwrap_or_default();
            let leader = template.get("leaderTemplate").cloned().unwrap_or_else(|| worker.clone());
            for group in 0..count(spec, "replicas", 1) {
                for index in 0..size {
                    let (name, template) = match index {
                        0 => (format!("{name}-{group}"), &leader),
                        _ => (format!("{name}-{group}-{index}"), &worker),
                    };
                    let labels = json!({
                        "leaderworkerset.sigs.k8s.io/name": str_at(workload, &["metadata", "name"]),
                        "leaderworkerset.sigs.k8s.io/group-index": group.to_string(),
                        "leaderworkerset.sigs.k8s.io/worker-index": index.to_string(),
                    });
                    let annotations = json!({"leaderworkerset.sigs.k8s.io/size": size.to_string()});
                    let mut made = pod(workload, &name, template, &labels, &annotations);
                    // Owned by the group's StatefulSets in a cluster, which are not simulated.
                    made["metadata"].as_object_mut().map(|m| m.remove("ownerReferences"));
                    out.push(made);
                }
            }
        }
        // Its JobSet comes from a training runtime, which is not expanded.
        WorkloadKind::TrainJob => {}
    }
    out
}

/// A Job's pods, as many as run at once: its parallelism, at most its completions; none
/// while suspended. An indexed Job's pods carry their completion index.
fn job_pods(job: &Value, out: &mut Vec<Value>) {
    let spec = job.get("spec").unwrap_or(&Value::Null);
    if spec.get("suspend").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let parallelism = count(spec, "parallelism", 1);
    let pods = spec.get("completions").and_then(Value::as_u64).map_or(parallelism, |c| parallelism.min(c as u32));
    let indexed = spec.get("completionMode").and_then(Value::as_str) == Some("Indexed");
    let name = str_at(job, &["metadata", "name"]);
    let uid = str_at(job, &["metadata", "uid"]);
    let template = spec.get("template").cloned().unwrap_or_default();
    for index in 0..pods {
        let mut labels = json!({
            "batch.kubernetes.io/job-name": name, "job-name": name,
            "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
        });
        let mut annotations = json!({});
        if indexed {
            labels["batch.kubernetes.io/job-completion-index"] = json!(index.to_string());
            annotations["batch.kubernetes.io/job-completion-index"] = json!(index.to_string());
        }
        out.push(pod(job, &format!("{name}-{index}"), &template, &labels, &annotations));
    }
}

/// A RayCluster's head and each worker group's replicas (its minimum when it sets none),
/// times its hosts.
fn ray_pods(cluster: &Value, out: &mut Vec<Value>) {
    let spec = cluster.get("spec").unwrap_or(&Value::Null);
    let name = str_at(cluster, &["metadata", "name"]);
    let head = spec.get("headGroupSpec").and_then(|h| h.get("template")).cloned().unwrap_or_default();
    let labels = json!({"ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/group": "headgroup"});
    out.push(pod(cluster, &format!("{name}-head"), &head, &labels, &json!({})));
    for group in spec.get("workerGroupSpecs").and_then(Value::as_array).into_iter().flatten() {
        let group_name = str_at(group, &["groupName"]);
        let replicas =
            group.get("replicas").map_or_else(|| count(group, "minReplicas", 0), |_| count(group, "replicas", 0));
        let template = group.get("template").cloned().unwrap_or_default();
        for index in 0..replicas * count(group, "numOfHosts", 1).max(1) {
            let labels = json!({"ray.io/cluster": name, "ray.io/node-type": "worker", "ray.io/group": group_name});
            out.push(pod(cluster, &format!("{name}-{group_name}-worker-{index}"), &template, &labels, &json!({})));
        }
    }
}

fn count(value: &Value, field: &str, default: u32) -> u32 {
    value.get(field).and_then(Value::as_u64).map_or(default, |n| n.min(u64::from(u32::MAX)) as u32)
}

fn str_at<'v>(value: &'v Value, path: &[&str]) -> &'v str {
    path.iter().try_fold(value, |v, k| v.get(*k)).and_then(Value::as_str).unwrap_or_default()
}

/// An owner reference to `owner` as its controller.
fn owned_by(owner: &Value) -> Value {
    json!([{
        "apiVersion": str_at(owner, &["apiVersion"]), "kind": str_at(owner, &["kind"]),
        "name": str_at(owner, &["metadata", "name"]), "uid": str_at(owner, &["metadata", "uid"]),
        "controller": true, "blockOwnerDeletion": true,
    }])
}

/// The template's metadata with `labels` and `annotations` added, in `owner`'s namespace,
/// created when it was, owned by it.
fn metadata(owner: &Value, name: &str, template: &Value, labels: &Value, annotations: &Value) -> Value {
    let merged = |field: &str, added: &Value| {
        let mut all: Map<String, Value> =
            template.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_object).cloned().unwrap_or_default();
        all.extend(added.as_object().cloned().unwrap_or_default());
        Value::Object(all)
    };
    json!({
        "name": name,
        "namespace": str_at(owner, &["metadata", "namespace"]),
        "uid": format!("{}-{name}", str_at(owner, &["metadata", "uid"])),
        "creationTimestamp": owner.get("metadata").and_then(|m| m.get("creationTimestamp")).cloned().unwrap_or_default(),
        "labels": merged("labels", labels),
        "annotations": merged("annotations", annotations),
        "ownerReferences": owned_by(owner),
    })
}

fn pod(owner: &Value, name: &str, template: &Value, labels: &Value, annotations: &Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": metadata(owner, name, template, labels, annotations),
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({"containers": []})),
    })
}

/// A child workload (a JobSet's Job, a RayJob's RayCluster) from a template of metadata and
/// spec.
fn child(owner: &Value, api_version: &str, kind: &str, name: &str, template: &Value, labels: &Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": metadata(owner, name, template, labels, &json!({})),
        "spec": template.get("spec").cloned().unwrap_or_default(),
    })
}

#[cfg(test)]
#[path = "expand_tests.rs"]
mod tests;
