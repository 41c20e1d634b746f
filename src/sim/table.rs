//! Tables a person reads at a glance, on top of the JSON results.

use std::fmt::Write;

use super::replay::table::{FIGURES, comparison_table};
use super::run::SimReport;
use super::scenarios::{Fleet, TwoJobsOutcome};
use crate::config::QueueingPolicy;

/// One row per pod, then one per PodGroup.
pub fn report_table(report: &SimReport) -> String {
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
    if !report.claims.is_empty() {
        let width = report.claims.iter().map(|c| c.namespace.len() + c.name.len() + 1).max().unwrap_or(5).max(5);
        let _ = writeln!(out, "\n{:<width$}  {:<20}  VOLUME", "CLAIM", "NODE");
        for c in &report.claims {
            let name = format!("{}/{}", c.namespace, c.name);
            let node = c.node.as_deref().unwrap_or("<pending>");
            let _ = writeln!(out, "{name:<width$}  {node:<20}  {}", c.volume.as_deref().unwrap_or("<unbound>"));
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

pub fn builtin_table(two: &[TwoJobsOutcome; 2], fleets: &[Fleet], default: QueueingPolicy) -> String {
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
fn fleet_table(out: &mut String, fleet: &Fleet, default: QueueingPolicy) {
    let shape = &fleet.shape;
    let _ = writeln!(
        out,
        "\n{} ({} nodes x 8 GPUs in racks of 8 nodes, 2 racks a block; {} jobs of 1-64 GPUs arriving over {} h, \
         running 1-6 h, {}% declaring a limit of 1-3x their runtime, jobs of 16+ GPUs requiring one rack; {} h horizon)\n",
        fleet.label, shape.nodes, shape.jobs, shape.arrival_hours, shape.limited_percent, shape.horizon_hours
    );
    comparison_table(out, &fleet.comparison, default);
}
