//! What a hostile tenant costs the scheduler: its memory (resident set) and cycle time while
//! one namespace writes what it likes, against a fleet of 200 nodes of 8 GPUs (as extended
//! resources) and 32 DRA devices each with 100 ordinary pods waiting. Runs the scheduler's own
//! per-cycle path (watch events into the cache, the snapshot, the engine's cycle, with the
//! memo and selector cache kept across cycles) without the API server, so the figures are
//! the scheduler's alone:
//!
//! 1. a pod asking for 70,000 distinct extended resources (about 1.4 MB);
//! 2. a claim whose constraints force the device search's worst case on every node;
//! 3. a namespace creating 100,000 distinct resource names over time (pods asking for
//!    resources, device classes and CEL selectors nobody else uses), 100 per cycle, each
//!    deleted a cycle later.
//!
//! Every ordinary pod must still be placed in every cycle. Run with
//! `cargo bench --bench tenants`.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::runtime::watcher::Event;
use muster::config::Config;
use muster::convert::assemble::{Memo, assemble_view};
use muster::convert::objects::{gpu_node, training_pod};
use muster::engine::dra::selectors::SelectorCache;
use muster::engine::schedule_with;
use muster::k8s::store::cache::Cache;
use muster::k8s::store::watch::apply_event;
use serde_json::json;

const DRIVER: &str = "gpu.example.com";
const NODES: usize = 200;
const ORDINARY: usize = 100;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn versioned<T: serde::de::DeserializeOwned>(mut value: serde_json::Value, version: u64) -> T {
    value["metadata"]["resourceVersion"] = json!(version.to_string());
    serde_json::from_value(value).expect("a valid object")
}

fn tenant_pod(name: &str, version: u64, resources: serde_json::Value, claim: Option<&str>) -> Pod {
    let claims = claim.map(|c| json!([{"name": "gpu", "resourceClaimName": c}]));
    versioned(
        json!({
            "metadata": {"name": name, "namespace": "tenant", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "muster", "resourceClaims": claims,
                     "containers": [{"name": "c", "image": "i", "resources": {"limits": resources}}]},
        }),
        version,
    )
}

fn claim(name: &str, version: u64, spec: serde_json::Value) -> ResourceClaim {
    versioned(json!({"metadata": {"name": name, "namespace": "tenant"}, "spec": {"devices": spec}}), version)
}

fn fleet(cache: &mut Cache) {
    apply_event(cache, Event::Apply(versioned::<DeviceClass>(json!({"metadata": {"name": "gpu"}, "spec": {}}), 1)));
    for n in 0..NODES {
        let mut node = gpu_node(&format!("node-{n}"), &format!("rack-{}", n / 20), 8);
        node.metadata.resource_version = Some("1".into());
        apply_event(cache, Event::Apply(node));
        let devices: Vec<_> =
            (0..32).map(|d| json!({"name": format!("gpu-{d}"), "attributes": {"numa": {"int": d / 4}}})).collect();
        let slice: ResourceSlice = versioned(
            json!({"metadata": {"name": format!("node-{n}")},
                   "spec": {"driver": DRIVER, "nodeName": format!("node-{n}"),
                            "pool": {"name": format!("node-{n}"), "generation": 1, "resourceSliceCount": 1},
                            "devices": devices}}),
            1,
        );
        apply_event(cache, Event::Apply(slice));
    }
    for i in 0..ORDINARY {
        let mut pod = training_pod(&format!("ordinary-{i}"), 1, i as i64, "muster", None);
        pod.metadata.resource_version = Some("1".into());
        apply_event(cache, Event::Apply(pod));
    }
}

struct Scheduler {
    cache: Cache,
    memo: Memo,
    selectors: SelectorCache,
    config: Config,
    now: i64,
}

impl Scheduler {
    /// One cycle; panics unless every ordinary pod is placed. Returns the cycle's time (ms).
    fn cycle(&mut self) -> f64 {
        let start = Instant::now();
        self.now += 10;
        let snapshot = assemble_view(&self.cache.view(), "muster", self.now, &mut self.memo).snapshot;
        let outcome = schedule_with(&snapshot, &self.config.cycle(), &mut self.selectors);
        let placed = outcome.placements.iter().filter(|p| p.gang.name.starts_with("ordinary-")).count();
        assert_eq!(placed, ORDINARY, "ordinary pods left waiting: {:?}", outcome.waiting.first());
        start.elapsed().as_secs_f64() * 1000.0
    }

    fn cycles(&mut self, n: usize) -> f64 {
        (0..n).map(|_| self.cycle()).sum::<f64>() / n as f64
    }
}

/// RSS after the phase's first cycle and after its last: flat is the point.
fn report(phase: &str, rss_first: f64, ms: f64) {
    println!("{phase:<62} {rss_first:>9.1} {:>9.1} {ms:>10.2}", rss_mib());
}

fn main() {
    let config = Config::default();
    let mut cache = Cache::new(Vec::new());
    fleet(&mut cache);
    let mut s = Scheduler { cache, memo: Memo::new(&config), selectors: SelectorCache::default(), config, now: 0 };
    println!("{:<62} {:>9} {:>9} {:>10}", "phase", "RSS first", "RSS last", "ms/cycle");

    s.cycle();
    let first = rss_mib();
    let ms = s.cycles(50);
    report("baseline: 200 nodes, 100 pods waiting (50 cycles)", first, ms);

    let limits: serde_json::Map<_, _> = (0..70_000).map(|i| (format!("example.com/r{i:05}"), json!("1"))).collect();
    let greedy = tenant_pod("names", 1, serde_json::Value::Object(limits), None);
    let size = serde_json::to_vec(&greedy).map(|v| v.len()).unwrap_or(0);
    apply_event(&mut s.cache, Event::Apply(greedy));
    s.cycle();
    let first = rss_mib();
    let ms = s.cycles(50);
    report(&format!("+ a pod of 70,000 resource names ({:.1} MB of JSON, 50 cycles)", size as f64 / 1e6), first, ms);

    // Nine requests for devices on nine distinct NUMA nodes, where a node has eight.
    let requests: Vec<_> =
        (0..9).map(|r| json!({"name": format!("r{r}"), "exactly": {"deviceClassName": "gpu"}})).collect();
    let worst = json!({"requests": requests, "constraints": [{"distinctAttribute": format!("{DRIVER}/numa")}]});
    apply_event(&mut s.cache, Event::Apply(claim("worst", 1, worst)));
    apply_event(&mut s.cache, Event::Apply(tenant_pod("worst", 1, json!({}), Some("worst"))));
    let ms = s.cycle();
    let first = rss_mib();
    report("+ a claim forcing the worst device search: its first cycle", first, ms);
    let ms = s.cycles(19);
    report("  cycles 2-20 (ten new nodes searched each, the rest skipped)", first, ms);
    let ms = s.cycles(30);
    report("  cycles 21-50 (every node's search remembered as given up)", first, ms);

    // `cargo bench` runs it whole; `cargo test` (no `--bench` argument) runs a short check.
    let rounds = if std::env::args().any(|a| a == "--bench") { 1_000 } else { 20 };
    let every = rounds / 4;
    let mut version = 2;
    let mut total = 0.0;
    let churn = |s: &mut Scheduler, round: usize, version: &mut u64| -> f64 {
        let mut objects = Vec::new();
        for k in 0..100 {
            let i = round * 100 + k;
            *version += 1;
            let (pod, claim_name) = (format!("churn-{i}"), format!("churn-{i}"));
            let resource = json!({format!("example.com/tenant-{i}"): "1"});
            let spec = match i % 2 {
                0 => json!({"requests": [{"name": "r", "exactly": {"deviceClassName": format!("class-{i}")}}]}),
                _ => json!({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "selectors": [
                        {"cel": {"expression": format!("device.attributes[\"{DRIVER}\"].numa == {}", i + 100)}}]}}]}),
            };
            let (p, c) = (tenant_pod(&pod, *version, resource, Some(&claim_name)), claim(&claim_name, *version, spec));
            apply_event(&mut s.cache, Event::Apply(c.clone()));
            apply_event(&mut s.cache, Event::Apply(p.clone()));
            objects.push((p, c));
        }
        let ms = s.cycle();
        for (p, c) in objects {
            apply_event(&mut s.cache, Event::Delete(p));
            apply_event(&mut s.cache, Event::Delete(c));
        }
        ms
    };
    let first = rss_mib();
    for round in 0..rounds {
        total += churn(&mut s, round, &mut version);
        if (round + 1) % every == 0 {
            report(
                &format!("+ {} distinct names written and deleted, 100 per cycle", (round + 1) * 100),
                first,
                total / every as f64,
            );
            total = 0.0;
        }
    }
    println!("compiled selectors kept at the end: {}", s.selectors.len());
}
