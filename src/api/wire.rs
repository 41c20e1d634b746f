//! Pods and claims as the watches decode them: without what the cache would drop anyway.
//! A pod's `managedFields` are often the largest part of it, and its container statuses
//! and addresses are read by nothing; decoding them only to drop them cost about a tenth of
//! the scheduler's CPU through a burst of bindings, every binding bringing its pod back
//! through the watch. These types skip them while parsing (serde passes over an unknown
//! key without building anything), then become the k8s-openapi objects the cache keeps.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeAllocatableResourceClaimStatus, Pod, PodCondition, PodExtendedResourceClaimStatus, PodResourceClaimStatus,
    PodSpec, PodStatus, PodVolumeHealth, ResourceRequirements,
};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimSpec, ResourceClaimStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// An object's metadata without `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Meta::deserialize(d)?;
    // Every field named, so that a field k8s-openapi adds is a compile error here rather
    // than one the cache silently loses.
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// A pod's status without its container statuses and addresses (read by nothing:
/// `relevance::same_pod`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    allocated_resources: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<PodCondition>>,
    extended_resource_claim_status: Option<PodExtendedResourceClaimStatus>,
    message: Option<String>,
    node_allocatable_resource_claim_statuses: Option<Vec<NodeAllocatableResourceClaimStatus>>,
    nominated_node_name: Option<String>,
    observed_generation: Option<i64>,
    phase: Option<String>,
    qos_class: Option<String>,
    reason: Option<String>,
    resize: Option<String>,
    resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
    resources: Option<ResourceRequirements>,
    start_time: Option<Time>,
    volume_health: Option<Vec<PodVolumeHealth>>,
}

fn status<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PodStatus>, D::Error> {
    let Some(s) = Option::<Status>::deserialize(d)? else { return Ok(None) };
    Ok(Some(PodStatus {
        allocated_resources: s.allocated_resources,
        conditions: s.conditions,
        container_statuses: None,
        ephemeral_container_statuses: None,
        extended_resource_claim_status: s.extended_resource_claim_status,
        host_ip: None,
        host_ips: None,
        init_container_statuses: None,
        message: s.message,
        node_allocatable_resource_claim_statuses: s.node_allocatable_resource_claim_statuses,
        nominated_node_name: s.nominated_node_name,
        observed_generation: s.observed_generation,
        phase: s.phase,
        pod_ip: None,
        pod_ips: None,
        qos_class: s.qos_class,
        reason: s.reason,
        resize: s.resize,
        resource_claim_statuses: s.resource_claim_statuses,
        resources: s.resources,
        start_time: s.start_time,
        volume_health: s.volume_health,
    }))
}

/// A pod as the watch reads it; kept as a `Pod`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WirePod {
    #[serde(default, deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<PodSpec>,
    #[serde(default, deserialize_with = "status")]
    status: Option<PodStatus>,
}

impl From<WirePod> for Pod {
    fn from(pod: WirePod) -> Pod {
        Pod { metadata: pod.metadata, spec: pod.spec, status: pod.status }
    }
}

/// A claim as the watch reads it; kept as a `ResourceClaim`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WireClaim {
    #[serde(default, deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<ResourceClaimSpec>,
    status: Option<ResourceClaimStatus>,
}

impl From<WireClaim> for ResourceClaim {
    fn from(claim: WireClaim) -> ResourceClaim {
        ResourceClaim { metadata: claim.metadata, spec: claim.spec, status: claim.status }
    }
}

/// The API identity of the kind a wire type reads.
macro_rules! reads {
    ($wire:ty, $kind:ty) => {
        impl k8s_openapi::Resource for $wire {
            const API_VERSION: &'static str = <$kind as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$kind as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$kind as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$kind as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <$kind as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$kind as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $wire {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
reads!(WirePod, Pod);
reads!(WireClaim, ResourceClaim);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "w0", "namespace": "ml", "uid": "u1", "resourceVersion": "7", "generation": 2,
                "generateName": "w", "deletionTimestamp": "2026-01-02T00:00:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"muster.dev/pod-group": "train"},
                "annotations": {"a": "b"},
                "finalizers": ["f"],
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1"}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:spec": {"f:containers": {}}}}],
            },
            "spec": {"schedulerName": "muster", "nodeName": "n1", "priority": 5,
                     "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {
                "phase": "Running", "nominatedNodeName": "n2", "podIP": "10.0.0.1", "hostIP": "10.1.0.1",
                "qosClass": "Guaranteed", "startTime": "2026-01-01T00:00:01Z", "reason": "r", "resize": "InProgress",
                "observedGeneration": 2,
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "x", "imageID": "", "ready": true, "restartCount": 3}],
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "w0-gpu"}],
            },
        })
    }

    #[test]
    fn a_pod_read_from_the_wire_is_the_pod_less_what_nothing_reads() {
        let full: Pod = serde_json::from_value(pod_json()).expect("pod");
        let wire: Pod = serde_json::from_value::<WirePod>(pod_json()).expect("wire pod").into();
        let mut expected = full.clone();
        expected.metadata.managed_fields = None;
        let status = expected.status.as_mut().expect("status");
        (status.container_statuses, status.pod_ip, status.host_ip) = (None, None, None);
        assert_eq!(wire, expected);
        // What a decision reads is all there.
        assert_eq!(wire.metadata.owner_references, full.metadata.owner_references);
        assert_eq!(wire.spec, full.spec);
        assert_eq!(wire.status.as_ref().and_then(|s| s.resource_claim_statuses.clone()).map(|c| c.len()), Some(1));
    }

    #[test]
    fn a_claim_read_from_the_wire_loses_only_its_managed_fields() {
        let claim = json!({
            "metadata": {"name": "c", "namespace": "ml", "resourceVersion": "3",
                         "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]},
        });
        let mut full: ResourceClaim = serde_json::from_value(claim.clone()).expect("claim");
        let wire: ResourceClaim = serde_json::from_value::<WireClaim>(claim).expect("wire claim").into();
        full.metadata.managed_fields = None;
        assert_eq!(wire, full);
    }
}
