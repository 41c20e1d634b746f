//! The install manifests against the real API server: `kubectl apply -k manifests/` passes
//! the server's validation and admission, every example applies once the CRDs are in, and
//! the scheduler, running with exactly its service account's permissions, schedules and
//! binds a gang with DRA claims.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::ListParams;
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::k8s::scheduler::Options;
use muster::metrics::Metrics;
use serde_json::{Value, json};

use crate::support::cluster::TEST_LABEL;
use crate::support::wait::{node_of, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler};

/// The user the scheduler's pods run as.
const SCHEDULER_ACCOUNT: &str = "system:serviceaccount:muster-system:muster-scheduler";

fn manifests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests")
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a test object that parses")
}

fn kubectl(cluster: &TestCluster, args: &[&str]) -> String {
    cluster.control_plane.kubectl(args).unwrap_or_else(|e| panic!("kubectl {} failed:\n{e}", args.join(" ")))
}

/// Held by the tests that apply the manifests: they install into one namespace and under
/// cluster-wide names, so two at once could race, one `kubectl apply` finding an object
/// missing and then failing to create it (AlreadyExists) because the other just did.
pub(crate) static MANIFESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Read by the tests that rely on the manifests' objects (the service accounts, their roles,
/// the agent's admission policy) for as long as they use them, taken before [`MANIFESTS`];
/// written by the chart's test (`helm.rs`), whose `helm uninstall` deletes those objects.
pub(crate) static INSTALLED: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The namespace the manifests install into, created for real (a server-side dry run of
/// namespaced objects needs their namespace to exist, as it would after the first apply).
fn ensure_namespace(cluster: &TestCluster) {
    kubectl(cluster, &["apply", "-f", &manifests().join("namespace.yaml").to_string_lossy()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_manifests_passes_a_server_side_dry_run() {
    let cluster = TestCluster::new("install").await;
    let _turn = MANIFESTS.lock().await;
    ensure_namespace(&cluster);
    let out = kubectl(&cluster, &["apply", "-k", &manifests().to_string_lossy(), "--dry-run=server"]);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/podgroups.muster.dev",
        "deviceclass.resource.k8s.io/gpu.muster.dev",
        "serviceaccount/muster-scheduler",
        "clusterrole.rbac.authorization.k8s.io/muster-scheduler",
        "clusterrolebinding.rbac.authorization.k8s.io/muster-scheduler",
        "role.rbac.authorization.k8s.io/muster-scheduler-leader-election",
        "deployment.apps/muster-scheduler",
        "daemonset.apps/muster-agent",
        "clusterrole.rbac.authorization.k8s.io/muster-agent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/muster-agent-own-node",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/muster-agent-own-node",
        "configmap/muster-scheduler-config",
    ] {
        assert!(out.contains(object), "the dry run did not show {object}:\n{out}");
    }
    // The image is named once, in the kustomization, and reaches both workloads.
    let rendered = kubectl(&cluster, &["kustomize", &manifests().to_string_lossy()]);
    let images: Vec<&str> = rendered.lines().filter_map(|l| l.trim().strip_prefix("image: ")).collect();
    assert_eq!(images.len(), 2, "the Deployment and the DaemonSet name an image:\n{images:?}");
    assert!(images.iter().all(|i| *i == "muster:0.1.0"), "{images:?}");
    // The configuration shipped in the ConfigMap is one the scheduler accepts, with leader
    // election on, as two replicas need.
    let config = std::fs::read_to_string(manifests().join("scheduler/config.yaml")).expect("scheduler/config.yaml");
    let config =
        muster::config::Config::parse(&config, "manifests/scheduler/config.yaml").expect("a valid configuration");
    assert!(config.leader_election.enabled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_applies_once_the_crds_are_installed() {
    let cluster = TestCluster::new("examples").await;
    scheduler::install_crds(&cluster).await;
    // The examples go to the default namespace; no controller creates its service account.
    let account: k8s_openapi::api::core::v1::ServiceAccount =
        typed(json!({"metadata": {"name": "default", "namespace": "default"}}));
    match kube::Api::namespaced(cluster.client.clone(), "default").create(&Default::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("failed to create the default service account: {e}"),
    }
    let dir = manifests().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("manifests/examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "expected the big-gpu, rack-gang and Job examples, found {files:?}");
    for file in files {
        let out = kubectl(&cluster, &["apply", "-f", &file.to_string_lossy(), "--dry-run=server"]);
        assert!(out.contains("(server dry run)"), "{}: {out}", file.display());
    }
}

/// A client that acts as the scheduler's service account: every request is authorized as
/// that account alone (impersonation by the tests' admin identity).
pub(crate) async fn scheduler_client(cluster: &TestCluster) -> kube::Client {
    let groups = ["system:serviceaccounts", "system:serviceaccounts:muster-system", "system:authenticated"];
    client_as(cluster, SCHEDULER_ACCOUNT, &groups).await
}

async fn client_as(cluster: &TestCluster, user: &str, groups: &[&str]) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&cluster.control_plane.kubeconfig).expect("failed to read the kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("load the kubeconfig");
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    kube::Client::try_from(config).expect("build the impersonating client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_from_before_topology_objects_were_read_still_schedules() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let cluster = TestCluster::new("old-role").await;
    scheduler::install_crds(&cluster).await;
    scheduler::install_topology_crds(&cluster).await;
    // The manifests' ClusterRole without its rule for Topology objects, bound to a user of
    // this test's own.
    let text = std::fs::read_to_string(manifests().join("scheduler").join("clusterrole.yaml")).expect("the role");
    let mut role: ClusterRole = yaml_serde::from_str(&text).expect("a ClusterRole");
    role.metadata.name = Some(cluster.name("old-role"));
    let rules = role.rules.as_mut().expect("rules");
    let before = rules.len();
    rules.retain(|r| !r.resources.iter().flatten().any(|x| x == "topologies"));
    assert_eq!(rules.len(), before - 1, "the manifests grant Topology objects in one rule");
    cluster.create(&cluster.cluster_api::<ClusterRole>(), &role).await;
    let user = format!("{}-scheduler", cluster.id);
    let binding: ClusterRoleBinding = typed(json!({
        "metadata": {"name": cluster.name("old-role")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster.name("old-role")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }));
    cluster.create(&cluster.cluster_api::<ClusterRoleBinding>(), &binding).await;
    let client = client_as(&cluster, &user, &["system:authenticated"]).await;

    // Topologies are served but this user may not list them: they are left off, with a
    // warning, and the scheduler still fills its caches and binds.
    cluster.create_node(&builders::node(&cluster.name("n0"), 64, 512, 8, &[(TEST_LABEL, &cluster.id)])).await;
    let pods = cluster.api::<Pod>();
    cluster.create(&pods, &builders::pod("solo", &cluster.scheduler_name, 1, &[])).await;
    let _kubelet = KubeletEmulator::start(pods.clone());
    let config = scheduler::config(&cluster);
    let task = tokio::spawn(async move { muster::k8s::scheduler::run(client, config, Options::default()).await });
    wait_for_pods(&cluster, 60, "the pod bound by a scheduler that may not read topologies", |all| {
        all.len() == 1 && node_of(&all[0]).is_some()
    })
    .await;
    assert!(!task.is_finished(), "the scheduler stopped: {:?}", task.await);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_with_only_its_service_accounts_rbac_binds_a_gang_with_dra_claims() {
    let cluster = TestCluster::new("rbac").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    // The scheduler's account and roles, as installed, kept while the scheduler runs.
    let _installed = INSTALLED.read().await;
    let turn = MANIFESTS.lock().await;
    ensure_namespace(&cluster);
    for file in ["serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "lease-role.yaml"] {
        kubectl(&cluster, &["apply", "-f", &manifests().join("scheduler").join(file).to_string_lossy()]);
    }
    drop(turn);
    let client = scheduler_client(&cluster).await;
    let denied =
        kube::Api::<k8s_openapi::api::core::v1::Secret>::all(client.clone()).list(&ListParams::default()).await;
    assert!(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        "the scheduler's account must not read Secrets: {denied:?}"
    );

    // Two DRA nodes of four GPUs each, and a gang of two pods claiming four GPUs each.
    let driver = format!("{}.gpu.example.com", cluster.id);
    let class = cluster.name("gpu");
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &builders::device_class(&class, &driver)).await;
    for i in 0..2 {
        let node = cluster.name(&format!("n{i}"));
        cluster.create_node(&builders::node(&node, 64, 512, 0, &[(TEST_LABEL, &cluster.id)])).await;
        cluster.create(&cluster.cluster_api::<ResourceSlice>(), &builders::gpu_slice(&node, &driver, 4, 80)).await;
    }
    let template: ResourceClaimTemplate = typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "four-gpus"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class, "count": 4}}]}}},
    }));
    cluster.create(&cluster.api::<ResourceClaimTemplate>(), &template).await;
    let group = PodGroup::new("train", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let pods = cluster.api::<Pod>();
    for i in 0..2 {
        let mut pod =
            builders::pod(&format!("train-{i}"), &cluster.scheduler_name, 0, &[("muster.dev/pod-group", "train")]);
        let spec = pod.spec.as_mut().expect("spec");
        spec.resource_claims = Some(vec![typed(json!({"name": "gpu", "resourceClaimTemplateName": "four-gpus"}))]);
        spec.containers[0].resources.get_or_insert_default().claims = Some(vec![typed(json!({"name": "gpu"}))]);
        cluster.create(&pods, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(pods.clone());

    // Leader election on, on the manifests' Lease, as the Deployment runs it.
    let mut config = scheduler::config(&cluster);
    config.leader_election = muster::config::LeaderElection {
        enabled: true,
        lease_duration_seconds: 4,
        renew_deadline_seconds: 2,
        retry_period_seconds: 1,
        ..Default::default()
    };
    // Shorter than the lease's slack (4 s - 2 s), as the configuration requires: a longer one
    // would never pass the write fence.
    config.request_timeout_seconds = 1;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "muster=debug".into());
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(filter).try_init();
    let metrics = Arc::new(Metrics::new());
    let task = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            muster::k8s::scheduler::run(client, config, Options { metrics, ..Default::default() }).await
        })
    };
    let bound = wait_for_pods(&cluster, 60, "the gang bound by the scheduler's own account", |all| {
        all.len() == 2 && all.iter().all(|p| node_of(p).is_some())
    })
    .await;
    assert!(!task.is_finished(), "the scheduler stopped: {:?}", task.await);
    let claims = cluster.api::<ResourceClaim>().list(&ListParams::default()).await.expect("claims").items;
    for pod in &bound {
        let uid = pod.metadata.uid.as_deref();
        let claim = claims
            .iter()
            .find(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.reserved_for.as_ref())
                    .is_some_and(|r| r.iter().any(|r| Some(r.uid.as_str()) == uid))
            })
            .unwrap_or_else(|| panic!("no claim reserved for pod {:?}", pod.metadata.name));
        let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
        let results = results.and_then(|d| d.results.as_ref()).cloned().unwrap_or_default();
        assert_eq!(results.len(), 4, "four devices allocated to {:?}", claim.metadata.name);
        assert!(results.iter().all(|r| Some(r.pool.as_str()) == node_of(pod)), "devices on the pod's node");
    }
    // Status writes went through too (PodGroup status is its own subresource).
    crate::support::wait::wait_for_group_running(&cluster, "train").await;
    assert_eq!(metrics.leader.get(), 1, "it held the manifests' Lease");
    task.abort();
}
