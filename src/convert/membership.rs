//! Which gang a pod belongs to, and the labels and annotations that say so: the PodGroup it
//! names (five kinds), the gang its owners make, or a gang of one; the queue and
//! preemptibility its labels name. Below the view and the workloads, which both read it.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::engine::model::{GangKey, GangKind, PodKey};

/// The label that makes a pod a member of Muster's PodGroup of that name.
pub const MUSTER_GROUP_LABEL: &str = "muster.dev/pod-group";
/// The label scheduler-plugins' PodGroup members carry.
pub const PLUGIN_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The annotation that puts a pod in a KAI Scheduler PodGroup (read when KAI is imported).
pub const KAI_GROUP_ANNOTATION: &str = "pod-group-name";

/// The annotation a pod bound opportunistically (in capacity held for another gang's
/// reservation) carries, written through its Binding: `"true"`. The gang is evicted whole
/// when the reserved gang can start in its place.
pub const OPPORTUNISTIC_ANNOTATION: &str = "muster.dev/opportunistic";

/// Whether a pod was bound opportunistically ([`OPPORTUNISTIC_ANNOTATION`]).
pub fn opportunistic(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().and_then(|a| a.get(OPPORTUNISTIC_ANNOTATION)).is_some_and(|v| v == "true")
}

/// The label naming a gang's queue, on its PodGroup or its pods.
pub const QUEUE_LABEL: &str = "muster.dev/queue";
/// KAI Scheduler's queue labels, current and before v0.6.
pub const KAI_QUEUE_LABELS: [&str; 2] = ["kai.scheduler/queue", "runai/queue"];
/// KAI Scheduler's preemptibility label (`preemptible`, `non-preemptible`).
pub const KAI_PREEMPTIBILITY_LABEL: &str = "kai.scheduler/preemptibility";
/// The queue an object's labels name: Muster's, then KAI Scheduler's.
pub fn labelled_queue(meta: &ObjectMeta) -> Option<String> {
    let labels = meta.labels.as_ref()?;
    std::iter::once(QUEUE_LABEL).chain(KAI_QUEUE_LABELS).find_map(|k| labels.get(k).filter(|v| !v.is_empty()).cloned())
}

/// KAI Scheduler's preemptibility label on an object.
pub fn labelled_preemptibility(meta: &ObjectMeta) -> Option<bool> {
    match meta.labels.as_ref()?.get(KAI_PREEMPTIBILITY_LABEL)?.as_str() {
        "preemptible" => Some(true),
        "non-preemptible" => Some(false),
        _ => None,
    }
}

pub fn pod_key(meta: &ObjectMeta) -> PodKey {
    PodKey {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// The gang a pod names itself, in DESIGN order: Kubernetes' schedulingGroup, Muster's
/// label, scheduler-plugins' label, KAI Scheduler's `pod-group-name` annotation, Kueue's
/// plain-pod group label.
pub fn named_gang(pod: &Pod) -> Option<(GangKind, String)> {
    let labels = pod.metadata.labels.as_ref();
    let native = pod.spec.as_ref().and_then(|s| s.scheduling_group.as_ref()).and_then(|g| g.pod_group_name.clone());
    if let Some(name) = native {
        Some((GangKind::Kubernetes, name))
    } else if let Some(name) = labels.and_then(|l| l.get(MUSTER_GROUP_LABEL)) {
        Some((GangKind::Muster, name.clone()))
    } else if let Some(name) = labels.and_then(|l| l.get(PLUGIN_GROUP_LABEL)) {
        Some((GangKind::SchedulerPlugins, name.clone()))
    } else if let Some(name) = pod.metadata.annotations.as_ref().and_then(|a| a.get(KAI_GROUP_ANNOTATION)) {
        Some((GangKind::Kai, name.clone()))
    } else {
        labels
            .and_then(|l| l.get(KUEUE_GROUP_LABEL))
            .map(|name| (GangKind::Workload, format!("{KUEUE_GANG_PREFIX}{name}")))
    }
}

/// Set on the scheduler's own copy of a pod (never written to the API server): the gang its
/// owners make, as `Kind/name` (see `workloads::resolve`). Whatever a pod carries under this
/// name is replaced.
pub const DERIVED_GANG_ANNOTATION: &str = "muster.dev/derived-gang";

/// Kueue's label grouping plain pods.
pub const KUEUE_GROUP_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
/// How a Kueue pod group's gang is named.
pub const KUEUE_GANG_PREFIX: &str = "pod-group/";

/// Which gang a pod belongs to: the one it names ([`named_gang`]), else the one its owners
/// make (the [derived annotation](DERIVED_GANG_ANNOTATION) the cache, the
/// simulator and `muster explain` set from its owners); otherwise it is a gang of one.
pub fn gang_key(pod: &Pod) -> GangKey {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let derived = || {
        let annotations = pod.metadata.annotations.as_ref()?;
        annotations.get(DERIVED_GANG_ANNOTATION).map(|name| (GangKind::Workload, name.clone()))
    };
    let (kind, name) = named_gang(pod)
        .or_else(derived)
        .unwrap_or_else(|| (GangKind::Single, pod.metadata.name.clone().unwrap_or_default()));
    GangKey { kind, namespace, name }
}
