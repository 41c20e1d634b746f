//! Tables a person reads at a glance, on top of the JSON results.

use std::fmt::Write;

use super::replay::Comparison;
use super::replay::report::Outcome;
use super::run::Report;
use super::scenarios::{Fleet, TwoJobsOutcome};
use crate::config::QueueingStrategy;

/// One row per pod, then one per PodGroup.
pub fn report_table(report: &Report) -> String {
    let mut out = String::new();
    let width = report.pods.iter().map(|p| p.namespace.len() + p.name.len() + 1).max().unwrap_or(3).max(3);
    let _ = writeln!(out, "{:<width$}  {:<20}  REASON", "POD", "NODE");
    for pod in &report.pods {
        let name = format!("{}/{}", pod.namespace, pod.name);
        let node = pod.node.as_deref().unwrap_or("<pending>");
        let _ = writeln!(out, "{name:<width$}  {node:<20}  {}", pod.reason.as_deref().unwrap_or(""));
    }
    if !report.gangs.is_empty() {
        let _ = writeln!(out, "\n{:<40}  {:>6}/{:<6}  REASON", "PODGROUP", "PLACED", "MIN");
        for g in &report.gangs {
            let name = format!("{}/{} ({})", g.namespace, g.name, g.api_version);
            let _ = writeln!(
                out,
                "{name:<40}  {:>6}/{:<6}  {}",
                g.placed,
                g.min_member,
                g.reason.as_deref().unwrap_or("scheduled")
            );
        }
    }
    if !report.evictions.is_empty() {
        let _ = writeln!(out, "\n{:<5}  {:<40}  {:<10}  {:<30}  FOR", "CYCLE", "EVICTED POD", "REASON", "GANG");
        for e in &report.evictions {
            let pod = format!("{}/{}", e.namespace, e.name);
            let _ = writeln!(out, "{:<5}  {pod:<40}  {:<10}  {:<30}  {}", e.cycle, e.reason, e.gang, e.preemptor);
        }
    }
    if !report.queues.is_empty() {
        // Keys on devices (`memory.deviceclass/<class>`) are long: the column fits them.
        let keys = report.queues.iter().flat_map(|q| q.resources.keys().map(|key| key.len()));
        let width = keys.max().unwrap_or(0).max(24);
        let _ = writeln!(
            out,
            "\n{:<24}  {:<16}  {:<width$}  {:>8}  {:>8}  {:>10}  {:>10}  {:>10}",
            "QUEUE", "PARENT", "RESOURCE", "QUOTA", "LIMIT", "FAIR SHARE", "ALLOCATED", "REQUESTED"
        );
        for q in &report.queues {
            let parent = q.parent.as_deref().unwrap_or("-");
            if let Some(problem) = &q.problem {
                let _ = writeln!(out, "{:<24}  {parent:<16}  invalid: {problem}", q.name);
            }
            for (key, f) in &q.resources {
                let limit = f.limit.as_deref().unwrap_or("-");
                let _ = writeln!(
                    out,
                    "{:<24}  {parent:<16}  {key:<width$}  {:>8}  {limit:>8}  {:>10}  {:>10}  {:>10}",
                    q.name, f.quota, f.fair_share, f.allocated, f.requested
                );
            }
        }
    }
    for note in &report.notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

fn job_cell(outcome: &TwoJobsOutcome, job: &str) -> String {
    let placed = outcome.placed.get(job).copied().unwrap_or(0);
    if outcome.running.iter().any(|r| r == job) {
        "8/8 placed, runs".to_string()
    } else if placed == 0 {
        "0/8 placed, waits holding nothing".to_string()
    } else {
        format!("{placed}/8 placed, stuck holding {placed} GPUs")
    }
}

pub fn builtin_table(two: &[TwoJobsOutcome; 2], fleets: &[Fleet], default: QueueingStrategy) -> String {
    let mut out = String::new();
    let row = |out: &mut String, label: &str, a: &str, b: &str| {
        let _ = writeln!(out, "  {label:<26} {a:<36} {b}");
    };
    let _ =
        writeln!(out, "Two 8-GPU jobs on 8 free GPUs (2 nodes x 4 GPUs; 8 one-GPU pods each, created interleaved)\n");
    row(&mut out, "", "Muster (gang)", "per-pod baseline (kube-scheduler's way)");
    for job in ["job-a", "job-b"] {
        row(&mut out, job, &job_cell(&two[0], job), &job_cell(&two[1], job));
    }
    row(&mut out, "GPUs stranded", &two[0].stranded_gpus.to_string(), &two[1].stranded_gpus.to_string());
    let after = |o: &TwoJobsOutcome| {
        if o.running.is_empty() {
            "nothing ever runs: deadlock".to_string()
        } else if o.running_after_first_finish.is_empty() {
            "nothing more runs".to_string()
        } else {
            format!("{} runs", o.running_after_first_finish.join(", "))
        }
    };
    row(&mut out, "when the running job ends", &after(&two[0]), &after(&two[1]));

    for fleet in fleets {
        fleet_table(&mut out, fleet, default);
    }
    let _ = writeln!(out, "\n{FIGURES}");
    out
}

/// One fleet's table: a column per policy.
fn fleet_table(out: &mut String, fleet: &Fleet, default: QueueingStrategy) {
    let shape = &fleet.shape;
    let _ = writeln!(
        out,
        "\n{} ({} nodes x 8 GPUs in racks of 8 nodes, 2 racks a block; {} jobs of 1-64 GPUs arriving over {} h, \
         running 1-6 h, {}% declaring a limit of 1-3x their runtime, jobs of 16+ GPUs requiring one rack; {} h horizon)\n",
        fleet.label, shape.nodes, shape.jobs, shape.arrival_hours, shape.limited_percent, shape.horizon_hours
    );
    comparison_table(out, &fleet.comparison, default);
}

/// A replay's figures: a row per figure (its label, then a cell per policy), the titles
/// first with an empty label.
pub fn comparison_rows(comparison: &Comparison, default: QueueingStrategy) -> Vec<(String, Vec<String>)> {
    let results = &comparison.outcomes;
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row =
        |label: &str, f: &dyn Fn(&Outcome) -> String| rows.push((label.to_string(), results.iter().map(f).collect()));
    let minutes = |v: f64| format!("{v:.0} min");
    let node = comparison.node_gpus;
    row("", &|o| o.placer.title(default));
    row("jobs started", &|o| format!("{} of {}", o.started, o.jobs));
    if results.iter().any(|o| o.stopped_at_limit > 0) {
        row("jobs stopped at their limit", &|o| o.stopped_at_limit.to_string());
    }
    if results.iter().any(|o| o.evictions > 0) {
        row("gangs evicted", &|o| o.evictions.to_string());
    }
    row("GPU utilisation", &|o| format!("{:.1}%", 100.0 * o.gpu_utilisation));
    row("GPU-hours of work completed", &|o| format!("{:.0}", o.completed_gpu_hours));
    row("GPU-hours stranded", &|o| format!("{:.0}", o.stranded_gpu_hours));
    row("GPU-hours fragmented", &|o| format!("{:.0} ({:.0}%)", o.fragmented_gpu_hours, 100.0 * o.fragmented_share));
    row("wait p50 (started jobs)", &|o| minutes(o.wait_p50_minutes));
    row("wait p99 (started jobs)", &|o| minutes(o.wait_p99_minutes));
    row(&format!("  jobs <= {node} GPUs: p50"), &|o| minutes(o.small_wait_p50_minutes));
    row(&format!("  jobs > {node} GPUs: p50"), &|o| minutes(o.large_wait_p50_minutes));
    row(&format!("  jobs > {node} GPUs: p99"), &|o| minutes(o.large_wait_p99_minutes));
    row(&format!("  > {node} GPUs never started"), &|o| o.large_never_started.to_string());
    let classes: Vec<String> =
        results.first().map(|o| o.sizes.iter().map(|s| s.label.clone()).collect()).unwrap_or_default();
    for label in &classes {
        let cell = |o: &Outcome| {
            o.sizes
                .iter()
                .find(|s| &s.label == label)
                .map_or("-".to_string(), |s| format!("{:.0} / {:.0} min", s.wait_p50_minutes, s.wait_p99_minutes))
        };
        row(&format!("  {label}: p50 / p99"), &cell);
    }
    row("mean bounded slowdown", &|o| format!("{:.2}", o.mean_bounded_slowdown));
    rows
}

/// A replay's table: a row per figure, a column per policy, then the notes.
pub fn comparison_table(out: &mut String, comparison: &Comparison, default: QueueingStrategy) {
    let rows = comparison_rows(comparison, default);
    let width = rows.iter().flat_map(|(_, cells)| cells.iter().map(String::len)).max().unwrap_or(0).max(16) + 2;
    for (label, cells) in &rows {
        let mut line = format!("  {label:<28}");
        for cell in cells {
            let _ = write!(line, " {cell:<width$}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    for note in &comparison.notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
}

/// A trace's replay as a table, with what it was replayed on.
pub fn trace_table(comparison: &Comparison, source: &str, default: QueueingStrategy) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{source}: {} jobs on {} ({} GPUs); {:.0} h horizon\n",
        comparison.jobs,
        comparison.cluster,
        comparison.total_gpus,
        comparison.horizon_seconds as f64 / 3600.0
    );
    comparison_table(&mut out, comparison, default);
    let _ = writeln!(out, "\n{FIGURES}");
    out
}

/// What the figures mean, under every comparison table.
const FIGURES: &str = "Stranded: GPUs held by pods of jobs that cannot start because the rest of their pods did not fit.\n\
Fragmented: while a job larger than a node waits, GPUs free but in racks with fewer free than the smallest\n\
such job needs (the baseline ignores racks: its figure says how scattered its free GPUs are).\n\
Bounded slowdown: (wait + run) / max(run, 10 min) per job, at least 1; jobs never started wait until\n\
the horizon.";
