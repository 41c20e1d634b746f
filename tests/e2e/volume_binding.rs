//! Claims whose StorageClass waits for the first consumer, given their nodes inside the
//! gang's transaction, with the test playing the class's provisioner: a Job of four pods,
//! each with its own claim and one per node by anti-affinity, is bound only once every
//! claim is bound, each claim on its pod's node; a provisioner that fails one claim leaves
//! no pod of the gang bound, and the scheduler takes back the nodes it gave the others; a
//! StatefulSet of three with claim templates and a zone spread lands two and one.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use serde_json::json;

use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::gangs;
use crate::support::provisioner::{self, Provisioner, SELECTED_NODE, State};
use crate::support::wait::{events_for, node_of, pods, wait_for_pods};
use crate::support::{TestCluster, muster as scheduler};

async fn claims(cluster: &TestCluster) -> Vec<PersistentVolumeClaim> {
    cluster.api::<PersistentVolumeClaim>().list(&ListParams::default()).await.expect("list claims").items
}

fn bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn selected(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.metadata.annotations.as_ref()?.get(SELECTED_NODE).map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_is_bound_only_once_every_delayed_claim_is_and_a_failed_claim_binds_none_of_it() {
    let cluster = TestCluster::new("wffc-gang").await;
    cluster.control_plane.start_controller_manager();
    let mut nodes = Vec::new();
    for i in 0..4 {
        let name = cluster.name(&format!("n{i}"));
        cluster.create_node(&builders::node(&name, 16, 64, 0, &[(TEST_LABEL, cluster.id.as_str())])).await;
        nodes.push(name);
    }
    scheduler::install_crds(&cluster).await;
    let class = provisioner::create_class(&cluster, "disk").await;
    // The first claim given a node fails, every time; the others are left waiting.
    let provisioner = Provisioner::start(&cluster, &class, State { fail_first: true, ..Default::default() });
    gangs::create_group(&cluster, "train", 4).await;
    let mut job: Job = gangs::job(&cluster, "train", 4, 0);
    let template = &mut job.spec.as_mut().unwrap().template;
    template.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("app".into(), "train".into());
    let spec = template.spec.as_mut().unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "resources": {"requests": {"storage": "1Gi"}},
        }}}}))
        .unwrap(),
    ]);
    spec.affinity = Some(
        serde_json::from_value(json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "train"}}}
        ]}}))
        .unwrap(),
    );
    cluster.create(&cluster.api::<Job>(), &job).await;
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    // While a claim fails, no pod of the gang is bound, and the nodes given to the others
    // are taken back when the gang is rolled back.
    within(60, "a claim failed and the nodes of the others taken back", async {
        loop {
            let seen = {
                let state = provisioner.state.lock().unwrap();
                !state.failed.is_empty() && !state.taken_back.is_empty()
            };
            if seen {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    for _ in 0..30 {
        let all = pods(&cluster).await;
        assert!(all.iter().all(|p| node_of(p).is_none()), "a pod was bound while a claim of its gang failed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failed = provisioner.state.lock().unwrap().failed.iter().next().cloned().unwrap();
    let all = pods(&cluster).await;
    let mut told = Vec::new();
    for pod in &all {
        told.extend(events_for(&cluster, pod.metadata.name.as_deref().unwrap(), "FailedScheduling").await);
    }
    assert!(
        told.iter()
            .any(|e| e
                .contains(&format!("provisioning failed for PersistentVolumeClaim {}/{failed}", cluster.namespace))),
        "the pods are told which claim failed: {told:?}"
    );

    // Once the provisioner works, the gang is bound, and no pod before every claim.
    {
        let mut state = provisioner.state.lock().unwrap();
        state.fail_first = false;
    }
    let first_bound = within(90, "a pod of the gang bound", async {
        loop {
            let all = pods(&cluster).await;
            if all.iter().any(|p| node_of(p).is_some()) {
                return claims(&cluster).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(first_bound.len(), 4);
    assert!(first_bound.iter().all(bound), "every claim is bound before the first pod is");
    let all = wait_for_pods(&cluster, 30, "the gang bound", |pods| {
        gangs::in_group(pods, "train").iter().filter(|p| node_of(p).is_some()).count() == 4
    })
    .await;
    let placed: Vec<&Pod> = gangs::in_group(&all, "train").into_iter().filter(|p| node_of(p).is_some()).collect();
    let mut used: Vec<&str> = placed.iter().filter_map(|p| node_of(p)).collect();
    used.sort();
    used.dedup();
    assert_eq!(used.len(), 4, "one worker per node");
    let claims = claims(&cluster).await;
    for pod in placed {
        let name = format!("{}-scratch", pod.metadata.name.as_deref().unwrap());
        let claim = claims.iter().find(|c| c.metadata.name.as_deref() == Some(name.as_str())).expect("its claim");
        assert_eq!(selected(claim), node_of(pod), "claim {name} was given its pod's node");
        assert!(bound(claim));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_with_claim_templates_spreads_two_and_one_over_two_zones() {
    let cluster = TestCluster::new("wffc-sts").await;
    cluster.control_plane.start_controller_manager();
    for (node, zone) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")] {
        let labels = [(TEST_LABEL, cluster.id.as_str()), ("topology.kubernetes.io/zone", zone)];
        cluster.create_node(&builders::node(&cluster.name(node), 16, 64, 0, &labels)).await;
    }
    let class = provisioner::create_class(&cluster, "disk").await;
    let _provisioner = Provisioner::start(&cluster, &class, State::default());
    let mut template = builders::pod("ignored", &cluster.scheduler_name, 0, &[("app", "db")]);
    template.spec.as_mut().unwrap().restart_policy = Some("Always".into());
    template.spec.as_mut().unwrap().topology_spread_constraints = Some(vec![
        serde_json::from_value(json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "db"}}}))
        .unwrap(),
    ]);
    template.spec.as_mut().unwrap().containers[0].volume_mounts =
        Some(vec![serde_json::from_value(json!({"name": "data", "mountPath": "/data"})).unwrap()]);
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3, "podManagementPolicy": "Parallel", "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": template,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }))
    .unwrap();
    cluster.create(&cluster.api::<StatefulSet>(), &set).await;
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let all = wait_for_pods(&cluster, 90, "the three replicas bound", |pods| {
        pods.iter().filter(|p| node_of(p).is_some()).count() == 3
    })
    .await;
    let zone = |node: &str| if node.ends_with("-a1") || node.ends_with("-a2") { "a" } else { "b" };
    let mut per_zone = [0, 0];
    for pod in &all {
        per_zone[usize::from(zone(node_of(pod).unwrap()) == "b")] += 1;
    }
    per_zone.sort();
    assert_eq!(per_zone, [1, 2], "two replicas in one zone, one in the other");
    let claims = claims(&cluster).await;
    for pod in &all {
        let name = format!("data-{}", pod.metadata.name.as_deref().unwrap());
        let claim = claims.iter().find(|c| c.metadata.name.as_deref() == Some(name.as_str())).expect("its claim");
        assert_eq!(selected(claim), node_of(pod), "claim {name} was given its pod's node");
        assert!(bound(claim), "claim {name} is bound");
    }
}
