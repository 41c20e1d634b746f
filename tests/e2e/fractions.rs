//! GPU fractions end to end: pods annotated as KAI Scheduler's users annotate them get a
//! ResourceClaim Muster creates, owned by and reserved for the pod, consuming a share of one
//! shared GPU's memory, which the real API server accepts.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use serde_json::json;

use crate::dra::{create_node, create_slice, driver};
use crate::support::wait::{node_of, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler};

/// A GPU of 80 GiB published as the node agent publishes one with `--sharing`.
fn shared_gpu(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "allowMultipleAllocations": true,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"}},
        "capacity": {"memory": {"value": "80Gi",
            "requestPolicy": {"default": "80Gi", "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"}}}},
    })
}

/// The class fractions are served from when none serves nvidia.com/gpu is the agent's,
/// `gpu.muster.dev`: one name for the whole control plane, so the tests that need it take
/// turns, each with the class selecting its own devices.
static GPU_CLASS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for this test's turn with the class `gpu.muster.dev`, then creates it selecting the
/// devices of `driver` (replacing one a failed test left). Hold the guard until the test
/// ends, and delete the class with [`delete_gpu_class`].
pub(crate) async fn gpu_class(cluster: &TestCluster, driver: &str) -> tokio::sync::MutexGuard<'static, ()> {
    let turn = GPU_CLASS.lock().await;
    let classes = cluster.cluster_api::<DeviceClass>();
    classes.delete("gpu.muster.dev", &Default::default()).await.ok();
    let class = builders::device_class("gpu.muster.dev", driver);
    crate::support::cluster::within(30, "the class gpu.muster.dev to be created", async {
        while classes.create(&Default::default(), &class).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await;
    turn
}

pub(crate) async fn delete_gpu_class(cluster: &TestCluster) {
    cluster.cluster_api::<DeviceClass>().delete("gpu.muster.dev", &Default::default()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_half_gpu_notebooks_share_one_gpu_through_claims_muster_creates() {
    let cluster = TestCluster::new("fractions").await;
    let node = create_node(&cluster, "n1").await;
    create_slice(&cluster, &node, vec![shared_gpu("gpu-0"), shared_gpu("gpu-1")]).await;
    let _turn = gpu_class(&cluster, &driver(&cluster)).await;
    let api = cluster.api::<Pod>();
    for name in ["notebook-1", "notebook-2"] {
        let mut pod = builders::pod(name, &cluster.scheduler_name, 0, &[]);
        pod.metadata.annotations = Some([("gpu-fraction".to_string(), "0.5".to_string())].into());
        cluster.create(&api, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let pods =
        wait_for_pods(&cluster, 60, "both notebooks bound", |p| p.len() == 2 && p.iter().all(|p| node_of(p).is_some()))
            .await;
    let claims = crate::dra::claims(&cluster).await;
    let mut devices = Vec::new();
    for pod in &pods {
        // The API server lets a pod's status name only claims for extended resources its
        // containers request: a fraction's claim is the pod's by ownership.
        assert!(pod.status.as_ref().unwrap().extended_resource_claim_status.is_none());
        let uid = pod.metadata.uid.as_deref().unwrap();
        let owned: Vec<&ResourceClaim> = claims
            .iter()
            .filter(|c| c.metadata.owner_references.iter().flatten().any(|o| o.kind == "Pod" && o.uid == uid))
            .collect();
        assert_eq!(owned.len(), 1, "one claim for {:?}", pod.metadata.name);
        let claim = owned[0];
        let reserved = claim.status.as_ref().unwrap().reserved_for.as_ref().unwrap();
        assert_eq!(reserved[0].uid, uid, "reserved for its pod");
        // The request asks for half of the GPU's memory, and the allocation consumes it.
        let request = &claim.spec.as_ref().unwrap().devices.as_ref().unwrap().requests.as_ref().unwrap()[0];
        let asked = request.exactly.as_ref().unwrap().capacity.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(asked["memory"].0, (40u64 << 30).to_string());
        let results = claim.status.as_ref().unwrap().allocation.as_ref().unwrap().devices.as_ref().unwrap();
        let result = &results.results.as_ref().unwrap()[0];
        assert_eq!(result.consumed_capacity.as_ref().unwrap()["memory"].0, (40u64 << 30).to_string());
        assert!(result.share_id.is_some(), "a share of the device is named");
        devices.push(result.device.clone());
    }
    assert_eq!(devices[0], devices[1], "the second half goes to the GPU the first half shares");
    delete_gpu_class(&cluster).await;
}
