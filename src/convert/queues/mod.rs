//! Queue objects into the engine's queue specs, and which queue a gang is in.
//!
//! Amounts go into the engine's units (CPU in millicores, memory in bytes, the rest in
//! units); anything wrong with an object becomes the queue's problem, which its gangs wait
//! on, and nothing else.

pub mod kai;
pub mod kueue;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::groups::{GroupSpec, created};
use super::quantity;
pub use super::view::{
    KAI_PREEMPTIBILITY_LABEL, KAI_QUEUE_LABELS, QUEUE_LABEL, labelled_preemptibility, labelled_queue,
};
use crate::api::kueue::{LocalQueue, LocalQueues, MANAGED_LABEL, local_queue_name};
use crate::api::{
    queue,
    queue::{Queue, StopPolicy},
};
use crate::config::parse_duration;
use crate::engine::admission::devices::device_key;
use crate::engine::queues::{
    DEFAULT_PRIORITY, DEFAULT_QUEUE, GPU_RESOURCE, QueuePreemption, QueueSpec, QueueingStrategy, ReclaimPolicy,
    ResourceRule, WithinQueue,
};
use crate::engine::resources::{ResourceId, ResourceNames};

/// The namespace label naming the queue of its gangs that name none.
pub const DEFAULT_QUEUE_LABEL: &str = "muster.dev/default-queue";
/// Gangs at or above this priority are non-preemptible unless they say otherwise (KAI's
/// threshold).
pub const NON_PREEMPTIBLE_PRIORITY: i32 = 100;

/// What is wrong with part of a queue object: a resource key, an amount, a weight, or its
/// namespace selector. The queue's problem lists them; its gangs wait on it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// The key is not `name` or `prefix/name`.
    #[error("resource key {key:?} is not a resource name")]
    NotAResourceName { key: String },
    /// A key on devices whose class part is not a DeviceClass name.
    #[error("resource key {key:?}: {class:?} is not a DeviceClass name")]
    NotADeviceClass { key: String, class: String },
    /// A key on devices whose capacity part is not a capacity's name.
    #[error("resource key {key:?}: the part before .deviceclass/ must name a device capacity (memory)")]
    NotADeviceCapacity { key: String },
    /// An amount of the resource that is not a quantity.
    #[error("resource {key}: {source}")]
    Amount { key: String, source: quantity::Error },
    /// An `overQuotaWeight` below 0 or not a number.
    #[error("resource {key}: overQuotaWeight {weight} must be a number of at least 0")]
    Weight { key: String, weight: f64 },
    /// A `namespaceSelector` expression with an operator other than In, NotIn, Exists and
    /// DoesNotExist.
    #[error("namespaceSelector: unknown operator {0:?}")]
    UnknownOperator(String),
}

/// Whether `key` can name a resource: `name` or `prefix/name`, a DNS-like prefix and a
/// name of letters, digits, `-`, `_` and `.`.
fn valid_key(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.len() <= 253
        && prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        && (prefix.is_empty() || !key.starts_with('/'));
    name_ok && prefix_ok && !key.contains("//")
}

/// A key on devices: a DeviceClass name (a DNS subdomain) and, for a capacity, its name
/// as devices publish it (`memory`, or qualified with the driver).
fn valid_device_key(key: &str, capacity: Option<&str>, class: &str) -> Result<(), Error> {
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if !dns(class) {
        return Err(Error::NotADeviceClass { key: key.into(), class: class.into() });
    }
    if capacity.is_some_and(|c| !valid_key(c)) {
        return Err(Error::NotADeviceCapacity { key: key.into() });
    }
    Ok(())
}

pub(super) fn amount(names: &mut ResourceNames, key: &str, text: &str) -> Result<(ResourceId, i64), Error> {
    let id = names.intern(key);
    // CPU in millicores, GPUs in thousandths (fractions count fractionally), the rest in units.
    let milli = id == ResourceId::CPU || key == GPU_RESOURCE;
    let parsed = if milli { quantity::parse_milli(text) } else { quantity::parse_units(text) };
    parsed.map(|v| (id, v)).map_err(|source| Error::Amount { key: key.into(), source })
}

fn rule(names: &mut ResourceNames, key: &str, r: &queue::QueueResource) -> Result<(ResourceId, ResourceRule), Error> {
    match device_key(key) {
        Some((capacity, class)) => valid_device_key(key, capacity, class)?,
        None if !valid_key(key) => return Err(Error::NotAResourceName { key: key.into() }),
        None => {}
    }
    let id = names.intern(key);
    let mut out = ResourceRule::default();
    let field = |names: &mut ResourceNames, q: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.as_ref().map(|q| amount(names, key, &q.0).map(|(_, v)| v)).transpose()
    };
    out.quota = Some(field(names, &r.quota)?.unwrap_or(0));
    out.limit = field(names, &r.limit)?;
    out.lending_limit = field(names, &r.lending_limit)?;
    if let Some(w) = r.over_quota_weight {
        if !w.is_finite() || w < 0.0 {
            return Err(Error::Weight { key: key.into(), weight: w });
        }
        out.weight_milli = (w * 1000.0).round() as u64;
    }
    Ok((id, out))
}

/// The names of the namespaces `selector` admits, sorted; a selector that cannot be read
/// adds its problem to `problems` and admits the namespaces matched until then.
pub(super) fn selected_namespaces(
    selector: &LabelSelector,
    namespaces: &[&Namespace],
    problems: &mut Vec<String>,
) -> Vec<String> {
    let mut allowed = Vec::new();
    for ns in namespaces {
        match selects(selector, ns.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())) {
            Ok(true) => allowed.push(ns.metadata.name.clone().unwrap_or_default()),
            Ok(false) => {}
            Err(why) => {
                problems.push(why.to_string());
                break;
            }
        }
    }
    allowed.sort();
    allowed
}

/// Whether a namespace's labels match a label selector.
pub(super) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, Error> {
    for (k, v) in selector.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let has = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            other => return Err(Error::UnknownOperator(other.into())),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One Queue object as the engine's spec.
pub fn queue_spec(queue: &Queue, namespaces: &[&Namespace], names: &mut ResourceNames) -> QueueSpec {
    let mut spec = QueueSpec::new(queue.metadata.name.as_deref().unwrap_or_default());
    spec.parent = queue.spec.parent.clone().filter(|p| !p.is_empty());
    spec.priority = queue.spec.priority.unwrap_or(DEFAULT_PRIORITY);
    spec.created = created(&queue.metadata);
    spec.opportunistic_backfill = queue.spec.opportunistic_backfill;
    let mut problems = Vec::new();
    for (key, r) in &queue.spec.resources {
        match rule(names, key, r) {
            Ok(rule) => spec.resources.push(rule),
            Err(why) => problems.push(why.to_string()),
        }
    }
    if let Some(admission) = &queue.spec.admission {
        spec.stopped = matches!(admission.stop_policy, Some(StopPolicy::Hold | StopPolicy::HoldAndDrain));
        spec.queueing = admission.queueing_strategy.map(|s| match s {
            queue::MusterQueueingStrategy::StrictFifo => QueueingStrategy::StrictFifo,
            queue::MusterQueueingStrategy::BestEffortFifo => QueueingStrategy::BestEffortFifo,
        });
        if let Some(selector) = &admission.namespace_selector {
            spec.namespaces = Some(selected_namespaces(selector, namespaces, &mut problems));
        }
    }
    if let Some(p) = &queue.spec.preemption {
        spec.preemption = preemption(p, &mut problems);
    }
    if !problems.is_empty() {
        spec.problem = Some(problems.join("; "));
    }
    spec
}

/// A queue's `preemption` rules; a duration that does not parse is a problem.
fn preemption(p: &queue::MusterQueuePreemption, problems: &mut Vec<String>) -> QueuePreemption {
    let mut duration = |field: &str, text: &Option<String>| {
        text.as_deref().and_then(|t| match parse_duration(t) {
            Ok(seconds) => Some(seconds),
            Err(why) => {
                problems.push(format!("preemption.{field}: {why}"));
                None
            }
        })
    };
    let rules = QueuePreemption {
        reclaim: match p.reclaim {
            Some(queue::MusterReclaimPolicy::Never) => ReclaimPolicy::Never,
            Some(queue::MusterReclaimPolicy::LowerPriority) => ReclaimPolicy::LowerPriority,
            Some(queue::MusterReclaimPolicy::Any) | None => ReclaimPolicy::Any,
        },
        not_reclaimable: p.reclaimable == Some(false),
        within: match p.within_queue {
            Some(queue::WithinQueuePolicy::Never) => WithinQueue::Never,
            Some(queue::WithinQueuePolicy::LowerPriority) | None => WithinQueue::LowerPriority,
            Some(queue::WithinQueuePolicy::LowerOrNewerEqualPriority) => WithinQueue::LowerOrNewerEqualPriority,
        },
        reclaim_min_runtime: duration("reclaimMinRuntime", &p.reclaim_min_runtime),
        preempt_min_runtime: duration("preemptMinRuntime", &p.preempt_min_runtime),
        preemption_delay: duration("preemptionDelay", &p.preemption_delay),
        fence: p.fence == Some(true),
        borrow_within_parent: None,
    };
    let mut rules = rules;
    if let Some(b) = &p.borrow_within_parent {
        match b.policy.as_deref() {
            None | Some("Never") => {}
            Some("LowerPriority") => rules.borrow_within_parent = Some(b.max_priority_threshold),
            Some(other) => problems.push(format!(
                "preemption.borrowWithinParent.policy: unknown policy {other:?} (Never or LowerPriority)"
            )),
        }
    }
    rules
}

/// What decides which queue a gang is in, read once per cycle: namespaces (their default
/// queue labels) and, when Kueue is imported, its LocalQueues.
pub struct QueueRules<'a> {
    namespaces: HashMap<&'a str, &'a Namespace>,
    /// Kueue's LocalQueues when Kueue is imported; None when it is not (Kueue then keeps
    /// the quota of the pods it admits).
    kueue: Option<LocalQueues<'a>>,
}

impl<'a> QueueRules<'a> {
    pub fn new(namespaces: &[&'a Namespace], kueue: Option<&[&'a LocalQueue]>) -> QueueRules<'a> {
        QueueRules {
            namespaces: namespaces.iter().filter_map(|n| Some((n.metadata.name.as_deref()?, *n))).collect(),
            kueue: kueue.map(LocalQueues::new),
        }
    }

    /// The queue a gang is in (QUEUES.md §3.1): its PodGroup's queue, else its pod's
    /// `muster.dev/queue` label, else KAI Scheduler's labels, else (Kueue imported) the
    /// ClusterQueue of the LocalQueue its `kueue.x-k8s.io/queue-name` label names, else
    /// its namespace's `muster.dev/default-queue` label, else `default`.
    pub fn queue_of(&self, group: Option<&GroupSpec>, pod: &Pod) -> String {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        group
            .and_then(|g| g.queue.clone())
            .or_else(|| labelled_queue(&pod.metadata))
            .or_else(|| {
                let local = local_queue_name(pod.metadata.labels.as_ref())?;
                Some(self.kueue.as_ref()?.queue_of(namespace, local))
            })
            .or_else(|| self.namespaces.get(namespace)?.metadata.labels.as_ref()?.get(DEFAULT_QUEUE_LABEL).cloned())
            .unwrap_or_else(|| DEFAULT_QUEUE.to_string())
    }

    /// Why the Kueue LocalQueue a pod names admits nothing now (its `stopPolicy`), when
    /// Kueue is imported and the pod's queue comes from that LocalQueue.
    pub fn stopped(&self, group: Option<&GroupSpec>, pod: &Pod) -> Option<String> {
        if group.and_then(|g| g.queue.as_ref()).is_some() || labelled_queue(&pod.metadata).is_some() {
            return None;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        self.kueue.as_ref()?.stopped(namespace, local_queue_name(pod.metadata.labels.as_ref())?)
    }

    /// Who else keeps a pod's quota: Kueue, for a pod it manages (a LocalQueue label, or
    /// its managed label) while Kueue is not imported. Such a pod is placed outside
    /// Muster's queues.
    pub fn quota_owner(&self, pod: &Pod) -> Option<&'static str> {
        let labels = pod.metadata.labels.as_ref();
        let managed = local_queue_name(labels).is_some()
            || labels.and_then(|l| l.get(MANAGED_LABEL)).is_some_and(|v| v == "true");
        (self.kueue.is_none() && managed).then_some("Kueue")
    }
}

/// Whether a gang says itself whether it may be preempted: its PodGroup, else its pod's KAI
/// label. None: decided by priority.
pub fn preemptibility(group: Option<&GroupSpec>, pod: &Pod) -> Option<bool> {
    group.and_then(|g| g.preemptible).or_else(|| labelled_preemptibility(&pod.metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(yaml: &str) -> Queue {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn preemption_rules_convert_and_a_bad_duration_is_the_queues_problem() {
        let q = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  preemption: {reclaim: LowerPriority, reclaimable: false, withinQueue: Never, reclaimMinRuntime: 10m, preemptionDelay: 30s, fence: true, borrowWithinParent: {policy: LowerPriority, maxPriorityThreshold: 50}}\n",
        );
        let spec = queue_spec(&q, &[], &mut ResourceNames::default());
        assert_eq!(spec.problem, None);
        let p = spec.preemption;
        assert_eq!(
            (p.reclaim, p.not_reclaimable, p.within, p.fence),
            (ReclaimPolicy::LowerPriority, true, WithinQueue::Never, true)
        );
        assert_eq!((p.reclaim_min_runtime, p.preempt_min_runtime, p.preemption_delay), (Some(600), None, Some(30)));
        assert_eq!(p.borrow_within_parent, Some(Some(50)));
        let q = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  preemption: {preemptMinRuntime: a while, borrowWithinParent: {policy: Always}}\n",
        );
        let problem = queue_spec(&q, &[], &mut ResourceNames::default()).problem.unwrap();
        assert!(problem.starts_with("preemption.preemptMinRuntime: \"a while\" is not a duration"), "{problem}");
        assert!(problem.contains("preemption.borrowWithinParent.policy: unknown policy \"Always\""), "{problem}");
    }

    #[test]
    fn a_queue_converts_to_engine_units() {
        let q = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  parent: org\n  priority: 50\n  resources:\n    nvidia.com/gpu: {quota: \"8\", overQuotaWeight: 2, limit: \"12\", lendingLimit: \"4\"}\n    cpu: {quota: \"1500m\"}\n",
        );
        let mut names = ResourceNames::default();
        let spec = queue_spec(&q, &[], &mut names);
        assert_eq!(spec.problem, None);
        assert_eq!((spec.parent.as_deref(), spec.priority), (Some("org"), 50));
        let gpu = names.get("nvidia.com/gpu").unwrap();
        let find = |id| spec.resources.iter().find(|(k, _)| *k == id).unwrap().1;
        // GPUs in thousandths, so that fractions count fractionally.
        assert_eq!(
            find(gpu),
            ResourceRule { quota: Some(8000), weight_milli: 2000, limit: Some(12_000), lending_limit: Some(4000) }
        );
        assert_eq!(find(ResourceId::CPU).quota, Some(1500));
    }

    #[test]
    fn a_bad_key_or_amount_is_the_queues_problem_named_in_words() {
        let q = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: bad}\nspec:\n  resources:\n    \"nvidia gpu\": {quota: \"1\"}\n    memory: {quota: lots}\n",
        );
        let spec = queue_spec(&q, &[], &mut ResourceNames::default());
        let problem = spec.problem.unwrap();
        assert!(problem.contains("resource key \"nvidia gpu\" is not a resource name"), "{problem}");
        assert!(problem.contains("resource memory: invalid quantity \"lots\""), "{problem}");
    }

    #[test]
    fn keys_on_devices_count_devices_and_bytes_and_name_a_bad_class() {
        let q = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec:\n  resources:\n    deviceclass/h100.gpu.nvidia.com: {quota: \"4\"}\n    memory.deviceclass/gpu.nvidia.com: {limit: 640Gi}\n",
        );
        let mut names = ResourceNames::default();
        let spec = queue_spec(&q, &[], &mut names);
        assert_eq!(spec.problem, None);
        let find = |key: &str| spec.resources.iter().find(|(k, _)| Some(*k) == names.get(key)).unwrap().1;
        assert_eq!(find("deviceclass/h100.gpu.nvidia.com").quota, Some(4));
        assert_eq!(find("memory.deviceclass/gpu.nvidia.com").limit, Some(640 << 30));
        let bad = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: b}\nspec:\n  resources:\n    deviceclass/H100_GPU: {quota: \"1\"}\n",
        );
        let problem = queue_spec(&bad, &[], &mut ResourceNames::default()).problem.unwrap();
        assert!(problem.contains("\"H100_GPU\" is not a DeviceClass name"), "{problem}");
    }

    #[test]
    fn the_namespace_selector_lists_the_namespaces_it_admits() {
        let q = queue(
            "apiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec:\n  admission:\n    namespaceSelector: {matchLabels: {team: a}}\n    stopPolicy: Hold\n",
        );
        let ns = |name: &str, team: &str| -> Namespace {
            yaml_serde::from_str(&format!("metadata: {{name: {name}, labels: {{team: {team}}}}}")).unwrap()
        };
        let (a, b) = (ns("ml-a", "a"), ns("ml-b", "b"));
        let spec = queue_spec(&q, &[&a, &b], &mut ResourceNames::default());
        assert_eq!(spec.namespaces, Some(vec!["ml-a".to_string()]));
        assert!(spec.stopped);
    }

    #[test]
    fn a_gangs_queue_comes_from_its_group_then_its_labels_then_its_namespace() {
        let pod = |labels: &str| -> Pod {
            yaml_serde::from_str(&format!("metadata: {{name: p, labels: {labels}}}")).unwrap()
        };
        let plain = QueueRules::new(&[], None);
        assert_eq!(plain.queue_of(None, &pod("{}")), "default");
        assert_eq!(plain.queue_of(None, &pod("{kai.scheduler/queue: kai-q}")), "kai-q");
        assert_eq!(plain.queue_of(None, &pod("{runai/queue: old, muster.dev/queue: mine}")), "mine");
        let ns: Namespace =
            yaml_serde::from_str("metadata: {name: ml, labels: {muster.dev/default-queue: team-ml}}").unwrap();
        let in_ml = |labels: &str| -> Pod {
            yaml_serde::from_str(&format!("metadata: {{name: p, namespace: ml, labels: {labels}}}")).unwrap()
        };
        let rules = QueueRules::new(&[&ns], None);
        assert_eq!(rules.queue_of(None, &in_ml("{}")), "team-ml");
        // Kueue not imported: its label is not a queue, and Kueue keeps the pod's quota.
        let kueue_pod = in_ml("{kueue.x-k8s.io/queue-name: user-queue}");
        assert_eq!(rules.queue_of(None, &kueue_pod), "team-ml");
        assert_eq!(rules.quota_owner(&kueue_pod), Some("Kueue"));
        assert_eq!(rules.quota_owner(&in_ml("{}")), None);
        // Imported: the LocalQueue leads to its ClusterQueue, and Muster keeps the quota.
        let lq: LocalQueue = yaml_serde::from_str(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {namespace: ml, name: user-queue}\nspec: {clusterQueue: team-a}\n",
        )
        .unwrap();
        let imported = QueueRules::new(&[&ns], Some(&[&lq]));
        assert_eq!(imported.queue_of(None, &kueue_pod), "kueue/team-a");
        assert_eq!(imported.stopped(None, &kueue_pod), None);
        let mut held = lq.clone();
        held.spec.fields.stop_policy = Some("Hold".into());
        let held_rules = QueueRules::new(&[&ns], Some(&[&held]));
        assert_eq!(
            held_rules.stopped(None, &kueue_pod).as_deref(),
            Some("LocalQueue ml/user-queue is stopped (stopPolicy Hold); it admits no new gang")
        );
        assert_eq!(imported.quota_owner(&kueue_pod), None);
        assert_eq!(imported.queue_of(None, &in_ml("{muster.dev/queue: mine, kueue.x-k8s.io/queue-name: x}")), "mine");
        assert_eq!(preemptibility(None, &pod("{kai.scheduler/preemptibility: non-preemptible}")), Some(false));
    }
}
