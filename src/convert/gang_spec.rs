//! What a gang asks, whatever it comes from (a PodGroup of any kind, a workload's owners):
//! [`GroupSpec`], and the readers of what PodGroups and workloads share (topology
//! annotations, preemption delays, creation times).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::engine::model::GangKey;

/// What a PodGroup of any kind asks of its gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    pub key: GangKey,
    /// At least 1.
    pub min_member: usize,
    /// A priority the group sets itself (Kubernetes' `spec.priority`).
    pub priority: Option<i32>,
    /// The PriorityClass it names, if it sets no priority itself.
    pub priority_class_name: Option<String>,
    /// Creation time, Unix seconds.
    pub created: i64,
    /// Required and preferred topology levels: the group's own fields, else KAI Scheduler's
    /// or Kueue's annotations on it.
    pub topology: (Option<String>, Option<String>),
    /// `podsReadyTimeoutSeconds` (Muster's PodGroup); None: the configuration's default.
    pub pods_ready_timeout_seconds: Option<i64>,
    /// How long its pods run at most: Muster's `spec.maxRunSeconds`, else the tightest
    /// `activeDeadlineSeconds` of the workloads it comes from.
    pub max_run_seconds: Option<i64>,
    /// The queue it names: Muster's `spec.queue`, else a queue label on the group.
    pub queue: Option<String>,
    /// Whether it says it may be preempted (Muster's `spec.preemptibility`, else KAI's label).
    pub preemptible: Option<bool>,
    /// Its own preemption delay in seconds: its `spec.preemptionDelay`, else KAI's
    /// `kai.scheduler/preemption-delay` annotation; an error names what does not parse.
    pub preemption_delay: Result<Option<i64>, PreemptionDelayError>,
    /// When Muster last evicted it (its `Evicted` condition), Unix seconds.
    pub last_evicted: Option<i64>,
    /// Whether its persisted status says it was whole and Ready since its last eviction
    /// (Muster's `PodsReady`, Kubernetes' `PodGroupInitiallyScheduled`): a scheduler that
    /// starts while it is losing pods grants it the grace period.
    pub was_ready: bool,
    /// Where a gang without a PodGroup comes from ("PyTorchJob ml/resnet: 1 master + 7
    /// workers"), for `muster explain`.
    pub source: Option<String>,
    /// Why its pods cannot be placed whatever the cluster holds (a workload that does not
    /// read, a minimum that is not a count).
    pub problem: Option<String>,
}

/// KAI Scheduler's annotation for a gang's preemption delay, on the PodGroup or the pod.
pub const PREEMPTION_DELAY_ANNOTATION: &str = "kai.scheduler/preemption-delay";

/// Why a preemption delay (a `preemptionDelay` field, or KAI's annotation) is not a
/// duration: what the duration parser says of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("preemptionDelay: {problem}")]
pub struct PreemptionDelayError {
    pub problem: String,
}

/// A preemption delay: the object's own field, else the annotation.
pub fn preemption_delay(own: Option<&str>, meta: &ObjectMeta) -> Result<Option<i64>, PreemptionDelayError> {
    let text = own.or_else(|| meta.annotations.as_ref()?.get(PREEMPTION_DELAY_ANNOTATION).map(String::as_str));
    text.map(|t| crate::config::parse_duration(t).map_err(|problem| PreemptionDelayError { problem })).transpose()
}

/// The annotations other schedulers' users put topology in, with the level they name:
/// (required, preferred). KAI Scheduler's, then Kueue's; the values are node label keys.
pub const TOPOLOGY_ANNOTATIONS: [(&str, &str); 2] = [
    ("kai.scheduler/topology-required-placement", "kai.scheduler/topology-preferred-placement"),
    ("kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"),
];

/// Required and preferred levels from KAI Scheduler's or Kueue's annotations.
pub fn annotated_topology(meta: &ObjectMeta) -> (Option<String>, Option<String>) {
    let Some(annotations) = meta.annotations.as_ref() else { return (None, None) };
    for (required, preferred) in TOPOLOGY_ANNOTATIONS {
        let found = (annotations.get(required).cloned(), annotations.get(preferred).cloned());
        if found.0.is_some() || found.1.is_some() {
            return found;
        }
    }
    (None, None)
}

/// A PodGroup's own topology fields first, then its annotations.
pub fn either(own: (Option<String>, Option<String>), meta: &ObjectMeta) -> (Option<String>, Option<String>) {
    if own.0.is_some() || own.1.is_some() { own } else { annotated_topology(meta) }
}

pub fn created(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second())
}
