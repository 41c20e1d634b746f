//! The safety net: no gang holds GPUs half-started for long.
//!
//! Pure over the cache's objects and the time, with a little memory of its own (which gangs
//! have been Ready, since when one is broken). Each cycle it returns the gangs to evict
//! whole, with the reason:
//! - **BindFailed**: fewer than `minMember` pods bound, none of it being bound by this
//!   scheduler, and the rest cannot be placed now (a binding broke, or the scheduler
//!   restarted mid-binding and the gang cannot be finished);
//! - **PodsReadyTimeout**: bound, but fewer than `minMember` pods Ready within the
//!   PodGroup's `podsReadyTimeoutSeconds` (else the configuration's default) of binding;
//! - **GangBroken**: it was Ready (seen here, or persisted in its PodGroup's status by an
//!   earlier leader), then fell below `minMember` live pods (a pod failed or was deleted,
//!   its node was lost) for longer than the configured grace period;
//! - **MaxRunExceeded**: its pods have run longer than its Muster PodGroup's
//!   `maxRunSeconds` (the bound timed backfill counted on).

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::config::Config;
use crate::convert::assemble::ClusterView;
use crate::convert::groups::GroupSpec;
use crate::engine::model::{GangKey, GangKind, PodKey};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SafetyEvictionReason {
    BindFailed,
    PodsReadyTimeout,
    GangBroken,
    MaxRunExceeded,
}

impl SafetyEvictionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SafetyEvictionReason::BindFailed => "BindFailed",
            SafetyEvictionReason::PodsReadyTimeout => "PodsReadyTimeout",
            SafetyEvictionReason::GangBroken => "GangBroken",
            SafetyEvictionReason::MaxRunExceeded => "MaxRunExceeded",
        }
    }
}

/// A gang to evict whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetyEviction {
    pub gang: GangKey,
    pub pods: Vec<PodKey>,
    pub reason: SafetyEvictionReason,
    pub message: String,
}

#[derive(Default)]
pub struct SafetyNet {
    /// Gangs seen with at least minMember pods Ready.
    ready: HashSet<GangKey>,
    /// Since when (seconds) a once-Ready gang has had fewer than minMember live pods.
    broken_since: HashMap<GangKey, i64>,
    /// The earliest time a timeout found in the last check falls due.
    due: Option<i64>,
}

struct GroupRules {
    min_member: usize,
    pods_ready_timeout: i64,
    /// Its PodGroup's status says it was Ready (durable across restarts).
    was_ready: bool,
    /// Muster's `maxRunSeconds`: how long its pods may run.
    max_run: Option<i64>,
}

#[derive(Default)]
struct GangPods {
    /// Bound, not ending, not terminal.
    live: Vec<PodKey>,
    ready: usize,
    succeeded: usize,
    /// Bound pods that failed: with the live and succeeded ones, they show the gang was whole.
    failed: usize,
    pending: usize,
    /// When the last live pod was bound (PodScheduled=True), in seconds.
    bound_at: i64,
    /// When the first live pod started (its startTime, else when it was bound).
    started_at: Option<i64>,
}

fn condition_true(pod: &Pod, kind: &str) -> Option<i64> {
    let c = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == kind && c.status == "True")?;
    Some(c.last_transition_time.as_ref().map_or(0, |t| t.0.as_second()))
}

impl SafetyNet {
    /// Gangs to evict now, from the PodGroups (`groups`) and Muster's pods by gang
    /// (`members`, from `groups::members`). `busy` gangs (being bound, placed in this very
    /// cycle, or being evicted) are left alone; `now` is in seconds.
    pub fn check(
        &mut self,
        objects: &ClusterView<'_>,
        groups: &HashMap<GangKey, GroupSpec>,
        members: &HashMap<GangKey, Vec<&Pod>>,
        config: &Config,
        busy: &HashSet<GangKey>,
        now: i64,
    ) -> Vec<SafetyEviction> {
        let rules = group_rules(groups, config);
        let gangs = count_pods(objects, &rules, members, now);
        self.ready.retain(|k| gangs.contains_key(k));
        self.broken_since.retain(|k, _| gangs.contains_key(k));

        let mut evictions = Vec::new();
        let mut due: Option<i64> = None;
        let mut sorted: Vec<_> = gangs.into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (gang, pods) in sorted {
            let rule = &rules[&gang];
            if pods.ready + pods.succeeded >= rule.min_member {
                self.ready.insert(gang.clone());
            }
            if pods.live.is_empty() {
                // Nothing of it runs: whatever it was, it starts afresh.
                self.ready.remove(&gang);
                self.broken_since.remove(&gang);
                continue;
            }
            if busy.contains(&gang) {
                continue;
            }
            let grace = config.gang_broken_grace_seconds as i64;
            evictions.extend(self.judge(&gang, &pods, rule, grace, now, &mut due));
        }
        for eviction in &evictions {
            self.ready.remove(&eviction.gang);
            self.broken_since.remove(&eviction.gang);
        }
        self.due = due;
        evictions
    }

    /// Whether one gang with pods running (and not busy) is to be evicted now, and why: it
    /// ran past its maxRunSeconds, it is whole but not Ready in time, it is partly bound and
    /// never was whole, or it fell below its minimum for longer than `grace`. When each
    /// timeout it is under falls due is noted in `due` (the earliest kept).
    fn judge(
        &mut self,
        gang: &GangKey,
        pods: &GangPods,
        rule: &GroupRules,
        grace: i64,
        now: i64,
        due: &mut Option<i64>,
    ) -> Option<SafetyEviction> {
        let mut note_due = |at: i64| *due = Some(due.map_or(at, |d| d.min(at)));
        let min = rule.min_member;
        let alive = pods.live.len() + pods.succeeded;
        let evict =
            |reason, message: String| SafetyEviction { gang: gang.clone(), pods: pods.live.clone(), reason, message };
        if let (Some(max), Some(started)) = (rule.max_run, pods.started_at) {
            note_due(started.saturating_add(max));
            if now - started >= max {
                return Some(evict(
                    SafetyEvictionReason::MaxRunExceeded,
                    format!("{gang} has run {}s, its maxRunSeconds is {max}; evicting it whole", now - started),
                ));
            }
        }
        if alive >= min {
            self.broken_since.remove(gang);
            if self.ready.contains(gang) {
                return None;
            }
            note_due(pods.bound_at + rule.pods_ready_timeout);
            if now - pods.bound_at >= rule.pods_ready_timeout {
                return Some(evict(
                    SafetyEvictionReason::PodsReadyTimeout,
                    format!(
                        "{gang}: only {} of {min} pods Ready {}s after binding (podsReadyTimeoutSeconds {}); evicting it whole",
                        pods.ready + pods.succeeded,
                        now - pods.bound_at,
                        rule.pods_ready_timeout
                    ),
                ));
            }
            return None;
        }
        // Below the minimum. A gang that was whole once (Ready, seen here or persisted in
        // its PodGroup's status by an earlier leader, or as many pods bound, failed or
        // done as it needs) lost pods while running: give it the grace period. One that
        // never was is partly bound: evict it now.
        let was_whole = self.ready.contains(gang)
            || rule.was_ready
            || self.broken_since.contains_key(gang)
            || pods.live.len() + pods.succeeded + pods.failed >= min;
        if !was_whole {
            return Some(evict(
                SafetyEvictionReason::BindFailed,
                format!(
                    "{gang} is partly bound ({} of {min} pods) and the rest cannot be placed now; evicting it whole so it is placed together",
                    pods.live.len()
                ),
            ));
        }
        let since = *self.broken_since.entry(gang.clone()).or_insert(now);
        note_due(since + grace);
        (now - since >= grace).then(|| {
            evict(
                SafetyEvictionReason::GangBroken,
                format!(
                    "{gang} fell below its minMember: {alive} of {min} pods alive for {}s; evicting it whole so it restarts together",
                    now - since
                ),
            )
        })
    }

    /// When the next timeout seen by the last check falls due (seconds), so the loop can
    /// wake for it.
    pub fn next_due(&self) -> Option<i64> {
        self.due
    }
}

/// The pods of every gang with a PodGroup (gangs of one left out), counted by state:
/// live (with when they were bound and started), Ready, succeeded, failed, pending.
fn count_pods(
    objects: &ClusterView<'_>,
    rules: &HashMap<GangKey, GroupRules>,
    members: &HashMap<GangKey, Vec<&Pod>>,
    now: i64,
) -> HashMap<GangKey, GangPods> {
    let mut gangs: HashMap<GangKey, GangPods> = HashMap::new();
    let groups_pods = members.iter().filter(|(key, _)| key.kind != GangKind::Single && rules.contains_key(*key));
    for (pod, key) in groups_pods.flat_map(|(key, pods)| pods.iter().map(move |pod| (*pod, key))) {
        let entry = gangs.entry(key.clone()).or_default();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        let bound = objects.node_of(pod).is_some();
        match phase {
            "Succeeded" => entry.succeeded += 1,
            "Failed" if bound => entry.failed += 1,
            "Failed" => {}
            _ if !bound => entry.pending += 1,
            _ if pod.metadata.deletion_timestamp.is_some() => {}
            _ => {
                entry.live.push(PodKey {
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    name: pod.metadata.name.clone().unwrap_or_default(),
                });
                if condition_true(pod, "Ready").is_some() {
                    entry.ready += 1;
                }
                let scheduled = condition_true(pod, "PodScheduled").unwrap_or(now);
                entry.bound_at = entry.bound_at.max(scheduled);
                let started =
                    pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map_or(scheduled, |t| t.0.as_second());
                entry.started_at = Some(entry.started_at.map_or(started, |s| s.min(started)));
            }
        }
    }
    gangs
}

fn group_rules(groups: &HashMap<GangKey, GroupSpec>, config: &Config) -> HashMap<GangKey, GroupRules> {
    let default_timeout = config.pods_ready_timeout_seconds as i64;
    groups
        .iter()
        .map(|(key, spec)| {
            let rules = GroupRules {
                min_member: spec.min_member,
                pods_ready_timeout: spec.pods_ready_timeout_seconds.unwrap_or(default_timeout),
                was_ready: spec.was_ready,
                // Only Muster's own field: a workload's deadline is its controller's to keep.
                max_run: spec.max_run_seconds.filter(|_| key.kind == GangKind::Muster),
            };
            (key.clone(), rules)
        })
        .collect()
}
