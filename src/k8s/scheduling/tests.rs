//! The loop without a cluster: a cache filled with literal objects, a fake binder and the
//! real writer on a sink that records what would be written.

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::convert::objects::{gpu_node, training_pod};
use crate::engine::model::GangKind;
use crate::k8s::store::watch::apply_event;
use crate::k8s::write::writer::Record;
use kube::runtime::watcher::Event;

impl Record {
    fn conditions(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|w| match w {
                Write::Unschedulable { pod, message, .. } => Some((pod.name.clone(), message.clone())),
                _ => None,
            })
            .collect()
    }
}

/// What the fake binder does with each gang, in turn; the last answer repeats.
enum Answer {
    Bind,
    RollBack,
    Panic,
    /// Binds once the semaphore gives a permit.
    Hold(Arc<tokio::sync::Semaphore>),
}

struct FakeBinder {
    answers: Vec<Answer>,
    calls: AtomicUsize,
}

impl Bind for FakeBinder {
    fn bind(self: Arc<Self>, binding: GangBinding) -> BoxFuture<'static, BindOutcome> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let pods: Vec<PodKey> = binding.pods.iter().map(|(p, _)| p.clone()).collect();
            match &self.answers[call.min(self.answers.len() - 1)] {
                Answer::Bind => BindOutcome::Bound { bound: pods, failed: Vec::new() },
                Answer::RollBack => BindOutcome::RolledBack {
                    evicted: Vec::new(),
                    errors: vec![(pods[0].clone(), BindError::Injected("refused".into()))],
                },
                Answer::Panic => panic!("the binder broke"),
                Answer::Hold(gate) => {
                    let _permit = gate.acquire().await;
                    BindOutcome::Bound { bound: pods, failed: Vec::new() }
                }
            }
        })
    }
}

fn pod(name: &str, gpus: u32) -> Pod {
    let mut pod = training_pod(name, gpus, 0, "muster", None);
    pod.metadata.uid = Some(format!("uid-{name}"));
    pod
}

struct Harness {
    scheduler: Scheduler,
    cache: Arc<Mutex<Cache>>,
    record: Arc<Record>,
    writer: Writer,
    metrics: Arc<Metrics>,
}

fn harness(answers: Vec<Answer>) -> Harness {
    let cache = Arc::new(Mutex::new(Cache::default()));
    let metrics = Arc::new(Metrics::new());
    let record = Arc::new(Record::default());
    let writer = Writer::new(record.clone(), Duration::from_secs(1), metrics.clone());
    writer.set_leading(true);
    let config = Config { backoff: crate::config::Backoff { initial_seconds: 1, max_seconds: 4 }, ..Config::default() };
    let binder = Arc::new(FakeBinder { answers, calls: AtomicUsize::new(0) });
    let scheduler = Scheduler::new(
        config,
        cache.clone(),
        metrics.clone(),
        Arc::new(SchedulerHealth::default()),
        writer.clone(),
        binder,
    );
    Harness { scheduler, cache, record, writer, metrics }
}

impl Harness {
    /// Changes arrive as watch events do, so the unschedulable pool hears of them.
    fn add_node(&self, name: &str, gpus: u32) {
        let mut node = gpu_node(name, "r1", gpus);
        node.metadata.resource_version = Some("1".into());
        apply_event(&mut self.cache.lock().unwrap(), Event::Apply(node));
    }

    fn add_pod(&self, name: &str, gpus: u32) {
        apply_event(&mut self.cache.lock().unwrap(), Event::Apply(pod(name, gpus)));
    }

    fn attempts(&self, result: &str) -> u64 {
        self.metrics.gang_attempts.with_label_values(&[result]).get()
    }

    async fn flush(&self) {
        while self.writer.write_one().await {}
    }

    fn gang(name: &str) -> GangKey {
        GangKey { kind: GangKind::Single, namespace: "default".into(), name: name.into() }
    }
}

fn unix() -> i64 {
    super::unix_now()
}

#[tokio::test]
async fn ten_changes_of_a_pods_reason_between_two_flushes_make_one_write() {
    let mut h = harness(vec![Answer::Bind]);
    h.add_pod("big", 16);
    for i in 0..10 {
        h.add_node(&format!("n{i}"), 8);
        let report = h.scheduler.cycle(Instant::now(), unix());
        assert_eq!(report.waiting.len(), 1);
    }
    h.flush().await;
    let conditions = h.record.conditions();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert!(conditions[0].1.contains("0/10 nodes"), "the newest reason wins: {conditions:?}");
    // The same reason again is not written again.
    h.scheduler.cycle(Instant::now(), unix());
    h.flush().await;
    assert_eq!(h.record.conditions().len(), 1);
}

#[tokio::test]
async fn a_gang_that_did_not_fit_is_searched_again_only_after_a_change_that_could_help_it() {
    let mut h = harness(vec![Answer::Bind]);
    h.add_node("n0", 8);
    h.add_pod("big", 16);
    let first = h.scheduler.cycle(Instant::now(), unix());
    assert_eq!(h.attempts("unschedulable"), 1);
    // Another pod arriving (and placed) helps nobody else: the big pod is not searched
    // again and keeps its reason.
    h.add_pod("small", 1);
    let second = h.scheduler.cycle(Instant::now(), unix());
    assert_eq!(second.placed, vec![Harness::gang("small")]);
    assert_eq!(second.waiting, first.waiting, "it keeps what it was told");
    assert_eq!(h.attempts("unschedulable"), 1, "not searched again");
    assert_eq!(h.metrics.parked_gangs.get(), 1);
    // A node added could help: it is searched again, and fits.
    h.add_node("n1", 16);
    let third = h.scheduler.cycle(Instant::now(), unix());
    assert_eq!(third.placed, vec![Harness::gang("big")]);
}

#[tokio::test]
async fn a_parked_gang_is_searched_again_after_retry_unschedulable_seconds() {
    let mut h = harness(vec![Answer::Bind]);
    h.add_node("n0", 8);
    h.add_pod("big", 16);
    let start = Instant::now();
    h.scheduler.cycle(start, unix());
    assert!(h.scheduler.next_wake().is_some_and(|at| at <= start + Duration::from_secs(60)));
    h.scheduler.cycle(start + Duration::from_secs(30), unix());
    assert_eq!(h.attempts("unschedulable"), 1);
    h.scheduler.cycle(start + Duration::from_secs(61), unix());
    assert_eq!(h.attempts("unschedulable"), 2);
}

#[tokio::test]
async fn nothing_is_written_once_the_lead_is_lost() {
    let mut h = harness(vec![Answer::Bind]);
    h.add_node("n0", 8);
    h.add_pod("big", 16);
    h.scheduler.cycle(Instant::now(), unix());
    h.writer.set_leading(false);
    h.flush().await;
    h.scheduler.cycle(Instant::now(), unix());
    h.flush().await;
    assert!(h.record.0.lock().unwrap().is_empty(), "{:?}", h.record.0.lock().unwrap());
}

#[tokio::test]
async fn a_binding_that_panics_comes_back_as_a_rollback() {
    let mut h = harness(vec![Answer::Panic, Answer::Bind]);
    h.add_node("n0", 8);
    h.add_pod("job", 4);
    let report = h.scheduler.cycle(Instant::now(), unix());
    assert_eq!(report.placed, vec![Harness::gang("job")]);
    assert!(h.scheduler.in_flight().contains(&Harness::gang("job")));
    let job = PodKey { namespace: "default".into(), name: "job".into() };
    assert!(h.cache.lock().unwrap().is_assumed(&job));

    assert!(h.scheduler.next_outcome().await);
    assert!(h.scheduler.in_flight().is_empty(), "never stuck in flight");
    assert!(!h.cache.lock().unwrap().is_assumed(&job), "its pod is pending again");
    assert_eq!(h.metrics.bind_rollbacks.get(), 1);
    assert!(h.scheduler.backing_off(&Harness::gang("job"), Instant::now()));
    // After its backoff it is placed again, and binds.
    let later = Instant::now() + Duration::from_secs(2);
    assert_eq!(h.scheduler.cycle(later, unix()).placed, vec![Harness::gang("job")]);
    assert!(h.scheduler.next_outcome().await);
    assert_eq!(h.metrics.gang_attempts.with_label_values(&["scheduled"]).get(), 1);
}

#[tokio::test]
async fn backoff_grows_with_each_rollback_and_resets_when_the_gang_binds() {
    let mut h = harness(vec![Answer::RollBack, Answer::RollBack, Answer::Bind, Answer::RollBack]);
    h.add_node("n0", 8);
    h.add_pod("job", 4);
    let gang = Harness::gang("job");
    let mut now = Instant::now();
    let mut waits = Vec::new();
    for _ in 0..2 {
        assert_eq!(h.scheduler.cycle(now, unix()).placed, vec![gang.clone()]);
        assert!(h.scheduler.next_outcome().await);
        // The outcome is taken at the real time; the cycles may run at a later `now`.
        let until = h.scheduler.next_wake().expect("a wake-up for the backoff");
        waits.push(until.saturating_duration_since(Instant::now()).as_secs_f64().round() as u64);
        assert!(h.scheduler.cycle(now, unix()).placed.is_empty(), "waits out its backoff");
        now = until;
    }
    assert_eq!(waits, [1, 2], "the wait doubles");
    assert_eq!(h.scheduler.cycle(now, unix()).placed, vec![gang.clone()]);
    assert!(h.scheduler.next_outcome().await);
    assert!(!h.scheduler.backing_off(&gang, now));
    // Bound, the gang's pod left pending again (as if deleted and recreated) starts afresh.
    h.cache.lock().unwrap().forget(&PodKey { namespace: "default".into(), name: "job".into() });
    assert_eq!(h.scheduler.cycle(now, unix()).placed, vec![gang.clone()]);
    assert!(h.scheduler.next_outcome().await);
    let until = h.scheduler.next_wake().expect("backoff");
    assert_eq!(until.saturating_duration_since(Instant::now()).as_secs_f64().round() as u64, 1, "reset by the success");
}

#[test]
fn a_podgroup_whose_pods_are_another_schedulers_is_left_to_it() {
    use crate::convert::assemble::ClusterObjects;
    use crate::convert::objects::pod_group;
    let theirs = training_pod("theirs-0", 1, 0, "other-muster", Some("theirs"));
    let ours = training_pod("ours-0", 1, 0, "muster", Some("ours"));
    let objects = ClusterObjects {
        pods: vec![theirs, ours],
        muster_groups: vec![pod_group("theirs", 1, 0), pod_group("ours", 1, 0), pod_group("empty", 1, 0)],
        ..Default::default()
    };
    let view = objects.view();
    let members = crate::convert::groups::members(&view, "muster");
    let writes = decide::group_statuses(&view, &HashMap::new(), &members, &HashMap::new(), &HashMap::new(), 0);
    let mut written: Vec<&str> = writes
        .iter()
        .filter_map(|w| match w {
            Write::MusterGroup { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    written.sort();
    assert_eq!(written, ["empty", "ours"], "a group with only another scheduler's pods is not described");
}

#[tokio::test]
async fn the_pass_over_the_whole_cache_waits_while_bindings_are_in_flight() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut h = harness(vec![Answer::Hold(gate.clone())]);
    h.add_node("n0", 8);
    h.add_pod("job", 4);
    let t0 = Instant::now();
    assert_eq!(h.scheduler.cycle(t0, unix()).placed, vec![Harness::gang("job")]);
    let gpus_on = |node: &str| h.metrics.node_gpus.with_label_values(&[node]).get();
    h.add_node("n1", 8);
    // Past HOUSEKEEPING_EVERY, with the binding in flight: the GPU figures wait.
    h.scheduler.cycle(t0 + Duration::from_secs(1), unix());
    assert_eq!(gpus_on("n1"), 0, "no pass while the binding is in flight");
    // Past the hold, the pass runs although the binding is still in flight.
    h.scheduler.cycle(t0 + HOUSEKEEPING_HOLD + Duration::from_millis(100), unix());
    assert_eq!(gpus_on("n1"), 8);

    // Once the binding ends, the pass runs again as soon as HOUSEKEEPING_EVERY has passed.
    h.add_node("n2", 8);
    gate.add_permits(1);
    assert!(h.scheduler.next_outcome().await);
    h.scheduler.cycle(t0 + HOUSEKEEPING_HOLD + Duration::from_secs(1), unix());
    assert_eq!(gpus_on("n2"), 8);
}
