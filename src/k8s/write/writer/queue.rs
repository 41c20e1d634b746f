//! The writer's queue: the newest wanted state per key, in the order keys were first
//! queued; statuses and events kept apart, so that they give way to every other write and
//! to bindings.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::{Write, WriteKey};
use crate::k8s::write::refusals::Refused;

/// Events written at once, at most. Events only inform: a wave of "Scheduled" events must
/// not take the API server's time from the bindings and conditions that follow them (kube-
/// scheduler's event broadcaster sends one at a time, too).
const EVENTS_AT_ONCE: usize = 2;

/// Events waiting at most; past it, the oldest waiting is dropped (counted as a `dropped`
/// write). Events only inform, and a burst of 20,000 bindings must not hold 20,000 of them:
/// client-go's event broadcaster drops past 1,000 queued the same way.
pub(super) const EVENTS_QUEUED: usize = 4096;

/// While bindings are in flight, a status or event waits for them to end, at most this
/// long: a burst of bindings has the API server to itself, and nothing waits for ever.
/// Past it, statuses and events go one at a time while bindings last (`INFORMING_IN_BURST`).
pub(super) const HOLD: Duration = Duration::from_secs(5);

/// Statuses and events written at once while bindings are in flight: a trickle that keeps
/// them moving through a long burst without taking the API server from the bindings.
const INFORMING_IN_BURST: usize = 1;

/// Keys in the order they were first queued, with when.
type Held = VecDeque<(WriteKey, Instant)>;

#[derive(Default)]
pub(super) struct Queue {
    /// The newest wanted state per key not yet taken by a worker.
    pub(super) pending: HashMap<WriteKey, Write>,
    /// Keys in the order they were first queued, statuses and events apart: pod
    /// conditions (read by autoscalers), evictions, claim releases.
    pub(super) order: VecDeque<WriteKey>,
    /// PodGroup and Queue statuses: taken after `order`, and while bindings are in
    /// flight only once `HOLD` old.
    pub(super) statuses: Held,
    /// Events: taken after statuses, at most `EVENTS_AT_ONCE` at a time, held as they are.
    pub(super) events: Held,
    /// Bindings in flight (`Writer::binding`).
    pub(super) bindings: usize,
    /// Keys a worker is writing now: their next state waits in `pending`.
    pub(super) busy: HashSet<WriteKey>,
    /// Events being written now.
    pub(super) events_busy: usize,
    /// Statuses and events being written now.
    pub(super) informing_busy: usize,
    /// The state last written per key, so an unchanged one is not written again (but for
    /// `Scheduled` events, see `Write::repeats`).
    pub(super) written: HashMap<WriteKey, Write>,
    /// Evictions refused so far, by key; a key here is not taken before its `not_before`.
    pub(super) refused: HashMap<WriteKey, Refused>,
}

impl Queue {
    /// Queues `key` in its lane; returns how many waiting events were dropped for it.
    pub(super) fn push(&mut self, key: WriteKey) -> usize {
        match key {
            WriteKey::PodEvent(..) => {
                self.events.push_back((key, Instant::now()));
                let mut dropped = 0;
                while self.events.len() > EVENTS_QUEUED {
                    let Some((oldest, _)) = self.events.pop_front() else { break };
                    // An entry whose state was taken back meanwhile drops nothing.
                    dropped += usize::from(self.pending.remove(&oldest).is_some());
                }
                return dropped;
            }
            _ if informs(&key) => self.statuses.push_back((key, Instant::now())),
            _ => self.order.push_back(key),
        }
        0
    }

    /// The next key to take: queued, not being written by another worker, and not a
    /// refused eviction still waiting out its delay; statuses, then events, after
    /// everything else, and while bindings are in flight only those held `HOLD` already,
    /// one at a time.
    pub(super) fn next_key(&mut self, now: Instant) -> Option<WriteKey> {
        let Queue { order, statuses, events, busy, refused, events_busy, informing_busy, bindings, .. } = self;
        let ready = |key: &WriteKey| !busy.contains(key) && refused.get(key).is_none_or(|r| r.not_before <= now);
        if let Some(position) = order.iter().position(ready) {
            return order.remove(position);
        }
        if *bindings > 0 && *informing_busy >= INFORMING_IN_BURST {
            return None;
        }
        let held = |at: &Instant| *bindings > 0 && *at + HOLD > now;
        // Held keys are queued oldest first: the first one still held ends the search.
        let take = |lane: &mut Held| {
            let position = lane.iter().take_while(|(_, at)| !held(at)).position(|(key, _)| ready(key))?;
            lane.remove(position).map(|(key, _)| key)
        };
        if let Some(key) = take(statuses) {
            return Some(key);
        }
        if *events_busy >= EVENTS_AT_ONCE {
            return None;
        }
        take(events)
    }

    /// When the oldest status or event held for bindings in flight may go, if one is held.
    pub(super) fn held_until(&self) -> Option<Instant> {
        let oldest =
            [&self.statuses, &self.events].into_iter().filter_map(|lane| lane.front()).map(|(_, at)| *at).min();
        oldest.filter(|_| self.bindings > 0).map(|at| at + HOLD)
    }

    /// Whether a status or event waits.
    pub(super) fn holds(&self) -> bool {
        !self.statuses.is_empty() || !self.events.is_empty()
    }

    pub(super) fn claim(&mut self, key: &WriteKey) {
        if self.busy.insert(key.clone()) {
            self.events_busy += usize::from(matches!(key, WriteKey::PodEvent(..)));
            self.informing_busy += usize::from(informs(key));
        }
    }

    pub(super) fn release(&mut self, key: &WriteKey) {
        if self.busy.remove(key) {
            self.events_busy -= usize::from(matches!(key, WriteKey::PodEvent(..)));
            self.informing_busy -= usize::from(informs(key));
        }
    }
}

/// A status or an event: what only informs.
fn informs(key: &WriteKey) -> bool {
    matches!(
        key,
        WriteKey::PodEvent(..) | WriteKey::MusterGroup(..) | WriteKey::KubernetesGroup(..) | WriteKey::Queue(..)
    )
}
