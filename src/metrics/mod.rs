//! Prometheus metrics of the scheduler: one registry with every metric in it.
//!
//! Names follow Prometheus' conventions: a `muster_` prefix, base units (`_seconds`), and
//! `_total` on counters only. docs/metrics.md lists every metric with its meaning.
//! Nothing here is measured inside the engine: the shell times its calls into it, and the
//! GPU figures are computed from the cluster's objects in `figures::gpus`. The HTTP server for
//! `/metrics`, `/healthz` and `/readyz`, shared with the node agent, is [`server`]; who may
//! read it, [`access`].

pub mod access;
pub mod ledger;
mod registrar;
pub mod server;
mod specs;

pub use access::{MetricsServer, UiAccess};
pub use server::{Error, Page, Probes, Result, Site, serve, serve_listener, serve_site};

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry, TextEncoder,
};

use registrar::Registrar;

/// Buckets for durations from a millisecond to a minute.
fn latency_buckets() -> Vec<f64> {
    vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
}

/// Buckets for how long gangs wait: a second to a day.
/// The bounds, in seconds, of the waiting histograms' buckets; the usage report and the
/// simulator's ledger count waits in the same ones.
pub const WAITING_BUCKETS: [f64; 13] =
    [1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0];

fn waiting_buckets() -> Vec<f64> {
    WAITING_BUCKETS.to_vec()
}

/// The kinds of background write, and their results, as the `muster_api_writes_total` labels.
pub const WRITE_KINDS: &[&str] =
    &["pod_condition", "event", "podgroup_status", "eviction", "pod_delete", "claim_release", "queue_status"];
pub const WRITE_RESULTS: &[&str] = &["written", "failed", "timed_out", "fenced"];

/// A metric's type, as Prometheus knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric the scheduler exports, registered in one [`Registry`].
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    catalog: Vec<(String, MetricKind)>,
    /// One cycle: snapshot, engine, placing the decisions (not the binds, which run apart).
    pub cycle_duration: Histogram,
    /// The cycle's parts: `assemble`, `cel`, `engine`, `plan`.
    pub cycle_phase_duration: HistogramVec,
    /// Gang attempts by result: `scheduled`, `unschedulable`, `error`, `bind_failed`.
    pub gang_attempts: IntCounterVec,
    /// Creation until `minMember` pods are bound (`until="bound"`) or Running (`until="running"`).
    pub gang_waiting: HistogramVec,
    /// Creation until bound, per queue and namespace (for usage reports).
    pub queue_gang_waiting: HistogramVec,
    /// Gangs bound (minMember of their pods), per queue and namespace.
    pub gangs_started: IntCounterVec,
    pub pending_pods: IntGauge,
    pub pending_gangs: IntGauge,
    /// Pending gangs in the unschedulable pool: not searched for again until a change
    /// could help them.
    pub parked_gangs: IntGauge,
    /// One gang's transaction: claim writes and every pod's binding.
    pub bind_duration: Histogram,
    pub bind_rollbacks: IntCounter,
    pub evictions: IntCounterVec,
    /// Claims given back: allocated for pods not bound whose gang is not being placed.
    pub claims_given_back: IntCounter,
    /// Evictions the API server refused (a PodDisruptionBudget, or an error), each try.
    pub eviction_refusals: IntCounter,
    /// Pods deleted because their eviction was refused `eviction.maxRefusals` times.
    pub evictions_forced: IntCounter,
    pub node_gpus: IntGaugeVec,
    pub node_gpus_allocated: IntGaugeVec,
    pub node_gpus_stranded: IntGaugeVec,
    pub node_gpus_held: IntGaugeVec,
    pub domain_gpus: IntGaugeVec,
    pub domain_gpus_allocated: IntGaugeVec,
    pub domain_gpus_stranded: IntGaugeVec,
    pub domain_gpus_held: IntGaugeVec,
    /// Per queue and resource key, in base units (cores, bytes, devices); only while
    /// Queue objects exist.
    pub queue_quota: GaugeVec,
    pub queue_fair_share: GaugeVec,
    pub queue_allocated: GaugeVec,
    pub queue_requested: GaugeVec,
    pub queue_limit: GaugeVec,
    pub queue_gangs: GaugeVec,
    /// Time spent evaluating CEL selectors on devices not seen before, per cycle.
    pub cel_evaluation_duration: Histogram,
    pub cel_evaluations: IntCounter,
    /// Writing one gang's claim allocations to the API server.
    pub device_allocation_duration: Histogram,
    /// 1 while this replica holds the leader lease (or runs without leader election).
    pub leader: IntGauge,
    /// When the scheduling loop last completed a cycle (Unix seconds).
    pub last_cycle: Gauge,
    /// Background writes (conditions, events, statuses, evictions, releases) by kind and result.
    pub writes: IntCounterVec,
    /// Background writes queued and not yet taken by a worker.
    pub write_queue_depth: IntGauge,
    /// GPU-seconds and GPU-memory-seconds per queue and namespace (`muster_gpu_seconds_total`).
    pub ledger: ledger::Ledger,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// One gang evicted, by reason, with its queue and namespace.
    pub fn evicted(&self, reason: &str, queue: &str, namespace: &str) {
        self.evictions.with_label_values(&[reason, queue, namespace]).inc();
    }

    /// Gangs evicted for `reason`, over every queue and namespace.
    pub fn evicted_for(&self, reason: &str) -> u64 {
        use prometheus::core::Collector;
        let families = self.evictions.collect();
        let metrics = families.iter().flat_map(|f| f.get_metric());
        let of_reason = metrics.filter(|m| m.get_label().iter().any(|l| l.name() == "reason" && l.value() == reason));
        of_reason.map(|m| m.get_counter().value() as u64).sum()
    }

    /// A fresh registry with every metric in it, all at zero.
    pub fn new() -> Metrics {
        let mut r = Registrar::default();
        let metrics = Metrics {
            cycle_duration: r.histogram(&specs::CYCLE_DURATION, latency_buckets()),
            cycle_phase_duration: r.histogram_vec(&specs::CYCLE_PHASE_DURATION, latency_buckets()),
            gang_attempts: r.counter_vec(&specs::GANG_ATTEMPTS),
            gang_waiting: r.histogram_vec(&specs::GANG_WAITING, waiting_buckets()),
            queue_gang_waiting: r.histogram_vec(&specs::QUEUE_GANG_WAITING, waiting_buckets()),
            gangs_started: r.counter_vec(&specs::GANGS_STARTED),
            pending_pods: r.gauge(&specs::PENDING_PODS),
            pending_gangs: r.gauge(&specs::PENDING_GANGS),
            parked_gangs: r.gauge(&specs::PARKED_GANGS),
            bind_duration: r.histogram(&specs::BIND_DURATION, latency_buckets()),
            bind_rollbacks: r.counter(&specs::BIND_ROLLBACKS),
            evictions: r.counter_vec(&specs::EVICTIONS),
            claims_given_back: r.counter(&specs::CLAIMS_GIVEN_BACK),
            eviction_refusals: r.counter(&specs::EVICTION_REFUSALS),
            evictions_forced: r.counter(&specs::EVICTIONS_FORCED),
            node_gpus: r.gauge_vec(&specs::NODE_GPUS),
            node_gpus_allocated: r.gauge_vec(&specs::NODE_GPUS_ALLOCATED),
            node_gpus_stranded: r.gauge_vec(&specs::NODE_GPUS_STRANDED),
            node_gpus_held: r.gauge_vec(&specs::NODE_GPUS_HELD),
            domain_gpus: r.gauge_vec(&specs::DOMAIN_GPUS),
            domain_gpus_allocated: r.gauge_vec(&specs::DOMAIN_GPUS_ALLOCATED),
            domain_gpus_stranded: r.gauge_vec(&specs::DOMAIN_GPUS_STRANDED),
            domain_gpus_held: r.gauge_vec(&specs::DOMAIN_GPUS_HELD),
            queue_quota: r.float_gauge_vec(&specs::QUEUE_QUOTA),
            queue_fair_share: r.float_gauge_vec(&specs::QUEUE_FAIR_SHARE),
            queue_allocated: r.float_gauge_vec(&specs::QUEUE_ALLOCATED),
            queue_requested: r.float_gauge_vec(&specs::QUEUE_REQUESTED),
            queue_limit: r.float_gauge_vec(&specs::QUEUE_LIMIT),
            queue_gangs: r.float_gauge_vec(&specs::QUEUE_GANGS),
            cel_evaluation_duration: r.histogram(&specs::CEL_EVALUATION_DURATION, latency_buckets()),
            cel_evaluations: r.counter(&specs::CEL_EVALUATIONS),
            device_allocation_duration: r.histogram(&specs::DEVICE_ALLOCATION_DURATION, latency_buckets()),
            leader: r.gauge(&specs::LEADER),
            last_cycle: r.float_gauge(&specs::LAST_CYCLE),
            writes: r.counter_vec(&specs::WRITES),
            write_queue_depth: r.gauge(&specs::WRITE_QUEUE_DEPTH),
            ledger: r.ledger(),
            catalog: r.catalog,
            registry: r.registry,
        };
        metrics.seed_series();
        metrics
    }

    /// Creates, at zero, the labelled series a dashboard expects before anything happened,
    /// so that a rate is zero rather than absent.
    fn seed_series(&self) {
        for result in ["scheduled", "unschedulable", "error", "bind_failed"] {
            self.gang_attempts.with_label_values(&[result]);
        }
        for reason in [
            "BindFailed",
            "PodsReadyTimeout",
            "GangBroken",
            "MaxRunExceeded",
            "Reclaimed",
            "Preempted",
            "Opportunistic",
        ] {
            self.evictions.with_label_values(&[reason, "", ""]);
        }
        for phase in ["assemble", "cel", "engine", "plan"] {
            self.cycle_phase_duration.with_label_values(&[phase]);
        }
        for until in ["bound", "running"] {
            self.gang_waiting.with_label_values(&[until]);
        }
        for kind in WRITE_KINDS {
            for result in WRITE_RESULTS {
                self.writes.with_label_values(&[kind, result]);
            }
        }
    }

    /// Every metric's name (a histogram by its base name), whether or not it has a series yet.
    pub fn names(&self) -> Vec<String> {
        self.catalog.iter().map(|(name, _)| name.clone()).collect()
    }

    /// Every metric with its type.
    pub fn catalog(&self) -> &[(String, MetricKind)] {
        &self.catalog
    }

    /// The series names a scrape can show: counters and gauges by their names, histograms
    /// as their `_bucket`, `_sum` and `_count` series.
    pub fn series_names(&self) -> Vec<String> {
        self.catalog
            .iter()
            .flat_map(|(name, kind)| match kind {
                MetricKind::Histogram => ["_bucket", "_sum", "_count"].iter().map(|s| format!("{name}{s}")).collect(),
                _ => vec![name.clone()],
            })
            .collect()
    }

    /// The registry in Prometheus' text format.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

/// A registry in Prometheus' text format.
pub fn render(registry: &Registry) -> String {
    TextEncoder::new().encode_to_string(&registry.gather()).unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_named_by_the_conventions() {
        for (name, kind) in Metrics::new().catalog() {
            assert!(name.starts_with("muster_"), "{name}");
            assert_eq!(name.ends_with("_total"), *kind == MetricKind::Counter, "{name}: _total is for counters only");
            if *kind == MetricKind::Histogram {
                assert!(name.ends_with("_seconds"), "{name}: histograms here measure time, in seconds");
            }
        }
    }

    #[test]
    fn evictions_are_counted_per_queue_and_namespace_and_summed_per_reason() {
        let metrics = Metrics::new();
        assert_eq!(metrics.evicted_for("Reclaimed"), 0);
        metrics.evicted("Reclaimed", "team-a", "ml");
        metrics.evicted("Reclaimed", "team-b", "cv");
        metrics.evicted("Preempted", "team-a", "ml");
        assert_eq!(metrics.evicted_for("Reclaimed"), 2);
        let text = render(&metrics.registry);
        assert!(
            text.contains("muster_evictions_total{namespace=\"ml\",queue=\"team-a\",reason=\"Reclaimed\"} 1"),
            "{text}"
        );
        // Present before any eviction, so that a rate is zero rather than absent.
        assert!(text.contains("muster_evictions_total{namespace=\"\",queue=\"\",reason=\"GangBroken\"} 0"), "{text}");
    }
}
