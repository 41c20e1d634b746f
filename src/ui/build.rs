//! The page's view (`ui::UiView`), built after the housekeeping pass from what the cycle
//! and the pass computed anyway: the snapshot, the queue reports, the reasons gangs were
//! given, the GPU figures. Pure; reads no API server.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::convert::assemble::Assembled;
use crate::engine::admission::report::{Figures, QueueReport};
use crate::engine::dra::model::DeviceIdx;
use crate::engine::dra::model::{AttributeValue, DeviceNodes, DeviceTaintEffect, SHARED_CAPACITY};
use crate::engine::fragmentation::{Kinds, NodeGpus};
use crate::engine::model::{GangKey, Snapshot};
use crate::engine::queues::refusal::quantity;
use crate::engine::resources::ResourceId;
use crate::figures::gpus::{GPU_RESOURCE, GpuUsage, is_gpu};
use crate::ui::view::{
    Fragmentation, FragmentationRow, GpuState, MAX_WAITING, NodeRow, QueueFigures, QueueRow, Rack, UiView, WaitingGang,
};

/// What the view is made of.
pub struct Inputs<'a> {
    pub scheduler_name: &'a str,
    pub assembled: &'a Assembled,
    pub queues: &'a [QueueReport],
    /// Why each gang that waits was last told it waits.
    pub waits: &'a HashMap<GangKey, String>,
    pub gpus: &'a GpuUsage,
    /// The kinds of GPU pods the engine has learned, for its fragmentation measure.
    pub kinds: Option<&'a Kinds>,
    pub now: i64,
}

pub fn build(inputs: &Inputs<'_>) -> UiView {
    let snapshot = &inputs.assembled.snapshot;
    let (nodes, thousandths) = node_rows(snapshot, inputs.gpus);
    let (grouping, racks) = racks(snapshot, &nodes);
    let (waiting, more_waiting) = waiting(inputs);
    UiView {
        at: inputs.now,
        scheduler_name: inputs.scheduler_name.to_string(),
        leading: true,
        queues: queue_rows(inputs.queues, snapshot),
        waiting,
        more_waiting,
        fragmentation: fragmentation(snapshot, &racks, &nodes, &thousandths, inputs),
        grouping,
        racks: racks
            .into_iter()
            .map(|(name, members)| Rack { name, nodes: members.into_iter().map(|n| nodes[n].clone()).collect() })
            .collect(),
    }
}

/// Queues parent before children, each under its parent, siblings by name.
fn queue_rows(reports: &[QueueReport], snapshot: &Snapshot) -> Vec<QueueRow> {
    let by_name: HashMap<&str, &QueueReport> = reports.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut rows = Vec::with_capacity(reports.len());
    let mut stack: Vec<(&QueueReport, usize)> = reports
        .iter()
        .filter(|r| r.parent.as_deref().is_none_or(|p| !by_name.contains_key(p)))
        .rev()
        .map(|r| (r, 0))
        .collect();
    let mut seen = HashSet::new();
    while let Some((report, depth)) = stack.pop() {
        if !seen.insert(report.name.as_str()) {
            continue;
        }
        rows.push(QueueRow {
            name: report.name.clone(),
            depth,
            problem: report.problem.clone(),
            pending_gangs: report.pending_gangs,
            running_gangs: report.running_gangs,
            resources: report.resources.iter().map(|&(id, f)| figures(snapshot, id, f)).collect(),
        });
        let mut children: Vec<&QueueReport> =
            report.children.iter().filter_map(|c| by_name.get(c.as_str()).copied()).collect();
        children.sort_by(|a, b| b.name.cmp(&a.name));
        stack.extend(children.into_iter().map(|c| (c, depth + 1)));
    }
    rows
}

fn figures(snapshot: &Snapshot, id: ResourceId, f: Figures) -> QueueFigures {
    let names = &snapshot.resources;
    let entitled = f.quota.unwrap_or(0).max(f.fair_share);
    let fill = match (entitled, f.allocated) {
        (0, 0) => 0.0,
        (0, _) => 2.0,
        (e, a) => a as f64 / e as f64,
    };
    QueueFigures {
        resource: names.name(id).to_string(),
        quota: f.quota.map_or_else(|| "unlimited".to_string(), |q| quantity(names, id, q)),
        fair_share: quantity(names, id, f.fair_share),
        allocated: quantity(names, id, f.allocated),
        requested: quantity(names, id, f.requested),
        fill,
    }
}

/// Gangs told they wait, oldest first; those beyond [`MAX_WAITING`] only counted.
fn waiting(inputs: &Inputs<'_>) -> (Vec<WaitingGang>, usize) {
    let snapshot = &inputs.assembled.snapshot;
    let gangs: HashMap<&GangKey, &crate::engine::model::Gang> = snapshot.gangs.iter().map(|g| (&g.key, g)).collect();
    let mut pods: HashMap<&GangKey, usize> = HashMap::new();
    for gang in inputs.assembled.gang_of.values() {
        *pods.entry(gang).or_default() += 1;
    }
    let created = |key: &GangKey| {
        gangs.get(key).map(|g| g.created).or_else(|| inputs.assembled.specs.get(key).map(|s| s.created))
    };
    let mut keys: Vec<&GangKey> = inputs.waits.keys().collect();
    keys.sort_by(|a, b| created(a).unwrap_or(i64::MAX).cmp(&created(b).unwrap_or(i64::MAX)).then_with(|| a.cmp(b)));
    let more = keys.len().saturating_sub(MAX_WAITING);
    keys.truncate(MAX_WAITING);
    let free = crate::figures::nearest::free_gpus(snapshot);
    let rows = keys
        .into_iter()
        .map(|key| {
            let gang = gangs.get(key);
            let spec = inputs.assembled.specs.get(key);
            WaitingGang {
                gang: key.to_string(),
                namespace: key.namespace.clone(),
                queue: gang.map(|g| g.queue.clone()).or_else(|| spec.and_then(|s| s.queue.clone())).unwrap_or_default(),
                min_member: gang.map(|g| g.min_member).or_else(|| spec.map(|s| s.min_member)).unwrap_or(1),
                pods: pods.get(key).copied().unwrap_or(0),
                waiting_seconds: created(key).map_or(0, |c| inputs.now - c),
                reason: inputs.waits[key].clone(),
                nearest: gang.and_then(|g| crate::figures::nearest::nearest_with(snapshot, &free, g)),
            }
        })
        .collect();
    (rows, more)
}

/// Every node with the state of each of its GPUs: counted from `nvidia.com/gpu` on nodes
/// that advertise it, else one per GPU device of its own ResourceSlices; and per node the
/// free thousandths of each GPU (a shared one by the memory its shares leave).
fn node_rows(snapshot: &Snapshot, usage: &GpuUsage) -> (Vec<NodeRow>, Vec<Vec<u32>>) {
    let dra = &snapshot.dra;
    // Per device: taken whole, or shares of it.
    let mut taken = vec![(false, false); dra.devices.len()];
    for u in dra.in_use.iter().filter(|u| !u.admin_access) {
        if let Some(slot) = taken.get_mut(u.device as usize) {
            if u.consumed.is_some() { slot.1 = true } else { slot.0 = true }
        }
    }
    let gpu = snapshot.resources.get(GPU_RESOURCE);
    let mut thousandths = Vec::with_capacity(snapshot.nodes.len());
    let rows = snapshot
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let advertised = gpu.map_or(0, |id| node.allocatable.get(id));
            let mut free = Vec::new();
            let gpus = if advertised > 0 {
                let used = gpu.map_or(0, |id| node.requested.get(id)).clamp(0, advertised);
                let mut gpus = vec![GpuState::Used; used as usize];
                gpus.resize(advertised as usize, GpuState::Free);
                free = gpus.iter().map(|g| if *g == GpuState::Free { 1000 } else { 0 }).collect();
                gpus
            } else {
                let devices = dra.node_devices.get(n).map(Vec::as_slice).unwrap_or_default();
                devices
                    .iter()
                    .filter_map(|&d| {
                        let device = &dra.devices[d as usize];
                        let local = matches!(&device.nodes, DeviceNodes::Node(name) if *name == node.name);
                        let kind = match device.attributes.get(&format!("{}/type", device.driver)) {
                            Some(AttributeValue::String(kind)) => Some(kind.as_str()),
                            _ => None,
                        };
                        if !local || !is_gpu(&device.driver, kind) {
                            return None;
                        }
                        let key = (device.driver.to_string(), device.pool.to_string(), device.name.clone());
                        let out_of_service = device.taints.iter().any(|t| t.effect != DeviceTaintEffect::None);
                        let (whole, shares) = taken[d as usize];
                        let state = if out_of_service {
                            GpuState::Tainted
                        } else if usage.held_devices.contains(&key) {
                            GpuState::Held
                        } else if whole {
                            GpuState::Used
                        } else if shares {
                            GpuState::Shared
                        } else {
                            GpuState::Free
                        };
                        free.push(match state {
                            GpuState::Free => 1000,
                            GpuState::Shared => shared_left(snapshot, d).unwrap_or(500),
                            _ => 0,
                        });
                        Some(state)
                    })
                    .collect()
            };
            thousandths.push(free);
            NodeRow { name: node.name.clone(), cordoned: node.unschedulable, gpus }
        })
        .collect();
    (rows, thousandths)
}

/// Thousandths of a shared GPU's memory its shares leave free.
fn shared_left(snapshot: &Snapshot, d: DeviceIdx) -> Option<u32> {
    let dra = &snapshot.dra;
    let device = &dra.devices[d as usize];
    let index = device.capacity_index(SHARED_CAPACITY)?;
    let capacity = device.capacity[index].1.value.as_f64();
    let consumed: f64 = dra
        .in_use
        .iter()
        .filter(|u| u.device == d)
        .flat_map(|u| u.consumed.iter().flatten())
        .filter(|(name, _)| device.capacity_index(name) == Some(index))
        .map(|(_, q)| q.as_f64())
        .sum();
    (capacity > 0.0).then(|| (((capacity - consumed) / capacity).clamp(0.0, 1.0) * 1000.0) as u32)
}

/// The level nodes are grouped by (`rack` when configured, else the innermost level that
/// is not the host), and its domains' nodes by name; nodes without the label last, in a
/// group with no name.
fn racks(snapshot: &Snapshot, nodes: &[NodeRow]) -> (Option<String>, Vec<(String, Vec<usize>)>) {
    let index = &snapshot.topology;
    let configured = &index.levels[..index.configured.min(index.levels.len())];
    let level = configured
        .iter()
        .find(|l| l.name == "rack")
        .or_else(|| configured.iter().rev().find(|l| l.label != "kubernetes.io/hostname"))
        .filter(|l| !l.domains.is_empty());
    let by_name = |members: &mut Vec<usize>| members.sort_by(|a, b| nodes[*a].name.cmp(&nodes[*b].name));
    let Some(level) = level else {
        let mut all: Vec<usize> = (0..nodes.len()).collect();
        by_name(&mut all);
        return (None, if all.is_empty() { Vec::new() } else { vec![(String::new(), all)] });
    };
    let mut grouped: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut placed = vec![false; nodes.len()];
    for domain in &level.domains {
        let members = grouped.entry(domain.value.clone()).or_default();
        for &n in &domain.nodes {
            members.push(n as usize);
            placed[n as usize] = true;
        }
    }
    let mut racks: Vec<(String, Vec<usize>)> = grouped.into_iter().filter(|(_, m)| !m.is_empty()).collect();
    let rest: Vec<usize> = (0..nodes.len()).filter(|&n| !placed[n]).collect();
    if !rest.is_empty() {
        racks.push((String::new(), rest));
    }
    racks.iter_mut().for_each(|(_, members)| by_name(members));
    (Some(level.name.clone()), racks)
}

fn fragmentation(
    snapshot: &Snapshot,
    racks: &[(String, Vec<usize>)],
    nodes: &[NodeRow],
    thousandths: &[Vec<u32>],
    inputs: &Inputs<'_>,
) -> Fragmentation {
    let row = |name: &str, members: &mut dyn Iterator<Item = usize>| {
        let mut row = FragmentationRow { name: name.to_string(), ..Default::default() };
        for n in members {
            let gpus = &nodes[n].gpus;
            let free = gpus.iter().filter(|g| **g == GpuState::Free).count();
            row.gpus += gpus.len();
            row.free += free;
            if free == gpus.len() && !gpus.is_empty() {
                row.free_nodes += 1;
            } else {
                row.free_on_busy_nodes += free;
            }
            row.largest_free_block = row.largest_free_block.max(free);
            row.stranded += inputs.gpus.nodes.get(&nodes[n].name).map_or(0, |g| g.stranded);
        }
        row
    };
    let mut rows = Vec::with_capacity(racks.len() + 1);
    if nodes.iter().any(|n| !n.gpus.is_empty()) {
        rows.push(row("cluster", &mut (0..nodes.len())));
        if racks.len() > 1 {
            rows.extend(racks.iter().map(|(name, members)| row(name, &mut members.iter().copied())));
        }
    }
    // The engine's measure, as it orders nodes once the cluster runs GPU shares.
    let expected = inputs.kinds.filter(|k| k.shares).map(|kinds| {
        let milli: f64 = snapshot
            .nodes
            .iter()
            .zip(thousandths)
            .map(|(node, free)| {
                let free_of = |r| node.allocatable.get(r) - node.requested.get(r);
                let (cpu, memory) = (free_of(ResourceId::CPU), free_of(ResourceId::MEMORY));
                NodeGpus::new(free.iter().copied().collect(), cpu, memory).fragmentation(kinds)
            })
            .sum();
        milli / 1000.0
    });
    Fragmentation { rows, expected }
}
