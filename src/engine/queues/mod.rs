//! Team queues as the snapshot holds them: a tree of budgets that gangs are admitted through
//! (QUEUES.md §2), and why a queue refuses a gang. What each queue holds, its fair share and
//! the order queues are served in are computed in `engine::admission`.
//!
//! The conversion turns Queue objects into [`QueueSpec`]s (amounts in the engine's units:
//! CPU in millicores, memory in bytes, GPUs (`nvidia.com/gpu`) in thousandths so that a
//! half-GPU pod counts 0.5, other resources in units); the engine validates them into a
//! [`QueueTree`]. With no queues at all every gang is in one implicit, unlimited `default`
//! queue and nothing here changes a placement.

pub mod refusal;
pub mod tree;

pub use refusal::Refusal;
pub use tree::{QueueTree, TreeProblem};

use super::resources::ResourceId;

/// The queue a gang is in when nothing names one.
pub const DEFAULT_QUEUE: &str = "default";

/// The resource GPU fractions (KAI's `gpu-fraction` and `gpu-memory` annotations) count
/// in, as KAI counts them in its queues' `gpu`.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Queue amounts of [`GPU_RESOURCE`] per GPU.
pub const GPU_MILLI: i64 = 1000;

/// The default queue priority (KAI's).
pub const DEFAULT_PRIORITY: i32 = 100;

/// One resource key's rules in a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceRule {
    /// Guaranteed amount; None is unlimited (only an imported KAI queue's `-1`).
    pub quota: Option<i64>,
    /// Share of the surplus, in thousandths (1000 = weight 1).
    pub weight_milli: u64,
    /// Hard cap; None is unlimited.
    pub limit: Option<i64>,
    /// How much of the quota others may borrow; None lends all of it.
    pub lending_limit: Option<i64>,
}

impl Default for ResourceRule {
    fn default() -> Self {
        ResourceRule { quota: Some(0), weight_milli: 1000, limit: None, lending_limit: None }
    }
}

impl ResourceRule {
    /// The part of the quota that is never lent (`g` of QUEUES.md §2.1).
    pub fn kept(&self) -> i64 {
        match (self.quota, self.lending_limit) {
            (Some(q), Some(l)) => (q - l).max(0),
            (None, Some(_)) => i64::MAX,
            _ => 0,
        }
    }
}

/// Which gangs behind one that does not fit may still be placed, per queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueingStrategy {
    /// Gangs that do not fit are passed over (and the cycle's no-starvation policy applies).
    BestEffortFifo,
    /// Nothing behind the first gang that does not fit is placed from this queue.
    StrictFifo,
}

/// May a queue's gangs reclaim capacity lent to other queues (`preemption.reclaim`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReclaimPolicy {
    Never,
    /// Only from gangs of lower priority than the reclaiming gang.
    LowerPriority,
    #[default]
    Any,
}

/// Which gangs of the same queue a gang may preempt (`preemption.withinQueue`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WithinQueue {
    Never,
    #[default]
    LowerPriority,
    /// Lower priority, or equal priority and newer.
    LowerOrNewerEqualPriority,
}

/// A queue's `preemption` rules; durations in seconds, None where the queue sets none
/// (its ancestors' or the global default then apply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueuePreemption {
    pub reclaim: ReclaimPolicy,
    /// Whether others may reclaim this queue's gangs running over its share. Default true.
    pub not_reclaimable: bool,
    pub within: WithinQueue,
    pub reclaim_min_runtime: Option<i64>,
    pub preempt_min_runtime: Option<i64>,
    pub preemption_delay: Option<i64>,
    /// Gangs below this queue never evict outside its subtree.
    pub fence: bool,
    /// `borrowWithinParent: {policy: LowerPriority}`: a gang that must go over its queue's
    /// quota may preempt lower-priority gangs of queues over their own quota across the
    /// common ancestor; the value is `maxPriorityThreshold` (victims at most this
    /// priority), None without one. Unset: never.
    pub borrow_within_parent: Option<Option<i32>>,
}

/// A queue as the shell read it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    pub name: String,
    /// None: a top-level queue.
    pub parent: Option<String>,
    pub priority: i32,
    /// Creation time in seconds; older queues win ties.
    pub created: i64,
    /// Resource keys it governs; keys absent are neither guaranteed nor capped.
    pub resources: Vec<(ResourceId, ResourceRule)>,
    /// `stopPolicy: Hold` or `HoldAndDrain`: no new gang is admitted.
    pub stopped: bool,
    /// Namespaces whose gangs it accepts (its namespaceSelector, evaluated by the shell);
    /// None accepts every namespace.
    pub namespaces: Option<Vec<String>>,
    /// None: the cycle's queueing policy.
    pub queueing: Option<QueueingStrategy>,
    /// Whether its preemptible gangs may run in capacity held for a reservation, evicted
    /// whole when the reserved gang can start (`spec.opportunisticBackfill`). None: its
    /// parent's, at the top the configuration's.
    pub opportunistic_backfill: Option<bool>,
    pub preemption: QueuePreemption,
    /// What the shell found wrong with the object (an unknown resource key, a bad
    /// quantity); gangs in it wait with this reason.
    pub problem: Option<String>,
    /// Where it was imported from, when it is not Muster's own Queue.
    pub origin: Option<String>,
    /// What a person should know about how it was read (an imported rule kept as is).
    pub notes: Vec<String>,
}

impl QueueSpec {
    /// A top-level queue with no rules.
    pub fn new(name: &str) -> QueueSpec {
        QueueSpec {
            name: name.to_string(),
            parent: None,
            priority: DEFAULT_PRIORITY,
            created: 0,
            resources: Vec::new(),
            stopped: false,
            namespaces: None,
            queueing: None,
            opportunistic_backfill: None,
            preemption: QueuePreemption::default(),
            problem: None,
            origin: None,
            notes: Vec::new(),
        }
    }
}
