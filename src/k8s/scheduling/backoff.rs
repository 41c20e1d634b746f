//! How long a gang waits before it is tried again after a failed binding or an eviction.
//!
//! Exponential: the configured initial delay, doubled per failure, up to the maximum. A
//! gang's failure count outlives its wait, so the next failure waits longer; it is reset
//! when the gang binds, and dropped when the gang is gone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::engine::model::GangKey;

struct Entry {
    until: Instant,
    failures: u32,
}

pub struct GangBackoff {
    initial: Duration,
    max: Duration,
    gangs: HashMap<GangKey, Entry>,
}

impl GangBackoff {
    pub fn new(config: &crate::config::Backoff) -> GangBackoff {
        GangBackoff {
            initial: Duration::from_secs(config.initial_seconds),
            max: Duration::from_secs(config.max_seconds),
            gangs: HashMap::new(),
        }
    }

    /// The delay after `failures` failures in a row.
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.initial.saturating_mul(1 << doublings).min(self.max)
    }

    /// The gang failed once more at `now`: it waits, longer than last time. Returns the wait.
    pub fn fail(&mut self, gang: &GangKey, now: Instant) -> Duration {
        let failures = self.gangs.get(gang).map_or(0, |e| e.failures) + 1;
        let delay = self.delay(failures);
        self.gangs.insert(gang.clone(), Entry { until: now + delay, failures });
        delay
    }

    /// The gang bound: its next failure starts from the initial delay again.
    pub fn succeed(&mut self, gang: &GangKey) {
        self.gangs.remove(gang);
    }

    /// Whether the gang is still waiting out its backoff at `now`.
    pub fn waiting(&self, gang: &GangKey, now: Instant) -> bool {
        self.gangs.get(gang).is_some_and(|e| e.until > now)
    }

    /// The earliest wait that ends after `now`, for the loop's timer.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        self.gangs.values().map(|e| e.until).filter(|until| *until > now).min()
    }

    /// Drops gangs that are gone and no longer waiting.
    pub fn retain(&mut self, now: Instant, exists: impl Fn(&GangKey) -> bool) {
        self.gangs.retain(|gang, e| e.until > now || exists(gang));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::GangKind;

    fn gang() -> GangKey {
        GangKey { kind: GangKind::Muster, namespace: "ml".into(), name: "train".into() }
    }

    #[test]
    fn the_wait_doubles_per_failure_up_to_the_maximum_and_resets_on_success() {
        let mut backoff = GangBackoff::new(&crate::config::Backoff { initial_seconds: 1, max_seconds: 10 });
        let now = Instant::now();
        let waits: Vec<u64> = (0..6).map(|_| backoff.fail(&gang(), now).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert!(backoff.waiting(&gang(), now + Duration::from_secs(9)));
        assert!(!backoff.waiting(&gang(), now + Duration::from_secs(10)));
        assert_eq!(backoff.next_due(now), Some(now + Duration::from_secs(10)));
        backoff.succeed(&gang());
        assert!(!backoff.waiting(&gang(), now));
        assert_eq!(backoff.fail(&gang(), now).as_secs(), 1, "a success starts the count afresh");
    }

    #[test]
    fn a_gone_gang_is_forgotten_once_its_wait_is_over() {
        let mut backoff = GangBackoff::new(&crate::config::Backoff { initial_seconds: 1, max_seconds: 10 });
        let now = Instant::now();
        backoff.fail(&gang(), now);
        backoff.retain(now, |_| false);
        assert!(backoff.waiting(&gang(), now), "still waiting: kept");
        backoff.retain(now + Duration::from_secs(2), |_| false);
        assert_eq!(backoff.next_due(now), None);
    }
}
