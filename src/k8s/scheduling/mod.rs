//! The scheduling loop of the replica that leads, as one [`Scheduler`] holding its state:
//! the backoff, the gangs being bound, the safety net, claim releases and the next wake-up.
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

use crate::config::{Config, QueueingStrategy};
use crate::convert::assemble::{Memo, assemble_view};
use crate::engine::CycleConfig;
use crate::engine::model::{GangKey, PodKey, Reservation};
use crate::engine::reason::WaitReason;
use crate::engine::{CycleMemory, schedule_remembering};
use crate::k8s::observe::health::Health;
use crate::k8s::scheduling::backoff::Backoff;
use crate::k8s::scheduling::claim_release::ReleaseTracker;
use crate::k8s::scheduling::safety::SafetyNet;
use crate::k8s::store::cache::Cache;
use crate::k8s::store::watch::Wake;
use crate::k8s::write::bind::{Bind, BindError, BindOutcome, GangBinding};
use crate::k8s::write::claims;
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
    cache: Arc<Mutex<Cache>>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    writer: Writer,
    binder: Arc<dyn Bind>,
    /// Binding tasks, and the binding each runs, so a task that dies still reports.
    binds: JoinSet<(GangBinding, BindOutcome)>,
    bind_tasks: HashMap<Id, GangBinding>,
    /// Bindings that may run at once: a binding task takes a slot before it starts its
    /// requests, so a wave of thousands of placed gangs holds their plans, not thousands of
    /// suspended requests, and a slot passes to the next gang the moment one ends.
    bind_slots: Arc<tokio::sync::Semaphore>,
    in_flight: HashSet<GangKey>,
    backoff: Backoff,
    /// Gangs that did not fit, not searched for again until a change could help them.
    pool: pool::Pool,
    safety: SafetyNet,
    releases: ReleaseTracker,
    /// Gangs whose eviction was sent, and when: left alone until the watch shows it.
    evicting: HashMap<GangKey, (Instant, Vec<PodKey>)>,
    last_eviction: HashMap<GangKey, (&'static str, String, i64)>,
    memo: Memo,
    /// What the engine keeps between cycles: compiled selectors, free capacity.
    memory: CycleMemory,
    /// Gangs bound whose pods are not all Running yet: (created, minMember).
    awaiting_running: HashMap<GangKey, (i64, usize)>,
    /// Capacity freed by evictions and held for the gangs they were made for, from the
    /// last cycle (lost on restart: a new leader sees the victims terminating and their
    /// queues' figures without them, so it evicts nothing more for the same gang).
    reservations: Vec<Reservation>,
    next_wake: Option<Instant>,
    /// Queue notes and problems already logged, logged once each.
    queue_notes: HashSet<String>,
    /// Why each gang waits, as cycles since the last housekeeping found it, for its
    /// PodGroup's status.
    unreported_waits: HashMap<GangKey, String>,
    /// When the next cycle does the housekeeping.
    housekeeping_due: Instant,
    /// Where the page's view goes after each housekeeping pass, and why each gang that
    /// waits was last told it waits (kept until it is placed or gone).
    ui: Option<Arc<crate::ui::Board>>,
    waits: HashMap<GangKey, String>,
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
        health: Arc<Health>,
        writer: Writer,
        binder: Arc<dyn Bind>,
    ) -> Scheduler {
        Scheduler {
            cycle_config: config.cycle(),
            bind_slots: Arc::new(tokio::sync::Semaphore::new(config.client_connection.bind_in_flight())),
            backoff: Backoff::new(&config.backoff),
            pool: pool::Pool::new(Duration::from_secs(config.retry_unschedulable_seconds)),
            memo: Memo::new(&config),
            config,
            cache,
            metrics,
            health,
            writer,
            binder,
            binds: JoinSet::new(),
            bind_tasks: HashMap::new(),
            in_flight: HashSet::new(),
            safety: SafetyNet::default(),
            releases: ReleaseTracker::default(),
            evicting: HashMap::new(),
            last_eviction: HashMap::new(),
            memory: CycleMemory::default(),
            awaiting_running: HashMap::new(),
            reservations: Vec::new(),
            next_wake: None,
            queue_notes: HashSet::new(),
            unreported_waits: HashMap::new(),
            housekeeping_due: Instant::now(),
            ui: None,
            waits: HashMap::new(),
        }
    }

    /// Publishes the page's view to `board` after every housekeeping pass.
    pub fn with_ui(mut self, board: Arc<crate::ui::Board>) -> Scheduler {
        self.ui = Some(board);
        self
    }

    /// When the loop must run a cycle even if nothing changes: the earliest backoff,
    /// timeout, release or reservation that falls due.
    pub fn next_wake(&self) -> Option<Instant> {
        self.next_wake
    }

    fn wake_at(&mut self, at: Instant) {
        self.next_wake = Some(self.next_wake.map_or(at, |w| w.min(at)));
    }

    /// Gangs being bound now.
    pub fn in_flight(&self) -> &HashSet<GangKey> {
        &self.in_flight
    }

    /// Whether `gang` waits out a backoff at `now`.
    pub fn backing_off(&self, gang: &GangKey, now: Instant) -> bool {
        self.backoff.waiting(gang, now)
    }

    /// The loop: a cycle after every change (debounced), every timer that falls due and
    /// every binding that ends; runs until dropped.
    pub async fn run(mut self, wake: Arc<Wake>) {
        wake.wake();
        loop {
            let timer = tokio::time::sleep_until(
                self.next_wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)).into(),
            );
            tokio::select! {
                _ = wake.woken() => {}
                _ = timer => {}
                Some(joined) = self.binds.join_next_with_id(), if !self.binds.is_empty() => self.on_joined(joined),
            }
            tokio::time::sleep(DEBOUNCE).await;
            while let Some(joined) = self.binds.try_join_next_with_id() {
                self.on_joined(joined);
            }
            self.cycle(Instant::now(), unix_now());
        }
    }

    /// Waits for the next binding to end and takes its outcome; false when none is running.
    pub async fn next_outcome(&mut self) -> bool {
        match self.binds.join_next_with_id().await {
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
                self.bind_tasks.remove(&id);
                self.on_bind_outcome(binding, outcome);
            }
            Err(e) => {
                let Some(binding) = self.bind_tasks.remove(&e.id()) else { return };
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
        self.in_flight.remove(&binding.gang);
        let span = tracing::info_span!("gang", gang = %binding.gang);
        let _entered = span.enter();
        let node_of: HashMap<&PodKey, &String> = binding.pods.iter().map(|(p, n)| (p, n)).collect();
        let now = Instant::now();
        match outcome {
            BindOutcome::Bound { bound, failed } => {
                tracing::info!(pods = bound.len(), "bound");
                self.metrics.gang_attempts.with_label_values(&["scheduled"]).inc();
                if binding.needed > 0 {
                    let waited = seconds_since(binding.created);
                    self.metrics.gang_waiting.with_label_values(&["bound"]).observe(waited);
                    let labels = [binding.queue.as_str(), binding.gang.namespace.as_str()];
                    self.metrics.queue_gang_waiting.with_label_values(&labels).observe(waited);
                    self.metrics.gangs_started.with_label_values(&labels).inc();
                    self.awaiting_running.insert(binding.gang.clone(), (binding.created, binding.min_member));
                }
                if failed.is_empty() {
                    self.backoff.succeed(&binding.gang);
                } else {
                    // The gang stands; its extra pods that failed wait out a backoff before
                    // they are tried again, so a permanent error does not spin.
                    let delay = self.backoff.fail(&binding.gang, now);
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
                self.metrics.gang_attempts.with_label_values(&["bind_failed"]).inc();
                self.metrics.bind_rollbacks.inc();
                if !evicted.is_empty() {
                    self.metrics.evicted("BindFailed", &binding.queue, &binding.gang.namespace);
                }
                let delay = self.backoff.fail(&binding.gang, now);
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
                for pod in &evicted {
                    self.writer.submit(Write::PodEvent {
                        pod: Self::pod_ref(&cache, pod),
                        warning: true,
                        reason: "BindFailed".into(),
                        note: message.clone(),
                        action: "Evicting".into(),
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
                    self.evicting.insert(binding.gang.clone(), (now, evicted));
                }
            }
        }
    }

    /// One cycle at `now` (`unix`: the same in Unix seconds): place what fits, start its
    /// binding, tell waiting pods why, and run the safety net and claim releases.
    pub fn cycle(&mut self, now: Instant, unix: i64) -> CycleReport {
        let metrics = self.metrics.clone();
        let phase = |name: &str, since: Instant| {
            metrics.cycle_phase_duration.with_label_values(&[name]).observe(since.elapsed().as_secs_f64())
        };
        let started = Instant::now();
        let mut report = CycleReport::default();
        let cache_handle = self.cache.clone();
        // Every pod bound or being bound, and the housekeeping not due: nothing to do but
        // look again when it is (the timers it sets are set again then).
        let housekeeping_at = self.housekeeping_at();
        if now < housekeeping_at && !cache_handle.lock().unwrap_or_else(|e| e.into_inner()).has_unplaced() {
            self.next_wake = Some(housekeeping_at);
            return report;
        }
        // What the cycle reads, taken under the lock by reference counts; the snapshot is
        // assembled with the lock released, so watch events keep being applied meanwhile.
        let (shared, helped, touched) = {
            let mut cache = cache_handle.lock().unwrap_or_else(|e| e.into_inner());
            let touched = cache.changes.take_touched();
            (cache.shared(self.memo.seen()), cache.changes.helped(), touched)
        };
        let mut assembled = assemble_view(&shared.view(), &self.config.scheduler_name, unix, &mut self.memo);
        drop(shared);
        phase("assemble", started);
        decide::log_queue_notes(&assembled.snapshot.queues, &mut self.queue_notes);
        self.metrics.pending_gangs.set(assembled.snapshot.gangs.len() as i64);
        self.metrics.pending_pods.set(
            (assembled.snapshot.gangs.iter().map(|g| g.pods.len()).sum::<usize>() + assembled.rejected_pods.len())
                as i64,
        );
        let pending: HashSet<&GangKey> = assembled.snapshot.gangs.iter().map(|g| &g.key).collect();
        self.backoff.retain(now, |g| pending.contains(g));
        drop(pending);
        let (backoff, in_flight) = (&self.backoff, &self.in_flight);
        assembled.snapshot.gangs.retain(|g| !backoff.waiting(&g.key, now) && !in_flight.contains(&g.key));
        let parked = self.pool.mark(&mut assembled.snapshot.gangs, helped, &touched, now, unix);
        self.metrics.parked_gangs.set(parked as i64);
        // Gangs being bound or evicted are nobody's victims.
        let evicting = &self.evicting;
        assembled.snapshot.running.retain(|r| !in_flight.contains(&r.key) && !evicting.contains_key(&r.key));
        assembled.snapshot.reservations = std::mem::take(&mut self.reservations);

        let cel_started = Instant::now();
        let evaluations_before = self.memory.selectors.evaluations;
        decide::warm_selectors(&assembled.snapshot, &mut self.memory.selectors);
        if self.memory.selectors.evaluations > evaluations_before {
            self.metrics.cel_evaluation_duration.observe(cel_started.elapsed().as_secs_f64());
            self.metrics.cel_evaluations.inc_by(self.memory.selectors.evaluations - evaluations_before);
        }
        phase("cel", cel_started);
        let engine_started = Instant::now();
        let evaluations_before = self.memory.selectors.evaluations;
        let outcome = schedule_remembering(&assembled.snapshot, &self.cycle_config, &mut self.memory);
        self.metrics.cel_evaluations.inc_by(self.memory.selectors.evaluations - evaluations_before);
        phase("engine", engine_started);
        tracing::debug!(placed = outcome.placements.len(), waiting = outcome.waiting.len(), elapsed = ?started.elapsed(), "cycle");
        self.reservations = outcome.reservations.clone();

        let plan_started = Instant::now();
        // The rest reads the cache again (the engine ran without holding it).
        let cache = cache_handle.lock().unwrap_or_else(|e| e.into_inner());
        let view = cache.view();
        // Gangs by key, so placements and waits find theirs without scanning every gang.
        let gang_index: HashMap<&GangKey, &crate::engine::model::Gang> =
            assembled.snapshot.gangs.iter().map(|g| (&g.key, g)).collect();
        let mut bindings = Vec::with_capacity(outcome.placements.len());
        for placement in &outcome.placements {
            let gang = gang_index[&placement.gang];
            let pods: Vec<(PodKey, String)> = placement
                .pods
                .iter()
                .map(|(pod, node)| (pod.clone(), assembled.snapshot.nodes[*node as usize].name.clone()))
                .collect();
            let uids = pods.iter().filter_map(|(pod, _)| Some((pod.clone(), cache.uid(pod)?))).collect();
            let (claims, assumed) = claims::plan(
                &assembled.snapshot.dra,
                &placement.claims,
                &uids,
                |key| cache.resource_claims.get(&key.namespace, &key.name).cloned(),
                |pod| {
                    let pod = cache.pods.get(&pod.namespace, &pod.name)?;
                    crate::convert::dra::fraction_claim_entry(pod).map(str::to_string)
                },
            );
            bindings.push((
                GangBinding {
                    gang: placement.gang.clone(),
                    queue: gang.queue.clone(),
                    needed: gang.still_needed(),
                    min_member: gang.min_member,
                    created: gang.created,
                    pods,
                    uids,
                    claims,
                    opportunistic: placement.opportunistic.clone(),
                },
                assumed,
            ));
        }

        // What waiting pods are told, and what wakes the loop for a gang that will be old
        // enough for a reservation.
        self.next_wake = self.backoff.next_due(now);
        let mut writes = Vec::new();
        for waiting in &outcome.waiting {
            // A parked gang was not tried: it keeps what it was told.
            let parked = match waiting.reason {
                WaitReason::Unchanged => self.pool.parked(&waiting.gang).map(|(m, due)| (m.to_string(), due)),
                _ => None,
            };
            let message = parked.as_ref().map_or_else(|| waiting.to_string(), |(m, _)| m.clone());
            let result = match waiting.reason {
                WaitReason::DeviceError { .. } | WaitReason::Blocked(_) => "error",
                _ => "unschedulable",
            };
            if parked.is_none() {
                self.metrics.gang_attempts.with_label_values(&[result]).inc();
            }
            tracing::debug!(gang = %waiting.gang, reason = %message, "waiting");
            if let Some(&gang) = gang_index.get(&waiting.gang) {
                for pod in &gang.pods {
                    writes
                        .push(Write::Unschedulable { pod: Self::pod_ref(&cache, &pod.key), message: message.clone() });
                }
                let reserve_after =
                    matches!(self.config.queueing, QueueingStrategy::Backfill | QueueingStrategy::TimedBackfill)
                        .then_some(self.cycle_config.reserve_after_seconds);
                let due = match &parked {
                    Some((_, due)) => *due,
                    None => decide::looks_again_at(waiting, gang.created, reserve_after, unix),
                };
                if let Some(due) = due {
                    self.wake_at(now + Duration::from_secs((due - unix).max(0) as u64));
                }
                if parked.is_none() {
                    self.pool.park(&waiting.gang, &waiting.reason, &message, due, helped, now);
                }
            }
            report.waiting.push((waiting.gang.clone(), message.clone()));
            self.unreported_waits.insert(waiting.gang.clone(), message);
        }
        if let Some(at) = self.pool.next_flush() {
            self.wake_at(at);
        }
        for (pod, why) in &assembled.rejected_pods {
            writes.push(Write::Unschedulable { pod: Self::pod_ref(&cache, pod), message: why.clone() });
        }

        for write in self.queue_evictions(&cache, &outcome, &assembled.snapshot, now, &mut report) {
            writes.push(write);
        }
        // A reservation that lapses frees its nodes: look again then.
        if let Some(until) = self.reservations.iter().map(|r| r.until).min() {
            self.wake_at(now + Duration::from_secs((until - unix).max(0) as u64 + 1));
        }
        decide::log_device_key_problems(&outcome.queues, &mut self.queue_notes);
        for placement in &outcome.placements {
            self.unreported_waits.remove(&placement.gang);
        }
        if now >= housekeeping_at {
            self.housekeeping_due = now + HOUSEKEEPING_EVERY;
            let seen = housekeeping::Seen { view: &view, assembled: &assembled, outcome: &outcome };
            writes.extend(self.housekeep(&cache, seen, now, unix, &mut report));
        } else {
            self.wake_at(housekeeping_at);
        }
        drop(view);

        // Decisions applied: placed gangs assumed and bound, the rest written in the background.
        let mut cache = cache;
        for (binding, assumed) in &bindings {
            for (pod, node) in &binding.pods {
                cache.assume(pod.clone(), node.clone());
            }
            for (pod, claim) in assumed {
                cache.assume_claim(pod, claim.clone());
            }
        }
        drop(cache);
        for (binding, _) in bindings {
            report.placed.push(binding.gang.clone());
            self.start_binding(binding);
        }
        for write in writes {
            self.writer.submit(write);
        }
        phase("plan", plan_started);
        self.metrics.cycle_duration.observe(started.elapsed().as_secs_f64());
        self.metrics.last_cycle.set(unix_now() as f64);
        self.health.cycled(started);
        report
    }

    /// When the next housekeeping pass is due: `HOUSEKEEPING_EVERY` after the last, or
    /// `HOUSEKEEPING_HOLD` after it while bindings are in flight.
    fn housekeeping_at(&self) -> Instant {
        if self.binds.is_empty() {
            self.housekeeping_due
        } else {
            self.housekeeping_due + HOUSEKEEPING_HOLD.saturating_sub(HOUSEKEEPING_EVERY)
        }
    }

    fn start_binding(&mut self, binding: GangBinding) {
        self.in_flight.insert(binding.gang.clone());
        let (binder, metrics, slots) = (self.binder.clone(), self.metrics.clone(), self.bind_slots.clone());
        // Statuses and events wait while bindings are in flight (up to the writer's hold).
        let in_flight = self.writer.binding();
        let span =
            tracing::info_span!("gang", gang = %binding.gang, pods = binding.pods.len(), needed = binding.needed);
        let kept = binding.clone();
        let task = self.binds.spawn(
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
        self.bind_tasks.insert(task.id(), kept);
    }
}
