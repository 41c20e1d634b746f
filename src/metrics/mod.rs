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
pub mod server;

pub use access::{MetricsServer, UiAccess};
pub use server::{Error, Page, Probes, Result, Site, serve, serve_listener, serve_site};

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

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
        let registry = Registry::new();
        let catalog = std::cell::RefCell::new(Vec::new());
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Histogram));
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid histogram");
            registry.register(Box::new(h.clone())).expect("unique metric name");
            h
        };
        let histogram_vec = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Histogram));
            let h =
                HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels).expect("valid histogram");
            registry.register(Box::new(h.clone())).expect("unique metric name");
            h
        };
        let counter = |name: &str, help: &str| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Counter));
            let c = IntCounter::new(name, help).expect("valid counter");
            registry.register(Box::new(c.clone())).expect("unique metric name");
            c
        };
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Counter));
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            registry.register(Box::new(c.clone())).expect("unique metric name");
            c
        };
        let gauge = |name: &str, help: &str| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Gauge));
            let g = IntGauge::new(name, help).expect("valid gauge");
            registry.register(Box::new(g.clone())).expect("unique metric name");
            g
        };
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Gauge));
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            registry.register(Box::new(g.clone())).expect("unique metric name");
            g
        };
        let float_gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            catalog.borrow_mut().push((name.to_string(), MetricKind::Gauge));
            let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            registry.register(Box::new(g.clone())).expect("unique metric name");
            g
        };
        let mut metrics = Metrics {
            catalog: Vec::new(),
            cycle_duration: histogram(
                "muster_scheduling_cycle_duration_seconds",
                "Duration of one scheduling cycle: snapshot, engine and assuming its placements.",
                latency_buckets(),
            ),
            cycle_phase_duration: histogram_vec(
                "muster_scheduling_cycle_phase_duration_seconds",
                "Duration of each part of a scheduling cycle (assemble, cel, engine, plan).",
                &["phase"],
                latency_buckets(),
            ),
            gang_attempts: counter_vec(
                "muster_gang_scheduling_attempts_total",
                "Gang scheduling attempts by result (scheduled, unschedulable, error, bind_failed).",
                &["result"],
            ),
            gang_waiting: histogram_vec(
                "muster_gang_waiting_seconds",
                "Time from a gang's creation until minMember of its pods are bound (until=bound) or Running (until=running).",
                &["until"],
                waiting_buckets(),
            ),
            queue_gang_waiting: histogram_vec(
                "muster_queue_gang_waiting_seconds",
                "Time from a gang's creation until minMember of its pods are bound, by the queue it was admitted through and its namespace.",
                &["queue", "namespace"],
                waiting_buckets(),
            ),
            gangs_started: counter_vec(
                "muster_gangs_started_total",
                "Gangs bound (minMember of their pods), by queue and namespace.",
                &["queue", "namespace"],
            ),
            pending_pods: gauge("muster_pending_pods", "Muster's pods waiting for a node."),
            pending_gangs: gauge("muster_pending_gangs", "Gangs (gangs of one included) with pods waiting for a node."),
            parked_gangs: gauge(
                "muster_unschedulable_pool_gangs",
                "Pending gangs that did not fit and are not tried again until a change could help them.",
            ),
            bind_duration: histogram(
                "muster_gang_bind_duration_seconds",
                "Duration of one gang's binding transaction: claim writes and all of its pods' bindings.",
                latency_buckets(),
            ),
            bind_rollbacks: counter(
                "muster_gang_bind_rollbacks_total",
                "Gang bindings rolled back because fewer than minMember pods could be bound.",
            ),
            evictions: counter_vec(
                "muster_evictions_total",
                "Gangs evicted, once per gang and eviction, by reason: the safety net (BindFailed, PodsReadyTimeout, GangBroken, MaxRunExceeded) whole gangs, queues (Reclaimed, Preempted) whole gangs or their pods above minMember, a reservation (Opportunistic) whole gangs that ran in its held capacity. Labelled by the gang's queue and namespace; each reason also has a series with both empty, always present, so that a rate is zero rather than absent before the first eviction.",
                &["reason", "queue", "namespace"],
            ),
            claims_given_back: counter(
                "muster_claims_given_back_total",
                "ResourceClaims whose devices were given back: allocated for pods that are not bound, whose gang is not being placed (a leader that stopped between claim writes and binds, a lost answer). Counted each time the decision is made; the write is made once.",
            ),
            eviction_refusals: counter(
                "muster_eviction_refusals_total",
                "Evictions refused by the API server (a PodDisruptionBudget's 429, or an error), each try; a refused eviction is tried again after a doubling delay.",
            ),
            evictions_forced: counter(
                "muster_evictions_forced_total",
                "Pods deleted because their eviction was refused eviction.maxRefusals times, so that their gang does not stay half bound.",
            ),
            node_gpus: gauge_vec(
                "muster_node_gpus",
                "GPUs a node offers (extended resource or DRA devices).",
                &["node"],
            ),
            node_gpus_allocated: gauge_vec(
                "muster_node_gpus_allocated",
                "GPUs of a node held by bound pods or allocated claims.",
                &["node"],
            ),
            node_gpus_stranded: gauge_vec(
                "muster_node_gpus_stranded",
                "GPUs of a node held by pods of gangs with fewer than minMember pods bound.",
                &["node"],
            ),
            node_gpus_held: gauge_vec(
                "muster_node_gpus_held",
                "GPU devices of a node allocated to claims that no bound pod uses (held for pods that never ran); zero in a healthy cluster.",
                &["node"],
            ),
            domain_gpus: gauge_vec(
                "muster_topology_domain_gpus",
                "GPUs in a topology domain (a configured level's node label value).",
                &["level", "domain"],
            ),
            domain_gpus_allocated: gauge_vec(
                "muster_topology_domain_gpus_allocated",
                "GPUs of a topology domain held by bound pods or allocated claims.",
                &["level", "domain"],
            ),
            domain_gpus_stranded: gauge_vec(
                "muster_topology_domain_gpus_stranded",
                "GPUs of a topology domain held by pods of gangs with fewer than minMember pods bound.",
                &["level", "domain"],
            ),
            domain_gpus_held: gauge_vec(
                "muster_topology_domain_gpus_held",
                "GPU devices of a topology domain allocated to claims that no bound pod uses.",
                &["level", "domain"],
            ),
            queue_quota: float_gauge_vec(
                "muster_queue_quota",
                "A queue's guaranteed amount of a resource (unset: not exported).",
                &["queue", "resource"],
            ),
            queue_fair_share: float_gauge_vec(
                "muster_queue_fair_share",
                "A queue's fair share of a resource, from quota, priority, weight and demand.",
                &["queue", "resource"],
            ),
            queue_allocated: float_gauge_vec(
                "muster_queue_allocated",
                "What a queue's running gangs (its subtree's) request of a resource.",
                &["queue", "resource"],
            ),
            queue_requested: float_gauge_vec(
                "muster_queue_requested",
                "What a queue's pending gangs (its subtree's) request of a resource.",
                &["queue", "resource"],
            ),
            queue_limit: float_gauge_vec(
                "muster_queue_limit",
                "A queue's hard cap on a resource (unset: not exported).",
                &["queue", "resource"],
            ),
            queue_gangs: float_gauge_vec(
                "muster_queue_gangs",
                "Gangs in a queue's subtree, by state (pending, running).",
                &["queue", "state"],
            ),
            cel_evaluation_duration: histogram(
                "muster_cel_evaluation_duration_seconds",
                "Time per cycle spent evaluating CEL device selectors on devices whose result was not cached.",
                latency_buckets(),
            ),
            cel_evaluations: counter(
                "muster_cel_evaluations_total",
                "CEL device selector evaluations (results cached per device revision are not counted again).",
            ),
            device_allocation_duration: histogram(
                "muster_device_allocation_duration_seconds",
                "Duration of writing one gang's ResourceClaim allocations to the API server.",
                latency_buckets(),
            ),
            leader: gauge("muster_leader", "1 while this replica is the leader and schedules, else 0."),
            last_cycle: {
                let name = "muster_last_cycle_timestamp_seconds";
                catalog.borrow_mut().push((name.to_string(), MetricKind::Gauge));
                let g = Gauge::new(name, "When the scheduling loop last completed a cycle, in Unix seconds.")
                    .expect("valid gauge");
                registry.register(Box::new(g.clone())).expect("unique metric name");
                g
            },
            writes: counter_vec(
                "muster_api_writes_total",
                "Background writes to the API server (pod conditions, events, PodGroup and Queue status, evictions, deletes of pods whose eviction was refused too often, claim releases) by kind and result (written, failed, timed_out, fenced: not sent, since the Lease may have passed).",
                &["kind", "result"],
            ),
            write_queue_depth: gauge(
                "muster_api_write_queue_depth",
                "Background writes queued (newest state per object) and not yet taken by a writer.",
            ),
            ledger: {
                let ledger = ledger::Ledger::new(ledger::unix_now());
                for name in [ledger::GPU_SECONDS, ledger::GPU_MEMORY_SECONDS] {
                    catalog.borrow_mut().push((name.to_string(), MetricKind::Counter));
                }
                registry.register(Box::new(ledger.clone())).expect("unique metric names");
                ledger
            },
            registry,
        };
        for result in ["scheduled", "unschedulable", "error", "bind_failed"] {
            metrics.gang_attempts.with_label_values(&[result]);
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
            metrics.evictions.with_label_values(&[reason, "", ""]);
        }
        metrics.catalog = catalog.into_inner();
        for phase in ["assemble", "cel", "engine", "plan"] {
            metrics.cycle_phase_duration.with_label_values(&[phase]);
        }
        for until in ["bound", "running"] {
            metrics.gang_waiting.with_label_values(&[until]);
        }
        for kind in WRITE_KINDS {
            for result in WRITE_RESULTS {
                metrics.writes.with_label_values(&[kind, result]);
            }
        }
        metrics
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
