//! Wires the API server's watches to the cache: the one place watch events are applied,
//! and the one place the watches are started.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSetSpec, StatefulSetSpec};
use k8s_openapi::api::core::v1::{Node, Pod, ReplicationControllerSpec, ServiceSpec};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, oneshot};

use super::cache::{Cache, Store};
use super::changes::{self, Help};
use crate::convert::kinds::object_kinds;
use crate::convert::workloads::{Workload, WorkloadKind};
use crate::engine::model::GangKind;
use crate::k8s::observe::health::SchedulerHealth;

/// How a kind of object is kept in the cache.
pub trait Cached: Resource + Clone + Debug + PartialEq + DeserializeOwned + Send + Sync + 'static {
    fn store(cache: &mut Cache) -> &mut Store<Self>;

    /// Whether two versions of an object are the same to every scheduling decision: by
    /// default, equal but for their resourceVersion.
    fn same_for_decisions(old: &Self, new: &Self) -> bool {
        let mut old = old.clone();
        old.meta_mut().resource_version = new.meta().resource_version.clone();
        old == *new
    }

    fn apply(cache: &mut Cache, object: Self) {
        Self::store(cache).apply(object);
    }

    fn delete(cache: &mut Cache, object: &Self) {
        Self::store(cache).delete(object);
    }

    fn relist_done(cache: &mut Cache) {
        Self::store(cache).relist_done();
    }

    /// The object as the cache keeps it: only what some decision reads.
    fn slim(self) -> Self {
        self
    }

    /// What a change of this object, from `old` to `new` (`None`: absent), could help.
    fn helps(_old: Option<&Self>, _new: Option<&Self>) -> Help {
        Help::Every
    }

    /// Completes the object from what the cache holds, before it is compared with the
    /// version held (a pod's gang from its owners).
    fn prepare(_cache: &Cache, _object: &mut Self) {}
}

/// Annotations no decision reads that can be as large as the object itself.
const UNREAD_ANNOTATIONS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

impl Cached for Pod {
    fn store(cache: &mut Cache) -> &mut Store<Self> {
        &mut cache.pods
    }
    fn same_for_decisions(old: &Self, new: &Self) -> bool {
        super::relevance::same_pod(old, new)
    }
    fn apply(cache: &mut Cache, object: Self) {
        cache.apply_pod(object);
    }
    fn delete(cache: &mut Cache, object: &Self) {
        cache.delete_pod(object);
    }
    /// A pod is kept with what placement reads: of each container its name, resources and
    /// host ports (and an init container's restart policy, which makes it a sidecar), not
    /// its image, command, environment, probes or mounts; of the pod's volumes, those backed
    /// by claims. A pod that ended is
    /// kept for what it still tells (its gang's succeeded and failed pods, the claims it
    /// held): also without init containers and placement constraints. No pod keeps its
    /// container statuses, which nothing reads.
    /// A Job-heavy cluster holds many more of these than of pods that run.
    fn slim(mut self) -> Self {
        use k8s_openapi::api::core::v1::{Container, ContainerPort, Volume};
        let ended = matches!(self.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        // Host ports and volumes backed by claims constrain placement (`convert::pod_rules`,
        // `convert::volumes`); other ports and volumes do not.
        let host_ports = |ports: Vec<ContainerPort>| {
            Some(ports.into_iter().filter(|p| p.host_port.is_some_and(|port| port > 0)).collect::<Vec<_>>())
                .filter(|kept| !kept.is_empty())
        };
        let bare = |c: Container| Container {
            name: c.name,
            resources: c.resources,
            restart_policy: c.restart_policy,
            ports: c.ports.and_then(host_ports),
            ..Default::default()
        };
        let claimed = |v: &Volume| v.persistent_volume_claim.is_some() || v.ephemeral.is_some();
        if let Some(spec) = self.spec.as_mut() {
            spec.containers = std::mem::take(&mut spec.containers).into_iter().map(bare).collect();
            spec.init_containers = spec.init_containers.take().map(|c| c.into_iter().map(bare).collect());
            spec.ephemeral_containers = None;
            spec.volumes = spec
                .volumes
                .take()
                .map(|mut v| {
                    v.retain(claimed);
                    v
                })
                .filter(|v| !v.is_empty());
            if ended {
                spec.init_containers = None;
                (spec.affinity, spec.tolerations, spec.topology_spread_constraints) = (None, None, None);
            }
        }
        // Container statuses are read by nothing (`relevance::same_pod`).
        if let Some(status) = self.status.as_mut() {
            (status.container_statuses, status.init_container_statuses) = (None, None);
            (status.ephemeral_container_statuses, status.message) = (None, None);
        }
        self
    }
    fn relist_done(cache: &mut Cache) {
        cache.pods_relisted();
    }
    fn helps(old: Option<&Self>, new: Option<&Self>) -> Help {
        changes::pod(old, new)
    }
    fn prepare(cache: &Cache, object: &mut Self) {
        cache.mark_pod(object);
    }
}

/// Workloads: kept as little as their gangs need; a change re-resolves their pods' gangs
/// (`workloads::follow`). Their relists do not come through here (`watch_workloads`).
impl Cached for Workload {
    fn store(cache: &mut Cache) -> &mut Store<Self> {
        &mut cache.workloads
    }
    fn same_for_decisions(old: &Self, new: &Self) -> bool {
        old == new
    }
    fn apply(cache: &mut Cache, object: Self) {
        cache.apply_workload(object);
    }
    fn delete(cache: &mut Cache, object: &Self) {
        cache.delete_workload(object);
    }
}

impl Cached for ResourceClaim {
    fn store(cache: &mut Cache) -> &mut Store<Self> {
        &mut cache.resource_claims
    }
    fn apply(cache: &mut Cache, object: Self) {
        cache.apply_claim(object);
    }
    fn delete(cache: &mut Cache, object: &Self) {
        cache.delete_claim(object);
    }
    fn relist_done(cache: &mut Cache) {
        cache.claims_relisted();
    }
    fn helps(old: Option<&Self>, new: Option<&Self>) -> Help {
        changes::claim(old, new)
    }
}

impl Cached for Node {
    fn store(cache: &mut Cache) -> &mut Store<Self> {
        &mut cache.nodes
    }
    fn same_for_decisions(old: &Self, new: &Self) -> bool {
        let (mut old, mut new) = (old.clone(), new.clone());
        super::relevance::blank_node(&mut old);
        super::relevance::blank_node(&mut new);
        old == new
    }
}

/// PodGroups: a change is their own gang's.
macro_rules! cached_group {
    ($kind:ty, $field:ident, $gang:expr) => {
        impl Cached for $kind {
            fn store(cache: &mut Cache) -> &mut Store<Self> {
                &mut cache.$field
            }
            fn helps(old: Option<&Self>, new: Option<&Self>) -> Help {
                new.or(old).map_or(Help::Nobody, |group| changes::group($gang, group))
            }
        }
    };
}

/// The kinds PodTopologySpread's default constraints read: only their selectors are kept,
/// so the status a controller rewrites with every pod it makes changes nothing.
macro_rules! cached_selector {
    ($kind:ty, $field:ident, $keep:expr) => {
        impl Cached for $kind {
            fn store(cache: &mut Cache) -> &mut Store<Self> {
                &mut cache.$field
            }
            fn slim(self) -> Self {
                let meta = self.metadata;
                let spec = $keep(self.spec);
                let metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: meta.name,
                    namespace: meta.namespace,
                    uid: meta.uid,
                    resource_version: meta.resource_version,
                    ..Default::default()
                };
                Self { metadata, spec, ..Default::default() }
            }
        }
    };
}

/// Every other kind is kept as it comes: its `Cached` impl is made from the list of kinds.
macro_rules! cached {
    ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
        $(cached!(@one $field, $kind);)*
    };
    (@one pods, $kind:ty) => {};
    (@one nodes, $kind:ty) => {};
    (@one workloads, $kind:ty) => {};
    (@one resource_claims, $kind:ty) => {};
    (@one kubernetes_groups, $kind:ty) => {
        cached_group!($kind, kubernetes_groups, GangKind::Kubernetes);
    };
    (@one muster_groups, $kind:ty) => {
        cached_group!($kind, muster_groups, GangKind::Muster);
    };
    (@one plugin_groups, $kind:ty) => {
        cached_group!($kind, plugin_groups, GangKind::SchedulerPlugins);
    };
    (@one kai_groups, $kind:ty) => {
        cached_group!($kind, kai_groups, GangKind::Kai);
    };
    (@one services, $kind:ty) => {
        cached_selector!($kind, services, |spec: Option<ServiceSpec>| {
            spec.map(|s| ServiceSpec { selector: s.selector, ..Default::default() })
        });
    };
    (@one replication_controllers, $kind:ty) => {
        cached_selector!($kind, replication_controllers, |spec: Option<ReplicationControllerSpec>| {
            spec.map(|s| ReplicationControllerSpec { selector: s.selector, ..Default::default() })
        });
    };
    (@one replica_sets, $kind:ty) => {
        cached_selector!($kind, replica_sets, |s: ReplicaSetSpec| ReplicaSetSpec {
            selector: s.selector,
            ..Default::default()
        });
    };
    (@one stateful_sets, $kind:ty) => {
        cached_selector!($kind, stateful_sets, |s: StatefulSetSpec| StatefulSetSpec {
            selector: s.selector,
            ..Default::default()
        });
    };
    (@one $field:ident, $kind:ty) => {
        impl Cached for $kind {
            fn store(cache: &mut Cache) -> &mut Store<Self> {
                &mut cache.$field
            }
        }
    };
}
object_kinds!(cached);

/// An event of an object as the cache keeps it (an older version as the one kept, a
/// workload as little as its gang needs); None when the object is left out.
fn read_event<A, K>(event: Event<A>, read: impl Fn(A) -> Option<K>) -> Option<Event<K>> {
    Some(match event {
        Event::Apply(object) => Event::Apply(read(object)?),
        Event::Delete(object) => Event::Delete(read(object)?),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(read(object)?),
        Event::InitDone => Event::InitDone,
    })
}

/// Applies one watch event; pure apart from the cache it changes. Objects are kept without
/// their `managedFields`, which nothing here reads and which are often the largest part of
/// an object.
/// Applies a watch event to the cache; returns whether it changes anything a scheduling
/// decision reads (a new, changed or deleted object, the end of a relist), so whether the
/// loop should wake.
pub fn apply_event<K: Cached>(cache: &mut Cache, event: Event<K>) -> bool {
    fn trimmed<K: Cached>(mut object: K) -> K {
        let meta = object.meta_mut();
        meta.managed_fields = None;
        if let Some(annotations) = meta.annotations.as_mut() {
            for unread in UNREAD_ANNOTATIONS {
                annotations.remove(unread);
            }
        }
        object.slim()
    }
    match event {
        Event::Apply(object) => {
            let mut object = trimmed(object);
            K::prepare(cache, &mut object);
            let old = K::store(cache).find(&object);
            let changed = old.is_none_or(|old| !K::same_for_decisions(old, &object));
            let help = if changed { K::helps(old, Some(&object)) } else { Help::Nobody };
            K::apply(cache, object);
            cache.changes.note(help);
            changed
        }
        Event::Delete(object) => {
            let help = K::helps(Some(K::store(cache).find(&object).unwrap_or(&object)), None);
            K::delete(cache, &object);
            cache.changes.note(help);
            true
        }
        Event::Init => {
            K::store(cache).relist_start();
            false
        }
        Event::InitApply(object) => {
            let mut object = trimmed(object);
            K::prepare(cache, &mut object);
            K::store(cache).relisted(object);
            false
        }
        Event::InitDone => {
            K::relist_done(cache);
            cache.changes.note(Help::Every);
            true
        }
    }
}

/// Wakes the scheduling loop, and tells health that a cycle is owed, so that a loop that
/// stops answering is noticed by whoever wakes it.
pub struct Wake {
    notify: Notify,
    health: Arc<SchedulerHealth>,
}

impl Wake {
    pub fn new(health: Arc<SchedulerHealth>) -> Wake {
        Wake { notify: Notify::new(), health }
    }

    pub fn wake(&self) {
        self.health.work();
        self.notify.notify_one();
    }

    /// Completes at the next wake (at once if one came since the last).
    pub async fn woken(&self) {
        self.notify.notified().await
    }
}

/// Watches every object of `api` into the cache, waking the scheduling loop on each change
/// a decision reads.
/// `synced` fires after the first complete list; until then, a failing list is reported to
/// health, so readiness says what keeps the caches empty.
/// Objects of kind `A` are kept as `K` (an older version read as the one the cache keeps).
pub async fn watch<A, K>(api: Api<A>, cache: Arc<Mutex<Cache>>, wake: Arc<Wake>, synced: oneshot::Sender<()>)
where
    A: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
    A::DynamicType: Default,
    K: Cached + From<A>,
{
    let kind = A::plural(&Default::default()).to_string();
    let apply =
        |cache: &mut Cache, event: Event<A>| apply_event::<K>(cache, read_event(event, |a| Some(K::from(a)))?).into();
    follow(api, kind, apply, cache, wake, synced).await
}

/// Watches the workloads of `kind` (served at `version`) into the cache, each kept as
/// little as its gang needs; one that cannot be read at all is left out with a warning.
/// Several kinds share one store, so a relist replaces only its own kind's objects, at its
/// end (`Cache::workloads_relisted`).
pub(super) async fn watch_workloads(
    client: kube::Client,
    kind: WorkloadKind,
    version: &'static str,
    cache: Arc<Mutex<Cache>>,
    wake: Arc<Wake>,
    synced: oneshot::Sender<()>,
) {
    let (group, _) = kind.api();
    let api: Api<DynamicObject> = Api::all_with(client, &kind.api_resource(version));
    let read = move |object: DynamicObject| {
        let read = serde_json::to_value(&object)
            .map_err(|e| e.to_string())
            .and_then(|v| Workload::read(kind, &v).map_err(|e| e.to_string()));
        read.inspect_err(|e| tracing::warn!(kind = kind.name(), error = %e, "a workload could not be read; left out"))
            .ok()
    };
    let mut relisted: Option<Vec<Workload>> = None;
    let apply = move |cache: &mut Cache, event: Event<DynamicObject>| -> Option<bool> {
        match event {
            Event::Init => relisted = Some(Vec::new()),
            Event::InitApply(object) => relisted.get_or_insert_default().extend(read(object)),
            Event::InitDone => {
                cache.workloads_relisted(kind, relisted.take().unwrap_or_default());
                cache.changes.note(Help::Every);
                return Some(true);
            }
            Event::Apply(object) => return Some(apply_event(cache, Event::Apply(read(object)?))),
            Event::Delete(object) => return Some(apply_event(cache, Event::Delete(read(object)?))),
        }
        Some(false)
    };
    follow(api, format!("{}.{group}", kind.plural()), apply, cache, wake, synced).await
}

/// The watch loop: each event of `A` applied to the cache by `apply`, which says whether it
/// changed anything a decision reads (None: the event was left out).
async fn follow<A>(
    api: Api<A>,
    kind: String,
    mut apply: impl FnMut(&mut Cache, Event<A>) -> Option<bool> + Send,
    cache: Arc<Mutex<Cache>>,
    wake: Arc<Wake>,
    synced: oneshot::Sender<()>,
) where
    A: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let mut synced = Some(synced);
    let mut events = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                let done = matches!(event, Event::InitDone);
                let changed = apply(&mut cache.lock().unwrap_or_else(|e| e.into_inner()), event).unwrap_or(false);
                if done && let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
                if changed {
                    wake.wake();
                }
            }
            Err(e) => {
                if synced.is_some() {
                    wake.health.sync_problem(format!("the first list of {kind} failed: {e}"));
                }
                tracing::warn!(%kind, error = %e, "watch failed; retrying");
            }
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
