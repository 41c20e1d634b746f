use super::*;

fn object(api_version: &str, kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": "ml", "uid": format!("u-{name}"), "creationTimestamp": "2026-01-01T00:00:05Z"},
           "spec": spec})
}

fn template(gpus: u32) -> Value {
    json!({"metadata": {"labels": {"app": "train"}},
           "spec": {"schedulerName": "muster", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}})
}

fn names(objects: &[Value], kind: &str) -> Vec<String> {
    objects.iter().filter(|o| o["kind"] == kind).map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_job_makes_as_many_pods_as_run_at_once_owned_by_it_and_labelled_as_its_controller_does() {
    let spec = json!({"parallelism": 4, "completions": 16, "completionMode": "Indexed", "template": template(1)});
    let pods = children(WorkloadKind::Job, &object("batch/v1", "Job", "train", spec));
    assert_eq!(names(&pods, "Pod"), ["train-0", "train-1", "train-2", "train-3"]);
    let pod = &pods[2];
    assert_eq!(pod["metadata"]["namespace"], "ml");
    assert_eq!(pod["metadata"]["creationTimestamp"], "2026-01-01T00:00:05Z");
    assert_eq!(pod["metadata"]["labels"]["app"], "train", "the template's labels");
    assert_eq!(pod["metadata"]["labels"]["batch.kubernetes.io/job-name"], "train");
    assert_eq!(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"], "2");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u-train");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Job");
    assert_eq!(pod["spec"]["schedulerName"], "muster");
    let suspended = json!({"parallelism": 4, "suspend": true, "template": template(1)});
    assert!(children(WorkloadKind::Job, &object("batch/v1", "Job", "later", suspended)).is_empty());
}

#[test]
fn a_jobset_makes_its_jobs_and_their_pods() {
    let spec = json!({"replicatedJobs": [
        {"name": "driver", "template": {"spec": {"template": template(0)}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "completions": 2, "template": template(8)}}},
    ]});
    let made = children(WorkloadKind::JobSet, &object("jobset.x-k8s.io/v1alpha2", "JobSet", "js", spec));
    assert_eq!(names(&made, "Job"), ["js-driver-0", "js-workers-0", "js-workers-1"]);
    assert_eq!(
        names(&made, "Pod"),
        ["js-driver-0-0", "js-workers-0-0", "js-workers-0-1", "js-workers-1-0", "js-workers-1-1"]
    );
    let job = made.iter().find(|o| o["metadata"]["name"] == "js-workers-1").unwrap();
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "JobSet");
    let pod = made.iter().find(|o| o["metadata"]["name"] == "js-workers-1-0").unwrap();
    assert_eq!(pod["metadata"]["ownerReferences"][0]["name"], "js-workers-1");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]);
}

#[test]
fn a_training_job_makes_each_replica_of_each_role() {
    let spec = json!({"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template(8)},
                                             "Worker": {"replicas": 2, "template": template(8)}}});
    let pods = children(WorkloadKind::PyTorchJob, &object("kubeflow.org/v1", "PyTorchJob", "resnet", spec));
    assert_eq!(names(&pods, "Pod"), ["resnet-master-0", "resnet-worker-0", "resnet-worker-1"]);
    assert_eq!(pods[1]["metadata"]["labels"]["training.kubeflow.org/replica-type"], "worker");
}

#[test]
fn a_rayjob_makes_its_cluster_with_a_head_and_each_groups_workers() {
    let spec = json!({"rayClusterSpec": {
        "headGroupSpec": {"template": template(0)},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 1, "template": template(1)},
                             {"groupName": "tpu", "minReplicas": 1, "numOfHosts": 2, "template": template(1)}],
    }});
    let made = children(WorkloadKind::RayJob, &object("ray.io/v1", "RayJob", "tune", spec));
    assert_eq!(names(&made, "RayCluster"), ["tune-raycluster"]);
    assert_eq!(
        names(&made, "Pod"),
        [
            "tune-raycluster-head",
            "tune-raycluster-gpu-worker-0",
            "tune-raycluster-gpu-worker-1",
            "tune-raycluster-tpu-worker-0",
            "tune-raycluster-tpu-worker-1"
        ]
    );
    assert_eq!(made[0]["metadata"]["ownerReferences"][0]["kind"], "RayCluster");
}

#[test]
fn a_leader_worker_set_makes_each_group_labelled_with_its_index_and_size() {
    let spec = json!({"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template(1)}});
    let pods = children(
        WorkloadKind::LeaderWorkerSet,
        &object("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", spec),
    );
    assert_eq!(names(&pods, "Pod"), ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"]);
    let worker = &pods[4];
    assert_eq!(worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"], "1");
    assert_eq!(worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"], "3");
    assert!(worker["metadata"].get("ownerReferences").is_none());
}
