//! Tables a person reads at a glance, on top of the JSON results.

use std::fmt::Write;

use super::run::Report;
use super::scenarios::{FleetOutcome, FleetShape, TwoJobsOutcome};

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
    out
}

fn job_cell(outcome: &TwoJobsOutcome, job: &str) -> String {
    let placed = outcome.placed.get(job).copied().unwrap_or(0);
    if outcome.running.iter().any(|r| r == job) {
        format!("8/8 placed, runs")
    } else if placed == 0 {
        "0/8 placed, waits holding nothing".to_string()
    } else {
        format!("{placed}/8 placed, stuck holding {placed} GPUs")
    }
}

pub fn builtin_table(two: &[TwoJobsOutcome; 2], shape: &FleetShape, fleets: &[FleetOutcome; 2]) -> String {
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

    let _ = writeln!(
        out,
        "\nMixed fleet ({} nodes x 8 GPUs; {} jobs of 1-64 GPUs arriving over {} h, running 1-6 h; {} h horizon)\n",
        shape.nodes, shape.jobs, shape.arrival_hours, shape.horizon_hours
    );
    row(&mut out, "", "Muster (gang)", "per-pod baseline (kube-scheduler's way)");
    let (m, b) = (&fleets[0], &fleets[1]);
    row(&mut out, "jobs started", &format!("{} of {}", m.started, m.jobs), &format!("{} of {}", b.started, b.jobs));
    row(&mut out, "jobs never started", &m.never_started.to_string(), &b.never_started.to_string());
    row(
        &mut out,
        "GPU utilisation",
        &format!("{:.1}%", 100.0 * m.gpu_utilisation),
        &format!("{:.1}%", 100.0 * b.gpu_utilisation),
    );
    row(
        &mut out,
        "GPU-hours stranded",
        &format!("{:.0}", m.stranded_gpu_hours),
        &format!("{:.0}", b.stranded_gpu_hours),
    );
    row(
        &mut out,
        "wait p50 (started jobs)",
        &format!("{:.0} min", m.wait_p50_minutes),
        &format!("{:.0} min", b.wait_p50_minutes),
    );
    row(
        &mut out,
        "wait p99 (started jobs)",
        &format!("{:.0} min", m.wait_p99_minutes),
        &format!("{:.0} min", b.wait_p99_minutes),
    );
    let minutes = |v: f64| format!("{v:.0} min");
    row(&mut out, "  jobs <= 8 GPUs: p50", &minutes(m.small_wait_p50_minutes), &minutes(b.small_wait_p50_minutes));
    row(&mut out, "  jobs >= 16 GPUs: p50", &minutes(m.large_wait_p50_minutes), &minutes(b.large_wait_p50_minutes));
    row(&mut out, "  jobs >= 16 GPUs: p99", &minutes(m.large_wait_p99_minutes), &minutes(b.large_wait_p99_minutes));
    row(&mut out, "  >= 16 GPUs never started", &m.large_never_started.to_string(), &b.large_never_started.to_string());
    let _ = writeln!(
        out,
        "\nStranded: GPUs held by pods of jobs that cannot start because the rest of their pods did not fit."
    );
    out
}
