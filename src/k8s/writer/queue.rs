//! The writer's queue: the newest wanted state per key, in the order keys were first
//! queued, with events kept apart so they give way to every other write.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{Write, WriteKey};
use crate::k8s::refusals::Refused;

/// Events written at once, at most. Events only inform: a wave of "Scheduled" events must
/// not take the API server's time from the bindings and conditions that follow them (kube-
/// scheduler's event broadcaster sends one at a time, too).
const EVENTS_AT_ONCE: usize = 2;

#[derive(Default)]
pub(super) struct Queue {
    /// The newest wanted state per key not yet taken by a worker.
    pub(super) pending: HashMap<WriteKey, Write>,
    /// Keys in the order they were first queued, events apart.
    pub(super) order: VecDeque<WriteKey>,
    /// Events' keys in the order they were first queued: taken after every other write,
    /// at most `EVENTS_AT_ONCE` at a time.
    pub(super) events: VecDeque<WriteKey>,
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
            WriteKey::PodEvent(..) => self.events.push_back(key),
            _ => self.order.push_back(key),
        }
    }

    /// The next key to take out of its order: queued, not being written by another worker,
    /// and not a refused eviction still waiting out its delay; events after everything else.
    pub(super) fn next_key(&mut self, now: tokio::time::Instant) -> Option<WriteKey> {
        let Queue { order, events, busy, refused, events_busy, .. } = self;
        let ready = |key: &WriteKey| !busy.contains(key) && refused.get(key).is_none_or(|r| r.not_before <= now);
        if let Some(position) = order.iter().position(ready) {
            return order.remove(position);
        }
        if *events_busy >= EVENTS_AT_ONCE {
            return None;
        }
        let position = events.iter().position(ready)?;
        events.remove(position)
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
