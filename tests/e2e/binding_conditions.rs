//! Devices with binding conditions (KEP-5007) against the real API server: devices on a
//! fabric that every node reaches, which their driver must attach before a pod may use
//! them. The test plays the driver, reporting each allocated device's conditions in its
//! claim's `status.devices`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Patch, PatchParams};
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use serde_json::{Value, json};

use crate::dra::{allocated, claiming_pod, claims, create_class, create_node, create_template, driver, gpu, typed};
use crate::support::cluster::within;
use crate::support::wait::{events_for, node_of, pods, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

/// Reports `conditions` (type, status) for every device allocated to `claim`.
async fn report(cluster: &TestCluster, claim: &ResourceClaim, conditions: &[(&str, &str)]) {
    let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(kind, status)| {
            json!({"type": kind, "status": status, "reason": "Fabric", "message": "switch port 7 is down",
                   "lastTransitionTime": "2026-12-07T00:00:00Z"})
        })
        .collect();
    let devices: Vec<Value> = results
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| json!({"driver": r.driver, "pool": r.pool, "device": r.device, "conditions": conditions}))
        .collect();
    let name = claim.metadata.name.as_deref().unwrap();
    let patch = Patch::Merge(json!({"status": {"devices": devices}}));
    cluster.api::<ResourceClaim>().patch_status(name, &PatchParams::default(), &patch).await.expect("report devices");
}

/// Waits until both of the gang's claims are allocated; returns them.
async fn both_allocated(cluster: &TestCluster) -> Vec<ResourceClaim> {
    within(60, "both claims allocated", async {
        loop {
            let found = claims(cluster).await;
            if found.len() == 2 && found.iter().all(allocated) {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// The node an allocation is pinned to (`metadata.name In [node]`).
fn pinned(claim: &ResourceClaim) -> Option<String> {
    let selector = claim.status.as_ref()?.allocation.as_ref()?.node_selector.as_ref()?;
    let field = selector.node_selector_terms.first()?.match_fields.as_ref()?.first()?;
    (field.key == "metadata.name").then(|| field.values.as_ref()?.first().cloned())?
}

fn attached(claim: &ResourceClaim) -> bool {
    let devices = claim.status.as_ref().and_then(|s| s.devices.as_ref());
    devices.is_some_and(|d| {
        !d.is_empty()
            && d.iter()
                .all(|d| d.conditions.iter().flatten().any(|c| c.type_ == "example.com/attached" && c.status == "True"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_on_fabric_devices_is_bound_only_once_they_are_attached_and_a_failed_attachment_binds_none() {
    let cluster = TestCluster::new("bind-cond").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    let nodes = [create_node(&cluster, "n1").await, create_node(&cluster, "n2").await];
    // Two GPUs on a fabric every node reaches; each must be attached to the node it is
    // allocated for, which the driver reports as a condition.
    let fabric = |name: &str| {
        let mut device = gpu(name, 80, "fabric");
        device["bindingConditions"] = json!(["example.com/attached"]);
        device["bindingFailureConditions"] = json!(["example.com/attach-failed"]);
        device["bindsToNode"] = json!(true);
        device
    };
    let slice: ResourceSlice = typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": cluster.name("fabric")},
        "spec": {"driver": driver(&cluster), "allNodes": true,
                 "pool": {"name": cluster.name("fabric"), "generation": 1, "resourceSliceCount": 1},
                 "devices": [fabric("gpu-0"), fabric("gpu-1")]},
    }));
    cluster.create(&cluster.cluster_api::<ResourceSlice>(), &slice).await;
    let class = create_class(&cluster, None).await;
    create_template(&cluster, "one-gpu", &class, json!({}), json!([])).await;
    let group = PodGroup::new("train", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let api = cluster.api::<Pod>();
    for i in 0..2 {
        let pod = claiming_pod(&cluster, &format!("train-{i}"), "one-gpu", &[("muster.dev/pod-group", "train")]);
        cluster.create(&api, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    // Allocated, each pinned to a node of the test, the conditions copied into the result;
    // no pod is bound while the driver has said nothing.
    let first = both_allocated(&cluster).await;
    for claim in &first {
        let node = pinned(claim).expect("an allocation of a device that binds to its node is pinned to it");
        assert!(nodes.contains(&node), "{node}");
        let results = claim.status.as_ref().unwrap().allocation.as_ref().unwrap().devices.as_ref().unwrap();
        let result = &results.results.as_ref().unwrap()[0];
        assert_eq!(result.binding_conditions.as_deref(), Some(&["example.com/attached".to_string()][..]));
        assert_eq!(result.binding_failure_conditions.as_deref(), Some(&["example.com/attach-failed".to_string()][..]));
    }
    for _ in 0..20 {
        assert!(pods(&cluster).await.iter().all(|p| node_of(p).is_none()), "a pod was bound before its device");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // One device fails to attach: no pod is bound, both claims are deallocated, and the
    // pods are told which device failed and why.
    report(&cluster, &first[0], &[("example.com/attach-failed", "True")]).await;
    let failed_uid = first[0].metadata.uid.clone();
    within(60, "the gang rolled back and its claims deallocated", async {
        loop {
            let now = claims(&cluster).await;
            let released = now.iter().find(|c| c.metadata.uid == failed_uid).is_some_and(|c| !allocated(c));
            if released || now.iter().all(|c| !allocated(c)) {
                break;
            }
            assert!(pods(&cluster).await.iter().all(|p| node_of(p).is_none()), "a pod was bound after a failure");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let claim = first[0].metadata.name.as_deref().unwrap();
    let says = |e: &String| {
        e.contains("device binding failed")
            && e.contains(claim)
            && e.contains("example.com/attach-failed")
            && e.contains("switch port 7 is down")
    };
    within(20, "the pods told which device failed", async {
        loop {
            let mut told = Vec::new();
            for pod in pods(&cluster).await {
                told.extend(events_for(&cluster, pod.metadata.name.as_deref().unwrap(), "FailedScheduling").await);
            }
            if told.iter().any(says) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    // Retried: allocated again (what the driver reported went with the old allocation);
    // once the driver reports both attached, the gang is bound, each pod on the node its
    // device was attached to, and no pod before both are.
    let second = both_allocated(&cluster).await;
    assert!(second.iter().all(|c| !attached(c)), "the failed report was cleared with the allocation");
    report(&cluster, &second[0], &[("example.com/attached", "True")]).await;
    for _ in 0..20 {
        assert!(pods(&cluster).await.iter().all(|p| node_of(p).is_none()), "a pod was bound with a device unattached");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report(&cluster, &second[1], &[("example.com/attached", "True")]).await;
    let bound =
        wait_for_pods(&cluster, 60, "the gang bound", |p| p.iter().filter(|p| node_of(p).is_some()).count() == 2).await;
    let now = claims(&cluster).await;
    assert!(now.iter().all(attached));
    for pod in &bound {
        let uid = pod.metadata.uid.as_deref();
        let claim = now
            .iter()
            .find(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.reserved_for.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|r| Some(r.uid.as_str()) == uid)
            })
            .expect("the pod's claim");
        assert_eq!(pinned(claim).as_deref(), node_of(pod), "the pod runs where its device was attached");
    }
}
