//! Evictions the API server refuses: a PodDisruptionBudget answers 429, or the request fails.
//! A refused eviction is tried again after a doubling delay; once a pod's eviction has been
//! refused `max_refusals` times the pod is deleted instead, because the eviction was decided
//! to keep a gang from sitting half bound on its GPUs, and a budget that protects one pod of
//! a job that cannot run protects nothing. The decisions here are pure; the writer applies
//! them.

use std::time::Duration;

use tokio::time::Instant;

/// How refused evictions are retried, and when they give way to a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusalPolicy {
    pub max_refusals: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl RefusalPolicy {
    pub fn from_config(config: &crate::config::EvictionRetry) -> RefusalPolicy {
        RefusalPolicy {
            max_refusals: config.max_refusals.max(1),
            first_delay: Duration::from_secs(config.retry_initial_seconds),
            max_delay: Duration::from_secs(config.retry_max_seconds),
        }
    }

    /// The delay before the next try after `refusals` refusals (1 for the first).
    pub fn delay(&self, refusals: u32) -> Duration {
        let doubled = self.first_delay.saturating_mul(1u32 << refusals.saturating_sub(1).min(20));
        doubled.min(self.max_delay)
    }
}

impl Default for RefusalPolicy {
    fn default() -> Self {
        RefusalPolicy::from_config(&crate::config::EvictionRetry::default())
    }
}

/// One pod's refused eviction: how often, the last answer, and when it may go again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub count: u32,
    pub last: String,
    pub not_before: Instant,
}

impl Refused {
    /// The record after one more refusal with `error`, at `now`.
    pub fn after(previous: Option<&Refused>, error: String, policy: &RefusalPolicy, now: Instant) -> Refused {
        let count = previous.map_or(0, |r| r.count) + 1;
        Refused { count, last: error, not_before: now + policy.delay(count) }
    }

    /// Whether the next try deletes the pod rather than evict it.
    pub fn delete_next(&self, policy: &RefusalPolicy) -> bool {
        self.count >= policy.max_refusals
    }
}

/// The event note of a pod deleted after its evictions were refused.
pub fn deleted_note(gang: &str, refused: &Refused) -> String {
    format!(
        "the eviction of this pod was refused {} time(s) (last: {}); the pod was deleted instead, since {gang} must not stay half bound on its GPUs",
        refused.count, refused.last
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_evictions_back_off_doubling_to_the_cap_and_then_give_way_to_a_delete() {
        let policy =
            RefusalPolicy { max_refusals: 3, first_delay: Duration::from_secs(5), max_delay: Duration::from_secs(12) };
        let now = Instant::now();
        let first = Refused::after(None, "429 budget".into(), &policy, now);
        assert_eq!((first.count, first.not_before - now), (1, Duration::from_secs(5)));
        assert!(!first.delete_next(&policy));
        let second = Refused::after(Some(&first), "429 budget".into(), &policy, now);
        assert_eq!(second.not_before - now, Duration::from_secs(10));
        let third = Refused::after(Some(&second), "503".into(), &policy, now);
        assert_eq!(third.not_before - now, Duration::from_secs(12), "capped");
        assert!(third.delete_next(&policy), "the third refusal is the last");
        let note = deleted_note("gang ml/train", &third);
        assert!(note.contains("refused 3 time(s) (last: 503)") && note.contains("gang ml/train"), "{note}");
        assert_eq!(policy.delay(400), Duration::from_secs(12), "no overflow");
    }
}
