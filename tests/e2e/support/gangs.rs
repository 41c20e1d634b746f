//! Gangs as the tests make them: Muster's PodGroups with bare pods or a Job's pods, the
//! pods of a group, and who holds a leader Lease.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use serde_json::json;

use super::builders;
use super::cluster::{TestCluster, within};

/// The label that makes a pod a member of Muster's PodGroup.
pub const GROUP_LABEL: &str = "muster.dev/pod-group";

pub async fn create_group(cluster: &TestCluster, name: &str, min_member: i32) {
    let group = PodGroup::new(name, PodGroupSpec { min_member, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
}

/// A PodGroup of `pods` bare pods `<name>-<i>` of `gpus` GPUs each, all needed at once.
pub async fn create_gang(cluster: &TestCluster, name: &str, pods: usize, gpus: u32) {
    create_group(cluster, name, pods as i32).await;
    for i in 0..pods {
        let pod = builders::pod(&format!("{name}-{i}"), &cluster.scheduler_name, gpus, &[(GROUP_LABEL, name)]);
        cluster.create(&cluster.api::<Pod>(), &pod).await;
    }
}

/// A Job of `pods` pods of `gpus` GPUs each, in the PodGroup of the same name: its
/// controller recreates pods that are evicted.
pub fn job(cluster: &TestCluster, name: &str, pods: i32, gpus: u32) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 10,
            "template": builders::pod("ignored", &cluster.scheduler_name, gpus, &[(GROUP_LABEL, name)]),
        },
    }))
    .expect("job")
}

pub fn in_group<'a>(all: &'a [Pod], group: &str) -> Vec<&'a Pod> {
    all.iter()
        .filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL)).is_some_and(|g| g == group))
        .collect()
}

/// Who holds the Lease `lease` of the test's namespace.
pub async fn holder(cluster: &TestCluster, lease: &str) -> Option<String> {
    let leases: Api<Lease> = cluster.api();
    leases.get_opt(lease).await.expect("read the lease").and_then(|l| l.spec?.holder_identity)
}

pub async fn wait_for_holder(cluster: &TestCluster, lease: &str, who: &str, seconds: u64) {
    within(seconds, &format!("{who} to hold lease {lease}"), async {
        while holder(cluster, lease).await.as_deref() != Some(who) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}
