//! `muster simulate --trace`: a job trace replayed through the engine under every policy,
//! on a generated cluster or on Node objects, as a table, JSON or an HTML page.

use std::path::PathBuf;
use std::process::Command;

use muster::config::Config;
use muster::sim::placer::Placer;
use muster::sim::replay::cluster::{Cluster, ClusterShape};
use muster::sim::replay::run::replay;
use muster::sim::replay::trace::read;
use serde_json::Value;

fn muster() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster"))
}

fn temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("muster-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn replay_json(args: &[&str]) -> Value {
    let output = muster().arg("simulate").args(args).args(["--output", "json"]).output().expect("muster runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

/// Two nodes of 8 GPUs in one rack: a long 8-GPU job holds one node; a 16-GPU job of two
/// workers needs both; a 1-GPU job with a 20-minute limit arrives a minute later.
const SMALL: &str = "id,submit,workers,gpus,runtime,limit,queue\n\
                     long,0,1,8,7200,,ml\n\
                     big,10,2,8,3600,,ml\n\
                     one,60,1,1,600,1200,web\n";

#[test]
fn a_small_trace_starts_jobs_when_they_fit_and_the_baseline_strands_what_it_splits() {
    let trace = temp("small.csv", SMALL);
    let report = replay_json(&["--trace", trace.to_str().unwrap(), "--nodes", "2", "--racks", "1"]);
    let outcomes = report["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 5, "every policy: {report}");
    let by = |name: &str| outcomes.iter().find(|o| o["policy"] == *name).expect(name);
    // Per pod, `big` puts one pod on the free node at 10 s and holds its 8 GPUs until
    // `long` ends at 7200 s; `one` finds no GPU and never starts by the horizon (7260 s).
    let baseline = by("baseline");
    assert_eq!((baseline["started"].as_u64(), baseline["neverStarted"].as_u64()), (Some(2), Some(1)), "{baseline}");
    let stranded = baseline["strandedGpuHours"].as_f64().unwrap();
    assert!((stranded - 8.0 * 7190.0 / 3600.0).abs() < 0.01, "{stranded}");
    // StrictFIFO keeps `one` behind `big`, which takes both nodes at 7200 s.
    let strict = by("StrictFIFO");
    assert_eq!((strict["started"].as_u64(), strict["strandedGpuHours"].as_f64()), (Some(2), Some(0.0)), "{strict}");
    // The others run `one` on the free node at once; `big` starts at 7200 s holding nothing
    // before.
    for policy in ["BestEffortFIFO", "Backfill", "TimedBackfill"] {
        let outcome = by(policy);
        assert_eq!(outcome["strandedGpuHours"], 0.0, "{policy}: {outcome}");
        assert_eq!(outcome["started"], 3, "{policy}: {outcome}");
        assert_eq!(outcome["smallWaitP50Minutes"], 0.0, "{policy}: {outcome}");
        let big_wait = outcome["largeWaitP50Minutes"].as_f64().unwrap();
        assert!((big_wait - 7190.0 / 60.0).abs() < 0.01, "{policy}: {big_wait}");
    }
    // By queue, since the trace names two.
    let queues = by("Backfill")["queues"].as_array().unwrap();
    let names: Vec<&str> = queues.iter().map(|q| q["label"].as_str().unwrap()).collect();
    assert_eq!(names, ["ml", "web"]);
    assert_eq!((queues[0]["jobs"].as_u64(), queues[1]["waitP99Minutes"].as_f64()), (Some(2), Some(0.0)));
}

#[test]
fn a_job_that_runs_past_its_limit_is_stopped_there_and_its_work_does_not_count() {
    let trace = temp("limit.csv", "id,submit,workers,gpus,runtime,limit\nover,0,1,8,7200,3600\nok,0,1,8,1800,3600\n");
    let report = replay_json(&["--trace", trace.to_str().unwrap(), "--nodes", "2", "--policy", "Backfill"]);
    let outcome = &report["outcomes"][0];
    assert_eq!(outcome["stoppedAtLimit"], 1, "{outcome}");
    assert_eq!(outcome["completedGpuHours"], 4.0, "only `ok` completed: 8 GPUs for half an hour: {outcome}");
}

#[test]
fn gpu_models_are_honoured_on_nodes_that_name_theirs() {
    let nodes = temp(
        "nodes.yaml",
        r#"
apiVersion: v1
kind: Node
metadata:
  name: a100-0
  labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB, topology.muster.dev/rack: r1}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}
---
apiVersion: v1
kind: Node
metadata:
  name: h100-0
  labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, topology.muster.dev/rack: r1}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}
"#,
    );
    let trace = temp(
        "models.csv",
        "id,submit,workers,gpus,cpu,memory,runtime,gpu_model\n\
         h1,0,1,8,8,64Gi,3600,NVIDIA-H100-80GB-HBM3\n\
         h2,0,1,8,8,64Gi,3600,NVIDIA-H100-80GB-HBM3\n\
         b200,0,1,1,1,1Gi,3600,NVIDIA-B200\n",
    );
    let report = replay_json(&[
        "--trace",
        trace.to_str().unwrap(),
        "--cluster",
        nodes.to_str().unwrap(),
        "--policy",
        "BestEffortFIFO",
    ]);
    let outcome = &report["outcomes"][0];
    // One H100 node: h2 waits for h1 though the A100 node is free; no node has a B200.
    assert_eq!(outcome["started"], 2, "{outcome}");
    assert_eq!(outcome["waitP99Minutes"], 60.0, "{outcome}");
    assert_eq!(outcome["neverStarted"], 1, "{outcome}");
}

#[test]
fn a_bad_trace_or_cluster_is_refused_with_the_line_and_what_to_give() {
    let trace = temp("bad.csv", "id,submit,workers,gpus,runtime\nfine,0,1,1,60\nbroken,10,1,-2,60\n");
    let output = muster().args(["simulate", "--trace", trace.to_str().unwrap(), "--nodes", "4"]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 3 (job \"broken\"): gpus: \"-2\" is not a whole number of at least 0"), "{stderr}");
    let output = muster().args(["simulate", "--trace", trace.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("--trace needs a cluster: --cluster FILE or --nodes N"));
    let output = muster().args(["simulate", "--trace", "x.csv", "--nodes", "2", "--output", "html"]).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("--output html needs a file"));
}

#[test]
fn a_generated_trace_replays_every_policy_into_a_page_with_its_plots() {
    let dir = std::env::temp_dir().join(format!("muster-trace-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (trace, page) = (dir.join("fleet.csv"), dir.join("replay.html"));
    let output = muster()
        .args(["simulate", "--generate-trace", trace.to_str().unwrap(), "--nodes", "16", "--jobs", "300"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let jobs = read(std::fs::File::open(&trace).unwrap(), "fleet.csv").unwrap();
    assert_eq!(jobs.len(), 300);
    let output = muster()
        .args(["simulate", "--trace", trace.to_str().unwrap(), "--nodes", "16"])
        .args(["--output", "html", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("300 jobs on 16 nodes x 8 GPUs in 2 racks"), "{table}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert!(!html.contains("<script") && !html.contains("http"), "self-contained, no script");
    // The figures table, one plot of GPUs in use and one wait plot per size class.
    assert!(html.contains("<th>TimedBackfill</th>") && html.contains("<td>GPU-hours stranded</td>"), "{html}");
    assert_eq!(html.matches("<svg").count(), 1 + 4, "{html}");
    assert_eq!(html.matches("<polyline").count(), 5 * 5, "a line per policy in every plot");
}

/// The simulator's usage ledger, read back by `muster report --simulation`: each queue's
/// GPU-hours are what its jobs held (`long` 8 GPUs for 7200 s and `big` 16 GPUs for the
/// last 60 s of the 7260 s horizon; `one` 1 GPU for its 600 s), as CSV and as a page.
#[test]
fn a_replays_usage_ledger_is_reported_per_queue_as_csv_and_as_a_page() {
    let trace = temp("ledger.csv", SMALL);
    let dir = std::env::temp_dir().join(format!("muster-trace-ledger-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (run, page) = (dir.join("run.json"), dir.join("usage.html"));
    let replayed = replay_json(&["--trace", trace.to_str().unwrap(), "--nodes", "2", "--racks", "1"]);
    std::fs::write(&run, replayed.to_string()).unwrap();
    let backfill = replayed["outcomes"].as_array().unwrap().iter().find(|o| o["policy"] == "Backfill").unwrap();
    let queues: Vec<&str> =
        backfill["usage"]["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(queues, ["ml", "web"], "{backfill}");
    // Per gang, the largest first: `long` 8 GPUs x 2 h, `big` 16 GPUs x 60 s, `one` 1 x 600 s.
    let gangs: Vec<(&str, f64)> = backfill["usage"]["gangs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["name"].as_str().unwrap(), g["gpuHours"].as_f64().unwrap()))
        .collect();
    let names: Vec<&str> = gangs.iter().map(|g| g.0).collect();
    assert_eq!(names, ["long", "big", "one"], "{gangs:?}");
    assert!((gangs[1].1 - 16.0 * 60.0 / 3600.0).abs() < 1e-9, "{gangs:?}");

    let report = |args: &[&str]| {
        let output = muster().args(["report", "--simulation", run.to_str().unwrap()]).args(args).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let csv = report(&["--output", "csv"]);
    let row = |queue: &str| -> Vec<String> {
        let line =
            csv.lines().find(|l| l.starts_with(&format!("{queue},"))).unwrap_or_else(|| panic!("{queue}: {csv}"));
        line.split(',').map(String::from).collect()
    };
    let hours = |queue: &str| row(queue)[2].parse::<f64>().unwrap();
    assert!((hours("ml") - (8.0 * 7200.0 + 16.0 * 60.0) / 3600.0).abs() < 1e-3, "{csv}");
    assert!((hours("web") - 600.0 / 3600.0).abs() < 1e-3, "{csv}");
    // Two of ml's jobs started, one of them after `long` ended (7190 s after it came).
    assert_eq!((row("ml")[6].as_str(), row("ml")[10].as_str()), ("2", "7190.0000"), "{csv}");
    // Under StrictFIFO `one` waits behind `big` and never starts: web used nothing.
    let strict = report(&["--policy", "StrictFIFO", "--output", "csv"]);
    assert!(strict.contains("web,default,0.0000,"), "{strict}");

    let table = report(&["--output", "html", page.to_str().unwrap()]);
    assert!(table.contains("policy Backfill") && table.contains("The page:"), "{table}");
    assert!(table.contains("the 3 largest of 3 gangs:"), "{table}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script") && !html.contains("src="), "self-contained");
    assert_eq!(html.matches("<svg").count(), 2, "GPUs in use and waits: {html}");
    assert_eq!(html.matches("<polyline").count(), 2 * 2, "a line per queue in each plot");
    assert!(html.contains("<td>ml</td><td>16.27</td>"), "{html}");
    assert!(html.contains("<td>long</td><td>ml</td><td>default</td><td>16.00</td>"), "{html}");
}

/// Workers that ask for a fraction of a GPU share GPUs by memory, packed by the scheduler's
/// own conversion and allocator: on one node of 2 GPUs, a whole-GPU job takes one, four
/// quarters share the other, and a fifth quarter waits until one of them ends; the ledger
/// counts each quarter as a quarter, with its GPU memory.
#[test]
fn fractional_workers_share_a_gpu_and_the_ledger_counts_their_share() {
    let trace = temp(
        "fractions.csv",
        "id,submit,workers,gpus,gpu_fraction,runtime,queue\n\
         whole,0,1,1,,7200,train\n\
         q1,0,1,0,0.25,3600,nb\nq2,0,1,0,0.25,3600,nb\nq3,0,1,0,0.25,3600,nb\nq4,0,1,0,0.25,3600,nb\n\
         q5,10,1,0,0.25,3600,nb\n",
    );
    let args = ["--trace", trace.to_str().unwrap(), "--nodes", "1", "--gpus-per-node", "2"];
    let report = replay_json(&[&args[..], &["--horizon-hours", "2", "--policy", "Backfill"]].concat());
    assert!(report["notes"][0].as_str().unwrap().contains("the GPUs are shared by memory"), "{report}");
    let outcome = &report["outcomes"][0];
    assert_eq!(outcome["started"], 6, "{outcome}");
    let gangs = outcome["usage"]["gangs"].as_array().unwrap();
    let wait = |name: &str| gangs.iter().find(|g| g["name"] == name).unwrap()["waitSeconds"].as_f64().unwrap();
    assert_eq!((wait("q4"), wait("q5")), (0.0, 3590.0), "the fifth quarter waits for a share: {gangs:?}");
    let queue = |name: &str| {
        outcome["usage"]["queues"].as_array().unwrap().iter().find(|q| q["queue"] == name).unwrap().clone()
    };
    // Five quarters for an hour each (the fifth from 3600 s); the whole GPU for two hours.
    let nb = queue("nb");
    let expected = 5.0 * 0.25;
    assert!((nb["gpuHours"].as_f64().unwrap() - expected).abs() < 1e-6, "{nb}");
    assert!((nb["gpuMemoryGibHours"].as_f64().unwrap() - expected * 80.0).abs() < 1e-3, "80 GiB GPUs: {nb}");
    assert!((queue("train")["gpuHours"].as_f64().unwrap() - 2.0).abs() < 1e-6);
    assert!((outcome["gpuUtilisation"].as_f64().unwrap() - (expected + 2.0) / 4.0).abs() < 1e-6, "{outcome}");
}

/// On GPUs served by DRA a waiting gang's reservation keeps as many nodes as its pods need:
/// a node of 8 devices holds one pod of 8 GPUs, not eight. Two nodes of 8 GPUs: `long` holds
/// one GPU for 2 hours, `big` (2 x 8 GPUs) comes next, then a 1-GPU job every 10 minutes for 5
/// hours. Reserved both nodes, `big` starts when `long` and the small jobs already running
/// end; reserved one node, the small jobs kept the other busy until the stream ended.
#[test]
fn a_reservation_on_dra_gpus_keeps_the_nodes_its_pods_need() {
    let mut trace =
        String::from("id,submit,workers,gpus,gpu_fraction,runtime,queue\nlong,0,1,1,,7200,a\nbig,10,2,8,,3600,a\n");
    for i in 1..=30 {
        trace.push_str(&format!("small-{i},{},1,1,,1800,a\n", 600 * i));
    }
    // A fraction makes the replay publish the GPUs as DRA devices.
    trace.push_str("tiny,20,1,0,0.5,60,a\n");
    let trace = temp("dra-reservation.csv", &trace);
    let args = ["--trace", trace.to_str().unwrap(), "--nodes", "2", "--racks", "1", "--horizon-hours", "8"];
    let report = replay_json(&[&args[..], &["--policy", "Backfill"]].concat());
    assert!(report["notes"][0].as_str().unwrap().contains("shared by memory"), "{report}");
    let gangs = report["outcomes"][0]["usage"]["gangs"].as_array().unwrap();
    let wait = |name: &str| gangs.iter().find(|g| g["name"] == name).and_then(|g| g["waitSeconds"].as_f64());
    let big = wait("big").expect("big started");
    assert!(big <= 3.0 * 3600.0, "big waited {big} s behind the stream of small jobs");
    assert!((1..=30).all(|i| wait(&format!("small-{i}")).is_some()), "every small job ran: {gangs:?}");
}

#[test]
fn the_replay_keeps_a_reservation_and_never_splits_a_gang() {
    // Through the library: a 16-GPU gang submitted behind a stream of 1-GPU jobs gets its
    // rack under Backfill within a bounded wait, and no gang ever holds part of its GPUs.
    let mut text = String::from("id,submit,workers,gpus,runtime,limit\nbig,30,2,8,3600,3600\n");
    for i in 0..200 {
        text.push_str(&format!("s{i:03},{},1,1,1800,1800\n", i * 20));
    }
    let jobs = read(text.as_bytes(), "stream.csv").unwrap();
    let config = Config::default();
    let cluster = Cluster::generated(ClusterShape { nodes: 2, gpus_per_node: 8, racks: 1 }, &config);
    let backfill = replay(&cluster, &jobs, Placer::Muster, &config, 8 * 3600, None);
    let big = jobs.iter().position(|j| j.id == "big").unwrap();
    let start = backfill.started[big].expect("the big gang starts");
    assert!(start <= 30 + 600 + 1800, "reserved after 600 s, started once the 1-GPU jobs then running end: {start}");
    assert_eq!(backfill.stranded, 0.0);
    let best_effort = replay(
        &cluster,
        &jobs,
        Placer::Queueing(muster::config::QueueingPolicy::BestEffortFifo),
        &config,
        8 * 3600,
        None,
    );
    assert!(
        best_effort.started[big].is_none_or(|s| s > start),
        "without a reservation the stream keeps it out longer: {:?}",
        best_effort.started[big]
    );
}
