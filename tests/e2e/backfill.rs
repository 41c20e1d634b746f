//! Timed backfill end to end: a gang that does not fit holds capacity until the running
//! pods' deadlines free enough of it; a pod whose own deadline ends first starts now in that
//! capacity, one whose deadline ends later waits and is told why.

use k8s_openapi::api::core::v1::Pod;
use muster::config::QueueingPolicy;

use crate::support::builders;
use crate::support::cluster::TEST_LABEL;
use crate::support::gangs::{GROUP_LABEL, create_group};
use crate::support::wait::{node_of, pods, unschedulable_message, wait_for_events, wait_for_pods};
use crate::support::{TestCluster, muster as scheduler};

/// A pod of `gpus` GPUs that runs at most `deadline` seconds.
fn bounded(cluster: &TestCluster, name: &str, gpus: u32, deadline: i64, labels: &[(&str, &str)]) -> Pod {
    let mut pod = builders::pod(name, &cluster.scheduler_name, gpus, labels);
    pod.spec.as_mut().expect("spec").active_deadline_seconds = Some(deadline);
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_holds_a_reservation_a_short_pod_starts_in_it_and_a_long_one_waits_with_the_reason() {
    let cluster = TestCluster::new("backfill").await;
    scheduler::install_crds(&cluster).await;
    let api = cluster.api::<Pod>();
    // Two nodes of 8 GPUs, each half used by a pod with a deadline: n1's ends in 10 minutes,
    // n2's in 20. The nodes get the test's label only once those pods are bound.
    let mut nodes = Vec::new();
    for (i, deadline) in [(1, 600), (2, 1200)] {
        let name = cluster.name(&format!("n{i}"));
        cluster.create_node(&builders::node(&name, 32, 256, 8, &[("topology.muster.dev/rack", "r1")])).await;
        let busy = format!("busy-{i}");
        cluster.create(&api, &bounded(&cluster, &busy, 4, deadline, &[])).await;
        cluster.bind(&busy, &name).await;
        nodes.push(name);
    }
    let node_api = cluster.cluster_api::<k8s_openapi::api::core::v1::Node>();
    for name in &nodes {
        let label = serde_json::json!({"metadata": {"labels": {TEST_LABEL: cluster.id}}});
        node_api.patch(name, &Default::default(), &kube::api::Patch::Merge(label)).await.expect("label node");
    }
    // A gang of two 8-GPU pods: it fits once both nodes are empty, in 20 minutes.
    create_group(&cluster, "big", 2).await;
    for i in 0..2 {
        let pod = builders::pod(&format!("big-{i}"), &cluster.scheduler_name, 8, &[(GROUP_LABEL, "big")]);
        cluster.create(&api, &pod).await;
    }
    let mut config = scheduler::config(&cluster);
    config.queueing = QueueingPolicy::TimedBackfill;
    config.reserve_after_seconds = 0;
    let _scheduler = scheduler::start(&cluster, config, None);
    wait_for_pods(&cluster, 30, "the gang to be told it holds a reservation", |pods| {
        pods.iter()
            .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("big-")))
            .all(|p| unschedulable_message(p).is_some_and(|m| m.contains("capacity is held for it")))
    })
    .await;
    let big = api.get("big-0").await.expect("big-0");
    let message = unschedulable_message(&big).unwrap_or_default();
    // Twenty minutes from when n2's pod was made, less what the test has taken so far.
    assert!(message.contains("expected to be enough at ") && message.contains(" UTC, in "), "{message}");

    // Creation times are in seconds, and a pod made in the gang's second would be as old
    // as the gang (queue order breaks that tie by kind, single pods first): these two come
    // later, as jobs submitted behind a waiting gang do.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // Ending in 5 minutes, before the gang's time: it starts now, in the held capacity.
    cluster.create(&api, &bounded(&cluster, "short", 2, 300, &[])).await;
    // Ending in 2 hours: it would delay the gang, so it waits.
    cluster.create(&api, &bounded(&cluster, "long", 2, 7200, &[])).await;
    let bound = wait_for_pods(&cluster, 30, "the short pod to be bound", |pods| {
        pods.iter().any(|p| p.metadata.name.as_deref() == Some("short") && node_of(p).is_some())
    })
    .await;
    let short = bound.iter().find(|p| p.metadata.name.as_deref() == Some("short")).expect("short");
    assert!(nodes.iter().any(|n| Some(n.as_str()) == node_of(short)));
    wait_for_pods(&cluster, 30, "the long pod to be told it would delay the gang", |pods| {
        pods.iter().any(|p| {
            p.metadata.name.as_deref() == Some("long")
                && unschedulable_message(p).is_some_and(|m| m.contains("would delay the reservation"))
        })
    })
    .await;
    let events = wait_for_events(&cluster, "long", "FailedScheduling").await;
    assert!(
        events
            .iter()
            .any(|e| e.contains("would delay the reservation of gang") && e.contains("/big (expected to start at")),
        "{events:?}"
    );
    let all = pods(&cluster).await;
    for name in ["long", "big-0", "big-1"] {
        let pod = all.iter().find(|p| p.metadata.name.as_deref() == Some(name)).expect("pod");
        assert_eq!(node_of(pod), None, "{name} must still wait");
    }
}
