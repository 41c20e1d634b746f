//! A workload as the API server serves it (JSON of any of the kinds read), kept as little
//! as its gang needs: a Job's pod template and status are dropped as it is read.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{MIN_MEMBER_ANNOTATION, Workload, WorkloadKind, key, shape};
use crate::convert::gang_spec::TOPOLOGY_ANNOTATIONS;
use crate::convert::membership::{KAI_PREEMPTIBILITY_LABEL, KAI_QUEUE_LABELS, QUEUE_LABEL};

/// Whether a workload's gang reads this label or annotation: its minimum, queue,
/// preemptibility and topology.
fn read_key(key: &str) -> bool {
    [MIN_MEMBER_ANNOTATION, QUEUE_LABEL, KAI_PREEMPTIBILITY_LABEL].contains(&key)
        || KAI_QUEUE_LABELS.contains(&key)
        || TOPOLOGY_ANNOTATIONS.iter().any(|(required, preferred)| key == *required || key == *preferred)
}

/// Why an object is not read as a workload at all: its metadata is not an object's
/// metadata. (A spec that does not read is kept, as [`shape::Shape::Unreadable`].)
#[derive(Debug, thiserror::Error)]
#[error("{} metadata: {source}", .kind.name())]
pub struct UnreadableWorkload {
    pub kind: WorkloadKind,
    pub source: serde_json::Error,
}

impl Workload {
    /// Reads an object of `kind` as the API server serves it, keeping what a gang needs. An
    /// object whose spec does not read as its kind's keeps that as its shape
    /// ([`shape::Shape::Unreadable`]), so its pods wait and say why.
    pub fn read(kind: WorkloadKind, object: &serde_json::Value) -> Result<Workload, UnreadableWorkload> {
        let meta: ObjectMeta = serde_json::from_value(object.get("metadata").cloned().unwrap_or_default())
            .map_err(|source| UnreadableWorkload { kind, source })?;
        let spec = object.get("spec").unwrap_or(&serde_json::Value::Null);
        let shape = shape::read(kind, spec, &meta);
        let deadline = ["/activeDeadlineSeconds", "/runPolicy/activeDeadlineSeconds"]
            .iter()
            .find_map(|at| spec.pointer(at)?.as_i64())
            .filter(|&seconds| seconds > 0);
        Ok(Workload { metadata: slim(kind, meta), kind, shape, deadline })
    }
}

fn slim(kind: WorkloadKind, meta: ObjectMeta) -> ObjectMeta {
    let keep = |m: Option<BTreeMap<String, String>>| {
        let kept: BTreeMap<String, String> = m.into_iter().flatten().filter(|(k, _)| read_key(k)).collect();
        (!kept.is_empty()).then_some(kept)
    };
    ObjectMeta {
        name: Some(key(kind, meta.name.as_deref().unwrap_or_default())),
        namespace: meta.namespace,
        uid: meta.uid,
        creation_timestamp: meta.creation_timestamp,
        owner_references: controller(meta.owner_references),
        labels: keep(meta.labels),
        annotations: keep(meta.annotations),
        ..Default::default()
    }
}

/// Only the controller of the owners, with what identifies it.
fn controller(references: Option<Vec<OwnerReference>>) -> Option<Vec<OwnerReference>> {
    let controller = references?.into_iter().find(|o| o.controller == Some(true))?;
    Some(vec![OwnerReference {
        api_version: controller.api_version,
        kind: controller.kind,
        name: controller.name,
        uid: controller.uid,
        controller: Some(true),
        block_owner_deletion: None,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_is_kept_without_its_template_or_status_and_with_its_controller() {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "u1", "resourceVersion": "7",
                "labels": {"muster.dev/queue": "team-a", "app": "x"},
                "annotations": {"muster.dev/min-member": "4", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "ownerReferences": [
                    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u0", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u2"}]},
            "spec": {"parallelism": 8, "completions": 8, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"active": 3},
        });
        let kept = Workload::read(WorkloadKind::Job, &job).unwrap();
        assert_eq!(kept.metadata.name.as_deref(), Some("Job/train"));
        assert_eq!((kept.name(), kept.namespace()), ("train", "ml"));
        assert_eq!(kept.controller().map(|o| o.name.as_str()), Some("js"));
        assert_eq!(kept.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(kept.marked("muster.dev/queue"), Some("team-a"));
        assert_eq!(kept.marked(MIN_MEMBER_ANNOTATION), Some("4"));
        assert!(kept.marked("app").is_none() && kept.metadata.resource_version.is_none());
        let mut moved = job.clone();
        moved["status"]["active"] = json!(8);
        moved["metadata"]["resourceVersion"] = json!("8");
        assert_eq!(Workload::read(WorkloadKind::Job, &moved).unwrap(), kept, "a status change is no change");
    }
}
