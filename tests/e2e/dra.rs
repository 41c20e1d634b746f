//! DRA end to end, against the real API server: Muster allocates ResourceClaims itself,
//! inside the gang transaction, with kube-controller-manager creating claims from templates.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::engine::dra::model::ClaimKey;
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::write::bind::{BindHook, HookAction};
use serde_json::{Value, json};

use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::wait::{node_of, unschedulable_message, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

pub(crate) fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a test object that parses")
}

/// A GPU device as NVIDIA's DRA driver publishes one.
pub(crate) fn gpu(name: &str, memory_gi: u32, pcie_root: &str) -> Value {
    json!({
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": if memory_gi >= 80 { "NVIDIA H100 80GB HBM3" } else { "NVIDIA A100-SXM4-40GB" }},
            "resource.kubernetes.io/pcieRoot": {"string": pcie_root},
        },
        "capacity": {"memory": {"value": format!("{memory_gi}Gi")}},
    })
}

/// The test's driver name: devices of other tests never match its classes.
pub(crate) fn driver(cluster: &TestCluster) -> String {
    format!("{}.gpu.example.com", cluster.id)
}

pub(crate) async fn create_slice(cluster: &TestCluster, node: &str, devices: Vec<Value>) {
    let driver = driver(cluster);
    let slice: ResourceSlice = typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpus")},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }));
    cluster.create(&cluster.cluster_api::<ResourceSlice>(), &slice).await;
}

/// A node without classic GPUs (its GPUs are DRA devices), labelled for this test.
pub(crate) async fn create_node(cluster: &TestCluster, name: &str) -> String {
    let full = cluster.name(name);
    cluster.create_node(&builders::node(&full, 64, 512, 0, &[(TEST_LABEL, &cluster.id)])).await;
    full
}

/// The test's DeviceClass for its GPUs; returns its name.
pub(crate) async fn create_class(cluster: &TestCluster, extended_resource: Option<&str>) -> String {
    let name = cluster.name("gpu");
    let mut class = builders::device_class(&name, &driver(cluster));
    class.spec.get_or_insert_default().extended_resource_name = extended_resource.map(str::to_string);
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &class).await;
    name
}

/// A template with one request, `gpu`, of `class`, with `exactly`'s other fields and the
/// claim's `constraints`.
pub(crate) async fn create_template(
    cluster: &TestCluster,
    name: &str,
    class: &str,
    exactly: Value,
    constraints: Value,
) {
    let mut request = json!({"deviceClassName": class});
    request.as_object_mut().unwrap().extend(exactly.as_object().unwrap().clone());
    let devices = json!({"requests": [{"name": "gpu", "exactly": request}], "constraints": constraints});
    let template: ResourceClaimTemplate = typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }));
    cluster.create(&cluster.api::<ResourceClaimTemplate>(), &template).await;
}

/// A pod for the test's scheduler with one claim from `template`.
pub(crate) fn claiming_pod(cluster: &TestCluster, name: &str, template: &str, labels: &[(&str, &str)]) -> Pod {
    let mut pod = builders::pod(name, &cluster.scheduler_name, 0, labels);
    let spec = pod.spec.as_mut().unwrap();
    spec.resource_claims = Some(vec![typed(json!({"name": "gpu", "resourceClaimTemplateName": template}))]);
    spec.containers[0].resources.get_or_insert_default().claims = Some(vec![typed(json!({"name": "gpu"}))]);
    pod
}

pub(crate) async fn claims(cluster: &TestCluster) -> Vec<ResourceClaim> {
    cluster.api::<ResourceClaim>().list(&ListParams::default()).await.expect("list claims").items
}

/// The devices the claim of `pod` was allocated, as `pool/device`.
pub(crate) fn devices_of(claims: &[ResourceClaim], pod: &Pod) -> Vec<String> {
    let uid = pod.metadata.uid.as_deref();
    let mut found = Vec::new();
    for claim in claims {
        let status = claim.status.as_ref();
        let reserved =
            status.and_then(|s| s.reserved_for.as_ref()).into_iter().flatten().any(|r| Some(r.uid.as_str()) == uid);
        if !reserved {
            continue;
        }
        let results = status.and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
        for r in results.and_then(|d| d.results.as_ref()).into_iter().flatten() {
            found.push(format!("{}/{}", r.pool, r.device));
        }
    }
    found.sort();
    found
}

pub(crate) fn allocated(claim: &ResourceClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| s.allocation.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_big_gpu_claim_lands_on_an_80_gb_gpu_and_never_on_a_40_gb_node() {
    let cluster = TestCluster::new("big-gpu").await;
    cluster.control_plane.start_controller_manager();
    let small = create_node(&cluster, "a100").await;
    let big = create_node(&cluster, "h100").await;
    create_slice(&cluster, &small, (0..4).map(|i| gpu(&format!("gpu-{i}"), 40, "pci0")).collect()).await;
    create_slice(&cluster, &big, (0..2).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    let class = create_class(&cluster, None).await;
    let driver = driver(&cluster);
    let selector = format!(r#"device.capacity["{driver}"].memory.compareTo(quantity("80Gi")) >= 0"#);
    create_template(&cluster, "big-gpu", &class, json!({"selectors": [{"cel": {"expression": selector}}]}), json!([]))
        .await;
    let api = cluster.api::<Pod>();
    for name in ["train-0", "train-1", "train-2"] {
        cluster.create(&api, &claiming_pod(&cluster, name, "big-gpu", &[])).await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    // Two 80 GB GPUs: two pods land on the H100 node; the third waits and says why, and the
    // A100 node, with four free 40 GB GPUs, is never chosen.
    let pods = wait_for_pods(&cluster, 60, "two pods bound and one marked Unschedulable", |p| {
        p.iter().filter(|p| node_of(p).is_some()).count() == 2
            && p.iter().any(|p| node_of(p).is_none() && unschedulable_message(p).is_some())
    })
    .await;
    let all_claims = claims(&cluster).await;
    for pod in pods.iter().filter(|p| node_of(p).is_some()) {
        assert_eq!(node_of(pod), Some(big.as_str()));
        let devices = devices_of(&all_claims, pod);
        assert_eq!(devices.len(), 1, "{devices:?}");
        assert!(devices[0].starts_with(&format!("{big}/gpu-")), "{devices:?}");
    }
    let waiting = pods.iter().find(|p| node_of(p).is_none()).unwrap();
    let message = unschedulable_message(waiting).unwrap();
    assert!(message.contains("had no device matching claim gpu (request gpu)"), "{message}");
    assert!(message.contains("had 0 of 2 devices matching claim gpu (request gpu) free"), "{message}");

    // The claims show the allocation (with the node it is usable from), the reservation
    // for their pod, and the finalizer, as kube-scheduler writes them.
    let bound: Vec<&Pod> = pods.iter().filter(|p| node_of(p).is_some()).collect();
    let mut devices = BTreeSet::new();
    for claim in all_claims.iter().filter(|c| allocated(c)) {
        let status = claim.status.as_ref().unwrap();
        let allocation = status.allocation.as_ref().unwrap();
        let result = &allocation.devices.as_ref().unwrap().results.as_ref().unwrap()[0];
        assert_eq!(
            (result.request.as_str(), result.driver.as_str(), result.pool.as_str()),
            ("gpu", driver.as_str(), big.as_str())
        );
        devices.insert(result.device.clone());
        let selector = serde_json::to_value(allocation.node_selector.as_ref().unwrap()).unwrap();
        assert_eq!(
            selector,
            json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [big]}]}]})
        );
        let reserved = status.reserved_for.as_ref().unwrap();
        assert_eq!(reserved.len(), 1);
        assert_eq!(reserved[0].resource, "pods");
        assert!(bound.iter().any(|p| p.metadata.uid.as_deref() == Some(reserved[0].uid.as_str())));
        assert!(claim.metadata.finalizers.iter().flatten().any(|f| f == "resource.kubernetes.io/delete-protection"));
        // Made by kube-controller-manager from the template, for its pod.
        assert!(claim.metadata.annotations.as_ref().unwrap().contains_key("resource.kubernetes.io/pod-claim-name"));
    }
    assert_eq!(devices.len(), 2, "two different GPUs: {devices:?}");
    let unallocated = all_claims.iter().filter(|c| !allocated(c)).count();
    assert_eq!(unallocated, 1, "the waiting pod's claim holds nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_of_four_with_two_gpus_each_on_one_pcie_root_is_placed_whole_or_not_at_all() {
    let cluster = TestCluster::new("pcie-gang").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    // Each node has two PCIe roots with two GPUs each, and one GPU alone on a third root: a
    // node holds two pods of the gang. With one node, the gang (4 pods) does not fit.
    let devices = || -> Vec<Value> {
        vec![
            gpu("gpu-0", 80, "pci-a"),
            gpu("gpu-1", 80, "pci-b"),
            gpu("gpu-2", 80, "pci-a"),
            gpu("gpu-3", 80, "pci-c"),
            gpu("gpu-4", 80, "pci-b"),
        ]
    };
    let first = create_node(&cluster, "n1").await;
    create_slice(&cluster, &first, devices()).await;
    let class = create_class(&cluster, None).await;
    create_template(
        &cluster,
        "two-gpus",
        &class,
        json!({"count": 2}),
        json!([{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]),
    )
    .await;
    let group = PodGroup::new("train", PodGroupSpec { min_member: 4, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let api = cluster.api::<Pod>();
    for i in 0..4 {
        cluster
            .create(
                &api,
                &claiming_pod(&cluster, &format!("train-{i}"), "two-gpus", &[("muster.dev/pod-group", "train")]),
            )
            .await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let pods = wait_for_pods(&cluster, 60, "the gang marked Unschedulable", |p| {
        p.len() == 4 && p.iter().all(|p| unschedulable_message(p).is_some())
    })
    .await;
    assert!(pods.iter().all(|p| node_of(p).is_none()), "part of the gang was bound");
    let message = unschedulable_message(&pods[0]).unwrap();
    assert!(message.contains("needs 4 pods at once, 2 fit"), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(claims(&cluster).await.iter().all(|c| !allocated(c)), "a waiting gang holds no device");

    // A second node: the gang is placed whole, two pods per node, each pair on one root.
    let second = create_node(&cluster, "n2").await;
    create_slice(&cluster, &second, devices()).await;
    let pods =
        wait_for_pods(&cluster, 60, "the whole gang bound", |p| p.iter().filter(|p| node_of(p).is_some()).count() == 4)
            .await;
    let all_claims = claims(&cluster).await;
    let root = |device: &str| -> &'static str {
        match device {
            "gpu-0" | "gpu-2" => "pci-a",
            "gpu-1" | "gpu-4" => "pci-b",
            _ => "pci-c",
        }
    };
    let mut per_node = std::collections::BTreeMap::<&str, usize>::new();
    for pod in &pods {
        let node = node_of(pod).unwrap();
        *per_node.entry(node).or_default() += 1;
        let devices = devices_of(&all_claims, pod);
        assert_eq!(devices.len(), 2, "{devices:?}");
        let (pool_a, a) = devices[0].split_once('/').unwrap();
        let (pool_b, b) = devices[1].split_once('/').unwrap();
        assert_eq!((pool_a, pool_b), (node, node), "devices on the pod's own node");
        assert_eq!(root(a), root(b), "{devices:?} share a PCIe root");
    }
    assert_eq!(per_node.values().copied().collect::<Vec<_>>(), [2, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tainted_device_is_used_only_when_tolerated_and_again_once_the_taint_is_gone() {
    let cluster = TestCluster::new("taint").await;
    cluster.control_plane.start_controller_manager();
    let node = create_node(&cluster, "n1").await;
    let mut bad = gpu("gpu-0", 80, "pci0");
    bad["taints"] = json!([{"key": "gpu.example.com/xid", "value": "79", "effect": "NoSchedule"}]);
    create_slice(&cluster, &node, vec![bad]).await;
    let class = create_class(&cluster, None).await;
    create_template(&cluster, "any-gpu", &class, json!({}), json!([])).await;
    create_template(
        &cluster,
        "tolerant",
        &class,
        json!({"tolerations": [{"key": "gpu.example.com/xid", "operator": "Exists", "effect": "NoSchedule"}]}),
        json!([]),
    )
    .await;
    let api = cluster.api::<Pod>();
    cluster.create(&api, &claiming_pod(&cluster, "plain", "any-gpu", &[])).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let pods = wait_for_pods(&cluster, 60, "the plain pod marked Unschedulable", |p| {
        p.iter().any(|p| unschedulable_message(p).is_some())
    })
    .await;
    assert!(node_of(&pods[0]).is_none());
    let message = unschedulable_message(&pods[0]).unwrap();
    assert!(message.contains("had no device matching claim gpu (request gpu)"), "{message}");

    // A pod that tolerates the taint gets the device; when it is gone, the taint is cleared
    // and the plain pod gets the device in turn.
    cluster.create(&api, &claiming_pod(&cluster, "tolerant", "tolerant", &[])).await;
    wait_for_pods(&cluster, 60, "the tolerant pod bound", |p| {
        p.iter().any(|p| p.metadata.name.as_deref() == Some("tolerant") && node_of(p).is_some())
    })
    .await;
    assert!(
        wait_for_pods(&cluster, 5, "pods", |_| true)
            .await
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("plain") && node_of(p).is_none())
    );
    api.delete("tolerant", &DeleteParams::default()).await.expect("delete the tolerant pod");
    let slices = cluster.cluster_api::<ResourceSlice>();
    slices
        .patch(
            &format!("{node}-gpus"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pool": {"generation": 2}, "devices": [gpu("gpu-0", 80, "pci0")]}})),
        )
        .await
        .expect("clear the taint");
    wait_for_pods(&cluster, 60, "the plain pod bound once the device is healthy and free", |p| {
        p.iter().any(|p| p.metadata.name.as_deref() == Some("plain") && node_of(p).is_some())
    })
    .await;
}

/// Fails the first write of a claim of the gang, permanently.
struct FailFirstClaim(std::sync::atomic::AtomicBool);

impl BindHook for FailFirstClaim {
    fn before_bind(&self, _: &GangKey, _: usize, _: &PodKey) -> HookAction {
        HookAction::Proceed
    }
    fn before_claim(&self, _: &GangKey, _: &ClaimKey) -> HookAction {
        if self.0.swap(false, std::sync::atomic::Ordering::SeqCst) {
            HookAction::Fail("injected claim write failure".into())
        } else {
            HookAction::Proceed
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_write_that_fails_undoes_the_gangs_claims_and_binds_nothing_then_it_is_retried() {
    let cluster = TestCluster::new("claim-undo").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    let node = create_node(&cluster, "n1").await;
    create_slice(&cluster, &node, (0..4).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    let class = create_class(&cluster, None).await;
    create_template(&cluster, "one-gpu", &class, json!({}), json!([])).await;
    let group = PodGroup::new("pair", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let api = cluster.api::<Pod>();
    // Both claims must exist before the scheduler starts, so both go into one transaction.
    for i in 0..2 {
        cluster
            .create(&api, &claiming_pod(&cluster, &format!("pair-{i}"), "one-gpu", &[("muster.dev/pod-group", "pair")]))
            .await;
    }
    within(30, "both claims created", async {
        while claims(&cluster).await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let hook = Arc::new(FailFirstClaim(std::sync::atomic::AtomicBool::new(true)));
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), Some(hook.clone()));

    // The failed attempt binds nothing; the retry binds both, on different devices.
    let pods = wait_for_pods(&cluster, 60, "the pair bound after the retry", |p| {
        p.iter().filter(|p| node_of(p).is_some()).count() == 2
    })
    .await;
    assert!(!hook.0.load(std::sync::atomic::Ordering::SeqCst), "the claim write failed once");
    let all_claims = claims(&cluster).await;
    let devices: BTreeSet<String> = pods.iter().flat_map(|p| devices_of(&all_claims, p)).collect();
    assert_eq!(devices.len(), 2, "{devices:?}");
    for claim in &all_claims {
        let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).map_or(0, Vec::len);
        assert_eq!(reserved, 1, "each claim is reserved once, for its pod");
    }
    let events = wait_for_events(&cluster, "pair-0", "Scheduled").await;
    assert!(!events.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_pod_is_gone_is_released_and_its_device_serves_the_next_pod() {
    let cluster = TestCluster::new("release").await;
    // No kube-controller-manager: Muster itself releases the claim. The claim is named by the
    // pods directly (resourceClaimName), as a user creates it.
    let node = create_node(&cluster, "n1").await;
    create_slice(&cluster, &node, vec![gpu("gpu-0", 80, "pci0")]).await;
    let class = create_class(&cluster, None).await;
    for name in ["first", "second"] {
        let claim: ResourceClaim = typed(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
        }));
        cluster.create(&cluster.api::<ResourceClaim>(), &claim).await;
    }
    let api = cluster.api::<Pod>();
    let pod_with = |name: &str, claim: &str| {
        let mut pod = builders::pod(name, &cluster.scheduler_name, 0, &[]);
        pod.spec.as_mut().unwrap().resource_claims =
            Some(vec![typed(json!({"name": "gpu", "resourceClaimName": claim}))]);
        pod
    };
    cluster.create(&api, &pod_with("first", "first")).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    wait_for_pods(&cluster, 60, "the first pod bound", |p| p.iter().any(|p| node_of(p).is_some())).await;
    cluster.create(&api, &pod_with("second", "second")).await;
    wait_for_pods(&cluster, 30, "the second pod waiting for the only GPU", |p| {
        p.iter().any(|p| p.metadata.name.as_deref() == Some("second") && unschedulable_message(p).is_some())
    })
    .await;

    api.delete("first", &DeleteParams::default()).await.expect("delete the first pod");
    wait_for_pods(&cluster, 60, "the second pod bound to the released GPU", |p| {
        p.iter().any(|p| p.metadata.name.as_deref() == Some("second") && node_of(p).is_some())
    })
    .await;
    let first = cluster.api::<ResourceClaim>().get("first").await.expect("the first claim");
    assert!(!allocated(&first), "the released claim is deallocated");
    assert!(first.metadata.finalizers.iter().flatten().all(|f| f != "resource.kubernetes.io/delete-protection"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_extended_resource_request_is_served_by_dra_through_a_claim_muster_creates() {
    let cluster = TestCluster::new("extended").await;
    let node = create_node(&cluster, "n1").await;
    create_slice(&cluster, &node, (0..4).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    let resource = format!("{}.example.com/gpu", cluster.id);
    create_class(&cluster, Some(&resource)).await;
    let api = cluster.api::<Pod>();
    let mut pod = builders::pod("legacy", &cluster.scheduler_name, 0, &[]);
    pod.spec.as_mut().unwrap().containers[0].resources.get_or_insert_default().limits =
        Some([(resource.clone(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()))].into());
    cluster.create(&api, &pod).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let pods = wait_for_pods(&cluster, 60, "the pod bound", |p| p.iter().any(|p| node_of(p).is_some())).await;
    let status =
        pods[0].status.as_ref().unwrap().extended_resource_claim_status.clone().expect("extendedResourceClaimStatus");
    assert_eq!(status.request_mappings.len(), 1);
    let mapping = &status.request_mappings[0];
    assert_eq!((mapping.container_name.as_str(), mapping.resource_name.as_str()), ("main", resource.as_str()));
    // Named by the resource's place among the container's sorted requests (cpu, memory, and
    // the GPU, whose name sorts by this test's id), as kube-scheduler names it.
    let mut names = ["cpu", "memory", resource.as_str()];
    names.sort();
    let index = names.iter().position(|n| *n == resource).unwrap();
    assert_eq!(mapping.request_name, format!("container-0-request-{index}"));
    let claim = cluster.api::<ResourceClaim>().get(&status.resource_claim_name).await.expect("the extended claim");
    assert_eq!(
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("resource.kubernetes.io/extended-resource-claim"))
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(claim.metadata.owner_references.as_ref().unwrap()[0].name, "legacy");
    assert_eq!(devices_of(&[claim], &pods[0]).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_failing_at_run_time_stops_only_its_pod_and_says_why() {
    let cluster = TestCluster::new("bad-cel").await;
    cluster.control_plane.start_controller_manager();
    let node = create_node(&cluster, "n1").await;
    create_slice(&cluster, &node, (0..2).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    let class = create_class(&cluster, None).await;
    let driver = driver(&cluster);
    // `cores` is no attribute of these devices: a run-time error, not a silent false.
    let broken = format!(r#"device.attributes["{driver}"].cores >= 4"#);
    create_template(&cluster, "broken", &class, json!({"selectors": [{"cel": {"expression": broken}}]}), json!([]))
        .await;
    create_template(&cluster, "fine", &class, json!({}), json!([])).await;
    let api = cluster.api::<Pod>();
    cluster.create(&api, &claiming_pod(&cluster, "broken", "broken", &[])).await;
    cluster.create(&api, &claiming_pod(&cluster, "fine", "fine", &[])).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let pods = wait_for_pods(&cluster, 60, "fine bound and broken waiting", |p| {
        p.iter().any(|p| p.metadata.name.as_deref() == Some("fine") && node_of(p).is_some())
            && p.iter().any(|p| p.metadata.name.as_deref() == Some("broken") && unschedulable_message(p).is_some())
    })
    .await;
    let broken_pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some("broken")).unwrap();
    let message = unschedulable_message(broken_pod).unwrap();
    assert!(message.contains("claim gpu (request gpu): selector #0: CEL runtime error"), "{message}");
    assert!(message.contains("cores"), "{message}");
    let events = wait_for_events(&cluster, "broken", "FailedScheduling").await;
    assert!(events.iter().any(|e| e.contains("CEL runtime error")), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_podgroup_claim_is_allocated_once_for_the_whole_gang_and_reserved_for_the_podgroup() {
    use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
    let cluster = TestCluster::new("group-claim").await;
    cluster.control_plane.start_controller_manager();
    for name in ["n1", "n2"] {
        let node = create_node(&cluster, name).await;
        create_slice(&cluster, &node, (0..2).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    }
    let class = create_class(&cluster, None).await;
    // One GPU shared by the whole gang: every pod must run where it is.
    create_template(&cluster, "shared-gpu", &class, json!({}), json!([])).await;
    let groups: Api<KubernetesPodGroup> = cluster.api();
    let group: KubernetesPodGroup = typed(json!({
        "metadata": {"name": "team"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}},
                 "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "shared-gpu"}]},
    }));
    let group = cluster.create(&groups, &group).await;
    let api = cluster.api::<Pod>();
    for i in 0..3 {
        let mut pod = builders::pod(&format!("team-{i}"), &cluster.scheduler_name, 0, &[]);
        let spec = pod.spec.as_mut().unwrap();
        spec.scheduling_group = Some(typed(json!({"podGroupName": "team"})));
        spec.resource_claims = Some(vec![typed(json!({"name": "shared", "resourceClaimTemplateName": "shared-gpu"}))]);
        cluster.create(&api, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let pods =
        wait_for_pods(&cluster, 60, "the gang bound", |p| p.len() == 3 && p.iter().all(|p| node_of(p).is_some())).await;
    let nodes: BTreeSet<&str> = pods.iter().filter_map(node_of).collect();
    assert_eq!(nodes.len(), 1, "the gang follows its one shared GPU: {nodes:?}");
    let all_claims = claims(&cluster).await;
    assert_eq!(all_claims.len(), 1, "one claim for the PodGroup, none per pod");
    let claim = &all_claims[0];
    let status = claim.status.as_ref().unwrap();
    let results = status.allocation.as_ref().unwrap().devices.as_ref().unwrap().results.as_ref().unwrap();
    assert_eq!(results.len(), 1);
    let reserved = status.reserved_for.as_ref().unwrap();
    assert_eq!(reserved.len(), 1, "{reserved:?}");
    assert_eq!(
        (reserved[0].api_group.as_deref(), reserved[0].resource.as_str(), reserved[0].name.as_str()),
        (Some("scheduling.k8s.io"), "podgroups", "team")
    );
    assert_eq!(Some(reserved[0].uid.as_str()), group.metadata.uid.as_deref());
}
