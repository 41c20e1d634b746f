//! The part of a cycle that reads the whole cache rather than what changed: the safety net,
//! claim releases and give-backs, PodGroup and queue statuses, GPU figures, and the
//! writer's memory of pods that are gone. It runs at most every `HOUSEKEEPING_EVERY`, so
//! the burst of cycles that follows a wave of bindings pays for it once, and while bindings
//! are in flight at most every `HOUSEKEEPING_HOLD` (5 s): its clocks count in seconds, so a
//! pass half a second later changes no outcome, and during a burst the safety net, claim
//! releases, give-backs and statuses lag it by up to 5 s.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::{CycleReport, Scheduler, decide, seconds_since};
use crate::convert::assemble::{Assembled, ClusterView};
use crate::engine::model::GangKey;
use crate::engine::queues::DEFAULT_QUEUE;
use crate::engine::{CycleMemory, CycleOutcome};
use crate::k8s::store::cache::Cache;
use crate::k8s::write::writer::{Write, WriteKey};

/// How long a gang whose eviction was sent is left alone by the safety net, at most, while
/// the watch has not shown its pods going.
const EVICTING_FOR: Duration = Duration::from_secs(30);

/// What this cycle saw, for the pass.
pub(super) struct Seen<'a, 'v> {
    pub view: &'a ClusterView<'v>,
    pub assembled: &'a Assembled,
    pub outcome: &'a CycleOutcome,
    /// What the engine keeps between cycles (the page shows its mix of pod kinds).
    pub memory: &'a mut CycleMemory,
}

impl Scheduler {
    /// One pass over the whole cache; returns what it writes.
    pub(super) fn housekeep(
        &mut self,
        cache: &Cache,
        seen: Seen<'_, '_>,
        now: Instant,
        unix: i64,
        report: &mut CycleReport,
    ) -> Vec<Write> {
        let Seen { view, assembled, outcome, memory } = seen;
        let mut writes = Vec::new();
        let members = crate::convert::groups::members(view, &self.config.scheduler_name);
        self.owes.evicting.retain(|gang, (since, pods)| {
            since.elapsed() < EVICTING_FOR
                && pods.iter().any(|p| {
                    cache.pods.get(&p.namespace, &p.name).is_some_and(|pod| pod.metadata.deletion_timestamp.is_none())
                })
                && members.contains_key(gang)
        });
        let busy: HashSet<GangKey> = self
            .owes
            .in_flight
            .iter()
            .chain(outcome.placements.iter().map(|p| &p.gang))
            .chain(self.owes.evicting.keys())
            .cloned()
            .collect();
        let evictions = self.owes.safety.check(view, &assembled.specs, &members, &self.config, &busy, unix);
        for eviction in &evictions {
            self.caches
                .last_eviction
                .insert(eviction.gang.clone(), (eviction.reason.as_str(), eviction.message.clone(), unix));
            let queue = assembled.snapshot.queue_of(&eviction.gang).unwrap_or(DEFAULT_QUEUE);
            self.measures.metrics.evicted(eviction.reason.as_str(), queue, &eviction.gang.namespace);
            self.measures.awaiting_running.remove(&eviction.gang);
            tracing::warn!(gang = %eviction.gang, reason = eviction.reason.as_str(), pods = eviction.pods.len(), "{}", eviction.message);
            let reason = eviction.reason.as_str();
            writes.extend(Self::eviction_writes(cache, &eviction.gang, &eviction.pods, reason, &eviction.message));
            self.owes.evicting.insert(eviction.gang.clone(), (now, eviction.pods.clone()));
            self.caches.backoff.fail(&eviction.gang, now);
            report.evicted.push(eviction.gang.clone());
        }
        for release in self.owes.releases.check(view, unix) {
            writes.push(Write::ReleaseClaim(release));
        }
        // Devices held for pods that are not bound and whose gang is not being placed.
        let given_back = crate::k8s::scheduling::claim_giveback::give_back(view, &self.config.scheduler_name, &busy);
        self.measures.metrics.claims_given_back.inc_by(given_back.len() as u64);
        writes.extend(given_back.into_iter().map(Write::ReleaseClaim));
        let (queue_reports, queue_writes) =
            decide::queue_statuses(&assembled.snapshot, &outcome.queues, &cache.queues, unix);
        crate::figures::queue_status::export(&queue_reports, &assembled.snapshot.resources, &self.measures.metrics);
        writes.extend(queue_writes);
        let waits = std::mem::take(&mut self.owes.unreported_waits);
        writes.extend(decide::group_statuses(
            view,
            &assembled.specs,
            &members,
            &waits,
            &self.caches.last_eviction,
            unix,
        ));
        let gpus = crate::figures::gpus::gpu_usage(view, &assembled.groups, &self.config.topology);
        gpus.export(&self.measures.metrics);
        let holdings = crate::figures::usage::holdings(view, &assembled.specs, &self.config.scheduler_name);
        self.measures.metrics.ledger.update(holdings, crate::metrics::ledger::unix_now());
        if self.ui.is_some() {
            self.publish_view(assembled, outcome, &queue_reports, waits, &gpus, memory);
        }
        for created in decide::now_running(&members, &mut self.measures.awaiting_running) {
            self.measures.metrics.gang_waiting.with_label_values(&["running"]).observe(seconds_since(created));
        }
        for due in [self.owes.releases.next_due(), self.owes.safety.next_due()].into_iter().flatten() {
            self.wake_at(now + Duration::from_secs((due - unix).max(0) as u64 + 1));
        }
        // What was written for pods that are gone is forgotten.
        self.writer.retain(|key| match key {
            WriteKey::PodCondition(pod) | WriteKey::PodEvent(pod, ..) | WriteKey::Evict(pod) => {
                cache.pods.get(&pod.namespace, &pod.name).is_some_and(|p| p.metadata.uid == pod.uid)
            }
            _ => true,
        });
        writes
    }

    /// Builds the page's view from this pass's figures and publishes it.
    fn publish_view(
        &mut self,
        assembled: &Assembled,
        outcome: &CycleOutcome,
        queues: &[crate::engine::admission::report::QueueReport],
        waits: HashMap<GangKey, String>,
        gpus: &crate::figures::gpus::GpuUsage,
        memory: &mut CycleMemory,
    ) {
        // A gang keeps its last reason while it waits (a gang in backoff or parked is not
        // told again each cycle); placed, being bound or gone, it leaves the list.
        self.caches.waits.extend(waits);
        let pending: HashSet<&GangKey> = assembled.gang_of.values().collect();
        let placed: HashSet<&GangKey> = outcome.placements.iter().map(|p| &p.gang).collect();
        let in_flight = &self.owes.in_flight;
        self.caches.waits.retain(|g, _| pending.contains(g) && !placed.contains(g) && !in_flight.contains(g));
        let kinds = memory.capacity.mix.top();
        let inputs = crate::ui::build::Inputs {
            scheduler_name: &self.config.scheduler_name,
            assembled,
            queues,
            waits: &self.caches.waits,
            gpus,
            kinds: Some(&kinds),
            now: assembled.snapshot.now,
        };
        let view = crate::ui::build::build(&inputs);
        if let Some(board) = &self.ui {
            board.publish(view);
        }
    }
}
