//! What a cycle decides besides placements, computed from the cache and the engine's
//! outcome without I/O: PodGroup statuses, waiting times of gangs now Running, and the
//! CEL selector results the engine will need.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::api::queue::{Queue, QueueGangCounts};
use crate::convert::assemble::ClusterView;
use crate::convert::groups::GroupSpec;
use crate::convert::status::{GroupFacts, initially_scheduled, k8s_time, podgroup_status};
use crate::engine::admission::QueueState;
use crate::engine::admission::report::{QueueReport, report as queue_report};
use crate::engine::dra::model::ClaimNeed;
use crate::engine::dra::selectors::SelectorCache;
use crate::engine::model::{GangKey, GangKind, Snapshot};
use crate::engine::preempt::Room;
use crate::engine::reason::{WaitReason, Waiting};
use crate::figures::queue_status::queue_status;
use crate::k8s::store::cache::Store;
use crate::k8s::write::writer::Write;

/// When a waiting gang should be looked at again without any event (unix seconds): when it
/// becomes old enough for a backfill reservation (waiting for room, under Backfill), or when
/// its preemption delay or its victims' minimum runtime ends.
pub fn looks_again_at(waiting: &Waiting, created: i64, reserve_after: Option<i64>, unix: i64) -> Option<i64> {
    let due = match &waiting.reason {
        WaitReason::DoesNotFit { .. } => created.saturating_add(reserve_after?),
        WaitReason::Room {
            room: Room::InPreemptionDelay { until } | Room::ProtectedByMinRuntime { until }, ..
        } => *until,
        _ => return None,
    };
    (due > unix).then_some(due)
}

/// PodGroup statuses to write: Muster's PodGroups get phase, counts and conditions;
/// Kubernetes' PodGroups get PodGroupInitiallyScheduled once placed. Only changed ones.
pub fn group_statuses(
    view: &ClusterView<'_>,
    specs: &HashMap<GangKey, GroupSpec>,
    members: &HashMap<GangKey, Vec<&Pod>>,
    waiting: &HashMap<GangKey, String>,
    last_eviction: &HashMap<GangKey, (&'static str, String, i64)>,
    now: i64,
) -> Vec<Write> {
    let time = k8s_time(now);
    let key = |kind, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| GangKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    };
    // A PodGroup whose pods are all another scheduler's (another Muster, under another
    // schedulerName) is that scheduler's to describe: writing "0 pods" over its status
    // would erase what it says (PodsReady, which a restarted scheduler reads back).
    // Found once per cycle, and only when some group holds none of this scheduler's pods.
    let mut others: Option<HashSet<GangKey>> = None;
    let mut writes = Vec::new();
    for group in &view.muster_groups {
        let gang = key(GangKind::Muster, &group.metadata);
        if !members.contains_key(&gang) {
            let others = others.get_or_insert_with(|| {
                view.pods
                    .iter()
                    .map(|p| crate::convert::view::gang_key(p))
                    .filter(|g| !members.contains_key(g))
                    .collect()
            });
            if others.contains(&gang) {
                continue;
            }
        }
        let pods = members.get(&gang).map(Vec::as_slice).unwrap_or_default();
        let facts = GroupFacts {
            waiting: waiting.get(&gang).map(String::as_str),
            evicted: last_eviction.get(&gang).map(|(r, m, at)| (*r, m.as_str(), *at)),
        };
        let status = podgroup_status(group, pods, &facts, &time);
        if group.status.as_ref() != Some(&status) {
            writes.push(Write::MusterGroup { namespace: gang.namespace, name: gang.name, status });
        }
    }
    for group in &view.kubernetes_groups {
        let gang = key(GangKind::Kubernetes, &group.metadata);
        let min = specs.get(&gang).map_or(1, |spec| spec.min_member);
        // Only pods the API server shows bound, not assumed or terminating ones.
        let really_bound = |p: &&&Pod| {
            p.metadata.deletion_timestamp.is_none() && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        };
        let bound = members.get(&gang).map_or(0, |pods| pods.iter().filter(really_bound).count());
        if bound >= min
            && let Some(conditions) = initially_scheduled(group, &time)
        {
            writes.push(Write::KubernetesGroup { namespace: gang.namespace, name: gang.name, conditions });
        }
    }
    writes
}

/// Of the gangs awaited (bound, not yet Running), those that now have `minMember` pods
/// Running, with their creation time; the others stay awaited, and gangs gone are dropped.
pub fn now_running(members: &HashMap<GangKey, Vec<&Pod>>, awaiting: &mut HashMap<GangKey, (i64, usize)>) -> Vec<i64> {
    let mut running = Vec::new();
    awaiting.retain(|gang, (created, min_member)| {
        let Some(pods) = members.get(gang) else { return false };
        let up = pods
            .iter()
            .filter(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata.deletion_timestamp.is_none()
            })
            .count();
        if up >= *min_member {
            running.push(*created);
            false
        } else {
            true
        }
    });
    running
}

/// Evaluates, through the engine's selector cache, the CEL selectors that pending pods'
/// claims need on every device, so that their cost is measured here, in the shell, and the
/// engine's cycle finds every result cached. Results are kept per device revision, so a
/// cycle evaluates only devices and selectors it has not seen.
pub fn warm_selectors(snapshot: &Snapshot, selectors: &mut SelectorCache) {
    selectors.at(snapshot.now);
    if snapshot.dra.devices.is_empty() {
        return;
    }
    let mut seen: HashSet<(String, &[String])> = HashSet::new();
    for gang in &snapshot.gangs {
        for pod in &gang.pods {
            let Some(devices) = pod.devices.as_ref() else { continue };
            for claim in &devices.claims {
                let ClaimNeed::Allocate(spec) = &claim.need else { continue };
                for sub in spec.requests.iter().flat_map(|r| &r.alternatives) {
                    if !seen.insert((sub.class.clone(), sub.selectors.as_slice())) {
                        continue;
                    }
                    let Some(class) = snapshot.dra.classes.get(&sub.class) else { continue };
                    let ids: Vec<_> = class.selectors.iter().chain(&sub.selectors).map(|e| selectors.id(e)).collect();
                    for device in &snapshot.dra.devices {
                        // As the allocator does: stop at the first selector that rejects.
                        for &id in &ids {
                            if selectors.matches(id, device) != Ok(true) {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Queue statuses to write, and the reports they come from (for the metrics): one per
/// Queue object, from what queues hold and deserve after the cycle.
pub fn queue_statuses(
    snapshot: &Snapshot,
    state: &QueueState,
    objects: &Store<Queue>,
    now: i64,
) -> (Vec<QueueReport>, Vec<Write>) {
    let reports = queue_report(snapshot, state);
    let now = k8s_time(now);
    let mut writes = Vec::new();
    for report in &reports {
        // The implicit default has no object to write to.
        let Some(object) = objects.get("", &report.name) else { continue };
        let (pending, running) = (report.pending_gangs as i32, report.running_gangs as i32);
        let previous = object.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        let status = queue_status(report, &snapshot.resources, QueueGangCounts { pending, running }, previous, &now);
        if object.status.as_ref() != Some(&status) {
            writes.push(Write::Queue { name: report.name.clone(), status });
        }
    }
    (reports, writes)
}

/// Logs what the queues' conversion noted (an imported rule kept as is, something an
/// imported queue sets that Muster does not run) and what is wrong with a queue, once each.
pub fn log_queue_notes(tree: &crate::engine::queues::QueueTree, said: &mut HashSet<String>) {
    for queue in &tree.queues {
        let name = &queue.spec.name;
        for note in &queue.spec.notes {
            if said.insert(format!("{name}: {note}")) {
                tracing::info!(queue = %name, origin = queue.spec.origin.as_deref().unwrap_or("Muster"), "{note}");
            }
        }
        if let Some(problem) = &queue.problem
            && said.insert(format!("{name}: problem: {problem}"))
        {
            tracing::warn!(queue = %name, "queue is invalid; its gangs wait: {problem}");
        }
    }
}

/// Logs what is wrong with a quota key on devices (its DeviceClass is missing, a selector
/// fails), once each: the key counts no device until it is fixed.
pub fn log_device_key_problems(state: &QueueState, said: &mut HashSet<String>) {
    for problem in &state.devices.problems {
        if said.insert(format!("device key: {problem}")) {
            tracing::warn!("a quota key on devices counts none of them: {problem}");
        }
    }
}

#[cfg(test)]
mod wake_tests {
    use super::*;

    #[test]
    fn a_gang_waiting_on_a_clock_is_looked_at_again_when_it_runs_out() {
        let gang = GangKey { kind: GangKind::Muster, namespace: "ml".into(), name: "train".into() };
        let waiting = |reason| Waiting { gang: gang.clone(), reason };
        let delay = waiting(WaitReason::Room {
            shortfall: Box::new(WaitReason::Blocked("full".into())),
            room: Room::InPreemptionDelay { until: 1_300 },
        });
        assert_eq!(looks_again_at(&delay, 1_000, None, 1_200), Some(1_300));
        assert_eq!(looks_again_at(&delay, 1_000, None, 1_300), None, "already over");
        let protected = waiting(WaitReason::Room {
            shortfall: Box::new(WaitReason::Blocked("full".into())),
            room: Room::ProtectedByMinRuntime { until: 1_900 },
        });
        assert_eq!(looks_again_at(&protected, 1_000, Some(60), 1_200), Some(1_900));
        let blocked = waiting(WaitReason::Blocked("its PodGroup does not exist".into()));
        assert_eq!(looks_again_at(&blocked, 1_000, Some(60), 1_010), None, "only an event helps it");
    }
}
