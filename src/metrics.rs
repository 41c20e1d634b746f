//! Prometheus metrics of the scheduler, and the HTTP server for `/metrics`, `/healthz` and
//! `/readyz` that the scheduler and the node agent share.
//!
//! Names follow Prometheus' conventions: a `muster_` prefix, base units (`_seconds`), and
//! `_total` on counters only. docs/metrics.md lists every metric with its meaning.
//! Nothing here is measured inside the engine: the shell times its calls into it, and the
//! GPU figures are computed from the cluster's objects by [`gpu_usage`], a pure function.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::TopologyLevel;
use crate::k8s::assemble::{ClusterView, GroupSummary, gang_key};

#[derive(Debug, Error)]
pub enum Error {
    #[error("failed to listen for metrics on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("failed to accept a metrics connection: {0}")]
    Accept(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The extended resource GPUs are counted under on nodes that advertise them.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// DRA drivers whose devices are GPUs: NVIDIA's and Muster's node agent's.
pub const GPU_DRIVERS: &[&str] = &["gpu.nvidia.com", "gpu.muster.dev"];

/// Buckets for durations from a millisecond to a minute.
fn latency_buckets() -> Vec<f64> {
    vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
}

/// Buckets for how long gangs wait: a second to a day.
fn waiting_buckets() -> Vec<f64> {
    vec![1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0]
}

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
    pub pending_pods: IntGauge,
    pub pending_gangs: IntGauge,
    /// One gang's transaction: claim writes and every pod's binding.
    pub bind_duration: Histogram,
    pub bind_rollbacks: IntCounter,
    pub evictions: IntCounterVec,
    pub node_gpus: IntGaugeVec,
    pub node_gpus_allocated: IntGaugeVec,
    pub node_gpus_stranded: IntGaugeVec,
    pub domain_gpus: IntGaugeVec,
    pub domain_gpus_allocated: IntGaugeVec,
    pub domain_gpus_stranded: IntGaugeVec,
    /// Time spent evaluating CEL selectors on devices not seen before, per cycle.
    pub cel_evaluation_duration: Histogram,
    pub cel_evaluations: IntCounter,
    /// Writing one gang's claim allocations to the API server.
    pub device_allocation_duration: Histogram,
    /// 1 while this replica holds the leader lease (or runs without leader election).
    pub leader: IntGauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
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
            pending_pods: gauge("muster_pending_pods", "Muster's pods waiting for a node."),
            pending_gangs: gauge("muster_pending_gangs", "Gangs (gangs of one included) with pods waiting for a node."),
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
                "muster_gang_evictions_total",
                "Gangs evicted whole, by reason (BindFailed, PodsReadyTimeout, GangBroken).",
                &["reason"],
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
            registry,
        };
        for result in ["scheduled", "unschedulable", "error", "bind_failed"] {
            metrics.gang_attempts.with_label_values(&[result]);
        }
        for reason in ["BindFailed", "PodsReadyTimeout", "GangBroken"] {
            metrics.evictions.with_label_values(&[reason]);
        }
        metrics.catalog = catalog.into_inner();
        for phase in ["assemble", "cel", "engine", "plan"] {
            metrics.cycle_phase_duration.with_label_values(&[phase]);
        }
        for until in ["bound", "running"] {
            metrics.gang_waiting.with_label_values(&[until]);
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

    /// Replaces the GPU gauges with `usage`, dropping nodes and domains that are gone.
    pub fn set_gpus(&self, usage: &GpuUsage) {
        for vec in [&self.node_gpus, &self.node_gpus_allocated, &self.node_gpus_stranded] {
            vec.reset();
        }
        for vec in [&self.domain_gpus, &self.domain_gpus_allocated, &self.domain_gpus_stranded] {
            vec.reset();
        }
        for (node, gpus) in &usage.nodes {
            self.node_gpus.with_label_values(&[node]).set(gpus.total);
            self.node_gpus_allocated.with_label_values(&[node]).set(gpus.allocated);
            self.node_gpus_stranded.with_label_values(&[node]).set(gpus.stranded);
        }
        for ((level, domain), gpus) in &usage.domains {
            self.domain_gpus.with_label_values(&[level, domain]).set(gpus.total);
            self.domain_gpus_allocated.with_label_values(&[level, domain]).set(gpus.allocated);
            self.domain_gpus_stranded.with_label_values(&[level, domain]).set(gpus.stranded);
        }
    }

    /// The registry in Prometheus' text format.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

fn render(registry: &Registry) -> String {
    TextEncoder::new().encode_to_string(&registry.gather()).unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
}

/// GPUs of one node or domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gpus {
    pub total: i64,
    pub allocated: i64,
    pub stranded: i64,
}

impl std::ops::AddAssign for Gpus {
    fn add_assign(&mut self, other: Gpus) {
        self.total += other.total;
        self.allocated += other.allocated;
        self.stranded += other.stranded;
    }
}

/// GPUs by node and by (level, domain).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuUsage {
    pub nodes: BTreeMap<String, Gpus>,
    pub domains: BTreeMap<(String, String), Gpus>,
}

fn gpus_requested(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else { return 0 };
    let per_container = |c: &k8s_openapi::api::core::v1::Container| {
        let resources = c.resources.as_ref();
        let get = |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.and_then(|m| m.get(GPU_RESOURCE)).and_then(|q| q.0.parse::<i64>().ok())
        };
        resources.and_then(|r| get(r.requests.as_ref()).or_else(|| get(r.limits.as_ref()))).unwrap_or(0)
    };
    let regular: i64 = spec.containers.iter().map(per_container).sum();
    let init = spec.init_containers.iter().flatten().map(per_container).max().unwrap_or(0);
    regular.max(init)
}

fn is_gpu_device(driver: &str, device: &k8s_openapi::api::resource::v1::Device) -> bool {
    if !GPU_DRIVERS.contains(&driver) {
        return false;
    }
    // NVIDIA's driver publishes MIG slices too; only whole GPUs count.
    let kind = device.attributes.as_ref().and_then(|a| a.get("type")).and_then(|v| v.string.as_deref());
    kind.is_none_or(|k| k == "gpu")
}

/// GPUs total, allocated and stranded per node and per topology domain, from the cluster's
/// objects. A node's GPUs are its `nvidia.com/gpu` allocatable when it advertises one, else
/// the GPU devices its ResourceSlices publish. Allocated: requested by bound, unfinished
/// pods, plus devices of allocated claims. Stranded: the part of that held by pods of a gang
/// (`groups`) with at least one but fewer than `minMember` pods bound. Levels whose label
/// is the host name are left out of the domains (they repeat the nodes).
pub fn gpu_usage(view: &ClusterView<'_>, groups: &[GroupSummary], levels: &[TopologyLevel]) -> GpuUsage {
    let mut usage = GpuUsage::default();
    let mut extended: HashSet<&str> = HashSet::new();
    for node in &view.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let advertised = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(GPU_RESOURCE))
            .and_then(|q| q.0.parse::<i64>().ok())
            .unwrap_or(0);
        if advertised > 0 {
            extended.insert(name);
        }
        usage.nodes.insert(name.to_string(), Gpus { total: advertised, ..Gpus::default() });
    }
    // Device (driver, pool, name) → node, for GPU devices of nodes without the extended resource.
    let mut device_node: HashMap<(&str, &str, &str), &str> = HashMap::new();
    for slice in &view.resource_slices {
        let Some(node) = slice.spec.node_name.as_deref() else { continue };
        let Some(gpus) = usage.nodes.get_mut(node) else { continue };
        let driver = slice.spec.driver.as_str();
        for device in slice.spec.devices.iter().flatten() {
            if is_gpu_device(driver, device) {
                device_node.insert((driver, slice.spec.pool.name.as_str(), device.name.as_str()), node);
                if !extended.contains(node) {
                    gpus.total += 1;
                }
            }
        }
    }
    let stranded_gangs: HashSet<&crate::engine::model::GangKey> =
        groups.iter().filter(|g| g.bound > 0 && g.bound < g.min_member).map(|g| &g.key).collect();
    let mut stranded_pods: HashSet<(&str, &str)> = HashSet::new();
    for pod in &view.pods {
        let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else { continue };
        if finished {
            continue;
        }
        let stranded = stranded_gangs.contains(&gang_key(pod));
        if stranded {
            stranded_pods.insert((
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
            ));
        }
        if let Some(gpus) = usage.nodes.get_mut(node) {
            let n = gpus_requested(pod);
            gpus.allocated += n;
            if stranded {
                gpus.stranded += n;
            }
        }
    }
    for claim in &view.resource_claims {
        let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else { continue };
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let stranded = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).is_some_and(|r| {
            r.iter().any(|c| c.resource == "pods" && stranded_pods.contains(&(namespace, c.name.as_str())))
        });
        let results = allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default();
        for result in results {
            let key = (result.driver.as_str(), result.pool.as_str(), result.device.as_str());
            let Some(node) = device_node.get(&key) else { continue };
            if extended.contains(node) {
                continue;
            }
            if let Some(gpus) = usage.nodes.get_mut(*node) {
                gpus.allocated += 1;
                if stranded {
                    gpus.stranded += 1;
                }
            }
        }
    }
    for node in &view.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let Some(&gpus) = usage.nodes.get(name) else { continue };
        let labels = node.metadata.labels.as_ref();
        for level in levels.iter().filter(|l| l.node_label != "kubernetes.io/hostname") {
            if let Some(domain) = labels.and_then(|l| l.get(&level.node_label)) {
                *usage.domains.entry((level.name.clone(), domain.clone())).or_default() += gpus;
            }
        }
    }
    usage
}

/// Serves `/metrics` (the registry), `/healthz` (200 while the process serves) and `/readyz`
/// (200 once `ready` holds true) on `addr`, until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    ready: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    serve_listener(listener, registry, ready, shutdown).await
}

/// [`serve`] on a listener already bound (tests bind port 0 and read the port back).
pub async fn serve_listener(
    listener: TcpListener,
    registry: Registry,
    ready: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => {
                let (stream, _) = accepted.map_err(Error::Accept)?;
                let (registry, ready) = (registry.clone(), ready.clone());
                let service = hyper::service::service_fn(move |request| {
                    let response = respond(&request, &registry, &ready);
                    async move { Ok::<_, Infallible>(response) }
                });
                connections.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                        tracing::debug!(error = %e, "metrics connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

fn respond<B>(request: &Request<B>, registry: &Registry, ready: &watch::Receiver<bool>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET\n".into());
    }
    match request.uri().path() {
        "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4", render(registry)),
        "/healthz" | "/livez" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if *ready.borrow() => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "not ready\n".into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /metrics, /healthz or /readyz\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::{GangKey, GangKind};
    use crate::k8s::assemble::ClusterObjects;
    use serde_json::json;

    fn node(name: &str, rack: &str, gpus: u32) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"topology.muster.dev/rack": rack, "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()}},
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, gpus: u32, group: Option<&str>) -> Pod {
        let labels = group.map_or(json!({}), |g| json!({"muster.dev/pod-group": g}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "labels": labels},
            "spec": {"nodeName": node, "schedulerName": "muster", "containers": [{"name": "c",
                     "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        }))
        .unwrap()
    }

    #[test]
    fn gpus_are_counted_per_node_and_rack_and_a_half_placed_gang_strands_its_gpus() {
        let objects = ClusterObjects {
            nodes: vec![node("a", "r1", 8), node("b", "r1", 8), node("c", "r2", 8)],
            pods: vec![
                pod("whole-0", Some("a"), 4, Some("whole")),
                pod("whole-1", Some("a"), 4, Some("whole")),
                pod("half-0", Some("b"), 8, Some("half")),
                pod("half-1", None, 8, Some("half")),
                pod("alone", Some("c"), 2, None),
            ],
            ..Default::default()
        };
        let key = |name: &str| GangKey { kind: GangKind::Muster, namespace: "ml".into(), name: name.into() };
        let groups = vec![
            GroupSummary { key: key("whole"), min_member: 2, bound: 2 },
            GroupSummary { key: key("half"), min_member: 2, bound: 1 },
        ];
        let usage = gpu_usage(&objects.view(), &groups, &crate::config::Config::default().topology);
        let gpus = |total, allocated, stranded| Gpus { total, allocated, stranded };
        assert_eq!(usage.nodes["a"], gpus(8, 8, 0));
        assert_eq!(usage.nodes["b"], gpus(8, 8, 8));
        assert_eq!(usage.nodes["c"], gpus(8, 2, 0));
        assert_eq!(usage.domains[&("rack".to_string(), "r1".to_string())], gpus(16, 16, 8));
        assert_eq!(usage.domains[&("rack".to_string(), "r2".to_string())], gpus(8, 2, 0));
        assert!(usage.domains.keys().all(|(level, _)| level != "host"), "hosts repeat the nodes");

        let metrics = Metrics::new();
        metrics.set_gpus(&usage);
        let text = metrics.render();
        assert!(text.contains("muster_node_gpus_stranded{node=\"b\"} 8"), "{text}");
        assert!(text.contains("muster_topology_domain_gpus{domain=\"r1\",level=\"rack\"} 16"), "{text}");
    }

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

    async fn get(port: u16, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn the_server_serves_metrics_health_and_readiness_until_shut_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let metrics = Metrics::new();
        metrics.pending_gangs.set(3);
        let (ready_tx, ready_rx) = watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_listener(listener, metrics.registry.clone(), ready_rx, async {
            let _ = stop_rx.await;
        }));
        let scraped = get(port, "/metrics").await;
        assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
        assert!(scraped.contains("muster_pending_gangs 3"), "{scraped}");
        assert!(get(port, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(port, "/readyz").await.starts_with("HTTP/1.1 503"));
        ready_tx.send_replace(true);
        assert!(get(port, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(port, "/nothing").await.starts_with("HTTP/1.1 404"));
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
