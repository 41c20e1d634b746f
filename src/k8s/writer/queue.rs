//! The writer's queue: the newest wanted state per key, in the order keys were first
//! queued, with events kept apart so they give way to every other write and to bindings.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::{Write, WriteKey};
use crate::k8s::refusals::Refused;

/// Events written at once, at most. Events only inform: a wave of "Scheduled" events must
/// not take the API server's time from the bindings and conditions that follow them (kube-
/// scheduler's event broadcaster sends one at a time, too).
const EVENTS_AT_ONCE: usize = 2;

/// While bindings are in flight, an event waits for them to end, at most this long: a
/// burst of bindings has the API server to itself, and no event waits for ever.
pub(super) const EVENT_HOLD: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(super) struct Queue {
    /// The newest wanted state per key not yet taken by a worker.
    pub(super) pending: HashMap<WriteKey, Write>,
    /// Keys in the order they were first queued, events apart.
    pub(super) order: VecDeque<WriteKey>,
    /// Events' keys in the order they were first queued, with when: taken after every
    /// other write, at most `EVENTS_AT_ONCE` at a time, and while bindings are in flight
    /// only once `EVENT_HOLD` old.
    pub(super) events: VecDeque<(WriteKey, Instant)>,
    /// Bindings in flight (`Writer::binding`).
    pub(super) bindings: usize,
    /// Keys a worker is writing now: their next state waits in `pending`.
    pub(super) busy: HashSet<WriteKey>,
    /// Events being written now.
    pub(super) events_busy: usize,
    /// The state last written per key, so an unchanged one is not written again.
    pub(super) written: HashMap<WriteKey, Write>,
    /// Evictions refused so far, by key; a key here is not taken before its `not_before`.
    pub(super) refused: HashMap<WriteKey, Refused>,
}

impl Queue {
    pub(super) fn push(&mut self, key: WriteKey) {
        match key {
            WriteKey::PodEvent(..) => self.events.push_back((key, Instant::now())),
            _ => self.order.push_back(key),
        }
    }

    /// The next key to take out of its order: queued, not being written by another worker,
    /// and not a refused eviction still waiting out its delay; events after everything
    /// else, and while bindings are in flight, only those held `EVENT_HOLD` already.
    pub(super) fn next_key(&mut self, now: Instant) -> Option<WriteKey> {
        let Queue { order, events, busy, refused, events_busy, bindings, .. } = self;
        let ready = |key: &WriteKey| !busy.contains(key) && refused.get(key).is_none_or(|r| r.not_before <= now);
        if let Some(position) = order.iter().position(ready) {
            return order.remove(position);
        }
        if *events_busy >= EVENTS_AT_ONCE {
            return None;
        }
        let held = |at: &Instant| *bindings > 0 && *at + EVENT_HOLD > now;
        // Events are queued oldest first: the first one still held ends the search.
        let position = events.iter().take_while(|(_, at)| !held(at)).position(|(key, _)| ready(key))?;
        events.remove(position).map(|(key, _)| key)
    }

    /// When the oldest event held for bindings in flight may go, if one is held.
    pub(super) fn events_held_until(&self) -> Option<Instant> {
        self.events.front().filter(|_| self.bindings > 0).map(|(_, at)| *at + EVENT_HOLD)
    }

    pub(super) fn claim(&mut self, key: &WriteKey) {
        if matches!(key, WriteKey::PodEvent(..)) {
            self.events_busy += 1;
        }
        self.busy.insert(key.clone());
    }

    pub(super) fn release(&mut self, key: &WriteKey) {
        if self.busy.remove(key) && matches!(key, WriteKey::PodEvent(..)) {
            self.events_busy -= 1;
        }
    }
}
