//! One replay of the openb trace under the published protocol: the GPU nodes, the pods
//! shuffled by the seed then drawn again at random until the GPU they ask for reaches 130%
//! of the cluster's, each tried once through the engine on arrival, never leaving. A pod
//! that does not fit is skipped. Whole GPUs are asked as `nvidia.com/gpu` served by DRA,
//! fractions with the `gpu-fraction` annotation, read by the scheduler's own conversion.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::load::{OpenbNode, OpenbPod};
use crate::config::Config;
use crate::convert::rows::{self, GpuAsk, RowNode, Rows};
use crate::engine::dra::model::DeviceUse;
use crate::engine::drive::{Driver, Engine};
use crate::engine::fragmentation::{NodeGpus, PodKind};
use crate::engine::model::{
    Gang, GangKey, GangKind, LabelRequirement, NodeConstraints, PendingPod, PodDevices, PodKey, Snapshot,
};
use crate::engine::node::SelectorOperator;
use crate::engine::resources::{Demand, ResourceId};
use crate::engine::{CycleMemory, CycleOutcome};
use crate::sim::replay::cluster::MODEL_LABEL;
use crate::sim::scenarios::Random;

/// The GPU memory each model's devices are published with (its shares are thousandths of
/// it); models the trace does not name are given 16 GiB.
fn model_memory_gib(model: &str) -> u64 {
    match model {
        "V100M32" | "G2" => 32,
        "A10" => 24,
        "G3" => 48,
        _ => 16,
    }
}

/// The cluster as the scheduler would read it, made once and copied for every seed.
pub struct Base {
    pub snapshot: Snapshot,
    gpu: ResourceId,
    /// Per device: its node and its index among the node's GPUs.
    device_gpu: Vec<(usize, usize)>,
    pub total_milli: u64,
    models: Vec<String>,
    gpus: Vec<u32>,
}

impl Base {
    pub fn new(nodes: &[OpenbNode]) -> Result<Base, String> {
        let mut rows = Rows::new().map_err(|e| e.to_string())?;
        for node in nodes {
            let labels = json!({"kubernetes.io/hostname": node.sn, MODEL_LABEL: node.model});
            let allocatable = json!({"cpu": format!("{}m", node.cpu_milli),
                                     "memory": format!("{}Mi", node.memory_mib), "pods": "1001"});
            let (Value::Object(labels), Value::Object(allocatable)) = (labels, allocatable) else {
                unreachable!("JSON objects")
            };
            rows.node(RowNode {
                name: &node.sn,
                labels,
                allocatable,
                unschedulable: false,
                gpus: node.gpu,
                gpu_memory: format!("{}Gi", model_memory_gib(&node.model)),
                model: Some(&node.model),
            })
            .map_err(|e| e.to_string())?;
        }
        let mut snapshot = rows.snapshot().map_err(|e| e.to_string())?;
        let gpu = snapshot.resources.intern(crate::figures::gpus::GPU_RESOURCE);
        let index: HashMap<&str, usize> =
            snapshot.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let device_gpu = snapshot
            .dra
            .devices
            .iter()
            .map(|d| (index[&*d.pool], d.name.trim_start_matches("gpu-").parse().unwrap_or(0)))
            .collect();
        let by_name: HashMap<&str, &OpenbNode> = nodes.iter().map(|n| (n.sn.as_str(), n)).collect();
        let models = snapshot.nodes.iter().map(|n| by_name[n.name.as_str()].model.clone()).collect();
        let gpus: Vec<u32> = snapshot.nodes.iter().map(|n| by_name[n.name.as_str()].gpu).collect();
        Ok(Base {
            gpu,
            device_gpu,
            total_milli: gpus.iter().map(|&g| u64::from(g) * 1000).sum(),
            models,
            gpus,
            snapshot,
        })
    }
}

/// The pods in the order they arrive under `seed`: all of them shuffled, then more drawn at
/// random (with replacement) until the next would take the GPU asked beyond `percent` of
/// the cluster's.
pub fn arrivals(pods: &[OpenbPod], seed: u64, total_milli: u64, percent: u64) -> Vec<usize> {
    let mut random = Random::new(seed);
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&a, &b| pods[a].name.cmp(&pods[b].name));
    for i in (1..order.len()).rev() {
        order.swap(i, random.below(i as u64 + 1) as usize);
    }
    let target = total_milli * percent / 100;
    let mut asked: u64 = pods.iter().map(OpenbPod::gpu_request).sum();
    loop {
        let i = random.below(pods.len() as u64) as usize;
        if asked + pods[i].gpu_request() > target {
            break;
        }
        asked += pods[i].gpu_request();
        order.push(i);
    }
    order
}

/// What one seed's replay measured.
#[derive(Clone, Debug)]
pub struct SeedRun {
    pub seed: u64,
    /// Per arrival: GPU thousandths asked so far (this pod's included) and allocated.
    pub events: Vec<(u64, u64)>,
    /// Per arrival event at 90% arrived: the cluster's fragmentation ratio, in percent.
    pub fragmentation_at_90: Vec<f64>,
    pub placed: usize,
    pub skipped: usize,
}

/// The workload's typical kinds of pods, as the published fragmentation measure weighs
/// them: each (CPU, thousandths, GPUs, models) with its share, the most common first until
/// 95% of the pods are covered.
pub fn typical(pods: &[OpenbPod]) -> Vec<((PodKind, Vec<String>), f64)> {
    let mut counts: HashMap<(i64, u32, u32, String), usize> = HashMap::new();
    for pod in pods {
        let milli = if pod.num_gpu == 0 { 0 } else { pod.gpu_milli };
        *counts.entry((pod.cpu_milli, milli, pod.num_gpu, pod.gpu_spec.clone())).or_default() += 1;
    }
    let mut sorted: Vec<_> = counts.into_iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    let mut kept = Vec::new();
    let mut covered = 0;
    for ((cpu, milli, gpus, spec), count) in sorted {
        if covered * 100 >= pods.len() * 95 {
            break;
        }
        covered += count;
        let models = spec.split('|').map(str::trim).filter(|m| !m.is_empty()).map(String::from).collect();
        // The published measure weighs CPU, not memory.
        kept.push(((PodKind { cpu, memory: 0, gpus, milli }, models), count as f64));
    }
    kept.iter_mut().for_each(|(_, w)| *w /= covered as f64);
    kept
}

struct Cluster<'b> {
    base: &'b Base,
    free: Vec<Vec<u32>>,
}

impl Cluster<'_> {
    /// The cluster's fragmentation ratio (percent of its free GPU capacity) for `typical`.
    fn fragmentation_ratio(&self, snapshot: &Snapshot, typical: &[((PodKind, Vec<String>), f64)]) -> f64 {
        let mut fragmented = 0.0;
        let mut free_total = 0.0;
        for (n, free) in self.free.iter().enumerate() {
            let node = &snapshot.nodes[n];
            let cpu = node.allocatable.get(ResourceId::CPU) - node.requested.get(ResourceId::CPU);
            let gpus = NodeGpus::new(free.iter().copied().collect(), cpu, 0);
            let total = f64::from(gpus.total());
            free_total += total;
            for ((kind, models), share) in typical {
                let unusable = kind.gpus == 0 || (!models.is_empty() && !models.contains(&self.base.models[n]));
                let amount = if unusable { total } else { f64::from(gpus.fragmented_for(kind)) };
                fragmented += share * amount;
            }
        }
        if free_total > 0.0 { 100.0 * fragmented / free_total } else { 0.0 }
    }
}

/// Replays `order` (indexes into `pods`) on the base cluster.
pub fn run(base: &Base, pods: &[OpenbPod], order: &[usize], seed: u64, config: &Config) -> SeedRun {
    let mut replay = Arrivals {
        base,
        pods,
        order,
        next: 0,
        snapshot: base.snapshot.clone(),
        cluster: Cluster { base, free: base.gpus.iter().map(|&g| vec![1000; g as usize]).collect() },
        typical: typical(pods),
        run: SeedRun {
            seed,
            events: Vec::with_capacity(order.len()),
            fragmentation_at_90: Vec::new(),
            placed: 0,
            skipped: 0,
        },
        asked: 0,
        allocated: 0,
        devices_of: HashMap::new(),
    };
    Engine::new(config.cycle()).run_to_end(&mut replay);
    replay.run
}

/// One seed's arrivals driving the engine: the clock counts arrivals, the source is the
/// cluster with the arriving pod pending, the sink binds it or skips it.
struct Arrivals<'b> {
    base: &'b Base,
    pods: &'b [OpenbPod],
    order: &'b [usize],
    /// The next arrival.
    next: usize,
    snapshot: Snapshot,
    cluster: Cluster<'b>,
    typical: Vec<((PodKind, Vec<String>), f64)>,
    run: SeedRun,
    /// GPU thousandths asked so far and allocated.
    asked: u64,
    allocated: u64,
    /// What a pod asks of DRA, per (GPUs, thousandths).
    devices_of: HashMap<(u32, u32), Arc<PodDevices>>,
}

impl Driver for Arrivals<'_> {
    async fn next(&mut self) -> Option<i64> {
        (self.next < self.order.len()).then(|| {
            self.next += 1;
            self.next as i64 - 1
        })
    }

    fn snapshot(&mut self, now: i64, _: &mut CycleMemory) -> Option<&mut Snapshot> {
        let arrival = now as usize;
        let (base, pod) = (self.base, &self.pods[self.order[arrival]]);
        self.asked += pod.gpu_request();
        let devices = (pod.num_gpu > 0).then(|| {
            let key = (pod.num_gpu, pod.gpu_milli);
            let snapshot = &mut self.snapshot;
            self.devices_of.entry(key).or_insert_with(|| Arc::new(pod_devices(base, pod, snapshot))).clone()
        });
        let key = PodKey { namespace: "openb".into(), name: format!("{}-{arrival}", pod.name) };
        let mut entries =
            vec![(ResourceId::PODS, 1), (ResourceId::CPU, pod.cpu_milli), (ResourceId::MEMORY, pod.memory_mib << 20)];
        if pod.num_gpu > 0 && pod.gpu_milli == 1000 {
            entries.push((base.gpu, i64::from(pod.num_gpu)));
        }
        let models = pod.models();
        let mut constraints = NodeConstraints::default();
        if !models.is_empty() {
            constraints.affinity_terms = vec![vec![LabelRequirement {
                key: MODEL_LABEL.into(),
                operator: SelectorOperator::In,
                values: models,
            }]];
        }
        let pending = PendingPod {
            key: key.clone(),
            demand: Demand::new(entries),
            constraints: Arc::new(constraints),
            devices,
            labels: Default::default(),
            rules: None,
        };
        self.snapshot.gangs = vec![gang(key, pending, now)];
        Some(&mut self.snapshot)
    }

    fn decided(&mut self, outcome: CycleOutcome, _: &mut CycleMemory) {
        let (base, pod) = (self.base, &self.pods[self.order[self.next - 1]]);
        match outcome.placements.first() {
            Some(placement) => {
                self.run.placed += 1;
                self.allocated += pod.gpu_request();
                // What the node itself gives: GPUs come from its devices.
                let node_demand = Demand::new(
                    self.snapshot.gangs[0].pods[0]
                        .demand
                        .entries()
                        .iter()
                        .copied()
                        .filter(|(r, _)| *r != base.gpu)
                        .collect(),
                );
                let nodes = Arc::make_mut(&mut self.snapshot.nodes);
                for (_, n) in &placement.pods {
                    nodes[*n as usize].requested.add(&node_demand, 1);
                }
                for device in placement.claims.iter().filter_map(|c| c.allocation.as_ref()).flat_map(|a| &a.devices) {
                    let (n, g) = base.device_gpu[device.device as usize];
                    let taken = if pod.gpu_milli == 1000 { 1000 } else { pod.gpu_milli };
                    let free = &mut self.cluster.free[n][g];
                    *free = free.saturating_sub(taken);
                    self.snapshot.dra.in_use.push(DeviceUse {
                        device: device.device,
                        admin_access: false,
                        consumed: device.consumed.clone(),
                    });
                }
            }
            None => self.run.skipped += 1,
        }
        self.run.events.push((self.asked, self.allocated));
        if arrived_percent(self.asked, base.total_milli) == 90 {
            self.run.fragmentation_at_90.push(self.cluster.fragmentation_ratio(&self.snapshot, &self.typical));
        }
    }
}

/// Arrived GPU request as a whole percentage of the cluster's, rounded half to even.
pub fn arrived_percent(asked: u64, total_milli: u64) -> u64 {
    let exact = asked as f64 * 100.0 / total_milli as f64;
    let rounded = exact.round_ties_even();
    rounded as u64
}

/// What the pod asks of DRA: whole GPUs through `nvidia.com/gpu`, or a fraction by its
/// annotation, read as the scheduler reads it.
fn pod_devices(base: &Base, pod: &OpenbPod, snapshot: &mut Snapshot) -> PodDevices {
    let ask = if pod.gpu_milli == 1000 {
        GpuAsk::Whole(pod.num_gpu)
    } else {
        GpuAsk::Fraction(f64::from(pod.gpu_milli) / 1000.0)
    };
    rows::gpu_devices(&pod.name, ask, &snapshot.dra, &mut snapshot.resources, base.gpu).expect("a fraction")
}

fn gang(key: PodKey, pod: PendingPod, created: i64) -> Gang {
    rows::gang(GangKey { kind: GangKind::Single, namespace: key.namespace, name: key.name }, vec![pod], 0, created)
}
