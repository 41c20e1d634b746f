//! Muster's own API types, from which `muster crds` generates `manifests/crds/`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::yaml;

/// A gang: pods that are placed and bound all together or not at all.
///
/// Pods join with the label `muster.dev/pod-group: <name>`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    shortname = "mpg",
    namespaced,
    status = "PodGroupStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"MinMember","type":"integer","jsonPath":".spec.minMember"}"#,
    printcolumn = r#"{"name":"Scheduled","type":"integer","jsonPath":".status.scheduled"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","jsonPath":".status.running"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// How many pods must be placed at once for any of them to be bound.
    #[schemars(range(min = 1))]
    pub min_member: i32,
    /// Priority of the whole gang; unset, the highest priority among its pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Where the gang's pods must or should be placed together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<PodGroupTopology>,
    /// After this long unscheduled, the Scheduled condition says ScheduleTimeout; Muster
    /// keeps trying. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub schedule_timeout_seconds: Option<i64>,
    /// How long after binding at least minMember pods must be Ready, or the gang is evicted
    /// whole. Unset: the scheduler configuration's default (30 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pods_ready_timeout_seconds: Option<i64>,
    /// How long its pods run at most once bound, in seconds: the scheduler evicts the gang
    /// whole after this long, and timed backfill counts on its capacity being free then.
    /// Unset: no bound but the pods' own `activeDeadlineSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_run_seconds: Option<i64>,
    /// The queue (a leaf `Queue`) the gang is admitted through; unset: the
    /// `muster.dev/queue` label, else the namespace's `muster.dev/default-queue`, else
    /// `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Whether other gangs may evict this one to take capacity back; unset: preemptible
    /// below priority 100. A non-preemptible gang runs only within its queue's quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptibility: Option<Preemptibility>,
    /// How long after it was created, or last evicted, the gang waits for free capacity
    /// before it may evict others ("90s", "5m"); unset: its queue's, else the
    /// configuration's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_delay: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Preemptibility {
    Preemptible,
    NonPreemptible,
}

/// A topology constraint: a configured level name (`rack`) or a node label key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupTopology {
    /// Every pod in one domain of this level, or wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// One domain of this level if any fits, else the fewest domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PodGroupPhase {
    #[default]
    Pending,
    Scheduled,
    Running,
    Succeeded,
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodGroupPhase>,
    #[serde(default)]
    pub min_member: i32,
    #[serde(default)]
    pub scheduled: i32,
    #[serde(default)]
    pub running: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    /// Scheduled (Unschedulable, ScheduleTimeout), PodsReady (PodsReadyTimeout) and
    /// Evicted (PodsReadyTimeout, GangBroken, BindFailed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Every CustomResourceDefinition Muster installs.
pub fn definitions() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![PodGroup::crd(), crate::api::queue::Queue::crd()]
}

/// The CRDs as one multi-document YAML stream, as committed under `manifests/crds/`,
/// quoted so that YAML 1.1 readers read every string as a string ([`yaml`]).
pub fn definitions_yaml() -> Result<String, yaml_serde::Error> {
    let mut out = String::from("# Generated by `muster crds`; do not edit by hand.\n");
    for crd in definitions() {
        out.push_str("---\n");
        out.push_str(&yaml::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    /// Every CRD reads back, through yaml_serde, as exactly the object it was written from.
    #[test]
    fn the_crds_yaml_reads_back_as_the_crds() {
        let text = super::definitions_yaml().unwrap();
        let read: Vec<yaml_serde::Value> =
            yaml_serde::Deserializer::from_str(&text).map(|doc| yaml_serde::Value::deserialize(doc).unwrap()).collect();
        let written: Vec<yaml_serde::Value> =
            super::definitions().iter().map(|crd| yaml_serde::to_value(crd).unwrap()).collect();
        assert_eq!(read.len(), 2);
        assert_eq!(read, written);
    }
}
