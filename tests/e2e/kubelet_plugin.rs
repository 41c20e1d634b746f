//! The node agent's kubelet plugin, driven as the kubelet drives it: over its Unix sockets,
//! with claims read from a real API server and CDI specs written to a folder of the test.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Patch, PatchParams};
use muster::agent::gpu::{Gpu, MigDevice};
use muster::agent::inventory::fake_gpu;
use muster::agent::kubelet::proto::dra::dra_plugin_client::DraPluginClient;
use muster::agent::kubelet::proto::dra::{
    Claim, Device, NodePrepareResourcesRequest, NodePrepareResourcesResponse, NodeUnprepareResourcesRequest,
};
use muster::agent::kubelet::proto::registration::registration_client::RegistrationClient;
use muster::agent::kubelet::proto::registration::{InfoRequest, RegistrationStatus};
use muster::agent::kubelet::{PluginConfig, serve};
use serde_json::{Value, json};
use tokio::net::UnixStream;
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::support::TestCluster;
use crate::support::cluster::within;

const DRIVER: &str = "gpu.muster.dev";

/// Connects a gRPC channel to a Unix socket, whatever the URI says.
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl Service<Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<UnixStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { UnixStream::connect(path).await.map(TokioIo::new) })
    }
}

/// A channel to `socket`, once something listens there (polled, up to 10 s).
pub(crate) async fn channel(socket: &Path) -> Channel {
    within(10, &format!("a listener on {}", socket.display()), async {
        loop {
            if UnixStream::connect(socket).await.is_ok() {
                return Endpoint::from_static("http://kubelet-plugin.invalid")
                    .connect_with_connector(UnixConnector(socket.to_path_buf()))
                    .await
                    .unwrap_or_else(|e| panic!("failed to connect to {}: {e}", socket.display()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

fn gpu(minor: u32) -> Gpu {
    Gpu {
        minor,
        uuid: format!("GPU-{minor}{minor}{minor}{minor}1111-2222-3333-4444-555555555555"),
        pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + minor),
        pcie_root: "pci0000:10".into(),
        ..fake_gpu("node-a", minor, "NVIDIA H100 80GB HBM3")
    }
}

/// GPU 2 is in MIG mode with one 3g.40gb device.
fn inventory() -> Vec<Gpu> {
    let mig = MigDevice {
        uuid: "MIG-2a2a2a2a-1111-2222-3333-444444444444".into(),
        profile: "3g.40gb".into(),
        gpu_instance: 1,
        compute_instance: 0,
        memory_bytes: 40 << 30,
        multiprocessors: 60,
    };
    vec![gpu(0), gpu(1), Gpu { mig: vec![mig], ..gpu(2) }, gpu(3)]
}

/// Creates a claim with one request `gpu` and, unless `devices` is `None`, writes its
/// allocation as a scheduler would: `(pool, device)` results of the `gpu` request for our
/// driver. Returns its UID.
async fn create_claim(cluster: &TestCluster, name: &str, devices: Option<&[(&str, &str)]>) -> String {
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "finalizers": ["resource.kubernetes.io/delete-protection"]},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": devices.map_or(1, |d| d.len())}},
        ]}},
    }))
    .expect("a claim");
    let api = cluster.api::<ResourceClaim>();
    let created = cluster.create(&api, &claim).await;
    if let Some(devices) = devices {
        let results: Vec<Value> = devices
            .iter()
            .map(|(pool, device)| json!({"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}))
            .collect();
        let patch = json!({"status": {"allocation": {"devices": {"results": results}}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("failed to write the allocation of claim {name}: {e}"));
    }
    created.metadata.uid.expect("a UID")
}

fn claim(cluster: &TestCluster, name: &str, uid: &str) -> Claim {
    Claim { namespace: cluster.namespace.clone(), uid: uid.into(), name: name.into() }
}

/// The devices of one claim's answer, failing with its error if it has one.
fn devices(response: &NodePrepareResourcesResponse, uid: &str) -> Vec<Device> {
    let answer = response.claims.get(uid).unwrap_or_else(|| panic!("no answer for claim {uid}"));
    assert_eq!(answer.error, "", "claim {uid} failed");
    answer.devices.clone()
}

fn error(response: &NodePrepareResourcesResponse, uid: &str) -> String {
    let answer = response.claims.get(uid).unwrap_or_else(|| panic!("no answer for claim {uid}"));
    assert!(answer.devices.is_empty(), "a failed claim lists devices: {:?}", answer.devices);
    answer.error.clone()
}

fn read_spec(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn device_nodes(edits: &Value) -> Vec<String> {
    edits["deviceNodes"].as_array().into_iter().flatten().map(|n| n["path"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_registers_the_plugin_and_prepares_and_unprepares_claims() {
    let cluster = TestCluster::new("kubelet-plugin").await;
    let node = cluster.name("node");
    // Short, so the sockets' paths stay well under the 108 bytes a Unix socket path may have.
    let root = std::env::temp_dir().join(format!("muster-kp-{}-{}", std::process::id(), cluster.id));
    let config = PluginConfig {
        driver_name: DRIVER.into(),
        node_name: node.clone(),
        plugin_dir: root.join("plugins").join(DRIVER),
        registry_dir: root.join("plugins_registry"),
        cdi_dir: root.join("cdi"),
        mps_pipe_directory: None,
    };
    let registration_socket = config.registry_dir.join(format!("{DRIVER}-reg.sock"));
    let dra_socket = config.plugin_dir.join("dra.sock");
    // A socket left by an earlier run of the agent is replaced.
    std::fs::create_dir_all(&config.plugin_dir).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&dra_socket).expect("a stale socket"));

    let pair = create_claim(&cluster, "pair", Some(&[(&node, "gpu-0"), (&node, "gpu-1")])).await;
    let mig = create_claim(&cluster, "mig", Some(&[(&node, "gpu-2-mig-1-0")])).await;
    let elsewhere = create_claim(&cluster, "elsewhere", Some(&[("other-node", "gpu-0")])).await;
    let pending = create_claim(&cluster, "pending", None).await;

    let (_inventory, gpus) = tokio::sync::watch::channel(inventory());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let plugin = tokio::spawn(serve(config.clone(), cluster.client.clone(), gpus, async {
        let _ = stopped.await;
    }));

    // Registration: what the kubelet's plugin watcher asks first.
    let mut registration = RegistrationClient::new(channel(&registration_socket).await);
    let info = registration.get_info(InfoRequest {}).await.expect("GetInfo").into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.endpoint, dra_socket.to_str().unwrap());
    assert_eq!(info.supported_versions, ["v1.DRAPlugin"]);
    registration
        .notify_registration_status(RegistrationStatus { plugin_registered: true, error: String::new() })
        .await
        .expect("NotifyRegistrationStatus");

    // Prepare: the pair, the MIG device, and four claims that each fail alone.
    let mut dra = DraPluginClient::new(channel(Path::new(&info.endpoint)).await);
    let wrong_uid = "0b5c9f3e-0000-4000-8000-000000000000";
    let missing_uid = "0b5c9f3e-1111-4111-8111-111111111111";
    let request = NodePrepareResourcesRequest {
        claims: vec![
            claim(&cluster, "pair", &pair),
            claim(&cluster, "mig", &mig),
            claim(&cluster, "elsewhere", &elsewhere),
            claim(&cluster, "pending", &pending),
            claim(&cluster, "pair", wrong_uid),
            claim(&cluster, "absent", missing_uid),
        ],
    };
    let first = dra.node_prepare_resources(request.clone()).await.expect("NodePrepareResources").into_inner();
    assert_eq!(first.claims.len(), 6, "every claim gets an answer: {first:?}");

    let cdi_id = |uid: &str, device: &str| format!("{DRIVER}/gpu={uid}-{device}");
    let pair_devices = devices(&first, &pair);
    let expected: Vec<Device> = ["gpu-0", "gpu-1"]
        .iter()
        .map(|device| Device {
            request_names: vec!["gpu".into()],
            pool_name: node.clone(),
            device_name: device.to_string(),
            cdi_device_ids: vec![cdi_id(&pair, device)],
        })
        .collect();
    assert_eq!(pair_devices, expected);

    let pair_file = config.cdi_dir.join(format!("{DRIVER}-{pair}.json"));
    let spec = read_spec(&pair_file);
    assert_eq!(spec["kind"], "gpu.muster.dev/gpu");
    let names: Vec<&str> = spec["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, [format!("{pair}-gpu-0"), format!("{pair}-gpu-1")]);
    let mut nodes: Vec<String> =
        spec["devices"].as_array().unwrap().iter().flat_map(|d| device_nodes(&d["containerEdits"])).collect();
    nodes.extend(device_nodes(&spec["containerEdits"]));
    for path in ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] {
        assert!(nodes.iter().any(|n| n == path), "{path} missing from {nodes:?}");
    }
    assert!(!nodes.iter().any(|n| n == "/dev/nvidia2"), "a GPU the claim does not hold: {nodes:?}");
    let inventory = inventory();
    assert_eq!(
        spec["containerEdits"]["env"],
        json!([format!("NVIDIA_VISIBLE_DEVICES={},{}", inventory[0].uuid, inventory[1].uuid)])
    );

    assert_eq!(devices(&first, &mig)[0].cdi_device_ids, [cdi_id(&mig, "gpu-2-mig-1-0")]);
    let mig_spec = read_spec(&config.cdi_dir.join(format!("{DRIVER}-{mig}.json")));
    assert_eq!(device_nodes(&mig_spec["devices"][0]["containerEdits"]), ["/dev/nvidia2"]);
    assert_eq!(
        mig_spec["containerEdits"]["env"],
        json!([format!("NVIDIA_VISIBLE_DEVICES={}", inventory[2].mig[0].uuid)])
    );

    let ns = &cluster.namespace;
    assert_eq!(
        error(&first, &elsewhere),
        format!(
            "resource claim {ns}/elsewhere (UID {elsewhere}): device gpu-0 is in pool other-node, not on this node ({node})"
        )
    );
    assert_eq!(error(&first, &pending), format!("resource claim {ns}/pending (UID {pending}): it is not allocated"));
    let mismatch = error(&first, wrong_uid);
    assert!(
        mismatch.starts_with(&format!("resource claim {ns}/pair (UID {wrong_uid}): its UID is {pair}")),
        "{mismatch}"
    );
    assert_eq!(error(&first, missing_uid), format!("resource claim {ns}/absent (UID {missing_uid}): not found"));
    for failed in [&elsewhere, &pending] {
        let path = config.cdi_dir.join(format!("{DRIVER}-{failed}.json"));
        assert!(!path.exists(), "a failed claim left {}", path.display());
    }

    // Preparing again (the kubelet retries after its own restart) gives the same answer and
    // the same spec.
    let second = dra.node_prepare_resources(request).await.expect("NodePrepareResources again").into_inner();
    assert_eq!(second, first);
    assert_eq!(read_spec(&pair_file), spec);

    // Unprepare removes the spec; unpreparing again, or a claim never prepared, is fine.
    let unprepare = NodeUnprepareResourcesRequest {
        claims: vec![claim(&cluster, "pair", &pair), claim(&cluster, "pending", &pending)],
    };
    for round in ["first", "second"] {
        let response =
            dra.node_unprepare_resources(unprepare.clone()).await.expect("NodeUnprepareResources").into_inner();
        assert_eq!(response.claims.len(), 2, "{round} unprepare: {response:?}");
        for (uid, answer) in &response.claims {
            assert_eq!(answer.error, "", "{round} unprepare of {uid}");
        }
        assert!(!pair_file.exists(), "{} still there after the {round} unprepare", pair_file.display());
    }
    assert!(config.cdi_dir.join(format!("{DRIVER}-{mig}.json")).exists(), "unprepare removed another claim's spec");

    // Shutdown removes both sockets, so the kubelet deregisters the plugin.
    drop((registration, dra));
    stop.send(()).expect("the plugin is running");
    within(10, "the plugin to stop", plugin).await.expect("the plugin task").expect("the plugin served without error");
    assert!(!registration_socket.exists(), "the registration socket outlived the plugin");
    assert!(!dra_socket.exists(), "the DRA socket outlived the plugin");
    let _ = std::fs::remove_dir_all(&root);
}
