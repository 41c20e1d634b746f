//! What a simulator run used, as the scheduler's ledger would have counted it: per queue and
//! namespace GPU-hours, GPU memory, gangs started and their waits, evictions and GPUs in use
//! over time, and per gang its GPU-hours. `muster simulate --trace --output json` writes it
//! for each policy (its `usage`); `muster report --simulation FILE` reads it back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::WAITING_BUCKETS;

/// One policy's run, as the scheduler's ledger would have counted it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulatedUsage {
    /// The run's length, in seconds from the trace's start.
    pub seconds: f64,
    pub fleet_gpus: f64,
    /// GPU-hours held by pods of gangs that had not started (the per-pod baseline's).
    pub stranded_gpu_hours: f64,
    pub queues: Vec<QueueUsage>,
    /// Every gang that used GPUs, the most GPU-hours first.
    #[serde(default)]
    pub gangs: Vec<GangUsage>,
}

/// One queue (and namespace) of a simulator run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueUsage {
    pub queue: String,
    pub namespace: String,
    pub gpu_hours: f64,
    pub gpu_memory_gib_hours: f64,
    pub jobs_started: usize,
    /// Waits of the gangs started, submission to start, in seconds.
    pub wait_p50_seconds: Option<f64>,
    pub wait_p99_seconds: Option<f64>,
    /// Gangs started within each of the waiting histogram's bounds (`muster_queue_gang_waiting_seconds`),
    /// cumulative, then all of them.
    pub started_within: Vec<u64>,
    /// Gangs evicted, by reason.
    pub evictions: BTreeMap<String, usize>,
    /// GPUs in use, averaged over equal spans of the run.
    pub in_use: Vec<f64>,
}

/// Per bound of [`WAITING_BUCKETS`], how many of `waits` (seconds) are within it, then all.
pub fn started_within(waits: &[f64]) -> Vec<u64> {
    let mut counts: Vec<u64> =
        WAITING_BUCKETS.iter().map(|bound| waits.iter().filter(|w| **w <= *bound).count() as u64).collect();
    counts.push(waits.len() as u64);
    counts
}

/// What one gang used, where the source knows gangs (a simulator run; Prometheus' series
/// stop at queue and namespace).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangUsage {
    pub name: String,
    pub queue: String,
    pub namespace: String,
    pub gpu_hours: f64,
    /// From its submission to its (last) start, when it started.
    pub wait_seconds: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_counted_in_the_histograms_buckets() {
        let counts = started_within(&[0.5, 10.0, 100.0, 100_000.0]);
        assert_eq!(counts.len(), WAITING_BUCKETS.len() + 1);
        // Within 1 s: one; within 15 s: two; within 2 min: three; within a day: three; all: four.
        assert_eq!((counts[0], counts[2], counts[5], counts[12], counts[13]), (1, 2, 3, 3, 4));
    }
}
