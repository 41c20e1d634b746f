//! The scheduling loop of the replica that leads, as one [`Scheduler`] holding its state in
//! three parts: what it caches from one cycle to the next (the memo, the engine, the
//! backoff, the unschedulable pool), what it owes (the gangs being bound and evicted, the
//! safety net, claim releases, the next wake-up and housekeeping) and what it measures.
//!
//! A cycle reads the cache, asks the engine, and returns its decisions as data: gangs to
//! bind (assumed in the cache at once), and writes for the background writer (conditions,
//! events, PodGroup status, evictions, claim releases). Binding runs in tasks whose outcome
//! comes back through [`Scheduler::on_bind_outcome`]; a task that panics or is cancelled
//! comes back as a rollback. Nothing in a cycle waits on the API server, so a request that
//! never answers holds up only its own gang, and only until its deadline.

pub mod backoff;
pub mod claim_giveback;
pub mod claim_release;
mod cycle;
mod decide;
mod evictions;
mod housekeeping;
mod pool;
pub mod safety;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::{Id, JoinError, JoinSet};
use tracing::Instrument;

use crate::config::Config;
use crate::convert::assemble::Memo;
use crate::engine::CycleConfig;
use crate::engine::drive::Engine;
use crate::engine::model::{GangKey, PodKey};
use crate::k8s::observe::health::SchedulerHealth;
use crate::k8s::scheduling::backoff::GangBackoff;
use crate::k8s::scheduling::claim_release::ReleaseTracker;
use crate::k8s::scheduling::safety::SafetyNet;
use crate::k8s::store::cache::Cache;
use crate::k8s::store::watch::Wake;
use crate::k8s::write::bind::{Bind, BindError, BindOutcome, GangBinding};
use crate::k8s::write::writer::{PodRef, Write, Writer};
use crate::metrics::Metrics;

/// Changes arriving within this long of each other share one cycle.
const DEBOUNCE: Duration = Duration::from_millis(20);

/// How often a cycle also does the work over the whole cache (the safety net, claim
/// releases, PodGroup and queue statuses, GPU figures): a burst of cycles while gangs bind
/// does it once, and a skipped pass is made up by a wake-up when this has passed.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(500);

/// While bindings are in flight the pass waits up to this long after the last one: a burst
/// of bindings leaves the CPU to them and to the API server, and the pass runs when the
/// last binding ends (the loop cycles on every outcome) or when this has passed.
const HOUSEKEEPING_HOLD: Duration = Duration::from_secs(5);

/// What one cycle did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Gangs placed and handed to the binder.
    pub placed: Vec<GangKey>,
    /// Gangs that wait, with why.
    pub waiting: Vec<(GangKey, String)>,
    /// Gangs the safety net evicts whole.
    pub evicted: Vec<GangKey>,
}

pub struct Scheduler {
    config: Config,
    cycle_config: CycleConfig,
    /// What it reads the cluster from, writes through, is woken by and shows on the page
    /// (no wake outside [`Scheduler::run`]).
    cache: Arc<Mutex<Cache>>,
    writer: Writer,
    binder: Arc<dyn Bind>,
    wake: Option<Arc<Wake>>,
    ui: Option<Arc<crate::ui::Board>>,
    caches: Caches,
    owes: Owes,
    measures: Measures,
}

/// What the scheduler keeps from one cycle to the next, learnt from the cluster.
struct Caches {
    memo: Memo,
    /// The engine over time (what it keeps between cycles: compiled selectors, free
    /// capacity, capacity held for gangs that evictions were made for, which a new leader
    /// does not inherit: it sees the victims terminating and their queues' figures without
    /// them, so it evicts nothing more for the same gang).
    engine: Engine,
    backoff: GangBackoff,
    /// Gangs that did not fit, not searched for again until a change could help them.
    pool: pool::UnschedulablePool,
    /// The last eviction made of each gang: (why, by whom, when).
    last_eviction: HashMap<GangKey, (&'static str, String, i64)>,
    /// Queue notes and problems already logged, logged once each.
    queue_notes: HashSet<String>,
    /// Why each gang that waits was last told it waits (kept until it is placed or gone).
    waits: HashMap<GangKey, String>,
}

/// What the scheduler has started and must finish, or must do when it falls due.
struct Owes {
    /// Binding tasks, and the binding each runs, so a task that dies still reports.
    binds: JoinSet<(GangBinding, BindOutcome)>,
    bind_tasks: HashMap<Id, GangBinding>,
    /// Bindings that may run at once: a binding task takes a slot before it starts its
    /// requests, so a wave of thousands of placed gangs holds their plans, not thousands of
    /// suspended requests, and a slot passes to the next gang the moment one ends.
    bind_slots: Arc<tokio::sync::Semaphore>,
    in_flight: HashSet<GangKey>,
    /// Gangs whose eviction was sent, and when: left alone until the watch shows it.
    evicting: HashMap<GangKey, (Instant, Vec<PodKey>)>,
    /// Why each gang waits, as cycles since the last housekeeping found it, for its
    /// PodGroup's status.
    unreported_waits: HashMap<GangKey, String>,
    safety: SafetyNet,
    releases: ReleaseTracker,
    /// The cycle in progress: its moment, and its snapshot until its decisions come back.
    now: Instant,
    pending: Option<cycle::Pending>,
    next_wake: Option<Instant>,
    /// When the next cycle does the housekeeping.
    housekeeping_due: Instant,
}

/// What the scheduler measures and reports on itself.
struct Measures {
    metrics: Arc<Metrics>,
    health: Arc<SchedulerHealth>,
    /// What the cycle in progress did.
    report: CycleReport,
    /// Gangs bound whose pods are not all Running yet: (created, minMember).
    awaiting_running: HashMap<GangKey, (i64, usize)>,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Seconds from `created` (Unix seconds) until now, with the sub-second part of now.
fn seconds_since(created: i64) -> f64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    (now - created as f64).max(0.0)
}

impl Scheduler {
    pub fn new(
        config: Config,
        cache: Arc<Mutex<Cache>>,
        metrics: Arc<Metrics>,
        health: Arc<SchedulerHealth>,
        writer: Writer,
        binder: Arc<dyn Bind>,
    ) -> Scheduler {
        let cycle_config = config.cycle();
        let caches = Caches {
            memo: Memo::new(&config),
            engine: Engine::new(cycle_config),
            backoff: GangBackoff::new(&config.backoff),
            pool: pool::UnschedulablePool::new(Duration::from_secs(config.retry_unschedulable_seconds)),
            last_eviction: HashMap::new(),
            queue_notes: HashSet::new(),
            waits: HashMap::new(),
        };
        let owes = Owes {
            binds: JoinSet::new(),
            bind_tasks: HashMap::new(),
            bind_slots: Arc::new(tokio::sync::Semaphore::new(config.client_connection.bind_in_flight())),
            in_flight: HashSet::new(),
            evicting: HashMap::new(),
            unreported_waits: HashMap::new(),
            safety: SafetyNet::default(),
            releases: ReleaseTracker::default(),
            now: Instant::now(),
            pending: None,
            next_wake: None,
            housekeeping_due: Instant::now(),
        };
        let measures = Measures { metrics, health, report: CycleReport::default(), awaiting_running: HashMap::new() };
        Scheduler { config, cycle_config, cache, writer, binder, wake: None, ui: None, caches, owes, measures }
    }

    /// Publishes the page's view to `board` after every housekeeping pass.
    pub fn with_ui(mut self, board: Arc<crate::ui::Board>) -> Scheduler {
        self.ui = Some(board);
        self
    }

    /// When the loop must run a cycle even if nothing changes: the earliest backoff,
    /// timeout, release or reservation that falls due.
    pub fn next_wake(&self) -> Option<Instant> {
        self.owes.next_wake
    }

    fn wake_at(&mut self, at: Instant) {
        self.owes.next_wake = Some(self.owes.next_wake.map_or(at, |w| w.min(at)));
    }

    /// Gangs being bound now.
    pub fn in_flight(&self) -> &HashSet<GangKey> {
        &self.owes.in_flight
    }

    /// Whether `gang` waits out a backoff at `now`.
    pub fn backing_off(&self, gang: &GangKey, now: Instant) -> bool {
        self.caches.backoff.waiting(gang, now)
    }

    /// The loop: the engine's, with this scheduler as its driver (a cycle after every
    /// change, debounced, every timer that falls due and every binding that ends); runs
    /// until dropped.
    pub async fn run(mut self, wake: Arc<Wake>) {
        wake.wake();
        self.wake = Some(wake);
        let mut engine = std::mem::take(&mut self.caches.engine);
        engine.run(&mut self).await;
    }

    /// Waits for the next binding to end and takes its outcome; false when none is running.
    pub async fn next_outcome(&mut self) -> bool {
        match self.owes.binds.join_next_with_id().await {
            Some(joined) => {
                self.on_joined(joined);
                true
            }
            None => false,
        }
    }

    fn on_joined(&mut self, joined: Result<(Id, (GangBinding, BindOutcome)), JoinError>) {
        match joined {
            Ok((id, (binding, outcome))) => {
                self.owes.bind_tasks.remove(&id);
                self.on_bind_outcome(binding, outcome);
            }
            Err(e) => {
                let Some(binding) = self.owes.bind_tasks.remove(&e.id()) else { return };
                let reason =
                    if e.is_panic() { "its task panicked".to_string() } else { "its task was cancelled".into() };
                tracing::error!(gang = %binding.gang, %reason, "a binding ended without an outcome; rolled back");
                let first = binding.pods.first().map(|(p, _)| p.clone()).unwrap_or_else(|| PodKey {
                    namespace: binding.gang.namespace.clone(),
                    name: binding.gang.name.clone(),
                });
                let error = BindError::Lost { gang: binding.gang.clone(), reason };
                self.on_bind_outcome(
                    binding,
                    BindOutcome::RolledBack { evicted: Vec::new(), errors: vec![(first, error)] },
                );
            }
        }
    }

    fn pod_ref(cache: &Cache, pod: &PodKey) -> PodRef {
        PodRef { namespace: pod.namespace.clone(), name: pod.name.clone(), uid: cache.uid(pod) }
    }

    /// A gang's binding ended: count it, tell its pods, and undo the assumptions of what
    /// did not bind; a rolled-back gang waits out its backoff.
    pub fn on_bind_outcome(&mut self, binding: GangBinding, outcome: BindOutcome) {
        self.owes.in_flight.remove(&binding.gang);
        let span = tracing::info_span!("gang", gang = %binding.gang);
        let _entered = span.enter();
        let node_of: HashMap<&PodKey, &String> = binding.pods.iter().map(|(p, n)| (p, n)).collect();
        let now = Instant::now();
        match outcome {
            BindOutcome::Bound { bound, failed } => {
                tracing::info!(pods = bound.len(), "bound");
                self.measures.metrics.gang_attempts.with_label_values(&["scheduled"]).inc();
                if binding.needed > 0 {
                    let waited = seconds_since(binding.created);
                    self.measures.metrics.gang_waiting.with_label_values(&["bound"]).observe(waited);
                    let labels = [binding.queue.as_str(), binding.gang.namespace.as_str()];
                    self.measures.metrics.queue_gang_waiting.with_label_values(&labels).observe(waited);
                    self.measures.metrics.gangs_started.with_label_values(&labels).inc();
                    self.measures.awaiting_running.insert(binding.gang.clone(), (binding.created, binding.min_member));
                }
                if failed.is_empty() {
                    self.caches.backoff.succeed(&binding.gang);
                } else {
                    // The gang stands; its extra pods that failed wait out a backoff before
                    // they are tried again, so a permanent error does not spin.
                    let delay = self.caches.backoff.fail(&binding.gang, now);
                    self.wake_at(now + delay);
                }
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                for pod in &bound {
                    let mut note = format!("Successfully assigned {pod} to {} ({})", node_of[pod], binding.gang);
                    if let Some(holder) = &binding.opportunistic {
                        note += &format!(
                            ", opportunistically: in capacity held for {holder}, evicted whole when that gang can start"
                        );
                    }
                    self.writer.submit(Write::PodEvent {
                        pod: Self::pod_ref(&cache, pod),
                        warning: false,
                        reason: "Scheduled".into(),
                        note,
                        action: "Binding".into(),
                    });
                }
                for (pod, error) in &failed {
                    tracing::warn!(%pod, %error, "pod beyond the minimum not bound; it stays pending");
                    cache.forget(pod);
                }
            }
            BindOutcome::RolledBack { evicted, errors } => {
                self.measures.metrics.gang_attempts.with_label_values(&["bind_failed"]).inc();
                self.measures.metrics.bind_rollbacks.inc();
                if !evicted.is_empty() {
                    self.measures.metrics.evicted("BindFailed", &binding.queue, &binding.gang.namespace);
                }
                let delay = self.caches.backoff.fail(&binding.gang, now);
                self.wake_at(now + delay);
                let delay = delay.as_secs();
                let first_error = errors.first().map(|(_, e)| e.to_string()).unwrap_or_default();
                tracing::warn!(evicted = evicted.len(), error = %first_error, retry_in_s = delay, "binding failed; gang rolled back");
                let message = format!(
                    "{} was rolled back: {} of the {} pods it needs could be bound ({first_error}); its bound pods are evicted and it is retried in {delay}s",
                    binding.gang,
                    evicted.len(),
                    binding.needed
                );
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                for (pod, _) in &binding.pods {
                    // Evicted pods are told so; the others were never bound, as
                    // kube-scheduler tells a pod whose binding failed before its bind.
                    let (reason, action) = if evicted.contains(pod) {
                        ("BindFailed", "Evicting")
                    } else {
                        ("FailedScheduling", "Scheduling")
                    };
                    self.writer.submit(Write::PodEvent {
                        pod: Self::pod_ref(&cache, pod),
                        warning: true,
                        reason: reason.into(),
                        note: message.clone(),
                        action: action.into(),
                    });
                }
                // Pods that were bound keep their assumption (and their node's capacity)
                // until the watch shows them bound and then gone; the others are pending.
                for (pod, _) in &binding.pods {
                    if !evicted.contains(pod) {
                        cache.forget(pod);
                    }
                }
                // The claims were undone (or stay with the evicted pods, as the watch shows).
                for write in &binding.claims {
                    cache.forget_claim(&write.pod, &write.claim);
                }
                drop(cache);
                // Its bound pods are being evicted already: the safety net leaves it alone
                // until the watch shows them going.
                if !evicted.is_empty() {
                    self.owes.evicting.insert(binding.gang.clone(), (now, evicted));
                }
            }
        }
    }

    /// When the next housekeeping pass is due: `HOUSEKEEPING_EVERY` after the last, or
    /// `HOUSEKEEPING_HOLD` after it while bindings are in flight.
    fn housekeeping_at(&self) -> Instant {
        if self.owes.binds.is_empty() {
            self.owes.housekeeping_due
        } else {
            self.owes.housekeeping_due + HOUSEKEEPING_HOLD.saturating_sub(HOUSEKEEPING_EVERY)
        }
    }

    fn start_binding(&mut self, binding: GangBinding) {
        self.owes.in_flight.insert(binding.gang.clone());
        let (binder, metrics, slots) =
            (self.binder.clone(), self.measures.metrics.clone(), self.owes.bind_slots.clone());
        // Statuses and events wait while bindings are in flight (up to the writer's hold).
        let in_flight = self.writer.binding();
        let span =
            tracing::info_span!("gang", gang = %binding.gang, pods = binding.pods.len(), needed = binding.needed);
        let kept = binding.clone();
        let task = self.owes.binds.spawn(
            async move {
                // The semaphore is never closed; without a slot the binding still runs.
                let _in_flight = in_flight;
                let _slot = slots.acquire_owned().await.ok();
                let bind_started = Instant::now();
                let outcome = binder.bind(binding.clone()).await;
                metrics.bind_duration.observe(bind_started.elapsed().as_secs_f64());
                (binding, outcome)
            }
            .instrument(span),
        );
        self.owes.bind_tasks.insert(task.id(), kept);
    }
}
