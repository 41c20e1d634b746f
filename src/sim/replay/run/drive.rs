//! The replay as the engine's driver: the clock goes from one moment with events (a job
//! submitted, a job ending) to the next; the source is the snapshot the replay keeps,
//! changed only where an event changed the cluster; the sink binds what was placed and
//! evicts what was evicted.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use super::State;
use crate::engine::dra::model::DeviceUse;
use crate::engine::drive::Driver;
use crate::engine::model::{Ending, RunningGang, RunningPod, Snapshot};
use crate::engine::queues::DEFAULT_QUEUE;
use crate::engine::reason::WaitReason;
use crate::engine::{CycleMemory, CycleOutcome, Placement};

impl Driver for State<'_> {
    /// The next moment with events within the horizon, its endings and submissions done.
    async fn next(&mut self) -> Option<i64> {
        let submitted = self.jobs.get(self.next_job).map(|j| j.submit);
        let ending = self.endings.peek().map(|Reverse((t, _, _))| *t);
        let now = [submitted, ending].into_iter().flatten().min().filter(|t| *t <= self.horizon)?;
        self.advance(now);
        self.freed = false;
        while let Some(&Reverse((at, job, run))) = self.endings.peek() {
            if at != now {
                break;
            }
            self.endings.pop();
            // A run that was evicted ends no more.
            if run == self.runs[job] {
                self.end(job);
                self.freed = true;
            }
        }
        while self.jobs.get(self.next_job).is_some_and(|j| j.submit == now) {
            self.submit(self.next_job);
            self.next_job += 1;
        }
        Some(now)
    }

    /// The kept snapshot, when gangs wait. Gangs that did not fit stay parked, as the
    /// scheduler's unschedulable pool keeps them, until capacity is freed.
    fn snapshot(&mut self, _: i64, _: &mut CycleMemory) -> Option<&mut Snapshot> {
        if self.snapshot.gangs.is_empty() {
            self.report_progress();
            return None;
        }
        if self.freed {
            self.unpark();
        }
        for gang in &mut self.snapshot.gangs {
            gang.parked = self.parking.get(&gang.key).copied().unwrap_or_default();
        }
        Some(&mut self.snapshot)
    }

    /// The cycle's placements bound, its evictions made, what waits parked.
    fn decided(&mut self, outcome: CycleOutcome, _: &mut CycleMemory) {
        self.replay.cycles += 1;
        let mut parked = HashMap::with_capacity(outcome.waiting.len());
        for waiting in outcome.waiting {
            let kept = match waiting.reason {
                WaitReason::Unchanged => self.parking.get(&waiting.gang).copied(),
                ref reason => reason.parkable(),
            };
            if let Some(kept) = kept {
                parked.insert(waiting.gang, kept);
            }
        }
        self.parking = parked;
        for eviction in &outcome.evictions {
            if let Some(j) = self.opportunistic.get(&eviction.gang.name).copied() {
                self.evict(j);
            }
        }
        if !outcome.placements.is_empty() {
            self.bind(&outcome.placements);
        }
        self.report_progress();
    }
}

impl State<'_> {
    /// Binds the cycle's placements: their pods' demand on their nodes, their devices in
    /// use, their runtime bounds as endings; a job whose every worker is placed starts.
    fn bind(&mut self, placements: &[Placement]) {
        let now = self.now;
        for placement in placements {
            let j = self.by_name.remove(&placement.gang.name).expect("a placed gang is a waiting job's");
            let job = &self.jobs[j];
            let shape = self.shapes[j].as_ref().expect("a waiting job has its shape");
            let nodes = Arc::make_mut(&mut self.snapshot.nodes);
            for &(_, n) in &placement.pods {
                nodes[n as usize].requested.add(&shape.node_demand, 1);
                self.rack_free[self.cluster.rack_of[n as usize] as usize] -= shape.gpus;
                self.nodes_of[j].push(n);
                // Opportunistic gangs count as leaving whenever they are in the way.
                if let Some(limit) = job.limit.filter(|_| placement.opportunistic.is_none()) {
                    let demand = shape.node_demand.clone();
                    self.snapshot.endings.push(Ending { at: now + limit, node: n, demand });
                    self.ending_job.push(j);
                }
            }
            if placement.opportunistic.is_some() {
                self.snapshot.running.push(RunningGang {
                    key: placement.gang.clone(),
                    queue: DEFAULT_QUEUE.to_string(),
                    priority: job.priority,
                    preemptible: true,
                    min_member: job.workers,
                    pods: placement
                        .pods
                        .iter()
                        .map(|(key, node)| RunningPod {
                            key: key.clone(),
                            node: *node,
                            demand: shape.demand.clone(),
                            started: now,
                            devices: Vec::new(),
                            grace_seconds: 0,
                            gpu_milli: 0,
                        })
                        .collect(),
                    created: job.submit,
                    opportunistic: true,
                });
                self.opportunistic.insert(job.id.clone(), j);
            }
            for device in placement.claims.iter().filter_map(|c| c.allocation.as_ref()).flat_map(|a| &a.devices) {
                let used = DeviceUse { device: device.device, admin_access: false, consumed: device.consumed.clone() };
                if job.gpu_fraction.is_some() {
                    let memory = used.consumed.iter().flatten().filter(|(name, _)| name == "memory");
                    self.memory_of[j] += memory.map(|(_, q)| q.as_f64()).sum::<f64>();
                }
                self.snapshot.dra.in_use.push(used.clone());
                self.uses_of[j].push(used);
            }
            self.held_gpus += shape.milli * placement.pods.len() as i64;
            self.placed[j] += placement.pods.len();
            if self.placed[j] == job.workers {
                self.start(j);
            }
        }
        let by_name = &self.by_name;
        self.snapshot.gangs.retain(|g| by_name.contains_key(&g.key.name));
    }

    fn report_progress(&self) {
        if let Some((progress, slot)) = self.progress {
            progress.report(slot, self.now, self.started_count);
        }
    }

    /// After capacity was freed: gangs that could now fit leave the unschedulable pool.
    /// A gang stays parked only when it provably cannot fit: fewer slots for its pods' GPUs
    /// on the nodes (in one rack, when it requires one) than it needs, counting GPUs alone.
    fn unpark(&mut self) {
        if self.parking.is_empty() {
            return;
        }
        // Shared GPUs are counted by their devices, which this proof does not read.
        if self.cluster.shared.is_some() {
            self.parking.clear();
            return;
        }
        let (cluster, nodes) = (self.cluster, &self.snapshot.nodes);
        // Per GPUs a pod asks: slots in the cluster, and in the best rack.
        let mut slots: HashMap<i64, (i64, i64)> = HashMap::new();
        let mut slots_for = |gpus: i64| -> (i64, i64) {
            *slots.entry(gpus).or_insert_with(|| {
                let mut per_rack = vec![0i64; cluster.racks];
                for (n, node) in nodes.iter().enumerate() {
                    let free = node.allocatable.get(cluster.gpu) - node.requested.get(cluster.gpu);
                    per_rack[cluster.rack_of[n] as usize] += if gpus > 0 { free.max(0) / gpus } else { i64::MAX / 4 };
                }
                (per_rack.iter().sum(), per_rack.iter().copied().max().unwrap_or(0))
            })
        };
        let (by_name, shapes, jobs, gangs) = (&self.by_name, &self.shapes, self.jobs, self.placer.gangs());
        self.parking.retain(|key, _| {
            let Some(&j) = by_name.get(&key.name) else { return false };
            let Some(shape) = shapes[j].as_ref() else { return false };
            let (total, best_rack) = slots_for(shape.gpus);
            let pods = if gangs { jobs[j].workers as i64 } else { 1 };
            let rack = shape.topology.is_some_and(|t| t.required.is_some());
            (if rack { best_rack } else { total }) < pods
        });
    }
}
