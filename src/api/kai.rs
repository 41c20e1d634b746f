//! KAI Scheduler's `Queue` (`scheduling.run.ai/v2`, cluster-scoped) and `PodGroup`
//! (`scheduling.run.ai/v2alpha2`), read when the configuration imports KAI
//! (`queues.import: [kai]`), so a cluster moving from KAI keeps its budgets and gangs.
//! Muster never writes them (KAI's controllers own their status).
//!
//! The types only; `convert_kai` reads the queue into an engine queue spec, `groups` the
//! PodGroup into a group spec.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// KAI's queue, as far as Muster reads it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(group = "scheduling.run.ai", version = "v2", kind = "Queue", plural = "queues", schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct KaiQueueSpec {
    #[serde(default)]
    pub parent_queue: Option<String>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub resources: Option<KaiResources>,
    #[serde(default)]
    pub preempt_min_runtime: Option<String>,
    #[serde(default)]
    pub reclaim_min_runtime: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KaiResources {
    #[serde(default)]
    pub gpu: Option<KaiResource>,
    #[serde(default)]
    pub cpu: Option<KaiResource>,
    #[serde(default)]
    pub memory: Option<KaiResource>,
}

/// One resource's budget in KAI's units.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KaiResource {
    #[serde(default)]
    pub quota: Option<f64>,
    #[serde(default)]
    pub over_quota_weight: Option<f64>,
    #[serde(default)]
    pub limit: Option<f64>,
}

/// KAI Scheduler's PodGroup (`scheduling.run.ai/v2alpha2`), read when the configuration
/// imports KAI. Pods join it with the annotation `pod-group-name`, which KAI's pod grouper
/// writes. Muster never writes it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "scheduling.run.ai",
    version = "v2alpha2",
    kind = "PodGroup",
    plural = "podgroups",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct KaiPodGroupSpec {
    #[serde(default)]
    pub min_member: Option<i32>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// `preemptible`, `non-preemptible` (or `semi-preemptible`, read as preemptible beyond
    /// minMember, which is what Muster's bundles already do).
    #[serde(default)]
    pub preemptibility: Option<String>,
    #[serde(default)]
    pub topology_constraint: Option<KaiTopologyConstraint>,
    /// How long the gang waits before it may evict others ("5m").
    #[serde(default)]
    pub preemption_delay: Option<String>,
    /// Sub-groups with their own minimums: not read yet (the group's minMember counts).
    #[serde(default, alias = "subgroups")]
    pub sub_groups: Vec<serde_json::Value>,
}

/// Where a KAI PodGroup's pods must or should be together: node label keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KaiTopologyConstraint {
    #[serde(default)]
    pub topology: Option<String>,
    #[serde(default)]
    pub required_topology_level: Option<String>,
    #[serde(default)]
    pub preferred_topology_level: Option<String>,
}
