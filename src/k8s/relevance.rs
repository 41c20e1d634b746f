//! Whether a watch event changes anything a scheduling decision reads. A node's heartbeat
//! or a container's restart count rewrites the object without changing what the cycle
//! sees; such events update the cache and wake nothing, so an idle cluster costs no cycles.
//! Everything not blanked here counts: a field some decision reads must never be blanked.

use k8s_openapi::api::core::v1::{Node, Pod};
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

/// A pod's container statuses, addresses and probe times are not read; its phase, node,
/// conditions (with their transition times), claims and everything in its spec are.
pub fn blank_pod(pod: &mut Pod) {
    blank_version(pod);
    if let Some(status) = pod.status.as_mut() {
        (status.container_statuses, status.init_container_statuses) = (None, None);
        status.ephemeral_container_statuses = None;
        (status.pod_ip, status.pod_ips, status.host_ip, status.host_ips) = (None, None, None, None);
        for condition in status.conditions.iter_mut().flatten() {
            condition.last_probe_time = None;
        }
    }
}
