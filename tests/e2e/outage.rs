//! The API server goes down for 20 seconds while the scheduler is binding 50 gangs, and comes
//! back: afterwards every gang is whole or has nothing bound, and scheduling resumes until
//! all 50 run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::scheduler::Options;
use muster::k8s::write::bind::{BindHook, HookAction};
use muster::metrics::Metrics;

use crate::support::gangs::{create_group, job};
use crate::support::proxy::Proxy;
use crate::support::wait::{node_of, pods, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

const GANGS: usize = 50;

/// Spreads the binds over a few seconds (gang `g-N` waits N × 60 ms), so that the outage
/// falls in the middle of them.
struct Staggered;

impl BindHook for Staggered {
    fn before_bind(&self, gang: &GangKey, _: usize, _: &PodKey) -> HookAction {
        let n: u64 = gang.name.trim_start_matches("g-").parse().unwrap_or(0);
        HookAction::Pause(Duration::from_millis(60 * n))
    }
}

/// Bound pods per gang (Job), counting only pods that are not being deleted.
fn bound_per_gang(all: &[Pod]) -> BTreeMap<String, usize> {
    let mut bound = BTreeMap::new();
    for pod in all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let Some(gang) = pod.metadata.labels.as_ref().and_then(|l| l.get("muster.dev/pod-group")) else { continue };
        *bound.entry(gang.clone()).or_insert(0) += usize::from(node_of(pod).is_some());
    }
    bound
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_down_for_20_seconds_mid_binding_leaves_every_gang_whole_or_unbound_and_all_run_after() {
    let cluster = TestCluster::new("outage").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    cluster.create_gpu_nodes(13, "r1").await;
    for i in 0..GANGS {
        let name = format!("g-{i:02}");
        create_group(&cluster, &name, 2).await;
        cluster.create(&cluster.api::<Job>(), &job(&cluster, &name, 2, 1)).await;
    }
    wait_for_pods(&cluster, 60, "the Jobs' 100 pods created", |p| p.len() >= 2 * GANGS).await;
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());

    // The scheduler reaches the API server through a proxy the test can take down.
    let proxy = Proxy::start(cluster.control_plane.server.trim_start_matches("https://").to_string()).await;
    let through_proxy = cluster.control_plane.client_via(&format!("https://127.0.0.1:{}", proxy.port)).await;
    let metrics = Arc::new(Metrics::new());
    let options = Options { hook: Some(Arc::new(Staggered)), metrics: metrics.clone(), ..Default::default() };
    let _muster = scheduler::start_client(through_proxy, scheduler::config(&cluster), options);

    let before = wait_for_pods(&cluster, 60, "binding under way", |p| {
        let bound = p.iter().filter(|p| node_of(p).is_some()).count();
        (10..2 * GANGS).contains(&bound)
    })
    .await;
    proxy.go_down();
    let down = Instant::now();
    let bound_before = before.iter().filter(|p| node_of(p).is_some()).count();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let bound_while_down = pods(&cluster).await.iter().filter(|p| node_of(p).is_some()).count();
    proxy.come_back();

    // Back: every gang ends whole, none sits on part of its GPUs.
    let all = wait_for_pods(&cluster, 180, "all 50 gangs whole", |p| {
        let bound = bound_per_gang(p);
        bound.len() == GANGS && bound.values().all(|n| *n == 2)
    })
    .await;
    let recovered = down.elapsed();
    assert_eq!(all.iter().filter(|p| node_of(p).is_some() && p.metadata.deletion_timestamp.is_none()).count(), 100);
    eprintln!(
        "outage: {bound_before} pods bound when the API server went down, {bound_while_down} bound while it was \
         down (binds that landed before the cut), all {GANGS} gangs whole {:.1}s after it went down \
         ({:.1}s after it came back); {} rollbacks, {} safety-net evictions",
        recovered.as_secs_f64(),
        recovered.as_secs_f64() - 20.0,
        metrics.bind_rollbacks.get(),
        metrics.evicted_for("BindFailed"),
    );
}
