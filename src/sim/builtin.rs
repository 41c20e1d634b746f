//! The built-in scenarios side by side: Muster beside the per-pod baseline, as a table and
//! as JSON (`muster simulate` with no arguments).

use super::scenarios::{FleetShape, Placer, fleet, two_jobs};
use super::table::builtin_table;
use crate::config::Config;

/// The built-in scenarios' results, as a table and as JSON.
pub struct Builtin {
    pub table: String,
    pub json: serde_json::Value,
}

pub fn run_builtin(config: &Config) -> Builtin {
    let two = [two_jobs(Placer::Muster, config), two_jobs(Placer::PerPodBaseline, config)];
    let shape = FleetShape::default();
    let fleets = [
        fleet(Placer::Muster, &shape, config),
        fleet(Placer::MusterFirstFit, &shape, config),
        fleet(Placer::PerPodBaseline, &shape, config),
    ];
    let table = builtin_table(&two, &shape, &fleets);
    let json = serde_json::json!({"twoJobs": two, "fleet": {"shape": shape, "results": fleets}});
    Builtin { table, json }
}
