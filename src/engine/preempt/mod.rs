//! Reclaim and preemption (QUEUES.md §2.6–2.9): when a gang does not fit in free capacity,
//! whole gangs (or the surplus pods of elastic ones) of other queues running beyond their
//! share are evicted for it (reclaim), else lower-priority gangs of its own queue
//! (preemption). Victims are chosen in bundles that never leave a gang below its
//! minMember, kept only when a full trial placement of the gang succeeds, trimmed to the
//! fewest, and the capacity they free is reserved for the gang until it binds. Gangs that
//! run opportunistically in capacity held for a reservation are evicted whole for the
//! reserved gang once it can start in their place (`opportunistic`).

mod candidates;
mod opportunistic;
mod plan;

pub use super::reason::{EvictionReason, Room};
pub use plan::{Evictor, Plan};

use super::model::{GangKey, PodKey};

/// Pods of one running gang evicted for a pending gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub gang: GangKey,
    pub pods: Vec<PodKey>,
    /// Every pod of the gang goes (else only pods above its minMember).
    pub whole: bool,
    pub reason: EvictionReason,
    pub preemptor: GangKey,
}

/// Global preemption settings (the `preemption` section of the configuration); durations
/// in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreemptionConfig {
    /// `m` of the reclaim post-condition, in thousandths (1000 = 1, the least allowed).
    pub saturation_milli: u32,
    pub reclaim_min_runtime: i64,
    /// Read a victim's reclaim minimum runtime from its own leaf up, not from the queue
    /// just below the common ancestor (`reclaimMinRuntimeResolution: queue`).
    pub reclaim_min_runtime_from_leaf: bool,
    pub preempt_min_runtime: i64,
    pub preemption_delay: i64,
    /// How long freed capacity is held for the gang; None: the victims' longest grace
    /// period plus 60 seconds.
    pub reservation_timeout: Option<i64>,
    /// The most gangs evicted in one cycle; 0 is no cap.
    pub max_evicted_gangs: usize,
    /// For this long after it was evicted, a gang takes only capacity its queue is owed:
    /// capacity it would borrow is what a queue owed its share reclaims, and the gang
    /// would be evicted a second time.
    pub borrow_after_eviction: i64,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        PreemptionConfig {
            saturation_milli: 1000,
            reclaim_min_runtime: 0,
            reclaim_min_runtime_from_leaf: false,
            preempt_min_runtime: 0,
            preemption_delay: 0,
            reservation_timeout: None,
            max_evicted_gangs: 0,
            borrow_after_eviction: 600,
        }
    }
}
