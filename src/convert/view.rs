//! The cluster's objects as scheduling reads them: owned (`ClusterObjects`, the
//! simulator's) or borrowed (`ClusterView`, the scheduler's cache's). Which gang a pod
//! belongs to is in [`membership`](super::membership), re-exported here for the readers of
//! objects.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;

use super::journal::{Journal, JournalMark};
use super::kinds::{held, object_kinds};
pub use super::membership::{
    DERIVED_GANG_ANNOTATION, KAI_GROUP_ANNOTATION, KAI_PREEMPTIBILITY_LABEL, KAI_QUEUE_LABELS, KUEUE_GANG_PREFIX,
    KUEUE_GROUP_LABEL, MUSTER_GROUP_LABEL, OPPORTUNISTIC_ANNOTATION, PLUGIN_GROUP_LABEL, QUEUE_LABEL, gang_key,
    labelled_preemptibility, labelled_queue, named_gang, opportunistic, pod_key,
};
use crate::engine::model::PodKey;

/// Makes the owned objects, the view and the view of the owned objects from the list of
/// kinds ([`object_kinds!`]).
macro_rules! objects_and_view {
    ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
        /// Everything the snapshot is made from.
        #[derive(Clone, Debug, Default)]
        pub struct ClusterObjects {
            $($(#[$doc])* pub $field: Vec<$kind>,)*
            /// Read by the simulator, which makes claims from them as the controller would.
            pub resource_claim_templates: Vec<ResourceClaimTemplate>,
            /// Whether the configuration imports Kueue's queues; when not, the pods Kueue
            /// admits are placed outside Muster's queues.
            pub kueue_imported: bool,
        }

        impl ClusterObjects {
            /// The objects as a view, for `assemble`.
            pub fn view(&self) -> ClusterView<'_> {
                ClusterView {
                    $($field: self.$field.iter().collect(),)*
                    kueue_imported: self.kueue_imported,
                    assumed: None,
                    versions: None,
                }
            }
        }

        /// The objects a snapshot is made from, borrowed from wherever they are kept (the
        /// scheduler's cache, the simulator's cluster), so that nothing is copied to read them.
        #[derive(Clone, Debug, Default)]
        pub struct ClusterView<'a> {
            $($(#[$doc])* pub $field: Vec<&'a $kind>,)*
            pub kueue_imported: bool,
            /// Pods placed and being bound, not yet seen bound: they count on these nodes.
            pub assumed: Option<&'a HashMap<PodKey, String>>,
            /// What changed since a snapshot was last made from the same stores; None (the
            /// simulator's objects): every snapshot is made afresh.
            pub versions: Option<Versions<'a>>,
        }
    };
}
object_kinds!(objects_and_view);

// Each kind's objects in the simulator's cluster, by type.
object_kinds!(held, ClusterObjects);

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
