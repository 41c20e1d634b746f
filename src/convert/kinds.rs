//! Every kind of object scheduling reads, listed once.
//!
//! [`object_kinds!`] hands the list to another macro, which makes from it what must name
//! every kind: the simulator's owned objects and the borrowed view
//! ([`view`](super::view)), the scheduler's stores and the copy a cycle takes of them
//! (`k8s::store::cache`), the accessors by type ([`Held`]), and the simulator's record of
//! what changed (`sim::tracker`). Adding a kind is one entry here, plus what is new about
//! it: when the cluster serves it (`k8s::store::reads`), how the simulator checks it
//! (`sim::load`) and how it enters the model.
//!
//! Each entry is `field: Type => change`, where `change` says what a change to an object
//! of the kind brings up to date in the snapshot memo:
//! - `pods`, `nodes`: the object alone (those two stores are followed object by object);
//! - `groups`: the gangs (PodGroups of every kind and the workloads gangs are made from);
//! - `others`: the whole snapshot.
//!
//! A macro given the list can treat one kind its own way by matching its field name
//! (`nodes`, `resource_claims`...) in a rule of its own, beside the code that needs it.

/// Calls `$then! { [args] list }`, each kind of the list as `#[doc] field: Type => change,`.
macro_rules! object_kinds {
    ($then:ident $(, $($args:tt)*)?) => {
        $then! {
            [$($($args)*)?]
            /// The nodes this scheduler manages.
            nodes: ::k8s_openapi::api::core::v1::Node => nodes,
            pods: ::k8s_openapi::api::core::v1::Pod => pods,
            kubernetes_groups: ::k8s_openapi::api::scheduling::v1beta1::PodGroup => groups,
            muster_groups: $crate::api::pod_group::PodGroup => groups,
            plugin_groups: $crate::api::foreign::PodGroup => groups,
            /// KAI Scheduler's PodGroups, when the configuration imports KAI.
            kai_groups: $crate::api::kai::PodGroup => groups,
            /// The workloads pods are grouped by (Jobs, JobSets, training jobs...).
            workloads: $crate::convert::workloads::Workload => groups,
            priority_classes: ::k8s_openapi::api::scheduling::v1::PriorityClass => others,
            resource_slices: ::k8s_openapi::api::resource::v1::ResourceSlice => others,
            device_classes: ::k8s_openapi::api::resource::v1::DeviceClass => others,
            /// Claims as the scheduler last wrote or assumed them (an allocation being
            /// written counts at once).
            resource_claims: ::k8s_openapi::api::resource::v1::ResourceClaim => others,
            device_taint_rules: ::k8s_openapi::api::resource::v1::DeviceTaintRule => others,
            /// Muster's team queues.
            queues: $crate::api::queue::Queue => others,
            /// KAI Scheduler's queues, when the configuration imports them.
            kai_queues: $crate::api::kai::Queue => others,
            /// The cluster's topology objects (Kueue's, KAI Scheduler's): hierarchies of
            /// node labels.
            kueue_topologies: $crate::api::topology::Topology => others,
            kai_topologies: $crate::api::topology::kai::Topology => others,
            /// Kueue's queues, when the configuration imports them.
            cluster_queues: $crate::api::kueue::ClusterQueue => others,
            cohorts: $crate::api::kueue::Cohort => others,
            local_queues: $crate::api::kueue::LocalQueue => others,
            /// Read for queues: namespace selectors and default-queue labels.
            namespaces: ::k8s_openapi::api::core::v1::Namespace => others,
            /// The claims pods' volumes name, and the volumes they are bound to.
            persistent_volume_claims: ::k8s_openapi::api::core::v1::PersistentVolumeClaim => others,
            persistent_volumes: ::k8s_openapi::api::core::v1::PersistentVolume => others,
            /// How claims not bound yet get their volumes: when (a class's binding mode),
            /// where (its allowed topologies) and how much room is left (the capacities a
            /// CSI driver that tracks them publishes).
            storage_classes: ::k8s_openapi::api::storage::v1::StorageClass => others,
            csi_drivers: ::k8s_openapi::api::storage::v1::CSIDriver => others,
            csi_storage_capacities: ::k8s_openapi::api::storage::v1::CSIStorageCapacity => others,
            /// How many volumes each node's CSI drivers may attach.
            csi_nodes: ::k8s_openapi::api::storage::v1::CSINode => others,
            /// What PodTopologySpread's default constraints select a pod's fellows by: the
            /// Services that select it and the controller that owns it (kept as their
            /// selectors alone).
            services: ::k8s_openapi::api::core::v1::Service => others,
            replication_controllers: ::k8s_openapi::api::core::v1::ReplicationController => others,
            replica_sets: ::k8s_openapi::api::apps::v1::ReplicaSet => others,
            stateful_sets: ::k8s_openapi::api::apps::v1::StatefulSet => others,
        }
    };
}
pub(crate) use object_kinds;

/// What a change to an object of a kind brings up to date (see the module's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Pods,
    Nodes,
    Groups,
    Others,
}

/// Names a [`Change`] from the list's lower-case word.
macro_rules! change {
    (pods) => {
        $crate::convert::kinds::Change::Pods
    };
    (nodes) => {
        $crate::convert::kinds::Change::Nodes
    };
    (groups) => {
        $crate::convert::kinds::Change::Groups
    };
    (others) => {
        $crate::convert::kinds::Change::Others
    };
}
pub(crate) use change;

/// The objects of one kind in a collection of every kind, found by type, so code generic
/// over the kind reaches its own.
pub trait Held<K> {
    fn held_mut(&mut self) -> &mut Vec<K>;
}

/// Implements [`Held`] for each kind of a collection whose field `field` is a `Vec<Type>`.
macro_rules! held {
    ([$collection:ty] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
        $(
            impl $crate::convert::kinds::Held<$kind> for $collection {
                fn held_mut(&mut self) -> &mut Vec<$kind> {
                    &mut self.$field
                }
            }
        )*
    };
}
pub(crate) use held;

/// Holds the list to its rule at compile time: only the pods and the nodes are followed
/// object by object; any other kind brings up to date the gangs or everything.
macro_rules! check_changes {
    ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
        $(check_changes!(@one $field $change);)*
    };
    (@one pods pods) => {};
    (@one nodes nodes) => {};
    (@one $field:ident groups) => {};
    (@one $field:ident others) => {};
}
object_kinds!(check_changes);
