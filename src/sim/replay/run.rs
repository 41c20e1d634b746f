//! One replay: a trace's jobs through the engine on one cluster under one placer, event by
//! event (a job submitted, a job ending), with one scheduling cycle after each moment that
//! has events. The snapshot is kept between cycles and changed only where an event changed
//! the cluster, as the scheduler's kept state is, so a cycle costs what the engine does and
//! not the cluster's size.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::cluster::{Cluster, MODEL_LABEL};
use super::progress::Progress;
use super::series::spread;
use super::shared::{fraction_milli, held_milli};
use super::trace::TraceJob;
use crate::config::Config;
use crate::engine::dra::model::DeviceUse;
use crate::engine::model::{
    Ending, Gang, GangKey, GangKind, NodeConstraints, NodeIdx, Parked, PendingPod, PodDevices, PodKey, RunningGang,
    RunningPod, Snapshot,
};
use crate::engine::queues::DEFAULT_QUEUE;
use crate::engine::reason::WaitReason;
use crate::engine::resources::{Demand, ResourceId};
use crate::engine::topology::GangTopology;
use crate::engine::{CycleConfig, CycleMemory, schedule_remembering};
use crate::sim::placer::Placer;

/// How many points the time series have over the horizon.
pub const SERIES_POINTS: usize = 400;

/// What happened to every job, and the cluster's figures integrated over time.
#[derive(Clone, Debug)]
pub struct Replay {
    pub placer: Placer,
    /// Per job: when it started (every worker placed).
    pub started: Vec<Option<i64>>,
    /// Per job: whether it ran to its end within the horizon, and whether its limit
    /// stopped it first.
    pub completed: Vec<bool>,
    pub stopped_at_limit: Vec<bool>,
    /// GPU-seconds: running jobs, pods held by jobs that had not started, free GPUs in
    /// racks too full for the smallest large job while one waited, and all free GPUs then.
    pub busy: f64,
    pub stranded: f64,
    pub fragmented: f64,
    pub free_while_large_waits: f64,
    /// GPUs in use by running jobs, averaged over each of [`SERIES_POINTS`] equal spans.
    pub in_use: Vec<f64>,
    pub cycles: usize,
    /// Gangs evicted (opportunistic backfill), each started again later.
    pub evictions: usize,
    /// Per queue of the trace (its `queue` column), by name: the usage ledger.
    pub queues: Vec<QueueRun>,
    /// Per job: the GPU-seconds its runs held (an evicted run until its eviction), and the
    /// GPUs it holds while it runs (a fraction's share on shared GPUs).
    pub gpu_seconds: Vec<f64>,
    pub job_gpus: Vec<f64>,
}

/// What one queue's jobs held over a replay, as the scheduler's usage ledger counts it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueRun {
    pub name: String,
    /// GPU-seconds held by its running jobs (an evicted run counted until its eviction).
    pub gpu_seconds: f64,
    /// GPUs in use by its running jobs, averaged over each of [`SERIES_POINTS`] spans.
    pub in_use: Vec<f64>,
    pub evictions: usize,
    /// GPU memory held by its jobs' shares of GPUs, in byte-seconds.
    pub memory_byte_seconds: f64,
}

/// A job's pods, as the engine asks for them.
struct Shape {
    demand: Demand,
    /// What a pod takes of its node's own capacity: on shared GPUs, all but the GPUs.
    node_demand: Demand,
    devices: Option<Arc<PodDevices>>,
    constraints: Arc<NodeConstraints>,
    topology: Option<GangTopology>,
    /// Whole GPUs a pod takes from its rack's count (one for a fraction), and the GPUs it
    /// holds in thousandths (its share for a fraction on shared GPUs).
    gpus: i64,
    milli: i64,
}

/// Replays `jobs` (in submission order) on `cluster` until `horizon` seconds.
pub fn replay(
    cluster: &Cluster,
    jobs: &[TraceJob],
    placer: Placer,
    config: &Config,
    horizon: i64,
    progress: Option<(&Progress, usize)>,
) -> Replay {
    let config = placer.config(config);
    let cycle = config.cycle();
    let mut state = State::new(cluster, jobs, placer, horizon);
    let mut memory = CycleMemory::default();
    let mut next = 0;
    loop {
        let submitted = jobs.get(next).map(|j| j.submit);
        let ending = state.endings.peek().map(|Reverse((t, _, _))| *t);
        let Some(now) = [submitted, ending].into_iter().flatten().min().filter(|t| *t <= horizon) else { break };
        state.advance(now);
        let mut freed = false;
        while let Some(&Reverse((at, job, run))) = state.endings.peek() {
            if at != now {
                break;
            }
            state.endings.pop();
            // A run that was evicted ends no more.
            if run == state.runs[job] {
                state.end(job);
                freed = true;
            }
        }
        while jobs.get(next).is_some_and(|j| j.submit == now) {
            state.submit(next);
            next += 1;
        }
        state.cycle(&cycle, &mut memory, freed);
        if let Some((progress, slot)) = progress {
            progress.report(slot, now, state.started_count);
        }
    }
    state.advance(horizon);
    state.finish()
}

struct State<'a> {
    cluster: &'a Cluster,
    jobs: &'a [TraceJob],
    placer: Placer,
    horizon: i64,
    snapshot: Snapshot,
    shapes: Vec<Option<Shape>>,
    /// Gang name to job, for the gangs waiting.
    by_name: HashMap<String, usize>,
    parking: HashMap<GangKey, Parked>,
    /// Per job: workers placed, and their nodes.
    placed: Vec<usize>,
    nodes_of: Vec<Vec<NodeIdx>>,
    /// The job of each of `snapshot.endings`.
    ending_job: Vec<usize>,
    /// When running jobs end: (time, job, which run of the job).
    endings: BinaryHeap<Reverse<(i64, usize, u32)>>,
    /// Per job: how many times it started (an evicted job starts again).
    runs: Vec<u32>,
    /// Opportunistic gangs running, by name, to evict.
    opportunistic: HashMap<String, usize>,
    rack_free: Vec<i64>,
    /// The smallest large job's GPUs (a job larger than a node), capped at a rack.
    large_need: i64,
    large_waiting: usize,
    /// GPUs in thousandths: running, per queue, and held by jobs not started.
    running_gpus: i64,
    /// Per job its queue's index in `replay.queues`, and per queue the GPUs it runs on.
    queue_of: Vec<usize>,
    running_by_queue: Vec<i64>,
    held_gpus: i64,
    /// Per job: the GPUs it holds while it runs, in thousandths; its devices on shared GPUs
    /// and the GPU memory their shares consume; the devices of each GPU request size.
    milli_of: Vec<i64>,
    uses_of: Vec<Vec<DeviceUse>>,
    memory_of: Vec<f64>,
    memory_by_queue: Vec<f64>,
    devices: HashMap<(u32, u32), Arc<PodDevices>>,
    started_count: usize,
    now: i64,
    replay: Replay,
}

impl<'a> State<'a> {
    fn new(cluster: &'a Cluster, jobs: &'a [TraceJob], placer: Placer, horizon: i64) -> State<'a> {
        let mut snapshot = Snapshot {
            resources: cluster.resources.clone(),
            nodes: Arc::new(cluster.nodes.clone()),
            topology: cluster.topology.clone(),
            ..Default::default()
        };
        let mut devices = HashMap::new();
        if let Some(dra) = &cluster.shared {
            snapshot.dra = (**dra).clone();
            for job in jobs {
                let key = (job.gpus, fraction_milli(job));
                if let std::collections::hash_map::Entry::Vacant(entry) = devices.entry(key) {
                    // A fraction the conversion refuses leaves the job without devices: it
                    // waits, and the replay's note says why.
                    if let Ok(asked) = super::shared::worker_devices(job, cluster, &mut snapshot.resources) {
                        entry.insert(Arc::new(asked));
                    }
                }
            }
        }
        let mut rack_free = vec![0i64; cluster.racks];
        for (n, gpus) in cluster.gpus_of.iter().enumerate() {
            rack_free[cluster.rack_of[n] as usize] += i64::from(*gpus);
        }
        let shared = cluster.shared.is_some();
        let milli_of = jobs.iter().map(|j| j.workers as i64 * held_milli(j, shared)).collect();
        let large_need = jobs
            .iter()
            .map(|j| j.total_gpus())
            .filter(|g| *g > cluster.node_gpus)
            .min()
            .map_or(0, |g| g.min(cluster.rack_gpus) as i64);
        let names: std::collections::BTreeSet<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
        let names: Vec<&str> = names.into_iter().collect();
        let queue_of = jobs.iter().map(|j| names.binary_search(&j.queue.as_str()).unwrap_or(0)).collect();
        let queues = names
            .iter()
            .map(|name| QueueRun { name: name.to_string(), in_use: vec![0.0; SERIES_POINTS], ..QueueRun::default() })
            .collect();
        State {
            cluster,
            jobs,
            placer,
            horizon,
            snapshot,
            shapes: (0..jobs.len()).map(|_| None).collect(),
            by_name: HashMap::new(),
            parking: HashMap::new(),
            placed: vec![0; jobs.len()],
            nodes_of: vec![Vec::new(); jobs.len()],
            ending_job: Vec::new(),
            endings: BinaryHeap::new(),
            runs: vec![0; jobs.len()],
            opportunistic: HashMap::new(),
            rack_free,
            large_need,
            large_waiting: 0,
            running_gpus: 0,
            running_by_queue: vec![0; names.len()],
            memory_by_queue: vec![0.0; names.len()],
            queue_of,
            held_gpus: 0,
            milli_of,
            uses_of: vec![Vec::new(); jobs.len()],
            memory_of: vec![0.0; jobs.len()],
            devices,
            started_count: 0,
            now: 0,
            replay: Replay {
                placer,
                started: vec![None; jobs.len()],
                completed: vec![false; jobs.len()],
                stopped_at_limit: vec![false; jobs.len()],
                busy: 0.0,
                stranded: 0.0,
                fragmented: 0.0,
                free_while_large_waits: 0.0,
                in_use: vec![0.0; SERIES_POINTS],
                cycles: 0,
                evictions: 0,
                queues,
                gpu_seconds: vec![0.0; jobs.len()],
                job_gpus: Vec::new(),
            },
        }
    }

    fn is_large(&self, job: usize) -> bool {
        self.jobs[job].total_gpus() > self.cluster.node_gpus
    }

    /// Integrates the cluster's figures from the last moment to `now`.
    fn advance(&mut self, now: i64) {
        let span = (now - self.now) as f64;
        if span <= 0.0 {
            return;
        }
        self.replay.busy += self.running_gpus as f64 / 1000.0 * span;
        self.replay.stranded += self.held_gpus as f64 / 1000.0 * span;
        if self.large_waiting > 0 && self.large_need > 0 {
            let free: i64 = self.rack_free.iter().sum();
            let unusable: i64 = self.rack_free.iter().filter(|f| **f < self.large_need).sum();
            self.replay.fragmented += unusable as f64 * span;
            self.replay.free_while_large_waits += free as f64 * span;
        }
        spread(&mut self.replay.in_use, self.horizon, self.now, now, self.running_gpus as f64 / 1000.0);
        let running = self.running_by_queue.iter().zip(&self.memory_by_queue);
        for (queue, (&milli, &memory)) in self.replay.queues.iter_mut().zip(running) {
            if milli > 0 {
                let gpus = milli as f64 / 1000.0;
                queue.gpu_seconds += gpus * span;
                queue.memory_byte_seconds += memory * span;
                spread(&mut queue.in_use, self.horizon, self.now, now, gpus);
            }
        }
        self.now = now;
    }

    fn shape(&self, job: &TraceJob) -> Shape {
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

    fn submit(&mut self, j: usize) {
        let job = &self.jobs[j];
        let shape = self.shape(job);
        let gang = |kind, name: String, pods: Vec<PendingPod>| Gang {
            key: GangKey { kind, namespace: "default".into(), name },
            min_member: pods.len(),
            bound: 0,
            pods,
            priority: job.priority,
            created: job.submit,
            blocked: None,
            topology: shape.topology,
            queue: DEFAULT_QUEUE.to_string(),
            preemption_delay: None,
            last_evicted: None,
            quota_owner: None,
            preemptible: job.priority < 100,
            parked: Parked::No,
            max_run_seconds: job.limit,
        };
        let pod = |i: usize| PendingPod {
            key: PodKey { namespace: "default".into(), name: format!("{}-{i}", job.id) },
            demand: shape.demand.clone(),
            constraints: shape.constraints.clone(),
            devices: shape.devices.clone(),
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

    fn end(&mut self, j: usize) {
        self.release(j);
        self.shapes[j] = None;
    }

    /// Gives back what job `j`'s pods hold, and books what its run used.
    fn release(&mut self, j: usize) {
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

    /// One cycle at `now`, its placements bound. Gangs that did not fit stay parked, as
    /// the scheduler's unschedulable pool keeps them, until capacity is `freed`.
    fn cycle(&mut self, config: &CycleConfig, memory: &mut CycleMemory, freed: bool) {
        if self.snapshot.gangs.is_empty() {
            return;
        }
        self.snapshot.now = self.now;
        if freed {
            self.unpark();
        }
        for gang in &mut self.snapshot.gangs {
            gang.parked = self.parking.get(&gang.key).copied().unwrap_or_default();
        }
        let outcome = schedule_remembering(&self.snapshot, config, memory);
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
        // Capacity freed by evictions is held for the gang they were made for, as the
        // scheduler keeps it between cycles.
        self.snapshot.reservations = outcome.reservations;
        for eviction in &outcome.evictions {
            if let Some(j) = self.opportunistic.get(&eviction.gang.name).copied() {
                self.evict(j);
            }
        }
        if outcome.placements.is_empty() {
            return;
        }
        let now = self.now;
        for placement in &outcome.placements {
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

    /// Evicts running job `j` whole: its capacity back, the job waiting again (its wait
    /// still counted from its submission), its end no more.
    fn evict(&mut self, j: usize) {
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

    fn start(&mut self, j: usize) {
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
    fn book(&mut self, j: usize, until: i64) {
        if let Some(started) = self.replay.started[j] {
            let seconds = (until.min(self.horizon) - started).max(0) as f64;
            self.replay.gpu_seconds[j] += seconds * self.milli_of[j] as f64 / 1000.0;
        }
    }

    fn finish(mut self) -> Replay {
        // Jobs still running at the horizon.
        for j in 0..self.jobs.len() {
            if !self.nodes_of[j].is_empty() {
                self.book(j, self.horizon);
            }
        }
        self.replay.job_gpus = self.milli_of.iter().map(|m| *m as f64 / 1000.0).collect();
        self.replay
    }
}
