//! KAI Scheduler's `Queue` (`scheduling.run.ai/v2`, cluster-scoped), read when the
//! configuration imports it (`queues.import: [kai]`), so a cluster moving from KAI keeps
//! its budgets. Muster never writes it (KAI's queue controller owns its status).
//!
//! The type only; `convert_kai` reads it into an engine queue spec.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// KAI's queue, as far as Muster reads it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
