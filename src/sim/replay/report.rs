//! The figures a person compares policies by, from one replay.

use std::collections::BTreeMap;

use serde::Serialize;

use super::percentile;
use super::run::Replay;
use super::trace::TraceJob;
use super::usage::SimulatedUsage;
use crate::sim::placer::Placer;

/// Waits of one group of jobs (a size class or a queue).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupFigures {
    pub label: String,
    pub jobs: usize,
    pub started: usize,
    /// GPU-hours its jobs ran within the horizon.
    pub gpu_hours: f64,
    pub wait_p50_minutes: f64,
    pub wait_p99_minutes: f64,
    pub mean_bounded_slowdown: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// As `--policy` names it: `baseline`, `StrictFIFO`, `BestEffortFIFO`, `Backfill`,
    /// `TimedBackfill`.
    pub policy: String,
    pub placer: Placer,
    /// Jobs submitted within the horizon.
    pub jobs: usize,
    pub started: usize,
    pub never_started: usize,
    /// Jobs stopped by their declared limit before their runtime ended.
    pub stopped_at_limit: usize,
    /// Share of the GPU-hours over the horizon spent by running jobs.
    pub gpu_utilisation: f64,
    /// GPU-hours held by pods of jobs that could not start yet.
    pub stranded_gpu_hours: f64,
    /// Minutes from submission to start, over the jobs that started.
    pub wait_p50_minutes: f64,
    pub wait_p99_minutes: f64,
    /// Jobs that fit on one node.
    pub small_wait_p50_minutes: f64,
    /// Jobs larger than one node.
    pub large_wait_p50_minutes: f64,
    pub large_wait_p99_minutes: f64,
    pub large_never_started: usize,
    /// GPU-hours free but unusable by a large gang: free GPUs in racks with fewer free than
    /// the smallest large job needs, while a large job waits.
    pub fragmented_gpu_hours: f64,
    /// The same, as a share of the free GPU-hours while a large job waits.
    pub fragmented_share: f64,
    /// GPU-hours of the jobs that ran to their end within the horizon.
    pub completed_gpu_hours: f64,
    /// Mean over every job submitted of (wait + run) / max(run, 10 min), at least 1; a job
    /// that never started counts as waiting until the horizon (a lower bound).
    pub mean_bounded_slowdown: f64,
    /// By job size in GPUs.
    pub sizes: Vec<GroupFigures>,
    /// By queue or team, when the trace names more than one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<GroupFigures>,
    /// Times a running gang was evicted (opportunistic backfill) and started again later.
    pub evictions: usize,
    /// Scheduling cycles run.
    pub cycles: usize,
    /// The usage ledger, per queue: what `muster report --simulation` reads.
    pub usage: SimulatedUsage,
}

/// Size classes by GPUs, given the GPUs of the largest node: one GPU or less, the rest of
/// one node, up to four nodes, more.
pub fn size_class(gpus: u32, node_gpus: u32) -> (usize, String) {
    let node = node_gpus.max(1);
    if gpus <= 1 {
        (0, "1 GPU or less".into())
    } else if gpus <= node {
        (1, format!("2-{node} GPUs"))
    } else if gpus <= 4 * node {
        (2, format!("{}-{} GPUs", node + 1, 4 * node))
    } else {
        (3, format!("over {} GPUs", 4 * node))
    }
}

/// Accumulates one group's jobs.
#[derive(Default)]
struct Group {
    jobs: usize,
    waits: Vec<f64>,
    gpu_seconds: f64,
    slowdown: f64,
}

impl Group {
    fn figures(mut self, label: String) -> GroupFigures {
        self.waits.sort_by(f64::total_cmp);
        GroupFigures {
            label,
            jobs: self.jobs,
            started: self.waits.len(),
            gpu_hours: self.gpu_seconds / 3600.0,
            wait_p50_minutes: percentile(&self.waits, 0.5),
            wait_p99_minutes: percentile(&self.waits, 0.99),
            mean_bounded_slowdown: self.slowdown / self.jobs.max(1) as f64,
        }
    }
}

/// The figures of `replay` over `jobs` on a cluster of `total_gpus` GPUs, the largest node
/// holding `node_gpus`.
pub fn outcome(replay: &Replay, jobs: &[TraceJob], total_gpus: u32, node_gpus: u32, horizon: i64) -> Outcome {
    let (mut all, mut small, mut large) = (Group::default(), Group::default(), Group::default());
    let mut sizes: BTreeMap<usize, (String, Group)> = BTreeMap::new();
    let mut queues: BTreeMap<&str, Group> = BTreeMap::new();
    let mut completed = 0.0;
    for (j, job) in jobs.iter().enumerate().filter(|(_, job)| job.submit <= horizon) {
        let started = replay.started[j];
        let gpus = job.total_gpus();
        let run = job.limit.map_or(job.runtime, |l| l.min(job.runtime));
        let wait = (started.unwrap_or(horizon) - job.submit) as f64;
        let slowdown = ((wait + run as f64) / (run.max(600) as f64)).max(1.0);
        let held = replay.job_gpus.get(j).copied().unwrap_or(f64::from(gpus));
        let ran = started.map_or(0.0, |s| (horizon.min(s + run) - s).max(0) as f64 * held);
        if replay.completed[j] {
            completed += held * job.runtime as f64;
        }
        let (class, label) = size_class(gpus, node_gpus);
        let size = &mut sizes.entry(class).or_insert_with(|| (label, Group::default())).1;
        let queue = queues.entry(job.queue.as_str()).or_default();
        let by_size = if gpus <= node_gpus { &mut small } else { &mut large };
        for group in [&mut all, by_size, size, queue] {
            group.jobs += 1;
            group.slowdown += slowdown;
            group.gpu_seconds += ran;
            if started.is_some() {
                group.waits.push(wait / 60.0);
            }
        }
    }
    let stopped_at_limit = replay.stopped_at_limit.iter().zip(&replay.started).filter(|(s, t)| **s && t.is_some());
    let (all, small, large) = (all.figures("all".into()), small.figures(String::new()), large.figures(String::new()));
    Outcome {
        policy: replay.placer.name(),
        placer: replay.placer,
        jobs: all.jobs,
        started: all.started,
        never_started: all.jobs - all.started,
        stopped_at_limit: stopped_at_limit.count(),
        gpu_utilisation: replay.busy / (f64::from(total_gpus.max(1)) * horizon.max(1) as f64),
        stranded_gpu_hours: replay.stranded / 3600.0,
        wait_p50_minutes: all.wait_p50_minutes,
        wait_p99_minutes: all.wait_p99_minutes,
        small_wait_p50_minutes: small.wait_p50_minutes,
        large_wait_p50_minutes: large.wait_p50_minutes,
        large_wait_p99_minutes: large.wait_p99_minutes,
        large_never_started: large.jobs - large.started,
        fragmented_gpu_hours: replay.fragmented / 3600.0,
        fragmented_share: if replay.free_while_large_waits > 0.0 {
            replay.fragmented / replay.free_while_large_waits
        } else {
            0.0
        },
        completed_gpu_hours: completed / 3600.0,
        mean_bounded_slowdown: all.mean_bounded_slowdown,
        sizes: sizes.into_values().map(|(label, group)| group.figures(label)).collect(),
        queues: if queues.len() > 1 {
            queues.into_iter().map(|(name, group)| group.figures(name.to_string())).collect()
        } else {
            Vec::new()
        },
        evictions: replay.evictions,
        cycles: replay.cycles,
        usage: super::ledger::usage(replay, jobs, total_gpus, horizon),
    }
}
