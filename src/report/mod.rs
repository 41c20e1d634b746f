//! `muster report`: what each queue and namespace used over a period, read from the
//! usage ledger's counters in Prometheus (`muster_gpu_seconds_total`, docs/reports.md) or
//! from a simulator run's ledger, with the fleet's GPUs, what stood stranded or held, the
//! waits and the evictions, as a table, CSV or a self-contained HTML page with plots.

pub mod command;
pub mod html;
pub mod prometheus;
pub mod query;
pub mod simulated;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::metrics::WAITING_BUCKETS;
use crate::sim::replay::usage::GangUsage;

/// A counter first seen this long after the period began started within it: its first
/// sample counts whole. One seen earlier was already counting: only its increases count.
pub const STARTED_WITHIN: f64 = 300.0;

/// The columns of [`Report::queue_rows`] and [`Report::namespace_rows`].
pub const QUEUE_COLUMNS: [&str; 6] = ["QUEUE", "GPU-HOURS", "OF QUOTA", "OF FLEET", "WAIT P50", "WAIT P99"];
pub const GANG_COLUMNS: [&str; 5] = ["GANG", "QUEUE", "NAMESPACE", "GPU-HOURS", "WAITED"];
pub const NAMESPACE_COLUMNS: [&str; 8] =
    ["QUEUE", "NAMESPACE", "GPU-HOURS", "GPU-MEM GiB-H", "JOBS", "WAIT P50", "WAIT P99", "EVICTED"];

/// Usage of one queue in one namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    pub gpu_hours: f64,
    pub gpu_memory_gib_hours: f64,
    /// Gangs bound in the period.
    pub jobs_started: f64,
    /// How long its gangs waited to be bound, p50 and p99, in seconds; NaN when unknown.
    pub wait_p50: f64,
    pub wait_p99: f64,
}

impl Default for Usage {
    fn default() -> Usage {
        Usage { gpu_hours: 0.0, gpu_memory_gib_hours: 0.0, jobs_started: 0.0, wait_p50: f64::NAN, wait_p99: f64::NAN }
    }
}

/// How many gangs the table and the page list, the largest first.
pub const LARGEST_GANGS: usize = 20;

/// What the report says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Where the figures come from: a Prometheus server, or a simulator run.
    pub source: String,
    /// Whether `from` and `until` are Unix seconds (Prometheus) rather than seconds from a
    /// simulated run's start.
    pub wall_clock: bool,
    /// The period: from the later of its start and the first sample.
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
    /// Gangs evicted, per (queue, namespace, reason).
    pub evictions: BTreeMap<(String, String, String), f64>,
    /// Per queue: how long its gangs waited to be bound, p50 and p99, in seconds.
    pub waits: BTreeMap<String, (f64, f64)>,
    /// Per queue: its gangs bound within each bound of [`WAITING_BUCKETS`], cumulative,
    /// then all of them.
    pub wait_buckets: BTreeMap<String, Vec<f64>>,
    /// Per queue: GPUs in use over the period, as (seconds after `from`, GPUs).
    pub in_use: BTreeMap<String, Vec<(f64, f64)>>,
    /// Per gang, the most GPU-hours first, where the source knows gangs.
    pub gangs: Vec<GangUsage>,
}

/// How much a counter rose over its samples, counting resets, from `start`: a series first
/// seen more than `within` seconds into the period began within it and its first sample
/// counts whole.
pub fn increase(samples: &[(f64, f64)], start: f64, within: f64) -> f64 {
    let Some(&(first_at, first)) = samples.first() else { return 0.0 };
    let mut total = if first_at - start > within { first } else { 0.0 };
    for pair in samples.windows(2) {
        let (before, after) = (pair[0].1, pair[1].1);
        total += if after >= before { after - before } else { after };
    }
    total
}

/// The `q` quantile of waits counted as [`WAITING_BUCKETS`] cumulative counts (then the
/// total), as Prometheus' `histogram_quantile` estimates it: linearly within the bucket that
/// holds it; beyond the last bound, that bound. NaN without a wait.
pub fn quantile(counts: &[f64], q: f64) -> f64 {
    let Some(&total) = counts.last().filter(|t| **t > 0.0) else { return f64::NAN };
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (i, &count) in counts.iter().enumerate() {
        let Some(&upper) = WAITING_BUCKETS.get(i) else { return lower };
        let count = count.max(below);
        if count >= rank {
            let inside = count - below;
            return if inside > 0.0 { lower + (upper - lower) * (rank - below) / inside } else { upper };
        }
        (lower, below) = (upper, count);
    }
    lower
}

impl Report {
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

    /// The evictions of one queue and namespace, as `Reason=N` joined by `;`.
    pub fn evictions_of(&self, queue: &str, namespace: &str) -> String {
        let of = self.evictions.iter().filter(|((q, n, _), _)| q == queue && n == namespace);
        of.map(|((_, _, reason), count)| format!("{reason}={count}")).collect::<Vec<_>>().join(";")
    }

    /// The period in words: its times, or its length in a simulated run.
    pub fn period(&self) -> String {
        let time = |unix: f64| {
            jiff::Timestamp::from_second(unix as i64).map_or_else(|_| format!("{unix:.0}"), |t| t.to_string())
        };
        if self.wall_clock {
            format!("{} to {} ({})", time(self.from), time(self.until), duration(self.until - self.from))
        } else {
            format!("{} of simulated time", duration(self.until - self.from))
        }
    }

    /// Per queue: its name, GPU-hours, share of quota and of the fleet, waits p50 and p99.
    pub fn queue_rows(&self) -> Vec<[String; 6]> {
        let percent = |share: Option<f64>| share.map_or_else(|| "-".to_string(), |s| format!("{:.1}%", s * 100.0));
        let rows = self.per_queue().into_iter().map(|(queue, hours)| {
            let (p50, p99) = self.waits.get(queue).copied().unwrap_or((f64::NAN, f64::NAN));
            [
                queue.to_string(),
                format!("{hours:.2}"),
                percent(self.share_of_quota(queue, hours)),
                percent(self.share_of_fleet(hours)),
                duration(p50),
                duration(p99),
            ]
        });
        rows.collect()
    }

    /// Per queue and namespace: both names, GPU-hours, GPU-memory GiB-hours, gangs
    /// started, waits p50 and p99, evictions.
    pub fn namespace_rows(&self) -> Vec<[String; 8]> {
        let rows = self.usage.iter().map(|((queue, namespace), usage)| {
            let evicted = self.evictions_of(queue, namespace);
            [
                queue.clone(),
                namespace.clone(),
                format!("{:.2}", usage.gpu_hours),
                format!("{:.2}", usage.gpu_memory_gib_hours),
                format!("{}", usage.jobs_started),
                duration(usage.wait_p50),
                duration(usage.wait_p99),
                if evicted.is_empty() { "-".to_string() } else { evicted },
            ]
        });
        rows.collect()
    }

    /// The [`LARGEST_GANGS`] gangs that used the most: name, queue, namespace, GPU-hours,
    /// wait.
    pub fn gang_rows(&self) -> Vec<[String; 5]> {
        let rows = self.gangs.iter().take(LARGEST_GANGS).map(|g| {
            [
                g.name.clone(),
                g.queue.clone(),
                g.namespace.clone(),
                format!("{:.2}", g.gpu_hours),
                duration(g.wait_seconds.unwrap_or(f64::NAN)),
            ]
        });
        rows.collect()
    }

    /// Gangs evicted by reason over every queue: `Reason N, ...` or `none`.
    pub fn evictions_by_reason(&self) -> String {
        let mut by_reason: BTreeMap<&str, f64> = BTreeMap::new();
        for ((_, _, reason), count) in &self.evictions {
            *by_reason.entry(reason.as_str()).or_default() += count;
        }
        let evictions: Vec<String> = by_reason.iter().map(|(r, n)| format!("{r} {n}")).collect();
        if evictions.is_empty() { "none".to_string() } else { evictions.join(", ") }
    }

    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}\nperiod: {}, fleet: {:.1} GPUs on average\n",
            self.source,
            self.period(),
            self.fleet_gpus
        );
        let _ = writeln!(
            out,
            "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10}",
            QUEUE_COLUMNS[0], QUEUE_COLUMNS[1], QUEUE_COLUMNS[2], QUEUE_COLUMNS[3], QUEUE_COLUMNS[4], QUEUE_COLUMNS[5]
        );
        for [queue, hours, quota, fleet, p50, p99] in self.queue_rows() {
            let _ = writeln!(out, "{queue:<24} {hours:>10} {quota:>10} {fleet:>10} {p50:>10} {p99:>10}");
        }
        let [q, n, h, m, j, p50, p99, e] = NAMESPACE_COLUMNS;
        let _ = writeln!(out, "\n{q:<24} {n:<24} {h:>10} {m:>14} {j:>6} {p50:>9} {p99:>9}  {e}");
        for [q, n, h, m, j, p50, p99, e] in self.namespace_rows() {
            let _ = writeln!(out, "{q:<24} {n:<24} {h:>10} {m:>14} {j:>6} {p50:>9} {p99:>9}  {e}");
        }
        let _ = writeln!(
            out,
            "\nstranded: {:.2} GPU-hours, held by claims no pod uses: {:.2} GPU-hours",
            self.stranded_gpu_hours, self.held_gpu_hours
        );
        let _ = writeln!(out, "gangs evicted: {}", self.evictions_by_reason());
        if !self.gangs.is_empty() {
            let [g, q, n, h, w] = GANG_COLUMNS;
            let _ =
                writeln!(out, "\nthe {} largest of {} gangs:", LARGEST_GANGS.min(self.gangs.len()), self.gangs.len());
            let _ = writeln!(out, "{g:<32} {q:<24} {n:<24} {h:>10} {w:>9}");
            for [g, q, n, h, w] in self.gang_rows() {
                let _ = writeln!(out, "{g:<32} {q:<24} {n:<24} {h:>10} {w:>9}");
            }
        }
        out
    }

    /// The report as CSV: one row per queue and namespace.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "queue,namespace,gpu_hours,gpu_memory_gib_hours,share_of_queue_quota,share_of_fleet,jobs_started,queue_wait_p50_seconds,queue_wait_p99_seconds,wait_p50_seconds,wait_p99_seconds,evictions\n",
        );
        let number = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
        let known = |v: f64| number(Some(v).filter(|v| v.is_finite()));
        for ((queue, namespace), usage) in &self.usage {
            let (p50, p99) = self.waits.get(queue).copied().unwrap_or((f64::NAN, f64::NAN));
            let _ = writeln!(
                out,
                "{},{},{:.4},{:.4},{},{},{},{},{},{},{},{}",
                csv_field(queue),
                csv_field(namespace),
                usage.gpu_hours,
                usage.gpu_memory_gib_hours,
                number(self.share_of_quota(queue, usage.gpu_hours)),
                number(self.share_of_fleet(usage.gpu_hours)),
                usage.jobs_started,
                known(p50),
                known(p99),
                known(usage.wait_p50),
                known(usage.wait_p99),
                csv_field(&self.evictions_of(queue, namespace))
            );
        }
        out
    }
}

/// Seconds as a short duration (`45s`, `12m`, `3.5h`); `-` when unknown.
pub fn duration(seconds: f64) -> String {
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
        assert_eq!(increase(&[(1000.0, 50.0), (1060.0, 80.0), (1120.0, 110.0)], 990.0, 300.0), 60.0);
        // Began within it (a restart, a new queue): its first sample counts whole.
        assert_eq!(increase(&[(2000.0, 5.0), (2060.0, 35.0)], 990.0, 300.0), 35.0);
        // Seen from the first step of a coarser series: already counting.
        assert_eq!(increase(&[(2000.0, 5.0), (2060.0, 35.0)], 990.0, 1800.0), 30.0);
        // A reset (a new leader): what it reached after the reset counts.
        assert_eq!(increase(&[(1000.0, 50.0), (1060.0, 80.0), (1120.0, 10.0), (1180.0, 40.0)], 990.0, 300.0), 70.0);
        assert_eq!(increase(&[], 0.0, 300.0), 0.0);
    }

    #[test]
    fn quantiles_of_bucketed_waits_are_estimated_as_prometheus_does() {
        let mut counts = vec![0.0; WAITING_BUCKETS.len() + 1];
        // Four waits between 5 s and 15 s, none before: the median is halfway through.
        for count in counts.iter_mut().skip(2) {
            *count = 4.0;
        }
        assert_eq!(quantile(&counts, 0.5), 10.0);
        // One more beyond a day: the p99 is the last bound.
        *counts.last_mut().unwrap() = 5.0;
        assert_eq!(quantile(&counts, 0.99), 86_400.0);
        assert!(quantile(&[0.0; 14], 0.5).is_nan());
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
        let usage = |gpu_hours, gpu_memory_gib_hours| Usage {
            gpu_hours,
            gpu_memory_gib_hours,
            jobs_started: 3.0,
            wait_p50: 60.0,
            wait_p99: f64::NAN,
        };
        report.usage.insert(("team-a".into(), "ml".into()), usage(60.0, 0.0));
        report.usage.insert(("team-a".into(), "cv,2".into()), usage(20.0, 4.0));
        report.waits.insert("team-a".into(), (240.0, 9000.0));
        report.quota.insert("team-a".into(), 10.0);
        report.evictions.insert(("team-a".into(), "ml".into(), "Reclaimed".into()), 2.0);
        report.evictions.insert(("team-a".into(), "ml".into(), "Preempted".into()), 1.0);
        assert_eq!(report.per_queue()["team-a"], 80.0);
        // 80 GPU-hours of a quota of 10 GPUs over 10 hours; of a fleet of 100 GPUs.
        assert_eq!(report.share_of_quota("team-a", 80.0), Some(0.8));
        assert_eq!(report.share_of_fleet(80.0), Some(0.08));
        assert_eq!(report.share_of_quota("none", 1.0), None);
        let csv = report.csv();
        assert!(csv.contains("team-a,\"cv,2\",20.0000,4.0000,0.2000,0.0200,3,240.0000,9000.0000,60.0000,,\n"), "{csv}");
        assert!(csv.contains(",60.0000,,Preempted=1;Reclaimed=2\n"), "{csv}");
        let table = report.table();
        assert!(table.contains("80.00") && table.contains("80.0%") && table.contains("8.0%"), "{table}");
        assert!(table.contains("4m") && table.contains("2.5h"), "waits p50 and p99: {table}");
        assert!(table.contains("Preempted=1;Reclaimed=2") && table.contains("gangs evicted: Preempted 1, Reclaimed 2"));
    }
}
