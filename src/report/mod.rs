//! `muster report`: what each queue and namespace used over a period, read from the
//! usage ledger's counters in Prometheus (`muster_gpu_seconds_total`, docs/reports.md),
//! with the fleet's GPUs, what stood stranded or held, and the evictions, as a table or CSV.

pub mod prometheus;

use std::collections::BTreeMap;
use std::fmt::Write;

use prometheus::{Prometheus, Series};

/// A counter first seen this long after the period began started within it: its first
/// sample counts whole. One seen earlier was already counting: only its increases count.
const STARTED_WITHIN: f64 = 300.0;

/// Usage of one queue in one namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub gpu_hours: f64,
    pub gpu_memory_gib_hours: f64,
    /// Gangs bound in the period.
    pub jobs_started: f64,
}

/// What the report says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The period, in Unix seconds: from the later of its start and the first sample.
    pub from: f64,
    pub until: f64,
    /// Per (queue, namespace).
    pub usage: BTreeMap<(String, String), Usage>,
    /// Per queue: its mean GPU quota over the period, where it has one.
    pub quota: BTreeMap<String, f64>,
    /// The fleet's mean GPUs over the period.
    pub fleet_gpus: f64,
    pub stranded_gpu_hours: f64,
    pub held_gpu_hours: f64,
    /// Gangs evicted, by reason.
    pub evictions: BTreeMap<String, f64>,
    /// Per queue: how long its gangs waited to be bound, p50 and p99, in seconds.
    pub waits: BTreeMap<String, (f64, f64)>,
}

/// How much a counter rose over its samples, counting resets, from `start`: a series that
/// began within the period counts its first sample whole.
pub fn increase(samples: &[(f64, f64)], start: f64) -> f64 {
    let Some(&(first_at, first)) = samples.first() else { return 0.0 };
    let mut total = if first_at - start > STARTED_WITHIN { first } else { 0.0 };
    for pair in samples.windows(2) {
        let (before, after) = (pair[0].1, pair[1].1);
        total += if after >= before { after - before } else { after };
    }
    total
}

impl Report {
    /// The report of the `since` seconds before `until`, from Prometheus.
    pub async fn from_prometheus(prometheus: &Prometheus, since: u64, until: f64) -> Result<Report, String> {
        let start = until - since as f64;
        let range = format!("[{since}s]");
        let mut report = Report { from: until, until, ..Report::default() };
        for (metric, memory) in [("muster_gpu_seconds_total", false), ("muster_gpu_memory_byte_seconds_total", true)] {
            for series in prometheus.samples(&format!("{metric}{range}"), until).await? {
                report.from = report.from.min(series.samples.first().map_or(until, |s| s.0));
                let key = (series.label("queue").to_string(), series.label("namespace").to_string());
                let used = increase(&series.samples, start) / 3600.0;
                let entry = report.usage.entry(key).or_default();
                if memory {
                    entry.gpu_memory_gib_hours += used / f64::from(1u32 << 30);
                } else {
                    entry.gpu_hours += used;
                }
            }
        }
        report.from = report.from.max(start);
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
            let count = increase(&series.samples, start).round();
            if count > 0.0 {
                report.usage.entry(key).or_default().jobs_started += count;
            }
        }
        for (q, quantile) in [(0, 0.5), (1, 0.99)] {
            let query = format!(
                "histogram_quantile({quantile}, sum by (queue, le) (increase(muster_queue_gang_waiting_seconds_bucket{range})))"
            );
            for series in prometheus.values(&query, until).await? {
                let Some(&(_, seconds)) = series.samples.first().filter(|s| s.1.is_finite()) else { continue };
                let entry = report.waits.entry(series.label("queue").to_string()).or_insert((f64::NAN, f64::NAN));
                if q == 0 { entry.0 = seconds } else { entry.1 = seconds }
            }
        }
        let evictions = format!("sum by (reason) (increase(muster_evictions_total{range}))");
        for series in prometheus.values(&evictions, until).await? {
            let count = series.samples.first().map_or(0.0, |s| s.1).round();
            if count > 0.0 {
                report.evictions.insert(series.label("reason").to_string(), count);
            }
        }
        Ok(report)
    }

    /// The period's length in hours.
    pub fn hours(&self) -> f64 {
        (self.until - self.from).max(0.0) / 3600.0
    }

    /// Per queue: its GPU-hours over every namespace.
    pub fn per_queue(&self) -> BTreeMap<&str, f64> {
        let mut out = BTreeMap::new();
        for ((queue, _), usage) in &self.usage {
            *out.entry(queue.as_str()).or_insert(0.0) += usage.gpu_hours;
        }
        out
    }

    /// GPU-hours as a share of the queue's quota over the period, where it has one.
    pub fn share_of_quota(&self, queue: &str, gpu_hours: f64) -> Option<f64> {
        let quota = self.quota.get(queue).copied().filter(|q| *q > 0.0)?;
        let hours = self.hours();
        (hours > 0.0).then(|| gpu_hours / (quota * hours))
    }

    /// GPU-hours as a share of the fleet's over the period.
    pub fn share_of_fleet(&self, gpu_hours: f64) -> Option<f64> {
        let fleet = self.fleet_gpus * self.hours();
        (fleet > 0.0).then(|| gpu_hours / fleet)
    }

    /// The report as a table.
    pub fn table(&self) -> String {
        let percent = |share: Option<f64>| share.map_or_else(|| "-".to_string(), |s| format!("{:.1}%", s * 100.0));
        let mut out = String::new();
        let _ = writeln!(out, "period: {:.2} h, fleet: {:.1} GPUs on average\n", self.hours(), self.fleet_gpus);
        let _ = writeln!(
            out,
            "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "QUEUE", "GPU-HOURS", "OF QUOTA", "OF FLEET", "WAIT P50", "WAIT P99"
        );
        for (queue, hours) in self.per_queue() {
            let (quota, fleet) = (self.share_of_quota(queue, hours), self.share_of_fleet(hours));
            let (p50, p99) = self.waits.get(queue).copied().unwrap_or((f64::NAN, f64::NAN));
            let _ = writeln!(
                out,
                "{queue:<24} {hours:>10.2} {:>10} {:>10} {:>10} {:>10}",
                percent(quota),
                percent(fleet),
                duration(p50),
                duration(p99)
            );
        }
        let _ = writeln!(
            out,
            "\n{:<24} {:<24} {:>10} {:>16} {:>8}",
            "QUEUE", "NAMESPACE", "GPU-HOURS", "GPU-MEM GiB-H", "JOBS"
        );
        for ((queue, namespace), usage) in &self.usage {
            let _ = writeln!(
                out,
                "{queue:<24} {namespace:<24} {:>10.2} {:>16.2} {:>8}",
                usage.gpu_hours, usage.gpu_memory_gib_hours, usage.jobs_started
            );
        }
        let _ = writeln!(
            out,
            "\nstranded: {:.2} GPU-hours, held by claims no pod uses: {:.2} GPU-hours",
            self.stranded_gpu_hours, self.held_gpu_hours
        );
        let evictions: Vec<String> = self.evictions.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let evictions = if evictions.is_empty() { "none".to_string() } else { evictions.join(", ") };
        let _ = writeln!(out, "gangs evicted: {evictions}");
        out
    }

    /// The report as CSV: one row per queue and namespace.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "queue,namespace,gpu_hours,gpu_memory_gib_hours,share_of_queue_quota,share_of_fleet,jobs_started,queue_wait_p50_seconds,queue_wait_p99_seconds\n",
        );
        let number = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
        for ((queue, namespace), usage) in &self.usage {
            let (p50, p99) = self.waits.get(queue).copied().unwrap_or((f64::NAN, f64::NAN));
            let _ = writeln!(
                out,
                "{},{},{:.4},{:.4},{},{},{},{},{}",
                csv_field(queue),
                csv_field(namespace),
                usage.gpu_hours,
                usage.gpu_memory_gib_hours,
                number(self.share_of_quota(queue, usage.gpu_hours)),
                number(self.share_of_fleet(usage.gpu_hours)),
                usage.jobs_started,
                number(Some(p50).filter(|v| v.is_finite())),
                number(Some(p99).filter(|v| v.is_finite()))
            );
        }
        out
    }
}

/// Seconds as a short duration (`45s`, `12m`, `3.5h`); `-` when unknown.
fn duration(seconds: f64) -> String {
    match seconds {
        s if !s.is_finite() => "-".to_string(),
        s if s < 120.0 => format!("{s:.0}s"),
        s if s < 7200.0 => format!("{:.0}m", s / 60.0),
        s => format!("{:.1}h", s / 3600.0),
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// A period as Prometheus writes durations (`90m`, `7d`, `1h30m`), in seconds.
pub fn parse_since(text: &str) -> Result<u64, String> {
    let days = text.trim().strip_suffix('d').and_then(|d| d.parse::<u64>().ok());
    let seconds = match days {
        Some(days) => days.saturating_mul(86_400),
        None => crate::config::parse_duration(text).map_err(|e| format!("--since: {e}"))? as u64,
    };
    if seconds == 0 {
        return Err(format!("--since {text:?} must be longer than nothing"));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counters_increase_counts_resets_and_a_start_within_the_period() {
        // Counting before the period began: only what it added since.
        assert_eq!(increase(&[(1000.0, 50.0), (1060.0, 80.0), (1120.0, 110.0)], 990.0), 60.0);
        // Began within it (a restart, a new queue): its first sample counts whole.
        assert_eq!(increase(&[(2000.0, 5.0), (2060.0, 35.0)], 990.0), 35.0);
        // A reset (a new leader): what it reached after the reset counts.
        assert_eq!(increase(&[(1000.0, 50.0), (1060.0, 80.0), (1120.0, 10.0), (1180.0, 40.0)], 990.0), 70.0);
        assert_eq!(increase(&[], 0.0), 0.0);
    }

    #[test]
    fn periods_are_read_as_prometheus_writes_them() {
        assert_eq!(parse_since("7d"), Ok(7 * 86_400));
        assert_eq!(parse_since("1h30m"), Ok(5400));
        assert!(parse_since("0s").is_err());
        assert!(parse_since("a week").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn shares_of_quota_and_fleet_and_the_csv() {
        let mut report = Report { from: 0.0, until: 36_000.0, fleet_gpus: 100.0, ..Report::default() };
        let usage = |gpu_hours, gpu_memory_gib_hours| Usage { gpu_hours, gpu_memory_gib_hours, jobs_started: 3.0 };
        report.usage.insert(("team-a".into(), "ml".into()), usage(60.0, 0.0));
        report.usage.insert(("team-a".into(), "cv,2".into()), usage(20.0, 4.0));
        report.waits.insert("team-a".into(), (240.0, 9000.0));
        report.quota.insert("team-a".into(), 10.0);
        assert_eq!(report.per_queue()["team-a"], 80.0);
        // 80 GPU-hours of a quota of 10 GPUs over 10 hours; of a fleet of 100 GPUs.
        assert_eq!(report.share_of_quota("team-a", 80.0), Some(0.8));
        assert_eq!(report.share_of_fleet(80.0), Some(0.08));
        assert_eq!(report.share_of_quota("none", 1.0), None);
        let csv = report.csv();
        assert!(csv.contains("team-a,\"cv,2\",20.0000,4.0000,0.2000,0.0200,3,240.0000,9000.0000"), "{csv}");
        let table = report.table();
        assert!(table.contains("80.00") && table.contains("80.0%") && table.contains("8.0%"), "{table}");
        assert!(table.contains("4m") && table.contains("2.5h"), "waits p50 and p99: {table}");
    }
}
