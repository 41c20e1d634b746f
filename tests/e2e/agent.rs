//! The node agent end to end, against the real API server: agents in driver mode publish
//! their node's GPUs and the scheduler allocates from them; an unhealthy GPU is tainted and
//! avoided while the node's other GPUs keep serving; in companion mode a failing GPU of
//! NVIDIA's driver gets a DeviceTaintRule.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::ListParams;
use muster::agent::metrics::AgentMetrics;
use muster::agent::options::AgentOptions;
use serde_json::{Value, json};

use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::wait::{node_of, unschedulable_message, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a test object that parses")
}

/// An agent running in the test process until dropped; dropping it stops it as SIGTERM
/// would (it withdraws its slices in driver mode).
/// An agent running in the test process until stopped (or dropped).
pub(crate) struct RunningAgent {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningAgent {
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        within(30, "the agent to stop", &mut self.task).await.expect("the agent task");
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `muster agent`'s flags, parsed as the binary parses them.
#[derive(Parser)]
struct AgentCommand {
    #[command(flatten)]
    options: AgentOptions,
}

fn start_agent(cluster: &TestCluster, args: &[&str]) -> RunningAgent {
    start_agent_as(cluster.client.clone(), args)
}

/// `muster agent ARGS`' options, polling every second and serving no metrics.
fn agent_options(args: &[&str]) -> AgentOptions {
    let mut argv = vec!["agent", "--poll-interval-seconds", "1", "--metrics-address", ""];
    argv.extend_from_slice(args);
    AgentCommand::parse_from(argv).options
}

/// A driver-mode agent with `args` and its kubelet plugin, both fed the GPUs the agent
/// reads, as `muster agent` serves them on a node (`--plugin-dir`, `--registry-dir` and
/// `--cdi-dir` should name folders of the test).
pub(crate) fn start_agent_with_plugin(client: kube::Client, args: &[&str]) -> RunningAgent {
    let options = agent_options(args);
    let node = options.node_name.clone().expect("--node-name");
    let plugin = muster::agent::kubelet::PluginConfig::new(&options, &node);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let metrics = AgentMetrics::new();
        let (gpus, read) = tokio::sync::watch::channel(Vec::new());
        let (ready, _) = tokio::sync::watch::channel(false);
        let (stop_plugin, plugin_stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
            let _ = stop_plugin.send(());
        };
        let serving = muster::agent::kubelet::serve(plugin, client.clone(), read, async {
            let _ = plugin_stopped.await;
        });
        let running = muster::agent::run::run(client, options, &metrics, gpus, ready, shutdown);
        let (ran, served) = tokio::join!(running, serving);
        if let Err(e) = ran {
            panic!("the agent stopped: {e}");
        }
        if let Err(e) = served {
            panic!("the kubelet plugin stopped: {e}");
        }
    });
    RunningAgent { stop: Some(stop), task }
}

/// An agent with `args` that reaches the API server with `client`'s credentials.
pub(crate) fn start_agent_as(client: kube::Client, args: &[&str]) -> RunningAgent {
    let options = agent_options(args);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let metrics = AgentMetrics::new();
        let (gpus, _) = tokio::sync::watch::channel(Vec::new());
        let (ready, _) = tokio::sync::watch::channel(false);
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = muster::agent::run::run(client, options, &metrics, gpus, ready, shutdown).await {
            panic!("the agent stopped: {e}");
        }
    });
    RunningAgent { stop: Some(stop), task }
}

/// Writes an inventory of `count` H100s (81559 MiB, as NVML reports them) for `node`;
/// `failing` GPUs report XID 79.
fn write_inventory(path: &Path, node: &str, count: u32, failing: &[u32]) {
    let mut text = String::from("gpus:\n");
    for minor in 0..count {
        text.push_str(&format!(
            "- minor: {minor}\n  uuid: GPU-{node}-{minor}\n  productName: NVIDIA H100 80GB HBM3\n  architecture: Hopper\n  \
             cudaComputeCapability: \"9.0\"\n  driverVersion: 580.95.05\n  memoryBytes: 85520809984\n"
        ));
        if failing.contains(&minor) {
            text.push_str("  health: {state: xid, code: 79}\n");
        }
    }
    // Written whole, then renamed, so the agent never reads half a file.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).unwrap();
    std::fs::rename(&partial, path).unwrap();
}

fn temp_dir(cluster: &TestCluster) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("muster-e2e-agent-{}-{}", std::process::id(), cluster.id));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn create_node(cluster: &TestCluster, name: &str) -> String {
    let full = cluster.name(name);
    cluster.create_node(&builders::node(&full, 64, 512, 0, &[(TEST_LABEL, &cluster.id)])).await;
    full
}

/// A DeviceClass for `driver` and a template claiming one of its devices.
async fn create_class_and_template(cluster: &TestCluster, driver: &str) {
    let class = builders::device_class(&cluster.name("gpu"), driver);
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &class).await;
    let template: ResourceClaimTemplate = typed(json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cluster.name("gpu")}}]}}},
    }));
    cluster.create(&cluster.api::<ResourceClaimTemplate>(), &template).await;
}

async fn create_claiming_pods(cluster: &TestCluster, names: &[&str]) {
    let api = cluster.api::<Pod>();
    for name in names {
        let mut pod = builders::pod(name, &cluster.scheduler_name, 0, &[]);
        let spec = pod.spec.as_mut().unwrap();
        spec.resource_claims = Some(vec![typed(json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}))]);
        spec.containers[0].resources.get_or_insert_default().claims = Some(vec![typed(json!({"name": "gpu"}))]);
        cluster.create(&api, &pod).await;
    }
}

/// Every allocated device of the test's claims, as `pool/device`.
async fn allocated_devices(cluster: &TestCluster) -> Vec<String> {
    let claims = cluster.api::<ResourceClaim>().list(&ListParams::default()).await.expect("list claims").items;
    let mut devices: Vec<String> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref()?.results.clone())
        .flatten()
        .map(|r| format!("{}/{}", r.pool, r.device))
        .collect();
    devices.sort();
    devices
}

async fn slices_of(cluster: &TestCluster, driver: &str) -> Vec<ResourceSlice> {
    let api = cluster.cluster_api::<ResourceSlice>();
    api.list(&ListParams::default().fields(&format!("spec.driver={driver}"))).await.expect("list slices").items
}

/// Polls until `check` holds over `driver`'s slices.
async fn wait_for_slices(
    cluster: &TestCluster,
    driver: &str,
    what: &str,
    check: impl Fn(&[ResourceSlice]) -> bool,
) -> Vec<ResourceSlice> {
    within(30, what, async {
        loop {
            let slices = slices_of(cluster, driver).await;
            if check(&slices) {
                return slices;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

fn tainted_devices(slices: &[ResourceSlice]) -> Vec<String> {
    let mut found = Vec::new();
    for slice in slices {
        for device in slice.spec.devices.iter().flatten() {
            if device.taints.as_ref().is_some_and(|t| !t.is_empty()) {
                found.push(format!("{}/{}", slice.spec.pool.name, device.name));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_mode_publishes_gpus_that_the_scheduler_allocates_and_an_unhealthy_one_is_avoided() {
    let cluster = TestCluster::new("agent-driver").await;
    cluster.control_plane.start_controller_manager();
    let driver = format!("{}.gpu.example.com", cluster.id);
    let dir = temp_dir(&cluster);
    let n1 = create_node(&cluster, "n1").await;
    let n2 = create_node(&cluster, "n2").await;
    let (inv1, inv2) = (dir.join("n1.yaml"), dir.join("n2.yaml"));
    write_inventory(&inv1, &n1, 2, &[]);
    write_inventory(&inv2, &n2, 2, &[]);
    let inv1_arg = inv1.display().to_string();
    let inv2_arg = inv2.display().to_string();
    let agent1 = start_agent(
        &cluster,
        &["--mode", "driver", "--driver-name", &driver, "--node-name", &n1, "--inventory", &inv1_arg],
    );
    let agent2 = start_agent(
        &cluster,
        &["--mode", "driver", "--driver-name", &driver, "--node-name", &n2, "--inventory", &inv2_arg],
    );

    // Each agent publishes its node's pool, owned by the Node, and labels the Node.
    let slices = wait_for_slices(&cluster, &driver, "both nodes' slices", |s| s.len() == 2).await;
    for slice in &slices {
        let node = slice.spec.node_name.clone().unwrap();
        assert_eq!(slice.spec.pool.name, node);
        let names: Vec<&str> = slice.spec.devices.iter().flatten().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-0", "gpu-1"]);
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", node.as_str()));
    }
    let nodes = cluster.cluster_api::<Node>();
    within(30, "the GPU labels on n1", async {
        loop {
            let labels = nodes.get(&n1).await.unwrap().metadata.labels.unwrap_or_default();
            if labels.get("nvidia.com/gpu.count").map(String::as_str) == Some("2") {
                assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
                assert_eq!(labels["nvidia.com/gpu.memory"], "81559");
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    // n1's second GPU fails: its device is tainted, at the pool's next generation.
    write_inventory(&inv1, &n1, 2, &[1]);
    let slices = wait_for_slices(&cluster, &driver, "n1/gpu-1 tainted", |s| !tainted_devices(s).is_empty()).await;
    assert_eq!(tainted_devices(&slices), [format!("{n1}/gpu-1")]);
    let n1_slice = slices.iter().find(|s| s.spec.pool.name == n1).unwrap();
    assert_eq!(n1_slice.spec.pool.generation, 2);
    let taint = &n1_slice.spec.devices.as_ref().unwrap()[1].taints.as_ref().unwrap()[0];
    assert_eq!((taint.key.clone(), taint.effect.as_str()), (format!("{driver}/xid"), "NoSchedule"));

    // Four pods, one GPU each: three land on the three healthy GPUs (n1's healthy one
    // included), the fourth waits rather than take the failing GPU.
    create_class_and_template(&cluster, &driver).await;
    create_claiming_pods(&cluster, &["p0", "p1", "p2", "p3"]).await;
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let pods = wait_for_pods(&cluster, 60, "three pods bound and one waiting", |p| {
        p.iter().filter(|p| node_of(p).is_some()).count() == 3
            && p.iter().any(|p| node_of(p).is_none() && unschedulable_message(p).is_some())
    })
    .await;
    let devices = allocated_devices(&cluster).await;
    assert_eq!(devices, [format!("{n1}/gpu-0"), format!("{n2}/gpu-0"), format!("{n2}/gpu-1")]);
    let waiting = pods.iter().find(|p| node_of(p).is_none()).unwrap();
    let message = unschedulable_message(waiting).unwrap();
    assert!(message.contains("1 more with an untolerated taint"), "the reason names the taint: {message}");

    // The GPU recovers: the taint goes and the waiting pod gets it.
    write_inventory(&inv1, &n1, 2, &[]);
    wait_for_pods(&cluster, 60, "all four pods bound", |p| p.iter().all(|p| node_of(p).is_some())).await;
    assert!(allocated_devices(&cluster).await.contains(&format!("{n1}/gpu-1")));

    // A stopped (uninstalled) agent withdraws its node's slices; the other's stay.
    agent2.stop().await;
    let slices = wait_for_slices(&cluster, &driver, "n2's slices removed", |s| s.len() == 1).await;
    assert_eq!(slices[0].spec.node_name.as_deref(), Some(n1.as_str()));
    drop(agent1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn companion_mode_taints_a_failing_gpu_of_nvidias_driver_with_a_device_taint_rule() {
    let cluster = TestCluster::new("agent-companion").await;
    cluster.control_plane.start_controller_manager();
    let nvidia = format!("{}.nvidia.example.com", cluster.id);
    let ours = format!("{}.gpu.example.com", cluster.id);
    let dir = temp_dir(&cluster);
    let node = create_node(&cluster, "n1").await;
    // NVIDIA's driver publishes the GPUs under its own device names; only the UUIDs tie
    // them to what NVML reports.
    let slice: ResourceSlice = typed(json!({
        "metadata": {"name": format!("{node}-nvidia")},
        "spec": {"driver": nvidia, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [
                     {"name": "gpu-a", "attributes": {"uuid": {"string": format!("GPU-{node}-0")}, "type": {"string": "gpu"}}},
                     {"name": "gpu-b", "attributes": {"uuid": {"string": format!("GPU-{node}-1")}, "type": {"string": "gpu"}}},
                 ]},
    }));
    cluster.create(&cluster.cluster_api::<ResourceSlice>(), &slice).await;
    let inventory = dir.join("n1.yaml");
    write_inventory(&inventory, &node, 2, &[]);
    let inventory_arg = inventory.display().to_string();
    // --mode auto finds NVIDIA's slices for the node and becomes a companion.
    let _agent = start_agent(
        &cluster,
        &["--driver-name", &ours, "--nvidia-driver-name", &nvidia, "--node-name", &node, "--inventory", &inventory_arg],
    );
    let rules = cluster.cluster_api::<DeviceTaintRule>();
    let node_rules = || {
        let rules = rules.clone();
        let node = node.clone();
        async move {
            rules
                .list(&ListParams::default().labels(&format!("muster.dev/agent-node={node}")))
                .await
                .expect("list rules")
                .items
        }
    };

    // GPU 1 fails: a rule aimed at NVIDIA's device gpu-b; the agent publishes nothing itself.
    write_inventory(&inventory, &node, 2, &[1]);
    let found = within(30, "a DeviceTaintRule for gpu-b", async {
        loop {
            let found = node_rules().await;
            if !found.is_empty() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert_eq!(found.len(), 1);
    let selector = found[0].spec.device_selector.clone().unwrap();
    assert_eq!(
        (selector.driver.as_deref(), selector.pool.as_deref(), selector.device.as_deref()),
        (Some(nvidia.as_str()), Some(node.as_str()), Some("gpu-b"))
    );
    assert_eq!(
        (found[0].spec.taint.key.clone(), found[0].spec.taint.effect.as_str()),
        (format!("{ours}/xid"), "NoSchedule")
    );
    assert!(slices_of(&cluster, &ours).await.is_empty(), "a companion publishes no devices");

    // New claims avoid the tainted device.
    create_class_and_template(&cluster, &nvidia).await;
    create_claiming_pods(&cluster, &["p0", "p1"]).await;
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    wait_for_pods(&cluster, 60, "one pod bound and one waiting", |p| {
        p.iter().filter(|p| node_of(p).is_some()).count() == 1
            && p.iter().any(|p| node_of(p).is_none() && unschedulable_message(p).is_some())
    })
    .await;
    assert_eq!(allocated_devices(&cluster).await, [format!("{node}/gpu-a")]);

    // Recovery removes the rule, and the waiting pod gets the device.
    write_inventory(&inventory, &node, 2, &[]);
    wait_for_pods(&cluster, 60, "both pods bound", |p| p.iter().all(|p| node_of(p).is_some())).await;
    assert!(node_rules().await.is_empty(), "the rule is gone once the GPU recovers");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sharing_notebooks_each_get_a_slice_of_one_gpus_memory() {
    let cluster = TestCluster::new("agent-sharing").await;
    cluster.control_plane.start_controller_manager();
    let driver = format!("{}.gpu.example.com", cluster.id);
    let dir = temp_dir(&cluster);
    let node = create_node(&cluster, "n1").await;
    // One H100 with the memory NVML really reports (81559 MiB, not a round 80 GiB).
    let inventory = dir.join("n1.yaml");
    write_inventory(&inventory, &node, 1, &[]);
    let inventory_arg = inventory.display().to_string();
    let args = [
        "--mode",
        "driver",
        "--driver-name",
        &driver,
        "--node-name",
        &node,
        "--inventory",
        &inventory_arg,
        "--sharing",
    ];
    let _agent = start_agent(&cluster, &args);
    let slices = wait_for_slices(&cluster, &driver, "the shared GPU published", |s| s.len() == 1).await;
    let gpu = &slices[0].spec.devices.as_ref().unwrap()[0];
    assert_eq!(gpu.allow_multiple_allocations, Some(true), "the API server kept the device shareable");
    let policy =
        gpu.capacity.as_ref().unwrap()["memory"].request_policy.clone().expect("the API server kept the policy");
    assert_eq!(policy.default.unwrap().0, "79Gi");

    let class = builders::device_class(&cluster.name("gpu"), &driver);
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &class).await;
    // 15 GiB each: five fit in 81559 MiB, a sixth does not.
    let template: ResourceClaimTemplate = typed(json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": cluster.name("gpu"),
            "capacity": {"requests": {"memory": "15Gi"}},
        }}]}}},
    }));
    cluster.create(&cluster.api::<ResourceClaimTemplate>(), &template).await;
    create_claiming_pods(&cluster, &["nb-0", "nb-1", "nb-2", "nb-3", "nb-4", "nb-5"]).await;
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    wait_for_pods(&cluster, 60, "five notebooks bound and the sixth waiting", |p| {
        p.iter().filter(|p| node_of(p).is_some()).count() == 5
            && p.iter().any(|p| node_of(p).is_none() && unschedulable_message(p).is_some())
    })
    .await;
    assert_eq!(allocated_devices(&cluster).await, vec![format!("{node}/gpu-0"); 5], "five shares of one GPU");
    let claims = cluster.api::<ResourceClaim>().list(&ListParams::default()).await.unwrap().items;
    let mut share_ids = std::collections::BTreeSet::new();
    for claim in claims.iter().filter(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some())) {
        let allocation = claim.status.as_ref().unwrap().allocation.as_ref().unwrap();
        let result = &allocation.devices.as_ref().unwrap().results.as_ref().unwrap()[0];
        let consumed = result.consumed_capacity.as_ref().expect("a share records what it consumed");
        let consumed = muster::quantity::Quantity::parse(&consumed["memory"].0).unwrap();
        assert_eq!(consumed, muster::quantity::Quantity::parse("15Gi").unwrap());
        share_ids.insert(result.share_id.clone().expect("each share has an ID"));
    }
    assert_eq!(share_ids.len(), 5, "each share has its own ID");
    let _ = std::fs::remove_dir_all(dir);
}
