//! Gangs from the workloads users submit, no PodGroup written, against the real API server:
//! a Job's pods made by the real Job controller; a PyTorchJob's and a LeaderWorkerSet's pods
//! made by the test as their operators would (owner references, labels), since the operators
//! do not run here. Every cluster holds 6 free GPUs of Muster's, pods ask for one each.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::builders;
use crate::support::cluster::TEST_LABEL;
use crate::support::wait::{node_of, unschedulable_message, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

/// One node of 8 GPUs, 2 of them held by another scheduler's pod: 6 free.
async fn six_free_gpus(cluster: &TestCluster) {
    node_with_free(cluster, "n1", 6).await;
}

/// A node of 8 GPUs with `free` of them free: the rest held by another scheduler's pod,
/// bound before the node carries the test's label, so that Muster never sees it emptier.
async fn node_with_free(cluster: &TestCluster, name: &str, free: u32) {
    let node = cluster.name(name);
    cluster.create_node(&builders::node(&node, 64, 512, 8, &[])).await;
    if free < 8 {
        let busy = format!("busy-{name}");
        cluster.create(&cluster.api::<Pod>(), &builders::pod(&busy, "someone-else", 8 - free, &[])).await;
        cluster.bind(&busy, &node).await;
    }
    let nodes = cluster.cluster_api::<Node>();
    let label = json!({"metadata": {"labels": {TEST_LABEL: cluster.id}}});
    nodes.patch(&node, &PatchParams::default(), &Patch::Merge(label)).await.expect("label the node");
}

fn job(cluster: &TestCluster, name: &str, spec: Value, annotations: Value) -> Job {
    let template = builders::pod("ignored", &cluster.scheduler_name, 1, &[]);
    let mut spec = spec;
    spec["template"] = serde_json::to_value(template).unwrap();
    spec["backoffLimit"] = json!(10);
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec})).unwrap()
}

fn named<'a>(pods: &'a [Pod], prefix: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
    pods.iter().filter(move |p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)))
}

fn bound(pods: &[Pod], prefix: &str) -> usize {
    named(pods, prefix).filter(|p| node_of(p).is_some()).count()
}

/// An object of a minimally defined kind, created in the test's namespace; its uid.
async fn create_dynamic(cluster: &TestCluster, api_version: &str, kind: &str, name: &str, spec: Value) -> String {
    let (group, version) = api_version.split_once('/').unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk(&gvk);
    let api: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    let created = api.create(&Default::default(), &object).await.expect("create the workload");
    created.metadata.uid.expect("a uid")
}

/// A pod as an operator makes it: owned by the workload (its controller), with `labels`.
fn owned_pod(
    cluster: &TestCluster,
    name: &str,
    owner: (&str, &str, &str, &str),
    labels: Value,
    annotations: Value,
) -> Pod {
    let mut pod = serde_json::to_value(builders::pod(name, &cluster.scheduler_name, 1, &[])).unwrap();
    let (api_version, kind, owner_name, uid) = owner;
    pod["metadata"]["labels"] = labels;
    pod["metadata"]["annotations"] = annotations;
    pod["metadata"]["ownerReferences"] =
        json!([{"apiVersion": api_version, "kind": kind, "name": owner_name, "uid": uid, "controller": true}]);
    serde_json::from_value(pod).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_and_a_pytorchjob_of_8_wait_whole_on_6_gpus_then_one_binds_whole() {
    let cluster = TestCluster::new("owner-gangs").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    scheduler::install_workload_crds(&cluster).await;
    six_free_gpus(&cluster).await;
    let indexed = json!({"parallelism": 8, "completions": 8, "completionMode": "Indexed"});
    cluster.create(&cluster.api::<Job>(), &job(&cluster, "indexed", indexed, json!({}))).await;
    let replicas = json!({"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 7}}});
    let uid = create_dynamic(&cluster, "kubeflow.org/v1", "PyTorchJob", "resnet", replicas).await;
    let api = cluster.api::<Pod>();
    for i in 0..8 {
        let (role, index) = if i == 0 { ("master", 0) } else { ("worker", i - 1) };
        let labels = json!({"training.kubeflow.org/job-name": "resnet", "training.kubeflow.org/replica-type": role,
                            "training.kubeflow.org/replica-index": index.to_string()});
        let owner = ("kubeflow.org/v1", "PyTorchJob", "resnet", uid.as_str());
        cluster.create(&api, &owned_pod(&cluster, &format!("resnet-{role}-{index}"), owner, labels, json!({}))).await;
    }
    // The scheduler starts with every pod already there, the Job's made by its controller.
    wait_for_pods(&cluster, 60, "the Job's pods made", |p| named(p, "indexed-").count() == 8).await;
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let all = wait_for_pods(&cluster, 60, "both gangs marked Unschedulable", |p| {
        let waiting =
            |prefix| named(p, prefix).count() == 8 && named(p, prefix).all(|p| unschedulable_message(p).is_some());
        waiting("indexed-") && waiting("resnet-")
    })
    .await;
    assert_eq!((bound(&all, "indexed-"), bound(&all, "resnet-")), (0, 0), "6 GPUs place neither gang of 8");
    let message = unschedulable_message(named(&all, "resnet-").next().unwrap()).unwrap();
    assert!(message.contains(&format!("PyTorchJob {}/resnet", cluster.namespace)), "{message}");

    // 8 more GPUs: room for one gang of 8, not two; whichever binds, binds whole.
    node_with_free(&cluster, "n2", 8).await;
    let all = wait_for_pods(&cluster, 60, "one gang bound", |p| bound(p, "indexed-") + bound(p, "resnet-") >= 8).await;
    let counts = (bound(&all, "indexed-"), bound(&all, "resnet-"));
    assert!(counts == (8, 0) || counts == (0, 8), "each gang whole or not at all: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_worker_set_places_each_group_whole() {
    let cluster = TestCluster::new("lws-groups").await;
    scheduler::install_crds(&cluster).await;
    scheduler::install_workload_crds(&cluster).await;
    six_free_gpus(&cluster).await;
    let spec = json!({"replicas": 2, "leaderWorkerTemplate": {"size": 4}});
    create_dynamic(&cluster, "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", spec).await;
    let api = cluster.api::<Pod>();
    for group in 0..2 {
        for worker in 0..4 {
            let name = if worker == 0 { format!("vllm-{group}") } else { format!("vllm-{group}-{worker}") };
            let labels = json!({"leaderworkerset.sigs.k8s.io/name": "vllm",
                                "leaderworkerset.sigs.k8s.io/group-index": group.to_string(),
                                "leaderworkerset.sigs.k8s.io/worker-index": worker.to_string()});
            // In a cluster the group's StatefulSets own these pods; they are not made here
            // (the garbage collector would remove pods owned by none), and Muster reads the
            // group from the labels alone.
            let size = json!({"leaderworkerset.sigs.k8s.io/size": "4"});
            let mut pod = builders::pod(&name, &cluster.scheduler_name, 1, &[]);
            pod.metadata.labels = serde_json::from_value(labels).unwrap();
            pod.metadata.annotations = serde_json::from_value(size).unwrap();
            cluster.create(&api, &pod).await;
        }
    }
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let all = wait_for_pods(&cluster, 60, "one group bound, the other waiting", |p| {
        bound(p, "vllm-") == 4 && named(p, "vllm-").filter(|p| unschedulable_message(p).is_some()).count() == 4
    })
    .await;
    let groups = (bound(&all, "vllm-0"), bound(&all, "vllm-1"));
    assert!(groups == (4, 0) || groups == (0, 4), "each group whole or not at all: {groups:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_queue_jobs_pods_place_one_by_one_and_a_minimum_on_a_job_makes_a_gang_of_it() {
    let cluster = TestCluster::new("job-min").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    node_with_free(&cluster, "n1", 3).await;
    // A work queue: 4 pods at a time, no fixed completions; no gang, so 3 of them start.
    cluster.create(&cluster.api::<Job>(), &job(&cluster, "queue", json!({"parallelism": 4}), json!({}))).await;
    // Parallel with 8 completions would be a gang of 8; the annotation asks for 4 of them.
    let min = json!({"muster.dev/min-member": "4"});
    cluster
        .create(&cluster.api::<Job>(), &job(&cluster, "four", json!({"parallelism": 8, "completions": 8}), min))
        .await;
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    // 3 free GPUs: the work queue takes them one pod at a time; the gang of 4 waits whole.
    let all = wait_for_pods(&cluster, 60, "the work queue on every free GPU, the gang waiting", |p| {
        bound(p, "queue-") == 3
            && named(p, "four-").count() == 8
            && named(p, "four-").all(|p| unschedulable_message(p).is_some())
    })
    .await;
    assert_eq!(bound(&all, "four-"), 0, "3 GPUs are not the 4 the gang needs at once");
    let message = unschedulable_message(named(&all, "four-").next().unwrap()).unwrap();
    assert!(message.contains(&format!("Job {}/four", cluster.namespace)), "{message}");

    // 6 more: room for the queue's last pod and the gang's 4 at once, then more of it as fit.
    node_with_free(&cluster, "n2", 6).await;
    let all = wait_for_pods(&cluster, 60, "the gang placed", |p| bound(p, "four-") >= 4).await;
    assert!(bound(&all, "four-") + bound(&all, "queue-") <= 9, "no more than the 9 GPUs free");
}
