//! GPU fractions reaching the node: with the admission policy of
//! `manifests/scheduler/gpu-fraction-policy.yaml` installed, notebooks annotated
//! `gpu-fraction: "0.5"` name a claim in their spec (from a template that does not exist);
//! Muster makes each claim, consuming half of one of the agent's shared GPUs, and records it
//! in the pod's status, beside the real resourceclaim controller, which makes no other; and
//! the agent's kubelet plugin, asked as the kubelet asks for the claims a pod names, writes
//! their CDI specs: the same GPU for both, each an MPS client capped at its half.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{ListParams, PostParams};
use muster::agent::kubelet::proto::dra::dra_plugin_client::DraPluginClient;
use muster::agent::kubelet::proto::dra::{Claim, NodePrepareResourcesRequest};
use muster::agent::kubelet::proto::registration::InfoRequest;
use muster::agent::kubelet::proto::registration::registration_client::RegistrationClient;
use serde_json::Value;

use crate::agent::start_agent_with_plugin;
use crate::dra::create_node;
use crate::fractions::{delete_gpu_class, gpu_class};
use crate::kubelet_plugin::channel;
use crate::support::cluster::within;
use crate::support::wait::{node_of, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler};

/// The agent's driver name, as it publishes by default.
const DRIVER: &str = "gpu.muster.dev";
/// The MPS control daemon's pipe directory the agent is told of.
const PIPES: &str = "/run/nvidia-mps";

/// The policy and its binding as shipped, renamed for this test and matching its scheduler
/// name; created once the API server applies them (a dry-run pod shows the mutation).
/// Returns the policy's name.
async fn install_policy(cluster: &TestCluster) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests/scheduler/gpu-fraction-policy.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    assert!(text.contains("object.spec.schedulerName == 'muster'"), "the policy names the scheduler 'muster'");
    let name = cluster.name("gpu-fraction-claim");
    let text = text
        .replace(
            "object.spec.schedulerName == 'muster'",
            &format!("object.spec.schedulerName == '{}'", cluster.scheduler_name),
        )
        .replace("muster-gpu-fraction-claim", &name);
    let mut documents = yaml_serde::Deserializer::from_str(&text);
    let policy: MutatingAdmissionPolicy =
        serde::Deserialize::deserialize(documents.next().expect("the policy")).expect("a MutatingAdmissionPolicy");
    let binding: MutatingAdmissionPolicyBinding =
        serde::Deserialize::deserialize(documents.next().expect("its binding")).expect("a binding");
    cluster.create(&cluster.cluster_api::<MutatingAdmissionPolicy>(), &policy).await;
    cluster.create(&cluster.cluster_api::<MutatingAdmissionPolicyBinding>(), &binding).await;
    let pods = cluster.api::<Pod>();
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    within(30, "the policy to name a fraction's claim", async {
        loop {
            let created = pods.create(&dry_run, &notebook(cluster)).await.expect("a dry-run pod");
            if created.spec.and_then(|s| s.resource_claims).is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    name
}

async fn uninstall_policy(cluster: &TestCluster, name: &str) {
    cluster.cluster_api::<MutatingAdmissionPolicyBinding>().delete(name, &Default::default()).await.ok();
    cluster.cluster_api::<MutatingAdmissionPolicy>().delete(name, &Default::default()).await.ok();
}

/// A notebook asking for half a GPU, named by the API server as a controller's pods are.
fn notebook(cluster: &TestCluster) -> Pod {
    let mut pod = builders::pod("notebook", &cluster.scheduler_name, 0, &[]);
    pod.metadata.name = None;
    pod.metadata.generate_name = Some("notebook-".into());
    pod.metadata.annotations = Some([("gpu-fraction".to_string(), "0.5".to_string())].into());
    pod
}

/// Checks that `pod` names its fraction's claim, from the template that never exists, and
/// that its container uses it.
fn names_its_claim(pod: &Pod) {
    let spec = pod.spec.as_ref().unwrap();
    let entries = spec.resource_claims.as_ref().unwrap_or_else(|| panic!("{:?} names no claim", pod.metadata.name));
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].name, "gpu-fraction");
    assert_eq!(entries[0].resource_claim_template_name.as_deref(), Some("muster-gpu-fraction"));
    let used = spec.containers[0].resources.as_ref().and_then(|r| r.claims.as_ref()).expect("the container's claims");
    assert_eq!(used.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["gpu-fraction"]);
}

/// The claim `pod`'s status records for its entry `gpu-fraction`, as the kubelet reads it.
fn recorded_claim(pod: &Pod) -> String {
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    let entry = statuses.into_iter().flatten().find(|s| s.name == "gpu-fraction");
    let name = entry.and_then(|e| e.resource_claim_name.clone());
    name.unwrap_or_else(|| panic!("{:?} records no claim for gpu-fraction: {statuses:?}", pod.metadata.name))
}

/// The node's published devices: name → (UUID, memory).
async fn published(cluster: &TestCluster, node: &str) -> Vec<(String, String, String)> {
    let slices = cluster.cluster_api::<ResourceSlice>();
    let selector = ListParams::default().fields(&format!("spec.nodeName={node}"));
    within(60, "the agent to publish its two shared GPUs", async {
        loop {
            let list = slices.list(&selector).await.expect("list slices");
            let devices: Vec<(String, String, String)> = list
                .items
                .iter()
                .flat_map(|s| s.spec.devices.iter().flatten())
                .filter(|d| d.allow_multiple_allocations == Some(true))
                .map(|d| {
                    let uuid = d.attributes.as_ref().and_then(|a| a.get("uuid")).and_then(|a| a.string.clone());
                    let memory = d.capacity.as_ref().map(|c| c["memory"].value.0.clone());
                    (d.name.clone(), uuid.unwrap_or_default(), memory.unwrap_or_default())
                })
                .collect();
            if devices.len() == 2 {
                return devices;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

fn read_spec(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("no CDI spec {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_gpu_notebooks_name_their_claims_and_the_kubelet_plugin_prepares_them_on_one_gpu() {
    let cluster = TestCluster::new("fractions-node").await;
    let _turn = gpu_class(&cluster, DRIVER).await;
    let node = create_node(&cluster, "n1").await;
    // Short, so the sockets' paths stay well under the 108 bytes a Unix socket path may have.
    let root = std::env::temp_dir().join(format!("muster-fn-{}-{}", std::process::id(), cluster.id));
    let folder = |name: &str| root.join(name).to_string_lossy().into_owned();
    let (plugins, registry, cdi) = (folder("plugin"), folder("registry"), folder("cdi"));
    let agent = start_agent_with_plugin(
        cluster.client.clone(),
        &[
            "--mode",
            "driver",
            "--node-name",
            &node,
            "--fake-gpus",
            "2",
            "--sharing",
            "--mps",
            "--mps-pipe-directory",
            PIPES,
            "--plugin-dir",
            &plugins,
            "--registry-dir",
            &registry,
            "--cdi-dir",
            &cdi,
        ],
    );
    let gpus = published(&cluster, &node).await;
    let policy = install_policy(&cluster).await;

    // Admission names each notebook's claim; the resourceclaim controller runs, and finds no
    // template to make it from.
    cluster.control_plane.start_controller_manager();
    let api = cluster.api::<Pod>();
    for _ in 0..2 {
        names_its_claim(&cluster.create(&api, &notebook(&cluster)).await);
    }

    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let pods =
        wait_for_pods(&cluster, 60, "both notebooks bound", |p| p.len() == 2 && p.iter().all(|p| node_of(p).is_some()))
            .await;

    // Muster made each claim as the controller makes one from a template, recorded it in the
    // pod's status before binding, and it is the only claim: the pod's, reserved for it,
    // asking for and consuming half of one GPU's memory.
    let claims = cluster.api::<ResourceClaim>();
    let all = claims.list(&ListParams::default()).await.expect("list claims").items;
    assert_eq!(all.len(), 2, "one claim per notebook: {:?}", all.iter().map(|c| &c.metadata.name).collect::<Vec<_>>());
    let mut prepare = Vec::new();
    let mut devices = Vec::new();
    for pod in &pods {
        names_its_claim(pod);
        let uid = pod.metadata.uid.clone().unwrap();
        let name = recorded_claim(pod);
        let claim = claims.get(&name).await.unwrap_or_else(|e| panic!("claim {name} of {:?}: {e}", pod.metadata.name));
        let owners = claim.metadata.owner_references.clone().unwrap_or_default();
        assert!(owners.iter().any(|o| o.kind == "Pod" && o.uid == uid), "claim {name} is its pod's: {owners:?}");
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.get("resource.kubernetes.io/pod-claim-name").map(String::as_str), Some("gpu-fraction"));
        let status = claim.status.as_ref().unwrap();
        assert_eq!(status.reserved_for.as_ref().unwrap()[0].uid, uid, "claim {name} is reserved for its pod");
        let request = &claim.spec.as_ref().unwrap().devices.as_ref().unwrap().requests.as_ref().unwrap()[0];
        let asked = request.exactly.as_ref().unwrap().capacity.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(asked["memory"].0, (40u64 << 30).to_string());
        let result = &status.allocation.as_ref().unwrap().devices.as_ref().unwrap().results.as_ref().unwrap()[0];
        assert_eq!(result.consumed_capacity.as_ref().unwrap()["memory"].0, (40u64 << 30).to_string());
        assert_eq!((result.driver.as_str(), result.pool.as_str()), (DRIVER, node.as_str()));
        devices.push(result.device.clone());
        prepare.push(Claim { namespace: cluster.namespace.clone(), uid: claim.metadata.uid.unwrap(), name });
    }
    assert_eq!(devices[0], devices[1], "the second half goes to the GPU the first half shares");
    let (_, uuid, memory) = gpus.iter().find(|(name, _, _)| *name == devices[0]).expect("a published GPU");
    assert_eq!(memory, "80Gi");

    // The kubelet finds the plugin in its registry folder and prepares the claims the pods
    // name, each with its CDI spec.
    let registration_socket = Path::new(&registry).join(format!("{DRIVER}-reg.sock"));
    let info = RegistrationClient::new(channel(&registration_socket).await)
        .get_info(InfoRequest {})
        .await
        .expect("GetInfo")
        .into_inner();
    let mut dra = DraPluginClient::new(channel(Path::new(&info.endpoint)).await);
    let answer = dra
        .node_prepare_resources(NodePrepareResourcesRequest { claims: prepare.clone() })
        .await
        .expect("NodePrepareResources")
        .into_inner();
    let minor = devices[0].trim_start_matches("gpu-");
    for claim in &prepare {
        let prepared = &answer.claims[&claim.uid];
        assert_eq!(prepared.error, "", "claim {}", claim.name);
        let ids: Vec<&str> =
            prepared.devices.iter().flat_map(|d| d.cdi_device_ids.iter().map(String::as_str)).collect();
        assert_eq!(ids, [format!("{DRIVER}/gpu={}-{}", claim.uid, devices[0])]);
        let spec = read_spec(&Path::new(&cdi).join(format!("{DRIVER}-{}.json", claim.uid)));
        assert_eq!(
            spec["devices"][0]["containerEdits"]["deviceNodes"],
            serde_json::json!([{"path": format!("/dev/nvidia{minor}")}])
        );
        let edits = &spec["containerEdits"];
        let env: Vec<&str> = edits["env"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
        for expected in [
            format!("NVIDIA_VISIBLE_DEVICES={uuid}"),
            format!("CUDA_MPS_PIPE_DIRECTORY={PIPES}"),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M".to_string(),
        ] {
            assert!(env.contains(&expected.as_str()), "{expected} missing from {env:?}");
        }
        assert_eq!(edits["mounts"][0]["hostPath"], PIPES);
        assert_eq!(edits["mounts"][0]["containerPath"], PIPES);
    }

    drop(dra);
    uninstall_policy(&cluster, &policy).await;
    delete_gpu_class(&cluster).await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}
