//! Whether a watch event changes anything a scheduling decision reads. A node's heartbeat
//! or a container's restart count rewrites the object without changing what the cycle
//! sees; such events update the cache and wake nothing, so an idle cluster costs no cycles.
//! Everything not blanked here counts: a field some decision reads must never be blanked.

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

/// Blanks what no decision reads of any object: its resourceVersion.
pub fn blank_version<K: Resource>(object: &mut K) {
    object.meta_mut().resource_version = None;
}

/// A node's heartbeat, images and agent facts are not read; its labels, taints,
/// unschedulable flag, allocatable and the status of its conditions are.
pub fn blank_node(node: &mut Node) {
    blank_version(node);
    if let Some(status) = node.status.as_mut() {
        for condition in status.conditions.iter_mut().flatten() {
            condition.last_heartbeat_time = None;
        }
        (status.images, status.node_info, status.daemon_endpoints) = (None, None, None);
        (status.volumes_attached, status.volumes_in_use) = (None, None);
    }
}

/// Whether two versions of a pod are the same to every decision: its container statuses,
/// addresses, probe times and resourceVersion are not read; its phase, node, conditions
/// (with their transition times), claims, the rest of its metadata and everything in its
/// spec are. Compared in place: a burst of bindings brings every pod back through the watch,
/// and copying each to blank it cost more than the comparison. Every field is named, so a
/// field k8s-openapi adds is a compile error here, not one that changes nothing.
pub fn same_pod(a: &Pod, b: &Pod) -> bool {
    same_meta(&a.metadata, &b.metadata) && a.spec == b.spec && same_status(a.status.as_ref(), b.status.as_ref())
}

fn same_meta(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields,
        name,
        namespace,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = a;
    *name == b.name
        && *namespace == b.namespace
        && *uid == b.uid
        && *labels == b.labels
        && *annotations == b.annotations
        && *owner_references == b.owner_references
        && *finalizers == b.finalizers
        && *deletion_timestamp == b.deletion_timestamp
        && *deletion_grace_period_seconds == b.deletion_grace_period_seconds
        && *creation_timestamp == b.creation_timestamp
        && *generation == b.generation
        && *generate_name == b.generate_name
        && *self_link == b.self_link
        && *managed_fields == b.managed_fields
}

fn same_status(a: Option<&PodStatus>, b: Option<&PodStatus>) -> bool {
    let (a, b) = match (a, b) {
        (None, None) => return true,
        (Some(a), Some(b)) => (a, b),
        _ => return false,
    };
    let PodStatus {
        allocated_resources,
        conditions,
        container_statuses: _,
        ephemeral_container_statuses: _,
        extended_resource_claim_status,
        host_ip: _,
        host_ips: _,
        init_container_statuses: _,
        message,
        node_allocatable_resource_claim_statuses,
        nominated_node_name,
        observed_generation,
        phase,
        pod_ip: _,
        pod_ips: _,
        qos_class,
        reason,
        resize,
        resource_claim_statuses,
        resources,
        start_time,
        volume_health,
    } = a;
    *phase == b.phase
        && same_conditions(conditions.as_deref(), b.conditions.as_deref())
        && *nominated_node_name == b.nominated_node_name
        && *resource_claim_statuses == b.resource_claim_statuses
        && *extended_resource_claim_status == b.extended_resource_claim_status
        && *node_allocatable_resource_claim_statuses == b.node_allocatable_resource_claim_statuses
        && *allocated_resources == b.allocated_resources
        && *resources == b.resources
        && *resize == b.resize
        && *qos_class == b.qos_class
        && *reason == b.reason
        && *message == b.message
        && *observed_generation == b.observed_generation
        && *start_time == b.start_time
        && *volume_health == b.volume_health
}

fn same_conditions(a: Option<&[PodCondition]>, b: Option<&[PodCondition]>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    let PodCondition {
                        last_probe_time: _,
                        last_transition_time,
                        message,
                        observed_generation,
                        reason,
                        status,
                        type_,
                    } = x;
                    *type_ == y.type_
                        && *status == y.status
                        && *reason == y.reason
                        && *message == y.message
                        && *last_transition_time == y.last_transition_time
                        && *observed_generation == y.observed_generation
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(version: &str, probed: &str, ready: &str, ip: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "resourceVersion": version},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": ready, "lastProbeTime": probed,
                                       "lastTransitionTime": "2026-12-04T10:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_probed_again_is_the_same_to_decisions_a_condition_that_turns_is_not() {
        let first = pod("1", "2026-12-04T10:00:00Z", "True", "10.0.0.1");
        assert!(same_pod(&first, &pod("2", "2026-12-04T10:01:40Z", "True", "10.0.0.2")));
        assert!(!same_pod(&first, &pod("2", "2026-12-04T10:00:00Z", "False", "10.0.0.1")));
        let mut labelled = first.clone();
        labelled.metadata.labels = Some([("muster.dev/queue".to_string(), "a".to_string())].into());
        assert!(!same_pod(&first, &labelled));
        let mut gone = first.clone();
        gone.status = None;
        assert!(!same_pod(&first, &gone));
    }
}
