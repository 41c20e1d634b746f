//! The built-in scenarios, through the library: gangs never strand GPUs, the per-pod
//! baseline does, and the fleet figures are consistent.

use muster::config::Config;
use muster::sim::placer::Placer;
use muster::sim::scenarios::{FleetShape, fleet, fleet_jobs, two_jobs};

#[test]
fn two_jobs_gangs_run_one_whole_then_the_other_and_per_pod_deadlocks() {
    let config = Config::default();
    let muster = two_jobs(Placer::Muster, &config);
    assert_eq!(muster.running, ["job-a"]);
    assert_eq!(muster.placed.get("job-b"), None, "job-b must hold nothing");
    assert_eq!(muster.stranded_gpus, 0);
    assert_eq!(muster.running_after_first_finish, ["job-b"]);

    let baseline = two_jobs(Placer::PerPodBaseline, &config);
    assert!(baseline.running.is_empty());
    assert_eq!(baseline.placed.values().copied().collect::<Vec<_>>(), [4, 4]);
    assert_eq!(baseline.stranded_gpus, 8);
}

#[test]
fn in_the_fleet_gangs_strand_nothing_and_the_baseline_strands_gpu_hours() {
    let shape =
        FleetShape { nodes: 16, jobs: 200, arrival_hours: 24, horizon_hours: 36, seed: 3, ..FleetShape::default() };
    let config = Config::default();
    let muster = fleet(Placer::Muster, &shape, &config);
    let baseline = fleet(Placer::PerPodBaseline, &shape, &config);
    assert_eq!(muster.stranded_gpu_hours, 0.0);
    assert!(baseline.stranded_gpu_hours > 0.0, "{baseline:?}");
    for outcome in [&muster, &baseline] {
        assert_eq!(outcome.jobs, 200);
        assert_eq!(outcome.started + outcome.never_started, outcome.jobs);
        assert!(outcome.gpu_utilisation > 0.0 && outcome.gpu_utilisation <= 1.0, "{outcome:?}");
        assert!(outcome.wait_p50_minutes <= outcome.wait_p99_minutes);
    }
}

#[test]
fn the_fleet_workload_is_deterministic_and_mixed() {
    let shape = FleetShape::default();
    let a = fleet_jobs(&shape);
    let b = fleet_jobs(&shape);
    assert_eq!(
        a.iter().map(|j| (j.arrival, j.gpus())).collect::<Vec<_>>(),
        b.iter().map(|j| (j.arrival, j.gpus())).collect::<Vec<_>>()
    );
    for size in [1, 2, 4, 8, 16, 32, 64] {
        assert!(a.iter().any(|j| j.gpus() == size), "no job of {size} GPUs");
    }
    assert!(a.iter().all(|j| j.gpus_per_pod <= 8));
}
