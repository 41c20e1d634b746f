//! A snapshot brought up to date after a change is the snapshot made afresh from the same
//! cache, change after change: pods created, bound, assumed, ended, deleted and moved
//! between gangs; PodGroups changed; nodes changed in place or added; queues configured.
//! And it is brought up to date, not made afresh, when only pods, PodGroups or a node's
//! taints changed.

use muster::api::queue::Queue;
use muster::convert::assemble::{Assembled, Memo, assemble_view};
use muster::convert::objects::{gpu_node, pod_group, training_pod};
use muster::engine::model::PodKey;
use muster::k8s::store::cache::Cache;

fn versioned<K: kube::ResourceExt>(mut object: K, version: &mut u64) -> K {
    *version += 1;
    object.meta_mut().resource_version = Some(version.to_string());
    object
}

/// What a cycle reads of a snapshot, part by part, comparable.
fn essence(out: &Assembled) -> Vec<(&'static str, String)> {
    let s = &out.snapshot;
    let mut gang_of: Vec<_> = out.gang_of.iter().collect();
    gang_of.sort();
    let mut specs: Vec<_> = out.specs.iter().collect();
    specs.sort_by(|a, b| a.0.cmp(b.0));
    vec![
        ("nodes", format!("{:?}", s.nodes)),
        ("gangs", format!("{:?}", s.gangs)),
        ("running", format!("{:?}", s.running)),
        ("topology", format!("{:?}", s.topology)),
        ("queues", format!("{:?}", s.queues)),
        ("groups", format!("{:?}", out.groups)),
        ("rejected", format!("{:?}", out.rejected_pods)),
        ("problems", format!("{:?}", out.problems)),
        ("gang_of", format!("{gang_of:?}")),
        ("specs", format!("{specs:?}")),
    ]
}

struct Cluster {
    cache: Cache,
    memo: Memo,
    version: u64,
}

impl Cluster {
    fn new(queues: bool) -> Cluster {
        let mut cluster = Cluster { cache: Cache::new(Vec::new()), memo: Memo::default(), version: 0 };
        for i in 0..12 {
            let node =
                versioned(gpu_node(&format!("node-{i:02}"), &format!("rack-{}", i / 4), 8), &mut cluster.version);
            cluster.cache.nodes.apply(node);
        }
        if queues {
            let queue: Queue = serde_json::from_value(serde_json::json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "Queue",
                "metadata": {"name": "default"},
                "spec": {"resources": {"nvidia.com/gpu": {"quota": 64}}},
            }))
            .unwrap();
            let queue = versioned(queue, &mut cluster.version);
            cluster.cache.queues.apply(queue);
        }
        cluster
    }

    fn pod(
        &mut self,
        name: &str,
        gpus: u32,
        group: Option<&str>,
        node: Option<&str>,
    ) -> k8s_openapi::api::core::v1::Pod {
        let mut pod = training_pod(name, gpus, 0, "muster", group);
        pod.spec.as_mut().unwrap().node_name = node.map(String::from);
        versioned(pod, &mut self.version)
    }

    /// The snapshot brought up to date equals the one made afresh; returns how many times
    /// the memo made everything afresh for it.
    fn check(&mut self, step: &str) -> u64 {
        let before = self.memo.rebuilds();
        let kept = assemble_view(&self.cache.view(), "muster", 100, &mut self.memo);
        let fresh = assemble_view(&self.cache.view(), "muster", 100, &mut Memo::default());
        for ((part, kept), (_, fresh)) in essence(&kept).into_iter().zip(essence(&fresh)) {
            assert_eq!(kept, fresh, "{part} after {step}");
        }
        self.memo.rebuilds() - before
    }
}

#[test]
fn a_snapshot_brought_up_to_date_is_the_one_made_afresh() {
    for queues in [false, true] {
        let mut c = Cluster::new(queues);
        assert_eq!(c.check("the first snapshot"), 1);
        // Gangs of four, half running.
        for g in 0..4 {
            let group = versioned(pod_group(&format!("job-{g}"), 4, g), &mut c.version);
            c.cache.muster_groups.apply(group);
            for p in 0..4 {
                let node = (g % 2 == 0).then(|| format!("node-{:02}", g * 2 + p / 2));
                let pod = c.pod(&format!("job-{g}-{p}"), 2, Some(&format!("job-{g}")), node.as_deref());
                c.cache.apply_pod(pod);
            }
        }
        let single = c.pod("single", 1, None, None);
        c.cache.apply_pod(single);
        let other = {
            let mut pod = training_pod("other", 3, 0, "default-scheduler", None);
            pod.spec.as_mut().unwrap().node_name = Some("node-11".into());
            versioned(pod, &mut c.version)
        };
        c.cache.apply_pod(other);
        assert_eq!(c.check("pods and groups created"), 0, "brought up to date");
        let out = assemble_view(&c.cache.view(), "muster", 100, &mut Memo::default());
        assert_eq!(out.snapshot.running.is_empty(), !queues, "running gangs are listed with queues");

        // A waiting pod is assumed on a node, then bound there.
        c.cache.assume(PodKey { namespace: "default".into(), name: "job-1-0".into() }, "node-05".into());
        assert_eq!(c.check("an assumption"), 0);
        let bound = c.pod("job-1-0", 2, Some("job-1"), Some("node-05"));
        c.cache.apply_pod(bound);
        assert_eq!(c.check("the assumed pod bound"), 0);
        c.cache.assume(PodKey { namespace: "default".into(), name: "job-1-1".into() }, "node-05".into());
        c.cache.forget(&PodKey { namespace: "default".into(), name: "job-1-1".into() });
        assert_eq!(c.check("an assumption forgotten"), 0);

        // A running pod ends; another is deleted; one moves to another gang.
        let mut ended = c.pod("job-0-0", 2, Some("job-0"), Some("node-00"));
        ended.status =
            Some(k8s_openapi::api::core::v1::PodStatus { phase: Some("Succeeded".into()), ..Default::default() });
        c.cache.apply_pod(ended);
        assert_eq!(c.check("a pod ended"), 0);
        let deleted = c.pod("job-2-3", 2, Some("job-2"), Some("node-05"));
        c.cache.delete_pod(&deleted);
        assert_eq!(c.check("a pod deleted"), 0);
        let moved = c.pod("job-3-3", 2, Some("job-1"), None);
        c.cache.apply_pod(moved);
        assert_eq!(c.check("a pod moved to another gang"), 0);
        let terminating = {
            let mut pod = c.pod("job-2-0", 2, Some("job-2"), Some("node-04"));
            pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_767_225_700).unwrap(),
            ));
            pod
        };
        c.cache.apply_pod(terminating);
        assert_eq!(c.check("a pod terminating"), 0);

        // A pod the engine cannot read is rejected, then fixed.
        let mut bad = c.pod("bad", 1, None, None);
        bad.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .limits
            .as_mut()
            .unwrap()
            .insert("nvidia.com/gpu".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()));
        c.cache.apply_pod(bad);
        assert_eq!(c.check("an unreadable pod"), 0);
        let fixed = c.pod("bad", 1, None, None);
        c.cache.apply_pod(fixed);
        assert_eq!(c.check("the pod fixed"), 0);

        // PodGroups change: a gang's size, a group removed, a group for pods that had none.
        let group = versioned(pod_group("job-1", 3, 1), &mut c.version);
        c.cache.muster_groups.apply(group);
        assert_eq!(c.check("a PodGroup resized"), 0);
        let group = pod_group("job-3", 4, 3);
        c.cache.muster_groups.delete(&group);
        assert_eq!(c.check("a PodGroup deleted"), 0);
        let group = versioned(pod_group("job-3", 4, 3), &mut c.version);
        c.cache.muster_groups.apply(group);
        assert_eq!(c.check("a PodGroup created again"), 0);

        // A node tainted in place keeps the snapshot; a node added or relabelled rebuilds it.
        let mut tainted = gpu_node("node-03", "rack-0", 8);
        tainted.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "gpu-broken".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let tainted = versioned(tainted, &mut c.version);
        c.cache.nodes.apply(tainted);
        assert_eq!(c.check("a node tainted"), 0);
        let added = versioned(gpu_node("node-12", "rack-3", 8), &mut c.version);
        c.cache.nodes.apply(added);
        assert_eq!(c.check("a node added"), 1);
        let moved = versioned(gpu_node("node-12", "rack-0", 8), &mut c.version);
        c.cache.nodes.apply(moved);
        assert_eq!(c.check("a node moved to another rack"), 1);
        let on_new = c.pod("late", 4, None, Some("node-12"));
        c.cache.apply_pod(on_new);
        assert_eq!(c.check("a pod bound to the new node"), 0);

        // A store read as a whole (priority classes) rebuilds.
        let class: k8s_openapi::api::scheduling::v1::PriorityClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "high", "resourceVersion": "1"}, "value": 1000, "globalDefault": true,
        }))
        .unwrap();
        c.cache.priority_classes.apply(class);
        assert_eq!(c.check("a priority class"), 1);

        // A relist of pods: made afresh, then brought up to date again.
        c.cache.pods.relist_start();
        let pods: Vec<_> = c.cache.pods.values().cloned().collect();
        for pod in pods {
            c.cache.pods.relisted(pod);
        }
        c.cache.pods_relisted();
        assert_eq!(c.check("a relist"), 1);
        let last = c.pod("last", 1, None, None);
        c.cache.apply_pod(last);
        assert_eq!(c.check("a pod after the relist"), 0);
    }
}

#[test]
fn a_cycle_reads_a_shared_view_and_brings_its_snapshot_up_to_date() {
    let mut c = Cluster::new(false);
    let pod = c.pod("a", 1, None, None);
    c.cache.apply_pod(pod);
    let shared = c.cache.shared(c.memo.seen());
    assemble_view(&shared.view(), "muster", 0, &mut c.memo);
    for i in 0..3 {
        let pod = c.pod(&format!("b{i}"), 1, None, None);
        c.cache.apply_pod(pod);
    }
    let before = c.memo.rebuilds();
    let shared = c.cache.shared(c.memo.seen());
    // A change after the view was taken is the next cycle's.
    let late = c.pod("late", 1, None, None);
    c.cache.apply_pod(late);
    let out = assemble_view(&shared.view(), "muster", 0, &mut c.memo);
    assert_eq!(c.memo.rebuilds(), before, "brought up to date");
    assert_eq!(out.snapshot.gangs.len(), 4);
    let out = assemble_view(&c.cache.shared(c.memo.seen()).view(), "muster", 0, &mut c.memo);
    assert_eq!(out.snapshot.gangs.len(), 5, "the late pod is seen next");
    assert_eq!(c.memo.rebuilds(), before);
}
