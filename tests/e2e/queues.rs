//! Team queues end to end, against the real API server: a team that lent its idle GPUs
//! gets them back. The lender's newest gang is evicted whole through the Eviction API, its
//! Job recreates the pods, the owner's gang binds on the freed GPUs, and the lender's new
//! pods wait, saying the queue has reached its fair share.
//!
//! Queues are cluster-scoped: each test names its own (after its id), so that tests running
//! beside it see queues that hold none of their gangs.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use muster::k8s::crd::{PodGroup, PodGroupSpec};
use muster::k8s::queue_crd::Queue;
use serde_json::json;

use crate::support::builders;
use crate::support::cluster::TEST_LABEL;
use crate::support::gangs::{GROUP_LABEL, in_group, job};
use crate::support::wait::{node_of, phase, unschedulable_message, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

async fn create_queue(cluster: &TestCluster, name: &str, gpus: u32) -> String {
    let name = cluster.name(name);
    let queue: Queue = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": {"nvidia.com/gpu": {"quota": gpus.to_string()}}},
    }))
    .expect("queue");
    cluster.create(&cluster.cluster_api::<Queue>(), &queue).await;
    name
}

async fn create_queued_group(cluster: &TestCluster, name: &str, min_member: i32, queue: &str) {
    let group = PodGroup::new(name, PodGroupSpec { min_member, queue: Some(queue.to_string()), ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
}

fn running(all: &[Pod], group: &str) -> usize {
    in_group(all, group).iter().filter(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_gets_its_lent_gpus_back_and_the_lenders_newest_gang_is_evicted_whole() {
    let cluster = TestCluster::new("reclaim").await;
    scheduler::install_crds(&cluster).await;
    for name in ["n1", "n2"] {
        let node = builders::node(&cluster.name(name), 32, 256, 8, &[(TEST_LABEL, &cluster.id)]);
        cluster.create_node(&node).await;
    }
    let team_a = create_queue(&cluster, "team-a", 8).await;
    let team_b = create_queue(&cluster, "team-b", 8).await;
    let api = cluster.api::<Pod>();
    let jobs = cluster.api::<Job>();
    let kubelet = KubeletEmulator::start(api.clone());
    cluster.control_plane.start_controller_manager();
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    // Team A fills the cluster with two Jobs' gangs while team B is idle: a1, then a2.
    for name in ["a1", "a2"] {
        create_queued_group(&cluster, name, 2, &team_a).await;
        cluster.create(&jobs, &job(&cluster, name, 2, 4)).await;
        wait_for_pods(&cluster, 60, &format!("{name} running whole"), |p| running(p, name) == 2).await;
        // Start times are in seconds: a2 must start later than a1 to be the newest.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let first: Vec<String> = in_group(&crate::support::wait::pods(&cluster).await, "a2")
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();

    // Team B submits a gang of two 4-GPU pods: within its quota, owed its share.
    create_queued_group(&cluster, "b", 2, &team_b).await;
    for i in 0..2 {
        let pod = builders::pod(&format!("b-{i}"), &cluster.scheduler_name, 4, &[(GROUP_LABEL, "b")]);
        cluster.create(&api, &pod).await;
    }
    let all = wait_for_pods(&cluster, 60, "b running whole on the GPUs a2 held", |p| running(p, "b") == 2).await;
    // a1 was never touched; a2's original pods are gone, evicted whole.
    assert_eq!(running(&all, "a1"), 2);
    for name in &first {
        assert!(!all.iter().any(|p| p.metadata.name.as_ref() == Some(name)), "{name} should have been evicted");
        let events = wait_for_events(&cluster, name, "Reclaimed").await;
        assert!(
            events.iter().any(|e| e.contains(&format!(
                "gang {}/a2 evicted whole (Reclaimed) to make room for gang {}/b",
                cluster.namespace, cluster.namespace
            ))),
            "{name}: {events:?}"
        );
    }
    let events = wait_for_events(&cluster, "b-0", "Reclaiming").await;
    assert!(events[0].contains(&format!("evicting 2 pod(s) of gang {}/a2", cluster.namespace)), "{events:?}");
    // The Job recreated a2's pods; they wait, and say why.
    let all = wait_for_pods(&cluster, 30, "a2's new pods waiting with a reason", |p| {
        let new: Vec<&Pod> =
            in_group(p, "a2").into_iter().filter(|p| !first.contains(p.metadata.name.as_ref().unwrap())).collect();
        new.len() == 2 && new.iter().all(|p| node_of(p).is_none() && unschedulable_message(p).is_some())
    })
    .await;
    let waiting = in_group(&all, "a2").into_iter().find(|p| node_of(p).is_none()).unwrap();
    let message = unschedulable_message(waiting).unwrap();
    assert!(message.contains(&format!("queue {team_a} has reached its fair share of 8 nvidia.com/gpu")), "{message}");
    // And the PodGroup of a2 says it was evicted, and why.
    let groups = cluster.api::<PodGroup>();
    let status = groups.get("a2").await.unwrap().status.unwrap_or_default();
    let evicted = status.conditions.iter().find(|c| c.type_ == "Evicted");
    assert!(evicted.is_some_and(|c| c.reason == "Reclaimed"), "{:?}", status.conditions);

    // `muster explain queue` says the same, with the tree and the figures.
    let target = muster::k8s::explain::Target::Queue { name: team_a.clone() };
    let text = muster::k8s::explain::explain(&cluster.client, &scheduler::config(&cluster), &target).await.unwrap();
    assert!(text.contains(&format!("queue {team_a} (parent: none, top level")), "{text}");
    assert!(text.contains("nvidia.com/gpu: quota 8, limit none, fair share 8, allocated 8"), "{text}");
    assert!(text.contains(&format!("gang {}/a2: ", cluster.namespace)), "{text}");
    assert!(text.contains(&format!("queue {team_a} has reached its fair share of 8 nvidia.com/gpu")), "{text}");

    drop(kubelet);
    for queue in [team_a, team_b] {
        let _ = cluster.cluster_api::<Queue>().delete(&queue, &DeleteParams::default()).await;
    }
}
