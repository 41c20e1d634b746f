//! Pods' volumes and the rules between pods, against the real API server: a pod whose
//! claim is bound to a local volume is bound to that volume's node; three anti-affine pods on
//! two nodes take one node each and the third waits `Unschedulable` in kube-scheduler's words;
//! a pod whose claim names a class that does not exist waits as kube-scheduler makes it wait,
//! for an "immediate" claim to be bound. (Claims whose class waits for the first consumer:
//! `volume_binding`.)

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::json;

use crate::support::builders;
use crate::support::cluster::TEST_LABEL;
use crate::support::wait::{node_of, wait_for_pods};
use crate::support::{TestCluster, muster as scheduler};

/// The pod's PodScheduled condition, when it is False: (reason, message).
fn not_scheduled(pod: &Pod) -> Option<(String, String)> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some((condition.reason.clone().unwrap_or_default(), condition.message.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_follows_its_local_volume_anti_affine_pods_spread_and_an_unbound_claim_waits_saying_so() {
    let cluster = TestCluster::new("volumes").await;
    cluster.control_plane.start_controller_manager();
    let mut nodes = Vec::new();
    for name in ["n1", "n2"] {
        let full = cluster.name(name);
        cluster.create_node(&builders::node(&full, 32, 256, 0, &[(TEST_LABEL, cluster.id.as_str())])).await;
        nodes.push(full);
    }
    // A local volume on the second node, promised to the test's claim, which the volume
    // controller binds to it.
    let (volume, claim) = (cluster.name("local"), "data");
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/mnt/disk"},
            "claimRef": {"namespace": cluster.namespace, "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [nodes[1]]}
            ]}]}},
        },
    }))
    .unwrap();
    cluster.create(&cluster.cluster_api::<PersistentVolume>(), &pv).await;
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    cluster.create(&cluster.api::<PersistentVolumeClaim>(), &pvc).await;

    let api = cluster.api::<Pod>();
    let mut mounting = builders::pod("mounting", &cluster.scheduler_name, 0, &[]);
    let spec = mounting.spec.as_mut().unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(json!({"name": "d", "persistentVolumeClaim": {"claimName": claim}})).unwrap(),
    ]);
    cluster.create(&api, &mounting).await;
    let anti = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "apart"}}}
    ]}});
    for i in 0..3 {
        let mut apart = builders::pod(&format!("apart-{i}"), &cluster.scheduler_name, 0, &[("app", "apart")]);
        apart.spec.as_mut().unwrap().affinity = Some(serde_json::from_value(anti.clone()).unwrap());
        cluster.create(&api, &apart).await;
    }
    let waiting: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "later"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "wait-for-consumer",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    cluster.create(&cluster.api::<PersistentVolumeClaim>(), &waiting).await;
    let mut later = builders::pod("later", &cluster.scheduler_name, 0, &[]);
    later.spec.as_mut().unwrap().volumes = Some(vec![
        serde_json::from_value(json!({"name": "d", "persistentVolumeClaim": {"claimName": "later"}})).unwrap(),
    ]);
    cluster.create(&api, &later).await;

    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let all = wait_for_pods(&cluster, 30, "mounting and two apart bound, the others told why they wait", |pods| {
        let named = |name: &str| pods.iter().find(|p| p.metadata.name.as_deref() == Some(name));
        let apart = pods.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("apart")));
        let (bound, told): (Vec<_>, Vec<_>) = apart.partition(|p| node_of(p).is_some());
        named("mounting").and_then(node_of).is_some()
            && bound.len() == 2
            && told.iter().all(|p| not_scheduled(p).is_some())
            && named("later").and_then(not_scheduled).is_some()
    })
    .await;
    let named = |name: &str| all.iter().find(|p| p.metadata.name.as_deref() == Some(name)).unwrap();
    assert_eq!(node_of(named("mounting")), Some(nodes[1].as_str()), "the local volume's node");
    let apart: Vec<&Pod> =
        all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("apart"))).collect();
    let mut used: Vec<&str> = apart.iter().filter_map(|p| node_of(p)).collect();
    used.sort();
    assert_eq!(used, [nodes[0].as_str(), nodes[1].as_str()], "one anti-affine pod per node");
    let third = apart.iter().find(|p| node_of(p).is_none()).unwrap();
    let (reason, message) = not_scheduled(third).unwrap();
    assert_eq!(reason, "Unschedulable", "{message}");
    assert!(
        message.starts_with("0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules"),
        "{message}"
    );
    let (reason, message) = not_scheduled(named("later")).unwrap();
    assert_eq!(reason, "Unschedulable", "{message}");
    assert!(message.contains("pod has unbound immediate PersistentVolumeClaims"), "{message}");
    assert!(node_of(named("later")).is_none());
}
