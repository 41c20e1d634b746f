//! Assembles the engine's snapshot from the cluster's objects: nodes with what bound pods
//! use, and Muster's pending pods grouped into gangs from the three PodGroup sources.

mod gang;
mod kept;
mod memo;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::journal::Seen;
use super::status::Rejection;
pub use super::view::{ClusterObjects, ClusterView, MUSTER_GROUP_LABEL, PLUGIN_GROUP_LABEL, gang_key, pod_key};
use crate::engine::model::{GangKey, PodKey, Snapshot};
use kept::Kept;
use memo::Conversions;

/// A PodGroup of any kind, as reported in output and status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    pub key: GangKey,
    pub min_member: usize,
    /// Its pods already bound to a node.
    pub bound: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Assembled {
    pub snapshot: Snapshot,
    /// Every PodGroup that exists, of any kind, sorted.
    pub groups: Vec<GroupSummary>,
    /// Muster's pending pods the engine cannot consider, with why (bad requests, what is
    /// not honoured yet).
    pub rejected_pods: BTreeMap<PodKey, Rejection>,
    /// Objects left out, with why (a node with an unreadable quantity).
    pub problems: Vec<String>,
    /// Which gang each of Muster's pending pods belongs to.
    pub gang_of: Arc<HashMap<PodKey, GangKey>>,
    /// Every PodGroup, read once, for whatever else the cycle decides.
    pub specs: Arc<HashMap<GangKey, super::groups::GroupSpec>>,
}

/// What is kept from one snapshot to the next: conversions per object and resourceVersion,
/// and what the last snapshot was made of, brought up to date by the next when the view
/// says what changed since.
#[derive(Default)]
pub struct Memo {
    conversions: Conversions,
    kept: Option<Kept>,
}

impl Memo {
    /// A memo for the configuration's topology levels and limits.
    pub fn new(config: &crate::config::Config) -> Memo {
        Memo { conversions: Conversions::new(config), kept: None }
    }

    /// Where the last snapshot stands in the pods' and nodes' journals: what a view taken
    /// for the next one reports changes since.
    pub fn seen(&self) -> Seen {
        self.kept.as_ref().map(Kept::seen).unwrap_or_default()
    }

    /// How many snapshots were made afresh rather than brought up to date.
    pub fn rebuilds(&self) -> u64 {
        self.conversions.rebuilds
    }
}

/// Builds the snapshot for the configuration's scheduler, as of `now` (seconds since the
/// Unix epoch), converting every object afresh.
pub fn assemble(objects: &ClusterObjects, config: &crate::config::Config, now: i64) -> Assembled {
    assemble_view(&objects.view(), &config.scheduler_name, now, &mut Memo::new(config))
}

/// Builds the snapshot from a view, converting only objects `memo` has not seen as they
/// are; when the view says what changed since the last snapshot `memo` made, only that is
/// made again (`kept`).
pub fn assemble_view(objects: &ClusterView<'_>, scheduler_name: &str, now: i64, memo: &mut Memo) -> Assembled {
    let conversions = &mut memo.conversions;
    let kept = match memo.kept.take() {
        Some(kept) => kept.update(objects, scheduler_name, conversions),
        None => None,
    };
    let kept = kept.unwrap_or_else(|| Kept::build(objects, scheduler_name, conversions));
    let out = if objects.versions.is_some() {
        let out = output(&kept, now, conversions);
        memo.kept = Some(kept);
        out
    } else {
        // Nothing can be brought up to date from a view that does not say what changed:
        // the snapshot takes what was made rather than a copy.
        output_owned(kept, now, conversions)
    };
    // After the memo let go of deleted objects: what holds a value now is what is live.
    if conversions.prune_names() {
        // What was kept holds ids of the old table.
        memo.kept = None;
    }
    out
}

/// The snapshot, and what else the cycle reads, from what is kept.
fn output(kept: &Kept, now: i64, memo: &Conversions) -> Assembled {
    let base = &kept.base;
    let snapshot = Snapshot {
        now,
        resources: memo.names.clone(),
        nodes: Arc::clone(&base.nodes),
        bound: Arc::clone(&base.bound),
        volume_limits: Arc::clone(&base.volume_limits),
        gangs: kept.parts.values().filter_map(|p| p.pending.clone()).collect(),
        dra: base.dra.clone(),
        topology: base.topology.clone(),
        queues: base.queues.clone(),
        running: kept.parts.values().filter_map(|p| p.running.clone()).collect(),
        reservations: Vec::new(),
        endings: kept.parts.values().flat_map(|p| p.endings.iter().cloned()).collect(),
    };
    finish(snapshot, groups(kept), kept, memo)
}

/// The same, taking what was made.
fn output_owned(mut kept: Kept, now: i64, memo: &Conversions) -> Assembled {
    let groups = groups(&kept);
    let (mut gangs, mut running, mut endings) = (Vec::with_capacity(kept.parts.len()), Vec::new(), Vec::new());
    for part in std::mem::take(&mut kept.parts).into_values() {
        gangs.extend(part.pending);
        running.extend(part.running);
        endings.extend(part.endings);
    }
    let snapshot = Snapshot {
        now,
        resources: memo.names.clone(),
        nodes: Arc::clone(&kept.base.nodes),
        bound: Arc::clone(&kept.base.bound),
        volume_limits: Arc::clone(&kept.base.volume_limits),
        gangs,
        dra: std::mem::take(&mut kept.base.dra),
        topology: std::mem::take(&mut kept.base.topology),
        queues: kept.base.queues.clone(),
        running,
        reservations: Vec::new(),
        endings,
    };
    finish(snapshot, groups, &kept, memo)
}

/// Every PodGroup, with its pods bound, sorted.
fn groups(kept: &Kept) -> Vec<GroupSummary> {
    let mut groups: Vec<GroupSummary> = kept
        .base
        .facts
        .iter()
        .map(|(key, f)| GroupSummary {
            bound: kept.parts.get(key).map_or(0, |p| p.bound),
            key: key.clone(),
            min_member: f.min_member,
        })
        .collect();
    groups
        .sort_by(|a, b| (&a.key.namespace, &a.key.name, a.key.kind).cmp(&(&b.key.namespace, &b.key.name, b.key.kind)));
    groups
}

fn finish(mut snapshot: Snapshot, groups: Vec<GroupSummary>, kept: &Kept, memo: &Conversions) -> Assembled {
    snapshot.queues.name_keys(&memo.names);
    Assembled {
        snapshot,
        groups,
        rejected_pods: kept.rejected.clone(),
        problems: kept.base.problems.iter().chain(kept.pod_problems.values()).cloned().collect(),
        gang_of: kept.gang_of.clone(),
        specs: kept.base.facts.clone(),
    }
}

#[cfg(test)]
mod tests;
