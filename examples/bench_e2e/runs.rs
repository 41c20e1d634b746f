//! Throughput: the pods of a workload, created before the scheduler starts, until all are
//! bound; and the ceiling of the same workload, its pods bound from a tight client loop.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::objects::{self, DRIVER, NodeSet, create_all, create_namespace, retry};
use crate::report::Row;
use crate::sched::{self, Scheduler};
use crate::track::Tracker;
use crate::{Bench, Progress};
use muster::convert::allocation::FINALIZER;

/// How long a run whose pods were deleted may bind nothing before it is given up.
const STALL: Duration = Duration::from_secs(30);

pub struct Sizes {
    pub nodes: usize,
    pub singles: usize,
    pub gangs: usize,
    pub dra: usize,
    pub unschedulable_nodes: usize,
    /// The idle and large runs' nodes.
    pub big_nodes: usize,
    pub idle_pods: usize,
    pub idle_window: Duration,
    pub large_gangs: usize,
    /// The rules run's pods, in deployments of ten.
    pub rule_pods: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Singles,
    Gangs,
    Dra,
    /// Gangs of 8 on the big node set.
    Large,
    /// Deployments of ten on the big node set, one replica per node and spread over zones.
    Rules,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Singles => "single-GPU pods",
            Workload::Gangs => "gangs of 8",
            Workload::Dra => "DRA template claims",
            Workload::Large => "large: gangs of 8",
            Workload::Rules => "anti-affinity + zone spread",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Workload::Singles => "s",
            Workload::Gangs => "g",
            Workload::Dra => "d",
            Workload::Large => "l",
            Workload::Rules => "r",
        }
    }

    /// Its name in `BENCH_RUNS`.
    pub fn key(self) -> &'static str {
        match self {
            Workload::Singles => "singles",
            Workload::Gangs => "gangs",
            Workload::Dra => "dra",
            Workload::Large => "large",
            Workload::Rules => "rules",
        }
    }

    fn gangs(self, sizes: &Sizes) -> usize {
        match self {
            Workload::Gangs => sizes.gangs,
            Workload::Large => sizes.large_gangs,
            _ => 0,
        }
    }

    fn pods(self, sizes: &Sizes) -> usize {
        match self {
            Workload::Singles => sizes.singles,
            Workload::Dra => sizes.dra,
            Workload::Gangs | Workload::Large => 8 * self.gangs(sizes),
            Workload::Rules => sizes.rule_pods,
        }
    }

    /// The name of the workload's `k`th pod.
    fn pod_name(self, k: usize) -> String {
        match self {
            Workload::Singles => format!("p{k}"),
            Workload::Dra => format!("d{k}"),
            Workload::Gangs | Workload::Large => format!("g{}-{}", k / 8, k % 8),
            Workload::Rules => format!("d{}-{}", k / 10, k % 10),
        }
    }
}

/// Where a row runs: its nodes, the sizes, its namespace.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub nodes: &'a NodeSet,
    pub sizes: &'a Sizes,
    pub ns: &'a str,
}

/// Creates what the workload's pods refer to (their gangs as `scheduler` knows them, the
/// claim template) and returns the pods, not created yet. `None`: the ceiling, no gangs.
async fn prepare(
    b: &Bench,
    workload: Workload,
    t: &Target<'_>,
    scheduler_name: &str,
    scheduler: Option<Scheduler>,
    deadline: Instant,
) -> Result<Vec<Pod>, String> {
    let names: Vec<String> = (0..workload.pods(t.sizes)).map(|k| workload.pod_name(k)).collect();
    Ok(match workload {
        Workload::Singles => names.iter().map(|n| objects::pod(t.nodes, scheduler_name, n, 1, &[])).collect(),
        Workload::Gangs | Workload::Large => {
            let gangs: Vec<String> = (0..workload.gangs(t.sizes)).map(|g| format!("g{g}")).collect();
            if let Some(scheduler) = scheduler {
                objects::create_gangs(&b.client, t.ns, scheduler, &gangs, 8, deadline).await?;
            }
            names
                .iter()
                .enumerate()
                .map(|(k, n)| {
                    let mut pod = objects::pod(t.nodes, scheduler_name, n, 1, &[]);
                    objects::join_gang(&mut pod, scheduler, &gangs[k / 8]);
                    pod
                })
                .collect()
        }
        Workload::Rules => names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let mut pod = objects::pod(t.nodes, scheduler_name, n, 0, &[]);
                objects::keep_apart(&mut pod, &format!("d{}", k / 10));
                pod
            })
            .collect(),
        Workload::Dra => {
            objects::create_claim_template(&b.client, t.ns).await?;
            names
                .iter()
                .map(|n| {
                    let mut pod = objects::pod(t.nodes, scheduler_name, n, 0, &[]);
                    objects::add_template_claim(&mut pod);
                    pod
                })
                .collect()
        }
    })
}

/// Creates the workload's pods; on time, None; otherwise the row that says how far it got.
async fn create_pods(
    b: &Bench,
    workload: Workload,
    t: &Target<'_>,
    scheduler: Option<Scheduler>,
    row: &Row,
    deadline: Instant,
) -> Result<Option<Row>, String> {
    let scheduler_name = match scheduler {
        Some(_) => format!("sched-{}", t.ns),
        None => "nobody".to_string(),
    };
    let pods: Api<Pod> = Api::namespaced(b.client.clone(), t.ns);
    let objects = prepare(b, workload, t, &scheduler_name, scheduler, deadline).await?;
    let total = objects.len();
    let created = create_all(&pods, objects, deadline).await?;
    if created < total {
        let mut row = row.clone();
        row.bound = format!("0/{total}");
        row.note = format!("over budget ({} s) creating the pods: {created}/{total} created", b.budget.as_secs());
        return Ok(Some(row));
    }
    Ok(None)
}

/// Waits until kube-controller-manager has made every pod's claim from its template (not
/// part of what is measured).
async fn wait_for_claims(tracker: &Tracker, total: usize, row: &Row, deadline: Instant, b: &Bench) -> Option<Row> {
    while tracker.claimed() < total {
        if Instant::now() >= deadline {
            let mut row = row.clone();
            row.bound = format!("0/{total}");
            row.note = format!(
                "over budget ({} s) waiting for kube-controller-manager to make the claims: {}/{total}",
                b.budget.as_secs(),
                tracker.claimed()
            );
            return Some(row);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The workload's pods bound from a tight client loop (64 pods in flight), no scheduling: for
/// DRA, each pod's claim allocated (and reserved for it) and then the pod bound.
/// `finalizer`: DRA claims also get the delete-protection finalizer first, in its own
/// write, as a scheduler must before it allocates (kube-scheduler and Muster both do).
pub async fn ceiling(
    b: &Bench,
    workload: Workload,
    t: &Target<'_>,
    finalizer: bool,
    progress: Progress,
) -> Result<Row, String> {
    let label = format!("{} / ceiling", workload.name());
    let deadline = Instant::now() + b.budget;
    let row = Row::new(workload.name(), if finalizer { "ceiling, with finalizer" } else { "ceiling" });
    create_namespace(&b.client, t.ns).await?;
    let pods: Api<Pod> = Api::namespaced(b.client.clone(), t.ns);
    let tracker = Tracker::start(pods.clone());
    let total = workload.pods(t.sizes);
    progress.counts(0, total);
    progress.phase(b, &label, &format!("creating {total} pods"));
    if let Some(row) = create_pods(b, workload, t, None, &row, deadline).await? {
        return Ok(row);
    }
    let dra = workload == Workload::Dra;
    if dra {
        progress.phase(b, &label, "waiting for the claims");
        if let Some(row) = wait_for_claims(&tracker, total, &row, deadline, b).await {
            return Ok(row);
        }
    }
    let seen = tracker.pods();
    progress.phase(b, &label, "binding from a tight loop");
    let claims: Api<ResourceClaim> = Api::namespaced(b.client.clone(), t.ns);
    let bound = AtomicUsize::new(0);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let nodes = t.nodes;
    let started = Instant::now();
    futures::stream::iter(0..total)
        .for_each_concurrent(64, |k| {
            let (pods, claims, bound, failure, seen) = (&pods, &claims, &bound, &failure, &seen);
            async move {
                if Instant::now() >= deadline || failure.lock().is_ok_and(|f| f.is_some()) {
                    return;
                }
                let name = workload.pod_name(k);
                let node = if dra { nodes.node((k / 8) % nodes.count) } else { nodes.node(k % nodes.count) };
                let fail = |why: String| *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                if dra {
                    let Some(pod) = seen.get(&name) else { return fail(format!("pod {name} not seen")) };
                    let Some(claim) = &pod.claim else { return fail(format!("pod {name} has no claim")) };
                    if finalizer {
                        let protect = Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER]}}));
                        let params = PatchParams::default();
                        if let Err(e) = retry(|| claims.patch(claim, &params, &protect)).await {
                            return fail(format!("adding the finalizer to claim {claim}: {e}"));
                        }
                    }
                    let status = Patch::Merge(json!({"status": {
                        "allocation": {
                            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node,
                                                     "device": format!("gpu-{}", k % 8)}]},
                            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                        },
                        "reservedFor": [{"resource": "pods", "name": name, "uid": pod.uid}],
                    }}));
                    let params = PatchParams::default();
                    if let Err(e) = retry(|| claims.patch_status(claim, &params, &status)).await {
                        return fail(format!("allocating claim {claim}: {e}"));
                    }
                }
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                     "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                let params = PostParams::default();
                let bind = || pods.create_subresource::<_, serde_json::Value>("binding", &name, &params, &binding);
                match retry(bind).await {
                    Ok(_) => {}
                    // A retry whose first answer was lost.
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return fail(format!("binding {name}: {e}")),
                }
                bound.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    let bound = bound.into_inner();
    // The clock ends as a scheduler's does: when the watch has seen the last pod bound (the
    // same watch runs in both rows, so the API server serves it in both).
    while tracker.bound() < bound && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds =
        tracker.last_bound().map_or_else(|| started.elapsed(), |last| last.duration_since(started)).as_secs_f64();
    drop(tracker);
    let mut row = row;
    row.bound = format!("{bound}/{total}");
    row.time = Some(seconds);
    row.rate = Some(bound as f64 / seconds);
    if let Some(why) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        row.note = why;
    } else if bound < total {
        row.note = format!("over budget ({} s)", b.budget.as_secs());
    }
    row.detail = match (dra, finalizer) {
        (true, true) => "finalizer + claim allocation + binding per pod, 64 in flight",
        (true, false) => "claim allocation + binding per pod, 64 in flight",
        _ => "bindings, 64 in flight",
    }
    .into();
    Ok(row)
}

/// The workload's pods, created first, then `scheduler` started: the time until the API
/// server shows all bound, gangs split, the scheduler's CPU and peak memory.
pub async fn throughput(
    b: &Bench,
    workload: Workload,
    t: &Target<'_>,
    scheduler: Scheduler,
    progress: Progress,
) -> Result<Row, String> {
    let label = format!("{} / {}", workload.name(), scheduler.label());
    let deadline = Instant::now() + b.budget;
    let mut row = Row::new(workload.name(), scheduler.label());
    create_namespace(&b.client, t.ns).await?;
    let pods: Api<Pod> = Api::namespaced(b.client.clone(), t.ns);
    let tracker = Tracker::start(pods.clone());
    let total = workload.pods(t.sizes);
    progress.counts(0, total);
    progress.phase(b, &label, &format!("creating {total} pods"));
    if let Some(row) = create_pods(b, workload, t, Some(scheduler), &row, deadline).await? {
        return Ok(row);
    }
    if workload == Workload::Dra {
        progress.phase(b, &label, "waiting for the claims");
        if let Some(row) = wait_for_claims(&tracker, total, &row, deadline, b).await {
            return Ok(row);
        }
    }
    progress.phase(b, &label, "scheduling");
    let scheduler_name = format!("sched-{}", t.ns);
    let started = Instant::now();
    let pid = sched::start(b, scheduler, &scheduler_name, t.nodes)?;
    progress.pid(Some(pid));
    let (mut exited, mut stalled) = (false, false);
    let (mut last_count, mut last_change) = (0, Instant::now());
    loop {
        let bound = tracker.bound();
        progress.counts(bound, total);
        if bound >= total || Instant::now() >= deadline {
            break;
        }
        if !sched::running(pid) {
            exited = true;
            break;
        }
        if bound != last_count {
            (last_count, last_change) = (bound, Instant::now());
        }
        // Pods deleted (a gang rolled back by evicting what it had bound: bare pods, no
        // controller makes them again) and nothing bound for a while: it cannot finish.
        if tracker.deleted() > 0 && last_change.elapsed() >= STALL {
            stalled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bound = tracker.bound();
    // Stalled: the rate up to the last binding (the note says the rest never came).
    let seconds = match tracker.last_bound() {
        Some(last) if bound >= total || stalled => last.duration_since(started),
        _ => started.elapsed(),
    }
    .as_secs_f64();
    row.cpu = sched::cpu_seconds(pid);
    row.peak_mib = sched::peak_mib(pid);
    sched::finish(b, pid, &scheduler_name).await;
    progress.pid(None);
    row.bound = format!("{bound}/{total}");
    row.time = Some(seconds);
    let rate = bound as f64 / seconds;
    row.rate = Some(rate);
    let deleted = tracker.deleted();
    let mut short = 0;
    if matches!(workload, Workload::Gangs | Workload::Large) {
        let split;
        (split, short) = tracker.split_gangs(8);
        row.split = Some(split);
        if scheduler.is_kube()
            && let Some((scheduled, _, groups)) = objects::kube_groups_marked(&b.client, t.ns).await
        {
            row.detail = format!("{scheduled}/{groups} PodGroups PodGroupInitiallyScheduled=True");
        }
    }
    if workload == Workload::Rules {
        let nodes = t.nodes;
        let zone_of = |node: &str| {
            node.strip_prefix(&format!("{}-n", nodes.name))?.parse::<usize>().ok().map(|i| i % objects::ZONES)
        };
        row.detail = match tracker.broken_rules(objects::ZONES, zone_of) {
            (0, 0) => "every placement keeps both rules".into(),
            (shared, skewed) => format!(
                "rules broken: {shared} deployments with two replicas on a node, {skewed} with zones more than 1 apart"
            ),
        };
    }
    if deleted > 0 {
        let gangs = if short > 0 { format!(" ({short} gangs lost pods)") } else { String::new() };
        let deleted = format!("{deleted} pods deleted by the scheduler{gangs}");
        row.detail = if row.detail.is_empty() { deleted } else { format!("{}; {deleted}", row.detail) };
    }
    if exited {
        let tail = sched::log_tail(b, &scheduler_name);
        b.say(format!("{label}: the scheduler exited; its log ends:\n{tail}"));
        row.note = "the scheduler exited (its log on stderr)".into();
    } else if stalled {
        let tail = sched::log_tail(b, &scheduler_name);
        b.say(format!("{label}: stalled at {bound}/{total} bound; the scheduler's log ends:\n{tail}"));
        row.note = format!("stalled: nothing bound for {} s after pods were deleted", STALL.as_secs());
    } else if bound < total {
        let tail = sched::log_tail(b, &scheduler_name);
        b.say(format!("{label}: over budget with {bound}/{total} bound; the scheduler's log ends:\n{tail}"));
        row.note = format!("over budget ({} s)", b.budget.as_secs());
    }
    Ok(row)
}
