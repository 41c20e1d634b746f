//! The built-in scenarios side by side: Muster beside the per-pod baseline, as a table and
//! as JSON (`muster simulate` with no arguments).

use super::placer::{POLICIES, Placer};
use super::scenarios::{Fleet, FleetShape, fleet_compare, two_jobs};
use super::table::builtin_table;
use crate::config::Config;

/// The built-in scenarios' results, as a table and as JSON.
pub struct Builtin {
    pub table: String,
    pub json: serde_json::Value,
}

/// The built-in scenarios; with `overloaded`, the overloaded fleet too.
pub fn run_builtin(config: &Config, overloaded: bool) -> Builtin {
    let two = [two_jobs(Placer::Muster, config), two_jobs(Placer::PerPodBaseline, config)];
    let mut shapes = vec![("Mixed fleet", FleetShape::default())];
    if overloaded {
        shapes.push(("Overloaded fleet", FleetShape::overloaded()));
    }
    let fleets: Vec<Fleet> = shapes
        .into_iter()
        .map(|(label, shape)| Fleet { label, shape, comparison: fleet_compare(&shape, config, &POLICIES) })
        .collect();
    let table = builtin_table(&two, &fleets, config.queueing);
    let mut json = serde_json::json!({
        "twoJobs": two,
        "fleet": {"shape": fleets[0].shape, "results": fleets[0].comparison.outcomes},
    });
    if let Some(more) = fleets.get(1) {
        json["overloaded"] = serde_json::json!({"shape": more.shape, "results": more.comparison.outcomes});
    }
    Builtin { table, json }
}
