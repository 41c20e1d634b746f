//! The Grafana dashboards against a real Prometheus: Prometheus (`MUSTER_PROMETHEUS_BIN`, else
//! `prometheus` on the PATH; `hack/test.sh` installs Debian's package when it is missing)
//! scrapes a scheduler and a node agent on loopback every second while gangs bind, wait,
//! hold GPUs half placed and are refused their eviction, and every query of every dashboard in `manifests/grafana/` must be
//! valid PromQL to Prometheus itself and return data.
//!
//! Grafana's variables are substituted as Grafana would: `$__interval` is the query step
//! (1 s here), `$__rate_interval` four scrape intervals (Grafana's floor for it),
//! `$__range` the span of the run. A query variable (`label_values(metric, label)`) is
//! resolved against Prometheus: it must find values, and it takes `.*` (or its
//! `allValue`) when it offers "All", else its saved current value when Prometheus has that
//! value, else the first value, as Grafana picks on load. Panels are drawn from range
//! queries over the dashboard's time range, so a query returns data when some step of the
//! run has a finite sample.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use muster::agent::metrics::AgentMetrics;
use muster::agent::options::AgentOptions;
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::api::queue::Queue;
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::scheduler::{Options, health_for};
use muster::k8s::write::bind::{BindHook, HookAction};
use muster::metrics::Metrics;
use serde_json::{Value, json};

use crate::support::cluster::{TEST_LABEL, within};
use crate::support::gangs::{GROUP_LABEL, in_group};
use crate::support::wait::{node_of, phase, unschedulable_message, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler, process};

/// How often Prometheus scrapes; the query step and `$__interval` too.
const SCRAPE_SECONDS: u64 = 1;

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a test object that parses")
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs_f64()
}

/// A Prometheus process, killed when dropped.
struct Prometheus {
    pid: u32,
    port: u16,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // SAFETY: signalling our own child (kept unreaped by the process registry, so the pid
        // is still its own) has no memory-safety preconditions.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (job name, port on 127.0.0.1) every second, with
    /// its own configuration and storage in a fresh folder, on a free loopback port.
    fn start(name: &str, targets: &[(&str, u16)]) -> Prometheus {
        let binary = std::env::var("MUSTER_PROMETHEUS_BIN").unwrap_or_else(|_| "prometheus".into());
        let dir = std::env::temp_dir().join(format!("muster-e2e-prometheus-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let mut config = format!(
            "global:\n  scrape_interval: {SCRAPE_SECONDS}s\n  scrape_timeout: {SCRAPE_SECONDS}s\n  evaluation_interval: {SCRAPE_SECONDS}s\nscrape_configs:\n"
        );
        for (job, port) in targets {
            config.push_str(&format!("- job_name: {job}\n  static_configs:\n  - targets: ['127.0.0.1:{port}']\n"));
        }
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let mut command = std::process::Command::new(&binary);
        command
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let pid = process::spawn(command).unwrap_or_else(|e| {
            panic!("failed to start {binary} ({e}); hack/test.sh installs Debian's prometheus package, or set MUSTER_PROMETHEUS_BIN")
        });
        Prometheus { pid, port, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// GETs `path_and_query` from Prometheus' HTTP API; the JSON answer, error answers included.
    async fn get(&self, path_and_query: &str) -> Option<Value> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
        // HTTP/1.0: the answer is neither chunked nor kept alive, so it ends where the stream does.
        let request = format!("GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (_, body) = response.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    }

    async fn api(&self, path: &str, params: &[(&str, String)]) -> Value {
        let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let url = format!("{path}?{}", query.join("&"));
        self.get(&url).await.unwrap_or_else(|| panic!("no answer from Prometheus to {url}; its log:\n{}", self.log()))
    }

    /// Waits until every scrape target is up.
    async fn wait_for_targets(&self, count: usize) {
        within(60, "Prometheus to scrape the scheduler and the agent", async {
            loop {
                if let Some(answer) = self.get("/api/v1/query?query=up%20%3D%3D%201").await
                    && answer["data"]["result"].as_array().is_some_and(|r| r.len() == count)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("address").port()
}

/// Percent-encodes a query parameter.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Serves `registry` on a free loopback port, as the processes serve their metrics.
async fn serve(registry: prometheus::Registry, probes: Arc<dyn muster::metrics::Probes>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        let _ = muster::metrics::serve_listener(listener, registry, probes, std::future::pending()).await;
    });
    port
}

/// `muster agent`'s flags, parsed as the binary parses them.
#[derive(Parser)]
struct AgentCommand {
    #[command(flatten)]
    options: AgentOptions,
}

/// The second pod of gang `held` waits before it is bound, the first time: its claim is
/// allocated meanwhile and no bound pod uses it, so its GPU shows as held. While a binding is
/// in flight the GPU gauges are refreshed only 5 s after the last refresh, so the pause
/// outlasts that by a few scrapes.
struct SlowSecondBind {
    paused: AtomicBool,
}

impl BindHook for SlowSecondBind {
    fn before_bind(&self, gang: &GangKey, index: usize, _: &PodKey) -> HookAction {
        if gang.name == "held" && index == 1 && !self.paused.swap(true, Ordering::SeqCst) {
            HookAction::Pause(Duration::from_secs(9))
        } else {
            HookAction::Proceed
        }
    }
}

/// A PodGroup `name` of `pods` pods, each with its own claim of one GPU, in `queue`.
async fn create_gang(cluster: &TestCluster, name: &str, pods: usize, queue: Option<String>) {
    let group = PodGroup::new(name, PodGroupSpec { min_member: pods as i32, queue, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    for i in 0..pods {
        let mut pod = builders::pod(&format!("{name}-{i}"), &cluster.scheduler_name, 0, &[(GROUP_LABEL, name)]);
        let spec = pod.spec.as_mut().unwrap();
        spec.resource_claims = Some(vec![typed(json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}))]);
        spec.containers[0].resources.get_or_insert_default().claims = Some(vec![typed(json!({"name": "gpu"}))]);
        cluster.create(&cluster.api::<Pod>(), &pod).await;
    }
}

fn running_in(all: &[Pod], group: &str) -> usize {
    in_group(all, group).iter().filter(|p| phase(p) == "Running").count()
}

fn bound_in(all: &[Pod], group: &str) -> usize {
    in_group(all, group).iter().filter(|p| node_of(p).is_some()).count()
}

/// Every `expr` of every panel target of a dashboard, with the panel's title, nested rows
/// included.
fn targets(value: &Value, title: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            let title = map.get("title").and_then(Value::as_str).unwrap_or(title);
            if let Some(Value::Array(list)) = map.get("targets") {
                for target in list {
                    if let Some(expr) = target.get("expr").and_then(Value::as_str) {
                        out.push((title.to_string(), expr.to_string()));
                    }
                }
            }
            for (key, v) in map {
                if key != "targets" && key != "templating" {
                    targets(v, title, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| targets(v, title, out)),
        _ => {}
    }
}

/// The value Grafana gives each template variable of `dashboard` on load, from Prometheus.
async fn variables(prometheus: &Prometheus, file: &str, dashboard: &Value) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().expect("a variable has a name").to_string();
        let kind = variable["type"].as_str().unwrap_or("query");
        let current = variable["current"]["value"].as_str().map(str::to_string);
        let value = match kind {
            // Names the data source; no query reads it.
            "datasource" => continue,
            "constant" | "textbox" => variable["query"].as_str().unwrap_or_default().to_string(),
            "custom" | "interval" => current.unwrap_or_else(|| {
                let query = variable["query"].as_str().unwrap_or_default();
                query.split(',').next().unwrap_or_default().trim().to_string()
            }),
            "query" => {
                let query = variable["query"]
                    .as_str()
                    .or_else(|| variable["query"]["query"].as_str())
                    .or_else(|| variable["definition"].as_str())
                    .unwrap_or_else(|| panic!("{file}: variable {name} has no query"));
                let found = label_values(prometheus, file, &name, query).await;
                if variable["includeAll"].as_bool() == Some(true) {
                    variable["allValue"].as_str().unwrap_or(".*").to_string()
                } else {
                    match current {
                        Some(current) if found.contains(&current) => current,
                        _ => found[0].clone(),
                    }
                }
            }
            other => panic!("{file}: variable {name} is of a type this test does not resolve: {other}"),
        };
        values.insert(name, value);
    }
    values
}

/// The values of a `label_values(metric, label)` or `label_values(label)` variable query,
/// which must find some: a variable without values leaves its panels empty.
async fn label_values(prometheus: &Prometheus, file: &str, name: &str, query: &str) -> Vec<String> {
    let inner =
        query.trim().strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')).unwrap_or_else(|| {
            panic!("{file}: variable {name}: only label_values(...) queries are resolved, not {query}")
        });
    let (metric, label) = match inner.rsplit_once(',') {
        Some((metric, label)) => (Some(metric.trim()), label.trim()),
        None => (None, inner.trim()),
    };
    let params: Vec<(&str, String)> = metric.map(|m| ("match[]", m.to_string())).into_iter().collect();
    let answer = prometheus.api(&format!("/api/v1/label/{label}/values"), &params).await;
    assert_eq!(answer["status"], "success", "{file}: variable {name} ({query}): {answer}");
    let found: Vec<String> =
        answer["data"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
    assert!(!found.is_empty(), "{file}: variable {name} ({query}) finds no values");
    found
}

/// `expr` with Grafana's built-in and the dashboard's variables replaced.
fn substitute(expr: &str, variables: &BTreeMap<String, String>, range_seconds: u64) -> String {
    let mut all: Vec<(String, String)> = vec![
        ("__rate_interval".into(), format!("{}s", 4 * SCRAPE_SECONDS)),
        ("__interval_ms".into(), (SCRAPE_SECONDS * 1000).to_string()),
        ("__interval".into(), format!("{SCRAPE_SECONDS}s")),
        ("__range_s".into(), range_seconds.to_string()),
        ("__range_ms".into(), (range_seconds * 1000).to_string()),
        ("__range".into(), format!("{range_seconds}s")),
    ];
    all.extend(variables.iter().map(|(k, v)| (k.clone(), v.clone())));
    // Longest names first, so that `$__interval` does not eat the start of `$__interval_ms`.
    all.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut out = expr.to_string();
    for (name, value) in &all {
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("[[{name}]]"), value);
        out = out.replace(&format!("${name}"), value);
    }
    out
}

/// Whether a range query's answer has a finite sample somewhere.
fn has_data(answer: &Value) -> bool {
    answer["data"]["result"].as_array().into_iter().flatten().any(|series| {
        series["values"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|point| point[1].as_str().and_then(|v| v.parse::<f64>().ok()).is_some_and(f64::is_finite))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_data_from_a_real_prometheus_while_gangs_run() {
    let cluster = TestCluster::new("prometheus").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;

    // One node in zone z1, block b1, rack r1, whose eight GPUs the agent publishes from a
    // fake source under its own driver, which the GPU metrics count.
    let node = cluster.name("n1");
    let labels = [
        (TEST_LABEL, cluster.id.as_str()),
        ("topology.kubernetes.io/zone", "z1"),
        ("topology.muster.dev/block", "b1"),
        ("topology.muster.dev/rack", "r1"),
    ];
    cluster.create_node(&builders::node(&node, 64, 512, 0, &labels)).await;
    let argv = ["agent", "--mode", "driver", "--node-name", &node, "--fake-gpus", "8", "--poll-interval-seconds", "1"];
    let options = AgentCommand::parse_from(argv).options;
    let agent_metrics = AgentMetrics::new();
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    let agent_port = serve(agent_metrics.registry.clone(), Arc::new(ready_rx)).await;
    let agent_client = cluster.client.clone();
    let agent = tokio::spawn(async move {
        let (gpus, _) = tokio::sync::watch::channel(Vec::new());
        if let Err(e) =
            muster::agent::run::run(agent_client, options, &agent_metrics, gpus, ready_tx, std::future::pending()).await
        {
            panic!("the agent stopped: {e}");
        }
    });

    // A class with a CEL selector (so the CEL metrics move), one claim per pod.
    let class = builders::device_class(&cluster.name("gpu"), "gpu.muster.dev");
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &class).await;
    let template: ResourceClaimTemplate = typed(json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cluster.name("gpu")}}]}}},
    }));
    cluster.create(&cluster.api::<ResourceClaimTemplate>(), &template).await;
    let team = cluster.name("team");
    let queue: Queue = typed(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": team},
        "spec": {"resources": {"nvidia.com/gpu": {"quota": "4"}}},
    }));
    cluster.create(&cluster.cluster_api::<Queue>(), &queue).await;
    let lab = cluster.name("lab");
    let queue: Queue = typed(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": lab},
        "spec": {"resources": {"nvidia.com/gpu": {"quota": "2"}}},
    }));
    cluster.create(&cluster.cluster_api::<Queue>(), &queue).await;

    let config = scheduler::config(&cluster);
    let metrics = Arc::new(Metrics::new());
    let health = health_for(&config);
    let scheduler_port = serve(metrics.registry.clone(), health.clone()).await;
    let hook = Arc::new(SlowSecondBind { paused: AtomicBool::new(false) });
    let options = Options { metrics, health: Some(health), hook: Some(hook), ..Default::default() };
    let _muster = scheduler::start_with(&cluster, config, options);
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());

    let prometheus = Prometheus::start(&cluster.id, &[("muster", scheduler_port), ("muster-agent", agent_port)]);
    let started = unix_now();
    prometheus.wait_for_targets(2).await;

    // A gang of the team's queue and one of the lab's bind and run while Prometheus watches.
    create_gang(&cluster, "first", 2, Some(team.clone())).await;
    create_gang(&cluster, "second", 1, Some(lab.clone())).await;
    wait_for_pods(&cluster, 60, "gangs first and second running", |all| {
        running_in(all, "first") == 2 && running_in(all, "second") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3 * SCRAPE_SECONDS)).await;

    // A gang bound one pod at a time, slowly: its second claim held for a few scrapes.
    // Meanwhile a gang of the team too big for the node's free GPUs comes, and waits.
    create_gang(&cluster, "held", 2, None).await;
    wait_for_pods(&cluster, 60, "gang held half bound", |all| bound_in(all, "held") == 1).await;
    create_gang(&cluster, "waiting", 7, Some(team.clone())).await;
    // A pair of which one pod is bound by hand, as another scheduler would leave it, and a
    // budget that refuses its eviction: its GPU shows as stranded while the safety net retries.
    let budget: PodDisruptionBudget = typed(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "stray"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {GROUP_LABEL: "stray"}}},
    }));
    cluster.create(&cluster.api::<PodDisruptionBudget>(), &budget).await;
    let group = PodGroup::new("stray", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    for i in 0..2 {
        let pod = builders::pod(&format!("stray-{i}"), &cluster.scheduler_name, 1, &[(GROUP_LABEL, "stray")]);
        cluster.create(&cluster.api::<Pod>(), &pod).await;
    }
    cluster.bind("stray-0", &node).await;
    wait_for_pods(&cluster, 60, "gang held running, stray half running, waiting unschedulable", |all| {
        running_in(all, "held") == 2
            && running_in(all, "stray") == 1
            && in_group(all, "waiting").iter().any(|p| node_of(p).is_none() && unschedulable_message(p).is_some())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4 * SCRAPE_SECONDS)).await;
    // The stray's GPU shows as stranded once a housekeeping pass has counted it and a scrape
    // has read it, which a loaded machine may take longer to do.
    let stranded = "max(muster_node_gpus_stranded)".to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let answer = prometheus.api("/api/v1/query", &[("query", stranded.clone())]).await;
        let value = answer["data"]["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok());
        if value.is_some_and(|v| v > 0.0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no stranded GPU scraped within a minute: {answer}");
        tokio::time::sleep(Duration::from_secs(SCRAPE_SECONDS)).await;
    }

    // The agent's series are scraped too, one per GPU.
    let end = unix_now();
    gpu_seconds_match_the_binding_times(&cluster, &prometheus, &[(&team, "first"), (&lab, "second")], started).await;
    let answer = prometheus.api("/api/v1/query", &[("query", "count(muster_agent_gpu_healthy == 1)".into())]).await;
    assert_eq!(answer["data"]["result"][0]["value"][1], "8", "the agent's eight GPUs in Prometheus: {answer}");

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests/grafana");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("manifests/grafana")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "expected the dashboards in {}, found {files:?}", dir.display());
    let range_seconds = (end - started).ceil() as u64;
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in &files {
        let shown = file.file_name().unwrap().to_string_lossy().to_string();
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).expect("JSON");
        let variables = variables(&prometheus, &shown, &dashboard).await;
        let mut all = Vec::new();
        targets(&dashboard["panels"], "", &mut all);
        assert!(!all.is_empty(), "{shown} has no queries");
        for (panel, expr) in all {
            let query = substitute(&expr, &variables, range_seconds);
            assert!(!query.contains('$'), "{shown}, panel {panel:?}: a variable is left unresolved in {query}");
            checked += 1;
            let instant = prometheus.api("/api/v1/query", &[("query", query.clone()), ("time", end.to_string())]).await;
            if instant["status"] != "success" {
                failures.push(format!("{shown}, panel {panel:?}: Prometheus rejects {query}: {instant}"));
                continue;
            }
            let range = prometheus
                .api(
                    "/api/v1/query_range",
                    &[
                        ("query", query.clone()),
                        ("start", started.floor().to_string()),
                        ("end", end.to_string()),
                        ("step", format!("{SCRAPE_SECONDS}")),
                    ],
                )
                .await;
            if range["status"] != "success" || !has_data(&range) {
                failures.push(format!("{shown}, panel {panel:?}: no data from {query}: {range}"));
            } else {
                eprintln!("prometheus: {shown}, {panel:?}: {query}");
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} dashboard queries failed:\n{}", failures.len(), failures.join("\n"));
    eprintln!("prometheus: {checked} dashboard queries returned data over {range_seconds}s of scrapes");
    agent.abort();
    drop(prometheus);
}

/// The usage ledger through Prometheus, for two queues: each queue's
/// `muster_gpu_seconds_total`, at its last scrape, is within 5% of what its gang's pods'
/// binding times give (one GPU each, from their `PodScheduled` condition to that scrape),
/// and `muster report --since 1h` gives each queue those GPU-hours within 5%, as of a scrape
/// between the two instants around its run; its page plots both.
async fn gpu_seconds_match_the_binding_times(
    cluster: &TestCluster,
    prometheus: &Prometheus,
    queues: &[(&str, &str)],
    started: f64,
) {
    let number = |answer: &Value, query: &str| -> f64 {
        let text = answer["data"]["result"][0]["value"][1].as_str().unwrap_or_else(|| panic!("{query}: {answer}"));
        text.parse().unwrap()
    };
    let last_scrape = || async {
        let query = "max(timestamp(muster_gpu_seconds_total))".to_string();
        let at = prometheus.api("/api/v1/query", &[("query", query.clone())]).await;
        number(&at, &query)
    };
    let pods = cluster.api::<Pod>().list(&Default::default()).await.unwrap().items;
    // Per queue: its pods' binding times; one GPU each, from its binding.
    let bound = |group: &str| -> Vec<f64> {
        in_group(&pods, group)
            .iter()
            .map(|pod| {
                let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).unwrap();
                let bound = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "True");
                let time = bound.and_then(|c| c.last_transition_time.as_ref());
                let time = time.unwrap_or_else(|| panic!("{group}: no binding time in {:?}", pod.status));
                time.0.as_second() as f64
            })
            .collect()
    };
    let expected = |group: &str, at: f64| bound(group).iter().map(|b| at - b).sum::<f64>();
    let within = |got: f64, want: f64| (got - want).abs() <= 0.05 * want;
    for &(queue, group) in queues {
        let query = format!("muster_gpu_seconds_total{{queue=\"{queue}\"}}");
        let value = prometheus.api("/api/v1/query", &[("query", query.clone())]).await;
        let stamp = format!("timestamp({query})");
        let scraped_at = number(&prometheus.api("/api/v1/query", &[("query", stamp.clone())]).await, &stamp);
        let used = number(&value, &query);
        assert!(expected(group, scraped_at) > 10.0, "{group} ran for a while: {}", expected(group, scraped_at));
        // (The value may be one scrape newer than its timestamp read after it.)
        assert!(
            within(used, expected(group, scraped_at))
                || within(used, expected(group, scraped_at + SCRAPE_SECONDS as f64)),
            "{queue}: {used} GPU-seconds scraped, {} from the binding times",
            expected(group, scraped_at)
        );
        let gpus = bound(group).len() as f64;
        assert!(used <= gpus * (unix_now() - started) + 2.0, "{queue}: more than its GPUs over the run: {used}");
    }

    // The report, as a platform engineer runs it.
    let before = last_scrape().await;
    let url = format!("http://127.0.0.1:{}", prometheus.port);
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts/usage-report.html");
    std::fs::create_dir_all(page.parent().unwrap()).unwrap();
    let run = |args: Vec<String>| async move {
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_muster")).args(args).output().expect("muster runs")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        stdout
    };
    let args = |output: &[&str]| -> Vec<String> {
        ["report", "--prometheus", &url, "--since", "1h", "--output"]
            .iter()
            .chain(output)
            .map(|a| a.to_string())
            .collect()
    };
    let csv = run(args(&["csv"])).await;
    let after = last_scrape().await + SCRAPE_SECONDS as f64;
    for &(queue, group) in queues {
        let row =
            csv.lines().find(|l| l.starts_with(&format!("{queue},"))).unwrap_or_else(|| panic!("no {queue}:\n{csv}"));
        let cell = |i: usize| -> f64 { row.split(',').nth(i).unwrap().parse().unwrap() };
        // One gang of each queue started (the team's other waits); it waited under a minute,
        // in the queue's and its namespace's figures alike.
        assert_eq!(cell(6), 1.0, "{csv}");
        assert!((0.0..=60.0).contains(&cell(7)) && (0.0..=60.0).contains(&cell(9)), "{csv}");
        let (low, high) = (expected(group, before) / 3600.0, expected(group, after) / 3600.0);
        let hours = cell(2);
        assert!(
            hours >= low * 0.95 && hours <= high * 1.05,
            "muster report: {queue} used {hours} GPU-hours; its binding times give {low}..{high}\n{csv}"
        );
        eprintln!(
            "prometheus: queue {queue}: `muster report` says {:.1} GPU-seconds; binding times {:.1}..{:.1}",
            hours * 3600.0,
            low * 3600.0,
            high * 3600.0
        );
    }
    run(args(&["html", page.to_str().unwrap()])).await;
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<svg").count(), 2, "GPUs in use and waits: {html}");
    for &(queue, _) in queues {
        assert!(html.contains(&format!("<td>{queue}</td>")), "{queue} in the page's tables: {html}");
    }
    // A line per queue that used GPUs (the two, and the default queue's held gang).
    let in_use = &html[html.find("GPUs in use per queue").unwrap()..html.find("<h2>Waits").unwrap()];
    assert!(in_use.matches("<polyline").count() >= 2, "{in_use}");
}

#[test]
fn grafana_variables_are_substituted_longest_name_first() {
    let variables = BTreeMap::from([("level".to_string(), "rack".to_string())]);
    let query = substitute("rate(x{level=\"$level\"}[$__rate_interval]) / ${level} [$__interval_ms]", &variables, 60);
    assert_eq!(query, "rate(x{level=\"rack\"}[4s]) / rack [1000]");
}
