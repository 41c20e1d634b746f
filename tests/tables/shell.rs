//! The shell's pure parts, driven with literal objects and no API server: the cache as watch
//! events change it, and the safety net's decisions over time.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;
use muster::config::Config;
use muster::convert::assemble::{ClusterObjects, Memo, assemble_view};
use muster::convert::objects::{gpu_node, pod_group, training_pod};
use muster::engine::model::{GangKey, GangKind, PodKey};
use muster::k8s::scheduling::safety::{SafetyEvictionReason, SafetyNet};
use muster::k8s::store::cache::Cache;
use muster::k8s::store::watch::apply_event;
use serde_json::json;

fn pod(name: &str, group: Option<&str>) -> Pod {
    training_pod(name, 1, 0, "muster", group)
}

fn bound(mut pod: Pod, node: &str, phase: &str, ready: bool, since: i64) -> Pod {
    pod.spec.as_mut().unwrap().node_name = Some(node.into());
    let time = k8s_openapi::jiff::Timestamp::from_second(since).unwrap().to_string();
    pod.status = Some(
        serde_json::from_value(json!({
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": time},
                {"type": "Ready", "status": if ready { "True" } else { "False" }},
            ],
        }))
        .unwrap(),
    );
    pod
}

fn names(pods: &[&Pod]) -> Vec<String> {
    let mut names: Vec<String> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    names.sort();
    names
}

#[test]
fn watch_events_keep_the_cache_and_a_relist_drops_what_was_deleted_meanwhile() {
    let mut cache = Cache::default();
    apply_event::<Pod>(&mut cache, Event::Init);
    apply_event(&mut cache, Event::InitApply(pod("a", None)));
    apply_event(&mut cache, Event::InitApply(pod("b", None)));
    apply_event::<Pod>(&mut cache, Event::InitDone);
    apply_event(&mut cache, Event::Apply(pod("c", None)));
    apply_event(&mut cache, Event::Delete(pod("a", None)));
    assert_eq!(names(&cache.view().pods), ["b", "c"]);

    // The watch restarts and relists: c was deleted while it was down.
    apply_event::<Pod>(&mut cache, Event::Init);
    apply_event(&mut cache, Event::InitApply(pod("b", None)));
    assert_eq!(names(&cache.view().pods), ["b", "c"], "the old state stands until the relist is complete");
    apply_event::<Pod>(&mut cache, Event::InitDone);
    assert_eq!(names(&cache.view().pods), ["b"]);
}

#[test]
fn an_assumed_pod_counts_on_its_node_until_the_watch_shows_it_bound_or_binding_fails() {
    let mut cache = Cache::default();
    apply_event(&mut cache, Event::Apply(gpu_node("n1", "r1", 8)));
    apply_event(&mut cache, Event::Apply(training_pod("p", 8, 0, "muster", None)));
    apply_event(&mut cache, Event::Apply(training_pod("q", 8, 1, "muster", None)));
    let key = PodKey { namespace: "default".into(), name: "p".into() };
    cache.assume(key.clone(), "n1".into());

    let mut memo = Memo::default();
    let snapshot = assemble_view(&cache.view(), "muster", 0, &mut memo).snapshot;
    let gpu = snapshot.resources.get("nvidia.com/gpu").unwrap();
    assert_eq!(snapshot.nodes[0].requested.get(gpu), 8, "the assumed pod must hold its GPUs");
    assert_eq!(snapshot.gangs.len(), 1, "only q is pending");

    // Binding failed: p is pending again and its GPUs are free.
    cache.forget(&key);
    let snapshot = assemble_view(&cache.view(), "muster", 0, &mut memo).snapshot;
    assert_eq!(snapshot.nodes[0].requested.get(gpu), 0);
    assert_eq!(snapshot.gangs.len(), 2);

    // The watch shows p bound: the assumption is dropped, the pod itself says where it is.
    cache.assume(key.clone(), "n1".into());
    let mut seen = training_pod("p", 8, 0, "muster", None);
    seen.spec.as_mut().unwrap().node_name = Some("n1".into());
    apply_event(&mut cache, Event::Apply(seen));
    assert!(!cache.is_assumed(&key));
}

#[test]
fn a_scheduler_for_part_of_a_cluster_sees_only_its_nodes() {
    let mut cache = Cache::new(vec![("pool".into(), "gpu".into())]);
    let mut node: Node = gpu_node("gpu-1", "r1", 8);
    node.metadata.labels.as_mut().unwrap().insert("pool".into(), "gpu".into());
    apply_event(&mut cache, Event::Apply(node));
    apply_event(&mut cache, Event::Apply(gpu_node("cpu-1", "r1", 0)));
    let nodes: Vec<&str> = cache.view().nodes.iter().map(|n| n.metadata.name.as_deref().unwrap()).collect();
    assert_eq!(nodes, ["gpu-1"]);
}

fn gang() -> GangKey {
    GangKey { kind: GangKind::Muster, namespace: "default".into(), name: "train".into() }
}

fn check(
    net: &mut SafetyNet,
    pods: Vec<Pod>,
    config: &Config,
    busy: &HashSet<GangKey>,
    now: i64,
) -> Vec<(SafetyEvictionReason, Vec<String>)> {
    let objects = ClusterObjects { pods, muster_groups: vec![pod_group("train", 2, 0)], ..Default::default() };
    let view = objects.view();
    let members = muster::convert::groups::members(&view, &config.scheduler_name);
    net.check(&view, &muster::convert::groups::group_specs(&view), &members, config, busy, now)
        .into_iter()
        .map(|e| (e.reason, e.pods.into_iter().map(|p| p.name).collect()))
        .collect()
}

#[test]
fn a_partly_bound_gang_is_evicted_unless_it_is_being_bound() {
    let config = Config::default();
    let mut net = SafetyNet::default();
    let pods = || vec![bound(pod("t-0", Some("train")), "n1", "Running", true, 0), pod("t-1", Some("train"))];
    let busy = HashSet::from([gang()]);
    assert!(check(&mut net, pods(), &config, &busy, 10).is_empty(), "a gang being bound is left alone");
    assert_eq!(
        check(&mut net, pods(), &config, &HashSet::new(), 10),
        [(SafetyEvictionReason::BindFailed, vec!["t-0".to_string()])]
    );
}

#[test]
fn a_bound_gang_not_ready_in_time_is_evicted_at_its_timeout() {
    let config = Config { pods_ready_timeout_seconds: 100, ..Config::default() };
    let mut net = SafetyNet::default();
    let pods = || {
        vec![
            bound(pod("t-0", Some("train")), "n1", "Running", true, 1000),
            bound(pod("t-1", Some("train")), "n1", "Pending", false, 1000),
        ]
    };
    assert!(check(&mut net, pods(), &config, &HashSet::new(), 1099).is_empty());
    assert_eq!(net.next_due(), Some(1100), "the loop must wake when the timeout falls due");
    let evicted = check(&mut net, pods(), &config, &HashSet::new(), 1100);
    assert_eq!(evicted, [(SafetyEvictionReason::PodsReadyTimeout, vec!["t-0".to_string(), "t-1".to_string()])]);
}

#[test]
fn a_ready_gang_below_its_minimum_is_evicted_after_the_grace_period_but_a_finished_one_is_not() {
    let config = Config { gang_broken_grace_seconds: 60, ..Config::default() };
    let mut net = SafetyNet::default();
    let ready = vec![
        bound(pod("t-0", Some("train")), "n1", "Running", true, 0),
        bound(pod("t-1", Some("train")), "n1", "Running", true, 0),
    ];
    assert!(check(&mut net, ready, &config, &HashSet::new(), 10).is_empty());
    let broken = || {
        vec![
            bound(pod("t-0", Some("train")), "n1", "Running", true, 0),
            bound(pod("t-1", Some("train")), "n1", "Failed", false, 0),
        ]
    };
    assert!(check(&mut net, broken(), &config, &HashSet::new(), 20).is_empty(), "within the grace period");
    assert_eq!(
        check(&mut net, broken(), &config, &HashSet::new(), 80),
        [(SafetyEvictionReason::GangBroken, vec!["t-0".to_string()])]
    );

    let mut net = SafetyNet::default();
    let finishing = vec![
        bound(pod("t-0", Some("train")), "n1", "Running", true, 0),
        bound(pod("t-1", Some("train")), "n1", "Succeeded", false, 0),
    ];
    assert!(check(&mut net, finishing.clone(), &config, &HashSet::new(), 10).is_empty());
    assert!(check(&mut net, finishing, &config, &HashSet::new(), 1000).is_empty(), "a succeeded pod did its part");
}

#[test]
fn a_gang_that_was_whole_gets_the_grace_period_even_when_its_readiness_was_never_seen() {
    // A new scheduler (no memory) finds a gang with one pod failed: it was whole once, so it
    // is broken, not partly bound.
    let config = Config { gang_broken_grace_seconds: 60, ..Config::default() };
    let mut net = SafetyNet::default();
    let pods = || {
        vec![
            bound(pod("t-0", Some("train")), "n1", "Running", true, 0),
            bound(pod("t-1", Some("train")), "n1", "Failed", false, 0),
        ]
    };
    assert!(check(&mut net, pods(), &config, &HashSet::new(), 10).is_empty());
    assert_eq!(
        check(&mut net, pods(), &config, &HashSet::new(), 70),
        [(SafetyEvictionReason::GangBroken, vec!["t-0".to_string()])]
    );
}

#[test]
fn a_new_scheduler_grants_the_grace_period_to_a_gang_whose_podgroup_says_it_was_ready() {
    // One pod of a Ready gang was deleted (its node went away) and a new scheduler starts:
    // only t-0 is left, so the pods alone do not show the gang was ever whole.
    let config = Config { gang_broken_grace_seconds: 60, ..Config::default() };
    let left = || vec![bound(pod("t-0", Some("train")), "n1", "Running", true, 0)];
    let condition = |kind: &str, at: &str| json!({"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": at});
    let run = |conditions: Vec<serde_json::Value>, now: i64| {
        let mut group = pod_group("train", 2, 0);
        group.status = Some(serde_json::from_value(json!({"conditions": conditions})).unwrap());
        let objects = ClusterObjects { pods: left(), muster_groups: vec![group], ..Default::default() };
        let view = objects.view();
        let members = muster::convert::groups::members(&view, &config.scheduler_name);
        let mut net = SafetyNet::default();
        let mut evicted =
            net.check(&view, &muster::convert::groups::group_specs(&view), &members, &config, &HashSet::new(), now);
        evicted.pop().map(|e| e.reason)
    };
    // Ready before: the grace period, then GangBroken.
    let ready = vec![condition("PodsReady", "1970-01-01T00:00:05Z")];
    assert_eq!(run(ready.clone(), 10), None, "within the grace period");
    // Without it, or with a Ready older than its last eviction: partly bound, evicted now.
    assert_eq!(run(vec![], 10), Some(SafetyEvictionReason::BindFailed));
    let stale = vec![condition("PodsReady", "1970-01-01T00:00:05Z"), condition("Evicted", "1970-01-01T00:00:07Z")];
    assert_eq!(run(stale, 10), Some(SafetyEvictionReason::BindFailed));
}

#[test]
fn a_ready_gang_that_lost_a_pod_says_so_in_its_status_and_a_later_scheduler_still_grants_the_grace() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use muster::convert::status::{GroupFacts, podgroup_status};
    let config = Config { gang_broken_grace_seconds: 60, ..Config::default() };
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
    let facts = GroupFacts { waiting: None, evicted: None };
    let whole = [
        bound(pod("t-0", Some("train")), "n1", "Running", true, 0),
        bound(pod("t-1", Some("train")), "n1", "Running", true, 0),
    ];
    let mut group = pod_group("train", 2, 0);
    group.status = Some(podgroup_status(&group, &whole.iter().collect::<Vec<_>>(), &facts, &at(10)));
    // The leader sees t-1 gone and writes the status, then stops.
    let left = [bound(pod("t-0", Some("train")), "n1", "Running", true, 0)];
    let status = podgroup_status(&group, &left.iter().collect::<Vec<_>>(), &facts, &at(20));
    let ready = status.conditions.iter().find(|c| c.type_ == "PodsReady").expect("PodsReady kept");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Broken"), "{ready:?}");
    assert_eq!(ready.message, "1 of 2 pods left of a gang that was Ready");
    group.status = Some(status);
    // A new leader, with no memory: the grace period, then GangBroken.
    let objects = ClusterObjects { pods: left.to_vec(), muster_groups: vec![group], ..Default::default() };
    let view = objects.view();
    let members = muster::convert::groups::members(&view, &config.scheduler_name);
    let specs = muster::convert::groups::group_specs(&view);
    let mut net = SafetyNet::default();
    assert!(net.check(&view, &specs, &members, &config, &HashSet::new(), 30).is_empty(), "within the grace period");
    let evicted = net.check(&view, &specs, &members, &config, &HashSet::new(), 95);
    assert_eq!(evicted.iter().map(|e| e.reason).collect::<Vec<_>>(), [SafetyEvictionReason::GangBroken]);
}

#[test]
fn a_cycle_has_something_to_place_only_while_some_pod_is_neither_bound_nor_assumed() {
    let mut cache = Cache::default();
    apply_event(&mut cache, Event::Apply(gpu_node("n1", "r1", 8)));
    apply_event(&mut cache, Event::Apply(training_pod("p", 8, 0, "muster", None)));
    assert!(cache.has_unplaced());
    let key = PodKey { namespace: "default".into(), name: "p".into() };
    cache.assume(key.clone(), "n1".into());
    assert!(!cache.has_unplaced(), "p is being bound");
    cache.forget(&key);
    assert!(cache.has_unplaced(), "p's binding failed: it is pending again");
    // A pod the store does not hold is not assumed: it would hide a pending one.
    let ghost = PodKey { namespace: "default".into(), name: "gone".into() };
    cache.assume(ghost.clone(), "n1".into());
    assert!(!cache.is_assumed(&ghost));
    assert!(cache.has_unplaced());
    cache.assume(key.clone(), "n1".into());
    let mut bound = training_pod("p", 8, 0, "muster", None);
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    apply_event(&mut cache, Event::Apply(bound));
    assert!(!cache.has_unplaced());
    apply_event(&mut cache, Event::Apply(training_pod("q", 8, 1, "other-scheduler", None)));
    assert!(cache.has_unplaced(), "any scheduler's pending pod counts: a false no is impossible");
}

#[test]
fn a_relist_drops_assumptions_of_pods_that_went_away_while_the_watch_was_down() {
    let mut cache = Cache::default();
    apply_event(&mut cache, Event::Apply(pod("p", None)));
    let key = PodKey { namespace: "default".into(), name: "p".into() };
    cache.assume(key.clone(), "n1".into());
    apply_event::<Pod>(&mut cache, Event::Init);
    apply_event::<Pod>(&mut cache, Event::InitDone);
    assert!(!cache.is_assumed(&key), "a pod deleted during the outage must not hold capacity");
}

fn claim(name: &str, reserved_for: &[(&str, &str)], finalizer: bool) -> k8s_openapi::api::resource::v1::ResourceClaim {
    let reserved: Vec<_> =
        reserved_for.iter().map(|(pod, uid)| json!({"resource": "pods", "name": pod, "uid": uid})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default",
                     "finalizers": if finalizer { json!(["resource.kubernetes.io/delete-protection"]) } else { json!([]) }},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "gpu-0"}]}},
                   "reservedFor": reserved},
    }))
    .unwrap()
}

fn with_uid(mut pod: Pod, uid: &str) -> Pod {
    pod.metadata.uid = Some(uid.into());
    pod
}

#[test]
fn claims_of_pods_that_are_gone_are_released_after_a_grace_and_finished_pods_at_once() {
    use muster::k8s::scheduling::claim_release::{GRACE_SECONDS, ReleaseTracker};
    let mut cache = Cache::default();
    cache.apply_pod(with_uid(pod("running", None), "uid-running"));
    let mut done = bound(with_uid(pod("done", None), "uid-done"), "n1", "Succeeded", false, 0);
    done.metadata.uid = Some("uid-done".into());
    cache.apply_pod(done);
    // A claim of a running pod, one of a finished pod, one of a pod the cache never saw,
    // and one of a pod replaced by another of the same name.
    cache.apply_claim(claim("kept", &[("running", "uid-running")], true));
    cache.apply_claim(claim("finished", &[("done", "uid-done")], true));
    cache.apply_claim(claim("unknown", &[("ghost", "uid-ghost")], false));
    cache.apply_claim(claim("replaced", &[("running", "uid-old")], true));
    let mut tracker = ReleaseTracker::default();
    let releases = tracker.check(&cache.view(), 1000);
    let names: Vec<&str> = releases.iter().map(|r| r.claim.name.as_str()).collect();
    assert_eq!(names, ["finished"], "a finished pod's claim goes at once; missing pods get a grace");
    assert!(releases[0].deallocate, "it carries the scheduler's finalizer");
    assert_eq!(tracker.next_due(), Some(1000 + GRACE_SECONDS));

    let mut releases = tracker.check(&cache.view(), 1000 + GRACE_SECONDS);
    releases.sort_by(|a, b| a.claim.cmp(&b.claim));
    let summary: Vec<(&str, &[String], bool)> =
        releases.iter().map(|r| (r.claim.name.as_str(), r.remove.as_slice(), r.deallocate)).collect();
    assert_eq!(
        summary,
        [
            ("finished", &["uid-done".to_string()][..], true),
            ("replaced", &["uid-old".to_string()][..], true),
            ("unknown", &["uid-ghost".to_string()][..], false),
        ]
    );
}

#[test]
fn an_assumed_allocation_holds_its_devices_until_the_watch_shows_it() {
    let mut cache = Cache::default();
    let mut unallocated = claim("c", &[], true);
    unallocated.status = None;
    cache.apply_claim(unallocated.clone());
    let key = muster::engine::dra::model::ClaimKey { namespace: "default".into(), name: "c".into() };
    let pod_key = PodKey { namespace: "default".into(), name: "p".into() };
    cache.assume_claim(&pod_key, claim("c", &[], true));
    let allocated = |cache: &Cache| {
        cache.view().resource_claims.iter().any(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
    };
    assert!(allocated(&cache), "the view shows the claim as it is being written");
    // An update without the allocation yet (the finalizer was added) keeps the assumption.
    cache.apply_claim(unallocated.clone());
    assert!(allocated(&cache));
    // The watch shows the allocation: the store has it, the assumption is gone.
    cache.apply_claim(claim("c", &[("p", "uid-p")], true));
    cache.forget_claim(&pod_key, &key);
    assert!(allocated(&cache), "the stored claim is allocated");
    // A forgotten assumption frees its devices.
    cache.apply_claim(unallocated);
    cache.assume_claim(&pod_key, claim("c", &[], true));
    cache.forget_claim(&pod_key, &key);
    assert!(!allocated(&cache));
}

fn claiming(mut pod: Pod, uid: &str, claim: &str) -> Pod {
    pod.metadata.uid = Some(uid.into());
    pod.spec.as_mut().unwrap().resource_claims =
        Some(vec![serde_json::from_value(json!({"name": "gpu", "resourceClaimName": claim})).unwrap()]);
    pod
}

#[test]
fn devices_held_for_pods_that_are_not_bound_are_given_back_unless_their_gang_is_being_placed() {
    use muster::k8s::scheduling::claim_giveback::give_back;
    let mut cache = Cache::default();
    // Gang a: its pods are pending with claims a leader allocated before it stopped.
    cache.apply_pod(claiming(pod("a-0", Some("a")), "uid-a0", "a0"));
    cache.apply_pod(claiming(pod("a-1", Some("a")), "uid-a1", "a1"));
    cache.apply_claim(claim("a0", &[("a-0", "uid-a0")], true));
    cache.apply_claim(claim("a1", &[], true));
    // Gang b is being bound: its claims are its own.
    cache.apply_pod(claiming(pod("b-0", Some("b")), "uid-b0", "b0"));
    cache.apply_claim(claim("b0", &[("b-0", "uid-b0")], true));
    // A claim a bound pod uses stays, though a pending pod names it too.
    cache.apply_pod(bound(claiming(pod("run", None), "uid-run", "shared"), "n1", "Running", true, 0));
    cache.apply_pod(claiming(pod("c-0", None), "uid-c0", "shared"));
    cache.apply_claim(claim("shared", &[("run", "uid-run")], true));
    // Reserved for a pod of another gang, or allocated by hand (no finalizer): not ours to free.
    cache.apply_pod(claiming(pod("d-0", None), "uid-d0", "other"));
    cache.apply_pod(claiming(pod("x", None), "uid-x", "unrelated"));
    cache.apply_claim(claim("other", &[("x", "uid-x")], true));
    cache.apply_pod(claiming(pod("e-0", None), "uid-e0", "manual"));
    cache.apply_claim(claim("manual", &[], false));
    // A claim made for f-0's extended resources whose name never reached its status.
    cache.apply_pod(with_uid(pod("f-0", None), "uid-f0"));
    let mut orphan = claim("f-0-extended-resources-x1", &[], true);
    orphan.metadata.annotations =
        Some([("resource.kubernetes.io/extended-resource-claim".into(), "true".into())].into());
    orphan.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "name": "f-0", "uid": "uid-f0"})).unwrap(),
    ]);
    cache.apply_claim(orphan);

    let busy: HashSet<GangKey> =
        [GangKey { kind: GangKind::Muster, namespace: "default".into(), name: "b".into() }].into();
    let mut releases = give_back(&cache.view(), "muster", &busy);
    releases.sort_by(|a, b| a.claim.cmp(&b.claim));
    let summary: Vec<(&str, Vec<&str>, bool, bool)> = releases
        .iter()
        .map(|r| (r.claim.name.as_str(), r.remove.iter().map(String::as_str).collect(), r.deallocate, r.delete))
        .collect();
    assert_eq!(
        summary,
        [
            ("a0", vec!["uid-a0"], true, false),
            ("a1", vec![], true, false),
            ("f-0-extended-resources-x1", vec![], true, true),
        ]
    );

    // Meanwhile f-0 waits rather than have a second claim made beside the first.
    apply_event(&mut cache, Event::Apply(gpu_node("n1", "r1", 8)));
    let mut memo = Memo::default();
    let snapshot = assemble_view(&cache.view(), "muster", 0, &mut memo).snapshot;
    let f = snapshot.gangs.iter().find(|g| g.key.name == "f-0").expect("f-0 is pending");
    let blocked = f.blocked.as_deref().unwrap_or_default();
    assert!(blocked.contains("earlier ResourceClaim default/f-0-extended-resources-x1"), "{blocked}");
}

#[test]
fn cached_objects_are_kept_without_their_managed_fields() {
    let mut cache = Cache::default();
    let mut node = gpu_node("n1", "r1", 8);
    node.metadata.managed_fields = Some(vec![
        serde_json::from_value(json!({"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
                                      "fieldsV1": {"f:status": {"f:allocatable": {}}}}))
        .unwrap(),
    ]);
    // From a list, then from a watch event.
    apply_event::<Node>(&mut cache, Event::Init);
    apply_event(&mut cache, Event::InitApply(node.clone()));
    apply_event::<Node>(&mut cache, Event::InitDone);
    assert!(cache.view().nodes.iter().all(|n| n.metadata.managed_fields.is_none()));
    assert_eq!(cache.view().nodes.len(), 1);
    node.metadata.resource_version = Some("2".into());
    apply_event(&mut cache, Event::Apply(node));
    assert!(cache.view().nodes.iter().all(|n| n.metadata.managed_fields.is_none()));
}

#[test]
fn every_eviction_moves_the_evicted_conditions_time_even_for_the_same_reason() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use muster::convert::status::{GroupFacts, podgroup_status};
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
    let mut group = pod_group("train", 2, 0);
    let first = GroupFacts { waiting: None, evicted: Some(("Reclaimed", "evicted whole for ml/a", 100)) };
    group.status = Some(podgroup_status(&group, &[], &first, &at(100)));
    // Reclaimed again, later: the preemption delay and the return after an eviction count
    // from this one, not the first.
    let second = GroupFacts { waiting: None, evicted: Some(("Reclaimed", "evicted whole for ml/b", 500)) };
    let status = podgroup_status(&group, &[], &second, &at(510));
    let evicted = status.conditions.iter().find(|c| c.type_ == "Evicted").expect("Evicted");
    assert_eq!((evicted.last_transition_time.clone(), evicted.message.as_str()), (at(500), "evicted whole for ml/b"));
}

#[test]
fn a_gang_past_its_max_run_seconds_is_evicted_whole_and_the_loop_wakes_for_it() {
    let config = Config::default();
    let mut net = SafetyNet::default();
    let mut group = pod_group("train", 2, 0);
    group.spec.max_run_seconds = Some(3600);
    let pods = || {
        vec![
            bound(pod("t-0", Some("train")), "n1", "Running", true, 1000),
            bound(pod("t-1", Some("train")), "n1", "Running", true, 1000),
        ]
    };
    let at = |net: &mut SafetyNet, now: i64| {
        let objects = ClusterObjects { pods: pods(), muster_groups: vec![group.clone()], ..Default::default() };
        let view = objects.view();
        let members = muster::convert::groups::members(&view, &config.scheduler_name);
        let specs = muster::convert::groups::group_specs(&view);
        net.check(&view, &specs, &members, &config, &HashSet::new(), now)
            .into_iter()
            .map(|e| (e.reason, e.pods.len(), e.message))
            .collect::<Vec<_>>()
    };
    assert!(at(&mut net, 4599).is_empty(), "bound at 1000, it may run until 4600");
    assert_eq!(net.next_due(), Some(4600));
    let evicted = at(&mut net, 4600);
    assert_eq!(evicted.len(), 1);
    assert_eq!((evicted[0].0, evicted[0].1), (SafetyEvictionReason::MaxRunExceeded, 2));
    assert_eq!(evicted[0].2, "gang default/train has run 3600s, its maxRunSeconds is 3600; evicting it whole");
}

#[test]
fn a_pod_bound_opportunistically_is_read_back_as_an_opportunistic_running_gang_even_without_queues() {
    let mut group = pod_group("filler", 2, 0);
    group.spec.max_run_seconds = Some(3600);
    let started = |pod: Pod| {
        let mut pod = bound(pod, "n1", "Running", true, 1000);
        let time = k8s_openapi::jiff::Timestamp::from_second(1000).unwrap();
        pod.status.as_mut().unwrap().start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(time));
        pod
    };
    let marked = |pod: Pod| {
        let mut pod = started(pod);
        pod.metadata.annotations.get_or_insert_default().insert("muster.dev/opportunistic".into(), "true".into());
        pod
    };
    let objects = ClusterObjects {
        nodes: vec![gpu_node("n1", "r1", 8)],
        pods: vec![
            marked(pod("f-0", Some("filler"))),
            marked(pod("f-1", Some("filler"))),
            started(pod("plain-0", Some("plain"))),
        ],
        muster_groups: vec![group, {
            let mut plain = pod_group("plain", 1, 0);
            plain.spec.max_run_seconds = Some(3600);
            plain
        }],
        ..Default::default()
    };
    let out = assemble_view(&objects.view(), "muster", 2000, &mut Memo::default());
    let snapshot = out.snapshot;
    // No queue is configured: only the opportunistic gang is listed as running, whole.
    assert_eq!(snapshot.running.len(), 1, "{:?}", snapshot.running);
    let running = &snapshot.running[0];
    assert_eq!(running.key.name, "filler");
    assert!(running.opportunistic && running.preemptible);
    assert_eq!(running.pods.len(), 2);
    // It leaves whenever a reservation needs it, not by its bound: only the plain pod ends.
    assert_eq!(snapshot.endings.len(), 1);
    assert_eq!(snapshot.endings[0].at, 1000 + 3600);
}
