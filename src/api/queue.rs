//! Muster's `Queue` (`muster.dev/v1alpha1`, cluster-scoped, short name `mq`): a team's GPU
//! budget in a tree of queues (QUEUES.md §3.5). `muster crds` generates its definition.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A queue: gangs in a leaf queue are admitted within its budget, and capacity is divided
/// among sibling queues by quota, priority and weight.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "Queue",
    plural = "queues",
    shortname = "mq",
    status = "QueueStatus",
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parent"}"#,
    printcolumn = r#"{"name":"GPU Quota","type":"string","jsonPath":".status.resources.nvidia\\.com/gpu.quota"}"#,
    printcolumn = r#"{"name":"Fair Share","type":"string","jsonPath":".status.resources.nvidia\\.com/gpu.fairShare"}"#,
    printcolumn = r#"{"name":"Allocated","type":"string","jsonPath":".status.resources.nvidia\\.com/gpu.allocated"}"#,
    printcolumn = r#"{"name":"Requested","type":"string","jsonPath":".status.resources.nvidia\\.com/gpu.requested"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
// The CRD's description and serde's error messages keep the name `QueueSpec`.
#[kube(doc = " Auto-generated derived type for QueueSpec via `CustomResource`")]
#[serde(rename = "QueueSpec", expecting = "struct QueueSpec", rename_all = "camelCase")]
pub struct MusterQueueSpec {
    /// The parent queue; unset or empty for a top-level queue. Only leaf queues take gangs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Siblings with a higher priority take the surplus first and are reclaimed last.
    /// Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Per resource key: any pod resource (`nvidia.com/gpu`, `cpu`, `memory`), or
    /// `deviceclass/<class>` and `memory.deviceclass/<class>` for devices of one class.
    /// Keys absent are not governed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, QueueResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<MusterQueuePreemption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<QueueAdmission>,
    /// Whether the queue's preemptible gangs may run in capacity held for another gang's
    /// reservation (Backfill's nodes, TimedBackfill's held capacity), to be evicted whole
    /// when that gang can start. Unset: the parent queue's, at the top the scheduler's
    /// `opportunisticBackfill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opportunistic_backfill: Option<bool>,
}

/// One resource key's budget.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueResource {
    /// Guaranteed to the queue when it asks for it; lent to others while it does not.
    /// Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quantity>,
    /// Share of the surplus beyond quotas, relative to siblings. Default 1; 0 takes no
    /// surplus share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_quota_weight: Option<f64>,
    /// Hard cap on what the queue's gangs hold. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Quantity>,
    /// How much of the quota others may borrow while it is idle. Default: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// serde keeps the old name and wording, so that its error messages read as before.
#[serde(rename = "ReclaimPolicy", expecting = "enum ReclaimPolicy")]
pub enum MusterReclaimPolicy {
    Never,
    LowerPriority,
    Any,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WithinQueuePolicy {
    Never,
    LowerPriority,
    LowerOrNewerEqualPriority,
}

/// Preemption of lower-priority gangs in sibling queues that are over quota, when a gang
/// must borrow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinParent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

/// Who may take capacity back from whom.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
// serde keeps the old name and wording, so that its error messages read as before.
#[serde(rename = "QueuePreemption", expecting = "struct QueuePreemption", rename_all = "camelCase")]
pub struct MusterQueuePreemption {
    /// Whether this queue's gangs may reclaim capacity lent to other queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<MusterReclaimPolicy>,
    /// Whether other queues may reclaim this queue's gangs running over quota. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimable: Option<bool>,
    /// Preemption by priority inside the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_queue: Option<WithinQueuePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_parent: Option<BorrowWithinParent>,
    /// How long a gang runs before it may be reclaimed ("10m").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_min_runtime: Option<String>,
    /// How long a gang runs before it may be preempted ("5m").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_min_runtime: Option<String>,
    /// How long a pending gang waits before it may evict others ("30s").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_delay: Option<String>,
    /// Gangs below this queue evict nothing outside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// serde keeps the old name and wording, so that its error messages read as before.
#[serde(rename = "QueueingStrategy", expecting = "enum QueueingStrategy")]
pub enum MusterQueueingStrategy {
    #[serde(rename = "StrictFIFO")]
    StrictFifo,
    #[serde(rename = "BestEffortFIFO")]
    BestEffortFifo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StopPolicy {
    None,
    Hold,
    HoldAndDrain,
}

/// Which gangs the queue takes, and in what order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueAdmission {
    /// Namespaces whose gangs it takes; unset takes every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Unset: the scheduler's configured queueing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_strategy: Option<MusterQueueingStrategy>,
    /// Hold or HoldAndDrain: no new gang is admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<StopPolicy>,
}

/// Figures for one resource key, as Kubernetes quantities.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueResourceStatus {
    pub quota: String,
    pub fair_share: String,
    pub allocated: String,
    pub allocated_non_preemptible: String,
    pub requested: String,
    /// Held beyond the quota.
    pub borrowed: String,
    /// Quota unused and available to others.
    pub lent: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueGangCounts {
    pub pending: i32,
    pub running: i32,
}

/// Written by Muster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Ready (False with the problem when the queue is invalid), QuotaOversubscribed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, QueueResourceStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gangs: Option<QueueGangCounts>,
}
