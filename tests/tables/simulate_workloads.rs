//! `muster simulate` on workloads as users submit them: a Job, a JobSet, a PyTorchJob, a
//! RayJob or a LeaderWorkerSet is expanded into the pods its controllers would create, and
//! those pods are one gang as the scheduler would make them.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn simulate(name: &str, yaml: &str) -> (Value, String) {
    let dir = std::env::temp_dir().join(format!("muster-sim-workloads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["simulate", "--cluster", path.to_str().unwrap(), "--output", "json"])
        .output()
        .expect("muster runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "muster simulate failed: {stderr}");
    (serde_json::from_slice(&output.stdout).expect("one JSON document"), stderr)
}

fn node(name: &str, gpus: u32, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n\
         status: {{allocatable: {{cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '{gpus}'}}}}"
    )
}

/// A pod template of Muster's asking for `gpus` GPUs, indented to sit under `template:` at
/// `indent` spaces, with extra metadata lines (already indented) if any.
fn template(indent: usize, gpus: u32, metadata: &str) -> String {
    let pad = " ".repeat(indent);
    format!(
        "{pad}metadata:\n{pad}  labels: {{app: train}}\n{metadata}{pad}spec:\n{pad}  schedulerName: muster\n\
         {pad}  containers:\n{pad}  - name: c\n{pad}    resources: {{limits: {{nvidia.com/gpu: '{gpus}'}}}}\n"
    )
}

/// The node each pod whose name starts with `prefix` is placed on (None: waits), by name.
fn placed(report: &Value, prefix: &str) -> Vec<(String, Option<String>)> {
    report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"].as_str().unwrap().starts_with(prefix))
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["node"].as_str().map(str::to_string)))
        .collect()
}

fn bound(report: &Value, prefix: &str) -> usize {
    placed(report, prefix).iter().filter(|(_, node)| node.is_some()).count()
}

fn job(name: &str, pods: u32, gpus: u32, extra_metadata: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  parallelism: {pods}\n  \
         completions: {pods}\n  completionMode: Indexed\n  template:\n{}",
        template(4, gpus, extra_metadata)
    )
}

#[test]
fn a_pytorchjob_alone_is_expanded_into_its_replicas_which_wait_whole() {
    let yaml = [
        node("n1", 6, ""),
        format!(
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {{name: resnet, namespace: ml}}\nspec:\n  \
             pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n{}    Worker:\n      \
             replicas: 7\n      template:\n{}",
            template(8, 1, ""),
            template(8, 1, "")
        ),
    ]
    .join("\n---\n");
    let (report, stderr) = simulate("pytorchjob.yaml", &yaml);
    assert!(stderr.contains("PyTorchJob ml/resnet makes 8 pod(s), as its controller would"), "{stderr}");
    let pods = placed(&report, "resnet-");
    assert_eq!(pods.len(), 8);
    assert_eq!(pods[0].0, "resnet-master-0");
    assert_eq!(bound(&report, "resnet-"), 0, "6 GPUs hold none of a gang of 8");
    let reason = report["pods"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("PyTorchJob ml/resnet needs 8 pods at once"), "{reason}");
}

#[test]
fn jobs_without_creation_times_start_in_the_order_of_the_files() {
    let cluster = node("n1", 8, "");
    let (first, second) = (job("first", 2, 4, ""), job("second", 2, 4, ""));
    let (report, _) = simulate("order.yaml", &[cluster.clone(), first.clone(), second.clone()].join("\n---\n"));
    assert_eq!((bound(&report, "first-"), bound(&report, "second-")), (2, 0));
    let (report, _) = simulate("order-swapped.yaml", &[cluster, second, first].join("\n---\n"));
    assert_eq!((bound(&report, "first-"), bound(&report, "second-")), (0, 2));
}

#[test]
fn a_jobs_pods_given_in_the_files_are_not_made_again() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: given-0-abcde\n  namespace: ml\n  ownerReferences:\n  \
               - {apiVersion: batch/v1, kind: Job, name: given, uid: u-given, controller: true}\n\
               spec: {schedulerName: muster, containers: [{name: c, resources: {limits: {nvidia.com/gpu: '1'}}}]}";
    let given = job("given", 2, 1, "").replace("namespace: ml}", "namespace: ml, uid: u-given}");
    let (report, stderr) = simulate("given.yaml", &[node("n1", 8, ""), given, pod.to_string()].join("\n---\n"));
    assert_eq!(placed(&report, "given-").iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["given-0-abcde"]);
    assert!(!stderr.contains("makes"), "{stderr}");
}

#[test]
fn a_leader_worker_set_places_each_group_whole_and_a_rayjob_its_head_and_workers() {
    let lws = format!(
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata: {{name: vllm, namespace: ml}}\n\
         spec:\n  replicas: 2\n  leaderWorkerTemplate:\n    size: 4\n    workerTemplate:\n{}",
        template(6, 1, "")
    );
    let (report, _) = simulate("lws.yaml", &[node("n1", 6, ""), lws].join("\n---\n"));
    let groups = (bound(&report, "vllm-0"), bound(&report, "vllm-1"));
    assert!(groups == (4, 0) || groups == (0, 4), "each group whole or not at all: {groups:?}");

    let ray = format!(
        "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {{name: tune, namespace: ml}}\nspec:\n  rayClusterSpec:\n    \
         headGroupSpec:\n      template:\n{}    workerGroupSpecs:\n    - groupName: gpu\n      replicas: 3\n      \
         minReplicas: 3\n      template:\n{}",
        template(8, 0, ""),
        template(8, 2, "")
    );
    let (report, _) = simulate("rayjob.yaml", &[node("n1", 4, ""), ray.clone()].join("\n---\n"));
    assert_eq!(placed(&report, "tune-").len(), 4, "a head and 3 workers");
    assert_eq!(bound(&report, "tune-"), 0, "the head and its 3 workers need 6 GPUs at once");
    let (report, _) = simulate("rayjob-fits.yaml", &[node("n1", 6, ""), ray].join("\n---\n"));
    assert_eq!(bound(&report, "tune-"), 4);
}

#[test]
fn a_kai_annotated_jobset_waits_for_one_rack_with_room_for_all_its_jobs() {
    let racks = |free_r2: u32| {
        [node("r1-a", 6, "example.com/rack: r1"), node("r2-a", free_r2, "example.com/rack: r2")]
            .into_iter()
            .chain([format!(
                "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: js\n  namespace: ml\n  \
                 annotations: {{kai.scheduler/topology-required-placement: example.com/rack}}\nspec:\n  replicatedJobs:\n  \
                 - name: workers\n    replicas: 2\n    template:\n      spec:\n        parallelism: 2\n        \
                 completions: 2\n        template:\n{}",
                template(10, 2, "")
            )])
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    // 12 GPUs free, 6 in each rack: the JobSet's 8 wait, holding nothing.
    let (report, _) = simulate("jobset-racks.yaml", &racks(6));
    assert_eq!(placed(&report, "js-").len(), 4);
    assert_eq!(bound(&report, "js-"), 0, "{report}");
    let reason = report["pods"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("JobSet ml/js needs 8 GPUs in one example.com/rack"), "{reason}");
    // Rack r2 with 8 free: all four pods there.
    let (report, _) = simulate("jobset-rack-fits.yaml", &racks(8));
    assert!(placed(&report, "js-").iter().all(|(_, node)| node.as_deref() == Some("r2-a")), "{report}");
}

#[test]
fn a_kueue_tas_job_requiring_a_rack_waits_when_its_rack_name_has_room_only_summed_across_blocks() {
    let cluster = |with_topology: bool| {
        let mut docs = Vec::new();
        if with_topology {
            docs.push(
                "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: default}\nspec:\n  levels:\n  \
                 - nodeLabel: cloud.provider.com/topology-block\n  - nodeLabel: cloud.provider.com/topology-rack"
                    .to_string(),
            );
        }
        for (block, rack, free) in [("b1", "r1", 4), ("b1", "r2", 0), ("b2", "r1", 4), ("b2", "r2", 0)] {
            let labels =
                format!("cloud.provider.com/topology-block: {block}, cloud.provider.com/topology-rack: {rack}");
            docs.push(node(&format!("{block}-{rack}"), free, &labels));
        }
        let required =
            "      annotations: {kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-rack}\n";
        docs.push(job("tas", 2, 4, required));
        docs.join("\n---\n")
    };
    let (report, _) = simulate("tas-job.yaml", &cluster(true));
    assert_eq!(bound(&report, "tas-"), 0, "no (block, rack) has 8 GPUs free: {report}");
    let (report, _) = simulate("tas-job-no-topology.yaml", &cluster(false));
    assert_eq!(bound(&report, "tas-"), 2, "without the Topology object the two r1 racks read as one");
}

#[test]
fn a_workload_whose_pods_would_not_read_is_an_error_naming_the_workload() {
    let bad = job("broken", 2, 1, "").replace("resources: {limits: {nvidia.com/gpu: '1'}}", "resources: many");
    let error = muster::sim::load::load_str(&bad, "broken.yaml").unwrap_err().to_string();
    assert!(error.starts_with("broken.yaml: Job ml/broken: it makes Pod ml/broken-0: "), "{error}");
}
