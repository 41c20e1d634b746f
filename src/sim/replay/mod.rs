//! Trace replay: jobs from a trace (or the built-in fleet's generator) through the engine
//! on a generated or given cluster, under every policy side by side, with the figures a
//! person compares them by (`muster simulate --trace`).
//!
//! ```text
//! trace.csv ──► trace::read ──► [TraceJob] ─┐
//! --nodes/--racks or --cluster ──► Cluster ─┼─► run::replay (one per policy, in parallel)
//!                                           │        │ Replay: starts, integrals, series
//!                                           │        ▼
//!                                           └─► report::outcome ──► table, JSON, html::page
//! ```

pub mod cluster;
pub mod command;
pub mod html;
pub mod ledger;
pub mod progress;
pub mod report;
pub mod run;
pub mod series;
pub mod shared;
pub mod table;
pub mod trace;
pub mod usage;

use serde::Serialize;

use crate::config::Config;
use crate::sim::placer::Placer;
use cluster::Cluster;
use progress::Progress;
use report::Outcome;
use trace::TraceJob;

/// Every policy's replay of one trace on one cluster.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub cluster: String,
    pub total_gpus: u32,
    pub node_gpus: u32,
    pub jobs: usize,
    pub horizon_seconds: i64,
    pub outcomes: Vec<Outcome>,
    /// Per policy, GPUs in use by running jobs over the horizon (for the plots).
    #[serde(skip)]
    pub in_use: Vec<Vec<f64>>,
    /// Per policy, per job: its wait in minutes, if it started (for the plots).
    #[serde(skip)]
    pub waits: Vec<Vec<Option<f64>>>,
    /// What a person should know about how the trace was read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

const TIMED: Placer = Placer::Queueing(crate::config::QueueingPolicy::TimedBackfill);

/// The default horizon: the last submission plus the longest runtime.
pub fn default_horizon(jobs: &[TraceJob]) -> i64 {
    jobs.iter().map(|j| j.submit).max().unwrap_or(0) + jobs.iter().map(|j| j.runtime).max().unwrap_or(0)
}

/// Replays `jobs` under each of `placers`, on as many threads as the machine has cores,
/// with a progress line on stderr when `show_progress` and stderr is a terminal.
pub fn compare(
    cluster: &Cluster,
    jobs: &[TraceJob],
    config: &Config,
    horizon: i64,
    placers: &[Placer],
    show_progress: bool,
) -> Comparison {
    let progress = Progress::new(placers.len(), horizon, jobs.len());
    // The costliest replays first, so that the threads end together: the per-pod
    // baseline (a gang per pod) and timed backfill (trials for the shadow time).
    let mut slots: Vec<(usize, Placer)> = placers.iter().copied().enumerate().collect();
    slots.sort_by_key(|&(slot, placer)| (!matches!(placer, Placer::PerPodBaseline | TIMED), slot));
    let run = || {
        in_parallel(&slots, |&(slot, placer)| {
            let progress = show_progress.then_some((&progress, slot));
            (slot, run::replay(cluster, jobs, placer, config, horizon, progress))
        })
    };
    let mut replays = if show_progress { progress.around(run) } else { run() };
    replays.sort_by_key(|(slot, _)| *slot);
    let replays: Vec<run::Replay> = replays.into_iter().map(|(_, replay)| replay).collect();
    let mut notes = Vec::new();
    let fractions = jobs.iter().filter(|j| j.gpu_fraction.is_some()).count();
    if fractions > 0 && cluster.shared.is_some() {
        notes.push(format!(
            "{fractions} job(s) ask for a fraction of a GPU per worker: the GPUs are shared by memory (DRA devices that allow several allocations), whole GPUs asked through nvidia.com/gpu"
        ));
    } else if fractions > 0 {
        notes.push(format!(
            "{fractions} job(s) ask for a fraction of a GPU per worker; each such worker holds one whole GPU in this replay"
        ));
    }
    let models = jobs.iter().filter(|j| j.gpu_model.is_some()).count();
    if models > 0 && cluster.models.is_empty() {
        notes.push(format!(
            "{models} job(s) name a GPU model, and the cluster's nodes carry no nvidia.com/gpu.product label: models are not honoured"
        ));
    }
    Comparison {
        cluster: cluster.description.clone(),
        total_gpus: cluster.total_gpus,
        node_gpus: cluster.node_gpus,
        jobs: jobs.len(),
        horizon_seconds: horizon,
        outcomes: replays
            .iter()
            .map(|r| report::outcome(r, jobs, cluster.total_gpus, cluster.node_gpus, horizon))
            .collect(),
        waits: replays
            .iter()
            .map(|r| jobs.iter().zip(&r.started).map(|(j, s)| s.map(|s| (s - j.submit) as f64 / 60.0)).collect())
            .collect(),
        in_use: replays.into_iter().map(|r| r.in_use).collect(),
        notes,
    }
}

/// The `p` quantile of `sorted` values, by nearest rank; 0 when there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() { 0.0 } else { sorted[((sorted.len() - 1) as f64 * p).round() as usize] }
}

/// `run` over every item, on as many threads as the machine has cores; results in order.
pub fn in_parallel<T: Sync, R: Send>(items: &[T], run: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len()).max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, run(item)));
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a simulation thread panicked")).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}
