//! The table of the scheduler's metrics: each one's name, help text and labels, in the
//! order they are registered. [`super::Metrics::new`] registers them; docs/metrics.md
//! explains them.

/// One metric's name, help text and label names (none for a metric without labels).
pub struct MetricSpec {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

pub const CYCLE_DURATION: MetricSpec = MetricSpec {
    name: "muster_scheduling_cycle_duration_seconds",
    help: "Duration of one scheduling cycle: snapshot, engine and assuming its placements.",
    labels: &[],
};
pub const CYCLE_PHASE_DURATION: MetricSpec = MetricSpec {
    name: "muster_scheduling_cycle_phase_duration_seconds",
    help: "Duration of each part of a scheduling cycle (assemble, cel, engine, plan).",
    labels: &["phase"],
};
pub const GANG_ATTEMPTS: MetricSpec = MetricSpec {
    name: "muster_gang_scheduling_attempts_total",
    help: "Gang scheduling attempts by result (scheduled, unschedulable, error, bind_failed).",
    labels: &["result"],
};
pub const GANG_WAITING: MetricSpec = MetricSpec {
    name: "muster_gang_waiting_seconds",
    help: "Time from a gang's creation until minMember of its pods are bound (until=bound) or Running (until=running).",
    labels: &["until"],
};
pub const QUEUE_GANG_WAITING: MetricSpec = MetricSpec {
    name: "muster_queue_gang_waiting_seconds",
    help: "Time from a gang's creation until minMember of its pods are bound, by the queue it was admitted through and its namespace.",
    labels: &["queue", "namespace"],
};
pub const GANGS_STARTED: MetricSpec = MetricSpec {
    name: "muster_gangs_started_total",
    help: "Gangs bound (minMember of their pods), by queue and namespace.",
    labels: &["queue", "namespace"],
};
pub const PENDING_PODS: MetricSpec =
    MetricSpec { name: "muster_pending_pods", help: "Muster's pods waiting for a node.", labels: &[] };
pub const PENDING_GANGS: MetricSpec = MetricSpec {
    name: "muster_pending_gangs",
    help: "Gangs (gangs of one included) with pods waiting for a node.",
    labels: &[],
};
pub const PARKED_GANGS: MetricSpec = MetricSpec {
    name: "muster_unschedulable_pool_gangs",
    help: "Pending gangs that did not fit and are not tried again until a change could help them.",
    labels: &[],
};
pub const BIND_DURATION: MetricSpec = MetricSpec {
    name: "muster_gang_bind_duration_seconds",
    help: "Duration of one gang's binding transaction: claim writes and all of its pods' bindings.",
    labels: &[],
};
pub const BIND_ROLLBACKS: MetricSpec = MetricSpec {
    name: "muster_gang_bind_rollbacks_total",
    help: "Gang bindings rolled back because fewer than minMember pods could be bound.",
    labels: &[],
};
pub const EVICTIONS: MetricSpec = MetricSpec {
    name: "muster_evictions_total",
    help: "Gangs evicted, once per gang and eviction, by reason: the safety net (BindFailed, PodsReadyTimeout, GangBroken, MaxRunExceeded) whole gangs, queues (Reclaimed, Preempted) whole gangs or their pods above minMember, a reservation (Opportunistic) whole gangs that ran in its held capacity. Labelled by the gang's queue and namespace; each reason also has a series with both empty, always present, so that a rate is zero rather than absent before the first eviction.",
    labels: &["reason", "queue", "namespace"],
};
pub const CLAIMS_GIVEN_BACK: MetricSpec = MetricSpec {
    name: "muster_claims_given_back_total",
    help: "ResourceClaims whose devices were given back: allocated for pods that are not bound, whose gang is not being placed (a leader that stopped between claim writes and binds, a lost answer). Counted each time the decision is made; the write is made once.",
    labels: &[],
};
pub const EVICTION_REFUSALS: MetricSpec = MetricSpec {
    name: "muster_eviction_refusals_total",
    help: "Evictions refused by the API server (a PodDisruptionBudget's 429, or an error), each try; a refused eviction is tried again after a doubling delay.",
    labels: &[],
};
pub const EVICTIONS_FORCED: MetricSpec = MetricSpec {
    name: "muster_evictions_forced_total",
    help: "Pods deleted because their eviction was refused eviction.maxRefusals times, so that their gang does not stay half bound.",
    labels: &[],
};
pub const NODE_GPUS: MetricSpec = MetricSpec {
    name: "muster_node_gpus",
    help: "GPUs a node offers (extended resource or DRA devices).",
    labels: &["node"],
};
pub const NODE_GPUS_ALLOCATED: MetricSpec = MetricSpec {
    name: "muster_node_gpus_allocated",
    help: "GPUs of a node held by bound pods or allocated claims.",
    labels: &["node"],
};
pub const NODE_GPUS_STRANDED: MetricSpec = MetricSpec {
    name: "muster_node_gpus_stranded",
    help: "GPUs of a node held by pods of gangs with fewer than minMember pods bound.",
    labels: &["node"],
};
pub const NODE_GPUS_HELD: MetricSpec = MetricSpec {
    name: "muster_node_gpus_held",
    help: "GPU devices of a node allocated to claims that no bound pod uses (held for pods that never ran); zero in a healthy cluster.",
    labels: &["node"],
};
pub const DOMAIN_GPUS: MetricSpec = MetricSpec {
    name: "muster_topology_domain_gpus",
    help: "GPUs in a topology domain (a configured level's node label value).",
    labels: &["level", "domain"],
};
pub const DOMAIN_GPUS_ALLOCATED: MetricSpec = MetricSpec {
    name: "muster_topology_domain_gpus_allocated",
    help: "GPUs of a topology domain held by bound pods or allocated claims.",
    labels: &["level", "domain"],
};
pub const DOMAIN_GPUS_STRANDED: MetricSpec = MetricSpec {
    name: "muster_topology_domain_gpus_stranded",
    help: "GPUs of a topology domain held by pods of gangs with fewer than minMember pods bound.",
    labels: &["level", "domain"],
};
pub const DOMAIN_GPUS_HELD: MetricSpec = MetricSpec {
    name: "muster_topology_domain_gpus_held",
    help: "GPU devices of a topology domain allocated to claims that no bound pod uses.",
    labels: &["level", "domain"],
};
pub const QUEUE_QUOTA: MetricSpec = MetricSpec {
    name: "muster_queue_quota",
    help: "A queue's guaranteed amount of a resource (unset: not exported).",
    labels: &["queue", "resource"],
};
pub const QUEUE_FAIR_SHARE: MetricSpec = MetricSpec {
    name: "muster_queue_fair_share",
    help: "A queue's fair share of a resource, from quota, priority, weight and demand.",
    labels: &["queue", "resource"],
};
pub const QUEUE_ALLOCATED: MetricSpec = MetricSpec {
    name: "muster_queue_allocated",
    help: "What a queue's running gangs (its subtree's) request of a resource.",
    labels: &["queue", "resource"],
};
pub const QUEUE_REQUESTED: MetricSpec = MetricSpec {
    name: "muster_queue_requested",
    help: "What a queue's pending gangs (its subtree's) request of a resource.",
    labels: &["queue", "resource"],
};
pub const QUEUE_LIMIT: MetricSpec = MetricSpec {
    name: "muster_queue_limit",
    help: "A queue's hard cap on a resource (unset: not exported).",
    labels: &["queue", "resource"],
};
pub const QUEUE_GANGS: MetricSpec = MetricSpec {
    name: "muster_queue_gangs",
    help: "Gangs in a queue's subtree, by state (pending, running).",
    labels: &["queue", "state"],
};
pub const CEL_EVALUATION_DURATION: MetricSpec = MetricSpec {
    name: "muster_cel_evaluation_duration_seconds",
    help: "Time per cycle spent evaluating CEL device selectors on devices whose result was not cached.",
    labels: &[],
};
pub const CEL_EVALUATIONS: MetricSpec = MetricSpec {
    name: "muster_cel_evaluations_total",
    help: "CEL device selector evaluations (results cached per device revision are not counted again).",
    labels: &[],
};
pub const DEVICE_ALLOCATION_DURATION: MetricSpec = MetricSpec {
    name: "muster_device_allocation_duration_seconds",
    help: "Duration of writing one gang's ResourceClaim allocations to the API server.",
    labels: &[],
};
pub const LEADER: MetricSpec = MetricSpec {
    name: "muster_leader",
    help: "1 while this replica is the leader and schedules, else 0.",
    labels: &[],
};
pub const WRITES: MetricSpec = MetricSpec {
    name: "muster_api_writes_total",
    help: "Background writes to the API server (pod conditions, events, PodGroup and Queue status, evictions, deletes of pods whose eviction was refused too often, claim releases) by kind and result (written, failed, timed_out, fenced: not sent, since the Lease may have passed).",
    labels: &["kind", "result"],
};
pub const WRITE_QUEUE_DEPTH: MetricSpec = MetricSpec {
    name: "muster_api_write_queue_depth",
    help: "Background writes queued (newest state per object) and not yet taken by a writer.",
    labels: &[],
};
pub const LAST_CYCLE: MetricSpec = MetricSpec {
    name: "muster_last_cycle_timestamp_seconds",
    help: "When the scheduling loop last completed a cycle, in Unix seconds.",
    labels: &[],
};
