//! The test control plane itself: a real kube-apiserver at the pinned version, the objects
//! Muster reads and writes round-trip through it, pods bound through pods/binding run on the
//! kubelet emulator, and kube-controller-manager makes claims from templates and runs Jobs.

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::{KubeletEmulator, TestCluster};

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn wait_for_phase(pods: &Api<Pod>, name: &str, wanted: &'static str) -> Pod {
    let what = format!("pod {name} to reach phase {wanted}");
    within(60, &what, await_condition(pods.clone(), name, move |p: Option<&Pod>| p.is_some_and(|p| phase(p) == wanted)))
        .await
        .expect("watch failed")
        .expect("pod deleted")
}

/// Watches `api` until every name in `expected` has been seen; returns the names seen.
async fn watch_until_seen<K>(api: Api<K>, config: watcher::Config, expected: &BTreeSet<String>) -> BTreeSet<String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let mut seen = BTreeSet::new();
    let mut events = watcher(api, config).applied_objects().boxed();
    while !expected.is_subset(&seen) {
        let object = events.try_next().await.expect("watch failed").expect("watch ended");
        seen.insert(object.meta().name.clone().unwrap_or_default());
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_through_the_pinned_api_server_and_bound_pods_run() {
    let cluster = TestCluster::new("objects").await;

    // The server is the pinned build, not whatever else might listen on a port.
    let version = cluster.client.apiserver_version().await.expect("failed to read /version");
    assert_eq!(version.git_version, cluster.control_plane.kubernetes_version);
    assert_eq!(version.git_version, "v1.37.2", "hack/kube/go.mod no longer pins the version this suite targets");

    // Fake GPU nodes, a DeviceClass and a ResourceSlice, watched back with kube-rs.
    let node_names = cluster.create_gpu_nodes(2, "rack-a").await;
    let driver = format!("{}.gpu.e2e.muster.dev", cluster.id);
    let classes: Api<DeviceClass> = cluster.cluster_api();
    let slices: Api<ResourceSlice> = cluster.cluster_api();
    cluster.create(&classes, &builders::device_class(&cluster.name("gpu"), &driver)).await;
    cluster.create(&slices, &builders::gpu_slice(&node_names[0], &driver, 8, 80)).await;

    let expected_nodes: BTreeSet<String> = node_names.iter().cloned().collect();
    let nodes_seen = within(
        30,
        "the test's nodes in a watch",
        watch_until_seen(
            cluster.cluster_api::<Node>(),
            watcher::Config::default().labels(&cluster.node_selector()),
            &expected_nodes,
        ),
    )
    .await;
    assert_eq!(nodes_seen, expected_nodes, "the label selector let another test's nodes through");
    let node = cluster.cluster_api::<Node>().get(&node_names[0]).await.expect("node");
    let allocatable = node.status.and_then(|s| s.allocatable).expect("allocatable");
    assert_eq!(allocatable["nvidia.com/gpu"].0, "8");
    assert_eq!(node.metadata.labels.expect("labels")["topology.muster.dev/rack"], "rack-a");

    let slice_name = format!("{}-{}", node_names[0], driver.replace('.', "-"));
    let slices_seen = within(
        30,
        "the ResourceSlice in a watch",
        watch_until_seen(
            slices.clone(),
            watcher::Config::default().fields(&format!("spec.driver={driver}")),
            &BTreeSet::from([slice_name.clone()]),
        ),
    )
    .await;
    assert_eq!(slices_seen.len(), 1);
    let slice = slices.get(&slice_name).await.expect("slice");
    assert_eq!(slice.spec.devices.as_ref().map(Vec::len), Some(8));
    assert_eq!(slice.spec.node_name.as_deref(), Some(node_names[0].as_str()));
    let class = classes.get(&cluster.name("gpu")).await.expect("device class");
    let selector = &class.spec.expect("spec").selectors.expect("selectors")[0];
    assert_eq!(selector.cel.as_ref().expect("cel").expression, format!("device.driver == '{driver}'"));

    // Pods of a scheduler that does not run stay pending until the test binds them.
    let pods: Api<Pod> = cluster.api();
    let labels = [(TEST_LABEL, cluster.id.as_str())];
    for name in ["train-0", "train-1"] {
        cluster.create(&pods, &builders::pod(name, &cluster.scheduler_name, 4, &labels)).await;
    }
    let kubelet = KubeletEmulator::start(pods.clone());
    assert_eq!(phase(&pods.get("train-0").await.expect("pod")), "Pending");
    cluster.bind("train-0", &node_names[0]).await;
    cluster.bind("train-1", &node_names[1]).await;

    for (name, node) in [("train-0", &node_names[0]), ("train-1", &node_names[1])] {
        let pod = wait_for_phase(&pods, name, "Running").await;
        assert!(is_ready(&pod), "pod {name} is Running but not Ready");
        assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some(node.as_str()));
    }

    // The emulator ends pods on request, as a kubelet reports a finished or crashed container.
    kubelet.complete("train-0").await;
    kubelet.fail("train-1").await;
    let done = wait_for_phase(&pods, "train-0", "Succeeded").await;
    assert!(!is_ready(&done));
    wait_for_phase(&pods, "train-1", "Failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_manager_makes_claims_from_templates_and_runs_jobs() {
    let cluster = TestCluster::new("controllers").await;
    cluster.control_plane.start_controller_manager();
    let node_names = cluster.create_gpu_nodes(1, "rack-b").await;
    let pods: Api<Pod> = cluster.api();
    let _kubelet = KubeletEmulator::start(pods.clone());

    // resourceclaim controller: a pod naming a template gets its own claim.
    let driver = format!("{}.gpu.e2e.muster.dev", cluster.id);
    let class_name = cluster.name("gpu");
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &builders::device_class(&class_name, &driver)).await;
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class_name}}]}}},
    }))
    .expect("template");
    cluster.create(&cluster.api::<ResourceClaimTemplate>(), &template).await;
    let mut pod = builders::pod("with-claim", &cluster.scheduler_name, 0, &[]);
    let spec = pod.spec.as_mut().expect("spec");
    spec.resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"})).expect("claim ref"),
    ]);
    spec.containers[0].resources.get_or_insert_default().claims =
        Some(vec![serde_json::from_value(json!({"name": "gpu"})).expect("claim use")]);
    cluster.create(&pods, &pod).await;

    let has_claim = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.resource_claim_statuses.as_ref()?.first()?.resource_claim_name.as_ref())
            .is_some()
    };
    let pod = within(60, "the claim made from the template", await_condition(pods.clone(), "with-claim", has_claim))
        .await
        .expect("watch failed")
        .expect("pod deleted");
    let claim_name = pod.status.unwrap().resource_claim_statuses.unwrap()[0].resource_claim_name.clone().unwrap();
    let claim = cluster.api::<ResourceClaim>().get(&claim_name).await.expect("claim made from the template");
    let owner = &claim.metadata.owner_references.expect("owner")[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Pod", "with-claim"));
    assert!(claim.status.and_then(|s| s.allocation).is_none(), "nobody should have allocated the claim");

    // job controller: a Job's pods are made, run once bound, and complete the Job.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2, "completions": 2, "backoffLimit": 0,
            "template": builders::pod("ignored", &cluster.scheduler_name, 1, &[]),
        },
    }))
    .expect("job");
    let jobs: Api<Job> = cluster.api();
    cluster.create(&jobs, &job).await;
    let job_pods = ListParams::default().labels("job-name=train");
    let names = within(60, "the Job's two pods", async {
        loop {
            let list = pods.list(&job_pods).await.expect("list pods");
            if list.items.len() == 2 {
                break list.items.into_iter().filter_map(|p| p.metadata.name).collect::<Vec<_>>();
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await;
    for name in &names {
        cluster.bind(name, &node_names[0]).await;
        wait_for_phase(&pods, name, "Running").await;
        _kubelet.complete(name).await;
    }
    let complete = |j: Option<&Job>| {
        j.and_then(|j| j.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
    };
    within(60, "the Job to complete", await_condition(jobs.clone(), "train", complete)).await.expect("watch failed");

    // garbage collector: deleting the Job takes its pods with it.
    jobs.delete(
        "train",
        &DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..Default::default() },
    )
    .await
    .expect("delete job");
    within(60, "the garbage collector to delete the Job's pods", async {
        while !pods.list(&job_pods).await.expect("list pods").items.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_podgroup_crd_installs_and_the_api_server_enforces_its_schema() {
    use kube::api::PostParams;
    use muster::api::pod_group::{PodGroup, PodGroupSpec};

    let cluster = TestCluster::new("crds").await;
    crate::support::muster::install_crds(&cluster).await;

    let groups: Api<PodGroup> = cluster.api();
    let train = PodGroup::new("train", PodGroupSpec { min_member: 8, ..Default::default() });
    let created = groups.create(&PostParams::default(), &train).await.expect("a valid PodGroup is accepted");
    assert_eq!(created.spec.min_member, 8);

    let empty = PodGroup::new("empty", PodGroupSpec { min_member: 0, ..Default::default() });
    let err = groups.create(&PostParams::default(), &empty).await.expect_err("minMember 0 must be rejected");
    assert!(err.to_string().contains("minMember"), "the rejection should name the field: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_connection_rate_holds_requests_to_qps_after_the_burst() {
    let cluster = TestCluster::new("client-rate").await;
    let connection = muster::config::ClientConnection { qps: 10.0, burst: 2, max_in_flight: 4 };
    let client = cluster.control_plane.client_with(&connection).await;
    let started = std::time::Instant::now();
    let calls = (0..12).map(|_| client.apiserver_version());
    for answer in futures::future::join_all(calls).await {
        answer.expect("the API server answers every throttled request");
    }
    // Two at once, then ten at 10 a second: at least a second, however fast the server.
    let elapsed = started.elapsed();
    assert!(elapsed >= std::time::Duration::from_millis(950), "12 requests took {elapsed:?}");
}
