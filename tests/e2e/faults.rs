//! Faults that must not wedge the scheduler: a bind request that never answers, an API
//! server that stops answering the leader, and a replica whose RBAC forbids a list.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::observe::health::SchedulerHealth;
use muster::k8s::scheduler::{Options, health_for};
use muster::k8s::write::bind::{BindHook, HookAction};
use muster::metrics::Metrics;
use serde_json::json;

use crate::support::cluster::within;
use crate::support::gangs::{create_gang, create_group, holder, in_group, job, wait_for_holder};
use crate::support::proxy::Proxy;
use crate::support::wait::{node_of, phase, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

fn bound_in(all: &[Pod], group: &str) -> usize {
    in_group(all, group).iter().filter(|p| node_of(p).is_some()).count()
}

fn running_in(all: &[Pod], group: &str) -> usize {
    in_group(all, group).iter().filter(|p| phase(p) == "Running").count()
}

/// Makes the first bind request of one gang hang forever; records the pods of that first
/// attempt, hung one first.
struct HangFirstBind {
    gang: String,
    hung: AtomicBool,
    first_attempt: std::sync::Mutex<Vec<String>>,
}

impl BindHook for HangFirstBind {
    fn before_bind(&self, gang: &GangKey, _index: usize, pod: &PodKey) -> HookAction {
        if gang.name != self.gang {
            return HookAction::Proceed;
        }
        let mut first = self.first_attempt.lock().unwrap();
        if first.len() < 2 {
            first.push(pod.name.clone());
        }
        if !self.hung.swap(true, Ordering::SeqCst) {
            return HookAction::Hang;
        }
        HookAction::Proceed
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_that_never_answers_rolls_back_at_its_deadline_while_other_gangs_bind() {
    let cluster = TestCluster::new("hang").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    cluster.create_gpu_nodes(2, "r1").await;
    let api = cluster.api::<Pod>();
    let _kubelet = KubeletEmulator::start(api.clone());
    let hook = Arc::new(HangFirstBind { gang: "slow".into(), hung: false.into(), first_attempt: Default::default() });
    let mut config = scheduler::config(&cluster);
    config.request_timeout_seconds = 4;
    let deadline = Duration::from_secs(4);
    let metrics = Arc::new(Metrics::new());
    let options = Options { hook: Some(hook.clone()), metrics: metrics.clone(), ..Default::default() };
    let _muster = scheduler::start_with(&cluster, config, options);

    create_group(&cluster, "slow", 2).await;
    cluster.create(&cluster.api::<Job>(), &job(&cluster, "slow", 2, 4)).await;
    within(30, "the slow gang's first bind to hang", async {
        while !hook.hung.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let hung_at = Instant::now();

    // Another gang binds while the request hangs: nothing else waits on it.
    create_gang(&cluster, "quick", 2, 4).await;
    wait_for_pods(&cluster, 30, "the quick gang bound", |all| bound_in(all, "quick") == 2).await;
    let quick_after = hung_at.elapsed();
    assert_eq!(
        metrics.bind_rollbacks.get(),
        0,
        "the quick gang bound {quick_after:?} into the hang, before its deadline"
    );

    // The hung gang is rolled back at the deadline, not later, and then binds whole.
    within(30, "the hung gang to be rolled back", async {
        while metrics.bind_rollbacks.get() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let rolled_back_after = hung_at.elapsed();
    assert!(
        rolled_back_after + Duration::from_millis(200) >= deadline
            && rolled_back_after < deadline + Duration::from_secs(3),
        "rolled back {rolled_back_after:?} after the hang began; the deadline is {deadline:?}"
    );
    eprintln!(
        "faults: another gang bound {quick_after:?} into the hang; the hung gang rolled back {rolled_back_after:?} after it began (deadline {deadline:?})"
    );
    wait_for_pods(&cluster, 90, "the slow gang running whole after its rollback", |all| running_in(all, "slow") == 2)
        .await;
    // The loop counts an attempt once its binding task has ended, after the API server
    // (and so the kubelet) saw the pods bound.
    within(10, "the second attempt counted as scheduled", async {
        while metrics.gang_attempts.with_label_values(&["scheduled"]).get() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The sibling bound in the broken attempt was evicted, and its event says why.
    let first = hook.first_attempt.lock().unwrap().clone();
    assert_eq!(first.len(), 2, "{first:?}");
    let events = wait_for_events(&cluster, &first[1], "BindFailed").await;
    assert!(events.iter().any(|e| e.contains("no answer from the API server within 4s")), "{events:?}");
}

async fn get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return String::new() };
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response
}

/// Serves `health` as `/healthz` and `/readyz` on a free port, as the process does.
async fn serve_probes(metrics: &Metrics, health: Arc<SchedulerHealth>) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let registry = metrics.registry.clone();
    let task = tokio::spawn(async move {
        let _ = muster::metrics::serve_listener(listener, registry, health, std::future::pending()).await;
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_fails_its_health_and_the_standby_takes_over() {
    let cluster = TestCluster::new("cutoff").await;
    scheduler::install_crds(&cluster).await;
    cluster.create_gpu_nodes(4, "r1").await;
    let mut config = scheduler::leader_config(&cluster);
    config.stall_timeout_seconds = 3;
    let lease = config.leader_election.lease_name.clone();
    let lease_duration = Duration::from_secs(config.leader_election.lease_duration_seconds);

    // Replica A reaches the API server through a proxy that the test can freeze.
    let proxy = Proxy::start(cluster.control_plane.server.trim_start_matches("https://").to_string()).await;
    let through_proxy = cluster.control_plane.client_via(&format!("https://127.0.0.1:{}", proxy.port)).await;
    let (metrics_a, metrics_b) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
    let health_a = health_for(&config);
    let (port_a, _probes) = serve_probes(&metrics_a, health_a.clone()).await;
    let options_a = Options {
        metrics: metrics_a.clone(),
        health: Some(health_a.clone()),
        identity: Some("replica-a".into()),
        ..Default::default()
    };
    let _a = scheduler::start_client(through_proxy, config.clone(), options_a);
    wait_for_holder(&cluster, &lease, "replica-a", 30).await;
    let options_b = Options { metrics: metrics_b.clone(), identity: Some("replica-b".into()), ..Default::default() };
    let _b = scheduler::start_with(&cluster, config.clone(), options_b);

    create_gang(&cluster, "before", 2, 8).await;
    wait_for_pods(&cluster, 30, "gang before bound", |all| bound_in(all, "before") == 2).await;
    for i in 0..2 {
        wait_for_events(&cluster, &format!("before-{i}"), "Scheduled").await;
    }
    within(10, "replica-a healthy", async {
        while !get(port_a, "/healthz").await.starts_with("HTTP/1.1 200") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // Every request of replica A hangs from now on.
    proxy.freeze();
    let frozen = Instant::now();
    within(15, "replica-a's /healthz to fail", async {
        while !get(port_a, "/healthz").await.starts_with("HTTP/1.1 503") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let unhealthy_after = frozen.elapsed();
    assert!(unhealthy_after < Duration::from_secs(config.stall_timeout_seconds + 3), "{unhealthy_after:?}");
    assert!(get(port_a, "/healthz").await.contains("has not answered"), "healthz says why");
    wait_for_holder(&cluster, &lease, "replica-b", lease_duration.as_secs() + 15).await;
    eprintln!(
        "faults: replica-a unhealthy {unhealthy_after:?} after it was cut off; replica-b leading {:?} after",
        frozen.elapsed()
    );
    assert_eq!(metrics_a.leader.get(), 0, "replica-a stopped leading when it could not renew");

    create_gang(&cluster, "after", 2, 8).await;
    wait_for_pods(&cluster, 30, "gang after bound by the new leader", |all| bound_in(all, "after") == 2).await;
    // The pods show bound as the binds return; the binding task's outcome, which counts
    // the gang, reaches the loop a moment later.
    within(10, "replica-b to count the gang it bound", async {
        while metrics_b.gang_attempts.with_label_values(&["scheduled"]).get() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(
        metrics_a.gang_attempts.with_label_values(&["scheduled"]).get(),
        1,
        "replica-a bound only the first gang"
    );
    assert_eq!(metrics_b.gang_attempts.with_label_values(&["scheduled"]).get(), 1, "replica-b bound only the second");
    for name in ["before-0", "before-1", "after-0", "after-1"] {
        let events = wait_for_events(&cluster, name, "Scheduled").await;
        assert_eq!(events.len(), 1, "pod {name} was bound once: {events:?}");
    }
    proxy.thaw();
}

/// The scheduler's ClusterRole as installed, less the right to read ResourceSlices.
fn role_without_slices(name: &str) -> ClusterRole {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/scheduler/clusterrole.yaml");
    let text = std::fs::read_to_string(&path).expect("read the ClusterRole");
    let mut role: ClusterRole = yaml_serde::from_str(&text).expect("parse the ClusterRole");
    role.metadata = kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() };
    for rule in role.rules.iter_mut().flatten() {
        if let Some(resources) = rule.resources.as_mut() {
            resources.retain(|r| r != "resourceslices");
        }
    }
    role
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_may_not_list_resourceslices_never_takes_the_lease() {
    let cluster = TestCluster::new("no-slices").await;
    scheduler::install_crds(&cluster).await;
    let user = format!("muster-no-slices-{}", cluster.id);
    let roles: Api<ClusterRole> = cluster.cluster_api();
    let role = role_without_slices(&user);
    cluster.create(&roles, &role).await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    cluster.cluster_api::<ClusterRoleBinding>().create(&PostParams::default(), &binding).await.expect("binding");
    // Leases in the test's namespace, where the test's lease lives.
    let lease_role: Role = serde_json::from_value(json!({
        "metadata": {"name": "leases"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}],
    }))
    .unwrap();
    cluster.create(&cluster.api::<Role>(), &lease_role).await;
    let lease_binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "leases"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    cluster.create(&cluster.api::<RoleBinding>(), &lease_binding).await;

    let config = scheduler::leader_config(&cluster);
    let lease = config.leader_election.lease_name.clone();
    let healthy = scheduler::start_with(
        &cluster,
        config.clone(),
        Options { identity: Some("healthy".into()), ..Default::default() },
    );
    wait_for_holder(&cluster, &lease, "healthy", 30).await;

    let denied_health = health_for(&config);
    let denied_client = cluster.control_plane.client_as(&user).await;
    let _denied = scheduler::start_client(
        denied_client,
        config.clone(),
        Options { identity: Some("denied".into()), health: Some(denied_health.clone()), ..Default::default() },
    );
    within(30, "the denied replica to say why it is not ready", async {
        while !denied_health.check_ready().is_err_and(|why| why.contains("resourceslices") && why.contains("forbidden"))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // The healthy replica goes away without giving the lease back; the denied one must not
    // take it, then or later.
    drop(healthy);
    let watch_until = Instant::now() + Duration::from_secs(config.leader_election.lease_duration_seconds + 4);
    while Instant::now() < watch_until {
        assert_ne!(
            holder(&cluster, &lease).await.as_deref(),
            Some("denied"),
            "a replica with empty caches took the lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let why = denied_health.check_ready().unwrap_err();
    assert!(why.starts_with("caches not filled: the first list of resourceslices failed"), "{why}");
}
