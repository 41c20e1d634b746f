//! What Muster tells about a queue: its status (figures per resource key, conditions) and
//! its metrics, from the engine's queue report of the cycle. Pure; written in the
//! background like every other status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::queue::{QueueGangCounts, QueueResourceStatus, QueueStatus};
use crate::convert::status::condition;
use crate::engine::admission::report::QueueReport;
use crate::engine::queues::GPU_RESOURCE;
use crate::engine::queues::refusal::quantity;
use crate::engine::resources::{ResourceId, ResourceNames};
use crate::metrics::Metrics;

/// A queue's status from its report; conditions keep their transition times from
/// `previous`.
pub fn queue_status(
    report: &QueueReport,
    names: &ResourceNames,
    gangs: QueueGangCounts,
    previous: &[Condition],
    now: &Time,
) -> QueueStatus {
    let mut conditions = Vec::new();
    match &report.problem {
        Some(problem) => conditions.push(condition("Ready", false, "Invalid", problem, previous, now)),
        None => conditions.push(condition("Ready", true, "Valid", "the queue admits gangs", previous, now)),
    }
    if report.oversubscribed {
        let message = "the quotas of its child queues do not fit in its share; they are scaled by priority";
        conditions.push(condition("QuotaOversubscribed", true, "ChildQuotasExceedShare", message, previous, now));
    }
    let resources: BTreeMap<String, QueueResourceStatus> = report
        .resources
        .iter()
        .map(|&(id, f)| {
            let amount = |v: i64| quantity(names, id, v);
            let status = QueueResourceStatus {
                quota: f.quota.map_or_else(|| "unlimited".to_string(), amount),
                fair_share: amount(f.fair_share),
                allocated: amount(f.allocated),
                allocated_non_preemptible: amount(f.allocated_non_preemptible),
                requested: amount(f.requested),
                borrowed: amount(f.borrowed),
                lent: amount(f.lent),
            };
            (names.name(id).to_string(), status)
        })
        .collect();
    QueueStatus { conditions, children: report.children.clone(), resources, gangs: Some(gangs) }
}

/// An amount in a metric's base unit: cores for CPU, the engine's unit otherwise.
fn base_units(names: &ResourceNames, id: ResourceId, amount: i64) -> f64 {
    if id == ResourceId::CPU || names.name(id) == GPU_RESOURCE { amount as f64 / 1000.0 } else { amount as f64 }
}

/// Sets the queue gauges from this cycle's reports; queues gone since are dropped.
pub fn export(reports: &[QueueReport], names: &ResourceNames, metrics: &Metrics) {
    let gauges = [
        &metrics.queue_quota,
        &metrics.queue_fair_share,
        &metrics.queue_allocated,
        &metrics.queue_requested,
        &metrics.queue_limit,
    ];
    for gauge in gauges {
        gauge.reset();
    }
    metrics.queue_gangs.reset();
    for report in reports {
        metrics.queue_gangs.with_label_values(&[report.name.as_str(), "pending"]).set(report.pending_gangs as f64);
        metrics.queue_gangs.with_label_values(&[report.name.as_str(), "running"]).set(report.running_gangs as f64);
        for &(id, f) in &report.resources {
            let labels = [report.name.as_str(), names.name(id)];
            let set = |gauge: &prometheus::GaugeVec, amount: i64| {
                gauge.with_label_values(&labels).set(base_units(names, id, amount));
            };
            if let Some(quota) = f.quota {
                set(&metrics.queue_quota, quota);
            }
            if let Some(limit) = f.limit {
                set(&metrics.queue_limit, limit);
            }
            set(&metrics.queue_fair_share, f.fair_share);
            set(&metrics.queue_allocated, f.allocated);
            set(&metrics.queue_requested, f.requested);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::admission::report::Figures;

    #[test]
    fn a_queues_status_names_its_figures_and_its_problem() {
        let mut names = ResourceNames::default();
        let gpu = names.intern("nvidia.com/gpu");
        // GPUs in thousandths: half a GPU is 500.
        let figures = Figures {
            quota: Some(8000),
            limit: Some(12_000),
            fair_share: 10_000,
            allocated: 9500,
            requested: 4000,
            borrowed: 1500,
            ..Default::default()
        };
        let report = QueueReport {
            name: "team-a".into(),
            parent: None,
            children: vec![],
            problem: None,
            oversubscribed: false,
            resources: vec![(gpu, figures), (ResourceId::CPU, Figures { quota: Some(1500), ..Default::default() })],
            pending_gangs: 1,
            running_gangs: 2,
        };
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let status = queue_status(&report, &names, QueueGangCounts { pending: 1, running: 2 }, &[], &now);
        let gpus = &status.resources["nvidia.com/gpu"];
        assert_eq!((gpus.quota.as_str(), gpus.fair_share.as_str(), gpus.borrowed.as_str()), ("8", "10", "1.5"));
        assert_eq!(gpus.allocated, "9.5");
        assert_eq!(status.resources["cpu"].quota, "1500m");
        assert_eq!(status.conditions[0].status, "True");

        let broken = QueueReport { problem: Some("its parent queue gone does not exist".into()), ..report };
        let status = queue_status(&broken, &names, QueueGangCounts::default(), &[], &now);
        assert_eq!((status.conditions[0].status.as_str(), status.conditions[0].reason.as_str()), ("False", "Invalid"));
        assert_eq!(status.conditions[0].message, "its parent queue gone does not exist");
    }

    #[test]
    fn metrics_are_in_base_units_and_queues_gone_are_dropped() {
        let metrics = Metrics::new();
        let mut names = ResourceNames::default();
        let gpu = names.intern("nvidia.com/gpu");
        let report = QueueReport {
            name: "q".into(),
            parent: None,
            children: vec![],
            problem: None,
            oversubscribed: false,
            resources: vec![
                (ResourceId::CPU, Figures { quota: Some(1500), allocated: 500, ..Default::default() }),
                (gpu, Figures { quota: Some(2000), allocated: 1500, ..Default::default() }),
            ],
            pending_gangs: 3,
            running_gangs: 1,
        };
        export(std::slice::from_ref(&report), &names, &metrics);
        assert_eq!(metrics.queue_quota.with_label_values(&["q", "cpu"]).get(), 1.5);
        assert_eq!(metrics.queue_gangs.with_label_values(&["q", "pending"]).get(), 3.0);
        assert_eq!(metrics.queue_allocated.with_label_values(&["q", "cpu"]).get(), 0.5);
        // GPUs in GPUs: three half-GPU pods are 1.5.
        assert_eq!(metrics.queue_allocated.with_label_values(&["q", "nvidia.com/gpu"]).get(), 1.5);
        export(&[], &names, &metrics);
        let families = metrics.registry.gather();
        assert!(!families.iter().any(|f| f.name() == "muster_queue_quota" && !f.get_metric().is_empty()));
    }
}
