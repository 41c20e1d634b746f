use super::*;
use crate::api::kueue::{ClusterQueue, ClusterQueueV1beta1};

#[test]
fn an_older_versions_events_keep_the_newer_version_in_the_cache() {
    let old: ClusterQueueV1beta1 = yaml_serde::from_str(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: team-a}\nspec: {cohort: research}\n",
    )
    .unwrap();
    let mut cache = Cache::default();
    let read = |event: Event<ClusterQueueV1beta1>| read_event(event, |a| Some(ClusterQueue::from(a))).unwrap();
    apply_event(&mut cache, read(Event::Init));
    apply_event(&mut cache, read(Event::InitApply(old.clone())));
    apply_event(&mut cache, read(Event::InitDone));
    let kept = cache.cluster_queues.get("", "team-a").expect("kept as v1beta2");
    assert_eq!(kept.spec.fields.cohort_name.as_deref(), Some("research"));
    apply_event(&mut cache, read(Event::Delete(old)));
    assert_eq!(cache.cluster_queues.len(), 0);
}

#[test]
fn a_pod_that_ended_is_kept_for_its_gang_and_claims_without_its_containers_detail() {
    let pod = |phase: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w-0", "namespace": "ml", "uid": "u1",
                "labels": {"muster.dev/pod-group": "train"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(10_000)}},
            "spec": {"schedulerName": "muster", "nodeName": "n1",
                "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "x".repeat(10_000)}],
                                "resources": {"requests": {"nvidia.com/gpu": "8"}}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "w-0-gpu"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "c", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0}]},
        }))
        .unwrap()
    };
    let mut cache = Cache::default();
    apply_event(&mut cache, Event::Apply(pod("Running")));
    let running = cache.pods.get("ml", "w-0").unwrap().clone();
    assert!(running.metadata.annotations.as_ref().unwrap().is_empty(), "last-applied is never kept");
    let container = &running.spec.as_ref().unwrap().containers[0];
    assert!(container.env.is_none() && container.image.is_none(), "nothing placement does not read");
    assert!(container.resources.is_some(), "what it asks for");
    assert!(running.status.as_ref().unwrap().container_statuses.is_none(), "read by nothing");

    apply_event(&mut cache, Event::Apply(pod("Succeeded")));
    let ended = cache.pods.get("ml", "w-0").unwrap();
    let spec = ended.spec.as_ref().unwrap();
    assert_eq!(crate::convert::view::gang_key(ended).name, "train");
    assert_eq!((spec.node_name.as_deref(), spec.scheduler_name.as_deref()), (Some("n1"), Some("muster")));
    assert_eq!(spec.resource_claims.as_ref().unwrap()[0].resource_claim_name.as_deref(), Some("w-0-gpu"));
    assert!(spec.containers[0].env.is_none() && spec.containers[0].resources.is_some());
    let status = ended.status.as_ref().unwrap();
    assert_eq!((status.phase.as_deref(), status.container_statuses.is_none()), (Some("Succeeded"), true));
    assert!(serde_json::to_string(ended).unwrap().len() < 1_000);
}

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

/// What the cache keeps of a pod still says what placement reads: its host ports, its
/// claims' volumes and its pod affinity, whether or not it has ended.
#[test]
fn a_slimmed_pod_keeps_what_placement_reads() {
    use crate::convert::pod_rules::pod_rules;
    use crate::convert::volumes::uses_claims;
    let spec = |extra: &str| -> Pod {
        yaml_serde::from_str(&format!(
            "metadata: {{name: p, namespace: ml}}\nspec:\n  containers: [{{name: c, image: i, ports: [{{containerPort: 80}}]}}]\n{extra}"
        ))
        .expect("pod")
    };
    let pods = [
        spec(
            "  initContainers: [{name: s, image: i, restartPolicy: Always, ports: [{containerPort: 9, hostPort: 9}]}]\n",
        ),
        spec("  volumes: [{name: tmp, emptyDir: {}}, {name: data, persistentVolumeClaim: {claimName: d}}]\n"),
        spec(
            "  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone}]}}\n",
        ),
        spec("  volumes: [{name: tmp, emptyDir: {}}]\n"),
    ];
    for pod in pods {
        let slim = pod.clone().slim();
        let (full, kept) = (pod.spec.as_ref().unwrap(), slim.spec.as_ref().unwrap());
        assert_eq!(pod_rules(&slim, &[]).unwrap(), pod_rules(&pod, &[]).unwrap(), "{pod:?}");
        assert!(full.affinity.is_none() || pod_rules(&slim, &[]).unwrap().is_some(), "{pod:?}");
        assert_eq!(uses_claims(&slim), uses_claims(&pod), "{pod:?}");
        let volumes = kept.volumes.iter().flatten();
        assert!(
            volumes.into_iter().all(|v| v.persistent_volume_claim.is_some()),
            "only claims' volumes kept: {kept:?}"
        );
        assert!(kept.containers[0].ports.is_none(), "ports without a host port are dropped");
    }
}
