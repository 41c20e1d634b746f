//! Who places the pods in a simulated run: Muster under some queueing policy, or the
//! per-pod baseline that places pods as kube-scheduler does (queued by priority then
//! creation time, one at a time, each holding what it gets, scored LeastAllocated).

use serde::Serialize;

use crate::config::{Config, QueueingPolicy, ScoringStrategy};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Placer {
    Muster,
    /// Muster with the first domain that fits, rather than the best fit, for comparison.
    MusterFirstFit,
    /// Muster with this queueing policy, whatever the configuration says.
    Queueing(QueueingPolicy),
    PerPodBaseline,
}

/// The columns of a fleet or trace table: the per-pod baseline, then every queueing policy.
pub const POLICIES: [Placer; 5] = [
    Placer::PerPodBaseline,
    Placer::Queueing(QueueingPolicy::StrictFifo),
    Placer::Queueing(QueueingPolicy::BestEffortFifo),
    Placer::Queueing(QueueingPolicy::Backfill),
    Placer::Queueing(QueueingPolicy::TimedBackfill),
];

impl Placer {
    /// The configuration it schedules with, from Muster's.
    pub fn config(self, muster: &Config) -> Config {
        match self {
            Placer::Muster => muster.clone(),
            Placer::MusterFirstFit => Config { topology_fit: crate::config::TopologyFit::FirstFit, ..muster.clone() },
            Placer::Queueing(queueing) => Config { queueing, ..muster.clone() },
            Placer::PerPodBaseline => {
                Config { scoring: ScoringStrategy::Spread, queueing: QueueingPolicy::BestEffortFifo, ..muster.clone() }
            }
        }
    }

    /// Whether it places a job's pods together (a gang) or one by one.
    pub fn gangs(self) -> bool {
        self != Placer::PerPodBaseline
    }

    /// Its name as `--policy` takes it.
    pub fn name(self) -> String {
        match self {
            Placer::PerPodBaseline => "baseline".to_string(),
            Placer::Queueing(q) => queueing_name(q).to_string(),
            Placer::Muster => "Muster".to_string(),
            Placer::MusterFirstFit => "Muster, first fit".to_string(),
        }
    }

    /// Its column title; `default` is the configured policy.
    pub fn title(self, default: QueueingPolicy) -> String {
        match self {
            Placer::PerPodBaseline => "per-pod baseline".to_string(),
            Placer::Queueing(q) if q == default => format!("{} (default)", queueing_name(q)),
            Placer::Queueing(q) => queueing_name(q).to_string(),
            Placer::Muster => "Muster".to_string(),
            Placer::MusterFirstFit => "Muster, first fit".to_string(),
        }
    }
}

/// A column by the name `--policy` takes: `baseline` or a queueing policy's name.
pub fn parse_policy(name: &str) -> Result<Placer, String> {
    if name.eq_ignore_ascii_case("baseline") {
        return Ok(Placer::PerPodBaseline);
    }
    POLICIES
        .iter()
        .copied()
        .find(|p| matches!(p, Placer::Queueing(q) if queueing_name(*q).eq_ignore_ascii_case(name)))
        .ok_or_else(|| {
            format!("--policy {name:?} is not one of baseline, StrictFIFO, BestEffortFIFO, Backfill, TimedBackfill")
        })
}

/// A queueing policy as the configuration spells it.
pub fn queueing_name(queueing: QueueingPolicy) -> &'static str {
    match queueing {
        QueueingPolicy::Backfill => "Backfill",
        QueueingPolicy::StrictFifo => "StrictFIFO",
        QueueingPolicy::BestEffortFifo => "BestEffortFIFO",
        QueueingPolicy::TimedBackfill => "TimedBackfill",
    }
}
