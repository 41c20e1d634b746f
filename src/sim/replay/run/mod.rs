//! One replay: a trace's jobs through the engine on one cluster under one placer, event by
//! event (a job submitted, a job ending), with one scheduling cycle after each moment that
//! has events. The snapshot is kept between cycles and changed only where an event changed
//! the cluster, as the scheduler's kept state is, so a cycle costs what the engine does and
//! not the cluster's size.

mod drive;
mod jobs;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::cluster::Cluster;
use super::progress::Progress;
use super::series::spread;
use super::shared::{fraction_milli, held_milli};
use super::trace::TraceJob;
use crate::config::Config;
use crate::engine::dra::model::DeviceUse;
use crate::engine::drive::Engine;
use crate::engine::model::{GangKey, NodeIdx, Parked, PodDevices, Snapshot};
use crate::sim::placer::Placer;
use jobs::Shape;

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
    let mut state = State::new(cluster, jobs, placer, horizon, progress);
    Engine::new(config.cycle()).run_to_end(&mut state);
    state.advance(horizon);
    state.finish()
}

/// The replay's state, and the engine's driver ([`drive`]): its clock goes from event to
/// event, its source is the snapshot it keeps, its sink binds what was placed.
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
    /// The next job to submit, and whether the moment's endings freed capacity.
    next_job: usize,
    freed: bool,
    progress: Option<(&'a Progress, usize)>,
}

impl<'a> State<'a> {
    fn new(
        cluster: &'a Cluster,
        jobs: &'a [TraceJob],
        placer: Placer,
        horizon: i64,
        progress: Option<(&'a Progress, usize)>,
    ) -> State<'a> {
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
            next_job: 0,
            freed: false,
            progress,
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
