//! One gang as the snapshot shows it, made from its pods alone: what waits to be placed,
//! what runs (as queues count it), and how many of its pods are bound. A snapshot after a
//! change makes again only the gangs whose pods or PodGroup changed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::memo::Conversions;
use crate::convert::core::describe;
use crate::convert::default_spread::{SpreadOwners, defaults_for};
use crate::convert::pod_rules;
use crate::convert::status::{Rejection, Unplaced};
use crate::convert::volumes::{self, VolumeIndex};
use crate::convert::{
    dra,
    dra::{ClaimIndex, HeldDevices},
};
use crate::convert::{
    groups,
    groups::{GroupSpec, annotated_topology, created},
};
use crate::convert::{queues, queues::QueueRules};
use crate::convert::{
    view,
    view::{ClusterView, pod_key},
};
use crate::engine::dra::model::DraSnapshot;
use crate::engine::model::{
    Ending, Gang, GangKey, GangKind, Node as EngineNode, PendingPod, PodKey, RunningGang, RunningPod,
};
use crate::engine::pods::PodRules;
use crate::engine::topology::{DomainIndex, GangTopology};

/// What a gang's pods are read against: everything in the snapshot but pods.
pub(super) struct Context<'v, 'a> {
    pub view: &'v ClusterView<'a>,
    pub classes: HashMap<&'a str, i32>,
    pub default_priority: i32,
    pub facts: &'v HashMap<GangKey, GroupSpec>,
    pub rules: QueueRules<'a>,
    /// Whether queues are configured: only then are running gangs listed (opportunistic
    /// ones always are).
    pub queued: bool,
    pub claims: &'v ClaimIndex<'a>,
    /// What running pods' claims hold, made the first time a listed pod needs it.
    pub held: std::cell::OnceCell<HeldDevices<'v>>,
    /// The claims and volumes pods' volumes name, made the first time a pod has one.
    pub volumes: std::cell::OnceCell<VolumeIndex<'a>>,
    /// What each claim attaches to its pod's node.
    pub attachments: &'v crate::convert::volumes::ClaimAttachments,
    /// What selects pods for default spread constraints, made the first time a pod sets none.
    pub owners: std::cell::OnceCell<SpreadOwners<'a>>,
    pub dra: &'v DraSnapshot,
    pub served: &'v HashSet<String>,
    pub node_index: &'v HashMap<String, usize>,
    pub nodes: &'v [EngineNode],
}

impl<'v> Context<'v, '_> {
    fn class_priority(&self, name: Option<&String>) -> Option<i32> {
        name.and_then(|n| self.classes.get(n.as_str()).copied())
    }

    fn group_priority(&self, group: &GroupSpec) -> Option<i32> {
        group.priority.or_else(|| self.class_priority(group.priority_class_name.as_ref()))
    }

    fn pod_priority(&self, pod: &Pod) -> Option<i32> {
        let spec = pod.spec.as_ref()?;
        spec.priority.or_else(|| self.class_priority(spec.priority_class_name.as_ref()))
    }

    fn held(&self) -> &HeldDevices<'v> {
        self.held.get_or_init(|| HeldDevices::new(self.dra, self.claims))
    }
}

/// What one gang adds to the snapshot.
#[derive(Clone, Debug, Default)]
pub(super) struct GangPart {
    /// Its pods waiting to be placed, when any can be considered.
    pub pending: Option<Gang>,
    /// Its running pods, listed when queues are configured or they run opportunistically.
    pub running: Option<RunningGang>,
    /// Its pods bound and not terminating.
    pub bound: usize,
    /// Its pods not bound (for `gang_of`).
    pub unbound: Vec<PodKey>,
    /// Its pending pods the engine cannot consider, with why.
    pub rejected: Vec<(PodKey, Rejection)>,
    /// Its bound pods with a runtime bound, and when each ends.
    pub endings: Vec<Ending>,
}

/// A rejection, Unsupported when the pod uses what Muster does not honour yet.
fn rejection(why: String, unsupported: bool) -> Rejection {
    Rejection { why, unplaced: if unsupported { Unplaced::Unsupported } else { Unplaced::Unschedulable } }
}

/// A pod's own runtime bound: `spec.activeDeadlineSeconds`.
fn pod_deadline(pod: &Pod) -> Option<i64> {
    pod.spec.as_ref()?.active_deadline_seconds.filter(|&s| s > 0)
}

/// The gang `key` from its pods (Muster's, not ended, in the view's order).
pub(super) fn fold(
    key: &GangKey,
    pods: &[&Pod],
    ctx: &Context<'_, '_>,
    topology: &mut DomainIndex,
    memo: &mut Conversions,
) -> GangPart {
    // A gang of a workload that is not read takes its size from its pods.
    let from_pods = match ctx.facts.get(key) {
        None if key.kind == GangKind::Workload => crate::convert::workloads::resolve::pod_spec(key, pods),
        _ => None,
    };
    let group = ctx.facts.get(key).or(from_pods.as_ref());
    let served_names = ctx.served;
    let served = &|resource: &str| served_names.contains(resource);
    let folding = Folding { key, group, ctx, served };
    let mut part = GangPart::default();
    let mut waiting = Waiting::default();
    for &pod in pods {
        match ctx.view.node_of(pod) {
            Some(node_name) => folding.bound_pod(pod, node_name, memo, &mut part),
            None => folding.unbound_pod(pod, memo, &mut part, &mut waiting),
        }
    }
    folding.finish_pending(&mut waiting, part.bound, topology, memo.ad_hoc_levels);
    part.pending = waiting.gang;
    part
}

/// One gang being folded: what each of its pods is read against.
struct Folding<'f, 'v, 'a> {
    key: &'f GangKey,
    /// Its PodGroup's (or workload's) facts, if it has any.
    group: Option<&'f GroupSpec>,
    ctx: &'f Context<'v, 'a>,
    /// Whether a resource name is one the scheduler serves.
    served: &'f dyn Fn(&str) -> bool,
}

/// What the gang's pending pods gathered so far.
#[derive(Default)]
struct Waiting {
    /// The gang, from its first pod that can be considered on.
    gang: Option<Gang>,
    /// Whether it may be preempted, from the first pod that says.
    preemptibility: Option<bool>,
    /// The topology the first annotated pod names (required, preferred).
    pod_topology: Option<(Option<String>, Option<String>)>,
}

impl Folding<'_, '_, '_> {
    /// A pod bound to `node_name`: counted as bound unless terminating, its ending noted if
    /// its runtime is bounded, and listed as running when queues count it (or it runs
    /// opportunistically).
    fn bound_pod(&self, pod: &Pod, node_name: &str, memo: &mut Conversions, part: &mut GangPart) {
        let (key, group, ctx) = (self.key, self.group, self.ctx);
        // A terminating pod still uses its node, but no longer counts toward its gang:
        // an evicted gang must not look whole while its pods go away.
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        part.bound += 1;
        // A pod bound opportunistically leaves whenever a reservation needs it: the
        // engine counts it as ending then, not by its bound.
        let opportunistic = view::opportunistic(&pod.metadata);
        let bound = pod_deadline(pod).into_iter().chain(group.and_then(|g| g.max_run_seconds)).min();
        let bound = bound.filter(|_| !opportunistic);
        // A pod whose quota Kueue keeps is capacity in use, as another scheduler's
        // would be.
        let listed = (ctx.queued && ctx.rules.quota_owner(pod).is_none()) || opportunistic;
        if !listed && bound.is_none() {
            return;
        }
        let (Ok(demand), Some(&node)) = (memo.demand(pod, self.served), ctx.node_index.get(node_name)) else {
            return;
        };
        let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0.as_second());
        let started = started.unwrap_or_else(|| created(&pod.metadata));
        if let Some(bound) = bound {
            part.endings.push(Ending { at: started.saturating_add(bound), node: node as u32, demand: demand.clone() });
        }
        if !listed {
            return;
        }
        let priority =
            group.and_then(|g| ctx.group_priority(g)).or_else(|| ctx.pod_priority(pod)).unwrap_or(ctx.default_priority);
        let entry = part.running.get_or_insert_with(|| RunningGang {
            key: key.clone(),
            queue: ctx.rules.queue_of(group, pod),
            priority,
            preemptible: queues::preemptibility(group, pod).unwrap_or(priority < queues::NON_PREEMPTIBLE_PRIORITY),
            min_member: group.map_or(1, |g| g.min_member),
            pods: Vec::new(),
            created: group.map_or(i64::MAX, |g| g.created),
            opportunistic: false,
        });
        entry.created = entry.created.min(created(&pod.metadata));
        entry.opportunistic |= opportunistic;
        let devices = ctx.held().of(pod);
        entry.pods.push(RunningPod {
            key: pod_key(&pod.metadata),
            node: node as u32,
            demand,
            started,
            gpu_milli: dra::running_gpu_milli(pod, ctx.dra, &devices),
            devices,
            grace_seconds: pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30),
        });
    }

    /// A pod not bound: noted as unbound, and unless it is terminating or gated, converted
    /// and added to the pending gang (or rejected with why), which it may block, raise in
    /// priority, date earlier or give a topology.
    /// The pod's rules between pods, with the default spread constraints when it sets none.
    fn rules(&self, pod: &Pod, memo: &Conversions) -> crate::convert::core::Result<Option<Arc<PodRules>>> {
        let ctx = self.ctx;
        let rules = pod_rules::pod_rules(pod, &ctx.view.namespaces)?;
        let attach = ctx.attachments.of(pod);
        let defaults = &memo.spread_defaults;
        let spread = match defaults.constraints.is_empty() {
            true => None,
            false => defaults_for(pod, defaults, ctx.owners.get_or_init(|| SpreadOwners::new(ctx.view)))?,
        };
        if spread.is_none() && attach.is_empty() {
            return Ok(rules);
        }
        let mut with = rules.as_deref().cloned().unwrap_or_default();
        with.attach = attach;
        if let Some((hard, soft)) = spread {
            (with.spread, with.soft_spread, with.system_spread) = (hard, soft, defaults.system);
        }
        Ok(Some(Arc::new(with)))
    }

    fn unbound_pod(&self, pod: &Pod, memo: &mut Conversions, part: &mut GangPart, waiting: &mut Waiting) {
        let (key, group, ctx) = (self.key, self.group, self.ctx);
        let spec = pod.spec.as_ref();
        let pod_key = pod_key(&pod.metadata);
        part.unbound.push(pod_key.clone());
        if pod.metadata.deletion_timestamp.is_some()
            || spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
        {
            return;
        }
        // Its demand first: a pod asking for what nobody offers costs no more than that.
        let (demand, mut constraints) = match memo.pod(pod, self.served) {
            Ok(converted) => converted,
            Err(e) => {
                part.rejected.push((pod_key, rejection(e.to_string(), false)));
                return;
            }
        };
        if let Some(field) = volumes::inline_disk_field(pod) {
            let why = format!(
                "{}: {field} is not honoured by Muster yet (the same disk mounted by two pods of a node is not checked; docs/scheduling.md)",
                describe("Pod", &pod.metadata)
            );
            part.rejected.push((pod_key, rejection(why, true)));
            return;
        }
        // Where its claims' volumes let it run, read afresh: claims bind apart from pods.
        if volumes::uses_claims(pod) {
            let index = ctx.volumes.get_or_init(|| VolumeIndex::new(ctx.view));
            match index.places(pod) {
                Ok(places) => {
                    let mut own = (*constraints).clone();
                    (own.volume_terms, own.volume_zones, own.delayed) = (places.terms, places.zones, places.delayed);
                    constraints = Arc::new(own);
                }
                Err(e) => {
                    let why = format!("{}: {e}", describe("Pod", &pod.metadata));
                    part.rejected.push((pod_key.clone(), rejection(why, false)));
                    return;
                }
            }
        }
        let rules = match self.rules(pod, memo) {
            Ok(rules) => rules.map(|r| memo.rules.intern_shared(r)),
            Err(e) => {
                part.rejected.push((pod_key, rejection(e.to_string(), false)));
                return;
            }
        };
        let devices = dra::pod_devices(pod, ctx.claims, ctx.dra, &mut memo.names, &mut memo.devices.specs);
        let priority = ctx.pod_priority(pod).unwrap_or(ctx.default_priority);
        let entry = waiting.gang.get_or_insert_with(|| new_gang(key, group, pod, ctx));
        if let Some(own) = pod_deadline(pod) {
            entry.max_run_seconds = Some(entry.max_run_seconds.map_or(own, |b| b.min(own)));
        }
        // A delay on the pod (KAI's annotation) when its PodGroup sets none.
        if entry.preemption_delay.is_none() {
            match groups::preemption_delay(None, &pod.metadata) {
                Ok(delay) => entry.preemption_delay = delay,
                Err(why) => {
                    entry.blocked.get_or_insert_with(|| format!("pod {pod_key}: {why}"));
                }
            }
        }
        if waiting.preemptibility.is_none() {
            waiting.preemptibility = queues::preemptibility(group, pod);
        }
        if pod.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
            entry.preempts = false;
        }
        // Without a priority of its own, a gang takes its highest pod's; without a
        // PodGroup's creation time, its oldest pod's.
        if group.and_then(|g| ctx.group_priority(g)).is_none() {
            entry.priority = entry.priority.max(priority);
        }
        if group.is_none() {
            entry.created = entry.created.min(created(&pod.metadata));
        }
        let devices = match devices {
            Ok(devices) => devices.map(Arc::new),
            Err(why) => {
                // The gang cannot be placed until this pod's claims can be considered.
                if entry.blocked.is_none() {
                    entry.blocked = Some(if key.kind == GangKind::Single {
                        why.to_string()
                    } else {
                        format!("pod {pod_key}: {why}; {key} waits for it")
                    });
                }
                None
            }
        };
        if waiting.pod_topology.is_none() {
            let named = annotated_topology(&pod.metadata);
            if named.0.is_some() || named.1.is_some() {
                waiting.pod_topology = Some(named);
            }
        }
        entry.pods.push(PendingPod {
            key: pod_key,
            demand,
            constraints,
            devices,
            labels: memo.labels.intern(pod.metadata.labels.clone().unwrap_or_default()),
            rules,
        });
    }

    /// The pending gang, once all its pods are read: how many of its pods are bound,
    /// whether it may be preempted, and its topology resolved to domains (or why not).
    fn finish_pending(&self, waiting: &mut Waiting, bound: usize, topology: &mut DomainIndex, levels: usize) {
        let (key, ctx) = (self.key, self.ctx);
        let Some(gang) = waiting.gang.as_mut() else { return };
        gang.bound = bound;
        gang.preemptible = waiting.preemptibility.unwrap_or(gang.priority < queues::NON_PREEMPTIBLE_PRIORITY);
        // Topology: the PodGroup's, else (a pod without one, say of a Kueue job) its pods'
        // annotations.
        let named = match self.group.map(|f| f.topology.clone()) {
            Some((None, None)) | None => waiting.pod_topology.take().unwrap_or((None, None)),
            Some(named) => named,
        };
        if named.0.is_some() || named.1.is_some() {
            let mut resolve =
                |name: &Option<String>| name.as_deref().map(|n| topology.resolve(n, ctx.nodes, levels)).transpose();
            match (resolve(&named.0), resolve(&named.1)) {
                (Ok(required), Ok(preferred)) => gang.topology = Some(GangTopology { required, preferred }),
                (Err(why), _) | (_, Err(why)) => {
                    gang.blocked.get_or_insert_with(|| format!("{key}: {why}"));
                }
            }
        }
    }
}

/// A gang as its first pod that can be considered finds it.
fn new_gang(key: &GangKey, group: Option<&GroupSpec>, pod: &Pod, ctx: &Context<'_, '_>) -> Gang {
    let blocked = ctx.rules.stopped(group, pod).or_else(|| match (key.kind, group) {
        (_, Some(g)) => {
            g.problem.clone().or_else(|| g.preemption_delay.as_ref().err().map(|why| format!("{key}: PodGroup {why}")))
        }
        (GangKind::Single, None) => None,
        (GangKind::Workload, None) => Some(format!("{key} is not read yet; its pods wait for it")),
        (kind, None) => Some(format!(
            "PodGroup {}/{} ({}) does not exist; its pods wait for it{}",
            key.namespace,
            key.name,
            kind.api_version().unwrap_or_default(),
            if kind == GangKind::Kai { " (KAI's PodGroups are read with queues.import: [kai])" } else { "" }
        )),
    });
    Gang {
        key: key.clone(),
        min_member: group.map_or(1, |g| g.min_member),
        bound: 0,
        pods: Vec::new(),
        priority: group.and_then(|g| ctx.group_priority(g)).unwrap_or(i32::MIN),
        created: group.map_or(i64::MAX, |g| g.created),
        blocked,
        topology: None,
        queue: ctx.rules.queue_of(group, pod),
        quota_owner: ctx.rules.quota_owner(pod),
        preemption_delay: group.and_then(|g| g.preemption_delay.clone().ok().flatten()),
        last_evicted: group.and_then(|g| g.last_evicted),
        preemptible: true,
        preempts: true,
        parked: Default::default(),
        max_run_seconds: group.and_then(|g| g.max_run_seconds),
    }
}
