//! The trace replay's comparison as a table: one row per figure, one column per policy
//! and the per-pod baseline.

use std::fmt::Write;

use super::Comparison;
use super::report::Outcome;
use crate::config::QueueingPolicy;

/// A replay's figures: a row per figure (its label, then a cell per policy), the titles
/// first with an empty label.
pub fn comparison_rows(comparison: &Comparison, default: QueueingPolicy) -> Vec<(String, Vec<String>)> {
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
pub fn comparison_table(out: &mut String, comparison: &Comparison, default: QueueingPolicy) {
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
pub fn trace_table(comparison: &Comparison, source: &str, default: QueueingPolicy) -> String {
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
pub const FIGURES: &str = "Stranded: GPUs held by pods of jobs that cannot start because the rest of their pods did not fit.\n\
Fragmented: while a job larger than a node waits, GPUs free but in racks with fewer free than the smallest\n\
such job needs (the baseline ignores racks: its figure says how scattered its free GPUs are).\n\
Bounded slowdown: (wait + run) / max(run, 10 min) per job, at least 1; jobs never started wait until\n\
the horizon.";
