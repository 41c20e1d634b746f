//! The cluster's objects as scheduling reads them: owned (`ClusterObjects`, the
//! simulator's) or borrowed (`ClusterView`, the scheduler's cache's), and which gang a pod
//! belongs to. Below everything that reads objects, so that each can import it.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cluster_topology::{Topology as KueueTopology, kai::Topology as KaiTopology};
use super::crd::PodGroup as MusterPodGroup;
use super::foreign::PodGroup as PluginPodGroup;
use super::journal::{Journal, Mark};
use super::kai_queue::{PodGroup as KaiPodGroup, Queue as KaiQueue};
use super::kueue::{ClusterQueue, Cohort, LocalQueue};
use super::queue_crd::Queue as MusterQueue;
use super::workloads::Workload;
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

/// Everything the snapshot is made from.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub kubernetes_groups: Vec<KubernetesPodGroup>,
    pub muster_groups: Vec<MusterPodGroup>,
    pub plugin_groups: Vec<PluginPodGroup>,
    pub priority_classes: Vec<PriorityClass>,
    pub resource_slices: Vec<ResourceSlice>,
    pub device_classes: Vec<DeviceClass>,
    pub resource_claims: Vec<ResourceClaim>,
    /// Read by the simulator, which makes claims from them as the controller would.
    pub resource_claim_templates: Vec<ResourceClaimTemplate>,
    pub device_taint_rules: Vec<DeviceTaintRule>,
    /// Muster's team queues.
    pub queues: Vec<MusterQueue>,
    /// KAI Scheduler's queues, when the configuration imports them.
    pub kai_queues: Vec<KaiQueue>,
    /// The cluster's topology objects (Kueue's, KAI Scheduler's): hierarchies of node labels.
    pub kueue_topologies: Vec<KueueTopology>,
    pub kai_topologies: Vec<KaiTopology>,
    /// KAI Scheduler's PodGroups, when the configuration imports KAI.
    pub kai_groups: Vec<KaiPodGroup>,
    /// Kueue's queues, when the configuration imports them.
    pub cluster_queues: Vec<ClusterQueue>,
    pub cohorts: Vec<Cohort>,
    pub local_queues: Vec<LocalQueue>,
    /// Whether the configuration imports Kueue's queues; when not, the pods Kueue admits
    /// are placed outside Muster's queues.
    pub kueue_imported: bool,
    /// Read for queues: namespace selectors and default-queue labels.
    pub namespaces: Vec<Namespace>,
    /// The workloads pods are grouped by (Jobs, JobSets, training jobs...).
    pub workloads: Vec<Workload>,
}

impl ClusterObjects {
    /// The objects as a view, for `assemble`.
    pub fn view(&self) -> ClusterView<'_> {
        ClusterView {
            nodes: self.nodes.iter().collect(),
            pods: self.pods.iter().collect(),
            kubernetes_groups: self.kubernetes_groups.iter().collect(),
            muster_groups: self.muster_groups.iter().collect(),
            plugin_groups: self.plugin_groups.iter().collect(),
            priority_classes: self.priority_classes.iter().collect(),
            resource_slices: self.resource_slices.iter().collect(),
            device_classes: self.device_classes.iter().collect(),
            resource_claims: self.resource_claims.iter().collect(),
            device_taint_rules: self.device_taint_rules.iter().collect(),
            queues: self.queues.iter().collect(),
            kai_queues: self.kai_queues.iter().collect(),
            kueue_topologies: self.kueue_topologies.iter().collect(),
            kai_topologies: self.kai_topologies.iter().collect(),
            kai_groups: self.kai_groups.iter().collect(),
            cluster_queues: self.cluster_queues.iter().collect(),
            cohorts: self.cohorts.iter().collect(),
            local_queues: self.local_queues.iter().collect(),
            kueue_imported: self.kueue_imported,
            namespaces: self.namespaces.iter().collect(),
            workloads: self.workloads.iter().collect(),
            assumed: None,
            versions: None,
        }
    }
}

/// The objects a snapshot is made from, borrowed from wherever they are kept (the
/// scheduler's cache, the simulator's cluster), so that nothing is copied to read them.
#[derive(Clone, Debug, Default)]
pub struct ClusterView<'a> {
    pub nodes: Vec<&'a Node>,
    pub pods: Vec<&'a Pod>,
    pub kubernetes_groups: Vec<&'a KubernetesPodGroup>,
    pub muster_groups: Vec<&'a MusterPodGroup>,
    pub plugin_groups: Vec<&'a PluginPodGroup>,
    pub priority_classes: Vec<&'a PriorityClass>,
    pub resource_slices: Vec<&'a ResourceSlice>,
    pub device_classes: Vec<&'a DeviceClass>,
    /// Claims as the scheduler last wrote or assumed them (an allocation being written
    /// counts at once).
    pub resource_claims: Vec<&'a ResourceClaim>,
    pub device_taint_rules: Vec<&'a DeviceTaintRule>,
    pub queues: Vec<&'a MusterQueue>,
    pub kai_queues: Vec<&'a KaiQueue>,
    pub kueue_topologies: Vec<&'a KueueTopology>,
    pub kai_topologies: Vec<&'a KaiTopology>,
    pub kai_groups: Vec<&'a KaiPodGroup>,
    pub cluster_queues: Vec<&'a ClusterQueue>,
    pub cohorts: Vec<&'a Cohort>,
    pub local_queues: Vec<&'a LocalQueue>,
    pub kueue_imported: bool,
    pub namespaces: Vec<&'a Namespace>,
    pub workloads: Vec<&'a Workload>,
    /// Pods placed and being bound, not yet seen bound: they count on these nodes.
    pub assumed: Option<&'a HashMap<PodKey, String>>,
    /// What changed since a snapshot was last made from the same stores; None (the
    /// simulator's objects): every snapshot is made afresh.
    pub versions: Option<Versions<'a>>,
}

/// What changed in the stores a view reads, for a snapshot made from the last one. Pods
/// and nodes by object; everything else by store, as any change there is rebuilt from.
#[derive(Clone, Debug)]
pub struct Versions<'a> {
    /// Pods, with the assumptions of where they are being bound. `pods` and `nodes` are
    /// sorted by namespace and name, as the stores keep them, when versions are given.
    pub pods: &'a Journal,
    pub nodes: &'a Journal,
    /// The PodGroups of every kind.
    pub groups: Vec<Mark>,
    /// Every other store the snapshot reads (a change there rebuilds it).
    pub others: Vec<Mark>,
}

impl ClusterView<'_> {
    /// The pod's node: its own `spec.nodeName`, or the one it is assumed on.
    pub fn node_of<'p>(&'p self, pod: &'p Pod) -> Option<&'p String> {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .or_else(|| self.assumed.filter(|a| !a.is_empty())?.get(&pod_key(&pod.metadata)))
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
