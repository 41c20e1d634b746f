//! Registering metrics from their [`MetricSpec`]s: each is made, added to the registry and noted
//! in the catalog (its name and type) in one call.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use super::MetricKind;
use super::ledger;
use super::specs::MetricSpec;

/// A registry being filled, with the catalog of what went into it so far.
#[derive(Default)]
pub struct Registrar {
    pub registry: Registry,
    pub catalog: Vec<(String, MetricKind)>,
}

impl Registrar {
    /// Notes `spec` in the catalog as `kind` and registers `metric`, handing it back.
    fn add<M: prometheus::core::Collector + Clone + 'static>(
        &mut self,
        spec: &MetricSpec,
        kind: MetricKind,
        metric: M,
    ) -> M {
        self.catalog.push((spec.name.to_string(), kind));
        self.registry.register(Box::new(metric.clone())).expect("unique metric name");
        metric
    }

    /// A histogram without labels, with the given bucket bounds.
    pub fn histogram(&mut self, spec: &MetricSpec, buckets: Vec<f64>) -> Histogram {
        let h =
            Histogram::with_opts(HistogramOpts::new(spec.name, spec.help).buckets(buckets)).expect("valid histogram");
        self.add(spec, MetricKind::Histogram, h)
    }

    /// A histogram with the spec's labels, with the given bucket bounds.
    pub fn histogram_vec(&mut self, spec: &MetricSpec, buckets: Vec<f64>) -> HistogramVec {
        let opts = HistogramOpts::new(spec.name, spec.help).buckets(buckets);
        let h = HistogramVec::new(opts, spec.labels).expect("valid histogram");
        self.add(spec, MetricKind::Histogram, h)
    }

    /// An integer counter without labels.
    pub fn counter(&mut self, spec: &MetricSpec) -> IntCounter {
        let c = IntCounter::new(spec.name, spec.help).expect("valid counter");
        self.add(spec, MetricKind::Counter, c)
    }

    /// An integer counter with the spec's labels.
    pub fn counter_vec(&mut self, spec: &MetricSpec) -> IntCounterVec {
        let c = IntCounterVec::new(Opts::new(spec.name, spec.help), spec.labels).expect("valid counter");
        self.add(spec, MetricKind::Counter, c)
    }

    /// An integer gauge without labels.
    pub fn gauge(&mut self, spec: &MetricSpec) -> IntGauge {
        let g = IntGauge::new(spec.name, spec.help).expect("valid gauge");
        self.add(spec, MetricKind::Gauge, g)
    }

    /// An integer gauge with the spec's labels.
    pub fn gauge_vec(&mut self, spec: &MetricSpec) -> IntGaugeVec {
        let g = IntGaugeVec::new(Opts::new(spec.name, spec.help), spec.labels).expect("valid gauge");
        self.add(spec, MetricKind::Gauge, g)
    }

    /// A floating-point gauge without labels.
    pub fn float_gauge(&mut self, spec: &MetricSpec) -> Gauge {
        let g = Gauge::new(spec.name, spec.help).expect("valid gauge");
        self.add(spec, MetricKind::Gauge, g)
    }

    /// A floating-point gauge with the spec's labels.
    pub fn float_gauge_vec(&mut self, spec: &MetricSpec) -> GaugeVec {
        let g = GaugeVec::new(Opts::new(spec.name, spec.help), spec.labels).expect("valid gauge");
        self.add(spec, MetricKind::Gauge, g)
    }

    /// The GPU-seconds ledger, whose two counters are noted in the catalog by name.
    pub fn ledger(&mut self) -> ledger::Ledger {
        let ledger = ledger::Ledger::new(ledger::unix_now());
        for name in [ledger::GPU_SECONDS, ledger::GPU_MEMORY_SECONDS] {
            self.catalog.push((name.to_string(), MetricKind::Counter));
        }
        self.registry.register(Box::new(ledger.clone())).expect("unique metric names");
        ledger
    }
}
