//! Muster beside the real kube-scheduler (the pinned build) on one test control plane:
//! kube-apiserver, etcd and kube-controller-manager's resourceclaim controller on loopback,
//! fake Node objects, one scheduler process at a time. Run through `hack/bench-e2e.sh`.
//!
//! Every run is measured for Muster and for kube-scheduler; a row is printed (and stdout
//! flushed) as soon as it is measured, and the whole table again at the end, in markdown.
//!
//! - **single-GPU pods, gangs of 8, DRA template claims** (500 nodes at scale 1; 5,000
//!   pods, 500 gangs of 8, 1,000 pods with a claim from a ResourceClaimTemplate): the pods
//!   exist before the scheduler starts; the clock runs from starting its process until the
//!   API server shows every pod bound. Three schedulers: Muster, kube-scheduler with client
//!   qps 5000/burst 10000, kube-scheduler with its defaults (qps 50, burst 100). Before the
//!   first and after each of them, the **ceiling** of the same workload: the same pods bound
//!   from a tight client loop (64 in flight, no scheduling), and for DRA a claim allocation
//!   plus a binding per pod from that loop. Each scheduler's pods/s is also shown divided by
//!   the mean of the ceilings just before and just after it: the API server's pace on 2
//!   cores drifts by up to a fifth from one minute to the next, and the mean is the pace
//!   the scheduler met.
//! - **unschedulable gang** (500 nodes): the scheduler is started and has bound a warm-up
//!   pod (so it has synced); then a gang of 8 pods, minMember 8, each asking 32 GPUs of
//!   nodes that have 16, is created; the time is from its creation until all 8 pods carry
//!   `PodScheduled=False` (the pods polled every 50 ms).
//! - **idle** (5,000 nodes, 20,000 pods created bound, with `spec.nodeName` and the
//!   scheduler's name, then marked Running): nothing to schedule; after the scheduler has
//!   bound a warm-up pod and settled 5 s, the CPU seconds it uses (utime + stime) over 60 s
//!   while a kubelet emulator rewrites each pod's Ready condition (`lastProbeTime`) once every
//!   100 s and each node's Ready heartbeat (`lastHeartbeatTime`) once every 60 s: 200 pod
//!   status writes/s and 83 node writes/s at scale 1.
//! - **large** (the same 5,000 nodes, 20,000 pods in 2,500 gangs of 8): Muster and
//!   kube-scheduler (qps 5000/burst 10000), each between two ceilings as above: every pod
//!   bound? gangs split?
//! - **anti-affinity + zone spread** (the same 5,000 nodes, dealt into three zones; 10,000
//!   one-CPU pods in deployments of ten): each pod keeps off the nodes of its deployment's
//!   other replicas (required anti-affinity on the hostname) and spreads its deployment over
//!   the zones (maxSkew 1, DoNotSchedule), as scheduler_perf's SchedulingPodAntiAffinity and
//!   TopologySpreading; between ceilings as above.
//!
//! Gangs: Muster's are `podgroups.muster.dev` (`minMember: 8`) with the pods labelled
//! `muster.dev/pod-group`; kube-scheduler's are its own, through the Workload API: one
//! `scheduling.k8s.io/v1beta1` Workload per namespace (a podGroupTemplate with
//! `schedulingPolicy.gang.minCount: 8`), one PodGroup per gang (the same policy, a
//! `workloadRef` to the template) and `spec.schedulingGroup.podGroupName` on every pod;
//! kube-scheduler runs with the control plane's feature gates, whose `GenericWorkload`
//! turns on its GangScheduling plugin (v1.37 has no separate gate for it).
//!
//! Every row records each scheduler's peak memory (VmHWM) and CPU seconds. Each row has a
//! time budget; a row over it is printed as such with what it reached, and the bench goes
//! on. A row whose scheduler deleted pods (a gang rolled back by evicting what it had
//! bound: bare pods, nothing makes them again) and then binds nothing for 30 s is stopped
//! as stalled. Each row's pods, groups, claims and namespace are deleted after it (their
//! finalizers removed: the controllers that would do it do not run), and each run's nodes
//! after the run. Progress goes to stderr. Pods are followed through one watch per row,
//! never a list per poll. The sizes at scale 1 are meant to fit in about an hour on 2 cores.
//!
//! Environment: `MUSTER_BIN` (the muster binary, release build), `BENCH_SCALE` (default 0.2;
//! 1.0 = the sizes above), `BENCH_BUDGET_S` (seconds per row; default 600 × scale, at least
//! 120), `BENCH_QPS`/`BENCH_BURST` (kube-scheduler's client limits for the equal-QPS rows),
//! `BENCH_KUBE_FEATURE_GATES` (more `Name=true` gates for kube-scheduler, comma-separated),
//! `BENCH_RUNS` (a subset, comma-separated: singles, gangs, dra, unschedulable, idle, large,
//! rules),
//! `BENCH_SCHEDULERS` (a subset of the schedulers, comma-separated: muster, kube, kubedef),
//! `BENCH_LOG_DIR` (where to keep each scheduler's log), `BENCH_MUSTER_LOG` (Muster's
//! `RUST_LOG`, default `warn`).

#[path = "../../tests/e2e/support/mod.rs"]
#[allow(dead_code, unused_imports)] // The benchmark uses the control plane and the builders, not the rest.
mod support;

mod idle;
mod objects;
mod report;
mod runs;
mod sched;
mod track;
mod unschedulable;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::DeviceClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use objects::NodeSet;
use report::{Row, Table};
use runs::{Sizes, Target, Workload};
use sched::Scheduler;
use support::builders;
use support::control_plane::{ControlPlane, control_plane};

/// What every run needs: the control plane, a client, the budget of one row.
pub struct Bench {
    pub cp: &'static ControlPlane,
    pub client: kube::Client,
    pub budget: Duration,
    /// kube-scheduler's `--feature-gates` value.
    pub kube_gates: String,
    begun: Instant,
}

impl Bench {
    /// A progress line on stderr, so that a long run is never silent.
    pub fn say(&self, what: impl std::fmt::Display) {
        eprintln!("[{:>7.1} s] {what}", self.begun.elapsed().as_secs_f64());
    }
}

/// Where a row has got to, readable when it is cut off at its budget.
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<ProgressState>>);

#[derive(Clone, Default)]
pub struct ProgressState {
    pub phase: String,
    /// The scheduler process, while it runs.
    pub pid: Option<u32>,
    pub bound: usize,
    pub total: usize,
}

impl Progress {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProgressState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn phase(&self, b: &Bench, row: &str, phase: &str) {
        b.say(format!("{row}: {phase}"));
        self.lock().phase = phase.to_string();
    }

    pub fn pid(&self, pid: Option<u32>) {
        self.lock().pid = pid;
    }

    pub fn counts(&self, bound: usize, total: usize) {
        let mut state = self.lock();
        state.bound = bound;
        state.total = total;
    }

    pub fn snapshot(&self) -> ProgressState {
        self.lock().clone()
    }
}

fn scale() -> f64 {
    std::env::var("BENCH_SCALE").ok().and_then(|s| s.parse().ok()).filter(|s: &f64| *s > 0.0).unwrap_or(0.2)
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn scaled(full: f64, s: f64, min: usize) -> usize {
    ((full * s) as usize).max(min)
}

/// Runs one row under its budget (and a minute's grace for a request that hangs), prints it,
/// then stops its scheduler if still running and deletes its namespace's objects.
async fn row<F, B>(b: &Bench, table: &mut Table, run: &str, scheduler: &str, ns: &str, body: B) -> Row
where
    B: FnOnce(Progress) -> F,
    F: Future<Output = Result<Row, String>>,
{
    let row = measure(b, run, scheduler, ns, body).await;
    table.push(row.clone());
    row
}

/// One row measured (within the budget, its scheduler stopped and its namespace cleaned
/// after it), not yet printed.
async fn measure<F, B>(b: &Bench, run: &str, scheduler: &str, ns: &str, body: B) -> Row
where
    B: FnOnce(Progress) -> F,
    F: Future<Output = Result<Row, String>>,
{
    let progress = Progress::default();
    let outcome = tokio::time::timeout(b.budget + Duration::from_secs(60), body(progress.clone())).await;
    let state = progress.snapshot();
    if let Some(pid) = state.pid {
        sched::stop(pid).await;
    }
    let row = match outcome {
        Ok(Ok(row)) => row,
        Ok(Err(why)) => Row::failed(run, scheduler, &state, &format!("failed: {why}")),
        Err(_) => Row::failed(
            run,
            scheduler,
            &state,
            &format!("over budget ({} s), stuck while {}", b.budget.as_secs(), state.phase),
        ),
    };
    objects::clean_namespace(b, ns).await;
    row
}

/// A workload's throughput rows: the ceiling, then each scheduler followed by the ceiling
/// again, each scheduler's pods/s divided by the mean of the ceilings just before and just
/// after it (the API server's pace drifts by a fifth from one minute to the next on 2
/// cores; the mean of the two is the pace the scheduler met). The scheduler's row is
/// printed once the ceiling after it is in.
async fn bracketed(b: &Bench, table: &mut Table, workload: Workload, t: &Target<'_>, schedulers: &[Scheduler]) {
    let run = workload.name();
    let ceiling = |i: usize| {
        let ns = format!("bench-{}-ceiling{i}", workload.short());
        async move {
            let target = Target { ns: &ns, ..*t };
            measure(b, run, "ceiling", &ns, |p| runs::ceiling(b, workload, &target, false, p)).await
        }
    };
    let mut before = ceiling(0).await;
    table.push(before.clone());
    for (i, &scheduler) in schedulers.iter().enumerate() {
        let ns = format!("bench-{}-{}", workload.short(), scheduler.short());
        let target = Target { ns: &ns, ..*t };
        let mut row =
            measure(b, run, scheduler.label(), &ns, |p| runs::throughput(b, workload, &target, scheduler, p)).await;
        let after = ceiling(i + 1).await;
        let paces: Vec<f64> = [&before, &after]
            .into_iter()
            .filter(|c| c.note.is_empty())
            .filter_map(|c| c.rate)
            .filter(|r| *r > 0.0)
            .collect();
        if let Some(rate) = row.rate.filter(|_| !paces.is_empty()) {
            let mean = paces.iter().sum::<f64>() / paces.len() as f64;
            row.ratio = Some(rate / mean);
            if paces.len() == 1 {
                let one = "÷ the one ceiling that completed";
                row.detail = if row.detail.is_empty() { one.into() } else { format!("{}; {one}", row.detail) };
            }
        }
        table.push(row);
        table.push(after.clone());
        before = after;
    }
    // DRA: the same loop making the three writes a scheduler makes per claim (the
    // finalizer first), which bounds any scheduler's pace here at about two thirds of the
    // plain ceiling.
    if workload == Workload::Dra {
        let ns = format!("bench-{}-ceiling-finalizer", workload.short());
        let target = Target { ns: &ns, ..*t };
        table.push(
            measure(b, run, "ceiling, with finalizer", &ns, |p| runs::ceiling(b, workload, &target, true, p)).await,
        );
    }
}

async fn nodes_or_row(b: &Bench, table: &mut Table, run: &str, name: &str, count: usize, dra: bool) -> Option<NodeSet> {
    b.say(format!("{run}: creating {count} nodes"));
    match tokio::time::timeout(b.budget, NodeSet::create(b, name, count, dra)).await {
        Ok(Ok(nodes)) => Some(nodes),
        outcome => {
            let why = match outcome {
                Ok(Err(why)) => format!("failed: creating the nodes: {why}"),
                _ => format!("over budget ({} s) creating {count} nodes", b.budget.as_secs()),
            };
            table.push(Row::failed(run, "-", &ProgressState::default(), &why));
            NodeSet { name: name.to_string(), count, dra }.delete(b).await;
            None
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let begun = Instant::now();
    let s = scale();
    let sizes = Sizes {
        nodes: scaled(500.0, s, 8),
        singles: scaled(5000.0, s, 8),
        gangs: scaled(500.0, s, 1),
        dra: scaled(1000.0, s, 8),
        unschedulable_nodes: scaled(500.0, s, 8),
        big_nodes: scaled(5000.0, s, 16),
        idle_pods: scaled(20000.0, s, 64),
        idle_window: Duration::from_secs(scaled(60.0, s, 15) as u64),
        large_gangs: scaled(2500.0, s, 4),
        rule_pods: scaled(10000.0, s, 20) / 10 * 10,
    };
    let budget = Duration::from_secs(
        std::env::var("BENCH_BUDGET_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| scaled(600.0, s, 120) as u64),
    );
    let (qps, burst) = (env_u32("BENCH_QPS", 5000), env_u32("BENCH_BURST", 10000));
    let mut gates: Vec<String> = support::control_plane::FEATURE_GATES.iter().map(|g| format!("{g}=true")).collect();
    if let Ok(extra) = std::env::var("BENCH_KUBE_FEATURE_GATES") {
        gates.extend(extra.split(',').map(str::trim).filter(|g| !g.is_empty()).map(String::from));
    }
    let kube_gates = gates.join(",");
    let runs = std::env::var("BENCH_RUNS").unwrap_or_default();
    let wanted = |key: &str| runs.trim().is_empty() || runs.split(',').any(|r| r.trim() == key);

    let cp = control_plane();
    cp.start_controller_manager();
    let client = cp.client().await;
    let b = Bench { cp, client: client.clone(), budget, kube_gates, begun };

    // Muster's CRDs, established, and the bench's DeviceClass.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in muster::api::pod_group::definitions() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let _ = crds.create(&PostParams::default(), &crd).await;
        let _ = tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await;
    }
    let _ = Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &builders::device_class("bench-gpu", objects::DRIVER))
        .await;

    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let idle_window = sizes.idle_window.as_secs();
    let (pod_rate, node_rate) = idle::rates(sizes.idle_pods, sizes.big_nodes);
    println!(
        "Muster beside kube-scheduler: kube-apiserver {} with etcd and kube-controller-manager (resourceclaim controller) on loopback, {threads} CPU threads, BENCH_SCALE={s}; fake nodes of 64 cores and 16 GPUs (the DRA workload's nodes publish 8 GPUs in a ResourceSlice instead); each row's budget {} s.",
        cp.kubernetes_version,
        budget.as_secs()
    );
    println!(
        "kube-scheduler (same build): client qps {qps} burst {burst}, and kube-scheduler-defaults (qps 50, burst 100) for the first three workloads; --feature-gates={}; GenericWorkload turns on its GangScheduling plugin, and its gangs are scheduling.k8s.io/v1beta1 Workload + PodGroup (gang, minCount 8) with spec.schedulingGroup on the pods. Muster's gangs: podgroups.muster.dev, minMember 8.",
        b.kube_gates
    );
    println!("Runs:");
    println!(
        "- single-GPU pods, gangs of 8, DRA template claims: {} nodes; {} pods; {} gangs of 8 one-GPU pods; {} pods each with a claim from a ResourceClaimTemplate (one 80 GB GPU by CEL). Pods exist before the scheduler starts; time = from starting the scheduler to every pod bound. ceiling = the same pods bound from a tight client loop (64 in flight; DRA: a claim allocation and a binding per pod), measured before the first scheduler and after each; ÷ ceiling = pods/s over the mean of the ceilings just before and just after that scheduler.",
        sizes.nodes, sizes.singles, sizes.gangs, sizes.dra
    );
    println!(
        "- unschedulable gang: {} nodes; after the scheduler bound a warm-up pod, a gang of 8 pods (minMember 8) of 32 GPUs each is created; time = from its creation to all 8 pods PodScheduled=False (polled every 50 ms).",
        sizes.unschedulable_nodes
    );
    println!(
        "- idle: {} nodes, {} pods created bound (spec.nodeName, the scheduler's name) and Running; after a warm-up pod is bound and 5 s settle, CPU seconds (utime+stime) over {idle_window} s while the emulator rewrites each pod's Ready lastProbeTime every 100 s ({pod_rate:.1} writes/s) and each node's Ready lastHeartbeatTime every 60 s ({node_rate:.1} writes/s).",
        sizes.big_nodes, sizes.idle_pods
    );
    println!(
        "- large: the same {} nodes, {} pods in {} gangs of 8 one-GPU pods; ceiling, Muster, ceiling, kube-scheduler (qps {qps}), ceiling.",
        sizes.big_nodes,
        sizes.large_gangs * 8,
        sizes.large_gangs
    );
    println!(
        "- anti-affinity + zone spread: the same {} nodes (dealt into {} zones), {} one-CPU pods in deployments of ten, each with required anti-affinity to its deployment on the hostname and a zone spread constraint (maxSkew 1, DoNotSchedule) over it, as scheduler_perf's SchedulingPodAntiAffinity and TopologySpreading; ceiling, Muster, ceiling, kube-scheduler (qps {qps}), ceiling.",
        sizes.big_nodes,
        objects::ZONES,
        sizes.rule_pods
    );
    println!(
        "Columns: time = to all bound (unschedulable: to all reported; idle: the window); pods/s = pods bound over that time; gangs split = gangs with some but not all 8 pods bound when the row ended; CPU = the scheduler's CPU seconds over the row (idle: over the window); peak memory = its VmHWM. A row over its budget says so and shows what it reached; a row whose scheduler deleted pods (a gang rolled back by evicting what it had bound: bare pods, never made again) and then bound nothing for 30 s is stopped as stalled, its time running to its last binding."
    );
    println!();
    let mut table = Table::new();
    table.print_header();

    let only = std::env::var("BENCH_SCHEDULERS").unwrap_or_default();
    let picked = |s: &Scheduler| only.is_empty() || only.split(',').any(|o| o.trim() == s.short());
    let schedulers: Vec<Scheduler> = [Scheduler::Muster, Scheduler::Kube { qps, burst }, Scheduler::KubeDefaults]
        .into_iter()
        .filter(picked)
        .collect();
    for workload in [Workload::Singles, Workload::Gangs, Workload::Dra] {
        if !wanted(workload.key()) {
            continue;
        }
        let run = workload.name();
        let Some(nodes) =
            nodes_or_row(&b, &mut table, run, workload.short(), sizes.nodes, workload == Workload::Dra).await
        else {
            continue;
        };
        let target = Target { nodes: &nodes, sizes: &sizes, ns: "" };
        bracketed(&b, &mut table, workload, &target, &schedulers).await;
        nodes.delete(&b).await;
    }

    let kube = Scheduler::Kube { qps, burst };
    let run = "unschedulable gang";
    if wanted("unschedulable")
        && let Some(nodes) = nodes_or_row(&b, &mut table, run, "u", sizes.unschedulable_nodes, false).await
    {
        for scheduler in [Scheduler::Muster, kube].into_iter().filter(picked) {
            let ns = format!("bench-u-{}", scheduler.short());
            let body = |p| unschedulable::run(&b, &nodes, scheduler, &ns, p);
            row(&b, &mut table, run, scheduler.label(), &ns, body).await;
        }
        nodes.delete(&b).await;
    }

    let (idle, large, rules) = (wanted("idle"), wanted(Workload::Large.key()), wanted(Workload::Rules.key()));
    if (idle || large || rules)
        && let Some(nodes) = nodes_or_row(&b, &mut table, "idle, large, rules", "big", sizes.big_nodes, false).await
    {
        for scheduler in [Scheduler::Muster, kube].into_iter().filter(|_| idle).filter(picked) {
            let ns = format!("bench-i-{}", scheduler.short());
            let body = |p| idle::run(&b, &nodes, &sizes, scheduler, &ns, p);
            row(&b, &mut table, "idle", scheduler.label(), &ns, body).await;
        }
        let target = Target { nodes: &nodes, sizes: &sizes, ns: "" };
        let schedulers: Vec<Scheduler> = [Scheduler::Muster, kube].into_iter().filter(picked).collect();
        if large {
            bracketed(&b, &mut table, Workload::Large, &target, &schedulers).await;
        }
        if rules {
            bracketed(&b, &mut table, Workload::Rules, &target, &schedulers).await;
        }
        nodes.delete(&b).await;
    }

    println!();
    println!("All runs ({:.1} min):", begun.elapsed().as_secs_f64() / 60.0);
    println!();
    table.print_all();
}
