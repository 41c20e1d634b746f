//! Soak: gangs of one, two and four pods, each pod with a DRA claim, created and completed
//! continuously against the real API server for 90 seconds, while 5% of binds fail (the
//! hook) and the kubelet emulator fails running pods at random. At every sampling point no
//! gang sits between 1 and minMember-1 bound pods for longer than the grace period (and the
//! time an eviction takes); at the end no device is held by a pod that is not bound.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::engine::model::{GangKey, PodKey};
use muster::k8s::scheduler::Options;
use muster::k8s::write::bind::{BindHook, HookAction};
use muster::metrics::Metrics;
use serde_json::json;

use crate::dra::{
    allocated, claiming_pod, claims, create_class, create_node, create_slice, create_template, gpu, typed,
};
use crate::support::wait::{node_of, phase, pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

const RUN: Duration = Duration::from_secs(90);
const GRACE_SECONDS: u64 = 3;
/// Beyond the grace period: a cycle to notice, the eviction, and the pods' deletion.
const EVICTION_SLACK: Duration = Duration::from_secs(10);

/// A small deterministic generator (xorshift), so a failing run names its seed.
struct Rng(std::sync::Mutex<u64>);

impl Rng {
    fn below(&self, n: u64) -> u64 {
        let mut x = self.0.lock().unwrap();
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x % n
    }
}

/// Fails 5% of binds.
struct FlakyBinds {
    rng: Rng,
    injected: AtomicUsize,
}

impl BindHook for FlakyBinds {
    fn before_bind(&self, _: &GangKey, _: usize, pod: &PodKey) -> HookAction {
        if self.rng.below(100) < 5 {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return HookAction::Fail(format!("injected soak failure binding {}", pod.name));
        }
        HookAction::Proceed
    }
}

fn group_of(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get("muster.dev/pod-group").map(String::as_str)
}

fn live_bound(pod: &Pod) -> bool {
    node_of(pod).is_some() && pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), "Succeeded" | "Failed")
}

/// Ends a pod's container as a kubelet reports it; a pod gone meanwhile is no error.
async fn terminate(api: &kube::Api<Pod>, name: &str, succeeded: bool) {
    let (phase, code) = if succeeded { ("Succeeded", 0) } else { ("Failed", 1) };
    let status = json!({"status": {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0, "image": "registry.invalid/train:latest",
            "imageID": "", "started": false, "state": {"terminated": {"exitCode": code, "reason": phase}}}]}});
    let _ = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_with_claims_under_random_bind_and_pod_failures_never_stay_half_bound_and_hold_no_device() {
    let cluster = TestCluster::new("soak").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    for n in 0..4 {
        let node = create_node(&cluster, &format!("n{n}")).await;
        create_slice(&cluster, &node, (0..8).map(|i| gpu(&format!("gpu-{i}"), 80, "pci0")).collect()).await;
    }
    let class = create_class(&cluster, None).await;
    create_template(&cluster, "one-gpu", &class, json!({}), json!([])).await;
    let api = cluster.api::<Pod>();
    let _kubelet = KubeletEmulator::start(api.clone());
    let rng = Rng(std::sync::Mutex::new(0x5eed_0f50_a4a4));
    let hook = Arc::new(FlakyBinds { rng: Rng(std::sync::Mutex::new(0x0b1d_fa11)), injected: AtomicUsize::new(0) });
    let mut config = scheduler::config(&cluster);
    config.gang_broken_grace_seconds = GRACE_SECONDS;
    let metrics = Arc::new(Metrics::new());
    let options = Options { hook: Some(hook.clone()), metrics: metrics.clone(), ..Default::default() };
    let _muster = scheduler::start_with(&cluster, config, options);

    let mut sizes: HashMap<String, usize> = HashMap::new();
    let mut whole_once: HashSet<String> = HashSet::new();
    let mut running_since: HashMap<String, Instant> = HashMap::new();
    let mut partial_since: HashMap<String, Instant> = HashMap::new();
    let (mut samples, mut checks, mut pod_faults, mut longest_partial) = (0usize, 0usize, 0usize, Duration::ZERO);
    let started = Instant::now();
    let mut next_job = 0usize;
    while started.elapsed() < RUN {
        // A new job every second for the first two thirds of the run.
        if started.elapsed() < RUN * 2 / 3 {
            let size = [1usize, 2, 4][rng.below(3) as usize];
            let name = format!("j{next_job:03}");
            next_job += 1;
            let group = PodGroup::new(&name, PodGroupSpec { min_member: size as i32, ..Default::default() });
            cluster.create(&cluster.api::<PodGroup>(), &group).await;
            let template = claiming_pod(&cluster, "ignored", "one-gpu", &[("muster.dev/pod-group", &name)]);
            let job: Job = typed(json!({
                "metadata": {"name": name},
                "spec": {"parallelism": size, "completions": size, "backoffLimit": 100, "template": template},
            }));
            cluster.create(&cluster.api::<Job>(), &job).await;
            sizes.insert(name, size);
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;

        // Sample: no gang between 1 and minMember-1 bound pods past the grace period.
        let all = pods(&cluster).await;
        samples += 1;
        let mut by_gang: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in &all {
            if let Some(group) = group_of(pod) {
                by_gang.entry(group).or_default().push(pod);
            }
        }
        for (gang, members) in &by_gang {
            let Some(&size) = sizes.get(*gang) else { continue };
            checks += 1;
            let bound = members.iter().filter(|p| live_bound(p)).count();
            if bound > 0 && bound < size {
                let since = *partial_since.entry(gang.to_string()).or_insert_with(Instant::now);
                longest_partial = longest_partial.max(since.elapsed());
                assert!(
                    since.elapsed() <= Duration::from_secs(GRACE_SECONDS) + EVICTION_SLACK,
                    "gang {gang} has had {bound} of {size} pods bound for {:?}",
                    since.elapsed()
                );
            } else {
                partial_since.remove(*gang);
            }
            if bound == size {
                whole_once.insert(gang.to_string());
                let since = *running_since.entry(gang.to_string()).or_insert_with(Instant::now);
                // Whole for a few seconds: finish it, or (3%) fail one of its pods.
                if since.elapsed() > Duration::from_secs(4) && rng.below(3) == 0 {
                    for pod in members.iter().filter(|p| live_bound(p)) {
                        terminate(&api, pod.metadata.name.as_deref().unwrap_or(""), true).await;
                    }
                    running_since.remove(*gang);
                }
            } else {
                running_since.remove(*gang);
            }
            if bound > 0
                && rng.below(100) < 3
                && let Some(pod) = members.iter().find(|p| live_bound(p))
            {
                terminate(&api, pod.metadata.name.as_deref().unwrap_or(""), false).await;
                pod_faults += 1;
            }
        }
    }

    // At the end, once the scheduler has caught up, no device is held by a pod not bound.
    let settle = Instant::now();
    let held = loop {
        let all = pods(&cluster).await;
        let bound_uids: HashSet<&str> =
            all.iter().filter(|p| live_bound(p)).filter_map(|p| p.metadata.uid.as_deref()).collect();
        let held: Vec<String> = claims(&cluster)
            .await
            .into_iter()
            .filter(allocated)
            .filter(|c| {
                let reserved = c.status.as_ref().and_then(|s| s.reserved_for.as_ref());
                !reserved.into_iter().flatten().any(|r| bound_uids.contains(r.uid.as_str()))
            })
            .filter_map(|c| c.metadata.name)
            .collect();
        if held.is_empty() || settle.elapsed() > Duration::from_secs(60) {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(held.is_empty(), "devices held by pods that are not bound: {held:?}");
    assert!(whole_once.len() * 2 >= sizes.len(), "{} of {} gangs ran whole", whole_once.len(), sizes.len());
    let report = format!(
        "soak: {} gangs created, {} ran whole; {} bind faults and {pod_faults} pod failures injected; \
         {samples} samples, {checks} gang checks, longest partly bound {:.1}s (limit {}s + {}s); \
         {} rollbacks, {} evictions (GangBroken), devices held at the end: 0 (settled in {:.1}s)",
        sizes.len(),
        whole_once.len(),
        hook.injected.load(Ordering::SeqCst),
        longest_partial.as_secs_f64(),
        GRACE_SECONDS,
        EVICTION_SLACK.as_secs(),
        metrics.bind_rollbacks.get(),
        metrics.evicted_for("GangBroken"),
        settle.elapsed().as_secs_f64(),
    );
    eprintln!("{report}");
}
