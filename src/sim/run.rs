//! Schedules a loaded cluster until nothing more can be placed, with the same conversion
//! and engine as the scheduler, and reports every pod and PodGroup.

use std::collections::HashMap;

use serde::Serialize;

use crate::config::Config;
use crate::engine::model::{GangKind, PodKey};
use crate::engine::{CycleOutcome, schedule};
use crate::k8s::assemble::{ClusterObjects, assemble};

/// One device allocated to a pod's claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceResult {
    pub claim: String,
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodResult {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub devices: Vec<DeviceResult>,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangResult {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub min_member: usize,
    pub placed: usize,
    pub scheduled: bool,
    pub reason: Option<String>,
}

/// The simulator's JSON document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub pods: Vec<PodResult>,
    pub gangs: Vec<GangResult>,
}

/// How many cycles at most; each placing cycle binds at least one pod, so a cluster
/// settles long before this.
const MAX_CYCLES: usize = 100_000;

/// Binds what the cycle placed by setting the pods' nodeName, as the binder does.
pub fn apply(
    objects: &mut ClusterObjects,
    snapshot_nodes: &[crate::engine::model::Node],
    outcome: &CycleOutcome,
) -> usize {
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, pod) in objects.pods.iter().enumerate() {
        index.insert(
            (pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or("")),
            i,
        );
    }
    let mut bindings = Vec::new();
    for placement in &outcome.placements {
        for (key, node) in &placement.pods {
            if let Some(&i) = index.get(&(key.namespace.as_str(), key.name.as_str())) {
                bindings.push((i, snapshot_nodes[*node as usize].name.clone()));
            }
        }
    }
    let count = bindings.len();
    for (i, node) in bindings {
        if let Some(spec) = objects.pods[i].spec.as_mut() {
            spec.node_name = Some(node);
        }
    }
    count
}

/// Schedules until a cycle places nothing, then reports.
pub fn run(objects: &mut ClusterObjects, config: &Config) -> Report {
    let cycle = config.cycle();
    let mut last = CycleOutcome::default();
    let now = latest_creation(objects);
    for _ in 0..MAX_CYCLES {
        let assembled = assemble(objects, &config.scheduler_name, now);
        last = schedule(&assembled.snapshot, &cycle);
        if apply(objects, &assembled.snapshot.nodes, &last) == 0 {
            break;
        }
    }
    report(objects, config, &last)
}

/// A YAML cluster is a moment in time: the simulation runs as of its newest object, so
/// gangs have waited as long as their creation times say.
fn latest_creation(objects: &ClusterObjects) -> i64 {
    let pods = objects.pods.iter().map(|p| &p.metadata);
    let groups =
        objects.muster_groups.iter().map(|g| &g.metadata).chain(objects.kubernetes_groups.iter().map(|g| &g.metadata));
    pods.chain(groups)
        .chain(objects.plugin_groups.iter().map(|g| &g.metadata))
        .filter_map(|m| m.creation_timestamp.as_ref().map(|t| t.0.as_second()))
        .max()
        .unwrap_or(0)
}

fn report(objects: &ClusterObjects, config: &Config, last: &CycleOutcome) -> Report {
    let assembled = assemble(objects, &config.scheduler_name, latest_creation(objects));
    let waiting: HashMap<_, String> = last.waiting.iter().map(|w| (w.gang.clone(), w.to_string())).collect();
    let mut pods = Vec::new();
    for pod in &objects.pods {
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.scheduler_name.as_deref()) != Some(config.scheduler_name.as_str()) {
            continue;
        }
        let key = PodKey {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
        };
        let node = spec.and_then(|s| s.node_name.clone());
        let reason = if node.is_some() {
            None
        } else if let Some(why) = assembled.rejected_pods.get(&key) {
            Some(why.clone())
        } else if let Some(gates) = spec.and_then(|s| s.scheduling_gates.as_ref()).filter(|g| !g.is_empty()) {
            let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
            Some(format!("waiting for scheduling gates to be removed: {}", names.join(", ")))
        } else {
            let gang = assembled.gang_of.get(&key);
            Some(gang.and_then(|g| waiting.get(g).cloned()).unwrap_or_else(|| "not considered for scheduling".into()))
        };
        pods.push(PodResult { namespace: key.namespace, name: key.name, node, devices: Vec::new(), reason });
    }
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let gangs = assembled
        .groups
        .iter()
        .filter(|g| g.key.kind != GangKind::Single)
        .map(|g| {
            let scheduled = g.bound >= g.min_member;
            let has_pods = g.bound > 0 || assembled.gang_of.values().any(|k| *k == g.key);
            GangResult {
                api_version: g.key.kind.api_version().unwrap_or_default().to_string(),
                kind: "PodGroup".into(),
                namespace: g.key.namespace.clone(),
                name: g.key.name.clone(),
                min_member: g.min_member,
                placed: g.bound,
                scheduled,
                reason: (!scheduled).then(|| match waiting.get(&g.key) {
                    Some(why) => why.clone(),
                    None if !has_pods => format!("no pods of this PodGroup exist yet ({} needed)", g.min_member),
                    None => format!("{} of its pods exist, it needs {}", g.bound, g.min_member),
                }),
            }
        })
        .collect();
    Report { pods, gangs }
}
