//! The configuration file's sections that are plain settings: backoff, leader election,
//! eviction, the API client's deadlines, tenant limits, preemption and queues.

use serde::{Deserialize, Serialize};

use crate::engine::preempt::PreemptionConfig;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backoff {
    pub initial_seconds: u64,
    pub max_seconds: u64,
}

/// Leader election among scheduler replicas, on a coordination.k8s.io/v1 Lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    /// Off: this scheduler leads alone (one replica). On: only the lease holder schedules.
    pub enabled: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    /// A lease not renewed for this long may be taken over by another replica.
    pub lease_duration_seconds: u64,
    /// The leader stops scheduling when it could not renew for this long (< lease duration).
    pub renew_deadline_seconds: u64,
    /// How often the leader renews and the others check the lease.
    pub retry_period_seconds: u64,
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            enabled: false,
            lease_name: "muster-scheduler".into(),
            lease_namespace: "muster-system".into(),
            lease_duration_seconds: 15,
            renew_deadline_seconds: 10,
            retry_period_seconds: 2,
        }
    }
}

/// Evictions the API server refuses (a PodDisruptionBudget's 429, or any error): tried again
/// with a doubling delay, and after `maxRefusals` refusals the pod is deleted instead, since
/// a gang left half bound holds GPUs that do no work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// serde keeps the old name and wording, so that its error messages read as before.
#[serde(rename = "Eviction", expecting = "struct Eviction", rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EvictionRetry {
    /// Refusals of one pod's eviction before the pod is deleted (at least 1).
    pub max_refusals: u32,
    /// Delay before the first retry of a refused eviction, doubled after each refusal.
    pub retry_initial_seconds: u64,
    /// The longest delay between two tries.
    pub retry_max_seconds: u64,
}

impl Default for EvictionRetry {
    fn default() -> Self {
        EvictionRetry { max_refusals: 5, retry_initial_seconds: 5, retry_max_seconds: 60 }
    }
}

/// What Muster asks of the API server at most, as kube-scheduler's `clientConnection`:
/// every request (reads, binds, claim writes, evictions, status, events) takes a token from
/// a bucket of `burst` refilled at `qps` a second, and at most `maxInFlight` are in flight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClientConnection {
    /// Requests a second once the burst is spent; 0 is no limit.
    pub qps: f64,
    /// Requests at once before `qps` applies.
    pub burst: u32,
    /// Requests in flight at once, watches' first answers included.
    pub max_in_flight: u32,
}

impl Default for ClientConnection {
    fn default() -> Self {
        ClientConnection { qps: 0.0, burst: 0, max_in_flight: 256 }
    }
}

impl ClientConnection {
    /// Binds and claim writes in flight at once, over every gang: half of `maxInFlight`,
    /// leaving the rest to status writes, events, evictions and watches.
    pub fn bind_in_flight(&self) -> usize {
        (self.max_in_flight as usize / 2).max(1)
    }
}

/// Limits that keep what tenants write from costing the scheduler without bound. A pod that
/// meets one waits, and its events say which.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// Steps of the device search for one pod on one node before it gives up on the node
    /// (remembered until the node's devices or the pod's claims change).
    pub device_search_steps_per_node: u32,
    /// Steps of the device search for one pod over all the nodes it tries in one cycle.
    pub device_search_steps_per_pod: u32,
    /// Node label keys, besides the configured levels, that PodGroups may name as their
    /// topology level in one cycle.
    pub ad_hoc_topology_levels: usize,
    /// Compiled CEL selectors that no pending claim used for this long are dropped.
    pub selector_idle_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        // The engine's defaults for its device search, stated once.
        let search = crate::engine::dra::allocate::SearchLimits::default();
        Limits {
            device_search_steps_per_node: search.steps_per_node,
            device_search_steps_per_pod: search.steps_per_pod,
            ad_hoc_topology_levels: 16,
            selector_idle_seconds: search.selector_idle_seconds.unsigned_abs(),
        }
    }
}

/// Reclaim and preemption between and inside queues (QUEUES.md §2.6–2.9). Durations as
/// Kubernetes writes them ("10m", "90s", "1h30m").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Preemption {
    /// `m` of the reclaim post-condition: a gang that ends over its share may still
    /// reclaim from a queue more than `m` times as saturated. At least 1, which rules out
    /// two queues taking the same capacity back and forth.
    pub reclaimer_saturation_multiplier: f64,
    /// How long a gang runs before another queue may reclaim it, where no queue sets one.
    pub default_reclaim_min_runtime: String,
    /// Where a victim's `reclaimMinRuntime` is read: `lca` (the queue just below the
    /// common ancestor with the reclaimer, then its ancestors) or `queue` (the victim's
    /// own leaf, then its ancestors).
    pub reclaim_min_runtime_resolution: MinRuntimeResolution,
    /// How long a gang runs before a higher-priority gang of its queue may preempt it.
    pub default_preempt_min_runtime: String,
    /// How long a gang waits after creation before it may evict anyone.
    pub default_preemption_delay: String,
    /// How long capacity freed by evictions is held for the gang they were made for;
    /// "auto" is the victims' longest terminationGracePeriodSeconds plus 60 seconds.
    pub reservation_timeout: String,
    /// The most gangs evicted in one cycle; 0 is no cap.
    pub max_evicted_gangs_per_cycle: u64,
    /// For this long after its last eviction a gang takes only what its queue is owed
    /// (its fair share), not borrowed capacity it would be reclaimed from again.
    pub borrow_after_eviction: String,
}

impl Default for Preemption {
    fn default() -> Self {
        Preemption {
            reclaimer_saturation_multiplier: 1.0,
            default_reclaim_min_runtime: "0s".into(),
            reclaim_min_runtime_resolution: MinRuntimeResolution::Lca,
            default_preempt_min_runtime: "0s".into(),
            default_preemption_delay: "0s".into(),
            reservation_timeout: "auto".into(),
            max_evicted_gangs_per_cycle: 0,
            borrow_after_eviction: format!("{}s", PreemptionConfig::default().borrow_after_eviction),
        }
    }
}

/// Where a victim's reclaim minimum runtime is read (QUEUES.md §2.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MinRuntimeResolution {
    Lca,
    Queue,
}

/// Queue objects of other schedulers that Muster reads as its own queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueImport {
    /// KAI Scheduler's `scheduling.run.ai/v2` Queue.
    Kai,
    /// Kueue's ClusterQueue, Cohort and LocalQueue (`kueue.x-k8s.io` v1beta2 or v1beta1).
    Kueue,
}

/// Team queues.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Queues {
    /// Other schedulers' queue objects to read (`[kai, kueue]`). Off by default: a KAI or
    /// Kueue still running would count the same quota twice.
    pub import: Vec<QueueImport>,
}

impl Queues {
    pub fn imports(&self, source: QueueImport) -> bool {
        self.import.contains(&source)
    }
}
