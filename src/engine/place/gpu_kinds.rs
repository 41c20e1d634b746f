//! The workspace's GPUs as fragmentation reads them: each node's GPUs (devices with a
//! memory capacity) by free thousandths, the kind of GPU pod a shape is, and the kinds of
//! the pods of gangs seen for the first time, which the mix learns.

use std::collections::HashSet;

use smallvec::SmallVec;

use super::Workspace;
use super::score::SortKey;
use crate::engine::dra::model::{GpuShare, SHARED_CAPACITY};
use crate::engine::fragmentation::{NodeGpus, PodKind, increase};
use crate::engine::model::{GangKey, NodeIdx, PendingPod};
use crate::engine::resources::ResourceId;

/// The GPU part of a pod: CPU-only, or GPUs asked through DRA-served requests alone (None
/// for any other device request).
fn pod_kind(pod: &PendingPod) -> Option<ShapeKind> {
    let cpu = pod.demand.get(ResourceId::CPU);
    let memory = pod.demand.get(ResourceId::MEMORY);
    let Some(devices) = &pod.devices else { return Some(ShapeKind { cpu, memory, gpus: 0, share: None }) };
    if !devices.claims.is_empty() {
        return None;
    }
    let mut gpus = 0;
    let mut share = None;
    for request in &devices.extended {
        gpus += request.count;
        if request.share.is_some() {
            share = request.share;
        }
    }
    // One kind of request at a time: whole GPUs, or shares of them.
    let mixed = share.is_some() && devices.extended.len() > 1;
    (!mixed).then_some(ShapeKind { cpu, memory, gpus, share })
}

/// The GPU part of a shape: CPU-only, or GPUs asked through DRA-served requests alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct ShapeKind {
    cpu: i64,
    memory: i64,
    gpus: u32,
    share: Option<GpuShare>,
}

/// Gangs whose pods the mix has learned, in two generations so that the set stays
/// bounded: a gang is known while in either; the older is dropped when the newer fills.
#[derive(Debug, Default)]
pub(crate) struct SeenGangs {
    newer: HashSet<GangKey>,
    older: HashSet<GangKey>,
}

/// Increases of expected fragmentation (thousandths of a GPU) closer than this count as
/// equal, and the node with the least GPU capacity left free wins among them: the finest
/// differences are noise in a mix learned from the past, and packing keeps whole nodes for
/// the largest pods.
const FRAGMENTATION_STEP: f64 = 120.0;

/// Gangs remembered per generation.
const SEEN_PER_GENERATION: usize = 50_000;

impl SeenGangs {
    /// Whether `key` is new, remembering it.
    fn first_sight(&mut self, key: &GangKey) -> bool {
        if self.newer.contains(key) || self.older.contains(key) {
            return false;
        }
        if self.newer.len() >= SEEN_PER_GENERATION {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(key.clone());
        true
    }
}

impl ShapeKind {
    /// The kind of pod it is; an amount of memory is counted against a GPU of
    /// `gpu_memory` bytes.
    fn kind(&self, gpu_memory: f64) -> PodKind {
        let milli = match self.share {
            _ if self.gpus == 0 => 0,
            None => 1000,
            Some(GpuShare::Fraction(m)) => m,
            Some(GpuShare::Memory(q)) => ((q.as_f64() / gpu_memory.max(1.0) * 1000.0).ceil() as u32).clamp(1, 1000),
        };
        PodKind { cpu: self.cpu, memory: self.memory, gpus: self.gpus, milli }
    }
}

impl Workspace<'_> {
    /// The shape's kind, when fragmentation orders its nodes: the cluster runs GPU
    /// fractions (the mix has shares) under bin-packing, and the pod asks for no devices
    /// but GPUs (or none).
    pub(super) fn shape_kind(&self, pod: &PendingPod) -> Option<ShapeKind> {
        if !self.kinds.shares || self.scoring != super::Scoring::BinPack {
            return None;
        }
        pod_kind(pod)
    }

    /// The kinds of the GPU pods of gangs seen for the first time, which the mix learns:
    /// what the cluster is asked for, placed or not.
    pub(super) fn arrived_kinds(&self, seen: &mut SeenGangs) -> Vec<PodKind> {
        let mut kinds = Vec::new();
        let mut largest: Option<f64> = None;
        for gang in &self.snapshot.gangs {
            if !seen.first_sight(&gang.key) {
                continue;
            }
            for shape in gang.pods.iter().filter_map(pod_kind).filter(|k| k.gpus > 0) {
                let memory = *largest.get_or_insert_with(|| self.largest_gpu_memory());
                kinds.push(shape.kind(memory));
            }
        }
        kinds
    }

    /// The memory of the largest GPU (device with a memory capacity) of the cluster.
    fn largest_gpu_memory(&self) -> f64 {
        let dra = self.claims.dra;
        dra.devices
            .iter()
            .filter_map(|d| d.capacity_index(SHARED_CAPACITY).map(|i| d.capacity[i].1.value.as_f64()))
            .fold(0.0, f64::max)
    }

    /// Node `n`'s GPUs: free thousandths of each, and its free CPU.
    fn node_gpus(&self, n: NodeIdx) -> (NodeGpus, SmallVec<[u64; 8]>) {
        let dra = self.claims.dra;
        let mut free = SmallVec::new();
        let mut capacities = SmallVec::new();
        for &d in dra.node_devices.get(n as usize).into_iter().flatten() {
            let device = &dra.devices[d as usize];
            let Some(i) = device.capacity_index(SHARED_CAPACITY) else { continue };
            let capacity = device.capacity[i].1.value.as_f64();
            let (whole, left) = self.claims.state.left(dra, d, SHARED_CAPACITY);
            let milli = if whole || capacity <= 0.0 { 0 } else { (left.as_f64() / capacity * 1000.0).round() as u32 };
            free.push(milli.min(1000));
            capacities.push(capacity as u64);
        }
        let f = &self.free[n as usize];
        (NodeGpus::new(free, f.get(ResourceId::CPU), f.get(ResourceId::MEMORY)), capacities)
    }

    /// Candidates ordered by how little a pod of `shape` adds to their expected
    /// fragmentation, then by the GPU capacity it leaves free (best fit), then by free CPU.
    pub(super) fn fragmentation_keys(&self, candidates: &[NodeIdx], shape: ShapeKind) -> Vec<SortKey> {
        candidates
            .iter()
            .map(|&n| {
                let (gpus, capacities) = self.node_gpus(n);
                // An amount of memory counts against the node's largest GPU.
                let largest = capacities.iter().copied().max().unwrap_or(0) as f64;
                let kind = shape.kind(largest);
                match increase(&gpus, &kind, &self.kinds) {
                    Some((added, left)) => {
                        ((0, 0, (added / FRAGMENTATION_STEP).round() as i64, i64::from(left), gpus.cpu), n)
                    }
                    None => ((0, 1, 0, 0, 0), n),
                }
            })
            .collect()
    }
}
