//! Kueue's `ClusterQueue`, `Cohort` and `LocalQueue` (`kueue.x-k8s.io`), read when the
//! configuration imports them (`queues.import: [kueue]`), so a cluster moving from Kueue
//! keeps its budgets. Muster never writes them (Kueue owns their status).
//!
//! The types, as far as Muster reads them, the engine names of Kueue's queues, and the
//! LocalQueue lookup; `convert_kueue` makes engine queue specs of them. v1beta2 is the version watched; v1beta1 objects (Kueue before 0.15) read into
//! the same types, as their fields differ only in names (`cohort` for `cohortName`,
//! `parent` for `parentName`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The label that puts a workload in a LocalQueue of its namespace.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The scheduling gate Kueue puts on the pods it has not admitted yet.
pub const ADMISSION_GATE: &str = "kueue.x-k8s.io/admission";
/// The label Kueue puts on the plain pods it manages.
pub const MANAGED_LABEL: &str = "kueue.x-k8s.io/managed";

/// A ClusterQueue's fields, in both versions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueFields {
    /// v1beta2 `cohortName`; v1beta1 `cohort`.
    #[serde(default, alias = "cohort")]
    pub cohort_name: Option<String>,
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
    #[serde(default)]
    pub preemption: Option<KueuePreemption>,
    #[serde(default)]
    pub queueing_strategy: Option<String>,
    #[serde(default)]
    pub stop_policy: Option<String>,
    /// Unset admits no namespace, `{}` every one (Kueue's rule).
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    pub admission_checks: Vec<serde_json::Value>,
    #[serde(default)]
    pub admission_checks_strategy: Option<serde_json::Value>,
    #[serde(default)]
    pub flavor_fungibility: Option<serde_json::Value>,
}

/// A Cohort's fields, in both versions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortFields {
    /// v1beta1 and v1beta2 `parentName`; v1alpha1 `parent`.
    #[serde(default, alias = "parent")]
    pub parent_name: Option<String>,
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    #[serde(default)]
    pub covered_resources: Vec<String>,
    #[serde(default)]
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlavorQuotas {
    pub name: String,
    #[serde(default)]
    pub resources: Vec<ResourceQuota>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    pub name: String,
    #[serde(default)]
    pub nominal_quota: Option<Quantity>,
    #[serde(default)]
    pub borrowing_limit: Option<Quantity>,
    #[serde(default)]
    pub lending_limit: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FairSharing {
    #[serde(default)]
    pub weight: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueuePreemption {
    #[serde(default)]
    pub reclaim_within_cohort: Option<String>,
    #[serde(default)]
    pub within_cluster_queue: Option<String>,
    #[serde(default)]
    pub borrow_within_cohort: Option<serde_json::Value>,
}

/// A LocalQueue's fields: the ClusterQueue it sends its namespace's workloads to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueFields {
    #[serde(default)]
    pub cluster_queue: String,
    #[serde(default)]
    pub stop_policy: Option<String>,
}

/// Kueue v1beta2 `ClusterQueue`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ClusterQueue",
    plural = "clusterqueues",
    schema = "disabled"
)]
pub struct ClusterQueueSpec {
    #[serde(flatten)]
    pub fields: ClusterQueueFields,
}

/// Kueue v1beta1 `ClusterQueue`, read into [`ClusterQueue`].
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta1",
    kind = "ClusterQueue",
    root = "ClusterQueueV1beta1",
    plural = "clusterqueues",
    schema = "disabled"
)]
pub struct ClusterQueueV1beta1Spec {
    #[serde(flatten)]
    pub fields: ClusterQueueFields,
}

/// Kueue v1beta2 `Cohort`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "Cohort", plural = "cohorts", schema = "disabled")]
pub struct CohortSpec {
    #[serde(flatten)]
    pub fields: CohortFields,
}

/// Kueue v1beta1 `Cohort`, read into [`Cohort`].
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta1",
    kind = "Cohort",
    root = "CohortV1beta1",
    plural = "cohorts",
    schema = "disabled"
)]
pub struct CohortV1beta1Spec {
    #[serde(flatten)]
    pub fields: CohortFields,
}

/// Kueue v1beta2 `LocalQueue` (namespaced).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "LocalQueue",
    plural = "localqueues",
    namespaced,
    schema = "disabled"
)]
pub struct LocalQueueSpec {
    #[serde(flatten)]
    pub fields: LocalQueueFields,
}

/// Kueue v1beta1 `LocalQueue`, read into [`LocalQueue`].
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta1",
    kind = "LocalQueue",
    root = "LocalQueueV1beta1",
    plural = "localqueues",
    namespaced,
    schema = "disabled"
)]
pub struct LocalQueueV1beta1Spec {
    #[serde(flatten)]
    pub fields: LocalQueueFields,
}

impl From<ClusterQueueV1beta1> for ClusterQueue {
    fn from(old: ClusterQueueV1beta1) -> ClusterQueue {
        ClusterQueue { metadata: old.metadata, spec: ClusterQueueSpec { fields: old.spec.fields } }
    }
}

impl From<CohortV1beta1> for Cohort {
    fn from(old: CohortV1beta1) -> Cohort {
        Cohort { metadata: old.metadata, spec: CohortSpec { fields: old.spec.fields } }
    }
}

impl From<LocalQueueV1beta1> for LocalQueue {
    fn from(old: LocalQueueV1beta1) -> LocalQueue {
        LocalQueue { metadata: old.metadata, spec: LocalQueueSpec { fields: old.spec.fields } }
    }
}

/// The LocalQueue name a pod's labels give, if any.
pub fn local_queue_name(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels?.get(QUEUE_NAME_LABEL).map(String::as_str).filter(|q| !q.is_empty())
}

/// The engine queue of a ClusterQueue.
pub fn cluster_queue_name(name: &str) -> String {
    format!("kueue/{name}")
}

/// The engine queue of a cohort.
pub fn cohort_name(name: &str) -> String {
    format!("kueue-cohort/{name}")
}

/// What a LocalQueue that does not exist resolves to: a queue that does not exist, so the
/// gang waits and says which LocalQueue it names.
fn missing_local_queue(namespace: &str, name: &str) -> String {
    format!("kueue-localqueue/{namespace}/{name}")
}

/// Kueue's LocalQueues by namespace and name: where a workload that names one goes.
#[derive(Debug, Default)]
pub struct LocalQueues<'a> {
    by_name: HashMap<(&'a str, &'a str), &'a LocalQueue>,
}

impl<'a> LocalQueues<'a> {
    pub fn new(local_queues: &[&'a LocalQueue]) -> LocalQueues<'a> {
        let by_name = local_queues
            .iter()
            .filter_map(|q| {
                let key = (q.metadata.namespace.as_deref().unwrap_or("default"), q.metadata.name.as_deref()?);
                Some((key, *q))
            })
            .collect();
        LocalQueues { by_name }
    }

    /// The engine queue of LocalQueue `name` in `namespace`.
    pub fn queue_of(&self, namespace: &str, name: &str) -> String {
        match self.by_name.get(&(namespace, name)) {
            Some(q) => cluster_queue_name(&q.spec.fields.cluster_queue),
            None => missing_local_queue(namespace, name),
        }
    }

    /// Why LocalQueue `name` in `namespace` admits nothing now: its `stopPolicy`.
    pub fn stopped(&self, namespace: &str, name: &str) -> Option<String> {
        let policy = self.by_name.get(&(namespace, name))?.spec.fields.stop_policy.as_deref()?;
        matches!(policy, "Hold" | "HoldAndDrain")
            .then(|| format!("LocalQueue {namespace}/{name} is stopped (stopPolicy {policy}); it admits no new gang"))
    }
}
