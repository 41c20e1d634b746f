//! One reader of the four PodGroup kinds (Kubernetes', Muster's, scheduler-plugins', KAI
//! Scheduler's): each
//! becomes a [`GroupSpec`], which the snapshot, the safety net, status and the metrics read,
//! so that what a PodGroup asks for is decided in one place.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use k8s_openapi::api::core::v1::Pod;

use super::view::{ClusterView, gang_key, labelled_preemptibility, labelled_queue};
use crate::engine::model::{GangKey, GangKind};

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
    /// The queue it names: Muster's `spec.queue`, else a queue label on the group.
    pub queue: Option<String>,
    /// Whether it says it may be preempted (Muster's `spec.preemptibility`, else KAI's label).
    pub preemptible: Option<bool>,
    /// Its own preemption delay in seconds: its `spec.preemptionDelay`, else KAI's
    /// `kai.scheduler/preemption-delay` annotation; an error names what does not parse.
    pub preemption_delay: Result<Option<i64>, String>,
    /// When Muster last evicted it (its `Evicted` condition), Unix seconds.
    pub last_evicted: Option<i64>,
    /// Whether its persisted status says it was whole and Ready since its last eviction
    /// (Muster's `PodsReady`, Kubernetes' `PodGroupInitiallyScheduled`): a scheduler that
    /// starts while it is losing pods grants it the grace period.
    pub was_ready: bool,
}

/// KAI Scheduler's annotation for a gang's preemption delay, on the PodGroup or the pod.
pub const PREEMPTION_DELAY_ANNOTATION: &str = "kai.scheduler/preemption-delay";

/// A preemption delay: the object's own field, else the annotation.
pub fn preemption_delay(own: Option<&str>, meta: &ObjectMeta) -> Result<Option<i64>, String> {
    let text = own.or_else(|| meta.annotations.as_ref()?.get(PREEMPTION_DELAY_ANNOTATION).map(String::as_str));
    text.map(|t| crate::config::parse_duration(t).map_err(|why| format!("preemptionDelay: {why}"))).transpose()
}

/// The annotations other schedulers' users put topology in, with the level they name:
/// (required, preferred). KAI Scheduler's, then Kueue's; the values are node label keys.
const TOPOLOGY_ANNOTATIONS: [(&str, &str); 2] = [
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
fn either(own: (Option<String>, Option<String>), meta: &ObjectMeta) -> (Option<String>, Option<String>) {
    if own.0.is_some() || own.1.is_some() { own } else { annotated_topology(meta) }
}

pub fn created(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second())
}

fn key(kind: GangKind, meta: &ObjectMeta) -> GangKey {
    GangKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// Every PodGroup of the view, by gang.
pub fn group_specs(view: &ClusterView<'_>) -> HashMap<GangKey, GroupSpec> {
    let mut specs = HashMap::new();
    for g in &view.muster_groups {
        let own = g.spec.topology.as_ref().map_or((None, None), |t| (t.required.clone(), t.preferred.clone()));
        let spec = GroupSpec {
            key: key(GangKind::Muster, &g.metadata),
            min_member: g.spec.min_member.max(1) as usize,
            priority: None,
            priority_class_name: g.spec.priority_class_name.clone(),
            created: created(&g.metadata),
            topology: either(own, &g.metadata),
            pods_ready_timeout_seconds: g.spec.pods_ready_timeout_seconds,
            queue: g.spec.queue.clone().filter(|q| !q.is_empty()).or_else(|| labelled_queue(&g.metadata)),
            preemptible: g
                .spec
                .preemptibility
                .map(|p| p == super::crd::Preemptibility::Preemptible)
                .or_else(|| labelled_preemptibility(&g.metadata)),
            preemption_delay: preemption_delay(g.spec.preemption_delay.as_deref(), &g.metadata),
            last_evicted: g.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == "Evicted" && c.status == "True")
                    .map(|c| c.last_transition_time.0.as_second())
            }),
            // Ready, or broken after it was (status.rs), since its last eviction.
            was_ready: g.status.as_ref().is_some_and(|s| {
                let at = |kind: &str| s.conditions.iter().find(|c| c.type_ == kind);
                let ready = at("PodsReady").filter(|c| c.status == "True" || c.reason == super::status::BROKEN);
                let evicted = at("Evicted").filter(|c| c.status == "True");
                ready.is_some_and(|r| evicted.is_none_or(|e| r.last_transition_time.0 > e.last_transition_time.0))
            }),
        };
        specs.insert(spec.key.clone(), spec);
    }
    for g in &view.kubernetes_groups {
        let min = g.spec.scheduling_policy.gang.as_ref().map_or(1, |gang| gang.min_count.max(1));
        let required = g
            .spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.as_ref())
            .and_then(|t| t.first())
            .map(|t| t.key.clone());
        let spec = GroupSpec {
            key: key(GangKind::Kubernetes, &g.metadata),
            min_member: min as usize,
            priority: g.spec.priority,
            priority_class_name: g.spec.priority_class_name.clone(),
            created: created(&g.metadata),
            topology: either((required, None), &g.metadata),
            pods_ready_timeout_seconds: None,
            queue: labelled_queue(&g.metadata),
            preemptible: labelled_preemptibility(&g.metadata),
            preemption_delay: preemption_delay(None, &g.metadata),
            last_evicted: None,
            was_ready: g
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == "True")),
        };
        specs.insert(spec.key.clone(), spec);
    }
    for g in &view.plugin_groups {
        let spec = GroupSpec {
            key: key(GangKind::SchedulerPlugins, &g.metadata),
            min_member: g.spec.min_member.max(1) as usize,
            priority: None,
            priority_class_name: g.spec.priority_class_name.clone(),
            created: created(&g.metadata),
            topology: annotated_topology(&g.metadata),
            pods_ready_timeout_seconds: None,
            queue: labelled_queue(&g.metadata),
            preemptible: labelled_preemptibility(&g.metadata),
            preemption_delay: preemption_delay(None, &g.metadata),
            last_evicted: None,
            was_ready: false,
        };
        specs.insert(spec.key.clone(), spec);
    }
    for g in &view.kai_groups {
        let own = g
            .spec
            .topology_constraint
            .as_ref()
            .map_or((None, None), |t| (t.required_topology_level.clone(), t.preferred_topology_level.clone()));
        let spec = GroupSpec {
            key: key(GangKind::Kai, &g.metadata),
            min_member: g.spec.min_member.unwrap_or(1).max(1) as usize,
            priority: None,
            priority_class_name: g.spec.priority_class_name.clone(),
            created: created(&g.metadata),
            topology: either(own, &g.metadata),
            pods_ready_timeout_seconds: None,
            queue: labelled_queue(&g.metadata).or_else(|| g.spec.queue.clone().filter(|q| !q.is_empty())),
            preemptible: match g.spec.preemptibility.as_deref() {
                Some("non-preemptible") => Some(false),
                Some("preemptible" | "semi-preemptible") => Some(true),
                _ => labelled_preemptibility(&g.metadata),
            },
            preemption_delay: preemption_delay(g.spec.preemption_delay.as_deref(), &g.metadata),
            last_evicted: None,
            was_ready: false,
        };
        specs.insert(spec.key.clone(), spec);
    }
    specs
}

/// Muster's pods by gang, computed once per cycle for everything that needs a gang's pods.
pub fn members<'a>(view: &ClusterView<'a>, scheduler_name: &str) -> HashMap<GangKey, Vec<&'a Pod>> {
    let mut members: HashMap<GangKey, Vec<&'a Pod>> = HashMap::new();
    for &pod in &view.pods {
        if pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name) {
            members.entry(gang_key(pod)).or_default().push(pod);
        }
    }
    members
}
