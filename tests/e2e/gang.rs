//! Gang scheduling end to end, against the real API server: all or nothing, bound
//! together, rolled back whole, and side by side with the real kube-scheduler.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use muster::api::pod_group::{PodGroup, PodGroupPhase, PodGroupSpec, PodGroupStatus};
use muster::convert::status::Unplaced;
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::write::bind::{BindHook, HookAction};
use serde_json::json;

use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::gangs::{GROUP_LABEL, create_group, job};
use crate::support::wait::{events_for, node_of, phase, pods, unschedulable_message, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

async fn create_nodes(cluster: &TestCluster, names: &[&str], gpus: u32, label: &str) -> Vec<String> {
    let mut created = Vec::new();
    for name in names {
        let full = cluster.name(name);
        let node = builders::node(&full, 32, 256, gpus, &[(TEST_LABEL, label), ("topology.muster.dev/rack", "r1")]);
        cluster.create_node(&node).await;
        created.push(full);
    }
    created
}

/// A test's corner of the control plane with Muster's CRDs, nodes `n1..` of `node_gpus`
/// GPUs, and Muster's PodGroup `group` of `min_member` with `pods` bare pods `<group>-<i>`
/// of `pod_gpus` GPUs each. Returns the cluster, its pod API and the node names.
async fn gang_fixture(
    test: &str,
    nodes: usize,
    node_gpus: u32,
    group: &str,
    min_member: i32,
    pods: usize,
    pod_gpus: u32,
) -> (TestCluster, Api<Pod>, Vec<String>) {
    let cluster = TestCluster::new(test).await;
    scheduler::install_crds(&cluster).await;
    let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let nodes = create_nodes(&cluster, &names, node_gpus, &cluster.id).await;
    create_group(&cluster, group, min_member).await;
    let api = cluster.api::<Pod>();
    for i in 0..pods {
        cluster.create(&api, &gang_pod(&cluster, &format!("{group}-{i}"), group, pod_gpus)).await;
    }
    (cluster, api, nodes)
}

fn gang_pod(cluster: &TestCluster, name: &str, group: &str, gpus: u32) -> Pod {
    builders::pod(name, &cluster.scheduler_name, gpus, &[(GROUP_LABEL, group)])
}

fn group_of(pod: &Pod) -> &str {
    pod.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL)).map_or("", |s| s.as_str())
}

fn running_in(pods: &[Pod], group: &str) -> usize {
    pods.iter().filter(|p| group_of(p) == group && phase(p) == "Running").count()
}

/// Waits for Muster's PodGroup `name` to have a status that passes `check`.
async fn wait_for_group(cluster: &TestCluster, name: &str, check: impl Fn(&PodGroupStatus) -> bool) -> PodGroupStatus {
    let groups = cluster.api::<PodGroup>();
    within(20, &format!("the status of PodGroup {name}"), async {
        loop {
            if let Some(status) = groups.get(name).await.expect("get PodGroup").status.filter(|s| check(s)) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_eight_pod_gangs_on_eight_gpus_one_runs_whole_then_the_other() {
    let cluster = TestCluster::new("two-jobs").await;
    scheduler::install_crds(&cluster).await;
    create_nodes(&cluster, &["n1", "n2"], 4, &cluster.id).await;
    create_group(&cluster, "job-a", 8).await;
    create_group(&cluster, "job-b", 8).await;
    let api = cluster.api::<Pod>();
    // Created interleaved, as two Job controllers starting together create them.
    for i in 0..8 {
        for job in ["job-a", "job-b"] {
            cluster.create(&api, &gang_pod(&cluster, &format!("{job}-{i}"), job, 1)).await;
        }
    }
    let kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    let all = wait_for_pods(&cluster, 60, "job-a running whole", |p| running_in(p, "job-a") == 8).await;
    assert!(all.iter().filter(|p| group_of(p) == "job-b").all(|p| node_of(p).is_none()), "job-b must hold nothing");
    let expected = format!("gang {}/job-b needs 8 pods at once, 0 fit", cluster.namespace);
    let all = wait_for_pods(&cluster, 30, "job-b's pods marked Unschedulable", |p| {
        p.iter().filter(|p| group_of(p) == "job-b").all(|p| unschedulable_message(p).is_some())
    })
    .await;
    let message =
        unschedulable_message(all.iter().find(|p| p.metadata.name.as_deref() == Some("job-b-0")).unwrap()).unwrap();
    assert!(message.starts_with("0/2 nodes are available: 2 Insufficient nvidia.com/gpu"), "{message}");
    assert!(message.ends_with(&expected), "{message}");
    let events = wait_for_events(&cluster, "job-b-0", "FailedScheduling").await;
    assert!(events.iter().any(|e| e.contains(&expected)), "no FailedScheduling event saying why: {events:?}");
    let scheduled = wait_for_events(&cluster, "job-a-0", "Scheduled").await;
    assert!(scheduled[0].contains(&format!("gang {}/job-a", cluster.namespace)), "{scheduled:?}");
    // PodGroup status says the same.
    let a = wait_for_group(&cluster, "job-a", |s| s.phase == Some(PodGroupPhase::Running)).await;
    assert_eq!((a.scheduled, a.running, a.min_member), (8, 8, 8));
    let b = wait_for_group(&cluster, "job-b", |s| {
        s.conditions.iter().any(|c| c.type_ == "Scheduled" && c.message.ends_with(&expected))
    })
    .await;
    assert_eq!(b.phase, Some(PodGroupPhase::Pending));
    let scheduled = b.conditions.iter().find(|c| c.type_ == "Scheduled").expect("Scheduled condition");
    assert_eq!((scheduled.status.as_str(), scheduled.reason.as_str()), ("False", "Unschedulable"));
    assert!(scheduled.message.ends_with(&expected), "{}", scheduled.message);

    // job-a finishes; job-b takes the GPUs, whole.
    for i in 0..8 {
        kubelet.complete(&format!("job-a-{i}")).await;
    }
    wait_for_pods(&cluster, 60, "job-b running whole after job-a", |p| running_in(p, "job-b") == 8).await;

    // The same pods, given to the real kube-scheduler on nodes of their own: recorded, not asserted.
    let kube_label = format!("{}-kube", cluster.id);
    let kube_name = format!("kube-{}", cluster.id);
    create_nodes(&cluster, &["k1", "k2"], 4, &kube_label).await;
    cluster.control_plane.start_kube_scheduler(&kube_name);
    for i in 0..8 {
        for job in ["kube-job-a", "kube-job-b"] {
            let mut pod = builders::pod(&format!("{job}-{i}"), &kube_name, 1, &[("job", job)]);
            pod.spec.as_mut().unwrap().node_selector = Some([(TEST_LABEL.to_string(), kube_label.clone())].into());
            cluster.create(&api, &pod).await;
        }
    }
    let all = wait_for_pods(&cluster, 60, "kube-scheduler to fill its 8 GPUs", |p| {
        p.iter()
            .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("kube-")) && node_of(p).is_some())
            .count()
            == 8
    })
    .await;
    let mut split: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in all.iter().filter(|p| node_of(p).is_some()) {
        if let Some(job) = pod.metadata.labels.as_ref().and_then(|l| l.get("job")) {
            *split.entry(job.as_str()).or_default() += 1;
        }
    }
    let report = format!(
        "side by side on 8 GPUs (2 nodes x 4), two 8-pod jobs created interleaved:\n  \
         muster:         job-a 8/8 bound, job-b 0/8 bound (8/8 once job-a finished)\n  \
         kube-scheduler: {}\n",
        split.iter().map(|(j, n)| format!("{j} {n}/8 bound")).collect::<Vec<_>>().join(", ")
    );
    eprint!("{report}");
    // Kept where the test command leaves its results, so the comparison can be read after a run.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("side-by-side-two-jobs.txt"), &report).expect("failed to record the side-by-side result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_larger_than_the_cluster_waits_holding_nothing_until_a_node_joins() {
    let (cluster, api, _) = gang_fixture("grow", 1, 8, "big", 2, 2, 8).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let all = wait_for_pods(&cluster, 30, "the gang marked Unschedulable", |p| {
        p.iter().all(|p| unschedulable_message(p).is_some())
    })
    .await;
    assert!(all.iter().all(|p| node_of(p).is_none()), "half of the gang was bound");
    let message = unschedulable_message(&all[0]).unwrap();
    assert!(message.contains("needs 2 pods at once"), "{message}");

    create_nodes(&cluster, &["n2"], 8, &cluster.id).await;
    let all = wait_for_pods(&cluster, 60, "the gang running on both nodes", |p| running_in(p, "big") == 2).await;
    let nodes: std::collections::BTreeSet<_> = all.iter().filter_map(node_of).collect();
    assert_eq!(nodes.len(), 2);
}

/// Counts the binds of `gang`'s pods: in its first attempt (its first `size` binds), the
/// binds from the `from`-th on fail; with `transient`, only the `from`-th, once, retryably.
struct FaultyBinder {
    gang: String,
    size: usize,
    from: usize,
    transient: bool,
    calls: AtomicUsize,
    first_pod: Mutex<Option<String>>,
}

impl FaultyBinder {
    fn new(gang: &str, size: usize, from: usize, transient: bool) -> Arc<FaultyBinder> {
        Arc::new(FaultyBinder {
            gang: gang.into(),
            size,
            from,
            transient,
            calls: 0.into(),
            first_pod: Mutex::default(),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl BindHook for FaultyBinder {
    fn before_bind(&self, gang: &GangKey, _index: usize, pod: &PodKey) -> HookAction {
        if gang.name != self.gang {
            return HookAction::Proceed;
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n == 0 {
            *self.first_pod.lock().unwrap() = Some(pod.name.clone());
        }
        match (n < self.size, self.transient) {
            (true, true) if n == self.from => HookAction::FailOnce,
            (true, false) if n >= self.from => HookAction::Fail(format!("injected failure binding pod {}", pod.name)),
            _ => HookAction::Proceed,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_whose_binding_breaks_midway_is_evicted_whole_and_placed_again() {
    let cluster = TestCluster::new("rollback").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    create_nodes(&cluster, &["n1"], 8, &cluster.id).await;
    create_group(&cluster, "train", 4).await;
    let api = cluster.api::<Pod>();
    let _kubelet = KubeletEmulator::start(api.clone());
    let hook = FaultyBinder::new("train", 4, 1, false);
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), Some(hook.clone()));
    cluster.create(&cluster.api::<Job>(), &job(&cluster, "train", 4, 2)).await;

    let all = wait_for_pods(&cluster, 90, "the gang running whole after its rollback", |p| {
        hook.calls() >= 8 && running_in(p, "train") == 4
    })
    .await;
    // The pod bound in the broken attempt was evicted and is gone; the Job made a new one.
    let first = hook.first_pod.lock().unwrap().clone().expect("the hook saw the first bind");
    assert!(all.iter().all(|p| p.metadata.name.as_deref() != Some(first.as_str())), "{first} survived the rollback");
    let evicted = wait_for_events(&cluster, &first, "BindFailed").await;
    assert!(evicted.iter().any(|e| e.contains("rolled back") && e.contains("injected failure")), "{evicted:?}");
    assert_eq!(all.iter().filter(|p| node_of(p).is_some() && phase(p) == "Running").count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_bind_error_is_retried_and_the_gang_ends_whole() {
    let (cluster, api, _) = gang_fixture("retry", 1, 8, "train", 4, 4, 2).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let hook = FaultyBinder::new("train", 4, 2, true);
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), Some(hook.clone()));
    wait_for_pods(&cluster, 60, "the gang running whole", |p| running_in(p, "train") == 4).await;
    assert_eq!(hook.calls(), 4, "the gang should have been bound in one attempt");
    assert!(events_for(&cluster, "train-0", "BindFailed").await.is_empty());
}

fn exists(pods: &[Pod], name: &str) -> bool {
    pods.iter().any(|p| p.metadata.name.as_deref() == Some(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_whose_pods_never_all_become_ready_is_evicted_whole_at_the_timeout() {
    let cluster = TestCluster::new("ready-timeout").await;
    scheduler::install_crds(&cluster).await;
    create_nodes(&cluster, &["n1"], 8, &cluster.id).await;
    let group = PodGroup::new(
        "stuck",
        PodGroupSpec { min_member: 2, pods_ready_timeout_seconds: Some(3), ..Default::default() },
    );
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let api = cluster.api::<Pod>();
    let mut pods: Vec<Pod> = (0..2).map(|i| gang_pod(&cluster, &format!("stuck-{i}"), "stuck", 1)).collect();
    // The kubelet emulator never starts this one: the gang is bound but never Ready.
    pods[1].metadata.labels.as_mut().unwrap().insert(crate::support::kubelet::HOLD_LABEL.into(), "true".into());
    for pod in &pods {
        cluster.create(&api, pod).await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    wait_for_pods(&cluster, 30, "the gang bound", |p| p.iter().all(|p| node_of(p).is_some())).await;
    wait_for_pods(&cluster, 30, "the gang evicted whole", |p| !exists(p, "stuck-0") && !exists(p, "stuck-1")).await;
    let events = wait_for_events(&cluster, "stuck-0", "PodsReadyTimeout").await;
    assert!(events[0].contains("only 1 of 2 pods Ready"), "{events:?}");
    let status = wait_for_group(&cluster, "stuck", |s| s.conditions.iter().any(|c| c.type_ == "Evicted")).await;
    let evicted = status.conditions.iter().find(|c| c.type_ == "Evicted").unwrap();
    assert_eq!(evicted.reason, "PodsReadyTimeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_gang_that_loses_a_pod_is_evicted_whole_after_the_grace_period() {
    let (cluster, api, _) = gang_fixture("broken", 1, 8, "pair", 2, 2, 1).await;
    let kubelet = KubeletEmulator::start(api.clone());
    let mut config = scheduler::config(&cluster);
    config.gang_broken_grace_seconds = 1;
    let _muster = scheduler::start(&cluster, config, None);
    wait_for_pods(&cluster, 30, "the gang running", |p| running_in(p, "pair") == 2).await;
    kubelet.fail("pair-0").await;
    wait_for_pods(&cluster, 30, "the rest of the gang evicted", |p| !exists(p, "pair-1")).await;
    let events = wait_for_events(&cluster, "pair-1", "GangBroken").await;
    assert!(events[0].contains("1 of 2 pods alive"), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_restarted_while_a_ready_gang_is_losing_a_pod_grants_the_grace_period() {
    let (cluster, api, _) = gang_fixture("restart-broken", 1, 8, "pair", 2, 2, 1).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    wait_for_pods(&cluster, 30, "the gang running", |p| running_in(p, "pair") == 2).await;
    wait_for_group(&cluster, "pair", |s| s.conditions.iter().any(|c| c.type_ == "PodsReady" && c.status == "True"))
        .await;
    drop(muster);
    // Dropping only asks the task to stop: let it, so no write of the old scheduler lands
    // after the pod is gone (a crashed process writes nothing more).
    tokio::time::sleep(Duration::from_millis(500)).await;
    // What the restarted scheduler will read: the gang's PodGroup says it was Ready.
    wait_for_group(&cluster, "pair", |s| s.conditions.iter().any(|c| c.type_ == "PodsReady" && c.status == "True"))
        .await;
    // While Muster is down, one pod goes for good (its node was lost): the pods left no
    // longer show that the gang was ever whole; only its PodGroup's status does.
    let now = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    api.delete("pair-0", &now).await.expect("delete pair-0");
    wait_for_pods(&cluster, 30, "pair-0 gone", |p| !exists(p, "pair-0")).await;
    let mut config = scheduler::config(&cluster);
    config.gang_broken_grace_seconds = 8;
    let _restarted = scheduler::start(&cluster, config, None);
    // Not evicted at once as partly bound: the grace period runs first.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(exists(&pods(&cluster).await, "pair-1"), "evicted before its grace period");
    assert!(events_for(&cluster, "pair-1", "BindFailed").await.is_empty(), "evicted as partly bound");
    wait_for_pods(&cluster, 30, "the rest of the gang evicted after the grace period", |p| !exists(p, "pair-1")).await;
    let events = wait_for_events(&cluster, "pair-1", "GangBroken").await;
    assert!(events[0].contains("1 of 2 pods alive"), "{events:?}");
}

/// Pauses the binds of `gang` from the `from`-th on (first attempt only), so the test can
/// stop the scheduler in the middle of binding it.
struct PauseMidway {
    gang: String,
    from: usize,
    calls: AtomicUsize,
}

impl BindHook for PauseMidway {
    fn before_bind(&self, gang: &GangKey, _index: usize, _pod: &PodKey) -> HookAction {
        if gang.name != self.gang {
            return HookAction::Proceed;
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n >= self.from { HookAction::Pause(Duration::from_secs(600)) } else { HookAction::Proceed }
    }
}

/// Starts a scheduler that stops after binding two of the gang `train`'s four pods.
async fn stop_midway(cluster: &TestCluster) {
    let hook = Arc::new(PauseMidway { gang: "train".into(), from: 2, calls: 0.into() });
    let muster = scheduler::start(cluster, scheduler::config(cluster), Some(hook));
    wait_for_pods(cluster, 30, "half of the gang bound", |p| {
        p.iter().filter(|p| node_of(p).is_some() && group_of(p) == "train").count() == 2
    })
    .await;
    drop(muster);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bound = pods(cluster).await.iter().filter(|p| node_of(p).is_some() && group_of(p) == "train").count();
    assert_eq!(bound, 2, "the stopped scheduler went on binding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_restarted_mid_binding_finishes_the_gang_when_it_fits() {
    let (cluster, api, _) = gang_fixture("restart-finish", 1, 8, "train", 4, 4, 2).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    stop_midway(&cluster).await;
    let _restarted = scheduler::start(&cluster, scheduler::config(&cluster), None);
    wait_for_pods(&cluster, 30, "the gang finished whole", |p| running_in(p, "train") == 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_restarted_mid_binding_evicts_the_gang_when_it_cannot_be_finished() {
    let (cluster, api, nodes) = gang_fixture("restart-evict", 1, 8, "train", 4, 4, 2).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    stop_midway(&cluster).await;
    // While Muster is down, another scheduler takes the GPUs the rest of the gang needed.
    cluster.create(&api, &builders::pod("blocker", "someone-else", 4, &[])).await;
    cluster.bind("blocker", &nodes[0]).await;
    let _restarted = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let all = wait_for_pods(&cluster, 30, "the half-bound gang evicted", |p| {
        p.iter().filter(|p| group_of(p) == "train").count() == 2
            && p.iter().filter(|p| group_of(p) == "train").all(|p| node_of(p).is_none())
    })
    .await;
    let evicted: Vec<&str> =
        ["train-0", "train-1", "train-2", "train-3"].into_iter().filter(|n| !exists(&all, n)).collect();
    assert_eq!(evicted.len(), 2);
    let events = wait_for_events(&cluster, evicted[0], "BindFailed").await;
    assert!(events[0].contains("partly bound (2 of 4 pods)"), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_own_podgroup_is_a_gang_and_is_marked_initially_scheduled() {
    use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
    let cluster = TestCluster::new("native").await;
    scheduler::install_crds(&cluster).await;
    create_nodes(&cluster, &["n1"], 8, &cluster.id).await;
    let groups: Api<KubernetesPodGroup> = cluster.api();
    let group: KubernetesPodGroup = serde_json::from_value(json!({
        "metadata": {"name": "native"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }))
    .expect("PodGroup");
    cluster.create(&groups, &group).await;
    let api = cluster.api::<Pod>();
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let native_pod = |i: usize| {
        let mut pod = builders::pod(&format!("native-{i}"), &cluster.scheduler_name, 2, &[]);
        pod.spec.as_mut().unwrap().scheduling_group =
            Some(serde_json::from_value(json!({"podGroupName": "native"})).unwrap());
        pod
    };
    // Two of three pods: the gang waits for the third, holding nothing.
    for i in 0..2 {
        cluster.create(&api, &native_pod(i)).await;
    }
    let all = wait_for_pods(&cluster, 30, "the first two pods marked Unschedulable", |p| {
        p.iter().all(|p| unschedulable_message(p).is_some())
    })
    .await;
    let message = unschedulable_message(&all[0]).unwrap();
    assert!(message.contains("has 2 of the 3 pods its minMember needs"), "{message}");
    assert!(all.iter().all(|p| node_of(p).is_none()));
    cluster.create(&api, &native_pod(2)).await;
    wait_for_pods(&cluster, 30, "the gang running", |p| p.iter().filter(|p| phase(p) == "Running").count() == 3).await;
    within(20, "PodGroupInitiallyScheduled", async {
        loop {
            let group = groups.get("native").await.expect("get PodGroup");
            let conditions = group.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == "True") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// A cycle decides a pod waits and the background writer says so later: if the pod was
/// bound in between, the late `PodScheduled=False` must not land on it (a running pod
/// marked Unschedulable misleads people and autoscalers). An unbound pod gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_unschedulable_condition_does_not_land_on_a_bound_pod() {
    use muster::k8s::write::sink::ApiSink;
    use muster::k8s::write::writer::{PodRef, Sink, Write};

    let cluster = TestCluster::new("late-condition").await;
    let node = cluster.name("n1");
    cluster.create_node(&builders::node(&node, 8, 64, 0, &[(TEST_LABEL, cluster.id.as_str())])).await;
    let pods = cluster.api::<Pod>();
    // No scheduler runs for this name: the test binds by hand.
    let nobody = format!("nobody-{}", cluster.id);
    for name in ["bound", "waiting"] {
        cluster.create(&pods, &builders::pod(name, &nobody, 0, &[])).await;
    }
    cluster.bind("bound", &node).await;
    let sink = ApiSink::new(cluster.client.clone(), "muster", Duration::from_secs(10));
    for name in ["bound", "waiting"] {
        let pod = PodRef { namespace: cluster.namespace.clone(), name: name.into(), uid: None };
        let write = Write::Unschedulable { pod, message: "0/1 nodes fit".into(), unplaced: Unplaced::Unschedulable };
        sink.write(&write).await.expect("the write is answered");
    }
    let scheduled = |pod: &Pod| -> Option<String> {
        let conditions = pod.status.as_ref()?.conditions.as_ref()?;
        conditions
            .iter()
            .find(|c| c.type_ == "PodScheduled")
            .map(|c| format!("{}/{}", c.status, c.reason.clone().unwrap_or_default()))
    };
    let bound = pods.get("bound").await.unwrap();
    assert_eq!(scheduled(&bound).as_deref().map(|s| s.starts_with("True")), Some(true), "{:?}", bound.status);
    let waiting = pods.get("waiting").await.unwrap();
    assert_eq!(scheduled(&waiting).as_deref(), Some("False/Unschedulable"), "{:?}", waiting.status);
}
