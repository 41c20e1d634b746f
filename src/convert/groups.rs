//! One reader of the four PodGroup kinds (Kubernetes', Muster's, scheduler-plugins', KAI
//! Scheduler's): each
//! becomes a [`GroupSpec`], which the snapshot, the safety net, status and the metrics read,
//! so that what a PodGroup asks for is decided in one place.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;

use super::view::{ClusterView, gang_key, labelled_preemptibility, labelled_queue};
use crate::api::foreign::PodGroup as PluginPodGroup;
use crate::api::kai::PodGroup as KaiPodGroup;
use crate::api::pod_group::PodGroup as MusterPodGroup;
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
    let muster = view.muster_groups.iter().map(|g| muster_group_spec(g));
    let kubernetes = view.kubernetes_groups.iter().map(|g| kubernetes_group_spec(g));
    let plugins = view.plugin_groups.iter().map(|g| plugin_group_spec(g));
    let kai = view.kai_groups.iter().map(|g| kai_group_spec(g));
    for spec in muster.chain(kubernetes).chain(plugins).chain(kai) {
        specs.insert(spec.key.clone(), spec);
    }
    specs
}

/// A Muster PodGroup's spec: its fields, else its labels and annotations; Ready since its
/// last eviction as its status says.
fn muster_group_spec(g: &MusterPodGroup) -> GroupSpec {
    let own = g.spec.topology.as_ref().map_or((None, None), |t| (t.required.clone(), t.preferred.clone()));
    GroupSpec {
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
    }
}

/// A Kubernetes PodGroup's spec (scheduling.k8s.io): its gang policy's minimum, its first
/// topology constraint as the required level.
fn kubernetes_group_spec(g: &KubernetesPodGroup) -> GroupSpec {
    let min = g.spec.scheduling_policy.gang.as_ref().map_or(1, |gang| gang.min_count.max(1));
    let required = g
        .spec
        .scheduling_constraints
        .as_ref()
        .and_then(|c| c.topology.as_ref())
        .and_then(|t| t.first())
        .map(|t| t.key.clone());
    GroupSpec {
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
    }
}

/// A scheduler-plugins PodGroup's spec, its topology from its annotations.
fn plugin_group_spec(g: &PluginPodGroup) -> GroupSpec {
    GroupSpec {
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
    }
}

/// A KAI Scheduler PodGroup's spec, its preemptibility from KAI's names for it.
fn kai_group_spec(g: &KaiPodGroup) -> GroupSpec {
    let own = g
        .spec
        .topology_constraint
        .as_ref()
        .map_or((None, None), |t| (t.required_topology_level.clone(), t.preferred_topology_level.clone()));
    GroupSpec {
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
    }
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
