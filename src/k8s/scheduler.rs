//! The scheduling loop: watches feed the cache, changes wake a debounced cycle, placed
//! gangs are assumed and bound concurrently, and waiting pods are told why.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use kube::Api;
use thiserror::Error;
use tokio::sync::watch as signal;
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::Instrument;

use super::assemble::{Memo, assemble_view};
use super::bind::{BindHook, BindOutcome, Binder, GangBinding};
use super::cache::Cache;
use super::claim_bind;
use super::crd::PodGroup as MusterPodGroup;
use super::foreign::PodGroup as PluginPodGroup;
use super::safety::SafetyNet;
use super::status::StatusWriter;
use super::watch;
use crate::config::Config;
use crate::engine::dra::model::ClaimNeed;
use crate::engine::dra::selectors::SelectorCache;
use crate::engine::model::Snapshot;
use crate::engine::model::{GangKey, PodKey};
use crate::engine::reason::WaitReason;
use crate::engine::schedule_with;
use crate::metrics::Metrics;

#[derive(Debug, Error)]
pub enum Error {
    #[error("failed to ask the API server which PodGroup APIs it serves: {0}")]
    Discovery(#[source] kube::Error),
    #[error("a watch ended before the cache was filled")]
    WatchEnded,
    #[error("leader election for lease {lease} ended")]
    ElectionEnded { lease: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Changes arriving within this long of each other share one cycle.
const DEBOUNCE: Duration = Duration::from_millis(20);

#[derive(Default)]
pub struct Options {
    /// Test-only: called before every bind.
    pub hook: Option<Arc<dyn BindHook>>,
    /// Where the scheduler's metrics go (served by the caller, see `metrics::serve`).
    pub metrics: Arc<Metrics>,
    /// Set true once this replica is ready: its caches are filled, or, as a standby under
    /// leader election, it has reached the API server.
    pub ready: Option<Arc<signal::Sender<bool>>>,
    /// The scheduler stops when this turns true, releasing its lease if it holds one.
    pub shutdown: Option<signal::Receiver<bool>>,
    /// This replica's name in the lease (default: `leader::default_identity()`).
    pub identity: Option<String>,
}

/// Which PodGroup APIs the cluster serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources {
    pub kubernetes: bool,
    pub muster: bool,
    pub scheduler_plugins: bool,
    /// resource.k8s.io/v1: ResourceSlices, DeviceClasses, ResourceClaims (Kubernetes 1.34+).
    pub dra: bool,
    pub device_taint_rules: bool,
}

async fn serves(client: &kube::Client, group_version: &str, plural: &str) -> Result<bool> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(Error::Discovery(e)),
    }
}

/// Asks the API server which PodGroup sources exist; logs one line for each that is off.
pub async fn discover(client: &kube::Client) -> Result<Sources> {
    let sources = Sources {
        kubernetes: serves(client, "scheduling.k8s.io/v1beta1", "podgroups").await?,
        muster: serves(client, "muster.dev/v1alpha1", "podgroups").await?,
        scheduler_plugins: serves(client, "scheduling.x-k8s.io/v1alpha1", "podgroups").await?,
        dra: serves(client, "resource.k8s.io/v1", "resourceslices").await?,
        device_taint_rules: serves(client, "resource.k8s.io/v1", "devicetaintrules").await?,
    };
    let off = |on: bool, what: &str, why: &str| {
        if !on {
            tracing::info!("PodGroup source {what} is off: {why}");
        }
    };
    off(
        sources.kubernetes,
        "scheduling.k8s.io/v1beta1",
        "the API server does not serve it (Kubernetes before 1.37, or the GenericWorkload feature off)",
    );
    off(sources.muster, "muster.dev/v1alpha1", "its CRD is not installed (muster crds | kubectl apply -f -)");
    off(sources.scheduler_plugins, "scheduling.x-k8s.io/v1alpha1", "the scheduler-plugins CRD is not installed");
    if !sources.dra {
        tracing::info!("DRA is off: the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34)");
    } else if !sources.device_taint_rules {
        tracing::info!("DeviceTaintRules are off: the API server does not serve them");
    }
    Ok(sources)
}

struct Backoff {
    until: Instant,
    failures: u32,
}

/// Exponential: the configured initial delay, doubled per failure, up to the maximum.
fn backoff_delay(config: &Config, failures: u32) -> Duration {
    Duration::from_secs(
        (config.backoff.initial_seconds << (failures.saturating_sub(1)).min(20)).min(config.backoff.max_seconds),
    )
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Runs the scheduler until the process ends or `options.shutdown` turns true. With leader
/// election on, it schedules only while it holds the lease: losing it drops the scheduling
/// loop at once (its watches, cycles and in-flight bindings with it), and winning it again
/// starts a fresh one from a fresh cache.
pub async fn run(client: kube::Client, config: Config, options: Options) -> Result<()> {
    let metrics = options.metrics.clone();
    let mut shutdown = options.shutdown.clone();
    let stopped = async move {
        match shutdown.as_mut() {
            Some(rx) => {
                let _ = rx.wait_for(|stop| *stop).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    if !config.leader_election.enabled {
        metrics.leader.set(1);
        return tokio::select! {
            result = lead(client, &config, &options) => result,
            _ = stopped => Ok(()),
        };
    }
    let identity = options.identity.clone().unwrap_or_else(super::leader::default_identity);
    let settings = super::leader::LeaseSettings::from_config(&config.leader_election, identity.clone());
    let lease = format!("{}/{}", settings.namespace, settings.name);
    tracing::info!(%lease, %identity, "leader election on; waiting for the lease");
    let (leading_tx, mut leading) = signal::channel(false);
    let (stop_election, election_stopped) = oneshot::channel::<()>();
    let mut election = tokio::task::JoinSet::new();
    election.spawn(super::leader::elect(client.clone(), settings, leading_tx, options.ready.clone(), async move {
        let _ = election_stopped.await;
    }));
    tokio::pin!(stopped);
    let result = loop {
        tokio::select! {
            became = leading.wait_for(|l| *l) => if became.is_err() { break Err(Error::ElectionEnded { lease }) },
            _ = &mut stopped => break Ok(()),
        }
        metrics.leader.set(1);
        tracing::info!(%lease, %identity, "leading: scheduling");
        tokio::select! {
            result = lead(client.clone(), &config, &options) => break result,
            _ = leading.wait_for(|l| !*l) => {
                metrics.leader.set(0);
                tracing::warn!(%lease, %identity, "not leading any more: stopped scheduling, binding and writing");
            }
            _ = &mut stopped => break Ok(()),
        }
    };
    metrics.leader.set(0);
    // The elector releases the lease on its way out, so a standby takes over at once.
    let _ = stop_election.send(());
    while election.join_next().await.is_some() {}
    result
}

/// The scheduler as a process: serves its metrics, `/healthz` and `/readyz` on the configured
/// address, and stops on SIGTERM or Ctrl-C, releasing its lease if it holds one.
pub async fn run_process(client: kube::Client, config: Config) -> std::result::Result<(), String> {
    let address: std::net::SocketAddr = config
        .metrics_address
        .parse()
        .map_err(|e| format!("metricsAddress {:?} is not an address and port: {e}", config.metrics_address))?;
    let metrics = Arc::new(Metrics::new());
    let (ready_tx, ready_rx) = signal::channel(false);
    let (stop_tx, stop_rx) = signal::channel(false);
    let mut server_stop = stop_rx.clone();
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("failed to listen for metrics on {address}: {e}"))?;
    tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    let server =
        tokio::spawn(crate::metrics::serve_listener(listener, metrics.registry.clone(), ready_rx, async move {
            let _ = server_stop.wait_for(|stop| *stop).await;
        }));
    tokio::spawn(async move {
        terminated().await;
        tracing::info!("stopping");
        stop_tx.send_replace(true);
    });
    let options = Options { metrics, ready: Some(Arc::new(ready_tx)), shutdown: Some(stop_rx), ..Default::default() };
    let result = run(client, config, options).await.map_err(|e| e.to_string());
    server.abort();
    match server.await {
        Ok(Err(e)) => Err(e.to_string()),
        _ => result,
    }
}

/// Completes on SIGTERM (what the kubelet sends) or Ctrl-C.
async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// The scheduling loop of the replica that leads: discovery, watches, cycles, bindings and
/// status. Returns only on an error; dropping it stops everything it started.
async fn lead(client: kube::Client, config: &Config, options: &Options) -> Result<()> {
    let config = config.clone();
    let metrics = options.metrics.clone();
    let sources = discover(&client).await?;
    let cache = Arc::new(Mutex::new(Cache::new(config.node_selector.clone().into_iter().collect())));
    let wake = Arc::new(Notify::new());
    // Every task the scheduler starts lives in these sets, so they all end with it.
    let mut watchers = tokio::task::JoinSet::new();
    let mut binds = tokio::task::JoinSet::new();
    let mut synced = Vec::new();
    // One watch per kind, into the cache; each says when its first list is in.
    macro_rules! watch_all {
        ($kind:ty) => {{
            let (tx, rx) = oneshot::channel();
            watchers.spawn(watch::watch(Api::<$kind>::all(client.clone()), cache.clone(), wake.clone(), tx));
            synced.push(rx);
        }};
    }
    watch_all!(Pod);
    watch_all!(Node);
    watch_all!(PriorityClass);
    if sources.kubernetes {
        watch_all!(KubernetesPodGroup);
    }
    if sources.muster {
        watch_all!(MusterPodGroup);
    }
    if sources.scheduler_plugins {
        watch_all!(PluginPodGroup);
    }
    if sources.dra {
        watch_all!(ResourceSlice);
        watch_all!(DeviceClass);
        watch_all!(ResourceClaim);
    }
    if sources.device_taint_rules {
        watch_all!(DeviceTaintRule);
    }
    for rx in synced {
        rx.await.map_err(|_| Error::WatchEnded)?;
    }
    tracing::info!(scheduler = %config.scheduler_name, "caches filled; scheduling");
    if let Some(ready) = &options.ready {
        ready.send_replace(true);
    }

    let binder = Arc::new(Binder::new(client.clone(), options.hook.clone()).with_metrics(metrics.clone()));
    let mut status = StatusWriter::new(client.clone(), &config.scheduler_name);
    let (results_tx, mut results_rx) = mpsc::unbounded_channel::<(GangBinding, BindOutcome)>();
    let mut backoff: HashMap<GangKey, Backoff> = HashMap::new();
    let mut in_flight: HashSet<GangKey> = HashSet::new();
    let mut safety = SafetyNet::default();
    let mut claim_releases = super::claim_release::ReleaseTracker::default();
    let mut last_eviction: HashMap<GangKey, (&'static str, String)> = HashMap::new();
    let mut memo = Memo::new(&config.topology);
    let mut selectors = SelectorCache::default();
    // Gangs bound whose pods are not all Running yet: (created, minMember).
    let mut awaiting_running: HashMap<GangKey, (i64, usize)> = HashMap::new();
    let cycle_config = config.cycle();
    wake.notify_one();
    // The one timer: the earliest backoff, timeout or reservation that falls due.
    let mut next_wake: Option<Instant> = None;
    loop {
        let timer =
            tokio::time::sleep_until(next_wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)).into());
        tokio::select! {
            _ = wake.notified() => {}
            _ = timer => {}
            Some(result) = results_rx.recv() => {
                finish(result, &cache, &mut status, &mut backoff, &mut in_flight, &config, &wake, &metrics, &mut awaiting_running).await;
            }
        }
        tokio::time::sleep(DEBOUNCE).await;
        while let Ok(result) = results_rx.try_recv() {
            finish(
                result,
                &cache,
                &mut status,
                &mut backoff,
                &mut in_flight,
                &config,
                &wake,
                &metrics,
                &mut awaiting_running,
            )
            .await;
        }
        while binds.try_join_next().is_some() {}

        let started = Instant::now();
        let now = unix_now();
        let mut assembled = {
            let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            assemble_view(&cache.view(), &config.scheduler_name, now, &mut memo)
        };
        let phase = |name: &str, since: Instant| {
            metrics.cycle_phase_duration.with_label_values(&[name]).observe(since.elapsed().as_secs_f64())
        };
        phase("assemble", started);
        metrics.pending_gangs.set(assembled.snapshot.gangs.len() as i64);
        metrics.pending_pods.set(
            (assembled.snapshot.gangs.iter().map(|g| g.pods.len()).sum::<usize>() + assembled.rejected_pods.len())
                as i64,
        );
        // A gang's failure count outlives its wait, so the next failure waits longer; it is
        // reset when the gang binds, and dropped when the gang is gone.
        backoff.retain(|g, b| b.until > started || assembled.snapshot.gangs.iter().any(|gang| gang.key == *g));
        let waiting_out = |g: &GangKey| backoff.get(g).is_some_and(|b| b.until > started);
        assembled.snapshot.gangs.retain(|g| !waiting_out(&g.key) && !in_flight.contains(&g.key));
        let cel_started = Instant::now();
        let evaluations_before = selectors.evaluations;
        warm_selectors(&assembled.snapshot, &mut selectors);
        if selectors.evaluations > evaluations_before {
            metrics.cel_evaluation_duration.observe(cel_started.elapsed().as_secs_f64());
            metrics.cel_evaluations.inc_by(selectors.evaluations - evaluations_before);
        }
        phase("cel", cel_started);
        let engine_started = Instant::now();
        let evaluations_before = selectors.evaluations;
        let outcome = schedule_with(&assembled.snapshot, &cycle_config, &mut selectors);
        metrics.cel_evaluations.inc_by(selectors.evaluations - evaluations_before);
        phase("engine", engine_started);
        let plan_started = Instant::now();
        // Gangs by key, so placements and waits find theirs without scanning every gang.
        let gang_index: HashMap<&GangKey, &crate::engine::model::Gang> =
            assembled.snapshot.gangs.iter().map(|g| (&g.key, g)).collect();
        tracing::debug!(placed = outcome.placements.len(), waiting = outcome.waiting.len(), elapsed = ?started.elapsed(), "cycle");

        for placement in &outcome.placements {
            let gang = gang_index[&placement.gang];
            let mut binding = GangBinding {
                gang: placement.gang.clone(),
                needed: gang.still_needed(),
                min_member: gang.min_member,
                created: gang.created,
                pods: placement
                    .pods
                    .iter()
                    .map(|(pod, node)| (pod.clone(), assembled.snapshot.nodes[*node as usize].name.clone()))
                    .collect(),
                uids: HashMap::new(),
                claims: Vec::new(),
            };
            {
                let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
                for (pod, node) in &binding.pods {
                    if let Some(uid) = cache.uid(pod) {
                        binding.uids.insert(pod.clone(), uid);
                    }
                    cache.assume(pod.clone(), node.clone());
                }
                // Claims first: written before any pod is bound, their devices held meanwhile.
                let (writes, assumed) =
                    claim_bind::plan(&assembled.snapshot.dra, &placement.claims, &binding.uids, |key| {
                        cache.resource_claims.get(&key.namespace, &key.name).cloned()
                    });
                for (pod, claim) in assumed {
                    cache.assume_claim(&pod, claim);
                }
                binding.claims = writes;
            }
            in_flight.insert(binding.gang.clone());
            let (binder, results, metrics) = (binder.clone(), results_tx.clone(), metrics.clone());
            let span =
                tracing::info_span!("gang", gang = %binding.gang, pods = binding.pods.len(), needed = binding.needed);
            binds.spawn(
                async move {
                    let bind_started = Instant::now();
                    let outcome = binder.bind(&binding).await;
                    metrics.bind_duration.observe(bind_started.elapsed().as_secs_f64());
                    let _ = results.send((binding, outcome));
                }
                .instrument(span),
            );
        }
        phase("plan", plan_started);
        metrics.cycle_duration.observe(started.elapsed().as_secs_f64());

        next_wake = backoff.values().map(|b| b.until).filter(|until| *until > started).min();
        for waiting in &outcome.waiting {
            let message = waiting.to_string();
            let result = match waiting.reason {
                WaitReason::DeviceError { .. } | WaitReason::Blocked(_) => "error",
                _ => "unschedulable",
            };
            metrics.gang_attempts.with_label_values(&[result]).inc();
            tracing::debug!(gang = %waiting.gang, reason = %message, "waiting");
            if let Some(&gang) = gang_index.get(&waiting.gang) {
                for pod in &gang.pods {
                    status.unschedulable(&pod.key, &message).await;
                }
                // A gang that will be old enough for a reservation needs a cycle then.
                if matches!(waiting.reason, WaitReason::DoesNotFit { .. })
                    && config.queueing == crate::config::QueueingStrategy::Backfill
                {
                    let due = gang.created + cycle_config.reserve_after_seconds;
                    if due > now {
                        let at = started + Duration::from_secs((due - now) as u64);
                        next_wake = Some(next_wake.map_or(at, |w| w.min(at)));
                    }
                }
            }
        }
        for (pod, why) in &assembled.rejected_pods {
            status.unschedulable(pod, why).await;
        }
        // What the safety net evicts and what PodGroup statuses say, decided over the cache;
        // written afterwards, without holding it.
        let (evictions, groups, live_pods, releases) = {
            let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            let view = cache.view();
            let evictions = safety.check(&view, &config, &in_flight, now);
            let releases = claim_releases.check(&view, now);
            for eviction in &evictions {
                last_eviction.insert(eviction.gang.clone(), (eviction.reason.as_str(), eviction.message.clone()));
            }
            let groups = group_statuses(&view, &config, &outcome, &last_eviction, now);
            metrics.set_gpus(&crate::metrics::gpu_usage(&view, &assembled.groups, &config.topology));
            observe_running(&view, &config, &mut awaiting_running, &metrics);
            let live: HashSet<PodKey> = view
                .pods
                .iter()
                .map(|p| PodKey {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                })
                .collect();
            (evictions, groups, live, releases)
        };
        for release in &releases {
            tracing::info!(claim = %release.claim, consumers = release.remove.len(), "releasing a claim whose pods are gone");
            claim_bind::apply_release(&client, release).await;
        }
        if let Some(due) = claim_releases.next_due() {
            let at = started + Duration::from_secs((due - now).max(0) as u64 + 1);
            next_wake = Some(next_wake.map_or(at, |w| w.min(at)));
        }
        status.retain(|pod| live_pods.contains(pod));
        for eviction in evictions {
            metrics.evictions.with_label_values(&[eviction.reason.as_str()]).inc();
            awaiting_running.remove(&eviction.gang);
            tracing::warn!(gang = %eviction.gang, reason = eviction.reason.as_str(), pods = eviction.pods.len(), "{}", eviction.message);
            let uids: Vec<Option<String>> = {
                let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
                eviction.pods.iter().map(|pod| cache.uid(pod)).collect()
            };
            for (pod, uid) in eviction.pods.iter().zip(uids) {
                if let Err(e) = binder.evict(pod, uid.as_deref()).await {
                    tracing::warn!(%pod, error = %e, "eviction failed; retried next cycle");
                }
                status.evicted(pod, eviction.reason.as_str(), &eviction.message).await;
            }
            let failures = backoff.get(&eviction.gang).map_or(0, |b| b.failures) + 1;
            backoff.insert(
                eviction.gang.clone(),
                Backoff { until: Instant::now() + backoff_delay(&config, failures), failures },
            );
        }
        status.write_groups(groups, &k8s_time(now)).await;
        if let Some(due) = safety.next_due() {
            let at = started + Duration::from_secs((due - now).max(0) as u64 + 1);
            next_wake = Some(next_wake.map_or(at, |w| w.min(at)));
        }
    }
}

/// Seconds from `created` (Unix seconds) until now, with the sub-second part of now.
fn seconds_since(created: i64) -> f64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    (now - created as f64).max(0.0)
}

/// Evaluates, through the engine's selector cache, the CEL selectors that pending pods'
/// claims need on every device, so that their cost is measured here, in the shell, and the
/// engine's cycle finds every result cached. Results are kept per device revision, so a
/// cycle evaluates only devices and selectors it has not seen.
fn warm_selectors(snapshot: &Snapshot, selectors: &mut SelectorCache) {
    if snapshot.dra.devices.is_empty() {
        return;
    }
    let mut seen: HashSet<(String, &[String])> = HashSet::new();
    for gang in &snapshot.gangs {
        for pod in &gang.pods {
            let Some(devices) = pod.devices.as_ref() else { continue };
            for claim in &devices.claims {
                let ClaimNeed::Allocate(spec) = &claim.need else { continue };
                for sub in spec.requests.iter().flat_map(|r| &r.alternatives) {
                    if !seen.insert((sub.class.clone(), sub.selectors.as_slice())) {
                        continue;
                    }
                    let Some(class) = snapshot.dra.classes.get(&sub.class) else { continue };
                    let ids: Vec<_> = class.selectors.iter().chain(&sub.selectors).map(|e| selectors.id(e)).collect();
                    for device in &snapshot.dra.devices {
                        // As the allocator does: stop at the first selector that rejects.
                        for &id in &ids {
                            if selectors.matches(id, device) != Ok(true) {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Observes the waiting time of gangs that now have `minMember` pods Running.
fn observe_running(
    view: &super::assemble::ClusterView<'_>,
    config: &Config,
    awaiting: &mut HashMap<GangKey, (i64, usize)>,
    metrics: &Metrics,
) {
    if awaiting.is_empty() {
        return;
    }
    // Per gang awaited: its pods that exist, and those Running.
    let mut counts: HashMap<GangKey, (usize, usize)> = HashMap::new();
    for pod in &view.pods {
        let ours = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(config.scheduler_name.as_str());
        if !ours {
            continue;
        }
        let key = super::assemble::gang_key(pod);
        if awaiting.contains_key(&key) {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            let entry = counts.entry(key).or_default();
            entry.0 += 1;
            if phase == Some("Running") && pod.metadata.deletion_timestamp.is_none() {
                entry.1 += 1;
            }
        }
    }
    awaiting.retain(|gang, (created, min_member)| {
        let Some(&(_, running)) = counts.get(gang) else { return false };
        if running >= *min_member {
            metrics.gang_waiting.with_label_values(&["running"]).observe(seconds_since(*created));
            false
        } else {
            true
        }
    });
}

fn k8s_time(seconds: i64) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// PodGroup status: Muster's PodGroups get phase, counts and conditions; Kubernetes'
/// PodGroups get PodGroupInitiallyScheduled once placed.
fn group_statuses(
    view: &super::assemble::ClusterView<'_>,
    config: &Config,
    outcome: &crate::engine::CycleOutcome,
    last_eviction: &HashMap<GangKey, (&'static str, String)>,
    now: i64,
) -> super::status::GroupUpdates {
    use crate::engine::model::GangKind;
    let time = k8s_time(now);
    let waiting: HashMap<&GangKey, String> = outcome.waiting.iter().map(|w| (&w.gang, w.to_string())).collect();
    let mut members: HashMap<GangKey, Vec<&Pod>> = HashMap::new();
    for pod in &view.pods {
        if pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(config.scheduler_name.as_str()) {
            members.entry(super::assemble::gang_key(pod)).or_default().push(pod);
        }
    }
    let key = |kind, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| GangKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    };
    let mut updates = super::status::GroupUpdates::default();
    for group in &view.muster_groups {
        let gang = key(GangKind::Muster, &group.metadata);
        let pods = members.get(&gang).map(Vec::as_slice).unwrap_or_default();
        let facts = super::status::GroupFacts {
            waiting: waiting.get(&gang).map(String::as_str),
            evicted: last_eviction.get(&gang).map(|(r, m)| (*r, m.as_str())),
        };
        let status = super::status::podgroup_status(group, pods, &facts, &time);
        if group.status.as_ref() != Some(&status) {
            updates.muster.push(((*group).clone(), status));
        }
    }
    for group in &view.kubernetes_groups {
        let gang = key(GangKind::Kubernetes, &group.metadata);
        let min = group.spec.scheduling_policy.gang.as_ref().map_or(1, |g| g.min_count.max(1)) as usize;
        // Only pods the API server shows bound, not assumed or terminating ones.
        let really_bound = |p: &&&Pod| {
            p.metadata.deletion_timestamp.is_none() && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        };
        let bound = members.get(&gang).map_or(0, |pods| pods.iter().filter(really_bound).count());
        let marked = group
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled"));
        if bound >= min && !marked {
            updates.kubernetes.push((*group).clone());
        }
    }
    updates
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    (binding, outcome): (GangBinding, BindOutcome),
    cache: &Arc<Mutex<Cache>>,
    status: &mut StatusWriter,
    backoff: &mut HashMap<GangKey, Backoff>,
    in_flight: &mut HashSet<GangKey>,
    config: &Config,
    wake: &Arc<Notify>,
    metrics: &Metrics,
    awaiting_running: &mut HashMap<GangKey, (i64, usize)>,
) {
    in_flight.remove(&binding.gang);
    let span = tracing::info_span!("gang", gang = %binding.gang);
    finish_in_span(binding, outcome, cache, status, backoff, config, metrics, awaiting_running).instrument(span).await;
    wake.notify_one();
}

/// What [`finish`] does, inside the gang's span.
#[allow(clippy::too_many_arguments)]
async fn finish_in_span(
    binding: GangBinding,
    outcome: BindOutcome,
    cache: &Arc<Mutex<Cache>>,
    status: &mut StatusWriter,
    backoff: &mut HashMap<GangKey, Backoff>,
    config: &Config,
    metrics: &Metrics,
    awaiting_running: &mut HashMap<GangKey, (i64, usize)>,
) {
    let node_of: HashMap<&PodKey, &String> = binding.pods.iter().map(|(p, n)| (p, n)).collect();
    match outcome {
        BindOutcome::Bound { bound, failed } => {
            tracing::info!(pods = bound.len(), "bound");
            metrics.gang_attempts.with_label_values(&["scheduled"]).inc();
            if binding.needed > 0 {
                metrics.gang_waiting.with_label_values(&["bound"]).observe(seconds_since(binding.created));
                awaiting_running.insert(binding.gang.clone(), (binding.created, binding.min_member));
            }
            for pod in &bound {
                status.scheduled(pod, node_of[pod], &binding.gang.to_string()).await;
            }
            if failed.is_empty() {
                backoff.remove(&binding.gang);
            } else {
                // The gang stands; its extra pods that failed wait out a backoff before
                // they are tried again, so a permanent error does not spin.
                let failures = backoff.get(&binding.gang).map_or(0, |b| b.failures) + 1;
                backoff.insert(
                    binding.gang.clone(),
                    Backoff { until: Instant::now() + backoff_delay(config, failures), failures },
                );
            }
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            for (pod, error) in &failed {
                tracing::warn!(%pod, %error, "pod beyond the minimum not bound; it stays pending");
                cache.forget(pod);
            }
        }
        BindOutcome::RolledBack { evicted, errors } => {
            metrics.gang_attempts.with_label_values(&["bind_failed"]).inc();
            metrics.bind_rollbacks.inc();
            if !evicted.is_empty() {
                metrics.evictions.with_label_values(&["BindFailed"]).inc();
            }
            let failures = backoff.get(&binding.gang).map_or(0, |b| b.failures) + 1;
            let delay = backoff_delay(config, failures).as_secs();
            let first_error = errors.first().map(|(_, e)| e.clone()).unwrap_or_default();
            tracing::warn!(evicted = evicted.len(), error = %first_error, retry_in_s = delay, "binding failed; gang rolled back");
            let message = format!(
                "{} was rolled back: {} of the {} pods it needs could be bound ({first_error}); its bound pods are evicted and it is retried in {delay}s",
                binding.gang,
                evicted.len(),
                binding.needed
            );
            for pod in &evicted {
                status.evicted(pod, "BindFailed", &message).await;
            }
            {
                // Pods that were bound keep their assumption (and their node's capacity)
                // until the watch shows them bound and then gone; the others are pending.
                let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
                for (pod, _) in &binding.pods {
                    if !evicted.contains(pod) {
                        cache.forget(pod);
                    }
                }
                // The claims were undone (or stay with the evicted pods, as the watch shows).
                for write in &binding.claims {
                    cache.forget_claim(&write.pod, &write.claim);
                }
            }
            backoff.insert(
                binding.gang.clone(),
                Backoff { until: Instant::now() + backoff_delay(config, failures), failures },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_up_to_the_maximum() {
        let config =
            Config { backoff: crate::config::Backoff { initial_seconds: 1, max_seconds: 10 }, ..Config::default() };
        let delays: Vec<u64> = (1..=6).map(|f| backoff_delay(&config, f).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
    }
}
