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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::cache::Cache;
    use crate::k8s::watch::apply_event;
    use kube::runtime::watcher::Event;

    fn node(version: &str, heartbeat: &str, unschedulable: bool) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "resourceVersion": version},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]},
        }))
        .unwrap()
    }

    fn pod(version: &str, restarts: i32, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "resourceVersion": version},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "podIP": format!("10.0.0.{restarts}"),
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true,
                                              "restartCount": restarts}]},
        }))
        .unwrap()
    }

    #[test]
    fn heartbeats_and_container_restarts_wake_nothing_taints_and_phases_do() {
        let mut cache = Cache::default();
        assert!(apply_event(&mut cache, Event::Apply(node("1", "2026-12-04T10:00:00Z", false))), "a new node");
        assert!(!apply_event(&mut cache, Event::Apply(node("2", "2026-12-04T10:00:10Z", false))), "a heartbeat");
        assert!(apply_event(&mut cache, Event::Apply(node("3", "2026-12-04T10:00:20Z", true))), "cordoned");
        assert_eq!(cache.nodes.get("", "n1").unwrap().metadata.resource_version.as_deref(), Some("3"));

        assert!(apply_event(&mut cache, Event::Apply(pod("1", 0, "Running"))));
        assert!(!apply_event(&mut cache, Event::Apply(pod("2", 1, "Running"))), "a container restarted");
        assert_eq!(
            cache.pods.get("ml", "p").unwrap().metadata.resource_version.as_deref(),
            Some("2"),
            "the cache still holds the newest object"
        );
        assert!(apply_event(&mut cache, Event::Apply(pod("3", 1, "Failed"))), "the pod ended");
        assert!(apply_event(&mut cache, Event::Delete(pod("3", 1, "Failed"))));
    }

    #[test]
    fn a_relist_wakes_once_at_its_end() {
        let mut cache = Cache::default();
        assert!(!apply_event(&mut cache, Event::<Node>::Init));
        assert!(!apply_event(&mut cache, Event::InitApply(node("1", "2026-12-04T10:00:00Z", false))));
        assert!(apply_event(&mut cache, Event::<Node>::InitDone));
    }
}
