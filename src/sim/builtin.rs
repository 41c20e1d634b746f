//! The built-in scenarios side by side: Muster beside the per-pod baseline, as a table and
//! as JSON (`muster simulate` with no arguments).

use super::scenarios::{Fleet, FleetShape, Placer, fleet, two_jobs};
use super::table::builtin_table;
use crate::config::{Config, QueueingStrategy};

/// The built-in scenarios' results, as a table and as JSON.
pub struct Builtin {
    pub table: String,
    pub json: serde_json::Value,
}

/// The fleet's columns: the per-pod baseline, then every queueing policy of Muster's.
pub const POLICIES: [Placer; 5] = [
    Placer::PerPodBaseline,
    Placer::Queueing(QueueingStrategy::StrictFifo),
    Placer::Queueing(QueueingStrategy::BestEffortFifo),
    Placer::Queueing(QueueingStrategy::Backfill),
    Placer::Queueing(QueueingStrategy::TimedBackfill),
];

/// The built-in scenarios; with `overloaded`, the overloaded fleet too.
pub fn run_builtin(config: &Config, overloaded: bool) -> Builtin {
    let two = [two_jobs(Placer::Muster, config), two_jobs(Placer::PerPodBaseline, config)];
    let mut shapes = vec![("Mixed fleet", FleetShape::default())];
    if overloaded {
        shapes.push(("Overloaded fleet", FleetShape::overloaded()));
    }
    let runs: Vec<(FleetShape, Placer)> =
        shapes.iter().flat_map(|(_, shape)| POLICIES.iter().map(|&placer| (*shape, placer))).collect();
    let mut results = in_parallel(&runs, |(shape, placer)| fleet(*placer, shape, config)).into_iter();
    let fleets: Vec<Fleet> = shapes
        .into_iter()
        .map(|(label, shape)| Fleet { label, shape, results: results.by_ref().take(POLICIES.len()).collect() })
        .collect();
    let table = builtin_table(&two, &fleets, config.queueing);
    let mut json = serde_json::json!({
        "twoJobs": two,
        "fleet": {"shape": fleets[0].shape, "results": fleets[0].results},
    });
    if let Some(more) = fleets.get(1) {
        json["overloaded"] = serde_json::json!({"shape": more.shape, "results": more.results});
    }
    Builtin { table, json }
}

/// `run` over every item, on as many threads as the machine has cores; results in order.
fn in_parallel<T: Sync, R: Send>(items: &[T], run: impl Fn(&T) -> R + Sync) -> Vec<R> {
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
