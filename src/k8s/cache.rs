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

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use kube::ResourceExt;

use super::assemble::ClusterView;
use super::crd::PodGroup as MusterPodGroup;
use super::foreign::PodGroup as PluginPodGroup;
use crate::engine::model::PodKey;

/// One kind of object, by namespace and name, with relist support.
#[derive(Clone, Debug)]
pub struct Store<K> {
    objects: BTreeMap<(String, String), K>,
    relisting: Option<BTreeMap<(String, String), K>>,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Store { objects: BTreeMap::new(), relisting: None }
    }
}

fn id<K: ResourceExt>(object: &K) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

impl<K: ResourceExt + Clone> Store<K> {
    pub fn apply(&mut self, object: K) {
        self.objects.insert(id(&object), object);
    }

    pub fn delete(&mut self, object: &K) {
        self.objects.remove(&id(object));
    }

    /// A relist starts: objects arrive through `relisted`, then `relist_done` replaces
    /// the store with them, dropping whatever was deleted meanwhile.
    pub fn relist_start(&mut self) {
        self.relisting = Some(BTreeMap::new());
    }

    pub fn relisted(&mut self, object: K) {
        self.relisting.get_or_insert_default().insert(id(&object), object);
    }

    pub fn relist_done(&mut self) {
        if let Some(objects) = self.relisting.take() {
            self.objects = objects;
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&K> {
        self.objects.get(&(namespace.to_string(), name.to_string()))
    }

    pub fn values(&self) -> impl Iterator<Item = &K> {
        self.objects.values()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

#[derive(Clone, Debug, Default)]
pub struct Cache {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub kubernetes_groups: Store<KubernetesPodGroup>,
    pub muster_groups: Store<MusterPodGroup>,
    pub plugin_groups: Store<PluginPodGroup>,
    pub priority_classes: Store<PriorityClass>,
    assumed: HashMap<PodKey, String>,
    /// Only nodes with all these labels are scheduled onto (empty: every node).
    node_labels: Vec<(String, String)>,
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
        self.pods.apply(pod);
    }

    pub fn delete_pod(&mut self, pod: &Pod) {
        self.assumed.remove(&pod_key(pod));
        self.pods.delete(pod);
    }

    /// A pod relist is complete: assumptions of pods that are gone or now bound go too.
    pub fn pods_relisted(&mut self) {
        self.pods.relist_done();
        let pods = &self.pods;
        self.assumed.retain(|key, _| {
            pods.get(&key.namespace, &key.name).is_some_and(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none()))
        });
    }

    /// Counts `pod` on `node` until the watch shows it bound or `forget` is called.
    pub fn assume(&mut self, pod: PodKey, node: String) {
        self.assumed.insert(pod, node);
    }

    /// Binding failed: the pod is pending again.
    pub fn forget(&mut self, pod: &PodKey) {
        self.assumed.remove(pod);
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

    /// What scheduling reads, borrowed: only managed nodes, and assumed pods on their nodes.
    pub fn view(&self) -> ClusterView<'_> {
        ClusterView {
            nodes: self.nodes.values().filter(|n| self.managed(n)).collect(),
            pods: self.pods.values().collect(),
            kubernetes_groups: self.kubernetes_groups.values().collect(),
            muster_groups: self.muster_groups.values().collect(),
            plugin_groups: self.plugin_groups.values().collect(),
            priority_classes: self.priority_classes.values().collect(),
            resource_slices: Vec::new(),
            device_classes: Vec::new(),
            resource_claims: Vec::new(),
            device_taint_rules: Vec::new(),
            assumed: Some(&self.assumed),
        }
    }
}
