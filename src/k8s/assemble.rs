//! Assembles the engine's snapshot from the cluster's objects: nodes with what bound pods
//! use, and Muster's pending pods grouped into gangs from the three PodGroup sources.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};

use std::sync::Arc;

use super::convert::{self, ConstraintsInterner};
use super::convert_dra;
use super::convert_queues;
use super::groups::{annotated_topology, created};
pub use super::view::{ClusterObjects, ClusterView, MUSTER_GROUP_LABEL, PLUGIN_GROUP_LABEL, gang_key, pod_key};
use crate::engine::model::{Gang, GangKey, GangKind, PendingPod, PodKey, RunningGang, RunningPod, Snapshot};
use crate::engine::model::{Node as EngineNode, NodeConstraints};
use crate::engine::queues::QueueTree;
use crate::engine::resources::{Demand, ResourceNames};
use crate::engine::topology::{GangTopology, LevelSpec, TopologyTree};

/// Below this many resource names the table is never started afresh.
const MIN_NAMES_PRUNE: usize = 1024;
/// The table is started afresh before this size, short of the 65,535 names ids can hold.
const MAX_NAMES_PRUNE: usize = 49_152;

type PodConversion = Result<(Demand, Arc<NodeConstraints>), String>;
/// A pod's demand, and its node constraints once it was considered for placing (a bound
/// pod's are never converted).
type PodMemo = (Demand, Option<Arc<NodeConstraints>>);

/// Conversions kept from one snapshot to the next, per object and resourceVersion, so that
/// a new snapshot converts only the objects that changed. Objects without a resourceVersion
/// (the simulator's) are converted every time.
pub struct Memo {
    names: ResourceNames,
    interner: ConstraintsInterner,
    /// Conversions stored since the last trim (an upper bound on the entries).
    pod_count: usize,
    /// By namespace, then name: looked up with borrowed strings, without allocating.
    pods: HashMap<String, HashMap<String, (String, PodMemo)>>,
    nodes: HashMap<String, (String, Result<EngineNode, String>)>,
    devices: convert_dra::DeviceMemo,
    /// The topology tree, updated node by node from one snapshot to the next.
    topology: TopologyTree,
    /// When `names` reaches this size, it is started afresh (with every conversion that
    /// holds its ids), so names no object offers any more do not stay.
    names_prune_at: usize,
    /// The table was started afresh before this snapshot.
    names_fresh: bool,
    /// `limits.adHocTopologyLevels`.
    ad_hoc_levels: usize,
}

impl Default for Memo {
    /// A memo with the default configuration's topology levels.
    fn default() -> Memo {
        Memo::new(&crate::config::Config::default())
    }
}

impl Memo {
    /// A memo for the configuration's topology levels and limits.
    pub fn new(config: &crate::config::Config) -> Memo {
        let levels = &config.topology;
        Memo {
            ad_hoc_levels: config.limits.ad_hoc_topology_levels,
            names: ResourceNames::default(),
            interner: ConstraintsInterner::default(),
            pod_count: 0,
            pods: HashMap::new(),
            nodes: HashMap::new(),
            devices: convert_dra::DeviceMemo::default(),
            names_prune_at: MIN_NAMES_PRUNE,
            names_fresh: false,
            topology: TopologyTree::new(
                levels.iter().map(|l| LevelSpec { name: l.name.clone(), label: l.node_label.clone() }).collect(),
            ),
        }
    }

    /// What `pod` asks of its node's capacity. `served`: the extended resources
    /// DeviceClasses serve (a pod may ask for those though no node lists them). A
    /// conversion that failed is not kept: a node may offer the name it lacked next cycle.
    fn demand(&mut self, pod: &Pod, served: &dyn Fn(&str) -> bool) -> Result<Demand, String> {
        self.entry(pod, served, false).map(|(demand, _)| demand)
    }

    /// What `pod` asks, and where it may go: only pods still to place need the second.
    fn pod(&mut self, pod: &Pod, served: &dyn Fn(&str) -> bool) -> PodConversion {
        self.entry(pod, served, true).map(|(demand, constraints)| (demand, constraints.expect("converted")))
    }

    fn entry(&mut self, pod: &Pod, served: &dyn Fn(&str) -> bool, placing: bool) -> Result<PodMemo, String> {
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
            None => (convert::pod_demand(pod, &mut self.names, served).map_err(|e| e.to_string())?, None),
        };
        let constraints = match (constraints, placing) {
            (None, true) => Some(self.interner.intern(convert::pod_constraints(pod).map_err(|e| e.to_string())?)),
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

    fn node(&mut self, node: &Node) -> Result<EngineNode, String> {
        let Some(version) = node.metadata.resource_version.as_ref() else {
            return convert::node(node, &mut self.names).map_err(|e| e.to_string());
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some((seen, conversion)) = self.nodes.get(&name)
            && seen == version
        {
            return conversion.clone();
        }
        let conversion = convert::node(node, &mut self.names).map_err(|e| e.to_string());
        self.nodes.insert(name, (version.clone(), conversion.clone()));
        conversion
    }

    /// Starts the resource name table afresh once it has doubled since it last was: the
    /// next snapshot converts every pod and node again and interns only the names offered
    /// then. Amortised, a name costs a constant number of conversions.
    fn prune_names(&mut self) {
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
        }
    }

    /// Drops what belongs to objects no longer in `view`, once the memo has grown well past it.
    fn trim(&mut self, view: &ClusterView<'_>) {
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

/// A PodGroup of any kind, as reported in output and status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    pub key: GangKey,
    pub min_member: usize,
    /// Its pods already bound to a node.
    pub bound: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Assembled {
    pub snapshot: Snapshot,
    /// Every PodGroup that exists, of any kind, sorted.
    pub groups: Vec<GroupSummary>,
    /// Muster's pending pods the engine cannot consider, with why (bad requests).
    pub rejected_pods: BTreeMap<PodKey, String>,
    /// Objects left out, with why (a node with an unreadable quantity).
    pub problems: Vec<String>,
    /// Which gang each of Muster's pending pods belongs to.
    pub gang_of: HashMap<PodKey, GangKey>,
    /// Every PodGroup, read once, for whatever else the cycle decides.
    pub specs: HashMap<GangKey, super::groups::GroupSpec>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Builds the snapshot for the scheduler called `scheduler_name`, as of `now` (seconds
/// since the Unix epoch), converting every object afresh.
pub fn assemble(objects: &ClusterObjects, scheduler_name: &str, now: i64) -> Assembled {
    assemble_view(&objects.view(), scheduler_name, now, &mut Memo::default())
}

/// Builds the snapshot from a view, converting only objects `memo` has not seen as they are.
pub fn assemble_view(objects: &ClusterView<'_>, scheduler_name: &str, now: i64, memo: &mut Memo) -> Assembled {
    let mut out = Assembled::default();
    out.snapshot.now = now;
    let classes: HashMap<&str, i32> = objects
        .priority_classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c.value.unwrap_or(0))))
        .collect();
    let default_priority =
        objects.priority_classes.iter().find(|c| c.global_default == Some(true)).and_then(|c| c.value).unwrap_or(0);
    let class_priority = |name: Option<&String>| name.and_then(|n| classes.get(n.as_str()).copied());

    let facts = super::groups::group_specs(objects);
    let group_priority =
        |g: &super::groups::GroupSpec| g.priority.or_else(|| class_priority(g.priority_class_name.as_ref()));

    let mut node_index: HashMap<&str, usize> = HashMap::new();
    for n in &objects.nodes {
        match memo.node(n) {
            Ok(node) => {
                node_index.insert(n.metadata.name.as_deref().unwrap_or_default(), out.snapshot.nodes.len());
                out.snapshot.nodes.push(node);
            }
            Err(e) => out.problems.push(format!("left out: {e}")),
        }
    }

    memo.topology.update(&out.snapshot.nodes);
    out.snapshot.topology = memo.topology.index(&out.snapshot.nodes);

    let dra_view = convert_dra::DraView {
        slices: &objects.resource_slices,
        classes: &objects.device_classes,
        claims: &objects.resource_claims,
        rules: &objects.device_taint_rules,
    };
    out.snapshot.dra = convert_dra::snapshot(dra_view, &out.snapshot.nodes, &mut memo.devices, &mut out.problems);
    // Extended resources DeviceClasses serve: pods may ask for them though no node lists them.
    let served_names: HashSet<String> = out.snapshot.dra.extended_classes.keys().cloned().collect();
    let served = &|resource: &str| served_names.contains(resource);
    let claim_index = convert_dra::ClaimIndex::new(&objects.resource_claims);
    memo.devices.specs.start();
    let claims_by_name = &claim_index.by_name;

    // Queues: the tree, and (only when some Queue exists) what Muster's running gangs hold.
    // Muster's own Queues, then KAI's (imported by the configuration); a KAI queue of the
    // same name as one of Muster's is left out (the tree keeps the first of a name).
    let mut queue_specs: Vec<_> =
        objects.queues.iter().map(|q| convert_queues::queue_spec(q, &objects.namespaces, &mut memo.names)).collect();
    queue_specs.extend(objects.kai_queues.iter().map(|q| super::convert_kai::kai_queue_spec(q, &mut memo.names)));
    queue_specs.extend(super::convert_kueue::kueue_queue_specs(
        &objects.cluster_queues,
        &objects.cohorts,
        &objects.namespaces,
        &mut memo.names,
    ));
    out.snapshot.queues = QueueTree::build(&queue_specs);
    let queued = out.snapshot.queues.is_configured();
    let rules = convert_queues::QueueRules::new(
        &objects.namespaces,
        objects.kueue_imported.then_some(objects.local_queues.as_slice()),
    );
    let mut running: BTreeMap<GangKey, RunningGang> = BTreeMap::new();
    let running_devices = queued.then(|| convert_dra::HeldDevices::new(&out.snapshot.dra, claims_by_name));
    let mut preemptibility: HashMap<GangKey, bool> = HashMap::new();

    let mut gangs: BTreeMap<GangKey, Gang> = BTreeMap::new();
    let mut pod_topology: HashMap<GangKey, (Option<String>, Option<String>)> = HashMap::new();
    let mut bound_per_gang: HashMap<GangKey, usize> = HashMap::new();
    for pod in &objects.pods {
        if is_terminal(pod) {
            continue;
        }
        let spec = pod.spec.as_ref();
        let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
        let node_name = objects.node_of(pod);
        if let Some(node_name) = node_name {
            // Bound, by whichever scheduler: it uses capacity.
            match (memo.demand(pod, served), node_index.get(node_name.as_str())) {
                (Ok(demand), Some(&i)) => {
                    out.snapshot.nodes[i].requested.add(&demand, 1);
                    // A terminating pod is leaving: its queue no longer holds it.
                    // A pod whose quota Kueue keeps is capacity in use, as another
                    // scheduler's would be.
                    if ours && queued && pod.metadata.deletion_timestamp.is_none() && rules.quota_owner(pod).is_none() {
                        let gang = gang_key(pod);
                        let group = facts.get(&gang);
                        let priority = group
                            .and_then(group_priority)
                            .or_else(|| {
                                spec.and_then(|s| s.priority.or_else(|| class_priority(s.priority_class_name.as_ref())))
                            })
                            .unwrap_or(default_priority);
                        let entry = running.entry(gang.clone()).or_insert_with(|| RunningGang {
                            key: gang,
                            queue: rules.queue_of(group, pod),
                            priority,
                            preemptible: convert_queues::preemptibility(group, pod)
                                .unwrap_or(priority < convert_queues::NON_PREEMPTIBLE_PRIORITY),
                            min_member: group.map_or(1, |g| g.min_member),
                            pods: Vec::new(),
                            created: group.map_or(i64::MAX, |g| g.created),
                        });
                        entry.created = entry.created.min(created(&pod.metadata));
                        let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0.as_second());
                        entry.pods.push(RunningPod {
                            key: pod_key(&pod.metadata),
                            node: i as u32,
                            demand,
                            started: started.unwrap_or_else(|| created(&pod.metadata)),
                            devices: running_devices.as_ref().map_or_else(Vec::new, |h| h.of(pod)),
                            grace_seconds: spec.and_then(|s| s.termination_grace_period_seconds).unwrap_or(30),
                        });
                    }
                }
                (Err(e), _) => out.problems.push(format!("capacity not counted: {e}")),
                (Ok(_), None) => {}
            }
            // A terminating pod still uses its node, but no longer counts toward its gang:
            // an evicted gang must not look whole while its pods go away.
            if ours && pod.metadata.deletion_timestamp.is_none() {
                *bound_per_gang.entry(gang_key(pod)).or_default() += 1;
            }
            continue;
        }
        if !ours {
            continue;
        }
        let key = pod_key(&pod.metadata);
        let gang = gang_key(pod);
        out.gang_of.insert(key.clone(), gang.clone());
        if pod.metadata.deletion_timestamp.is_some()
            || spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
        {
            continue;
        }
        // Its demand first: a pod asking for what nobody offers costs no more than that.
        let (demand, constraints) = match memo.pod(pod, served) {
            Ok(converted) => converted,
            Err(e) => {
                out.rejected_pods.insert(key, e);
                continue;
            }
        };
        let devices =
            convert_dra::pod_devices(pod, &claim_index, &out.snapshot.dra, &mut memo.names, &mut memo.devices.specs);
        let priority = spec
            .and_then(|s| s.priority.or_else(|| class_priority(s.priority_class_name.as_ref())))
            .unwrap_or(default_priority);
        let entry = gangs.entry(gang.clone()).or_insert_with(|| {
            let group = facts.get(&gang);
            let blocked = rules.stopped(group, pod).or_else(|| match (gang.kind, group) {
                (_, Some(g)) => g.preemption_delay.as_ref().err().map(|why| format!("{gang}: PodGroup {why}")),
                (GangKind::Single, None) => None,
                (kind, None) => Some(format!(
                    "PodGroup {}/{} ({}) does not exist; its pods wait for it{}",
                    gang.namespace,
                    gang.name,
                    kind.api_version().unwrap_or_default(),
                    if kind == GangKind::Kai { " (KAI's PodGroups are read with queues.import: [kai])" } else { "" }
                )),
            });
            Gang {
                key: gang.clone(),
                min_member: group.map_or(1, |g| g.min_member),
                bound: 0,
                pods: Vec::new(),
                priority: group.and_then(group_priority).unwrap_or(i32::MIN),
                created: group.map_or(i64::MAX, |g| g.created),
                blocked,
                topology: None,
                queue: rules.queue_of(group, pod),
                quota_owner: rules.quota_owner(pod),
                preemption_delay: group.and_then(|g| g.preemption_delay.clone().ok().flatten()),
                last_evicted: group.and_then(|g| g.last_evicted),
                preemptible: true,
                parked: Default::default(),
            }
        });
        // A delay on the pod (KAI's annotation) when its PodGroup sets none.
        if entry.preemption_delay.is_none() {
            match super::groups::preemption_delay(None, &pod.metadata) {
                Ok(delay) => entry.preemption_delay = delay,
                Err(why) => {
                    entry.blocked.get_or_insert_with(|| format!("pod {key}: {why}"));
                }
            }
        }
        if let Some(explicit) = convert_queues::preemptibility(facts.get(&gang), pod) {
            preemptibility.entry(gang.clone()).or_insert(explicit);
        }
        // Without a priority of its own, a gang takes its highest pod's; without a
        // PodGroup's creation time, its oldest pod's.
        if facts.get(&gang).and_then(group_priority).is_none() {
            entry.priority = entry.priority.max(priority);
        }
        if !facts.contains_key(&gang) {
            entry.created = entry.created.min(created(&pod.metadata));
        }
        let devices = match devices {
            Ok(devices) => devices.map(Arc::new),
            Err(why) => {
                // The gang cannot be placed until this pod's claims can be considered.
                if entry.blocked.is_none() {
                    entry.blocked = Some(if gang.kind == GangKind::Single {
                        why
                    } else {
                        format!("pod {key}: {why}; {gang} waits for it")
                    });
                }
                None
            }
        };
        if !pod_topology.contains_key(&gang) {
            let named = annotated_topology(&pod.metadata);
            if named.0.is_some() || named.1.is_some() {
                pod_topology.insert(gang.clone(), named);
            }
        }
        entry.pods.push(PendingPod { key, demand, constraints, devices });
    }
    for (key, gang) in gangs.iter_mut() {
        gang.bound = bound_per_gang.get(key).copied().unwrap_or(0);
        gang.preemptible =
            preemptibility.get(key).copied().unwrap_or(gang.priority < convert_queues::NON_PREEMPTIBLE_PRIORITY);
        // Topology: the PodGroup's, else (a pod without one, say of a Kueue job) its pods'
        // annotations.
        let named = match facts.get(key).map(|f| f.topology.clone()) {
            Some((None, None)) | None => pod_topology.get(key).cloned().unwrap_or((None, None)),
            Some(named) => named,
        };
        if named.0.is_none() && named.1.is_none() {
            continue;
        }
        let nodes = &out.snapshot.nodes;
        let index = &mut out.snapshot.topology;
        let mut resolve =
            |name: &Option<String>| name.as_deref().map(|n| index.resolve(n, nodes, memo.ad_hoc_levels)).transpose();
        match (resolve(&named.0), resolve(&named.1)) {
            (Ok(required), Ok(preferred)) => gang.topology = Some(GangTopology { required, preferred }),
            (Err(why), _) | (_, Err(why)) => {
                gang.blocked.get_or_insert_with(|| format!("{key}: {why}"));
            }
        }
    }
    out.snapshot.gangs = gangs.into_values().collect();
    out.snapshot.running = running.into_values().collect();
    out.snapshot.queues.name_keys(&memo.names);
    out.snapshot.resources = memo.names.clone();
    memo.trim(objects);
    // After the memo let go of deleted objects: what holds a value now is what is live.
    memo.interner.prune();
    memo.devices.specs.prune();
    memo.prune_names();

    let mut groups: Vec<GroupSummary> = facts
        .iter()
        .map(|(key, f)| GroupSummary {
            bound: bound_per_gang.get(key).copied().unwrap_or(0),
            key: key.clone(),
            min_member: f.min_member,
        })
        .collect();
    groups
        .sort_by(|a, b| (&a.key.namespace, &a.key.name, a.key.kind).cmp(&(&b.key.namespace, &b.key.name, b.key.kind)));
    out.groups = groups;
    out.specs = facts;
    out
}

#[cfg(test)]
#[path = "assemble_tests.rs"]
mod tests;
