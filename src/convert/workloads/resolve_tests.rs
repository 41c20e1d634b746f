use serde_json::{Value, json};

use super::*;

fn workload(
    kind: WorkloadKind,
    name: &str,
    owner: Option<(&str, &str, &str)>,
    spec: Value,
    annotations: Value,
) -> Workload {
    let (group, versions) = kind.api();
    let _ = group;
    let owners = owner.map_or(json!([]), |(api, kind, name)| {
        json!([{"apiVersion": api, "kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true}])
    });
    let object = json!({
        "apiVersion": kind.api_version(versions[0]), "kind": kind.name(),
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-12-01T10:00:00Z",
                     "ownerReferences": owners, "annotations": annotations},
        "spec": spec,
    });
    Workload::read(kind, &object).unwrap()
}

fn pod(name: &str, owner: Option<(&str, &str, &str)>, labels: Value, annotations: Value) -> Pod {
    let owners = owner.map_or(json!([]), |(api, kind, name)| {
        json!([{"apiVersion": api, "kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "labels": labels, "annotations": annotations,
                     "ownerReferences": owners},
        "spec": {"schedulerName": "muster", "containers": [{"name": "c"}]},
    }))
    .unwrap()
}

fn gang(pod: &Pod, workloads: &[Workload], read: &[WorkloadKind]) -> Resolution {
    resolve(pod, &Listed::new(workloads, read.iter().copied().collect()))
}

fn specs(workloads: &[Workload]) -> HashMap<GangKey, GroupSpec> {
    let mut specs = HashMap::new();
    group_specs(&workloads.iter().collect::<Vec<_>>(), &mut specs);
    specs
}

fn spec_of<'s>(specs: &'s HashMap<GangKey, GroupSpec>, name: &str) -> &'s GroupSpec {
    let key = GangKey { kind: GangKind::Workload, namespace: "ml".into(), name: name.into() };
    specs.get(&key).unwrap_or_else(|| panic!("no spec for {name}: {:?}", specs.keys()))
}

const PYTORCH: (&str, &str, &str) = ("kubeflow.org/v1", "PyTorchJob", "resnet");

#[test]
fn a_pytorchjobs_pods_are_one_gang_of_every_replica() {
    let job = workload(
        WorkloadKind::PyTorchJob,
        "resnet",
        None,
        json!({"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 7}}}),
        json!({}),
    );
    let worker = pod("resnet-worker-3", Some(PYTORCH), json!({}), json!({}));
    assert_eq!(gang(&worker, std::slice::from_ref(&job), &[]), Resolution::Gang("PyTorchJob/resnet".into()));
    let specs = specs(&[job]);
    let spec = spec_of(&specs, "PyTorchJob/resnet");
    assert_eq!(spec.min_member, 8);
    assert_eq!(spec.source.as_deref(), Some("PyTorchJob ml/resnet: 1 master + 7 workers"));
    assert_eq!(spec.key.to_string(), "PyTorchJob ml/resnet");
}

#[test]
fn a_jobsets_pods_are_its_gang_not_their_jobs_and_a_trainjob_above_sets_its_minimum_and_queue() {
    let train = workload(
        WorkloadKind::TrainJob,
        "llama",
        None,
        json!({}),
        json!({"muster.dev/min-member": "4", "muster.dev/queue": "team-a"}),
    );
    let set = workload(
        WorkloadKind::JobSet,
        "llama",
        Some(("trainer.kubeflow.org/v1alpha1", "TrainJob", "llama")),
        json!({"replicatedJobs": [{"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}}]}),
        json!({}),
    );
    let job = workload(
        WorkloadKind::Job,
        "llama-node-0",
        Some(("jobset.x-k8s.io/v1alpha2", "JobSet", "llama")),
        json!({"parallelism": 4, "completions": 4, "completionMode": "Indexed"}),
        json!({}),
    );
    let member = pod("llama-node-0-0-abc", Some(("batch/v1", "Job", "llama-node-0")), json!({}), json!({}));
    let all = [train, set, job];
    assert_eq!(gang(&member, &all, &[]), Resolution::Gang("JobSet/llama".into()));
    let specs = specs(&all);
    assert_eq!(specs.len(), 1, "the Job is part of its JobSet's gang, not one of its own: {:?}", specs.keys());
    let spec = spec_of(&specs, "JobSet/llama");
    assert_eq!((spec.min_member, spec.queue.as_deref()), (4, Some("team-a")));
    assert_eq!(spec.source.as_deref(), Some("TrainJob ml/llama through JobSet llama: node: 2 jobs × 4 pods"));
}

#[test]
fn a_work_queue_jobs_pods_stay_alone_and_a_pod_naming_its_podgroup_keeps_it() {
    let queue = workload(WorkloadKind::Job, "crawl", None, json!({"parallelism": 8}), json!({}));
    let worker = pod("crawl-x", Some(("batch/v1", "Job", "crawl")), json!({}), json!({}));
    assert_eq!(gang(&worker, std::slice::from_ref(&queue), &[WorkloadKind::Job]), Resolution::Own);
    let indexed = workload(WorkloadKind::Job, "crawl", None, json!({"parallelism": 8, "completions": 8}), json!({}));
    let named = pod("crawl-y", Some(("batch/v1", "Job", "crawl")), json!({"muster.dev/pod-group": "mine"}), json!({}));
    assert_eq!(gang(&named, &[indexed], &[]), Resolution::Own, "its own PodGroup comes first");
}

#[test]
fn a_pod_whose_owner_is_of_a_kind_read_but_missing_waits_for_it() {
    let orphan = pod("resnet-worker-0", Some(PYTORCH), json!({}), json!({}));
    assert_eq!(gang(&orphan, &[], &[WorkloadKind::PyTorchJob]), Resolution::Gang("PyTorchJob/resnet".into()));
    assert_eq!(gang(&orphan, &[], &[]), Resolution::Own, "a kind not read groups nothing");
    // A workload of the same name but another uid is another object: the owner is missing.
    let mut other = workload(WorkloadKind::PyTorchJob, "resnet", None, json!({"pytorchReplicaSpecs": {}}), json!({}));
    other.metadata.uid = Some("recreated".into());
    assert_eq!(gang(&orphan, &[other], &[WorkloadKind::PyTorchJob]), Resolution::Gang("PyTorchJob/resnet".into()));
}

#[test]
fn a_leader_worker_sets_groups_are_gangs_from_their_pods_labels_with_or_without_the_object() {
    let labels = json!({"leaderworkerset.sigs.k8s.io/name": "vllm", "leaderworkerset.sigs.k8s.io/group-index": "1"});
    let worker = pod("vllm-1-2", None, labels, json!({"leaderworkerset.sigs.k8s.io/size": "4"}));
    assert_eq!(gang(&worker, &[], &[]), Resolution::Gang("LeaderWorkerSet/vllm/1".into()));
    let key = GangKey { kind: GangKind::Workload, namespace: "ml".into(), name: "LeaderWorkerSet/vllm/1".into() };
    let from_pods = pod_spec(&key, &[&worker]).unwrap();
    assert_eq!(from_pods.min_member, 4);
    assert_eq!(from_pods.source.as_deref(), Some("LeaderWorkerSet ml/vllm, group 1: 4 pods, as its pods say"));
    let set = workload(
        WorkloadKind::LeaderWorkerSet,
        "vllm",
        None,
        json!({"replicas": 2, "leaderWorkerTemplate": {"size": 4}}),
        json!({"muster.dev/min-member": "3"}),
    );
    let specs = specs(&[set]);
    assert_eq!(specs.len(), 2);
    assert_eq!(spec_of(&specs, "LeaderWorkerSet/vllm/1").min_member, 3, "the object's minimum wins");
    assert_eq!(
        spec_of(&specs, "LeaderWorkerSet/vllm/0").source.as_deref(),
        Some("LeaderWorkerSet ml/vllm: group 0: 1 leader + 3 workers")
    );
}

#[test]
fn a_kueue_pod_group_is_named_by_its_label_and_sized_by_its_annotation() {
    let member = pod(
        "driver",
        None,
        json!({"kueue.x-k8s.io/pod-group-name": "spark"}),
        json!({"kueue.x-k8s.io/pod-group-total-count": "3"}),
    );
    let key = crate::convert::view::gang_key(&member);
    assert_eq!((key.kind, key.name.as_str()), (GangKind::Workload, "pod-group/spark"));
    assert_eq!(pod_spec(&key, &[&member]).unwrap().min_member, 3);
    let no_count = pod(
        "x",
        None,
        json!({"kueue.x-k8s.io/pod-group-name": "spark"}),
        json!({"kueue.x-k8s.io/pod-group-total-count": "three"}),
    );
    let spec = pod_spec(&key, &[&no_count]).unwrap();
    assert_eq!(spec.problem.as_deref(), Some("Kueue pod group ml/spark: its pods' size is \"three\", not a count"));
}

#[test]
fn a_minimum_that_is_not_a_count_stops_the_gang_with_why_and_mark_replaces_a_pods_own_claim() {
    let job = workload(
        WorkloadKind::Job,
        "train",
        None,
        json!({"parallelism": 8, "completions": 8}),
        json!({"muster.dev/min-member": "half"}),
    );
    let specs = specs(std::slice::from_ref(&job));
    assert_eq!(
        spec_of(&specs, "Job/train").problem.as_deref(),
        Some("Job ml/train: muster.dev/min-member is \"half\", not a count of at least 1")
    );
    let mut member =
        pod("train-0", Some(("batch/v1", "Job", "train")), json!({}), json!({DERIVED_GANG_ANNOTATION: "Job/other"}));
    let listed = Listed::new([&job], BTreeSet::new());
    assert!(mark(&mut member, &listed));
    assert_eq!(crate::convert::view::gang_key(&member).name, "Job/train");
    assert!(!mark(&mut member, &listed), "marking again changes nothing");
    let mut alone = pod("solo", None, json!({}), json!({DERIVED_GANG_ANNOTATION: "Job/train"}));
    assert!(mark(&mut alone, &listed));
    assert_eq!(
        crate::convert::view::gang_key(&alone).kind,
        GangKind::Single,
        "a pod cannot name a derived gang itself"
    );
}
