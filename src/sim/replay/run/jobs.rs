//! A trace's jobs as the engine asks for them, and what happens to a job over its life:
//! submitted (its pods pending as one gang, or one gang a pod under the per-pod
//! baseline), started when every worker is placed, ended or evicted (what it held given
//! back, its GPU-seconds booked).

use std::cmp::Reverse;
use std::sync::Arc;

use super::super::cluster::MODEL_LABEL;
use super::super::shared::{fraction_milli, held_milli};
use super::super::trace::TraceJob;
use super::State;
use crate::convert::rows;
use crate::engine::model::{Gang, GangKey, GangKind, NodeConstraints, PendingPod, PodDevices, PodKey};
use crate::engine::resources::{Demand, ResourceId};
use crate::engine::topology::GangTopology;

/// A job's pods, as the engine asks for them.
pub(super) struct Shape {
    pub(super) demand: Demand,
    /// What a pod takes of its node's own capacity: on shared GPUs, all but the GPUs.
    pub(super) node_demand: Demand,
    pub(super) devices: Option<Arc<PodDevices>>,
    pub(super) constraints: Arc<NodeConstraints>,
    pub(super) topology: Option<GangTopology>,
    /// Whole GPUs a pod takes from its rack's count (one for a fraction), and the GPUs it
    /// holds in thousandths (its share for a fraction on shared GPUs).
    pub(super) gpus: i64,
    pub(super) milli: i64,
}

impl State<'_> {
    pub(super) fn shape(&self, job: &TraceJob) -> Shape {
        let cluster = self.cluster;
        let mut gpus = job.gpus_per_worker() as i64;
        let mut entries = vec![(ResourceId::PODS, 1)];
        entries.extend([(cluster.cpu, job.cpu_milli), (cluster.memory, job.memory)].into_iter().filter(|e| e.1 > 0));
        let node_demand = Demand::new(entries.clone());
        let shared = cluster.shared.is_some();
        let devices = if shared { self.devices.get(&(job.gpus, fraction_milli(job))).cloned() } else { None };
        // On shared GPUs a fraction asks only through its devices, and takes no whole GPU from
        // its rack's count (without devices it asks for GPUs no node lists: it waits).
        if shared && job.gpu_fraction.is_some() && devices.is_some() {
            gpus = 0;
        } else {
            entries.push((cluster.gpu, gpus));
        }
        let demand = Demand::new(entries);
        let node_demand = if shared { node_demand } else { demand.clone() };
        let mut constraints = NodeConstraints::default();
        if let Some(model) = job.gpu_model.as_ref().filter(|_| !cluster.models.is_empty()) {
            constraints.node_selector.push((MODEL_LABEL.to_string(), model.clone()));
        }
        // Jobs larger than a node want one rack, and need it when a rack can hold them.
        let total = job.total_gpus();
        let topology = cluster.rack_level.and_then(|rack| match (total > cluster.node_gpus, job.workers > 1) {
            (true, _) if total <= cluster.rack_gpus => Some(GangTopology { required: Some(rack), preferred: None }),
            (_, true) => Some(GangTopology { required: None, preferred: Some(rack) }),
            _ => None,
        });
        let milli = held_milli(job, shared);
        Shape { demand, node_demand, devices, constraints: Arc::new(constraints), topology, gpus, milli }
    }

    pub(super) fn submit(&mut self, j: usize) {
        let job = &self.jobs[j];
        let shape = self.shape(job);
        let gang = |kind, name: String, pods: Vec<PendingPod>| Gang {
            topology: shape.topology,
            preemptible: job.priority < 100,
            max_run_seconds: job.limit,
            ..rows::gang(GangKey { kind, namespace: "default".into(), name }, pods, job.priority, job.submit)
        };
        let pod = |i: usize| PendingPod {
            key: PodKey { namespace: "default".into(), name: format!("{}-{i}", job.id) },
            demand: shape.demand.clone(),
            constraints: shape.constraints.clone(),
            devices: shape.devices.clone(),
            labels: Default::default(),
            rules: None,
        };
        if self.placer.gangs() {
            let kind = if job.workers == 1 { GangKind::Single } else { GangKind::Muster };
            self.snapshot.gangs.push(gang(kind, job.id.clone(), (0..job.workers).map(pod).collect()));
            self.by_name.insert(job.id.clone(), j);
        } else {
            for i in 0..job.workers {
                let single = gang(GangKind::Single, format!("{}-{i}", job.id), vec![pod(i)]);
                self.by_name.insert(single.key.name.clone(), j);
                self.snapshot.gangs.push(Gang { topology: None, ..single });
            }
        }
        if self.is_large(j) {
            self.large_waiting += 1;
        }
        self.shapes[j] = Some(shape);
    }

    pub(super) fn end(&mut self, j: usize) {
        self.release(j);
        self.shapes[j] = None;
    }

    /// Gives back what job `j`'s pods hold, and books what its run used.
    pub(super) fn release(&mut self, j: usize) {
        self.book(j, self.now);
        let shape = self.shapes[j].as_ref().expect("a placed job has its shape");
        if self.opportunistic.remove(&self.jobs[j].id).is_some() {
            let id = &self.jobs[j].id;
            self.snapshot.running.retain(|r| &r.key.name != id);
        }
        let nodes = Arc::make_mut(&mut self.snapshot.nodes);
        for &n in &self.nodes_of[j] {
            nodes[n as usize].requested.sub(&shape.node_demand, 1);
            self.rack_free[self.cluster.rack_of[n as usize] as usize] += shape.gpus;
        }
        self.nodes_of[j] = Vec::new();
        self.placed[j] = 0;
        self.running_gpus -= self.milli_of[j];
        self.running_by_queue[self.queue_of[j]] -= self.milli_of[j];
        self.memory_by_queue[self.queue_of[j]] -= self.memory_of[j];
        self.memory_of[j] = 0.0;
        for used in std::mem::take(&mut self.uses_of[j]) {
            let in_use = &mut self.snapshot.dra.in_use;
            if let Some(i) = in_use.iter().position(|u| *u == used) {
                in_use.swap_remove(i);
            }
        }
        if self.jobs[j].limit.is_some() {
            let mut i = 0;
            while i < self.ending_job.len() {
                if self.ending_job[i] == j {
                    self.ending_job.swap_remove(i);
                    self.snapshot.endings.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
    }

    /// Evicts running job `j` whole: its capacity back, the job waiting again (its wait
    /// still counted from its submission), its end no more.
    pub(super) fn evict(&mut self, j: usize) {
        self.release(j);
        self.runs[j] += 1;
        self.replay.evictions += 1;
        self.replay.queues[self.queue_of[j]].evictions += 1;
        self.replay.started[j] = None;
        self.replay.completed[j] = false;
        self.replay.stopped_at_limit[j] = false;
        self.started_count -= 1;
        self.submit(j);
    }

    pub(super) fn start(&mut self, j: usize) {
        let job = &self.jobs[j];
        let milli = self.milli_of[j];
        self.held_gpus -= milli;
        self.running_gpus += milli;
        self.running_by_queue[self.queue_of[j]] += milli;
        self.memory_by_queue[self.queue_of[j]] += self.memory_of[j];
        self.started_count += 1;
        if self.is_large(j) {
            self.large_waiting -= 1;
        }
        self.replay.started[j] = Some(self.now);
        let run = job.limit.map_or(job.runtime, |limit| job.runtime.min(limit));
        let end = self.now + run;
        self.replay.stopped_at_limit[j] = run < job.runtime;
        self.replay.completed[j] = run == job.runtime && end <= self.horizon;
        self.runs[j] += 1;
        self.endings.push(Reverse((end, j, self.runs[j])));
    }

    /// Adds job `j`'s running time until `until` to its GPU-seconds.
    pub(super) fn book(&mut self, j: usize, until: i64) {
        if let Some(started) = self.replay.started[j] {
            let seconds = (until.min(self.horizon) - started).max(0) as f64;
            self.replay.gpu_seconds[j] += seconds * self.milli_of[j] as f64 / 1000.0;
        }
    }
}
