//! Muster beside the real kube-scheduler on the same API server: the same pods, created
//! before either scheduler starts, then the time until all are bound, pods bound per second,
//! gangs split or stranded, and each scheduler's peak memory; and the API server's ceiling,
//! bindings per second from a tight client loop. Run through `hack/bench-e2e.sh`.
//!
//! Environment: `MUSTER_BIN` (the muster binary to run, release build), `BENCH_SCALE`
//! (1.0 = the issue's sizes: 500 nodes, 5,000 pods, 500 gangs of 8, 1,000 DRA pods),
//! `BENCH_QPS`/`BENCH_BURST` (kube-scheduler's client limits for the equal-QPS row).

#[path = "../tests/e2e/support/mod.rs"]
#[allow(dead_code, unused_imports)] // The benchmark uses the control plane and the builders, not the rest.
mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::builders;
use support::control_plane::{ControlPlane, control_plane};

const BENCH_LABEL: &str = "bench.muster.dev/run";
const GANG_LABEL: &str = "muster.dev/pod-group";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    Singles,
    Gangs,
    Dra,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Singles => "single-GPU pods",
            Workload::Gangs => "gangs of 8",
            Workload::Dra => "DRA template claims",
        }
    }
}

struct Sizes {
    nodes: usize,
    singles: usize,
    gangs: usize,
    dra: usize,
}

struct Row {
    workload: Workload,
    scheduler: String,
    pods: usize,
    bound: usize,
    seconds: f64,
    split: usize,
    peak_mib: f64,
}

fn scale() -> f64 {
    std::env::var("BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(0.2)
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create namespace");
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("account");
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), name).create(&PostParams::default(), &account).await;
}

/// Creates objects with bounded concurrency.
async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .for_each_concurrent(32, |object| {
            let api = api.clone();
            async move {
                let name = object.meta().name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("create {name}: {e}"));
            }
        })
        .await;
}

/// Nodes of 16 GPUs (so that 5,000 single-GPU pods fit on 500 nodes), in racks of 16,
/// labelled for `run`; for the DRA workload, ResourceSlices of 8 GPUs under the bench's
/// driver instead (those nodes advertise no nvidia.com/gpu).
async fn create_nodes(cp: &ControlPlane, client: &kube::Client, run: &str, count: usize, dra: bool) {
    let nodes: Vec<_> = (0..count)
        .map(|i| {
            let rack = format!("r{}", i / 16);
            let gpus = if dra { 0 } else { 16 };
            builders::node(
                &format!("{run}-n{i}"),
                64,
                512,
                gpus,
                &[(BENCH_LABEL, run), ("topology.muster.dev/rack", &rack)],
            )
        })
        .collect();
    create_all(&Api::all(client.clone()), nodes).await;
    // Admission taints new nodes not-ready; nothing lifts it without a kubelet.
    let names: Vec<String> = (0..count).map(|i| format!("{run}-n{i}")).collect();
    futures::stream::iter(names)
        .for_each_concurrent(32, |name| async move {
            let _ = cp.kubectl(&["patch", "node", &name, "--type=merge", "-p", r#"{"spec":{"taints":null}}"#]);
        })
        .await;
    if dra {
        let slices: Vec<ResourceSlice> =
            (0..count).map(|i| builders::gpu_slice(&format!("{run}-n{i}"), "bench.gpu.example.com", 8, 80)).collect();
        create_all(&Api::all(client.clone()), slices).await;
    }
}

fn pod_for(run: &str, scheduler: &str, name: &str, gpus: u32, labels: &[(&str, &str)]) -> Pod {
    let mut pod = builders::pod(name, scheduler, gpus, labels);
    pod.spec.as_mut().expect("spec").node_selector = Some([(BENCH_LABEL.to_string(), run.to_string())].into());
    pod
}

async fn create_workload(
    client: &kube::Client,
    ns: &str,
    run: &str,
    scheduler: &str,
    workload: Workload,
    sizes: &Sizes,
) -> usize {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let objects: Vec<Pod> = match workload {
        Workload::Singles => (0..sizes.singles).map(|i| pod_for(run, scheduler, &format!("p{i}"), 1, &[])).collect(),
        Workload::Gangs => {
            let groups: Api<muster::k8s::crd::PodGroup> = Api::namespaced(client.clone(), ns);
            let specs: Vec<_> = (0..sizes.gangs)
                .map(|g| {
                    muster::k8s::crd::PodGroup::new(
                        &format!("g{g}"),
                        muster::k8s::crd::PodGroupSpec { min_member: 8, ..Default::default() },
                    )
                })
                .collect();
            create_all(&groups, specs).await;
            (0..sizes.gangs)
                .flat_map(|g| (0..8).map(move |i| (g, i)))
                .map(|(g, i)| pod_for(run, scheduler, &format!("g{g}-{i}"), 1, &[(GANG_LABEL, &format!("g{g}"))]))
                .collect()
        }
        Workload::Dra => {
            let template: ResourceClaimTemplate = serde_json::from_value(json!({
                "metadata": {"name": "one-gpu"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "bench-gpu",
                    "selectors": [{"cel": {"expression":
                        "device.capacity['bench.gpu.example.com'].memory.compareTo(quantity('80Gi')) >= 0"}}]}}]}}},
            }))
            .expect("template");
            Api::<ResourceClaimTemplate>::namespaced(client.clone(), ns)
                .create(&PostParams::default(), &template)
                .await
                .expect("create the template");
            (0..sizes.dra)
                .map(|i| {
                    let mut pod = pod_for(run, scheduler, &format!("d{i}"), 0, &[]);
                    let spec = pod.spec.as_mut().expect("spec");
                    spec.resource_claims = Some(vec![
                        serde_json::from_value(json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}))
                            .expect("claim"),
                    ]);
                    spec.containers[0].resources.get_or_insert_default().claims =
                        Some(vec![serde_json::from_value(json!({"name": "gpu"})).expect("claim ref")]);
                    pod
                })
                .collect()
        }
    };
    let count = objects.len();
    create_all(&pods, objects).await;
    count
}

fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn stop(pid: u32) {
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

/// Starts a scheduler for `scheduler_name` as a child process; returns its pid.
fn start_scheduler(cp: &ControlPlane, kind: &str, scheduler_name: &str, run: &str, qps: Option<(u32, u32)>) -> u32 {
    let dir = cp.dir.join(format!("bench-{scheduler_name}"));
    std::fs::create_dir_all(&dir).expect("bench folder");
    let log = std::fs::File::create(dir.join("log")).expect("log file");
    let mut command = if kind == "muster" {
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "schedulerName: {scheduler_name}\nnodeSelector: {{{BENCH_LABEL}: {run}}}\nmetricsAddress: 127.0.0.1:0\n"
            ),
        )
        .expect("config");
        let bin = std::env::var("MUSTER_BIN").unwrap_or_else(|_| "target/release/muster".into());
        let mut c = Command::new(bin);
        c.arg("scheduler")
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", cp.kubeconfig.display()));
        c.env("RUST_LOG", "warn");
        c
    } else {
        let (qps_line, burst_line) =
            qps.map_or((String::new(), String::new()), |(q, b)| (format!("  qps: {q}\n"), format!("  burst: {b}\n")));
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\n{qps_line}{burst_line}leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {scheduler_name}\n",
                cp.kubeconfig.display()
            ),
        )
        .expect("config");
        let mut c = Command::new(cp.bin.join("kube-scheduler"));
        c.arg(format!("--config={}", config.display()))
            .arg(format!("--authentication-kubeconfig={}", cp.kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", cp.kubeconfig.display()))
            .arg(format!(
                "--feature-gates={}",
                support::control_plane::FEATURE_GATES.iter().map(|g| format!("{g}=true")).collect::<Vec<_>>().join(",")
            ))
            .args(["--bind-address", "127.0.0.1", "--secure-port", "0", "--v", "1"]);
        c
    };
    command.stdin(Stdio::null()).stdout(log.try_clone().expect("log")).stderr(log);
    support::process::spawn(command).expect("start the scheduler")
}

async fn bound_count(pods: &Api<Pod>) -> (usize, Vec<Pod>) {
    let all = pods.list(&ListParams::default()).await.expect("list pods").items;
    (all.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count(), all)
}

/// Gangs with some but fewer than 8 pods bound.
fn split_gangs(all: &[Pod]) -> usize {
    let mut gangs: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in all {
        if let Some(g) = pod.metadata.labels.as_ref().and_then(|l| l.get(GANG_LABEL)) {
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            *gangs.entry(g).or_default() += usize::from(bound);
        }
    }
    gangs.values().filter(|&&b| b > 0 && b < 8).count()
}

async fn run_one(
    cp: &ControlPlane,
    client: &kube::Client,
    workload: Workload,
    sizes: &Sizes,
    kind: &str,
    label: &str,
    qps: Option<(u32, u32)>,
) -> Row {
    let run = format!(
        "{}-{}",
        match workload {
            Workload::Singles => "s",
            Workload::Gangs => "g",
            Workload::Dra => "d",
        },
        label
    );
    let ns = format!("bench-{run}");
    create_namespace(client, &ns).await;
    create_nodes(cp, client, &run, sizes.nodes, workload == Workload::Dra).await;
    let scheduler_name = format!("sched-{run}");
    let pods_total = create_workload(client, &ns, &run, &scheduler_name, workload, sizes).await;
    if workload == Workload::Dra {
        // The claims come from the controller; wait until every pod's claim exists.
        let claims: Api<k8s_openapi::api::resource::v1::ResourceClaim> = Api::namespaced(client.clone(), &ns);
        while claims.list(&ListParams::default()).await.map_or(0, |l| l.items.len()) < pods_total {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    let pid = start_scheduler(cp, kind, &scheduler_name, &run, qps);
    let deadline = Duration::from_secs(300);
    let (mut bound, mut all) = (0, Vec::new());
    let mut peak = 0f64;
    while started.elapsed() < deadline {
        (bound, all) = bound_count(&pods).await;
        peak = peak.max(peak_mib(pid));
        if bound == pods_total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    peak = peak.max(peak_mib(pid));
    stop(pid);
    // Free the API server for the next run.
    let _ = pods
        .delete_collection(
            &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
            &ListParams::default(),
        )
        .await;
    Row {
        workload,
        scheduler: label.to_string(),
        pods: pods_total,
        bound,
        seconds,
        split: split_gangs(&all),
        peak_mib: peak,
    }
}

/// Bindings per second the API server takes from one client binding pods as fast as it can
/// (64 in flight), with no scheduling work at all.
async fn ceiling(cp: &ControlPlane, client: &kube::Client, count: usize) -> f64 {
    let run = "ceiling";
    let ns = "bench-ceiling";
    create_namespace(client, ns).await;
    create_nodes(cp, client, run, 50, false).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let objects: Vec<Pod> = (0..count).map(|i| pod_for(run, "nobody", &format!("c{i}"), 0, &[])).collect();
    create_all(&pods, objects).await;
    let started = Instant::now();
    futures::stream::iter(0..count)
        .for_each_concurrent(64, |i| {
            let pods = pods.clone();
            async move {
                let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": format!("c{i}")},
                                  "target": {"apiVersion": "v1", "kind": "Node", "name": format!("{run}-n{}", i % 50)}});
                pods.create_subresource::<_, serde_json::Value>("binding", &format!("c{i}"), &PostParams::default(), &body)
                    .await
                    .expect("bind");
            }
        })
        .await;
    let rate = count as f64 / started.elapsed().as_secs_f64();
    let _ = pods
        .delete_collection(
            &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
            &ListParams::default(),
        )
        .await;
    rate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let s = scale();
    let sizes = Sizes {
        nodes: ((500.0 * s) as usize).max(8),
        singles: ((5000.0 * s) as usize).max(8),
        gangs: ((500.0 * s) as usize).max(1),
        dra: ((1000.0 * s) as usize).max(8),
    };
    let (qps, burst) = (env_u32("BENCH_QPS", 5000), env_u32("BENCH_BURST", 10000));
    let cp = control_plane();
    cp.start_controller_manager();
    let client = cp.client().await;
    // Muster's CRD and the bench's DeviceClass.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for crd in muster::k8s::crd::definitions() {
        let _ = crds.create(&PostParams::default(), &crd).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &builders::device_class("bench-gpu", "bench.gpu.example.com"))
        .await;

    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "API server: kube-apiserver {} with etcd on loopback, {threads} CPU threads; {} nodes of 16 GPUs (8 DRA devices for the DRA workload); kube-scheduler client qps {qps} burst {burst} (and its defaults, 50/100)",
        cp.kubernetes_version, sizes.nodes
    );
    let ceiling_rate = ceiling(cp, &client, sizes.singles.min(2000)).await;
    let mut rows = Vec::new();
    for workload in [Workload::Singles, Workload::Gangs, Workload::Dra] {
        rows.push(run_one(cp, &client, workload, &sizes, "muster", "muster", None).await);
        rows.push(run_one(cp, &client, workload, &sizes, "kube", "kube-scheduler", Some((qps, burst))).await);
        rows.push(run_one(cp, &client, workload, &sizes, "kube", "kube-scheduler-defaults", None).await);
    }
    println!();
    println!("| workload | scheduler | pods bound | time to all bound | pods/s | gangs split | peak memory |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        let split = if r.workload == Workload::Gangs { r.split.to_string() } else { "-".into() };
        println!(
            "| {} | {} | {}/{} | {:.1} s | {:.0} | {} | {:.0} MiB |",
            r.workload.name(),
            r.scheduler,
            r.bound,
            r.pods,
            r.seconds,
            r.bound as f64 / r.seconds,
            split,
            r.peak_mib
        );
    }
    println!("| ceiling: bindings from a tight client loop (64 in flight) | - | - | - | {ceiling_rate:.0} | - | - |");
}
