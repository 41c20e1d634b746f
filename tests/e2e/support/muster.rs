//! Runs Muster's scheduler in the test process, against the test control plane, limited to
//! one test's nodes and scheduler name.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use muster::config::{Backoff, Config};
use muster::k8s::scheduler::{self, Options};
use muster::k8s::write::bind::BindHook;

use super::cluster::{TEST_LABEL, TestCluster, within};

/// Installs Muster's CRDs (once per control plane; later calls find them).
pub async fn install_crds(cluster: &TestCluster) {
    let crds: Api<CustomResourceDefinition> = cluster.cluster_api();
    for crd in muster::api::pod_group::definitions() {
        let name = crd.metadata.name.clone().unwrap();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("failed to install CRD {name}: {e}"),
        }
        within(30, "the CRD to be established", await_condition(crds.clone(), &name, conditions::is_crd_established()))
            .await
            .expect("watch");
    }
}

/// Installs the project's minimal definitions of KAI Scheduler's and Kueue's queue kinds
/// (`tests/e2e/crds/foreign-queues.yaml`), once per control plane.
pub async fn install_foreign_queue_crds(cluster: &TestCluster) {
    install_yaml_crds(cluster, include_str!("../crds/foreign-queues.yaml")).await;
}

/// Installs the project's minimal definitions of Kueue's and KAI Scheduler's Topology kinds
/// (`tests/e2e/crds/topologies.yaml`), once per control plane.
pub async fn install_topology_crds(cluster: &TestCluster) {
    install_yaml_crds(cluster, include_str!("../crds/topologies.yaml")).await;
}

/// Installs the project's minimal definitions of PyTorchJob and LeaderWorkerSet
/// (`tests/e2e/crds/workloads.yaml`), once per control plane.
pub async fn install_workload_crds(cluster: &TestCluster) {
    install_yaml_crds(cluster, include_str!("../crds/workloads.yaml")).await;
}

async fn install_yaml_crds(cluster: &TestCluster, yaml: &str) {
    let crds: Api<CustomResourceDefinition> = cluster.cluster_api();
    for doc in yaml_serde::Deserializer::from_str(yaml) {
        let crd: CustomResourceDefinition = serde::Deserialize::deserialize(doc).expect("a CRD");
        let name = crd.metadata.name.clone().unwrap();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("failed to install CRD {name}: {e}"),
        }
        within(30, "the CRD to be established", await_condition(crds.clone(), &name, conditions::is_crd_established()))
            .await
            .expect("watch");
    }
}

/// The configuration a test's scheduler runs with: its own scheduler name, only its own
/// nodes, and quick retries.
pub fn config(cluster: &TestCluster) -> Config {
    Config {
        scheduler_name: cluster.scheduler_name.clone(),
        node_selector: [(TEST_LABEL.to_string(), cluster.id.clone())].into_iter().collect(),
        backoff: Backoff { initial_seconds: 1, max_seconds: 2 },
        ..Config::default()
    }
}

/// A scheduler running until dropped.
pub struct RunningScheduler {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningScheduler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn start(cluster: &TestCluster, config: Config, hook: Option<Arc<dyn BindHook>>) -> RunningScheduler {
    start_with(cluster, config, Options { hook, ..Default::default() })
}

/// Starts a scheduler with `options` (its own metrics, identity, ...), running until dropped.
pub fn start_with(cluster: &TestCluster, config: Config, options: Options) -> RunningScheduler {
    start_client(cluster.client.clone(), config, options)
}

/// Starts a scheduler that reaches the API server through `client` (a proxy, another
/// identity), running until dropped.
pub fn start_client(client: kube::Client, config: Config, options: Options) -> RunningScheduler {
    // The scheduler's logs go to the test's output (shown when it fails); RUST_LOG tunes them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "muster=debug".into());
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(filter).try_init();
    let task = tokio::spawn(async move {
        if let Err(e) = scheduler::run(client, config, options).await {
            panic!("the scheduler stopped: {e}");
        }
    });
    RunningScheduler { task }
}

/// [`config`] with leader election on a Lease of the test's namespace, with short timings:
/// a 5 s lease, renewed every second, given up after 2 s without renewal, and requests
/// that end within 2 s (shorter than the lease less the renew deadline, as the
/// configuration requires).
pub fn leader_config(cluster: &TestCluster) -> Config {
    let mut config = config(cluster);
    config.leader_election = muster::config::LeaderElection {
        enabled: true,
        lease_name: format!("muster-{}", cluster.id),
        lease_namespace: cluster.namespace.clone(),
        lease_duration_seconds: 5,
        renew_deadline_seconds: 2,
        retry_period_seconds: 1,
    };
    config.request_timeout_seconds = 2;
    config
}
