//! Kueue's ClusterQueues, Cohorts and LocalQueues read as engine queue specs (QUEUES.md
//! §3.3). The mapping is lossy, and every loss is said in the queue's notes (which
//! `muster explain queue` shows and the scheduler logs), never dropped in silence:
//!
//! - a ClusterQueue is the leaf `kueue/<name>`; a cohort (a Cohort object, or a name that
//!   ClusterQueues share) is the parent `kueue-cohort/<name>`;
//! - `nominalQuota` is the quota; a cohort's quota is its own nominal quota plus all its
//!   children's, as Kueue pools them;
//! - `borrowingLimit` becomes `limit = nominal + borrowingLimit`; a ClusterQueue without a
//!   cohort cannot borrow, so its limit is its nominal quota;
//! - `lendingLimit` is kept, `fairSharing.weight` is the over-quota weight;
//! - `reclaimWithinCohort` and `withinClusterQueue` keep Kueue's default, Never;
//! - the flavors of a resource are counted as one pool (Muster does not tell flavors apart
//!   yet); admission checks are not run; `borrowWithinCohort` is `borrowWithinParent`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::kueue::{ClusterQueue, Cohort, FairSharing, ResourceGroup, cluster_queue_name, cohort_name};
use crate::convert::groups::created;
use crate::convert::quantity;
use crate::convert::queues::{amount, selected_namespaces};
use crate::engine::queues::{QueuePreemption, QueueSpec, QueueingStrategy, ReclaimPolicy, ResourceRule, WithinQueue};
use crate::engine::resources::ResourceNames;

/// One resource's quotas over all flavors; None is unlimited.
#[derive(Clone, Copy, Debug, Default)]
struct Pooled {
    nominal: i64,
    borrowing: Option<i64>,
    lending: Option<i64>,
}

/// The quotas of `groups` per resource name, flavors pooled. Returns the flavor names when
/// there is more than one, for the note.
fn pooled(
    groups: &[ResourceGroup],
    names: &mut ResourceNames,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, Pooled>, Vec<String>) {
    let mut out: BTreeMap<String, Pooled> = BTreeMap::new();
    let mut flavors: BTreeSet<String> = BTreeSet::new();
    for group in groups {
        for flavor in &group.flavors {
            flavors.insert(flavor.name.clone());
            for r in &flavor.resources {
                let mut read = |field: &str, q: &Option<Quantity>| -> Option<i64> {
                    let q = q.as_ref()?;
                    match amount(names, &r.name, &q.0) {
                        Ok((_, v)) => Some(v),
                        Err(why) => {
                            problems.push(format!("flavor {} {field}: {why}", flavor.name));
                            None
                        }
                    }
                };
                let nominal = read("nominalQuota", &r.nominal_quota).unwrap_or(0);
                let borrowing = read("borrowingLimit", &r.borrowing_limit);
                let lending = read("lendingLimit", &r.lending_limit);
                match out.get_mut(&r.name) {
                    None => {
                        out.insert(r.name.clone(), Pooled { nominal, borrowing, lending });
                    }
                    Some(p) => {
                        // Another flavor of the same resource: pooled; a flavor without a
                        // limit leaves the pool without one.
                        p.nominal += nominal;
                        p.borrowing = p.borrowing.zip(borrowing).map(|(a, b)| a + b);
                        p.lending = p.lending.zip(lending).map(|(a, b)| a + b);
                    }
                }
            }
        }
    }
    let many = if flavors.len() > 1 { flavors.into_iter().collect() } else { Vec::new() };
    (out, many)
}

fn weight(fair: &Option<FairSharing>, problems: &mut Vec<String>) -> u64 {
    let Some(w) = fair.as_ref().and_then(|f| f.weight.as_ref()) else { return 1000 };
    match quantity::parse_milli(&w.0) {
        Ok(milli) if milli >= 0 => milli as u64,
        Ok(_) => {
            problems.push("fairSharing.weight is negative".into());
            1000
        }
        Err(e) => {
            problems.push(format!("fairSharing.weight: {e}"));
            1000
        }
    }
}

fn flavor_note(flavors: &[String]) -> Option<String> {
    (!flavors.is_empty()).then(|| {
        format!(
            "flavors {} are counted as one pool of each resource: Muster does not tell flavors apart yet",
            flavors.join(", ")
        )
    })
}

fn preemption(cq: &ClusterQueue, problems: &mut Vec<String>) -> QueuePreemption {
    let p = cq.spec.fields.preemption.clone().unwrap_or_default();
    let reclaim = match p.reclaim_within_cohort.as_deref() {
        None | Some("Never") => ReclaimPolicy::Never,
        Some("LowerPriority") => ReclaimPolicy::LowerPriority,
        Some("Any") => ReclaimPolicy::Any,
        Some(other) => {
            problems.push(format!("preemption.reclaimWithinCohort: unknown policy {other:?}"));
            ReclaimPolicy::Never
        }
    };
    let within = match p.within_cluster_queue.as_deref() {
        None | Some("Never") => WithinQueue::Never,
        Some("LowerPriority") => WithinQueue::LowerPriority,
        Some("LowerOrNewerEqualPriority") => WithinQueue::LowerOrNewerEqualPriority,
        Some(other) => {
            problems.push(format!("preemption.withinClusterQueue: unknown policy {other:?}"));
            WithinQueue::Never
        }
    };
    let borrow = p.borrow_within_cohort.as_ref();
    let policy = borrow.and_then(|b| b.get("policy")?.as_str().map(str::to_string));
    let threshold = borrow.and_then(|b| b.get("maxPriorityThreshold")?.as_i64()).map(|t| t as i32);
    let borrow_within_parent = match policy.as_deref() {
        None | Some("Never") => None,
        Some("LowerPriority") => Some(threshold),
        Some(other) => {
            problems.push(format!("preemption.borrowWithinCohort.policy: unknown policy {other:?}"));
            None
        }
    };
    QueuePreemption { reclaim, within, borrow_within_parent, ..QueuePreemption::default() }
}

/// Cohort objects by name: the object, its own pooled quotas, and its problems.
type Cohorts<'a> = HashMap<String, (&'a Cohort, BTreeMap<String, Pooled>, Vec<String>)>;

/// Kueue's ClusterQueues and cohorts as engine queue specs: one leaf per ClusterQueue, one
/// parent per cohort. `namespaces` evaluate the ClusterQueues' namespace selectors.
pub fn kueue_queue_specs(
    cluster_queues: &[&ClusterQueue],
    cohorts: &[&Cohort],
    namespaces: &[&Namespace],
    names: &mut ResourceNames,
) -> Vec<QueueSpec> {
    let mut specs = Vec::new();
    // Per cohort: its own pooled quotas and the nominal quotas of its ClusterQueues.
    let mut cohort_children: HashMap<String, Vec<BTreeMap<String, Pooled>>> = HashMap::new();
    let mut cohort_parent: BTreeMap<String, Option<String>> = BTreeMap::new();
    for cq in cluster_queues {
        let (spec, cohort, quotas) = cluster_queue_spec(cq, namespaces, names);
        if let Some(c) = cohort {
            cohort_parent.entry(c.clone()).or_insert(None);
            cohort_children.entry(c).or_default().push(quotas);
        }
        specs.push(spec);
    }
    let own = own_cohorts(cohorts, names, &mut cohort_parent);
    let children_of = |c: &str| -> Vec<String> {
        cohort_parent.iter().filter(|(_, p)| p.as_deref() == Some(c)).map(|(n, _)| n.clone()).collect()
    };
    let tree = CohortTree { own: &own, queues: &cohort_children, children_of: &children_of };
    for (name, parent) in &cohort_parent {
        specs.push(cohort_spec(name, parent.as_deref(), &tree, names));
    }
    specs
}

/// One ClusterQueue as a leaf spec, with the cohort it names (if any) and its pooled quotas,
/// which its cohort's quota adds up.
fn cluster_queue_spec(
    cq: &ClusterQueue,
    namespaces: &[&Namespace],
    names: &mut ResourceNames,
) -> (QueueSpec, Option<String>, BTreeMap<String, Pooled>) {
    let fields = &cq.spec.fields;
    let name = cq.metadata.name.as_deref().unwrap_or_default();
    let mut spec = QueueSpec::new(&cluster_queue_name(name));
    spec.created = created(&cq.metadata);
    spec.origin = Some(format!("Kueue's ClusterQueue {name}"));
    let cohort = fields.cohort_name.clone().filter(|c| !c.is_empty());
    spec.parent = cohort.as_deref().map(cohort_name);
    let mut problems = Vec::new();
    let (quotas, flavors) = pooled(&fields.resource_groups, names, &mut problems);
    spec.notes.extend(flavor_note(&flavors));
    let weight_milli = weight(&fields.fair_sharing, &mut problems);
    for (key, q) in &quotas {
        let limit = match (&cohort, q.borrowing) {
            // Without a cohort there is nobody to borrow from.
            (None, _) => Some(q.nominal),
            (Some(_), Some(b)) => Some(q.nominal + b),
            (Some(_), None) => None,
        };
        let rule = ResourceRule { quota: Some(q.nominal), weight_milli, limit, lending_limit: q.lending };
        spec.resources.push((names.intern(key), rule));
    }
    spec.preemption = preemption(cq, &mut problems);
    spec.queueing = match fields.queueing_strategy.as_deref() {
        None | Some("BestEffortFIFO") => Some(QueueingStrategy::BestEffortFifo),
        Some("StrictFIFO") => Some(QueueingStrategy::StrictFifo),
        Some(other) => {
            problems.push(format!("queueingStrategy: unknown strategy {other:?}"));
            None
        }
    };
    spec.stopped = matches!(fields.stop_policy.as_deref(), Some("Hold" | "HoldAndDrain"));
    admitted_namespaces(cq, namespaces, &mut spec, &mut problems);
    if !fields.admission_checks.is_empty() || fields.admission_checks_strategy.is_some() {
        spec.notes.push("admission checks are not run by Muster: gangs are admitted without them".into());
    }
    if !problems.is_empty() {
        spec.problem = Some(problems.join("; "));
    }
    (spec, cohort, quotas)
}

/// The namespaces a ClusterQueue's namespace selector admits, into `spec`: none when it
/// is unset (as in Kueue), every one (None) when it is empty, else those listed that match.
fn admitted_namespaces(cq: &ClusterQueue, namespaces: &[&Namespace], spec: &mut QueueSpec, problems: &mut Vec<String>) {
    match &cq.spec.fields.namespace_selector {
        None => {
            spec.notes.push("namespaceSelector is unset: as in Kueue, no namespace may submit to it".into());
            spec.namespaces = Some(Vec::new());
        }
        Some(selector) => {
            let allowed = selected_namespaces(selector, namespaces, problems);
            // An empty selector admits every namespace, even one not yet listed.
            let everything = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && selector.match_expressions.as_ref().is_none_or(|e| e.is_empty());
            spec.namespaces = (!everything).then_some(allowed);
        }
    }
}

/// Cohort objects: their own quotas, weights and parents; each one's parent (and the
/// parent's name, as a cohort) is noted in `cohort_parent`.
fn own_cohorts<'a>(
    cohorts: &[&'a Cohort],
    names: &mut ResourceNames,
    cohort_parent: &mut BTreeMap<String, Option<String>>,
) -> Cohorts<'a> {
    let mut own: Cohorts<'_> = HashMap::new();
    for cohort in cohorts {
        let name = cohort.metadata.name.clone().unwrap_or_default();
        let parent = cohort.spec.fields.parent_name.clone().filter(|p| !p.is_empty());
        if let Some(p) = &parent {
            cohort_parent.entry(p.clone()).or_insert(None);
        }
        cohort_parent.insert(name.clone(), parent);
        let mut problems = Vec::new();
        let (quotas, _) = pooled(&cohort.spec.fields.resource_groups, names, &mut problems);
        own.insert(name, (cohort, quotas, problems));
    }
    own
}

/// The cohorts as a tree: their objects, their ClusterQueues' quotas, and each one's
/// child cohorts.
struct CohortTree<'t, 'a> {
    own: &'t Cohorts<'a>,
    /// Per cohort, the pooled quotas of its ClusterQueues.
    queues: &'t HashMap<String, Vec<BTreeMap<String, Pooled>>>,
    children_of: &'t dyn Fn(&str) -> Vec<String>,
}

impl CohortTree<'_, '_> {
    /// A cohort's quota: its own plus its children's, down the tree (a cycle is the tree's
    /// problem to report; here it stops the sum).
    fn total(&self, c: &str, seen: &mut BTreeSet<String>) -> BTreeMap<String, i64> {
        let mut sum: BTreeMap<String, i64> = BTreeMap::new();
        if !seen.insert(c.to_string()) {
            return sum;
        }
        let parts = self.own.get(c).map(|o| vec![o.1.clone()]).unwrap_or_default();
        for quotas in parts.iter().chain(self.queues.get(c).into_iter().flatten()) {
            for (key, q) in quotas {
                *sum.entry(key.clone()).or_default() += q.nominal;
            }
        }
        for child in (self.children_of)(c) {
            for (key, v) in self.total(&child, seen) {
                *sum.entry(key).or_default() += v;
            }
        }
        seen.remove(c);
        sum
    }
}

/// One cohort as a parent spec: its quota the sum down its tree, its limit that sum plus
/// its own borrowing limit (when it has a parent to borrow from).
fn cohort_spec(name: &str, parent: Option<&str>, tree: &CohortTree<'_, '_>, names: &mut ResourceNames) -> QueueSpec {
    let mut spec = QueueSpec::new(&cohort_name(name));
    spec.parent = parent.map(cohort_name);
    let mut problems = Vec::new();
    let mut weight_milli = 1000;
    let mut quotas = BTreeMap::new();
    match tree.own.get(name) {
        Some((cohort, q, own_problems)) => {
            spec.created = created(&cohort.metadata);
            spec.origin = Some(format!("Kueue's Cohort {name}"));
            problems.extend(own_problems.iter().cloned());
            weight_milli = weight(&cohort.spec.fields.fair_sharing, &mut problems);
            quotas = q.clone();
        }
        None => spec.origin = Some(format!("Kueue's cohort {name}, named by its ClusterQueues")),
    }
    for (key, sum) in tree.total(name, &mut BTreeSet::new()) {
        let q = quotas.get(&key).copied().unwrap_or_default();
        let limit = match (parent, q.borrowing) {
            (Some(_), Some(b)) => Some(sum + b),
            _ => None,
        };
        let rule = ResourceRule { quota: Some(sum), weight_milli, limit, lending_limit: q.lending };
        spec.resources.push((names.intern(&key), rule));
    }
    // Reclaim between cohorts is decided by the ClusterQueue that reclaims.
    spec.preemption.reclaim = ReclaimPolicy::Any;
    if !problems.is_empty() {
        spec.problem = Some(problems.join("; "));
    }
    spec
}

#[cfg(test)]
mod tests;
