//! Leader election end to end: two scheduler replicas against one API server. Only the
//! lease holder binds; when it dies the other takes over within the lease duration; a
//! replica that loses its lease stops binding at once; no gang is bound twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use muster::k8s::scheduler::Options;
use muster::metrics::Metrics;
use serde_json::json;

use crate::support::cluster::within;
use crate::support::gangs::{create_gang, holder, in_group, wait_for_holder};
use crate::support::wait::{events_for, node_of, pods, wait_for_events, wait_for_pods};
use crate::support::{TestCluster, muster as scheduler};

fn all_bound(all: &[Pod], group: &str, count: usize) -> bool {
    let pods = in_group(all, group);
    pods.len() == count && pods.iter().all(|p| node_of(p).is_some())
}

fn scheduled(metrics: &Metrics) -> u64 {
    metrics.gang_attempts.with_label_values(&["scheduled"]).get()
}

/// Waits for a replica to have recorded `count` gangs bound (it records them once its
/// binding task reports back, a moment after the API server shows the pods bound).
async fn wait_for_scheduled(metrics: &Metrics, count: u64, who: &str) {
    within(10, &format!("{who} to record {count} gang(s) bound"), async {
        while scheduled(metrics) < count {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Each pod was bound once: one Scheduled event each, and no pod of the test was evicted.
async fn bound_once(cluster: &TestCluster) {
    for pod in pods(cluster).await {
        let name = pod.metadata.name.clone().unwrap_or_default();
        wait_for_events(cluster, &name, "Scheduled").await;
        let events = events_for(cluster, &name, "Scheduled").await;
        assert_eq!(events.len(), 1, "pod {name} has {} Scheduled events: {events:?}", events.len());
        for reason in ["BindFailed", "PodsReadyTimeout", "GangBroken"] {
            assert!(events_for(cluster, &name, reason).await.is_empty(), "pod {name} was evicted ({reason})");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_binds_and_the_standby_takes_over_within_the_lease_duration() {
    let cluster = TestCluster::new("leader").await;
    scheduler::install_crds(&cluster).await;
    cluster.create_gpu_nodes(4, "r1").await;
    let config = scheduler::leader_config(&cluster);
    let lease = config.leader_election.lease_name.clone();
    let lease_duration = Duration::from_secs(config.leader_election.lease_duration_seconds);
    let retry = Duration::from_secs(config.leader_election.retry_period_seconds);

    let (metrics_a, metrics_b) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
    let options = |identity: &str, metrics: &Arc<Metrics>| Options {
        metrics: metrics.clone(),
        identity: Some(identity.into()),
        ..Default::default()
    };
    let a = scheduler::start_with(&cluster, config.clone(), options("replica-a", &metrics_a));
    wait_for_holder(&cluster, &lease, "replica-a", 20).await;
    let _b = scheduler::start_with(&cluster, config.clone(), options("replica-b", &metrics_b));

    create_gang(&cluster, "first", 2, 8).await;
    let before = wait_for_pods(&cluster, 30, "gang first bound", |all| all_bound(all, "first", 2)).await;
    wait_for_scheduled(&metrics_a, 1, "replica-a").await;
    assert_eq!(scheduled(&metrics_a), 1, "the leader bound the gang once");
    assert_eq!(scheduled(&metrics_b), 0, "the standby bound nothing");
    assert_eq!((metrics_a.leader.get(), metrics_b.leader.get()), (1, 0));
    // The leader's metrics saw the gang wait, bind and take its GPUs; the standby's saw nothing.
    assert_eq!(metrics_a.gang_waiting.with_label_values(&["bound"]).get_sample_count(), 1);
    assert_eq!(metrics_a.bind_duration.get_sample_count(), 1);
    assert_eq!(metrics_b.cycle_duration.get_sample_count(), 0, "the standby ran no scheduling cycle");
    within(10, "the leader's GPU gauges to show the gang's 16 GPUs", async {
        let allocated = || {
            let text = metrics_a.render();
            text.lines()
                .filter(|l| l.starts_with("muster_node_gpus_allocated{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
                .sum::<i64>()
        };
        while allocated() != 16 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(metrics_a.render().contains("muster_topology_domain_gpus{domain=\"r1\",level=\"rack\"} 32"));
    assert_eq!(holder(&cluster, &lease).await.as_deref(), Some("replica-a"));

    // The leader dies without giving the lease back, as a crashed process would.
    drop(a);
    let killed = Instant::now();
    wait_for_holder(&cluster, &lease, "replica-b", 30).await;
    let takeover = killed.elapsed();
    assert!(
        takeover <= lease_duration + retry + Duration::from_millis(500),
        "replica-b took over after {takeover:?}, more than the lease duration ({lease_duration:?}) and one retry period"
    );

    create_gang(&cluster, "second", 2, 8).await;
    let after =
        wait_for_pods(&cluster, 30, "gang second bound by the new leader", |all| all_bound(all, "second", 2)).await;
    wait_for_scheduled(&metrics_b, 1, "replica-b").await;
    assert_eq!(scheduled(&metrics_b), 1, "the new leader bound the second gang once");
    assert_eq!(metrics_b.leader.get(), 1);

    // No gang bound twice: the first gang's pods are the same pods on the same nodes, and
    // every pod was bound exactly once.
    let placement = |all: &[Pod]| -> BTreeMap<String, (String, String)> {
        in_group(all, "first")
            .iter()
            .map(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                (name, (p.metadata.uid.clone().unwrap_or_default(), node_of(p).unwrap_or_default().to_string()))
            })
            .collect()
    };
    assert_eq!(placement(&before), placement(&after), "the first gang was moved or recreated");
    bound_once(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_loses_its_lease_stops_binding_until_it_holds_it_again() {
    let cluster = TestCluster::new("lose-lease").await;
    scheduler::install_crds(&cluster).await;
    cluster.create_gpu_nodes(2, "r1").await;
    let config = scheduler::leader_config(&cluster);
    let lease = config.leader_election.lease_name.clone();
    let metrics = Arc::new(Metrics::new());
    let _a = scheduler::start_with(
        &cluster,
        config.clone(),
        Options { metrics: metrics.clone(), identity: Some("replica-a".into()), ..Default::default() },
    );
    wait_for_holder(&cluster, &lease, "replica-a", 20).await;

    // Another holder takes the lease (as after a network partition healed) and keeps it.
    let leases: Api<Lease> = cluster.api();
    let steal = || async {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        leases
            .patch(
                &lease,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"holderIdentity": "intruder", "renewTime": now}})),
            )
            .await
            .expect("take the lease");
    };
    steal().await;
    within(10, "replica-a to stop leading", async {
        while metrics.leader.get() != 0 {
            steal().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    create_gang(&cluster, "waits", 2, 8).await;
    // While the intruder renews, replica-a must bind nothing.
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        steal().await;
        let all = pods(&cluster).await;
        assert!(all.iter().all(|p| node_of(p).is_none()), "a replica without the lease bound a pod");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(scheduled(&metrics), 0);

    // The intruder stops renewing: replica-a takes the lease back and binds the gang.
    wait_for_holder(&cluster, &lease, "replica-a", 10).await;
    wait_for_pods(&cluster, 30, "gang waits bound once replica-a leads again", |all| all_bound(all, "waits", 2)).await;
    assert_eq!(metrics.leader.get(), 1);
    bound_once(&cluster).await;
}
