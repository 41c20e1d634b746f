//! Which kinds the scheduler reads, and as what: the one table that both the watches
//! ([`start`]) and `muster explain`'s one-off read follow,
//! from what the cluster serves ([`Sources`]). The workloads pods are grouped by are read
//! by kind and version besides ([`Sources::workloads`]).

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::cache::Cache;
use super::discovery::{KueueVersion, Sources};
use super::watch::{Cached, Wake, watch, watch_workloads};
use crate::api::foreign::PodGroup as PluginPodGroup;
use crate::api::kai::{PodGroup as KaiPodGroup, Queue as KaiQueue};
use crate::api::kueue::{ClusterQueue, ClusterQueueV1beta1, Cohort, CohortV1beta1, LocalQueue, LocalQueueV1beta1};
use crate::api::pod_group::PodGroup as MusterPodGroup;
use crate::api::queue::Queue as MusterQueue;
use crate::api::topology::{
    Topology as KueueTopology, kai::Topology as KaiTopology, v1beta1::Topology as KueueTopologyV1beta1,
};
use crate::api::wire::{WireClaim, WirePod};
use crate::convert::kinds::Held;
use crate::convert::view::ClusterObjects;

/// One kind read from the API server: watched into the cache, or listed once.
pub trait Read: Send + Sync {
    /// The kind as kubectl names it: `nodes`, `podgroups.muster.dev`.
    fn name(&self) -> String;
    /// The type it is kept as, for the test that every kind of the list is read.
    fn kept(&self) -> &'static str;
    /// Watches the kind into `cache`; `synced` fires when its first list is in.
    fn watch(
        &self,
        client: &kube::Client,
        cache: &Arc<Mutex<Cache>>,
        wake: &Arc<Wake>,
        synced: oneshot::Sender<()>,
    ) -> BoxFuture<'static, ()>;
    /// Lists the kind once into `objects`.
    fn list<'a>(
        &'a self,
        client: &'a kube::Client,
        objects: &'a mut ClusterObjects,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// A kind read as `A` (a slimmer type off the wire, or an older version) and kept as `K`.
struct ReadAs<A, K>(PhantomData<fn() -> (A, K)>);

impl<A, K> Read for ReadAs<A, K>
where
    A: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K: Cached + From<A>,
    ClusterObjects: Held<K>,
{
    fn name(&self) -> String {
        let (plural, group) = (A::plural(&()), A::group(&()));
        if group.is_empty() { plural.into_owned() } else { format!("{plural}.{group}") }
    }

    fn kept(&self) -> &'static str {
        std::any::type_name::<K>()
    }

    fn watch(
        &self,
        client: &kube::Client,
        cache: &Arc<Mutex<Cache>>,
        wake: &Arc<Wake>,
        synced: oneshot::Sender<()>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(watch::<A, K>(Api::all(client.clone()), cache.clone(), wake.clone(), synced))
    }

    fn list<'a>(
        &'a self,
        client: &'a kube::Client,
        objects: &'a mut ClusterObjects,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let listed = Api::<A>::all(client.clone()).list(&ListParams::default()).await?;
            objects.held_mut().extend(listed.items.into_iter().map(K::from));
            Ok(())
        })
    }
}

/// Reads `A`, kept as `K`.
fn read<A: 'static, K: 'static>() -> Box<dyn Read>
where
    ReadAs<A, K>: Read,
{
    Box::new(ReadAs::<A, K>(PhantomData))
}

/// The kinds read when the cluster serves `sources`, each once.
pub fn reads(sources: &Sources) -> Vec<Box<dyn Read>> {
    let mut reads = vec![
        read::<WirePod, Pod>(),
        read::<Node, Node>(),
        read::<PriorityClass, PriorityClass>(),
        read::<Namespace, Namespace>(),
        read::<PersistentVolumeClaim, PersistentVolumeClaim>(),
        read::<PersistentVolume, PersistentVolume>(),
        read::<StorageClass, StorageClass>(),
        read::<CSIDriver, CSIDriver>(),
        read::<CSIStorageCapacity, CSIStorageCapacity>(),
        read::<CSINode, CSINode>(),
        read::<Service, Service>(),
        read::<ReplicationController, ReplicationController>(),
        read::<ReplicaSet, ReplicaSet>(),
        read::<StatefulSet, StatefulSet>(),
    ];
    let mut when = |on: bool, kind: fn() -> Box<dyn Read>| {
        if on {
            reads.push(kind());
        }
    };
    when(sources.muster_queues, read::<MusterQueue, MusterQueue>);
    when(sources.kai_queues, read::<KaiQueue, KaiQueue>);
    when(sources.kai_groups, read::<KaiPodGroup, KaiPodGroup>);
    let topologies = sources.kueue_topologies;
    when(topologies == Some(KueueVersion::V1beta2), read::<KueueTopology, KueueTopology>);
    when(topologies == Some(KueueVersion::V1beta1), read::<KueueTopologyV1beta1, KueueTopology>);
    when(sources.kai_topologies, read::<KaiTopology, KaiTopology>);
    let (v1beta2, v1beta1) =
        (sources.kueue == Some(KueueVersion::V1beta2), sources.kueue == Some(KueueVersion::V1beta1));
    when(v1beta2, read::<ClusterQueue, ClusterQueue>);
    when(v1beta2, read::<LocalQueue, LocalQueue>);
    when(v1beta2 && sources.kueue_cohorts, read::<Cohort, Cohort>);
    when(v1beta1, read::<ClusterQueueV1beta1, ClusterQueue>);
    when(v1beta1, read::<LocalQueueV1beta1, LocalQueue>);
    when(v1beta1 && sources.kueue_cohorts, read::<CohortV1beta1, Cohort>);
    when(sources.kubernetes, read::<KubernetesPodGroup, KubernetesPodGroup>);
    when(sources.muster, read::<MusterPodGroup, MusterPodGroup>);
    when(sources.scheduler_plugins, read::<PluginPodGroup, PluginPodGroup>);
    when(sources.dra, read::<ResourceSlice, ResourceSlice>);
    when(sources.dra, read::<DeviceClass, DeviceClass>);
    when(sources.dra, read::<WireClaim, ResourceClaim>);
    when(sources.device_taint_rules, read::<DeviceTaintRule, DeviceTaintRule>);
    reads
}

/// Starts one watch per kind the cluster serves, into `cache`. Returns the tasks and, per
/// kind, a receiver that fires when its first list is in.
pub fn start(
    client: &kube::Client,
    sources: &Sources,
    cache: &Arc<Mutex<Cache>>,
    wake: &Arc<Wake>,
) -> (tokio::task::JoinSet<()>, Vec<oneshot::Receiver<()>>) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut synced = Vec::new();
    let mut add = |spawn: &dyn Fn(oneshot::Sender<()>) -> futures::future::BoxFuture<'static, ()>| {
        let (tx, rx) = oneshot::channel();
        tasks.spawn(spawn(tx));
        synced.push(rx);
    };
    for read in reads(sources) {
        add(&|tx| read.watch(client, cache, wake, tx));
    }
    for (kind, version) in sources.workloads() {
        add(&|tx| Box::pin(watch_workloads(client.clone(), kind, version, cache.clone(), wake.clone(), tx)));
    }
    (tasks, synced)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::convert::kinds::object_kinds;

    /// Every kind of the list, by type name (the workloads aside: they are read by kind and
    /// version, `Sources::workloads`).
    fn listed() -> BTreeSet<&'static str> {
        macro_rules! names {
            ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
                [$(std::any::type_name::<$kind>()),*]
            };
        }
        let workloads = std::any::type_name::<crate::convert::workloads::Workload>();
        object_kinds!(names).into_iter().filter(|name| *name != workloads).collect()
    }

    fn everything_served(kueue: KueueVersion) -> Sources {
        Sources {
            kubernetes: true,
            muster: true,
            scheduler_plugins: true,
            muster_queues: true,
            kai_queues: true,
            kai_groups: true,
            kueue: Some(kueue),
            kueue_imported: true,
            kueue_cohorts: true,
            dra: true,
            device_taint_rules: true,
            kueue_topologies: Some(kueue),
            kai_topologies: true,
            workload_versions: Default::default(),
        }
    }

    #[test]
    fn with_everything_served_every_kind_of_the_list_is_read_once() {
        for kueue in [KueueVersion::V1beta2, KueueVersion::V1beta1] {
            let kept: Vec<&str> = reads(&everything_served(kueue)).iter().map(|r| r.kept()).collect();
            let once: BTreeSet<&str> = kept.iter().copied().collect();
            assert_eq!(once.len(), kept.len(), "a kind read twice: {kept:?}");
            assert_eq!(once, listed(), "the kinds read and the list of kinds differ (Kueue {kueue:?})");
        }
    }
}
