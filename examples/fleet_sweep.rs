//! Best fit against first fit over several fleet workloads (loads and seeds), beside the
//! built-in fleet of `muster simulate`: `cargo run --release --example fleet_sweep`.

use muster::config::Config;
use muster::sim::placer::Placer;
use muster::sim::replay::report::Outcome as FleetOutcome;
use muster::sim::scenarios::{FleetShape, fleet};

fn cells(o: &FleetOutcome) -> String {
    format!(
        "large p50 {:>5.0} p99 {:>5.0} min, small p50 {:>4.0} min, fragmented {:>3.0}%",
        o.large_wait_p50_minutes,
        o.large_wait_p99_minutes,
        o.small_wait_p50_minutes,
        100.0 * o.fragmented_share
    )
}

fn main() {
    let config = Config::default();
    println!("64 nodes x 8 GPUs, racks of 8 nodes; jobs arriving over 48 h, 96 h horizon");
    for (jobs, seed) in [(900, 7), (900, 11), (700, 7), (700, 13), (600, 5), (1000, 3)] {
        let shape = FleetShape { nodes: 64, jobs, arrival_hours: 48, horizon_hours: 96, seed, ..FleetShape::default() };
        let best = fleet(Placer::Muster, &shape, &config);
        let first = fleet(Placer::MusterFirstFit, &shape, &config);
        println!("{jobs:>5} jobs, seed {seed:>2}  best fit:  {}", cells(&best));
        println!("                     first fit: {}", cells(&first));
    }
}
