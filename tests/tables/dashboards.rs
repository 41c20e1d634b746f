//! The Grafana dashboards query only metrics the scheduler exports, and docs/metrics.md
//! documents every one of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use muster::metrics::Metrics;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `expr` of every target in a dashboard, wherever it is nested.
fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The `muster_` metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(found) = expr[i..].find("muster_") {
        let start = i + found;
        let boundary = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if boundary {
            names.insert(expr[start..end].to_string());
        }
        i = end;
    }
    names
}

/// Names a scrape of the scheduler can show (histograms as their three series).
fn exported() -> BTreeSet<String> {
    Metrics::new().series_names().into_iter().collect()
}

fn dashboards() -> Vec<PathBuf> {
    let dir = root().join("manifests/grafana");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn load(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

#[test]
fn every_metric_a_dashboard_queries_is_one_the_scheduler_exports() {
    let exported = exported();
    let files = dashboards();
    assert!(files.len() >= 2, "expected the GPU and the gang dashboards in manifests/grafana, found {files:?}");
    for file in files {
        let mut all = Vec::new();
        exprs(&load(&file), &mut all);
        let used: BTreeSet<String> = all.iter().flat_map(|e| metric_names(e)).collect();
        assert!(!used.is_empty(), "{} queries no muster_ metric", file.display());
        let unknown: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
        assert!(unknown.is_empty(), "{} queries metrics the scheduler does not export: {unknown:?}", file.display());
    }
}

#[test]
fn the_dashboards_cover_gpu_stranding_gang_waiting_and_queues() {
    let mut used = BTreeSet::new();
    for file in dashboards() {
        let mut all = Vec::new();
        exprs(&load(&file), &mut all);
        used.extend(all.iter().flat_map(|e| metric_names(e)));
    }
    for needed in [
        "muster_node_gpus_stranded",
        "muster_node_gpus_held",
        "muster_topology_domain_gpus_stranded",
        "muster_gang_waiting_seconds_bucket",
        "muster_scheduling_cycle_duration_seconds_bucket",
        "muster_queue_quota",
        "muster_queue_fair_share",
        "muster_queue_allocated",
        "muster_queue_gangs",
        "muster_evictions_total",
    ] {
        assert!(used.contains(needed), "no dashboard shows {needed}");
    }
}

#[test]
fn every_exported_metric_is_documented() {
    let docs = std::fs::read_to_string(root().join("docs/metrics.md")).expect("docs/metrics.md");
    for name in Metrics::new().names() {
        assert!(docs.contains(&format!("`{name}`")), "docs/metrics.md does not document {name}");
        assert!(name.starts_with("muster_"), "{name} lacks the muster_ prefix");
    }
}

#[test]
fn the_metric_name_reader_finds_names_inside_promql() {
    let names = metric_names(
        "histogram_quantile(0.9, sum by (le) (rate(muster_gang_waiting_seconds_bucket{until=\"bound\"}[5m]))) / not_muster_x",
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["muster_gang_waiting_seconds_bucket"]);
}
