//! Schedules a loaded cluster until nothing more can be placed, with the same conversion
//! and engine as the scheduler, and reports every pod and PodGroup. The simulator plays
//! the cluster's other parts too ([`super::controllers`]).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde::Serialize;

use crate::config::Config;
use crate::convert::assemble::{Assembled, ClusterObjects, Memo, assemble_view};
use crate::convert::dra::EXTENDED_CLAIM_ANNOTATION;
use crate::engine::admission::QueueState;
use crate::engine::admission::report::report as queue_report;
use crate::engine::drive::{Driver, Engine};
use crate::engine::model::{GangKind, PodKey, Snapshot};
use crate::engine::queues::refusal::quantity;
use crate::engine::{CycleMemory, CycleOutcome};
use crate::sim::controllers::{apply, create_template_claims, key_of};
use crate::sim::evict::{EvictionResult, evict};
use crate::sim::tracker::Tracker;

/// One device allocated to a pod's claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceResult {
    pub claim: String,
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// For a share of a device that allows several allocations: what it consumes.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodResult {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub devices: Vec<DeviceResult>,
    pub reason: Option<String>,
    /// Evicted during the run (reclaim or preemption); `reason` says by whom.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangResult {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub min_member: usize,
    pub placed: usize,
    pub scheduled: bool,
    pub reason: Option<String>,
}

/// One queue's figures for one resource key, as Kubernetes quantities.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueQuantities {
    /// "unlimited" for an imported unlimited quota.
    pub quota: String,
    pub limit: Option<String>,
    pub fair_share: String,
    pub allocated: String,
    pub requested: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueueResult {
    pub name: String,
    pub parent: Option<String>,
    /// Why the queue takes no gangs, if it is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    pub resources: std::collections::BTreeMap<String, QueueQuantities>,
}

/// The simulator's JSON document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SimReport {
    pub pods: Vec<PodResult>,
    pub gangs: Vec<GangResult>,
    /// Only when the input has Queue objects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<QueueResult>,
    /// Pods evicted by reclaim or preemption, one entry per pod, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evictions: Vec<EvictionResult>,
    /// The claims the pods use through their volumes: the node each was given, the
    /// volume it is bound to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<super::volumes::ClaimResult>,
    /// What a person should know about how the input was read (a quota key on devices
    /// whose DeviceClass does not exist).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How a simulation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimOptions {
    /// The clock, in Unix seconds; None: the newest creationTimestamp or startTime in the
    /// input.
    pub now: Option<i64>,
    /// The most cycles; the run stops earlier when a cycle changes nothing.
    pub cycles: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { now: None, cycles: 100 }
    }
}

/// Schedules with the default options.
pub fn run(objects: &mut ClusterObjects, config: &Config) -> SimReport {
    run_with(objects, config, &SimOptions::default())
}

/// Schedules cycle after cycle until one changes nothing (no pod placed or evicted), then
/// reports. Evicted pods are pending again in the next cycle, as their controller would
/// recreate them, and capacity freed for a gang stays reserved for it between cycles.
pub fn run_with(objects: &mut ClusterObjects, config: &Config, options: &SimOptions) -> SimReport {
    if !config.queues.imports(crate::config::QueueImport::Kai) {
        objects.kai_queues.clear();
        objects.kai_groups.clear();
    }
    objects.kueue_imported = config.queues.imports(crate::config::QueueImport::Kueue);
    if !objects.kueue_imported {
        objects.cluster_queues.clear();
        objects.cohorts.clear();
        objects.local_queues.clear();
    }
    create_template_claims(objects);
    let now = options.now.unwrap_or_else(|| latest_time(objects));
    let mut memo = Memo::new(config);
    let Settled { last, evictions } = settle(objects, config, now, options.cycles, &mut memo, &mut Tracker::default());
    let mut report = report(objects, config, &last, now, &mut memo);
    for pod in &mut report.pods {
        if let Some(e) = evictions.iter().rev().find(|e| e.namespace == pod.namespace && e.name == pod.name) {
            pod.evicted = true;
            if pod.node.is_none() {
                let why = pod.reason.take().unwrap_or_default();
                pod.reason =
                    Some(format!("evicted ({}) for gang {} in cycle {}; {why}", e.reason, e.preemptor, e.cycle));
            }
        }
    }
    report.evictions = evictions;
    report
}

/// What cycles at one moment left: the last cycle's outcome, and every pod evicted.
pub struct Settled {
    pub last: CycleOutcome,
    pub evictions: Vec<EvictionResult>,
}

/// Cycles at `now` until one changes nothing (no pod placed or evicted) or `cycles` ran:
/// the engine's loop with the objects as its driver. `memo` and `tracker` may outlive the
/// call, so a later one converts again only the objects that changed.
pub fn settle(
    objects: &mut ClusterObjects,
    config: &Config,
    now: i64,
    cycles: usize,
    memo: &mut Memo,
    tracker: &mut Tracker,
) -> Settled {
    let mut run = YamlRun {
        objects,
        config,
        now,
        cycles: cycles.max(1),
        cycle: 0,
        done: false,
        memo,
        tracker,
        assembled: None,
        last: CycleOutcome::default(),
        evictions: Vec::new(),
    };
    Engine::new(config.cycle()).run_to_end(&mut run);
    Settled { last: run.last, evictions: run.evictions }
}

/// Objects driving the engine: the clock stays at one moment for up to `cycles` cycles,
/// until one changes nothing; the source assembles the objects as they stand; the sink
/// binds and evicts what the cycle decided, as the API server and controllers would.
struct YamlRun<'a> {
    objects: &'a mut ClusterObjects,
    config: &'a Config,
    now: i64,
    cycles: usize,
    /// The cycles run (numbered from 1), and whether the last one changed nothing.
    cycle: usize,
    done: bool,
    memo: &'a mut Memo,
    tracker: &'a mut Tracker,
    /// The view the cycle decides on, kept until its decisions come back.
    assembled: Option<Assembled>,
    last: CycleOutcome,
    evictions: Vec<EvictionResult>,
}

impl Driver for YamlRun<'_> {
    async fn next(&mut self) -> Option<i64> {
        if self.done || self.cycle >= self.cycles {
            return None;
        }
        self.cycle += 1;
        Some(self.now)
    }

    fn snapshot(&mut self, now: i64, _: &mut CycleMemory) -> Option<&mut Snapshot> {
        let view = self.tracker.view(self.objects);
        let assembled = assemble_view(&view, &self.config.scheduler_name, now, self.memo);
        Some(&mut self.assembled.insert(assembled).snapshot)
    }

    fn decided(&mut self, outcome: CycleOutcome, _: &mut CycleMemory) {
        let assembled = self.assembled.take().expect("a cycle decides on the snapshot its source gave");
        let (outcome, rolled_back) = super::volumes::bind_delayed_claims(self.objects, &assembled.snapshot, outcome);
        let placed = apply(self.objects, &assembled.snapshot, &outcome);
        self.evictions.extend(evict(self.objects, &outcome.evictions, self.cycle, self.now));
        self.done = placed == 0 && rolled_back == 0 && outcome.evictions.is_empty();
        self.last = outcome;
    }
}

/// A YAML cluster is a moment in time: the simulation runs as of its newest object (or
/// the newest start of a running pod), so gangs have waited as long as their creation
/// times say.
fn latest_time(objects: &ClusterObjects) -> i64 {
    let pods = objects.pods.iter().map(|p| &p.metadata);
    let groups =
        objects.muster_groups.iter().map(|g| &g.metadata).chain(objects.kubernetes_groups.iter().map(|g| &g.metadata));
    let created = pods
        .chain(groups)
        .chain(objects.plugin_groups.iter().map(|g| &g.metadata))
        .chain(objects.kai_groups.iter().map(|g| &g.metadata))
        .filter_map(|m| m.creation_timestamp.as_ref().map(|t| t.0.as_second()));
    let started = objects.pods.iter().filter_map(|p| p.status.as_ref()?.start_time.as_ref().map(|t| t.0.as_second()));
    created.chain(started).max().unwrap_or(0)
}

/// The devices a bound pod holds, through its claims.
fn pod_devices(pod: &Pod, claims: &HashMap<(String, String), &ResourceClaim>) -> Vec<DeviceResult> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let mut named: Vec<(String, String)> = Vec::new();
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    for entry in pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).into_iter().flatten() {
        let claim = entry.resource_claim_name.clone().or_else(|| {
            statuses.and_then(|s| s.iter().find(|s| s.name == entry.name)).and_then(|s| s.resource_claim_name.clone())
        });
        if let Some(claim) = claim {
            named.push((entry.name.clone(), claim));
        }
    }
    let extended = pod.status.as_ref().and_then(|s| s.extended_resource_claim_status.as_ref());
    let mut devices = Vec::new();
    for (entry, claim) in &named {
        let Some(object) = claims.get(&(namespace.clone(), claim.clone())) else { continue };
        for r in allocated(object) {
            devices.push(DeviceResult {
                claim: entry.clone(),
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                consumed: consumed(r),
            });
        }
    }
    // The claim Muster made for the pod: named in its status, or (for GPU fractions alone,
    // which the status cannot name) found by its owner.
    let uid = pod.metadata.uid.as_deref();
    let fractions = pod.metadata.annotations.as_ref().is_some_and(|a| {
        a.contains_key(crate::convert::dra::FRACTION_ANNOTATION)
            || a.contains_key(crate::convert::dra::MEMORY_ANNOTATION)
    });
    let named = extended.and_then(|s| claims.get(&(namespace.clone(), s.resource_claim_name.clone())));
    let made = named.or_else(|| {
        // Searched only for pods that ask for fractions: the rest have no such claim.
        if !fractions {
            return None;
        }
        claims.values().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace.as_str())
                && c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(EXTENDED_CLAIM_ANNOTATION))
                && c.metadata.owner_references.iter().flatten().any(|o| {
                    o.kind == "Pod"
                        && pod.metadata.name.as_deref() == Some(o.name.as_str())
                        && uid.is_none_or(|u| u == o.uid)
                })
        })
    });
    if let Some(object) = made {
        for r in allocated(object) {
            let mappings = extended.map(|s| s.request_mappings.as_slice()).unwrap_or_default();
            let resource = mappings.iter().find(|m| m.request_name == r.request);
            devices.push(DeviceResult {
                claim: resource
                    .map_or_else(|| crate::convert::dra::FRACTION_RESOURCE.to_string(), |m| m.resource_name.clone()),
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                consumed: consumed(r),
            });
        }
    }
    devices
}

fn consumed(result: &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult) -> BTreeMap<String, String> {
    result.consumed_capacity.iter().flatten().map(|(name, q)| (name.clone(), q.0.clone())).collect()
}

fn allocated(
    claim: &ResourceClaim,
) -> impl Iterator<Item = &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
}

fn report(objects: &ClusterObjects, config: &Config, last: &CycleOutcome, now: i64, memo: &mut Memo) -> SimReport {
    let assembled = assemble_view(&objects.view(), &config.scheduler_name, now, memo);
    let waiting: HashMap<_, String> = last.waiting.iter().map(|w| (w.gang.clone(), w.to_string())).collect();
    let claims: HashMap<(String, String), &ResourceClaim> =
        objects.resource_claims.iter().map(|c| (key_of(&c.metadata), c)).collect();
    let mut pods = Vec::new();
    for pod in &objects.pods {
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.scheduler_name.as_deref()) != Some(config.scheduler_name.as_str()) {
            continue;
        }
        let key = PodKey {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
        };
        let node = spec.and_then(|s| s.node_name.clone());
        let reason = if node.is_some() {
            None
        } else if let Some(rejected) = assembled.rejected_pods.get(&key) {
            Some(rejected.why.clone())
        } else if let Some(gates) = spec.and_then(|s| s.scheduling_gates.as_ref()).filter(|g| !g.is_empty()) {
            let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
            Some(format!("waiting for scheduling gates to be removed: {}", names.join(", ")))
        } else {
            let gang = assembled.gang_of.get(&key);
            Some(gang.and_then(|g| waiting.get(g).cloned()).unwrap_or_else(|| "not considered for scheduling".into()))
        };
        let devices = if node.is_some() { pod_devices(pod, &claims) } else { Vec::new() };
        pods.push(PodResult { namespace: key.namespace, name: key.name, node, devices, reason, evicted: false });
    }
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let gangs = assembled
        .groups
        .iter()
        .filter(|g| g.key.kind != GangKind::Single)
        .map(|g| {
            let scheduled = g.bound >= g.min_member;
            let has_pods = g.bound > 0 || assembled.gang_of.values().any(|k| *k == g.key);
            GangResult {
                api_version: g.key.kind.api_version().unwrap_or_default().to_string(),
                kind: "PodGroup".into(),
                namespace: g.key.namespace.clone(),
                name: g.key.name.clone(),
                min_member: g.min_member,
                placed: g.bound,
                scheduled,
                reason: (!scheduled).then(|| match waiting.get(&g.key) {
                    Some(why) => why.clone(),
                    None if !has_pods => format!("no pods of this PodGroup exist yet ({} needed)", g.min_member),
                    None => format!("{} of its pods exist, it needs {}", g.bound, g.min_member),
                }),
            }
        })
        .collect();
    let state = QueueState::of(&assembled.snapshot);
    let names = &assembled.snapshot.resources;
    let queues = queue_report(&assembled.snapshot, &state)
        .into_iter()
        .map(|q| QueueResult {
            name: q.name,
            parent: q.parent,
            problem: q.problem,
            resources: q
                .resources
                .iter()
                .map(|&(id, f)| {
                    let amount = |v: i64| quantity(names, id, v);
                    let figures = QueueQuantities {
                        quota: f.quota.map_or_else(|| "unlimited".to_string(), amount),
                        limit: f.limit.map(amount),
                        fair_share: amount(f.fair_share),
                        allocated: amount(f.allocated),
                        requested: amount(f.requested),
                    };
                    (names.name(id).to_string(), figures)
                })
                .collect(),
        })
        .collect();
    let notes = state.devices.problems.iter().map(|p| format!("quota key on devices: {p}; it counts none")).collect();
    let claims = super::volumes::claim_results(
        objects,
        pods.iter().map(|p| (p.namespace.as_str(), p.name.as_str(), p.node.as_deref())),
    );
    SimReport { pods, gangs, queues, evictions: Vec::new(), claims, notes }
}
