//! A replay's usage ledger, per queue of the trace, as the scheduler's counters would have
//! counted it: what `muster report --simulation` reads (docs/reports.md).

use std::collections::BTreeMap;

use super::percentile;
use super::run::Replay;
use super::trace::TraceJob;
use super::usage::{GangUsage, QueueUsage, SimulatedUsage, started_within};

/// The namespace a replay's pods run in.
const NAMESPACE: &str = "default";

/// The ledger of `replay` over `jobs` on `total_gpus` GPUs until `horizon`.
pub fn usage(replay: &Replay, jobs: &[TraceJob], total_gpus: u32, horizon: i64) -> SimulatedUsage {
    let mut waits: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (job, started) in jobs.iter().zip(&replay.started).filter(|(j, _)| j.submit <= horizon) {
        let waits = waits.entry(job.queue.as_str()).or_default();
        if let Some(started) = started {
            waits.push((started - job.submit) as f64);
        }
    }
    let queues = replay.queues.iter().map(|queue| {
        let mut waits = waits.remove(queue.name.as_str()).unwrap_or_default();
        waits.sort_by(f64::total_cmp);
        let at = |q: f64| (!waits.is_empty()).then(|| percentile(&waits, q));
        let evictions = if queue.evictions > 0 {
            BTreeMap::from([("Opportunistic".to_string(), queue.evictions)])
        } else {
            BTreeMap::new()
        };
        QueueUsage {
            queue: queue.name.clone(),
            namespace: NAMESPACE.to_string(),
            gpu_hours: queue.gpu_seconds / 3600.0,
            gpu_memory_gib_hours: queue.memory_byte_seconds / f64::from(1u32 << 30) / 3600.0,
            jobs_started: waits.len(),
            wait_p50_seconds: at(0.5),
            wait_p99_seconds: at(0.99),
            started_within: started_within(&waits),
            evictions,
            in_use: queue.in_use.clone(),
        }
    });
    let mut gangs: Vec<GangUsage> = jobs
        .iter()
        .zip(&replay.gpu_seconds)
        .zip(&replay.started)
        .filter(|((_, seconds), _)| **seconds > 0.0)
        .map(|((job, seconds), started)| GangUsage {
            name: job.id.clone(),
            queue: job.queue.clone(),
            namespace: NAMESPACE.to_string(),
            gpu_hours: seconds / 3600.0,
            wait_seconds: started.map(|s| (s - job.submit) as f64),
        })
        .collect();
    gangs.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours));
    SimulatedUsage {
        seconds: horizon as f64,
        gangs,
        fleet_gpus: f64::from(total_gpus),
        stranded_gpu_hours: replay.stranded / 3600.0,
        queues: queues.collect(),
    }
}
