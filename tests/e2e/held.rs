//! Nothing held by a job that cannot run: devices a stopped leader allocated for a gang it
//! never bound are given back, a claim write whose answer is lost is not mistaken for
//! someone else's, and a PodDisruptionBudget that refuses every eviction of a half-bound
//! gang does not keep it on its GPUs. And a gang's claim writes go out together.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::DeleteParams;
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::engine::dra::model::ClaimKey;
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::scheduler::Options;
use muster::k8s::write::bind::{BindHook, HookAction};
use muster::metrics::Metrics;
use serde_json::json;

use crate::dra::{allocated, claims, create_class, create_node, create_slice, devices_of, gpu, typed};
use crate::support::cluster::within;
use crate::support::proxy::Proxy;
use crate::support::wait::{node_of, phase, pods, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler};

/// A pair gang whose two pods each name their own claim (`c-0`, `c-1`) of one GPU, on one
/// node with four; returns the node.
async fn pair_with_claims(cluster: &TestCluster) -> String {
    scheduler::install_crds(cluster).await;
    let node = create_node(cluster, "n1").await;
    create_slice(cluster, &node, (0..4).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    let class = create_class(cluster, None).await;
    for i in 0..2 {
        let claim: ResourceClaim = typed(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": format!("c-{i}")},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
        }));
        cluster.create(&cluster.api::<ResourceClaim>(), &claim).await;
    }
    let group = PodGroup::new("pair", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    for i in 0..2 {
        cluster.create(&cluster.api::<Pod>(), &pair_pod(cluster, i)).await;
    }
    node
}

fn pair_pod(cluster: &TestCluster, i: usize) -> Pod {
    let mut pod = builders::pod(&format!("pair-{i}"), &cluster.scheduler_name, 0, &[("muster.dev/pod-group", "pair")]);
    pod.spec.as_mut().unwrap().resource_claims =
        Some(vec![typed(json!({"name": "gpu", "resourceClaimName": format!("c-{i}")}))]);
    pod
}

/// Every bind hangs: the scheduler stops between its claim writes and its binds.
struct HangBinds;

impl BindHook for HangBinds {
    fn before_bind(&self, _: &GangKey, _: usize, _: &PodKey) -> HookAction {
        HookAction::Hang
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_between_its_claim_writes_and_its_binds_leaves_no_device_held() {
    let cluster = TestCluster::new("held").await;
    let node = pair_with_claims(&cluster).await;
    let api = cluster.api::<Pod>();
    let _kubelet = KubeletEmulator::start(api.clone());
    let first = scheduler::start(&cluster, scheduler::config(&cluster), Some(Arc::new(HangBinds)));
    within(60, "both claims allocated by the first scheduler", async {
        while claims(&cluster).await.iter().filter(|c| allocated(c)).count() < 2 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    // The scheduler dies with its binds in flight, and the gang cannot be completed where
    // its claims pin it: one of its pods is gone.
    drop(first);
    api.delete("pair-1", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.expect("delete");

    let metrics = Arc::new(Metrics::new());
    let options = Options { metrics: metrics.clone(), ..Default::default() };
    let _second = scheduler::start_with(&cluster, scheduler::config(&cluster), options);
    within(60, "the successor gives both claims' devices back", async {
        loop {
            let any_allocated = claims(&cluster).await.iter().any(allocated);
            let held = metrics.node_gpus_held.with_label_values(&[&node]).get();
            if !any_allocated && held == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(metrics.claims_given_back.get() >= 1, "pair-0's claim was given back, not released");
    assert!(pods(&cluster).await.iter().all(|p| node_of(p).is_none()), "nothing bound meanwhile");

    // The pod comes back: the gang is placed afresh and bound once, each claim on its own GPU.
    cluster.create(&api, &pair_pod(&cluster, 1)).await;
    let bound =
        wait_for_pods(&cluster, 60, "the pair bound", |p| p.iter().filter(|p| node_of(p).is_some()).count() == 2).await;
    let all = claims(&cluster).await;
    let mut devices: Vec<String> = bound.iter().flat_map(|p| devices_of(&all, p)).collect();
    devices.dedup();
    assert_eq!(devices.len(), 2, "{devices:?}");
    for claim in &all {
        let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).map_or(0, Vec::len);
        assert_eq!(reserved, 1, "each claim reserved once, for its pod");
    }
}

/// The first claim status write lands and its answer is lost.
struct LoseFirstClaimAnswer(AtomicBool);

impl BindHook for LoseFirstClaimAnswer {
    fn before_bind(&self, _: &GangKey, _: usize, _: &PodKey) -> HookAction {
        HookAction::Proceed
    }

    fn before_claim(&self, _: &GangKey, _: &ClaimKey) -> HookAction {
        if self.0.swap(false, Ordering::SeqCst) { HookAction::LoseAnswer } else { HookAction::Proceed }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_write_whose_answer_is_lost_is_taken_as_written_and_the_gang_binds_once() {
    let cluster = TestCluster::new("lost-answer").await;
    pair_with_claims(&cluster).await;
    let api = cluster.api::<Pod>();
    let _kubelet = KubeletEmulator::start(api.clone());
    let hook = Arc::new(LoseFirstClaimAnswer(AtomicBool::new(true)));
    let metrics = Arc::new(Metrics::new());
    let options = Options { hook: Some(hook.clone()), metrics: metrics.clone(), ..Default::default() };
    let _muster = scheduler::start_with(&cluster, scheduler::config(&cluster), options);

    let bound =
        wait_for_pods(&cluster, 60, "the pair bound", |p| p.iter().filter(|p| node_of(p).is_some()).count() == 2).await;
    assert!(!hook.0.load(Ordering::SeqCst), "an answer was lost");
    assert_eq!(metrics.bind_rollbacks.get(), 0, "our own allocation, read back, is ours: no rollback");
    let all = claims(&cluster).await;
    for pod in &bound {
        assert_eq!(devices_of(&all, pod).len(), 1, "{:?}", pod.metadata.name);
    }
    for claim in &all {
        let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).map_or(0, Vec::len);
        assert_eq!(reserved, 1, "each claim reserved once, for its pod");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_budget_refusing_every_eviction_of_a_half_bound_gang_ends_with_its_pod_deleted() {
    let cluster = TestCluster::new("pdb").await;
    scheduler::install_crds(&cluster).await;
    let nodes = cluster.create_gpu_nodes(1, "r1").await;
    let group = PodGroup::new("pair", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let api = cluster.api::<Pod>();
    let labels = [("muster.dev/pod-group", "pair")];
    cluster.create(&api, &builders::pod("pair-0", &cluster.scheduler_name, 1, &labels)).await;
    // Its partner asks for more GPUs than any node has: the gang can never be whole.
    cluster.create(&api, &builders::pod("pair-1", &cluster.scheduler_name, 64, &labels)).await;
    // A budget that allows no disruption of the gang's pods.
    let budget: PodDisruptionBudget = typed(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pair"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"muster.dev/pod-group": "pair"}}},
    }));
    cluster.create(&cluster.api::<PodDisruptionBudget>(), &budget).await;
    // One pod bound and running, by hand, as another scheduler or a lost rollback leaves it.
    let _kubelet = KubeletEmulator::start(api.clone());
    cluster.bind("pair-0", &nodes[0]).await;
    wait_for_pods(&cluster, 30, "pair-0 running", |p| p.iter().any(|p| phase(p) == "Running")).await;

    let mut config = scheduler::config(&cluster);
    config.eviction = muster::config::EvictionRetry { max_refusals: 2, retry_initial_seconds: 1, retry_max_seconds: 2 };
    let metrics = Arc::new(Metrics::new());
    let options = Options { metrics: metrics.clone(), ..Default::default() };
    let _muster = scheduler::start_with(&cluster, config, options);

    wait_for_pods(&cluster, 60, "no pod of the gang bound", |p| {
        p.iter().all(|p| node_of(p).is_none()) && p.iter().all(|p| p.metadata.name.as_deref() != Some("pair-0"))
    })
    .await;
    // The event is written after the delete, and the delete is counted once both are done.
    let notes = wait_for_events(&cluster, "pair-0", "EvictionRefused").await;
    within(5, "the forced delete counted", async {
        while metrics.evictions_forced.get() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(metrics.eviction_refusals.get() >= 2, "{} refusals", metrics.eviction_refusals.get());
    assert_eq!(metrics.evictions_forced.get(), 1);
    assert!(
        notes.iter().any(|n| n.contains("refused 2 time(s)") && n.contains("disruption budget") && n.contains("pair")),
        "{notes:?}"
    );
}

/// Freezes the scheduler's connection at the gang's first claim write, and counts the claim
/// writes begun.
struct FreezeAtFirstClaim {
    proxy: Arc<Proxy>,
    begun: AtomicUsize,
}

impl BindHook for FreezeAtFirstClaim {
    fn before_bind(&self, _: &GangKey, _: usize, _: &PodKey) -> HookAction {
        HookAction::Proceed
    }

    fn before_claim(&self, _: &GangKey, _: &ClaimKey) -> HookAction {
        if self.begun.fetch_add(1, Ordering::SeqCst) == 0 {
            self.proxy.freeze();
        }
        HookAction::Proceed
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gangs_claim_writes_go_out_together_not_one_after_another() {
    let cluster = TestCluster::new("claims-together").await;
    pair_with_claims(&cluster).await;
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());
    let proxy = Arc::new(Proxy::start(cluster.control_plane.server.trim_start_matches("https://").to_string()).await);
    let through_proxy = cluster.control_plane.client_via(&format!("https://127.0.0.1:{}", proxy.port)).await;
    let hook = Arc::new(FreezeAtFirstClaim { proxy: proxy.clone(), begun: AtomicUsize::new(0) });
    let options = Options { hook: Some(hook.clone()), ..Default::default() };
    let _muster = scheduler::start_client(through_proxy, scheduler::config(&cluster), options);

    within(60, "the first claim write", async {
        while hook.begun.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // No write can answer now; one after another, the second would wait for the first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(hook.begun.load(Ordering::SeqCst), 2, "both claims' writes began before either answered");
    proxy.thaw();
    wait_for_pods(&cluster, 60, "the pair bound", |p| p.iter().filter(|p| node_of(p).is_some()).count() == 2).await;
}
