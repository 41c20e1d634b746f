//! The engine's reclaim and preemption, written: evictions, events and what the loop
//! remembers of them.

use std::time::Instant;

use super::{CycleReport, Scheduler};
use crate::engine::model::{GangKey, PodKey};
use crate::engine::preempt::EvictionReason;
use crate::engine::queues::DEFAULT_QUEUE;
use crate::k8s::store::cache::Cache;
use crate::k8s::write::writer::Write;

impl Scheduler {
    /// Each pod of `gang` evicted, with a warning event whose note says why.
    pub(super) fn eviction_writes(
        cache: &Cache,
        gang: &GangKey,
        pods: &[PodKey],
        reason: &str,
        note: &str,
    ) -> Vec<Write> {
        let mut writes = Vec::with_capacity(pods.len() * 2);
        for pod in pods {
            let pod = Self::pod_ref(cache, pod);
            writes.push(Write::Evict { pod: pod.clone(), gang: gang.to_string() });
            writes.push(Write::PodEvent {
                pod,
                warning: true,
                reason: reason.into(),
                note: note.into(),
                action: "Evicting".into(),
            });
        }
        writes
    }

    /// Reclaim and preemption decided by the engine: every victim pod evicted through the
    /// Eviction API with an event naming the gang it makes room for, the victim gang's
    /// PodGroup condition `Evicted`, and an event on the gang room is made for.
    pub(super) fn queue_evictions(
        &mut self,
        cache: &Cache,
        outcome: &crate::engine::CycleOutcome,
        snapshot: &crate::engine::model::Snapshot,
        now: Instant,
        report: &mut CycleReport,
    ) -> Vec<Write> {
        let mut writes = Vec::new();
        for eviction in &outcome.evictions {
            let reason = eviction.reason.as_str();
            let what = if eviction.whole {
                format!("{} evicted whole", eviction.gang)
            } else {
                format!("{} pod(s) of {} above its minMember evicted", eviction.pods.len(), eviction.gang)
            };
            let message = match eviction.reason {
                EvictionReason::Reclaimed => {
                    format!(
                        "{what} ({reason}) to make room for {}, whose queue is owed this capacity",
                        eviction.preemptor
                    )
                }
                EvictionReason::Preempted => {
                    format!("{what} ({reason}) to make room for {}, of higher priority", eviction.preemptor)
                }
                EvictionReason::Opportunistic => format!(
                    "{what} ({reason}) to make room for the reservation of {}; it ran opportunistically in held capacity",
                    eviction.preemptor
                ),
            };
            tracing::info!(gang = %eviction.gang, preemptor = %eviction.preemptor, reason, pods = eviction.pods.len(), "{message}");
            self.measures.metrics.evicted(
                reason,
                snapshot.queue_of(&eviction.gang).unwrap_or(DEFAULT_QUEUE),
                &eviction.gang.namespace,
            );
            self.caches.last_eviction.insert(eviction.gang.clone(), (reason, message.clone(), snapshot.now));
            writes.extend(Self::eviction_writes(cache, &eviction.gang, &eviction.pods, reason, &message));
            if eviction.whole {
                self.measures.awaiting_running.remove(&eviction.gang);
                self.owes.evicting.insert(eviction.gang.clone(), (now, eviction.pods.clone()));
                self.caches.backoff.fail(&eviction.gang, now);
                report.evicted.push(eviction.gang.clone());
            }
            if let Some(preemptor) = snapshot.gangs.iter().find(|g| g.key == eviction.preemptor) {
                for pod in &preemptor.pods {
                    writes.push(Write::PodEvent {
                        pod: Self::pod_ref(cache, &pod.key),
                        warning: false,
                        reason: match eviction.reason {
                            EvictionReason::Reclaimed => "Reclaiming",
                            EvictionReason::Preempted => "Preempting",
                            EvictionReason::Opportunistic => "ReclaimingReservation",
                        }
                        .into(),
                        note: format!(
                            "evicting {} pod(s) of {} ({reason}) to make room",
                            eviction.pods.len(),
                            eviction.gang
                        ),
                        action: "Evicting".into(),
                    });
                }
            }
        }
        writes
    }
}
