//! Which gang a pod belongs to when it names no PodGroup, and what each such gang asks:
//! one walk up a pod's owners, shared by the scheduler's cache, `muster explain` and the
//! simulator.
//!
//! A pod's gang is the one of the topmost owner that makes a gang ([`Shape::Gang`]): a
//! JobSet's rather than its Job's, an MPIJob's rather than its launcher Job's. A
//! LeaderWorkerSet's pods are grouped by their labels (their owners are StatefulSets and the
//! leader pod). A pod whose owner is of a kind that is read but is not (yet) in the cache
//! waits for it rather than starting alone.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{MAX_DEPTH, MIN_MEMBER_ANNOTATION, Shape, Workload, WorkloadKind, controller_of, key};
use crate::convert::membership::{
    DERIVED_GANG_ANNOTATION, KUEUE_GANG_PREFIX, QUEUE_LABEL, labelled_preemptibility, labelled_queue, named_gang,
};
use crate::convert::{gang_spec as groups, gang_spec::GroupSpec};
use crate::engine::model::{GangKey, GangKind};

/// LeaderWorkerSet's labels and annotation on its pods.
pub const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
pub const LWS_GROUP_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
pub const LWS_SIZE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/size";
/// Kueue's plain-pod group size, on each pod of the group.
pub const KUEUE_TOTAL_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-total-count";

/// Where workloads are found, and which kinds are read at all.
pub trait Workloads {
    fn get(&self, namespace: &str, key: &str) -> Option<&Workload>;
    /// Whether workloads of `kind` are read: a pod whose owner of that kind is missing
    /// waits for it; one of a kind not read is not grouped by it.
    fn watched(&self, kind: WorkloadKind) -> bool;
}

/// Workloads of a list (`muster explain`'s, the simulator's files), with the kinds read:
/// a pod whose owner of a kind read is missing waits for it, as the scheduler's would.
pub struct Listed<'a> {
    by_key: HashMap<(&'a str, &'a str), &'a Workload>,
    read: BTreeSet<WorkloadKind>,
}

impl<'a> Listed<'a> {
    pub fn new(workloads: impl IntoIterator<Item = &'a Workload>, read: BTreeSet<WorkloadKind>) -> Listed<'a> {
        let by_key = workloads
            .into_iter()
            .map(|w| ((w.namespace(), w.metadata.name.as_deref().unwrap_or_default()), w))
            .collect();
        Listed { by_key, read }
    }
}

impl Workloads for Listed<'_> {
    fn get(&self, namespace: &str, key: &str) -> Option<&Workload> {
        self.by_key.get(&(namespace, key)).copied()
    }
    fn watched(&self, kind: WorkloadKind) -> bool {
        self.read.contains(&kind)
    }
}

/// Marks every pod with the gang its owners make among `workloads` (see [`mark`]).
pub fn mark_all(pods: &mut [Pod], workloads: &[Workload], read: BTreeSet<WorkloadKind>) {
    let listed = Listed::new(workloads, read);
    for pod in pods {
        mark(pod, &listed);
    }
}

/// A pod's gang from its owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// It names its gang itself, or its owners make none.
    Own,
    /// The gang of this name (`Kind/name`, or `LeaderWorkerSet/name/group`).
    Gang(String),
}

fn kind_of(reference: &OwnerReference) -> Option<WorkloadKind> {
    WorkloadKind::from_name(&reference.kind).filter(|k| k.owns(reference))
}

/// The first owner a pod's gang is looked up by (its LeaderWorkerSet, or its controller of
/// a workload kind), as a store key: the cache re-resolves the pods of an owner that changes.
pub fn first_owner(pod: &Pod) -> Option<String> {
    let labels = pod.metadata.labels.as_ref();
    if let Some(name) = labels.and_then(|l| l.get(LWS_NAME_LABEL)) {
        return Some(key(WorkloadKind::LeaderWorkerSet, name));
    }
    let reference = controller_of(&pod.metadata)?;
    kind_of(reference).map(|k| key(k, &reference.name))
}

/// The owners of `start` up from it, as far as they are found, and the key of one missing
/// of a kind that is read.
fn chain<'w>(
    namespace: &str,
    start: Option<&OwnerReference>,
    workloads: &'w dyn Workloads,
) -> (Vec<&'w Workload>, Option<String>) {
    let (mut chain, mut reference) = (Vec::new(), start);
    while let Some(r) = reference.filter(|_| chain.len() < MAX_DEPTH) {
        let Some(kind) = kind_of(r) else { break };
        let key = key(kind, &r.name);
        match workloads.get(namespace, &key) {
            Some(w) if r.uid.is_empty() || w.metadata.uid.as_deref().is_none_or(|u| u == r.uid) => {
                chain.push(w);
                reference = w.controller();
            }
            _ if workloads.watched(kind) => return (chain, Some(key)),
            _ => break,
        }
    }
    (chain, None)
}

fn makes_gang(w: &Workload) -> bool {
    matches!(w.shape, Shape::Gang { .. } | Shape::Unreadable(_))
}

/// The gang a pod's owners put it in.
pub fn resolve(pod: &Pod, workloads: &dyn Workloads) -> Resolution {
    if named_gang(pod).is_some() {
        return Resolution::Own;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.as_ref();
    if let (Some(name), Some(group)) =
        (labels.and_then(|l| l.get(LWS_NAME_LABEL)), labels.and_then(|l| l.get(LWS_GROUP_LABEL)))
    {
        return Resolution::Gang(format!("{}/{group}", key(WorkloadKind::LeaderWorkerSet, name)));
    }
    match chain(namespace, controller_of(&pod.metadata), workloads) {
        (_, Some(missing)) => Resolution::Gang(missing),
        (chain, None) => chain
            .iter()
            .rev()
            .find(|w| makes_gang(w))
            .map_or(Resolution::Own, |w| Resolution::Gang(w.metadata.name.clone().unwrap_or_default())),
    }
}

/// Sets or clears the pod's [`DERIVED_GANG_ANNOTATION`]; whether it changed.
pub fn mark(pod: &mut Pod, workloads: &dyn Workloads) -> bool {
    let derived = match resolve(pod, workloads) {
        Resolution::Gang(name) => Some(name),
        Resolution::Own => None,
    };
    let annotations = &mut pod.metadata.annotations;
    if annotations.as_ref().and_then(|a| a.get(DERIVED_GANG_ANNOTATION)) == derived.as_ref() {
        return false;
    }
    match derived {
        Some(name) => {
            annotations.get_or_insert_default().insert(DERIVED_GANG_ANNOTATION.into(), name);
        }
        None => {
            annotations.as_mut().map(|a| a.remove(DERIVED_GANG_ANNOTATION));
        }
    }
    true
}

/// A label or annotation on the first of `chain` (top first) that carries it.
fn first_marked<'w>(chain: &[&'w Workload], key: &str) -> Option<&'w str> {
    chain.iter().find_map(|w| w.marked(key))
}

/// Why the [`MIN_MEMBER_ANNOTATION`] on a gang's workloads is not a minimum: where the gang
/// comes from (`on`, as "Job ml/train") and the text the annotation holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{on}: {annotation} is {text:?}, not a count of at least 1", annotation = MIN_MEMBER_ANNOTATION)]
pub struct MinMemberError {
    pub on: String,
    pub text: String,
}

fn parse_min(text: &str, on: &str) -> Result<u32, MinMemberError> {
    text.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| MinMemberError { on: on.into(), text: text.into() })
}

/// A gang's spec from its workloads, top first (`chain`), the last the one that makes it.
fn spec(chain: &[&Workload], name: String, min: Option<u32>, parts: &str) -> GroupSpec {
    let (top, root) = (chain[0], chain[chain.len() - 1]);
    let namespace = root.namespace().to_string();
    let mut source = format!("{} {namespace}/{}", top.kind.name(), top.name());
    if chain.len() > 1 {
        source.push_str(&format!(" through {} {}", root.kind.name(), root.name()));
    }
    let (asked, mut problem) = match first_marked(chain, MIN_MEMBER_ANNOTATION).map(|t| parse_min(t, &source)) {
        Some(Ok(n)) => (Some(n), None),
        Some(Err(why)) => (None, Some(why.to_string())),
        None => (None, None),
    };
    if let Shape::Unreadable(why) = &root.shape {
        problem = Some(format!("{source}: {why}"));
    }
    let metas: Vec<&ObjectMeta> = chain.iter().map(|w| &w.metadata).collect();
    let topology = metas.iter().map(|m| groups::annotated_topology(m)).find(|t| t.0.is_some() || t.1.is_some());
    GroupSpec {
        key: GangKey { kind: GangKind::Workload, namespace, name },
        min_member: asked.or(min).unwrap_or(1).max(1) as usize,
        priority: None,
        priority_class_name: None,
        created: groups::created(&top.metadata),
        topology: topology.unwrap_or((None, None)),
        pods_ready_timeout_seconds: None,
        max_run_seconds: chain.iter().filter_map(|w| w.deadline).min(),
        queue: metas
            .iter()
            .find_map(|m| labelled_queue(m))
            .or_else(|| first_marked(chain, QUEUE_LABEL).map(String::from)),
        preemptible: metas.iter().find_map(|m| labelled_preemptibility(m)),
        preemption_delay: Ok(None),
        last_evicted: None,
        was_ready: false,
        source: Some(format!("{source}: {parts}")),
        problem,
    }
}

/// The spec of every gang the workloads make, into `specs`.
pub fn group_specs(workloads: &[&Workload], specs: &mut HashMap<GangKey, GroupSpec>) {
    let listed = Listed::new(workloads.iter().copied(), BTreeSet::new());
    for &w in workloads {
        let (mut above, _) = chain(w.namespace(), w.controller(), &listed);
        match &w.shape {
            Shape::Gang { .. } | Shape::Unreadable(_) if !above.iter().any(|a| makes_gang(a)) => {
                let (members, min, parts) = match &w.shape {
                    Shape::Gang { members, min, parts } => (*members, *min, parts.as_str()),
                    _ => (1, None, ""),
                };
                above.reverse();
                above.push(w);
                let spec = spec(&above, w.metadata.name.clone().unwrap_or_default(), min.or(Some(members)), parts);
                specs.insert(spec.key.clone(), spec);
            }
            Shape::Groups { size, groups } => {
                let workers = plural_workers(size.saturating_sub(1));
                for group in 0..*groups {
                    let name = format!("{}/{group}", w.metadata.name.as_deref().unwrap_or_default());
                    let spec = spec(&[w], name, Some(*size), &format!("group {group}: 1 leader + {workers}"));
                    specs.insert(spec.key.clone(), spec);
                }
            }
            _ => {}
        }
    }
}

fn plural_workers(n: u32) -> String {
    if n == 1 { "1 worker".into() } else { format!("{n} workers") }
}

/// The spec of a gang whose workload is not read, from what its pods carry: a Kueue pod
/// group's total count, a LeaderWorkerSet group's size. None: nothing says its size (its
/// owner is of a kind read, and not yet in the cache).
pub fn pod_spec(key: &GangKey, pods: &[&Pod]) -> Option<GroupSpec> {
    let annotations = pods.first()?.metadata.annotations.as_ref()?;
    let (what, count) =
        if let Some((name, group)) = key.name.strip_prefix("LeaderWorkerSet/").and_then(|n| n.rsplit_once('/')) {
            (format!("LeaderWorkerSet {}/{name}, group {group}", key.namespace), annotations.get(LWS_SIZE_ANNOTATION)?)
        } else if let Some(name) = key.name.strip_prefix(KUEUE_GANG_PREFIX) {
            (format!("Kueue pod group {}/{name}", key.namespace), annotations.get(KUEUE_TOTAL_ANNOTATION)?)
        } else {
            return None;
        };
    let parsed = count.parse::<u32>().ok().filter(|n| *n >= 1);
    Some(GroupSpec {
        key: key.clone(),
        min_member: parsed.unwrap_or(1) as usize,
        priority: None,
        priority_class_name: None,
        created: pods.iter().map(|p| groups::created(&p.metadata)).min().unwrap_or(i64::MAX),
        topology: (None, None),
        pods_ready_timeout_seconds: None,
        max_run_seconds: None,
        queue: None,
        preemptible: None,
        preemption_delay: Ok(None),
        last_evicted: None,
        was_ready: false,
        source: Some(format!("{what}: {count} pods, as its pods say")),
        problem: parsed.is_none().then(|| format!("{what}: its pods' size is {count:?}, not a count")),
    })
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
