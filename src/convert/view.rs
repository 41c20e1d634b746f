//! The cluster's objects as scheduling reads them: owned (`ClusterObjects`, the
//! simulator's) or borrowed (`ClusterView`, the scheduler's cache's). Which gang a pod
//! belongs to is in [`membership`](super::membership), re-exported here for the readers of
//! objects.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;

use super::journal::{Journal, JournalMark};
pub use super::membership::{
    DERIVED_GANG_ANNOTATION, KAI_GROUP_ANNOTATION, KAI_PREEMPTIBILITY_LABEL, KAI_QUEUE_LABELS, KUEUE_GANG_PREFIX,
    KUEUE_GROUP_LABEL, MUSTER_GROUP_LABEL, OPPORTUNISTIC_ANNOTATION, PLUGIN_GROUP_LABEL, QUEUE_LABEL, gang_key,
    labelled_preemptibility, labelled_queue, named_gang, opportunistic, pod_key,
};
use crate::api::foreign::PodGroup as PluginPodGroup;
use crate::api::kai::{PodGroup as KaiPodGroup, Queue as KaiQueue};
use crate::api::kueue::{ClusterQueue, Cohort, LocalQueue};
use crate::api::pod_group::PodGroup as MusterPodGroup;
use crate::api::queue::Queue as MusterQueue;
use crate::api::topology::{Topology as KueueTopology, kai::Topology as KaiTopology};
use crate::convert::workloads::Workload;
use crate::engine::model::PodKey;

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
    pub groups: Vec<JournalMark>,
    /// Every other store the snapshot reads (a change there rebuilds it).
    pub others: Vec<JournalMark>,
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
