//! `muster simulate`: YAML in, the JSON document of the design out, and clear errors.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

fn muster() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster"))
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sim").join(name)
}

fn simulate_json(args: &[&str]) -> (Value, String) {
    let output = muster().arg("simulate").args(args).args(["--output", "json"]).output().expect("muster runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "muster simulate failed: {stderr}");
    (serde_json::from_slice(&output.stdout).expect("stdout is one JSON document"), stderr)
}

fn temp_yaml(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("muster-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn all_three_podgroup_kinds_are_gangs_and_the_json_follows_the_contract() {
    let path = fixture("three-kinds.yaml");
    let (report, stderr) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert!(stderr.contains("skipped ConfigMap research/dashboard"), "{stderr}");

    let pods = report["pods"].as_array().unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p["name"].as_str().unwrap()).collect();
    // Only Muster's pods, sorted by namespace then name; the other scheduler's pod is not listed.
    assert_eq!(names, ["llm-0", "llm-1", "orphan", "speech-0", "speech-1", "vision-0", "vision-1"]);
    let pod = |name: &str| pods.iter().find(|p| p["name"] == name).unwrap().clone();
    // 12 GPUs are free (4 are used by the other scheduler's pod): llm (8) and vision (4) fit
    // in queue order, speech (4) does not, and holds nothing.
    assert_eq!(
        pod("llm-0"),
        json!({"namespace": "research", "name": "llm-0", "node": "node-2", "devices": [], "reason": null})
    );
    assert_eq!(pod("llm-1")["node"], "node-1");
    assert_eq!(pod("vision-0")["node"], "node-1");
    assert_eq!(pod("vision-1")["node"], "node-1");
    for name in ["speech-0", "speech-1"] {
        assert_eq!(pod(name)["node"], Value::Null);
        assert_eq!(
            pod(name)["reason"],
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu; gang research/speech needs 2 pods at once, 0 fit"
        );
    }
    assert_eq!(
        pod("orphan")["reason"],
        "PodGroup research/missing (muster.dev/v1alpha1) does not exist; its pods wait for it"
    );

    assert_eq!(
        report["gangs"],
        json!([
            {"apiVersion": "muster.dev/v1alpha1", "kind": "PodGroup", "namespace": "research", "name": "llm",
             "minMember": 2, "placed": 2, "scheduled": true, "reason": null},
            {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "namespace": "research", "name": "speech",
             "minMember": 2, "placed": 0, "scheduled": false,
             "reason": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu; gang research/speech needs 2 pods at once, 0 fit"},
            {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "namespace": "research", "name": "vision",
             "minMember": 2, "placed": 2, "scheduled": true, "reason": null},
        ])
    );
}

#[test]
fn the_same_cluster_split_over_files_in_a_folder_gives_the_same_result() {
    let text = std::fs::read_to_string(fixture("three-kinds.yaml")).unwrap();
    let docs: Vec<&str> = text.split("\n---\n").collect();
    let dir = std::env::temp_dir().join(format!("muster-sim-folder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, doc) in docs.iter().enumerate() {
        std::fs::write(dir.join(format!("{i:02}.yaml")), doc).unwrap();
    }
    let (folder, _) = simulate_json(&["--cluster", dir.to_str().unwrap()]);
    let (file, _) = simulate_json(&["--cluster", fixture("three-kinds.yaml").to_str().unwrap()]);
    assert_eq!(folder, file);
}

#[test]
fn input_an_api_server_would_reject_fails_naming_the_file_and_the_object() {
    let cases = [
        (
            "broken.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: [unclosed\n",
            "broken.yaml: document 1 is not valid YAML",
        ),
        (
            "twice.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
            "twice.yaml: Node n1 is defined twice",
        ),
        (
            "class.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  priorityClassName: urgent\n  containers: [{name: c, image: i}]\n",
            "class.yaml: Pod default/p: no PriorityClass with name urgent was found",
        ),
        (
            "group.yaml",
            "apiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\nspec: {minMember: 0}\n",
            "group.yaml: PodGroup default/g: spec.minMember must be at least 1",
        ),
        ("nokind.yaml", "apiVersion: v1\nmetadata: {name: x}\n", "nokind.yaml: document 1 has no kind"),
        (
            "cel.yaml",
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\n\
             spec: {selectors: [{cel: {expression: 'device.driver =='}}]}\n",
            "cel.yaml: DeviceClass gpu: selectors[0].cel.expression: compilation failed",
        ),
        (
            "claim.yaml",
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\n\
             spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu, count: 0}}]}}}\n",
            "claim.yaml: ResourceClaimTemplate default/t: request gpu: count 0 is outside 1..32",
        ),
    ];
    for (name, text, expected) in cases {
        let path = temp_yaml(name, text);
        let output = muster().args(["simulate", "--output", "json", "--cluster"]).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{name} was accepted");
        assert!(stderr.contains(expected), "{name}: expected {expected:?} in {stderr:?}");
        assert!(output.stdout.is_empty(), "{name}: no JSON on failure");
    }
}

#[test]
fn a_pod_with_an_unreadable_request_waits_alone_and_names_the_problem() {
    let path = temp_yaml(
        "bad-request.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '8', memory: 8Gi, pods: '10'}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  schedulerName: muster\n  containers: [{name: c, image: i, resources: {requests: {cpu: 12XB}}}]\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: good}\nspec:\n  schedulerName: muster\n  containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]\n",
    );
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert_eq!(report["pods"][0]["name"], "bad");
    assert_eq!(report["pods"][0]["reason"], "Pod default/bad: invalid quantity \"12XB\": unknown suffix");
    assert_eq!(report["pods"][1]["node"], "n1");
}

#[test]
fn simulate_without_arguments_shows_gangs_beside_the_per_pod_baseline() {
    let output = muster().arg("simulate").output().unwrap();
    assert!(output.status.success());
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("Two 8-GPU jobs on 8 free GPUs"), "{table}");
    let line = |label: &str| table.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_default().to_string();
    assert!(line("job-a").contains("8/8 placed, runs"), "{table}");
    assert!(line("job-b").contains("0/8 placed, waits holding nothing"), "{table}");
    assert!(line("job-b").contains("4/8 placed, stuck holding 4 GPUs"), "{table}");
    assert!(line("GPUs stranded").split_whitespace().collect::<Vec<_>>().ends_with(&["0", "8"]), "{table}");
    assert!(line("when the running job ends").contains("job-b runs"), "{table}");
    assert!(table.contains("Mixed fleet"), "{table}");
    // Columns: the per-pod baseline, then every queueing policy of Muster's.
    let header_line = line("per-pod baseline");
    let header: Vec<&str> = header_line.split_whitespace().collect();
    assert_eq!(
        header,
        ["per-pod", "baseline", "StrictFIFO", "BestEffortFIFO", "Backfill", "(default)", "TimedBackfill"]
    );
    let stranded: Vec<String> = line("GPU-hours stranded").split_whitespace().skip(2).map(String::from).collect();
    assert_eq!(stranded.len(), 5, "{table}");
    assert_ne!(stranded[0], "0", "the baseline strands GPU-hours: {table}");
    assert!(stranded[1..].iter().all(|s| s == "0"), "no policy of Muster's strands any: {table}");
    assert!(!table.contains("Overloaded fleet"), "the overloaded fleet runs only when asked: {table}");
}

#[test]
fn the_overloaded_fleet_runs_every_policy_and_completes_less_work_than_arrives() {
    let output = muster().args(["simulate", "--overloaded", "--output", "json"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let results = report["overloaded"]["results"].as_array().expect("overloaded results");
    assert_eq!(results.len(), 5);
    for result in results {
        assert!(result["neverStarted"].as_u64().unwrap() > 0, "more arrives than can start: {result}");
        assert!(result["completedGpuHours"].as_f64().unwrap() > 0.0, "{result}");
        assert!(result["meanBoundedSlowdown"].as_f64().unwrap() >= 1.0, "{result}");
    }
}

#[test]
fn the_guides_big_gpu_claim_gets_an_80_gb_device_and_the_json_names_it() {
    let path = fixture("dra-big-gpu.yaml");
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    let pods = report["pods"].as_array().unwrap();
    assert_eq!(
        pods[0],
        json!({"namespace": "default", "name": "train", "node": "node-b",
               "devices": [{"claim": "gpu", "request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-b", "device": "gpu-0"}],
               "reason": null})
    );
    assert_eq!(pods[1]["devices"][0]["device"], "gpu-1");
    // node-a's four 40 GB GPUs are never used; the third pod waits and says why.
    assert_eq!(pods[2]["node"], Value::Null);
    assert_eq!(pods[2]["devices"], json!([]));
    let reason = pods[2]["reason"].as_str().unwrap();
    assert!(reason.contains("1 node(s) had no device matching claim gpu (request gpu)"), "{reason}");
    assert!(
        reason.contains("1 node(s) had 0 of 2 devices matching claim gpu (request gpu) free (needs 1)"),
        "{reason}"
    );
}

/// 4 racks × 2 nodes × 8 GPUs, two racks per block; `used[i]` GPUs held on node i by a pod
/// already running there; then Muster's PodGroup `gang` of `pods` 8-GPU pods with the
/// given topology.
fn rack_cluster(used: [u32; 8], pods: usize, required: &str, preferred: Option<&str>) -> String {
    let mut docs = Vec::new();
    for (i, used) in used.iter().enumerate() {
        let rack = format!("r{}", i / 2 + 1);
        let block = if i < 4 { "b1" } else { "b2" };
        let node = format!("{rack}-n{}", i % 2 + 1);
        docs.push(format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n  labels: {{kubernetes.io/hostname: {node}, \
             topology.muster.dev/rack: {rack}, topology.muster.dev/block: {block}}}\n\
             status: {{allocatable: {{cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '8'}}}}"
        ));
        if *used > 0 {
            docs.push(format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: busy-{node}}}\nspec: {{nodeName: {node}, \
                 containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: '{used}'}}}}}}]}}"
            ));
        }
    }
    let preferred = preferred.map(|p| format!(", preferred: {p}")).unwrap_or_default();
    docs.push(format!(
        "apiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: gang}}\n\
         spec: {{minMember: {pods}, topology: {{required: {required}{preferred}}}}}"
    ));
    for p in 0..pods {
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: gang-{p}, labels: {{muster.dev/pod-group: gang}}}}\n\
             spec: {{schedulerName: muster, containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: '8'}}}}}}]}}"
        ));
    }
    docs.join("\n---\n")
}

fn gang_racks(report: &Value) -> Vec<String> {
    let mut racks: Vec<String> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["node"].as_str().map(|n| n.split('-').next().unwrap().to_string()))
        .collect();
    racks.sort();
    racks.dedup();
    racks
}

#[test]
fn a_gang_that_requires_a_rack_lands_in_the_rack_with_room_waits_when_none_has_and_spans_the_fewest_racks() {
    // Free per rack: r1 12, r2 16, r3 10, r4 14: the 16-GPU gang lands in r2.
    let path = temp_yaml("rack-fits.yaml", &rack_cluster([4, 0, 0, 0, 6, 0, 2, 0], 2, "rack", None));
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert_eq!(gang_racks(&report), ["r2"]);
    assert_eq!(report["gangs"][0]["scheduled"], true);

    // 46 GPUs free, no rack with 16: the gang waits, holding nothing, and says why.
    let path = temp_yaml("rack-full.yaml", &rack_cluster([4, 0, 2, 0, 6, 0, 2, 0], 2, "rack", None));
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert!(gang_racks(&report).is_empty(), "nothing of the gang is placed");
    assert_eq!(
        report["gangs"][0]["reason"],
        "gang default/gang needs 16 GPUs in one rack; the largest free rack, r2, has 14"
    );

    // 24 GPUs, block required and rack preferred, no rack with 24: two racks of one block.
    let path = temp_yaml("block.yaml", &rack_cluster([0, 8, 0, 0, 2, 2, 2, 2], 3, "block", Some("rack")));
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert_eq!(gang_racks(&report), ["r1", "r2"]);
}

#[test]
fn queues_order_gangs_by_quota_cap_them_by_limit_and_report_their_figures() {
    let path = fixture("queues.yaml");
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    let pods = report["pods"].as_array().unwrap();
    let pod = |name: &str| pods.iter().find(|p| p["name"] == name).unwrap().clone();
    // team-b is within its quota: its younger gang goes before team-a's, which already
    // holds its quota, and takes node-2.
    assert_eq!(pod("b-first-0")["node"], "node-2");
    assert_eq!(pod("a-more-0")["node"], Value::Null);
    // The vision namespace's label puts its notebook in team-b.
    assert_eq!(pod("notebook")["node"], "node-2");
    assert_eq!(
        pod("b-big")["reason"],
        "queue team-b would exceed its limit of 10 nvidia.com/gpu (5 allocated, the gang needs 8)"
    );
    assert_eq!(pod("lost")["reason"], "queue broken is invalid: its parent queue missing does not exist");

    let queues = report["queues"].as_array().unwrap();
    let names: Vec<&str> = queues.iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["broken", "default", "team-a", "team-b"]);
    assert_eq!(queues[1]["parent"], Value::Null);
    assert_eq!(
        queues[3]["resources"]["nvidia.com/gpu"],
        json!({"quota": "8", "limit": "10", "fairShare": "8", "allocated": "5", "requested": "8"})
    );
    assert_eq!(queues[2]["resources"]["nvidia.com/gpu"]["allocated"], "8");
    assert_eq!(queues[0]["problem"], "its parent queue missing does not exist");
}

#[test]
fn without_queue_objects_the_json_has_no_queues() {
    let path = fixture("three-kinds.yaml");
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert!(report.get("queues").is_none());
}

#[test]
fn an_object_without_a_creation_time_is_as_old_as_its_place_among_the_documents() {
    // Two pods stamped by a cluster, then a PodGroup written without a time, then its
    // pods: applied in this order, the PodGroup is younger than both pods before it, so
    // they start first and the gang of 3 waits for the 2 GPUs left.
    let pod = |name: &str, at: &str, group: Option<&str>| {
        let labels = group.map(|g| format!(", labels: {{muster.dev/pod-group: {g}}}")).unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, creationTimestamp: '{at}'{labels}}}\n\
             spec: {{schedulerName: muster, containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: '1'}}}}}}]}}"
        )
    };
    let docs = [
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n\
         status: {allocatable: {cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '4'}}"
            .to_string(),
        pod("batch-a", "2026-12-01T00:00:00Z", None),
        pod("batch-b", "2026-12-01T00:00:01Z", None),
        "apiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: train}\nspec: {minMember: 3}".to_string(),
        pod("train-0", "2026-12-01T00:00:02Z", Some("train")),
        pod("train-1", "2026-12-01T00:00:03Z", Some("train")),
        pod("train-2", "2026-12-01T00:00:04Z", Some("train")),
    ];
    let path = temp_yaml("document-order.yaml", &docs.join("\n---\n"));
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    let bound: Vec<&str> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["node"].is_string())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(bound, ["batch-a", "batch-b"], "{report}");
}

/// Kueue's TAS sample layout: two blocks of two racks, the rack names repeated in each block;
/// every rack's nodes busy but for 4 GPUs in `r1` of each block.
fn tas_cluster(with_topology: bool) -> String {
    let mut docs = Vec::new();
    if with_topology {
        docs.push(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: default}\nspec:\n  levels:\n  \
             - nodeLabel: cloud.provider.com/topology-block\n  - nodeLabel: cloud.provider.com/topology-rack\n  \
             - nodeLabel: kubernetes.io/hostname"
                .to_string(),
        );
    }
    for (block, rack, used) in [("b1", "r1", 4), ("b1", "r2", 8), ("b2", "r1", 4), ("b2", "r2", 8)] {
        let node = format!("{block}-{rack}");
        docs.push(format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n  labels: {{kubernetes.io/hostname: {node}, \
             cloud.provider.com/topology-block: {block}, cloud.provider.com/topology-rack: {rack}}}\n\
             status: {{allocatable: {{cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '8'}}}}"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: busy-{node}}}\nspec: {{nodeName: {node}, \
             containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: '{used}'}}}}}}]}}"
        ));
    }
    docs.push(
        "apiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata:\n  name: train\n  annotations:\n    \
         kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-rack\nspec: {minMember: 2}"
            .to_string(),
    );
    for p in 0..2 {
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: train-{p}, labels: {{muster.dev/pod-group: train}}}}\n\
             spec: {{schedulerName: muster, containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: '4'}}}}}}]}}"
        ));
    }
    docs.join("\n---\n")
}

#[test]
fn with_the_clusters_topology_object_a_rack_name_repeated_in_two_blocks_is_two_racks() {
    // Kueue's Topology says racks sit in blocks: r1 of b1 and r1 of b2 have 4 GPUs free
    // each, so the 8-GPU job that requires one rack waits, holding nothing.
    let path = temp_yaml("tas-topology.yaml", &tas_cluster(true));
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    let gang = &report["gangs"][0];
    assert_eq!(gang["scheduled"], false, "{gang}");
    assert!(report["pods"].as_array().unwrap().iter().all(|p| p["node"].is_null()), "{report}");
    let reason = gang["reason"].as_str().unwrap();
    assert!(reason.contains("b1/r1") || reason.contains("b2/r1"), "{reason}");

    // Without it the two racks named r1 read as one with 8 GPUs free, and the job starts
    // across two blocks: what the Topology object is there to prevent.
    let path = temp_yaml("tas-no-topology.yaml", &tas_cluster(false));
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    assert_eq!(report["gangs"][0]["scheduled"], true);
}

/// A node of 6 GPUs and a PyTorchJob of 1 master + 7 workers, with its 8 pods as the
/// operator makes them (owned by it, no PodGroup).
fn pytorchjob_on_six_gpus() -> String {
    let mut yaml = String::from(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  allocatable: {cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '6'}\n---\n\
         apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: resnet, namespace: ml, uid: u-resnet}\n\
         spec:\n  pytorchReplicaSpecs:\n    Master: {replicas: 1}\n    Worker: {replicas: 7}\n",
    );
    for i in 0..8 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: resnet-{i}\n  namespace: ml\n  ownerReferences:\n  \
             - {{apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: resnet, uid: u-resnet, controller: true}}\n\
             spec:\n  schedulerName: muster\n  containers:\n  - name: c\n    resources: {{limits: {{nvidia.com/gpu: '1'}}}}\n"
        ));
    }
    yaml
}

#[test]
fn pods_of_a_pytorchjob_without_a_podgroup_are_one_gang_and_wait_whole() {
    let path = temp_yaml("pytorchjob.yaml", &pytorchjob_on_six_gpus());
    let (report, _) = simulate_json(&["--cluster", path.to_str().unwrap()]);
    let pods = report["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 8);
    for pod in pods {
        assert_eq!(pod["node"], Value::Null, "6 GPUs place none of a gang of 8: {pod}");
        let reason = pod["reason"].as_str().unwrap();
        assert!(reason.contains("PyTorchJob ml/resnet needs 8 pods at once"), "{reason}");
    }
}

#[test]
fn explain_says_where_a_gang_without_a_podgroup_comes_from() {
    use muster::cli::explain::{Target, explain_objects};
    let loaded = muster::sim::load::load_str(&pytorchjob_on_six_gpus(), "pytorchjob.yaml").unwrap();
    let config = muster::config::Config { scheduler_name: "muster".into(), ..Default::default() };
    let target = Target::Pod { namespace: "ml".into(), name: "resnet-3".into() };
    let text = explain_objects(&loaded.objects, &config, &target, 1_767_232_800).unwrap();
    assert!(text.starts_with("gang of 8 from PyTorchJob ml/resnet: 1 master + 7 workers\n"), "{text}");
    assert!(text.contains("It waits: "), "{text}");
}
