//! The report of a simulator run: the usage its ledger wrote
//! ([`SimulatedUsage`](crate::sim::replay::usage::SimulatedUsage)) read into the same report
//! the Prometheus counters give.

use std::collections::BTreeMap;

use super::{Report, Usage};
use crate::sim::replay::usage::SimulatedUsage;

impl Report {
    /// The report of one simulator run; `source` says which (the trace and the policy).
    pub fn from_simulation(usage: &SimulatedUsage, source: String) -> Report {
        let mut report = Report {
            source,
            wall_clock: false,
            from: 0.0,
            until: usage.seconds,
            fleet_gpus: usage.fleet_gpus,
            stranded_gpu_hours: usage.stranded_gpu_hours,
            gangs: usage.gangs.clone(),
            ..Report::default()
        };
        report.gangs.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours));
        for queue in &usage.queues {
            let key = (queue.queue.clone(), queue.namespace.clone());
            let unknown = f64::NAN;
            report.usage.insert(
                key,
                Usage {
                    gpu_hours: queue.gpu_hours,
                    gpu_memory_gib_hours: queue.gpu_memory_gib_hours,
                    jobs_started: queue.jobs_started as f64,
                    wait_p50: queue.wait_p50_seconds.unwrap_or(unknown),
                    wait_p99: queue.wait_p99_seconds.unwrap_or(unknown),
                },
            );
            let counts = report.wait_buckets.entry(queue.queue.clone()).or_default();
            counts.resize(queue.started_within.len().max(counts.len()), 0.0);
            for (sum, count) in counts.iter_mut().zip(&queue.started_within) {
                *sum += *count as f64;
            }
            for (reason, count) in &queue.evictions {
                *report.evictions.entry((queue.queue.clone(), queue.namespace.clone(), reason.clone())).or_default() +=
                    *count as f64;
            }
            let span = usage.seconds / queue.in_use.len().max(1) as f64;
            let points = queue.in_use.iter().enumerate().map(|(i, gpus)| ((i as f64 + 0.5) * span, *gpus));
            let series = report.in_use.entry(queue.queue.clone()).or_default();
            if series.is_empty() {
                series.extend(points);
            } else {
                for (point, (_, gpus)) in series.iter_mut().zip(points) {
                    point.1 += gpus;
                }
            }
        }
        // A queue's waits over its namespaces: exact where it has one namespace.
        let mut namespaces: BTreeMap<&str, usize> = BTreeMap::new();
        for (queue, _) in report.usage.keys() {
            *namespaces.entry(queue.as_str()).or_default() += 1;
        }
        let mut waits = BTreeMap::new();
        for ((queue, _), usage) in &report.usage {
            let one = namespaces[queue.as_str()] == 1;
            let counts = &report.wait_buckets[queue];
            let (p50, p99) = if one {
                (usage.wait_p50, usage.wait_p99)
            } else {
                (super::quantile(counts, 0.5), super::quantile(counts, 0.99))
            };
            waits.insert(queue.clone(), (p50, p99));
        }
        report.waits = waits;
        report
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sim::replay::usage::{GangUsage, QueueUsage, started_within};

    #[test]
    fn a_simulated_run_reads_as_the_report_of_its_queues() {
        let queue = |name: &str, gpus: f64| QueueUsage {
            queue: name.into(),
            namespace: "default".into(),
            gpu_hours: gpus,
            jobs_started: 2,
            wait_p50_seconds: Some(30.0),
            wait_p99_seconds: Some(600.0),
            started_within: started_within(&[30.0, 600.0]),
            evictions: BTreeMap::from([("Opportunistic".to_string(), 1)]),
            in_use: vec![1.0, 2.0],
            ..QueueUsage::default()
        };
        let usage = SimulatedUsage {
            seconds: 7200.0,
            fleet_gpus: 8.0,
            stranded_gpu_hours: 0.0,
            queues: vec![queue("ml", 3.0), queue("web", 1.0)],
            gangs: vec![
                GangUsage { name: "small".into(), queue: "web".into(), gpu_hours: 1.0, ..GangUsage::default() },
                GangUsage {
                    name: "big".into(),
                    queue: "ml".into(),
                    gpu_hours: 3.0,
                    wait_seconds: Some(90.0),
                    ..GangUsage::default()
                },
            ],
        };
        let report = Report::from_simulation(&usage, "trace.csv, Backfill".into());
        assert_eq!(report.hours(), 2.0);
        assert_eq!(report.per_queue()["ml"], 3.0);
        assert_eq!(report.share_of_fleet(4.0), Some(0.25));
        assert_eq!(report.waits["web"], (30.0, 600.0));
        assert_eq!(report.evictions_of("ml", "default"), "Opportunistic=1");
        assert_eq!(report.in_use["ml"], vec![(1800.0, 1.0), (5400.0, 2.0)]);
        let table = report.table();
        assert!(table.contains("trace.csv, Backfill") && table.contains("ml") && table.contains("30s"), "{table}");
        // Gangs, the largest first.
        assert_eq!(report.gang_rows()[0][..4], ["big", "ml", "", "3.00"]);
        assert!(table.contains("the 2 largest of 2 gangs:"), "{table}");
    }
}
