//! Assembles the engine's snapshot from the cluster's objects: nodes with what bound pods
//! use, and Muster's pending pods grouped into gangs from the three PodGroup sources.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::convert::{self, ConstraintsInterner};
use super::crd::PodGroup as MusterPodGroup;
use super::foreign::PodGroup as PluginPodGroup;
use crate::engine::model::{Gang, GangKey, GangKind, PendingPod, PodKey, Snapshot};

/// The label that makes a pod a member of Muster's PodGroup of that name.
pub const MUSTER_GROUP_LABEL: &str = "muster.dev/pod-group";
/// The label scheduler-plugins' PodGroup members carry.
pub const PLUGIN_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// Everything the snapshot is made from.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub kubernetes_groups: Vec<KubernetesPodGroup>,
    pub muster_groups: Vec<MusterPodGroup>,
    pub plugin_groups: Vec<PluginPodGroup>,
    pub priority_classes: Vec<PriorityClass>,
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
    /// Muster's pods already bound, with their node.
    pub bound: BTreeMap<PodKey, String>,
    /// Every PodGroup that exists, of any kind, sorted.
    pub groups: Vec<GroupSummary>,
    /// Muster's pending pods the engine cannot consider, with why (bad requests).
    pub rejected_pods: BTreeMap<PodKey, String>,
    /// Objects left out, with why (a node with an unreadable quantity).
    pub problems: Vec<String>,
    /// Which gang each of Muster's pods belongs to.
    pub gang_of: HashMap<PodKey, GangKey>,
}

fn created(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second())
}

fn pod_key(meta: &ObjectMeta) -> PodKey {
    PodKey { namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()), name: meta.name.clone().unwrap_or_default() }
}

/// Which gang a pod belongs to, in DESIGN order: Kubernetes' schedulingGroup, Muster's
/// label, scheduler-plugins' label; otherwise it is a gang of one.
pub fn gang_key(pod: &Pod) -> GangKey {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let labels = pod.metadata.labels.as_ref();
    let native = pod.spec.as_ref().and_then(|s| s.scheduling_group.as_ref()).and_then(|g| g.pod_group_name.clone());
    let (kind, name) = if let Some(name) = native {
        (GangKind::Kubernetes, name)
    } else if let Some(name) = labels.and_then(|l| l.get(MUSTER_GROUP_LABEL)) {
        (GangKind::Muster, name.clone())
    } else if let Some(name) = labels.and_then(|l| l.get(PLUGIN_GROUP_LABEL)) {
        (GangKind::SchedulerPlugins, name.clone())
    } else {
        (GangKind::Single, pod.metadata.name.clone().unwrap_or_default())
    };
    GangKey { kind, namespace, name }
}

struct GroupFacts {
    min_member: usize,
    priority: Option<i32>,
    created: i64,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Builds the snapshot for the scheduler called `scheduler_name`, as of `now` (seconds
/// since the Unix epoch).
pub fn assemble(objects: &ClusterObjects, scheduler_name: &str, now: i64) -> Assembled {
    let mut out = Assembled::default();
    out.snapshot.now = now;
    let classes: HashMap<&str, i32> = objects
        .priority_classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c.value.unwrap_or(0))))
        .collect();
    let default_priority = objects.priority_classes.iter().find(|c| c.global_default == Some(true)).and_then(|c| c.value).unwrap_or(0);
    let class_priority = |name: Option<&String>| name.and_then(|n| classes.get(n.as_str()).copied());

    let mut facts: HashMap<GangKey, GroupFacts> = HashMap::new();
    let key = |kind, meta: &ObjectMeta| GangKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    };
    for g in &objects.muster_groups {
        let facts_of = GroupFacts {
            min_member: g.spec.min_member.max(1) as usize,
            priority: class_priority(g.spec.priority_class_name.as_ref()),
            created: created(&g.metadata),
        };
        facts.insert(key(GangKind::Muster, &g.metadata), facts_of);
    }
    for g in &objects.kubernetes_groups {
        let min = g.spec.scheduling_policy.gang.as_ref().map_or(1, |gang| gang.min_count.max(1));
        let priority = g.spec.priority.or_else(|| class_priority(g.spec.priority_class_name.as_ref()));
        facts.insert(
            key(GangKind::Kubernetes, &g.metadata),
            GroupFacts { min_member: min as usize, priority, created: created(&g.metadata) },
        );
    }
    for g in &objects.plugin_groups {
        facts.insert(
            key(GangKind::SchedulerPlugins, &g.metadata),
            GroupFacts {
                min_member: g.spec.min_member.max(1) as usize,
                priority: class_priority(g.spec.priority_class_name.as_ref()),
                created: created(&g.metadata),
            },
        );
    }

    let resources = &mut out.snapshot.resources;
    let mut node_index: HashMap<String, usize> = HashMap::new();
    for n in &objects.nodes {
        match convert::node(n, resources) {
            Ok(node) => {
                node_index.insert(node.name.clone(), out.snapshot.nodes.len());
                out.snapshot.nodes.push(node);
            }
            Err(e) => out.problems.push(format!("left out: {e}")),
        }
    }

    let mut interner = ConstraintsInterner::default();
    let mut gangs: BTreeMap<GangKey, Gang> = BTreeMap::new();
    let mut bound_per_gang: HashMap<GangKey, usize> = HashMap::new();
    for pod in &objects.pods {
        if is_terminal(pod) {
            continue;
        }
        let spec = pod.spec.as_ref();
        let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
        let node_name = spec.and_then(|s| s.node_name.as_ref());
        let key = pod_key(&pod.metadata);
        let gang = ours.then(|| gang_key(pod));
        if let Some(g) = &gang {
            out.gang_of.insert(key.clone(), g.clone());
        }
        if let Some(node_name) = node_name {
            // Bound, by whichever scheduler: it uses capacity.
            match (convert::pod_demand(pod, &mut out.snapshot.resources), node_index.get(node_name)) {
                (Ok(demand), Some(&i)) => out.snapshot.nodes[i].requested.add(&demand, 1),
                (Err(e), _) => out.problems.push(format!("capacity not counted: {e}")),
                (Ok(_), None) => {}
            }
            // A terminating pod still uses its node, but no longer counts toward its gang:
            // an evicted gang must not look whole while its pods go away.
            if let Some(g) = gang.filter(|_| pod.metadata.deletion_timestamp.is_none()) {
                out.bound.insert(key, node_name.clone());
                *bound_per_gang.entry(g).or_default() += 1;
            }
            continue;
        }
        let Some(gang) = gang else { continue };
        if pod.metadata.deletion_timestamp.is_some() || spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty()) {
            continue;
        }
        if spec.and_then(|s| s.resource_claims.as_ref()).is_some_and(|c| !c.is_empty()) {
            let why = "asks for DRA devices (spec.resourceClaims), which this version of Muster does not allocate yet";
            out.rejected_pods.insert(key, why.to_string());
            continue;
        }
        let demand = convert::pod_demand(pod, &mut out.snapshot.resources);
        let constraints = convert::pod_constraints(pod);
        let (demand, constraints) = match (demand, constraints) {
            (Ok(d), Ok(c)) => (d, c),
            (Err(e), _) | (_, Err(e)) => {
                out.rejected_pods.insert(key, e.to_string());
                continue;
            }
        };
        let priority = spec
            .and_then(|s| s.priority.or_else(|| class_priority(s.priority_class_name.as_ref())))
            .unwrap_or(default_priority);
        let entry = gangs.entry(gang.clone()).or_insert_with(|| {
            let group = facts.get(&gang);
            let blocked = match (gang.kind, group) {
                (GangKind::Single, _) | (_, Some(_)) => None,
                (kind, None) => Some(format!(
                    "PodGroup {}/{} ({}) does not exist; its pods wait for it",
                    gang.namespace,
                    gang.name,
                    kind.api_version().unwrap_or_default()
                )),
            };
            Gang {
                key: gang.clone(),
                min_member: group.map_or(1, |g| g.min_member),
                bound: 0,
                pods: Vec::new(),
                priority: group.and_then(|g| g.priority).unwrap_or(i32::MIN),
                created: group.map_or(i64::MAX, |g| g.created),
                blocked,
            }
        });
        // Without a priority of its own, a gang takes its highest pod's; without a
        // PodGroup's creation time, its oldest pod's.
        if facts.get(&gang).and_then(|g| g.priority).is_none() {
            entry.priority = entry.priority.max(priority);
        }
        if !facts.contains_key(&gang) {
            entry.created = entry.created.min(created(&pod.metadata));
        }
        entry.pods.push(PendingPod { key, demand, constraints: interner.intern(constraints) });
    }
    for (key, gang) in gangs.iter_mut() {
        gang.bound = bound_per_gang.get(key).copied().unwrap_or(0);
    }
    out.snapshot.gangs = gangs.into_values().collect();

    let mut groups: Vec<GroupSummary> = facts
        .into_iter()
        .map(|(key, f)| GroupSummary { bound: bound_per_gang.get(&key).copied().unwrap_or(0), key, min_member: f.min_member })
        .collect();
    groups.sort_by(|a, b| (&a.key.namespace, &a.key.name, a.key.kind).cmp(&(&b.key.namespace, &b.key.name, b.key.kind)));
    out.groups = groups;
    out
}
