//! One reader of the four PodGroup kinds (Kubernetes', Muster's, scheduler-plugins', KAI
//! Scheduler's): each
//! becomes a [`GroupSpec`], which the snapshot, the safety net, status and the metrics read,
//! so that what a PodGroup asks for is decided in one place.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use k8s_openapi::api::core::v1::Pod;

use super::view::{ClusterView, gang_key, labelled_preemptibility, labelled_queue};
pub use crate::convert::gang_spec::{
    GroupSpec, PREEMPTION_DELAY_ANNOTATION, annotated_topology, created, either, preemption_delay,
};
use crate::engine::model::{GangKey, GangKind};

fn key(kind: GangKind, meta: &ObjectMeta) -> GangKey {
    GangKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// Every PodGroup of the view, and every gang its workloads make, by gang.
pub fn group_specs(view: &ClusterView<'_>) -> HashMap<GangKey, GroupSpec> {
    let mut specs = HashMap::new();
    crate::convert::workloads::resolve::group_specs(&view.workloads, &mut specs);
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
            max_run_seconds: g.spec.max_run_seconds,
            queue: g.spec.queue.clone().filter(|q| !q.is_empty()).or_else(|| labelled_queue(&g.metadata)),
            preemptible: g
                .spec
                .preemptibility
                .map(|p| p == crate::api::pod_group::Preemptibility::Preemptible)
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
            source: None,
            problem: None,
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
            max_run_seconds: None,
            queue: labelled_queue(&g.metadata),
            preemptible: labelled_preemptibility(&g.metadata),
            preemption_delay: preemption_delay(None, &g.metadata),
            last_evicted: None,
            was_ready: g
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == "True")),
            source: None,
            problem: None,
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
            max_run_seconds: None,
            queue: labelled_queue(&g.metadata),
            preemptible: labelled_preemptibility(&g.metadata),
            preemption_delay: preemption_delay(None, &g.metadata),
            last_evicted: None,
            was_ready: false,
            source: None,
            problem: None,
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
            max_run_seconds: None,
            queue: labelled_queue(&g.metadata).or_else(|| g.spec.queue.clone().filter(|q| !q.is_empty())),
            preemptible: match g.spec.preemptibility.as_deref() {
                Some("non-preemptible") => Some(false),
                Some("preemptible" | "semi-preemptible") => Some(true),
                _ => labelled_preemptibility(&g.metadata),
            },
            preemption_delay: preemption_delay(g.spec.preemption_delay.as_deref(), &g.metadata),
            last_evicted: None,
            was_ready: false,
            source: None,
            problem: None,
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
