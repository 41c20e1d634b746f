//! Idle: many bound pods, nothing to schedule, a kubelet emulator that keeps writing pod and
//! node status at a steady rate; the CPU each scheduler spends over a window.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::objects::{self, NodeSet, create_all, create_namespace, retry};
use crate::report::Row;
use crate::runs::Sizes;
use crate::sched::{self, Scheduler};
use crate::{Bench, Progress};

/// Each pod's status is rewritten once every this many seconds (200 writes/s at 20,000 pods).
const POD_PERIOD_S: f64 = 100.0;
/// Each node's heartbeat once every this many seconds (83 writes/s at 5,000 nodes).
const NODE_PERIOD_S: f64 = 60.0;
const SETTLE: Duration = Duration::from_secs(5);

/// Pod status writes and node heartbeats per second for `pods` pods on `nodes` nodes.
pub fn rates(pods: usize, nodes: usize) -> (f64, f64) {
    (pods as f64 / POD_PERIOD_S, nodes as f64 / NODE_PERIOD_S)
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// What a kubelet reports for a running pod of one container.
fn running() -> Value {
    let now = now();
    json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0, "started": true,
                               "image": "registry.invalid/train:latest", "imageID": "",
                               "state": {"running": {"startedAt": now}}}],
    }})
}

struct Emulated {
    pod_writes: usize,
    node_writes: usize,
    /// Writes not sent because 64 were still in flight.
    skipped: usize,
}

/// Writes pod status (the Ready condition's lastProbeTime) and node heartbeats (the Ready
/// condition's lastHeartbeatTime) round-robin at the given rates for `window`.
async fn emulate(
    pods: Api<Pod>,
    nodes: Api<Node>,
    pod_names: Vec<String>,
    node_names: Vec<String>,
    window: Duration,
) -> Emulated {
    let (pod_rate, node_rate) = rates(pod_names.len(), node_names.len());
    let in_flight = Arc::new(Semaphore::new(64));
    let pod_writes = Arc::new(AtomicUsize::new(0));
    let node_writes = Arc::new(AtomicUsize::new(0));
    let mut skipped = 0;
    let mut tasks = JoinSet::new();
    let tick = Duration::from_millis(100);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut pod_due, mut node_due, mut next_pod, mut next_node) = (0.0, 0.0, 0usize, 0usize);
    let end = Instant::now() + window;
    while Instant::now() < end {
        interval.tick().await;
        pod_due += pod_rate * tick.as_secs_f64();
        node_due += node_rate * tick.as_secs_f64();
        while pod_due >= 1.0 || node_due >= 1.0 {
            let pod = pod_due >= 1.0;
            if pod {
                pod_due -= 1.0;
            } else {
                node_due -= 1.0;
            }
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                skipped += 1;
                continue;
            };
            if pod {
                let (api, name, done) =
                    (pods.clone(), pod_names[next_pod % pod_names.len()].clone(), pod_writes.clone());
                next_pod += 1;
                tasks.spawn(async move {
                    let patch = Patch::Strategic(json!({"status": {"conditions": [
                        {"type": "Ready", "status": "True", "lastProbeTime": now()}]}}));
                    if api.patch_status(&name, &PatchParams::default(), &patch).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(permit);
                });
            } else {
                let (api, name, done) =
                    (nodes.clone(), node_names[next_node % node_names.len()].clone(), node_writes.clone());
                next_node += 1;
                tasks.spawn(async move {
                    let patch = Patch::Strategic(json!({"status": {"conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now()}]}}));
                    if api.patch_status(&name, &PatchParams::default(), &patch).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(permit);
                });
            }
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    Emulated {
        pod_writes: pod_writes.load(Ordering::Relaxed),
        node_writes: node_writes.load(Ordering::Relaxed),
        skipped,
    }
}

pub async fn run(
    b: &Bench,
    nodes: &NodeSet,
    sizes: &Sizes,
    scheduler: Scheduler,
    ns: &str,
    progress: Progress,
) -> Result<Row, String> {
    let label = format!("idle / {}", scheduler.label());
    let deadline = Instant::now() + b.budget;
    let mut row = Row::new("idle", scheduler.label());
    let total = sizes.idle_pods;
    create_namespace(&b.client, ns).await?;
    let scheduler_name = format!("sched-{ns}");
    let pods: Api<Pod> = Api::namespaced(b.client.clone(), ns);
    progress.counts(0, total);
    progress.phase(b, &label, &format!("creating {total} bound pods"));
    let names: Vec<String> = (0..total).map(|k| format!("i{k}")).collect();
    let objects: Vec<Pod> = names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let mut pod = objects::pod(nodes, &scheduler_name, name, 1, &[]);
            pod.spec.as_mut().expect("spec").node_name = Some(nodes.node(k % nodes.count));
            pod
        })
        .collect();
    let created = create_all(&pods, objects, deadline).await?;
    progress.counts(created, total);
    if created < total {
        row.bound = format!("{created}/{total}");
        row.note = format!("over budget ({} s) creating the bound pods", b.budget.as_secs());
        return Ok(row);
    }
    progress.phase(b, &label, "marking them Running");
    let marked = AtomicUsize::new(0);
    futures::stream::iter(names.iter())
        .for_each_concurrent(32, |name| {
            let (pods, marked) = (&pods, &marked);
            async move {
                if Instant::now() >= deadline {
                    return;
                }
                let (patch, params) = (Patch::Strategic(running()), PatchParams::default());
                if retry(|| pods.patch_status(name, &params, &patch)).await.is_ok() {
                    marked.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await;
    let marked = marked.into_inner();
    if marked < total {
        row.bound = format!("{total}/{total}");
        row.note = format!("over budget ({} s) marking the pods Running: {marked}/{total}", b.budget.as_secs());
        return Ok(row);
    }

    progress.phase(b, &label, "starting the scheduler and binding a warm-up pod");
    let pid = sched::start(b, scheduler, &scheduler_name, nodes)?;
    progress.pid(Some(pid));
    let sync = sched::warm_up(b, ns, &scheduler_name, nodes, pid, deadline).await?;
    tokio::time::sleep(SETTLE).await;
    if Instant::now() + sizes.idle_window > deadline {
        row.bound = format!("{total}/{total}");
        row.note = format!("over budget ({} s) before the window", b.budget.as_secs());
        row.peak_mib = sched::peak_mib(pid);
        return Ok(row);
    }
    progress.phase(b, &label, &format!("measuring CPU over {} s", sizes.idle_window.as_secs()));
    let node_names: Vec<String> = (0..nodes.count).map(|i| nodes.node(i)).collect();
    let before = sched::cpu_seconds(pid);
    let started = Instant::now();
    let emulated = emulate(pods.clone(), Api::all(b.client.clone()), names, node_names, sizes.idle_window).await;
    let after = sched::cpu_seconds(pid);
    let window = started.elapsed().as_secs_f64();
    row.peak_mib = sched::peak_mib(pid);
    let exited = !sched::running(pid);
    sched::finish(b, pid, &scheduler_name).await;
    progress.pid(None);
    row.bound = format!("{total}/{total}");
    row.time = Some(window);
    row.cpu = before.zip(after).map(|(a, b)| b - a);
    row.detail = format!(
        "{:.1} % of one core; emulator wrote {:.1} pod statuses/s and {:.1} node heartbeats/s{}; synced in {sync:.1} s",
        row.cpu.unwrap_or(0.0) / window * 100.0,
        emulated.pod_writes as f64 / window,
        emulated.node_writes as f64 / window,
        if emulated.skipped > 0 { format!(" ({} skipped: 64 in flight)", emulated.skipped) } else { String::new() },
    );
    if exited {
        b.say(format!("{label}: the scheduler exited; its log ends:\n{}", sched::log_tail(b, &scheduler_name)));
        row.note = "the scheduler exited (its log on stderr)".into();
    }
    Ok(row)
}
