//! The rules between pods as the engine holds them: a pod's host ports, its pod affinity
//! and anti-affinity terms (required, and preferred with their weights), its topology
//! spread constraints (hard, and `ScheduleAnyway`), and the pods already bound to each node
//! that those rules are counted over.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::engine::node::{LabelRequirement, NodeIdx};

/// A pod by its namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Labels, shared between a pod's conversions and the snapshots that hold it.
pub type Labels = Arc<BTreeMap<String, String>>;

/// A port on the node's own address (`hostPort`), as NodePorts compares them: an empty
/// hostIP is `0.0.0.0`, an empty protocol `TCP`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    /// Whether two pods asking for these ports cannot share a node: the same protocol and
    /// port, on the same address or with either on every address (`0.0.0.0`).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// The namespaces a pod affinity term covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Namespaces {
    /// `namespaceSelector: {}`.
    All,
    /// The listed ones and those the namespace selector matched when the pod was read
    /// (the owning pod's own when it names none), sorted.
    Only(Vec<String>),
}

impl Namespaces {
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(names) => names.binary_search_by(|n| n.as_str().cmp(namespace)).is_ok(),
        }
    }
}

/// A label selector over pods: every requirement must hold. None (a term without a
/// `labelSelector`) matches no pod; an empty list matches every pod.
pub type PodSelector = Option<Vec<LabelRequirement>>;

pub fn selects(selector: &PodSelector, labels: &BTreeMap<String, String>) -> bool {
    selector.as_ref().is_some_and(|requirements| requirements.iter().all(|r| r.matches(labels)))
}

/// One required pod affinity or anti-affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodTerm {
    pub namespaces: Namespaces,
    pub selector: PodSelector,
    pub topology_key: String,
}

impl PodTerm {
    /// Whether the term matches a pod in `namespace` with `labels`.
    pub fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace) && selects(&self.selector, labels)
    }
}

/// A volume a pod's claim attaches to its node, as NodeVolumeLimits counts it: its CSI
/// driver and handle (for a claim not bound yet, its class's provisioner and
/// `<namespace>/<claim>`). Pods of one node that share a volume attach it once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attachment {
    pub driver: String,
    pub handle: String,
}

/// Per node (by index), the most volumes each CSI driver may attach there: its CSINode's
/// `allocatable.count`. A driver not listed there, or a node without one, has no limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeLimits {
    pub on_node: Vec<Vec<(String, u32)>>,
}

impl VolumeLimits {
    pub fn on(&self, node: NodeIdx) -> &[(String, u32)] {
        self.on_node.get(node as usize).map_or(&[], Vec::as_slice)
    }
}

/// A preferred pod affinity or anti-affinity term and its weight (1 to 100).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightedTerm {
    pub weight: i32,
    pub term: PodTerm,
}

/// A topology spread constraint (`whenUnsatisfiable` says in which list a pod holds it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpreadRule {
    pub max_skew: i32,
    pub topology_key: String,
    /// The label selector with the pod's values for `matchLabelKeys` added. Counts pods of
    /// the owning pod's namespace only; an empty selector counts none (as kube-scheduler).
    pub selector: PodSelector,
    /// Below this many eligible domains, the least loaded counts as holding none.
    pub min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node
    /// selector and required node affinity make domains and are counted.
    pub honor_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (not the default): likewise for nodes whose taints the pod
    /// tolerates.
    pub honor_taints: bool,
}

impl SpreadRule {
    /// Whether a pod of `namespace` with `labels` counts for a pod of `own` namespace.
    pub fn counts(&self, own: &str, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        own == namespace && self.selector.as_ref().is_some_and(|s| !s.is_empty()) && selects(&self.selector, labels)
    }
}

/// What a pod requires of the pods around it, and what it prefers. A pod with none of it
/// has no rules (`None` where it is held).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodRules {
    pub ports: Vec<HostPort>,
    /// The volumes its claims attach, sorted.
    pub attach: Vec<Attachment>,
    pub affinity: Vec<PodTerm>,
    pub anti_affinity: Vec<PodTerm>,
    /// `whenUnsatisfiable: DoNotSchedule`.
    pub spread: Vec<SpreadRule>,
    pub preferred_affinity: Vec<WeightedTerm>,
    pub preferred_anti_affinity: Vec<WeightedTerm>,
    /// `whenUnsatisfiable: ScheduleAnyway`.
    pub soft_spread: Vec<SpreadRule>,
    /// The spread constraints are kube-scheduler's own defaults (`System`): a node without
    /// one constraint's key still counts, and scores, for the others.
    pub system_spread: bool,
}

impl PodRules {
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
            && self.attach.is_empty()
            && self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.spread.is_empty()
            && !self.prefers()
    }

    /// Whether it has preferences (preferred terms, `ScheduleAnyway` spread): its pods'
    /// nodes are then chosen by score.
    pub fn prefers(&self) -> bool {
        !self.preferred_affinity.is_empty() || !self.preferred_anti_affinity.is_empty() || !self.soft_spread.is_empty()
    }

    /// Each term by which this pod, once placed, draws or repels the pods it selects in
    /// kube-scheduler's InterPodAffinity score, with its signed weight: its required
    /// affinity at `hard` (`hardPodAffinityWeight`), its preferred affinity at its weight,
    /// its preferred anti-affinity at minus its weight.
    pub fn each_pull(&self, hard: i32, mut f: impl FnMut(i32, &PodTerm)) {
        self.affinity.iter().for_each(|t| f(hard, t));
        self.preferred_affinity.iter().for_each(|w| f(w.weight, &w.term));
        self.preferred_anti_affinity.iter().for_each(|w| f(-w.weight, &w.term));
    }

    /// Whether it has a term [`PodRules::each_pull`] gives.
    pub fn pulls(&self) -> bool {
        !self.affinity.is_empty() || !self.preferred_affinity.is_empty() || !self.preferred_anti_affinity.is_empty()
    }
}

/// A pod bound to a node, as the rules between pods see it.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundPod {
    pub key: PodKey,
    pub labels: Labels,
    pub rules: Option<Arc<PodRules>>,
    /// It is being deleted: topology spread no longer counts it (affinity still does).
    pub terminating: bool,
}

/// Every pod bound to each node, whichever scheduler placed it; kept between snapshots and
/// changed node by node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BoundPods {
    /// By node index, each sorted by key; a node past the end holds none.
    pub on_node: Vec<Arc<Vec<Arc<BoundPod>>>>,
    /// How many of them have required anti-affinity.
    anti_affine: usize,
    /// How many of them pull or repel other pods in scoring ([`PodRules::pulls`]).
    pulling: usize,
}

fn anti_affine(pod: &BoundPod) -> bool {
    pod.rules.as_ref().is_some_and(|r| !r.anti_affinity.is_empty())
}

fn pulling(pod: &BoundPod) -> bool {
    pod.rules.as_ref().is_some_and(|r| r.pulls())
}

impl BoundPods {
    pub fn on(&self, node: NodeIdx) -> &[Arc<BoundPod>] {
        self.on_node.get(node as usize).map_or(&[], |pods| pods.as_slice())
    }

    pub fn add(&mut self, node: usize, pod: Arc<BoundPod>) {
        if self.on_node.len() <= node {
            self.on_node.resize_with(node + 1, Default::default);
        }
        self.anti_affine += anti_affine(&pod) as usize;
        self.pulling += pulling(&pod) as usize;
        let pods = Arc::make_mut(&mut self.on_node[node]);
        // Sorted by key: a list brought up to date equals one made afresh.
        let at = pods.partition_point(|p| p.key < pod.key);
        pods.insert(at, pod);
    }

    pub fn remove(&mut self, node: usize, key: &PodKey) {
        if let Some(pods) = self.on_node.get_mut(node)
            && let Ok(i) = pods.binary_search_by(|p| p.key.cmp(key))
        {
            self.anti_affine -= anti_affine(&pods[i]) as usize;
            self.pulling -= pulling(&pods[i]) as usize;
            Arc::make_mut(pods).remove(i);
        }
    }

    /// Whether any bound pod has required anti-affinity (which every placement must then
    /// be checked against).
    pub fn any_anti_affinity(&self) -> bool {
        self.anti_affine > 0
    }

    /// Whether any bound pod pulls or repels others in scoring.
    pub fn any_pulls(&self) -> bool {
        self.pulling > 0
    }
}
