//! Keeps the objects scheduling reads, changed one watch event at a time.
//!
//! The one place that holds the cluster's state for the scheduler. Watches write it
//! (`apply`, `delete`, and a relist's `reset`); the scheduling loop reads a copy of it
//! (`objects`). Pod states, in one place:
//! - *pending*: Muster's pod without `spec.nodeName`;
//! - *assumed*: placed by a cycle and being bound; counted on its node at once, so the next
//!   cycle does not place it again or give its capacity away; cleared when the watch shows
//!   the pod bound (`apply`) or gone (`delete`), or by `forget` when binding failed;
//! - *bound*: `spec.nodeName` set, by Muster or any other scheduler: uses capacity until it
//!   ends (Succeeded or Failed) or is deleted.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;

use super::changes::{Changes, Help};
pub use super::objects::Store;
use crate::convert::assemble::ClusterView;
use crate::convert::dra::EXTENDED_CLAIM_ANNOTATION;
use crate::convert::journal::{Journal, JournalMark, ObjectKey, Seen};
use crate::convert::kinds::{Change, change, object_kinds};
use crate::convert::view::Versions;
use crate::convert::workloads::WorkloadKind;
use crate::convert::workloads::owners::PodOwners;
use crate::engine::dra::model::ClaimKey;
use crate::engine::model::PodKey;

/// The objects of the store `$field` a cycle reads, as kept: all of them, but for the
/// nodes (only the managed ones) and the claims (as assumed, and the extended resources'
/// claims besides).
macro_rules! shown {
    ($cache:ident, nodes) => {
        $cache.nodes.objects.values().filter(|n| $cache.managed(n))
    };
    ($cache:ident, resource_claims) => {
        $cache
            .resource_claims
            .objects
            .values()
            .map(|c| $cache.assumed_claims.get(&claim_key(c)).unwrap_or(c))
            .chain($cache.assumed_extended.values())
    };
    ($cache:ident, $other:ident) => {
        $cache.$other.objects.values()
    };
}

/// Makes the cache (a store per kind, and what the cache keeps besides), the copy a cycle
/// takes of it, and their views, from the list of kinds ([`object_kinds!`]).
macro_rules! cache_and_shared {
    ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
        #[derive(Clone, Debug, Default)]
        pub struct Cache {
            $(pub $field: Store<$kind>,)*
            /// Whether Kueue's queues are imported (see [`ClusterView::kueue_imported`]).
            pub kueue_imported: bool,
            /// The workloads kinds read (see `workloads::follow`).
            pub workload_kinds: BTreeSet<WorkloadKind>,
        /// Pods by the first owner their gang is looked up by.
        pub(crate) pod_owners: PodOwners,
        assumed: HashMap<PodKey, String>,
        /// Claims whose allocation is being written: they hold their devices at once, until
        /// the watch shows the allocation, or `forget_claim`.
        assumed_claims: HashMap<ClaimKey, Arc<ResourceClaim>>,
        /// Claims for pods' extended resources, being created and allocated, by pod.
        assumed_extended: HashMap<PodKey, Arc<ResourceClaim>>,
        /// Only nodes with all these labels are scheduled onto (empty: every node).
        node_labels: Vec<(String, String)>,
        /// What changed since the scheduling loop last looked, for its unschedulable pool.
        pub changes: Changes,
        /// Changes to `assumed_claims` and `assumed_extended` (the pods' assumptions are
        /// recorded in the pods' journal, as they change where a pod counts).
        assumed_claims_journal: Journal,
        }

        /// What scheduling reads, shared: taken under the cache's lock by reference counts
        /// alone, read after the lock is released, so watch events are applied while a cycle
        /// assembles its snapshot.
        pub struct Shared {
            $($field: Vec<Arc<$kind>>,)*
            kueue_imported: bool,
            assumed: HashMap<PodKey, String>,
            /// What changed in pods and nodes since the reader's mark, and the other stores'
            /// marks.
            pods_journal: Journal,
            nodes_journal: Journal,
            groups: Vec<JournalMark>,
            others: Vec<JournalMark>,
        }

        impl Cache {
            /// What scheduling reads, borrowed: only managed nodes, and assumed pods on their
            /// nodes.
            pub fn view(&self) -> ClusterView<'_> {
                ClusterView {
                    $($field: shown!(self, $field).map(|o| &**o).collect(),)*
                    kueue_imported: self.kueue_imported,
                    assumed: Some(&self.assumed),
                    versions: Some(Versions {
                        pods: self.pods.journal(),
                        nodes: self.nodes.journal(),
                        groups: self.marks(Change::Groups),
                        others: self.other_marks(),
                    }),
                }
            }

            /// What [`Cache::view`] shows, shared rather than borrowed, with what changed since
            /// `seen` (the reader's marks: see [`Memo::seen`](super::assemble::Memo::seen)).
            pub fn shared(&self, seen: Seen) -> Shared {
                Shared {
                    $($field: shown!(self, $field).cloned().collect(),)*
                    kueue_imported: self.kueue_imported,
                    assumed: self.assumed.clone(),
                    pods_journal: self.pods.journal.tail(seen.pods),
                    nodes_journal: self.nodes.journal.tail(seen.nodes),
                    groups: self.marks(Change::Groups),
                    others: self.other_marks(),
                }
            }

            /// Where the journals of the stores whose changes are of `change` stand.
            fn marks(&self, change: Change) -> Vec<JournalMark> {
                let mut marks = Vec::new();
                $(if change!($change) == change {
                    marks.push(self.$field.journal.mark());
                })*
                marks
            }
        }

        impl Shared {
            pub fn view(&self) -> ClusterView<'_> {
                ClusterView {
                    $($field: borrowed(&self.$field),)*
                    kueue_imported: self.kueue_imported,
                    assumed: Some(&self.assumed),
                    versions: Some(Versions {
                        pods: &self.pods_journal,
                        nodes: &self.nodes_journal,
                        groups: self.groups.clone(),
                        others: self.others.clone(),
                    }),
                }
            }
        }
    };
}
object_kinds!(cache_and_shared);

fn claim_key(claim: &ResourceClaim) -> ClaimKey {
    ClaimKey { namespace: claim.namespace().unwrap_or_default(), name: claim.name_any() }
}

/// A pod's key in its store (the assumptions use the engine's key).
fn object_key(pod: &PodKey) -> ObjectKey {
    (pod.namespace.clone(), pod.name.clone())
}

fn pod_key(pod: &Pod) -> PodKey {
    PodKey { namespace: pod.namespace().unwrap_or_default(), name: pod.name_any() }
}

impl Cache {
    /// A cache for a scheduler that manages only nodes carrying `node_labels`.
    pub fn new(node_labels: Vec<(String, String)>) -> Cache {
        Cache { node_labels, ..Default::default() }
    }

    /// A pod changed. Once the watch shows it bound, its assumption is no longer needed.
    pub fn apply_pod(&mut self, pod: Pod) {
        if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            self.assumed.remove(&pod_key(&pod));
        }
        if let Some(old) = self.pods.find(&pod) {
            self.pod_owners.remove(old);
        }
        self.pod_owners.add(&pod);
        // (The store records the pod, and with it the assumption it may have lost.)
        self.pods.apply(pod);
    }

    pub fn delete_pod(&mut self, pod: &Pod) {
        self.assumed.remove(&pod_key(pod));
        self.pod_owners.remove(self.pods.find(pod).unwrap_or(pod));
        self.pods.delete(pod);
    }

    /// A pod relist is complete: assumptions of pods that are gone or now bound go too.
    pub fn pods_relisted(&mut self) {
        self.pods.relist_done();
        self.pod_owners.rebuild(self.pods.values());
        self.remark_all();
        let pods = &self.pods;
        self.assumed.retain(|key, _| {
            pods.get(&key.namespace, &key.name).is_some_and(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none()))
        });
        self.pods.journal.reset();
    }

    /// A claim changed. Once the watch shows it allocated, its assumption is no longer needed.
    pub fn apply_claim(&mut self, claim: ResourceClaim) {
        if claim.status.as_ref().is_some_and(|s| s.allocation.is_some()) {
            let key = claim_key(&claim);
            self.assumed_claims.remove(&key);
            self.assumed_claims_journal.reset();
            if claim.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(EXTENDED_CLAIM_ANNOTATION)) {
                for owner in claim.metadata.owner_references.iter().flatten().filter(|o| o.kind == "Pod") {
                    self.assumed_extended
                        .remove(&PodKey { namespace: key.namespace.clone(), name: owner.name.clone() });
                }
            }
        }
        self.resource_claims.apply(claim);
    }

    pub fn delete_claim(&mut self, claim: &ResourceClaim) {
        self.assumed_claims.remove(&claim_key(claim));
        self.assumed_claims_journal.reset();
        self.resource_claims.delete(claim);
    }

    /// A claim relist is complete: assumptions of claims now allocated or gone go too.
    pub fn claims_relisted(&mut self) {
        self.resource_claims.relist_done();
        let claims = &self.resource_claims;
        self.assumed_claims.retain(|key, _| {
            claims
                .get(&key.namespace, &key.name)
                .is_some_and(|c| c.status.as_ref().is_none_or(|s| s.allocation.is_none()))
        });
        self.assumed_claims_journal.reset();
    }

    /// Holds the devices of `claim` (as it will be once written) until the watch shows it
    /// allocated or `forget_claim` is called. A claim without a name is one being created for
    /// `pod`'s extended resources.
    pub fn assume_claim(&mut self, pod: &PodKey, claim: ResourceClaim) {
        if claim.metadata.name.as_deref().unwrap_or("").is_empty() {
            self.assumed_extended.insert(pod.clone(), Arc::new(claim));
        } else {
            self.assumed_claims.insert(claim_key(&claim), Arc::new(claim));
        }
        self.assumed_claims_journal.reset();
    }

    /// Writing the claim failed and was undone: its devices are free again.
    pub fn forget_claim(&mut self, pod: &PodKey, claim: &ClaimKey) {
        if claim.name.is_empty() {
            self.assumed_extended.remove(pod);
        } else {
            self.assumed_claims.remove(claim);
        }
        self.assumed_claims_journal.reset();
        self.changes.note(Help::Every);
    }

    /// Counts `pod` on `node` until the watch shows it bound or `forget` is called.
    /// A pod placed on `node` counts there before the watch shows it bound. A pod the
    /// store no longer holds unbound (deleted, or bound meanwhile) is not assumed.
    pub fn assume(&mut self, pod: PodKey, node: String) {
        let unbound = self
            .pods
            .get(&pod.namespace, &pod.name)
            .is_some_and(|p| p.spec.as_ref().is_none_or(|s| s.node_name.is_none()));
        if !unbound {
            return;
        }
        self.pods.journal.record(object_key(&pod));
        self.assumed.insert(pod, node);
    }

    /// Binding failed: the pod is pending again.
    pub fn forget(&mut self, pod: &PodKey) {
        self.assumed.remove(pod);
        self.pods.journal.record(object_key(pod));
        self.changes.note(Help::Every);
    }

    /// Whether some pod is neither bound nor assumed: of any scheduler, so a false "no" is
    /// impossible. A cycle finds nothing to place without one. Every assumption is of a pod
    /// in the store and unbound (`assume` takes no other; binding or deleting a pod, or a
    /// relist, drops its assumption), so counting is enough.
    pub fn has_unplaced(&self) -> bool {
        let unbound = self.pods.values().filter(|p| p.spec.as_ref().is_none_or(|s| s.node_name.is_none())).count();
        unbound > self.assumed.len()
    }

    /// Drops every assumption: a new term as leader starts from what the watches show.
    pub fn forget_assumptions(&mut self) {
        self.assumed.clear();
        self.assumed_claims.clear();
        self.assumed_extended.clear();
        self.pods.journal.reset();
        self.assumed_claims_journal.reset();
        self.changes.note(Help::Every);
    }

    /// The UID of the pod the cache holds under this name.
    pub fn uid(&self, pod: &PodKey) -> Option<String> {
        self.pods.get(&pod.namespace, &pod.name).and_then(|p| p.metadata.uid.clone())
    }

    pub fn is_assumed(&self, pod: &PodKey) -> bool {
        self.assumed.contains_key(pod)
    }

    fn managed(&self, node: &Node) -> bool {
        let labels = node.labels();
        self.node_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

impl Cache {
    /// The stores whose every change rebuilds the snapshot, with the claims' assumptions and
    /// whether Kueue is imported.
    fn other_marks(&self) -> Vec<JournalMark> {
        let mut marks = self.marks(Change::Others);
        marks.extend([self.assumed_claims_journal.mark(), (0, self.kueue_imported as u64)]);
        marks
    }
}

fn borrowed<K>(objects: &[Arc<K>]) -> Vec<&K> {
    objects.iter().map(|o| &**o).collect()
}
