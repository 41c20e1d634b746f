//! The scheduling loop as the engine's driver ([`Driver`]), in named steps. The clock
//! ([`Driver::next`]) waits for a change, a timer or a binding's end; the source
//! ([`Driver::snapshot`]) takes what the cache holds and assembles the snapshot
//! ([`Scheduler::assemble`]), leaves out what is in backoff, being bound or parked
//! ([`Scheduler::leave_out`]) and warms the CEL selectors; the sink ([`Driver::decided`])
//! turns the placements into bindings ([`bindings`]), tells waiting gangs why and when they
//! are looked at again ([`Scheduler::tell_waiting`]), and applies it all: assume and bind,
//! write the rest in the background.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::{CycleReport, DEBOUNCE, HOUSEKEEPING_EVERY, Scheduler, decide, housekeeping, unix_now};
use crate::config::QueueingPolicy;
use crate::convert::assemble::{Assembled, assemble_view};
use crate::convert::status::Unplaced;
use crate::engine::drive::Driver;
use crate::engine::model::{DelayedClaim, Gang, GangKey, PodKey, Snapshot};
use crate::engine::reason::WaitReason;
use crate::engine::{CycleMemory, CycleOutcome};
use crate::k8s::store::cache::Cache;
use crate::k8s::write::bind::GangBinding;
use crate::k8s::write::writer::Write;
use crate::k8s::write::{claims, volumes};

/// A placement as the binder takes it, with the claims to assume in the cache meanwhile.
type Binding = (GangBinding, Vec<(PodKey, k8s_openapi::api::resource::v1::ResourceClaim)>);

/// The cycle in progress between the source and the sink: the snapshot the engine decides
/// on, with what the sink needs of how it was made.
pub(super) struct Pending {
    assembled: Assembled,
    /// How many changes helped every gang since the last cycle.
    helped: u64,
    started: Instant,
    engine_started: Instant,
    /// CEL evaluations before the engine ran.
    evaluations: u64,
}

impl Scheduler {
    /// One cycle at `now` (`unix`: the same in Unix seconds): place what fits, start its
    /// binding, tell waiting pods why, and run the safety net and claim releases.
    pub fn cycle(&mut self, now: Instant, unix: i64) -> CycleReport {
        self.owes.now = now;
        // The engine drives this scheduler: out of it while it does.
        let mut engine = std::mem::take(&mut self.caches.engine);
        engine.cycle(self, unix);
        self.caches.engine = engine;
        std::mem::take(&mut self.measures.report)
    }
}

impl Driver for Scheduler {
    /// After every change (debounced), every timer that falls due and every binding that
    /// ends; binding outcomes are taken first.
    async fn next(&mut self) -> Option<i64> {
        let wake = self.wake.clone()?;
        let timer = tokio::time::sleep_until(
            self.owes.next_wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)).into(),
        );
        tokio::select! {
            _ = wake.woken() => {}
            _ = timer => {}
            Some(joined) = self.owes.binds.join_next_with_id(), if !self.owes.binds.is_empty() => self.on_joined(joined),
        }
        tokio::time::sleep(DEBOUNCE).await;
        while let Some(joined) = self.owes.binds.try_join_next_with_id() {
            self.on_joined(joined);
        }
        self.owes.now = Instant::now();
        Some(unix_now())
    }

    /// The snapshot of what waits, or None when every pod is bound or being bound and the
    /// housekeeping is not due: nothing to do but look again when it is (the timers it
    /// sets are set again then).
    fn snapshot(&mut self, unix: i64, memory: &mut CycleMemory) -> Option<&mut Snapshot> {
        let (started, now) = (Instant::now(), self.owes.now);
        self.measures.report = CycleReport::default();
        let housekeeping_at = self.housekeeping_at();
        if now < housekeeping_at && !self.cache.lock().unwrap_or_else(|e| e.into_inner()).has_unplaced() {
            self.owes.next_wake = Some(housekeeping_at);
            return None;
        }
        let (mut assembled, helped, touched) = self.assemble(unix);
        self.phase("assemble", started);
        self.leave_out(&mut assembled, helped, &touched, now, unix);
        self.warm_selectors(&assembled, memory);
        let evaluations = memory.selectors.evaluations;
        let pending = Pending { assembled, helped, started, engine_started: Instant::now(), evaluations };
        Some(&mut self.owes.pending.insert(pending).assembled.snapshot)
    }

    /// The engine's decisions applied: placed gangs assumed and bound, the rest written in
    /// the background.
    fn decided(&mut self, outcome: CycleOutcome, memory: &mut CycleMemory) {
        let Pending { assembled, helped, started, engine_started, evaluations } =
            self.owes.pending.take().expect("a cycle decides on the snapshot its source gave");
        self.measures.metrics.cel_evaluations.inc_by(memory.selectors.evaluations - evaluations);
        self.phase("engine", engine_started);
        tracing::debug!(placed = outcome.placements.len(), waiting = outcome.waiting.len(), elapsed = ?started.elapsed(), "cycle");
        let (now, unix) = (self.owes.now, assembled.snapshot.now);
        let mut report = CycleReport::default();
        let plan_started = Instant::now();
        let housekeeping_at = self.housekeeping_at();
        // The rest reads the cache again (the engine ran without holding it).
        let cache_handle = self.cache.clone();
        let cache = cache_handle.lock().unwrap_or_else(|e| e.into_inner());
        let view = cache.view();
        // Gangs by key, so placements and waits find theirs without scanning every gang.
        let gang_index: HashMap<&GangKey, &Gang> = assembled.snapshot.gangs.iter().map(|g| (&g.key, g)).collect();
        let bindings = bindings(&cache, &assembled, &outcome, &gang_index);
        self.owes.next_wake = self.caches.backoff.next_due(now);
        let mut writes = self.tell_waiting(&cache, &gang_index, &outcome, helped, now, unix, &mut report);
        for (pod, rejected) in &assembled.rejected_pods {
            let (message, unplaced) = (rejected.why.clone(), rejected.unplaced);
            writes.push(Write::Unschedulable { pod: Self::pod_ref(&cache, pod), message, unplaced });
        }
        writes.extend(self.queue_evictions(&cache, &outcome, &assembled.snapshot, now, &mut report));
        // A reservation that lapses frees its nodes: look again then.
        if let Some(until) = outcome.reservations.iter().map(|r| r.until).min() {
            self.wake_at(now + Duration::from_secs((until - unix).max(0) as u64 + 1));
        }
        decide::log_device_key_problems(&outcome.queues, &mut self.caches.queue_notes);
        for placement in &outcome.placements {
            self.owes.unreported_waits.remove(&placement.gang);
        }
        if now >= housekeeping_at {
            self.owes.housekeeping_due = now + HOUSEKEEPING_EVERY;
            let seen = housekeeping::Seen { view: &view, assembled: &assembled, outcome: &outcome, memory };
            writes.extend(self.housekeep(&cache, seen, now, unix, &mut report));
        } else {
            self.wake_at(housekeeping_at);
        }
        drop(view);
        drop(gang_index);

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
        self.phase("plan", plan_started);
        self.measures.metrics.cycle_duration.observe(started.elapsed().as_secs_f64());
        self.measures.metrics.last_cycle.set(unix_now() as f64);
        self.measures.health.cycled(started);
        self.measures.report = report;
    }
}

impl Scheduler {
    fn phase(&self, name: &str, since: Instant) {
        self.measures.metrics.cycle_phase_duration.with_label_values(&[name]).observe(since.elapsed().as_secs_f64());
    }

    /// What the cycle reads, taken under the cache's lock by reference counts, and the
    /// snapshot assembled with the lock released, so watch events keep being applied
    /// meanwhile; with the changes since the last cycle (how many helped every gang, and
    /// the gangs touched).
    fn assemble(&mut self, unix: i64) -> (Assembled, u64, HashSet<GangKey>) {
        let (shared, helped, touched) = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let touched = cache.changes.take_touched();
            (cache.shared(self.caches.memo.seen()), cache.changes.helped(), touched)
        };
        let assembled = assemble_view(&shared.view(), &self.config.scheduler_name, unix, &mut self.caches.memo);
        (assembled, helped, touched)
    }

    /// Leaves out of the snapshot the gangs in backoff or being bound, and marks those
    /// parked in the unschedulable pool; running gangs being bound or evicted are nobody's
    /// victims; reservations from the last cycle go in.
    fn leave_out(
        &mut self,
        assembled: &mut Assembled,
        helped: u64,
        touched: &HashSet<GangKey>,
        now: Instant,
        unix: i64,
    ) {
        decide::log_queue_notes(&assembled.snapshot.queues, &mut self.caches.queue_notes);
        self.measures.metrics.pending_gangs.set(assembled.snapshot.gangs.len() as i64);
        self.measures.metrics.pending_pods.set(
            (assembled.snapshot.gangs.iter().map(|g| g.pods.len()).sum::<usize>() + assembled.rejected_pods.len())
                as i64,
        );
        let pending: HashSet<&GangKey> = assembled.snapshot.gangs.iter().map(|g| &g.key).collect();
        self.caches.backoff.retain(now, |g| pending.contains(g));
        drop(pending);
        let (backoff, in_flight) = (&self.caches.backoff, &self.owes.in_flight);
        assembled.snapshot.gangs.retain(|g| !backoff.waiting(&g.key, now) && !in_flight.contains(&g.key));
        let parked = self.caches.pool.mark(&mut assembled.snapshot.gangs, helped, touched, now, unix);
        self.measures.metrics.parked_gangs.set(parked as i64);
        let evicting = &self.owes.evicting;
        assembled.snapshot.running.retain(|r| !in_flight.contains(&r.key) && !evicting.contains_key(&r.key));
    }

    /// The CEL selectors the engine will need, compiled and evaluated before it runs, so
    /// that their cost is measured apart.
    fn warm_selectors(&self, assembled: &Assembled, memory: &mut CycleMemory) {
        let cel_started = Instant::now();
        let evaluations_before = memory.selectors.evaluations;
        decide::warm_selectors(&assembled.snapshot, &mut memory.selectors);
        if memory.selectors.evaluations > evaluations_before {
            self.measures.metrics.cel_evaluation_duration.observe(cel_started.elapsed().as_secs_f64());
            self.measures.metrics.cel_evaluations.inc_by(memory.selectors.evaluations - evaluations_before);
        }
        self.phase("cel", cel_started);
    }

    /// What waiting pods are told, and what wakes the loop for a gang that will be old
    /// enough for a reservation. A parked gang was not tried: it keeps what it was told.
    #[allow(clippy::too_many_arguments)]
    fn tell_waiting(
        &mut self,
        cache: &Cache,
        gang_index: &HashMap<&GangKey, &Gang>,
        outcome: &CycleOutcome,
        helped: u64,
        now: Instant,
        unix: i64,
        report: &mut CycleReport,
    ) -> Vec<Write> {
        let mut writes = Vec::new();
        for waiting in &outcome.waiting {
            let parked = match waiting.reason {
                WaitReason::Unchanged => self.caches.pool.parked(&waiting.gang).map(|(m, due)| (m.to_string(), due)),
                _ => None,
            };
            let message = parked.as_ref().map_or_else(|| waiting.to_string(), |(m, _)| m.clone());
            let result = match waiting.reason {
                WaitReason::DeviceError { .. } | WaitReason::Blocked(_) => "error",
                _ => "unschedulable",
            };
            if parked.is_none() {
                self.measures.metrics.gang_attempts.with_label_values(&[result]).inc();
            }
            tracing::debug!(gang = %waiting.gang, reason = %message, "waiting");
            if let Some(&gang) = gang_index.get(&waiting.gang) {
                for pod in &gang.pods {
                    let (pod, message) = (Self::pod_ref(cache, &pod.key), message.clone());
                    writes.push(Write::Unschedulable { pod, message, unplaced: Unplaced::Unschedulable });
                }
                let reserve_after =
                    matches!(self.config.queueing, QueueingPolicy::Backfill | QueueingPolicy::TimedBackfill)
                        .then_some(self.cycle_config.reserve_after_seconds);
                let due = match &parked {
                    Some((_, due)) => *due,
                    None => decide::looks_again_at(waiting, gang.created, reserve_after, unix),
                };
                if let Some(due) = due {
                    self.wake_at(now + Duration::from_secs((due - unix).max(0) as u64));
                }
                if parked.is_none() {
                    self.caches.pool.park(&waiting.gang, &waiting.reason, &message, due, helped, now);
                }
            }
            report.waiting.push((waiting.gang.clone(), message.clone()));
            self.owes.unreported_waits.insert(waiting.gang.clone(), message);
        }
        if let Some(at) = self.caches.pool.next_flush() {
            self.wake_at(at);
        }
        writes
    }
}

/// The cycle's placements as bindings: each pod with its node, the uids the binds are
/// conditioned on, and the claim writes with the claims to assume meanwhile.
fn bindings(
    cache: &Cache,
    assembled: &Assembled,
    outcome: &CycleOutcome,
    gang_index: &HashMap<&GangKey, &Gang>,
) -> Vec<Binding> {
    let mut bindings = Vec::with_capacity(outcome.placements.len());
    // Free volumes promised to delayed claims of the gangs bound before.
    let mut taken = Vec::new();
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
        let pending: HashMap<&PodKey, &[DelayedClaim]> =
            gang.pods.iter().map(|p| (&p.key, p.constraints.delayed.as_slice())).collect();
        let volumes = volumes::plan(
            placement.pods.iter().filter_map(|(pod, node)| {
                let delayed = pending.get(pod).filter(|d| !d.is_empty())?;
                Some((pod, *delayed, &assembled.snapshot.nodes[*node as usize]))
            }),
            &mut taken,
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
                volumes,
                opportunistic: placement.opportunistic.clone(),
            },
            assumed,
        ));
    }
    bindings
}
