//! The report of a period from the scheduler's counters in Prometheus: GPU-hours from the
//! ledger's raw samples, waits from the waiting histogram's buckets, GPUs in use over time
//! and the evictions, each read with queries that stay small over a week.

use std::collections::BTreeMap;

use super::prometheus::{Prometheus, Series};
use super::{Report, STARTED_WITHIN, increase, quantile};
use crate::metrics::WAITING_BUCKETS;

/// How many points a series read at a coarser step (the waits' buckets, the evictions)
/// has over the period, and how many spans the GPUs in use are averaged over.
const POINTS: u64 = 240;

impl Report {
    /// The report of the `since` seconds before `until`, from Prometheus.
    pub async fn from_prometheus(prometheus: &Prometheus, since: u64, until: f64) -> Result<Report, String> {
        let start = until - since as f64;
        let range = format!("[{since}s]");
        let mut report = Report {
            source: format!("Prometheus at {}", prometheus.address()),
            wall_clock: true,
            from: until,
            until,
            ..Report::default()
        };
        let mut gpu_seconds = Vec::new();
        for (metric, memory) in [("muster_gpu_seconds_total", false), ("muster_gpu_memory_byte_seconds_total", true)] {
            for series in prometheus.samples(&format!("{metric}{range}"), until).await? {
                report.from = report.from.min(series.samples.first().map_or(until, |s| s.0));
                let key = (series.label("queue").to_string(), series.label("namespace").to_string());
                let used = increase(&series.samples, start, STARTED_WITHIN) / 3600.0;
                let entry = report.usage.entry(key).or_default();
                if memory {
                    entry.gpu_memory_gib_hours += used / f64::from(1u32 << 30);
                } else {
                    entry.gpu_hours += used;
                    gpu_seconds.push(series);
                }
            }
        }
        report.from = report.from.max(start);
        for series in &gpu_seconds {
            report.add_in_use(series.label("queue"), &series.samples);
        }
        let mean = |metric: &str| format!("sum(avg_over_time({metric}{range}))");
        let one = |series: Vec<Series>| series.first().and_then(|s| s.samples.first()).map_or(0.0, |s| s.1);
        let hours = report.hours();
        report.fleet_gpus = one(prometheus.values(&mean("muster_node_gpus"), until).await?);
        report.stranded_gpu_hours = one(prometheus.values(&mean("muster_node_gpus_stranded"), until).await?) * hours;
        report.held_gpu_hours = one(prometheus.values(&mean("muster_node_gpus_held"), until).await?) * hours;
        let quotas = format!("avg_over_time(muster_queue_quota{{resource=\"nvidia.com/gpu\"}}{range})");
        for series in prometheus.values(&quotas, until).await? {
            report.quota.insert(series.label("queue").to_string(), series.samples.first().map_or(0.0, |s| s.1));
        }
        // Counted from the samples too: a series appears with its first gang already in it.
        for series in prometheus.samples(&format!("muster_gangs_started_total{range}"), until).await? {
            let key = (series.label("queue").to_string(), series.label("namespace").to_string());
            let count = increase(&series.samples, start, STARTED_WITHIN).round();
            if count > 0.0 {
                report.usage.entry(key).or_default().jobs_started += count;
            }
        }
        let step = since.div_ceil(POINTS).max(1);
        let coarse = format!("[{since}s:{step}s]");
        let within = STARTED_WITHIN.max(step as f64);
        report.waits_from(prometheus, &coarse, start, within, until).await?;
        for series in prometheus.samples(&format!("muster_evictions_total{coarse}"), until).await? {
            let count = increase(&series.samples, start, within).round();
            if count > 0.0 {
                let [queue, namespace, reason] = ["queue", "namespace", "reason"].map(|l| series.label(l).to_string());
                *report.evictions.entry((queue, namespace, reason)).or_default() += count;
            }
        }
        Ok(report)
    }

    /// Adds a GPU-seconds counter's rises to its queue's GPUs in use: each rise spread
    /// evenly between its two samples, over [`POINTS`] equal spans of the period.
    fn add_in_use(&mut self, queue: &str, samples: &[(f64, f64)]) {
        let seconds = self.until - self.from;
        if seconds <= 0.0 {
            return;
        }
        let width = seconds / POINTS as f64;
        let series = self
            .in_use
            .entry(queue.to_string())
            .or_insert_with(|| (0..POINTS).map(|i| ((i as f64 + 0.5) * width, 0.0)).collect());
        for pair in samples.windows(2) {
            let ((t0, before), (t1, after)) = (pair[0], pair[1]);
            let rise = if after >= before { after - before } else { after };
            let (from, to) = ((t0 - self.from).max(0.0), (t1 - self.from).min(seconds));
            if rise <= 0.0 || to <= from {
                continue;
            }
            let rate = rise / (t1 - t0);
            let mut at = from;
            let mut i = ((from / width) as usize).min(series.len() - 1);
            while at < to && i < series.len() {
                let end = if i + 1 == series.len() { to } else { ((i + 1) as f64 * width).min(to) };
                if end > at {
                    series[i].1 += rate * (end - at) / width;
                    at = end;
                }
                i += 1;
            }
        }
    }

    /// Waits per queue and namespace, and per queue, from the waiting histogram's buckets:
    /// each series' rise over the period counted from its samples (a series born within it
    /// counts its first gang), the quantiles estimated as `histogram_quantile` does.
    async fn waits_from(
        &mut self,
        prometheus: &Prometheus,
        coarse: &str,
        start: f64,
        within: f64,
        until: f64,
    ) -> Result<(), String> {
        let buckets = format!("muster_queue_gang_waiting_seconds_bucket{coarse}");
        let mut counts: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for series in prometheus.samples(&buckets, until).await? {
            let le = series.label("le");
            let index = match le {
                "+Inf" => WAITING_BUCKETS.len(),
                bound => match bound.parse::<f64>().ok().and_then(|b| WAITING_BUCKETS.iter().position(|w| *w == b)) {
                    Some(i) => i,
                    None => continue,
                },
            };
            let key = (series.label("queue").to_string(), series.label("namespace").to_string());
            let entry = counts.entry(key).or_insert_with(|| vec![0.0; WAITING_BUCKETS.len() + 1]);
            entry[index] += increase(&series.samples, start, within).round();
        }
        for ((queue, namespace), counts) in counts {
            let per_queue = self.wait_buckets.entry(queue.clone()).or_insert_with(|| vec![0.0; counts.len()]);
            for (sum, count) in per_queue.iter_mut().zip(&counts) {
                *sum += count;
            }
            if counts.last().is_some_and(|total| *total > 0.0) {
                let usage = self.usage.entry((queue, namespace)).or_default();
                (usage.wait_p50, usage.wait_p99) = (quantile(&counts, 0.5), quantile(&counts, 0.99));
            }
        }
        for (queue, counts) in &self.wait_buckets {
            if counts.last().is_some_and(|total| *total > 0.0) {
                self.waits.insert(queue.clone(), (quantile(counts, 0.5), quantile(counts, 0.99)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_in_use_are_the_counters_rises_spread_between_their_samples() {
        let mut report = Report { from: 1000.0, until: 1000.0 + 2400.0, ..Report::default() };
        // Two GPUs from 1000 s to 2200 s (scraped every 600 s), then a reset to a new leader
        // that counted one GPU for 600 s; nothing before the period counts.
        let samples = [(400.0, 0.0), (1000.0, 1200.0), (1600.0, 2400.0), (2200.0, 3600.0), (2800.0, 600.0)];
        report.add_in_use("team", &samples);
        let series = &report.in_use["team"];
        assert_eq!(series.len(), POINTS as usize);
        let at = |seconds: f64| series.iter().find(|p| p.0 >= seconds).unwrap().1;
        assert!((at(100.0) - 2.0).abs() < 1e-9 && (at(1500.0) - 1.0).abs() < 1e-9, "{series:?}");
        assert_eq!(at(2300.0), 0.0);
        let gpu_seconds: f64 = series.iter().map(|p| p.1).sum::<f64>() * 2400.0 / POINTS as f64;
        assert!((gpu_seconds - (2.0 * 1200.0 + 600.0)).abs() < 1e-6, "{gpu_seconds}");
    }
}
