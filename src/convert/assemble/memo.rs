//! Conversions kept from one snapshot to the next, per object and resourceVersion, so that
//! a new snapshot converts only the objects that changed.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::convert::dra;
use crate::convert::view::ClusterView;
use crate::convert::{core, core::ConstraintsInterner};
use crate::engine::model::{Node as EngineNode, NodeConstraints};
use crate::engine::resources::{Demand, ResourceNames};
use crate::engine::topology::{LevelSpec, TopologyTree};

/// Below this many resource names the table is never started afresh.
pub(super) const MIN_NAMES_PRUNE: usize = 1024;
/// The table is started afresh before this size, short of the 65,535 names ids can hold.
const MAX_NAMES_PRUNE: usize = 49_152;

type PodConversion = core::Result<(Demand, Arc<NodeConstraints>)>;
/// A pod's demand, and its node constraints once it was considered for placing (a bound
/// pod's are never converted).
type PodMemo = (Demand, Option<Arc<NodeConstraints>>);

/// Conversions kept from one snapshot to the next, per object and resourceVersion, so that
/// a new snapshot converts only the objects that changed. Objects without a resourceVersion
/// (the simulator's) are converted every time.
pub struct Conversions {
    pub(super) names: ResourceNames,
    pub(super) interner: ConstraintsInterner,
    /// Pods' rules between pods, shared by the pods of one template: the engine finds their
    /// shape by the rules' address.
    pub(super) rules: crate::convert::interner::Interner<crate::engine::pods::PodRules>,
    /// Waiting pods' labels, shared by the pods of one template: the engine counts pods of
    /// one kind (labels and rules by address) once for the rules between pods.
    pub(super) labels: crate::convert::interner::Interner<std::collections::BTreeMap<String, String>>,
    /// Conversions stored since the last trim (an upper bound on the entries).
    pod_count: usize,
    /// By namespace, then name: looked up with borrowed strings, without allocating.
    pods: HashMap<String, HashMap<String, (String, PodMemo)>>,
    nodes: HashMap<String, (String, core::Result<EngineNode>)>,
    pub(super) devices: dra::DeviceMemo,
    /// The topology tree, updated node by node from one snapshot to the next.
    pub(super) topology: TopologyTree,
    /// When `names` reaches this size, it is started afresh (with every conversion that
    /// holds its ids), so names no object offers any more do not stay.
    names_prune_at: usize,
    /// The table was started afresh before this snapshot.
    names_fresh: bool,
    /// `limits.adHocTopologyLevels`.
    pub(super) ad_hoc_levels: usize,
    /// `plugins.podTopologySpread`: the spread pods that set none get.
    pub(super) spread_defaults: crate::convert::default_spread::SpreadDefaults,
    /// Snapshots made afresh rather than brought up to date.
    pub(super) rebuilds: u64,
}

impl Default for Conversions {
    /// A memo with the default configuration's topology levels.
    fn default() -> Conversions {
        Conversions::new(&crate::config::Config::default())
    }
}

impl Conversions {
    /// A memo for the configuration's topology levels and limits.
    pub fn new(config: &crate::config::Config) -> Conversions {
        let levels = &config.topology;
        Conversions {
            ad_hoc_levels: config.limits.ad_hoc_topology_levels,
            spread_defaults: crate::convert::default_spread::SpreadDefaults::new(&config.plugins.pod_topology_spread),
            names: ResourceNames::default(),
            interner: ConstraintsInterner::default(),
            rules: Default::default(),
            labels: Default::default(),
            pod_count: 0,
            pods: HashMap::new(),
            nodes: HashMap::new(),
            devices: dra::DeviceMemo::default(),
            names_prune_at: MIN_NAMES_PRUNE,
            names_fresh: false,
            rebuilds: 0,
            topology: TopologyTree::new(
                levels.iter().map(|l| LevelSpec { name: l.name.clone(), label: l.node_label.clone() }).collect(),
            ),
        }
    }

    /// What `pod` asks of its node's capacity. `served`: the extended resources
    /// DeviceClasses serve (a pod may ask for those though no node lists them). A
    /// conversion that failed is not kept: a node may offer the name it lacked next cycle.
    pub(super) fn demand(&mut self, pod: &Pod, served: &dyn Fn(&str) -> bool) -> core::Result<Demand> {
        self.entry(pod, served, false).map(|(demand, _)| demand)
    }

    /// What `pod` asks, and where it may go: only pods still to place need the second.
    pub(super) fn pod(&mut self, pod: &Pod, served: &dyn Fn(&str) -> bool) -> PodConversion {
        self.entry(pod, served, true).map(|(demand, constraints)| (demand, constraints.expect("converted")))
    }

    fn entry(&mut self, pod: &Pod, served: &dyn Fn(&str) -> bool, placing: bool) -> core::Result<PodMemo> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let version = pod.metadata.resource_version.as_ref();
        let seen = version
            .and_then(|v| self.pods.get(namespace)?.get(name).filter(|(seen, _)| seen == v))
            .map(|(_, conversion)| conversion.clone());
        let (demand, constraints) = match seen {
            Some((demand, Some(constraints))) => return Ok((demand, Some(constraints))),
            Some((demand, None)) if !placing => return Ok((demand, None)),
            Some((demand, None)) => (demand, None),
            None => (core::pod_demand(pod, &mut self.names, served)?, None),
        };
        let constraints = match (constraints, placing) {
            (None, true) => Some(self.interner.intern(core::pod_constraints(pod)?)),
            (kept, _) => kept,
        };
        if let Some(version) = version {
            let names = self.pods.entry(namespace.to_string()).or_default();
            let entry = (version.clone(), (demand.clone(), constraints.clone()));
            if names.insert(name.to_string(), entry).is_none() {
                self.pod_count += 1;
            }
        }
        Ok((demand, constraints))
    }

    pub(super) fn node(&mut self, node: &Node) -> core::Result<EngineNode> {
        let Some(version) = node.metadata.resource_version.as_ref() else {
            return core::node(node, &mut self.names);
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some((seen, conversion)) = self.nodes.get(&name)
            && seen == version
        {
            return conversion.clone();
        }
        let conversion = core::node(node, &mut self.names);
        self.nodes.insert(name, (version.clone(), conversion.clone()));
        conversion
    }

    /// Starts the resource name table afresh once it has doubled since it last was: the
    /// next snapshot converts every pod and node again and interns only the names offered
    /// then. Amortised, a name costs a constant number of conversions. True when it did
    /// (what was kept holds ids of the old table).
    pub(super) fn prune_names(&mut self) -> bool {
        let len = self.names.len();
        if self.names_fresh {
            self.names_fresh = false;
            self.names_prune_at = (2 * len).min(MAX_NAMES_PRUNE).max(len + MIN_NAMES_PRUNE);
        } else if len >= self.names_prune_at {
            self.names = ResourceNames::default();
            self.pods.clear();
            self.pod_count = 0;
            self.nodes.clear();
            self.names_fresh = true;
            return true;
        }
        false
    }

    /// Drops what belongs to objects no longer in `view`, once the memo has grown well past it.
    pub(super) fn trim(&mut self, view: &ClusterView<'_>) {
        if self.pod_count > 2 * view.pods.len() + 1024 {
            let live: std::collections::HashSet<(&str, &str)> = view
                .pods
                .iter()
                .map(|p| {
                    (
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                        p.metadata.name.as_deref().unwrap_or_default(),
                    )
                })
                .collect();
            for (namespace, names) in self.pods.iter_mut() {
                names.retain(|name, _| live.contains(&(namespace.as_str(), name.as_str())));
            }
            self.pods.retain(|_, names| !names.is_empty());
            self.pod_count = self.pods.values().map(HashMap::len).sum();
        }
        if self.nodes.len() > 2 * view.nodes.len() + 1024 {
            let live: std::collections::HashSet<&str> =
                view.nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
            self.nodes.retain(|name, _| live.contains(name.as_str()));
        }
    }
}
