//! What the last snapshot was made of, kept and brought up to date by the next: nodes with
//! what their bound pods use, the topology index, the DRA snapshot, queues and PodGroups
//! (`Base`), and every gang (`GangPart`). After one pod changed, a snapshot changes that
//! pod's node and makes its gang again, nothing else; when a store read as a whole changed
//! (DRA objects, queues, priority classes, namespaces) or a node's labels did, it is made
//! afresh.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::gang::{Context, GangPart, fold};
use super::memo::Conversions;
use crate::convert::journal::{JournalMark, ObjectKey, Seen};
use crate::convert::pod_rules;
use crate::convert::status::Rejection;
use crate::convert::view::{ClusterView, gang_key};
use crate::convert::volumes::{ClaimAttachments, volume_limits};
use crate::convert::{dra, dra::ClaimIndex};
use crate::convert::{groups, groups::GroupSpec};
use crate::convert::{queues, queues::QueueRules};
use crate::engine::dra::model::DraSnapshot;
use crate::engine::model::{GangKey, Node as EngineNode, PodKey};
use crate::engine::pods::{BoundPods, VolumeLimits};
use crate::engine::queues::QueueTree;
use crate::engine::resources::Demand;
use crate::engine::topology::DomainIndex;

/// What a snapshot makes of everything but pods.
pub(super) struct Base {
    /// With what the pods bound to them request; shared with the last snapshot until
    /// changed.
    pub nodes: Arc<Vec<EngineNode>>,
    pub node_index: HashMap<String, usize>,
    pub topology: DomainIndex,
    pub dra: DraSnapshot,
    /// Extended resources DeviceClasses serve: pods may ask for them though no node lists them.
    pub served: HashSet<String>,
    pub queues: QueueTree,
    /// The pods bound to each node, as the rules between pods count them.
    pub bound: Arc<BoundPods>,
    /// What each claim attaches to its pod's node, and how many each node may attach.
    pub attachments: ClaimAttachments,
    pub volume_limits: Arc<VolumeLimits>,
    pub facts: Arc<HashMap<GangKey, GroupSpec>>,
    /// Nodes and devices left out, with why.
    pub problems: Vec<String>,
}

impl Base {
    fn new(view: &ClusterView<'_>, memo: &mut Conversions) -> Base {
        let mut problems = Vec::new();
        let mut nodes = Vec::with_capacity(view.nodes.len());
        let mut node_index = HashMap::with_capacity(view.nodes.len());
        for n in &view.nodes {
            match memo.node(n) {
                Ok(node) => {
                    node_index.insert(n.metadata.name.clone().unwrap_or_default(), nodes.len());
                    nodes.push(node);
                }
                Err(e) => problems.push(format!("left out: {e}")),
            }
        }
        memo.topology.update(&nodes);
        let mut topology = memo.topology.index(&nodes);
        topology.hierarchies = crate::api::topology::hierarchies(&view.kueue_topologies, &view.kai_topologies);
        let dra_view = dra::DraView {
            slices: &view.resource_slices,
            classes: &view.device_classes,
            claims: &view.resource_claims,
            rules: &view.device_taint_rules,
        };
        let dra = dra::snapshot(dra_view, &nodes, &mut memo.devices, &mut problems);
        let served = dra.extended_classes.keys().cloned().collect();
        // Queues: Muster's own, then KAI's (imported by the configuration); a KAI queue of
        // the same name as one of Muster's is left out (the tree keeps the first of a name).
        let mut specs: Vec<_> =
            view.queues.iter().map(|q| queues::queue_spec(q, &view.namespaces, &mut memo.names)).collect();
        specs.extend(view.kai_queues.iter().map(|q| crate::convert::queues::kai::kai_queue_spec(q, &mut memo.names)));
        specs.extend(crate::convert::queues::kueue::kueue_queue_specs(
            &view.cluster_queues,
            &view.cohorts,
            &view.namespaces,
            &mut memo.names,
        ));
        let queues = QueueTree::build(&specs);
        let facts = Arc::new(groups::group_specs(view));
        let bound = Arc::default();
        let attachments = ClaimAttachments::new(view);
        let volume_limits = Arc::new(volume_limits(view, &node_index));
        Base {
            nodes: Arc::new(nodes),
            node_index,
            topology,
            dra,
            served,
            queues,
            bound,
            attachments,
            volume_limits,
            facts,
            problems,
        }
    }
}

/// What one pod adds outside its gang.
#[derive(Default)]
struct PodState {
    /// Its gang, when it is Muster's and has not ended.
    gang: Option<GangKey>,
    /// Its node and what it uses there, when bound and not ended.
    usage: Option<(usize, Demand)>,
}

/// A snapshot's making, kept for the next.
pub(super) struct Kept {
    seen: Seen,
    groups: Vec<JournalMark>,
    others: Vec<JournalMark>,
    pub base: Base,
    pods: HashMap<ObjectKey, PodState>,
    members: HashMap<GangKey, BTreeSet<ObjectKey>>,
    pub parts: BTreeMap<GangKey, GangPart>,
    pub gang_of: Arc<HashMap<PodKey, GangKey>>,
    pub rejected: BTreeMap<PodKey, Rejection>,
    pub pod_problems: BTreeMap<ObjectKey, String>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn object_key(pod: &Pod) -> ObjectKey {
    (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default())
}

/// The pod of `key` in a view whose pods are sorted as the store keeps them.
fn find<'a>(pods: &[&'a Pod], key: &ObjectKey) -> Option<&'a Pod> {
    fn id(p: &Pod) -> (&str, &str) {
        (p.metadata.namespace.as_deref().unwrap_or_default(), p.metadata.name.as_deref().unwrap_or_default())
    }
    pods.binary_search_by(|p| id(p).cmp(&(key.0.as_str(), key.1.as_str()))).ok().map(|i| pods[i])
}

impl Kept {
    pub fn seen(&self) -> Seen {
        self.seen
    }

    /// Makes everything afresh from `view`.
    pub fn build(view: &ClusterView<'_>, scheduler_name: &str, memo: &mut Conversions) -> Kept {
        memo.devices.specs.start();
        memo.rebuilds += 1;
        let versions = view.versions.as_ref();
        let mut kept = Kept {
            seen: versions.map_or_else(Seen::default, |v| Seen { pods: v.pods.mark(), nodes: v.nodes.mark() }),
            groups: versions.map_or_else(Vec::new, |v| v.groups.clone()),
            others: versions.map_or_else(Vec::new, |v| v.others.clone()),
            base: Base::new(view, memo),
            pods: HashMap::new(),
            members: HashMap::new(),
            parts: BTreeMap::new(),
            gang_of: Arc::default(),
            rejected: BTreeMap::new(),
            pod_problems: BTreeMap::new(),
        };
        // Pods are followed one by one only when later views say which changed.
        let follow = versions.is_some();
        let mut gangs: BTreeMap<GangKey, Vec<&Pod>> = BTreeMap::new();
        for &pod in &view.pods {
            if is_terminal(pod) {
                continue;
            }
            let usage = kept.use_capacity(pod, view, memo);
            let ours = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
            let gang = ours.then(|| gang_key(pod));
            if !follow {
                if let Some(gang) = gang {
                    gangs.entry(gang).or_default().push(pod);
                }
                continue;
            }
            let key = object_key(pod);
            if let Some(gang) = &gang {
                gangs.entry(gang.clone()).or_default().push(pod);
                kept.members.entry(gang.clone()).or_default().insert(key.clone());
            }
            kept.pods.insert(key, PodState { gang, usage });
        }
        let mut topology = std::mem::take(&mut kept.base.topology);
        let claims = ClaimIndex::new(&view.resource_claims);
        let context = Context::new(view, &kept.base, &claims);
        let parts: Vec<(GangKey, GangPart)> = gangs
            .into_iter()
            .map(|(key, pods)| {
                let part = fold(&key, &pods, &context, &mut topology, memo);
                (key, part)
            })
            .collect();
        drop(context);
        kept.base.topology = topology;
        for (key, part) in parts {
            kept.add_part(&key, &part);
            kept.parts.insert(key, part);
        }
        memo.trim(view);
        memo.interner.prune();
        memo.rules.prune();
        memo.labels.prune();
        memo.devices.specs.prune();
        kept
    }

    /// Brings what was kept up to date with `view`, or None when it must be made afresh:
    /// the view does not say what changed since, a store read as a whole changed, or a
    /// node was added, removed or relabelled.
    pub fn update(mut self, view: &ClusterView<'_>, scheduler_name: &str, memo: &mut Conversions) -> Option<Kept> {
        let versions = view.versions.as_ref()?;
        if versions.others != self.others {
            return None;
        }
        let node_changes = versions.nodes.since(self.seen.nodes)?;
        let pod_changes = versions.pods.since(self.seen.pods)?;
        // Nodes first: a node changed in place (taints, capacity, cordon) keeps its index.
        let changed_nodes: HashSet<&ObjectKey> = node_changes.collect();
        for key in changed_nodes {
            let node =
                view.nodes.binary_search_by(|n| n.metadata.name.as_deref().unwrap_or_default().cmp(&key.1)).ok()?;
            let converted = memo.node(view.nodes[node]).ok()?;
            let &i = self.base.node_index.get(&key.1)?;
            let kept = &mut Arc::make_mut(&mut self.base.nodes)[i];
            if converted.labels != kept.labels {
                return None;
            }
            let requested = std::mem::take(&mut kept.requested);
            *kept = EngineNode { requested, ..converted };
        }
        let mut dirty: BTreeSet<GangKey> = BTreeSet::new();
        if versions.groups != self.groups {
            let facts = groups::group_specs(view);
            for (key, spec) in facts.iter() {
                if self.base.facts.get(key) != Some(spec) {
                    dirty.insert(key.clone());
                }
            }
            dirty.extend(self.base.facts.keys().filter(|k| !facts.contains_key(*k)).cloned());
            self.base.facts = Arc::new(facts);
            self.groups = versions.groups.clone();
        }
        let changed_pods: HashSet<&ObjectKey> = pod_changes.collect();
        for key in changed_pods {
            self.forget_pod(key, &mut dirty);
            let Some(pod) = find(&view.pods, key).filter(|p| !is_terminal(p)) else { continue };
            let usage = self.use_capacity(pod, view, memo);
            let ours = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
            let gang = ours.then(|| gang_key(pod));
            if let Some(gang) = &gang {
                self.members.entry(gang.clone()).or_default().insert(key.clone());
                dirty.insert(gang.clone());
            }
            self.pods.insert(key.clone(), PodState { gang, usage });
        }
        self.seen = Seen { pods: versions.pods.mark(), nodes: versions.nodes.mark() };
        if dirty.is_empty() {
            return Some(self);
        }
        let mut topology = std::mem::take(&mut self.base.topology);
        let claims = ClaimIndex::new(&view.resource_claims);
        let context = Context::new(view, &self.base, &claims);
        let mut parts = Vec::with_capacity(dirty.len());
        for key in dirty {
            let pods: Vec<&Pod> =
                self.members.get(&key).into_iter().flatten().filter_map(|k| find(&view.pods, k)).collect();
            let part = (!pods.is_empty()).then(|| fold(&key, &pods, &context, &mut topology, memo));
            parts.push((key, part));
        }
        drop(context);
        self.base.topology = topology;
        // Every old part goes before any new one is added: a pod that moved between two
        // gangs is in the old part of one and the new part of the other.
        for (key, _) in &parts {
            if let Some(old) = self.parts.remove(key) {
                self.remove_part(&old);
            }
        }
        for (key, part) in parts {
            if let Some(part) = part {
                self.add_part(&key, &part);
                self.parts.insert(key, part);
            }
        }
        memo.trim(view);
        // Amortised: only once the table has doubled, so rules tenants write anew each
        // time do not pile up between snapshots made afresh.
        memo.rules.prune();
        memo.labels.prune();
        Some(self)
    }

    /// Counts a bound pod on its node; a pod whose demand cannot be read is a problem.
    fn use_capacity(&mut self, pod: &Pod, view: &ClusterView<'_>, memo: &mut Conversions) -> Option<(usize, Demand)> {
        let node = view.node_of(pod)?;
        let served = &self.base.served;
        match (memo.demand(pod, &|r: &str| served.contains(r)), self.base.node_index.get(node.as_str())) {
            (Ok(demand), Some(&i)) => {
                Arc::make_mut(&mut self.base.nodes)[i].requested.add(&demand, 1);
                let bound = pod_rules::bound_pod(pod, &view.namespaces, self.base.attachments.of(pod));
                Arc::make_mut(&mut self.base.bound).add(i, Arc::new(bound));
                Some((i, demand))
            }
            (Err(e), _) => {
                self.pod_problems.insert(object_key(pod), format!("capacity not counted: {e}"));
                None
            }
            (Ok(_), None) => None,
        }
    }

    /// Takes back what a pod that changed added, and marks its gang to be made again.
    fn forget_pod(&mut self, key: &ObjectKey, dirty: &mut BTreeSet<GangKey>) {
        self.pod_problems.remove(key);
        let Some(state) = self.pods.remove(key) else { return };
        if let Some((node, demand)) = state.usage {
            Arc::make_mut(&mut self.base.nodes)[node].requested.sub(&demand, 1);
            let pod = PodKey { namespace: key.0.clone(), name: key.1.clone() };
            Arc::make_mut(&mut self.base.bound).remove(node, &pod);
        }
        if let Some(gang) = state.gang {
            if let Some(members) = self.members.get_mut(&gang) {
                members.remove(key);
                if members.is_empty() {
                    self.members.remove(&gang);
                }
            }
            dirty.insert(gang);
        }
    }

    fn add_part(&mut self, key: &GangKey, part: &GangPart) {
        if !part.unbound.is_empty() {
            Arc::make_mut(&mut self.gang_of).extend(part.unbound.iter().map(|p| (p.clone(), key.clone())));
        }
        self.rejected.extend(part.rejected.iter().cloned());
    }

    fn remove_part(&mut self, part: &GangPart) {
        if !part.unbound.is_empty() {
            let gang_of = Arc::make_mut(&mut self.gang_of);
            for pod in &part.unbound {
                gang_of.remove(pod);
            }
        }
        for (pod, _) in &part.rejected {
            self.rejected.remove(pod);
        }
    }
}

impl<'v, 'a> Context<'v, 'a> {
    fn new(view: &'v ClusterView<'a>, base: &'v Base, claims: &'v ClaimIndex<'a>) -> Context<'v, 'a> {
        let classes = view
            .priority_classes
            .iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, c.value.unwrap_or(0))))
            .collect();
        let default_priority =
            view.priority_classes.iter().find(|c| c.global_default == Some(true)).and_then(|c| c.value).unwrap_or(0);
        let queued = base.queues.is_configured();
        Context {
            view,
            classes,
            default_priority,
            facts: &base.facts,
            rules: QueueRules::new(&view.namespaces, view.kueue_imported.then_some(view.local_queues.as_slice())),
            queued,
            claims,
            // What running pods' claims hold, for queues to account and evictions to free.
            held: std::cell::OnceCell::new(),
            volumes: std::cell::OnceCell::new(),
            attachments: &base.attachments,
            owners: std::cell::OnceCell::new(),
            dra: &base.dra,
            served: &base.served,
            node_index: &base.node_index,
            nodes: &base.nodes,
        }
    }
}
