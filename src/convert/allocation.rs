//! Claim decisions as Kubernetes objects: the `status.allocation` a placement writes, the
//! `reservedFor` entry of a pod, and the claim made for a pod's extended resources, as
//! kube-scheduler writes them. Shared by the binder and the simulator.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerExtendedResourceRequest, NodeSelector as KubeNodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PodExtendedResourceClaimStatus,
};
use k8s_openapi::api::resource::v1::{
    AllocationResult, CapacityRequirements, DeviceAllocationResult, DeviceRequest, DeviceRequestAllocationResult,
    ExactDeviceRequest, ResourceClaim, ResourceClaimConsumerReference, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use crate::convert::dra::{EXTENDED_CLAIM_ANNOTATION, POD_CLAIM_NAME_ANNOTATION};
use crate::engine::claims::{Allocation, ClaimPlacement};
use crate::engine::dra::model::{DraSnapshot, ExtendedRequest, GpuShare, NodeSelector, SHARED_CAPACITY};
use crate::engine::model::PodKey;
use crate::quantity::Quantity;

/// The finalizer that keeps an allocated claim from being deleted while in use.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

fn kube_node_selector(selector: &NodeSelector) -> KubeNodeSelector {
    KubeNodeSelector {
        node_selector_terms: selector
            .terms
            .iter()
            .map(|term| {
                let (fields, labels): (Vec<_>, Vec<_>) = term.iter().partition(|r| r.key == "metadata.name");
                let requirement = |r: &crate::engine::model::LabelRequirement| NodeSelectorRequirement {
                    key: r.key.clone(),
                    operator: format!("{:?}", r.operator),
                    values: (!r.values.is_empty()).then(|| r.values.clone()),
                };
                NodeSelectorTerm {
                    match_expressions: (!labels.is_empty()).then(|| labels.into_iter().map(requirement).collect()),
                    match_fields: (!fields.is_empty()).then(|| fields.into_iter().map(requirement).collect()),
                }
            })
            .collect(),
    }
}

/// `status.allocation` for devices allocated in the snapshot `dra` to the claim `owner`
/// (`namespace/name`, or the pod's key for a claim not created yet).
pub fn allocation_result(
    dra: &DraSnapshot,
    allocation: &Allocation,
    owner: &str,
    now: Option<Time>,
) -> AllocationResult {
    let results = allocation
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let device = &dra.devices[d.device as usize];
            DeviceRequestAllocationResult {
                request: d.request.clone(),
                driver: device.driver.to_string(),
                pool: device.pool.to_string(),
                device: device.name.clone(),
                admin_access: d.admin_access.then_some(true),
                consumed_capacity: d.consumed.as_ref().map(|c| {
                    c.iter().map(|(name, q)| (name.clone(), KubeQuantity(q.to_string()))).collect::<BTreeMap<_, _>>()
                }),
                share_id: d.consumed.as_ref().map(|_| share_id(owner, i, &device.id())),
                binding_conditions: device.binding.as_ref().map(|b| b.conditions.clone()).filter(|c| !c.is_empty()),
                binding_failure_conditions: device
                    .binding
                    .as_ref()
                    .map(|b| b.failure_conditions.clone())
                    .filter(|c| !c.is_empty()),
                ..Default::default()
            }
        })
        .collect();
    AllocationResult {
        devices: Some(DeviceAllocationResult { results: Some(results), config: None }),
        node_selector: allocation.node_selector.as_ref().map(kube_node_selector),
        allocation_timestamp: now,
    }
}

/// A share's id: unique among the shares of one device. Derived from the claim and the
/// result's place in it, so that writing the same allocation twice gives the same id.
fn share_id(owner: &str, result: usize, device: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (owner, result, device).hash(&mut hasher);
    let value = hasher.finish();
    // A UUID's shape, as Kubernetes generates one.
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        value >> 32,
        (value >> 16) & 0xffff,
        value & 0xfff,
        (value >> 40) & 0xfff,
        value & 0xffff_ffff_ffff
    )
}

/// The reservation of a claim for a pod.
pub fn reserved_for(pod: &PodKey, uid: &str) -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: None,
        resource: "pods".into(),
        name: pod.name.clone(),
        uid: uid.to_string(),
    }
}

/// The claim kube-scheduler creates for a pod's extended resources served by DRA, with
/// its requests (`container-<i>-request-<j>`); owned by the pod, so it goes with it. For a
/// GPU fraction the pod names by its entry `entry` (see
/// [`super::dra::fraction_claim_entry`]), made as the resourceclaim controller makes
/// a claim from a template (`<pod>-<entry>-…`, annotated with the entry), so that the
/// controller adopts it rather than make another.
pub fn extended_claim(pod: &PodKey, uid: &str, placement: &ClaimPlacement, entry: Option<&str>) -> ResourceClaim {
    let requests = placement
        .extended
        .iter()
        .map(|r| DeviceRequest {
            name: r.request_name.clone(),
            exactly: Some(ExactDeviceRequest {
                device_class_name: r.class.clone(),
                allocation_mode: Some("ExactCount".into()),
                count: Some(i64::from(r.count)),
                capacity: share_asked(placement, r).map(|amount| CapacityRequirements {
                    requests: Some([(SHARED_CAPACITY.to_string(), KubeQuantity(amount.to_string()))].into()),
                }),
                ..Default::default()
            }),
            first_available: None,
        })
        .collect();
    ResourceClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-{}-", pod.name, entry.unwrap_or("extended-resources"))),
            namespace: Some(pod.namespace.clone()),
            annotations: Some(
                [(EXTENDED_CLAIM_ANNOTATION.to_string(), "true".to_string())]
                    .into_iter()
                    .chain(entry.map(|e| (POD_CLAIM_NAME_ANNOTATION.to_string(), e.to_string())))
                    .collect(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.name.clone(),
                uid: uid.to_string(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(k8s_openapi::api::resource::v1::DeviceClaim {
                requests: Some(requests),
                ..Default::default()
            }),
        }),
        status: None,
    }
}

/// The memory a GPU fraction's request asks of each device, as its claim states it: the
/// amount of `gpu-memory`, or for `gpu-fraction` the least share its devices were given.
fn share_asked(placement: &ClaimPlacement, request: &ExtendedRequest) -> Option<Quantity> {
    match request.share? {
        GpuShare::Memory(amount) => Some(amount),
        GpuShare::Fraction(_) => placement
            .allocation
            .iter()
            .flat_map(|a| &a.devices)
            .filter(|d| d.request == request.request_name)
            .flat_map(|d| d.consumed.iter().flatten())
            .filter(|(name, _)| name == SHARED_CAPACITY)
            .map(|(_, amount)| *amount)
            .min(),
    }
}

/// `pod.status.extendedResourceClaimStatus` for the claim `claim_name`.
pub fn extended_status(placement: &ClaimPlacement, claim_name: &str) -> PodExtendedResourceClaimStatus {
    PodExtendedResourceClaimStatus {
        resource_claim_name: claim_name.to_string(),
        // The API server maps only extended resources the container requests: a GPU
        // fraction's request (asked by annotation) is not named here.
        request_mappings: placement
            .extended
            .iter()
            .filter(|r| r.share.is_none())
            .map(|r| ContainerExtendedResourceRequest {
                container_name: r.container.clone(),
                resource_name: r.resource_name.clone(),
                request_name: r.request_name.clone(),
            })
            .collect(),
    }
}
