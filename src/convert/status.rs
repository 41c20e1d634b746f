//! What Muster tells people: pod conditions and PodGroup status, computed from data. The
//! background writer sends them ([`crate::k8s::write::sink::ApiSink`]); the simulator
//! applies them to its own objects.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::pod_group::{PodGroup as MusterPodGroup, PodGroupPhase, PodGroupStatus};

/// Why a pod is not placed, as its PodScheduled condition's reason says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unplaced {
    /// It does not fit now: kube-scheduler's reason, the one cluster autoscalers act on.
    Unschedulable,
    /// It uses a constraint Muster does not honour yet: no new node would help, so the
    /// reason is not the one autoscalers act on.
    Unsupported,
}

impl Unplaced {
    pub fn reason(self) -> &'static str {
        match self {
            Unplaced::Unschedulable => "Unschedulable",
            Unplaced::Unsupported => "Unsupported",
        }
    }
}

/// A pending pod the engine cannot consider: why, in words, and its condition's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub why: String,
    pub unplaced: Unplaced,
}

/// The pod condition for a pod that is not placed: kube-scheduler's, whose Unschedulable
/// reason cluster autoscalers look for, or Unsupported.
pub fn unschedulable_condition(unplaced: Unplaced, message: &str) -> Value {
    json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": unplaced.reason(),
        "message": message,
    }]}})
}

/// A time in seconds since the epoch, as Kubernetes writes it.
pub fn k8s_time(seconds: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

/// What the scheduler knows of a Muster PodGroup beyond its pods.
#[derive(Clone, Debug, Default)]
pub struct GroupFacts<'a> {
    /// Why it waits, from this cycle.
    pub waiting: Option<&'a str>,
    /// Its last eviction: reason, message, and when (seconds since the epoch).
    pub evicted: Option<(&'a str, &'a str, i64)>,
}

pub(crate) fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    // The transition time moves only when the status or the reason changes.
    let since = previous
        .iter()
        .find(|c| c.type_ == kind && c.status == status && c.reason == reason)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: kind.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since,
        observed_generation: None,
    }
}

/// The reason of a `PodsReady=False` condition on a gang that was Ready and lost pods.
pub const BROKEN: &str = "Broken";

/// A Muster PodGroup's status from its pods: phase, counts and conditions.
pub fn podgroup_status(group: &MusterPodGroup, pods: &[&Pod], facts: &GroupFacts<'_>, now: &Time) -> PodGroupStatus {
    let min = group.spec.min_member.max(1);
    let phase_of = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into());
    let count = |f: &dyn Fn(&Pod) -> bool| pods.iter().filter(|p| f(p)).count() as i32;
    let live = |p: &Pod| p.metadata.deletion_timestamp.is_none();
    let bound = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    let scheduled = count(&|p| live(p) && bound(p) && !matches!(phase_of(p).as_str(), "Succeeded" | "Failed"));
    let running = count(&|p| live(p) && phase_of(p) == "Running");
    let succeeded = count(&|p| phase_of(p) == "Succeeded");
    let failed = count(&|p| phase_of(p) == "Failed");
    let ready = count(&|p| {
        live(p)
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    });
    let phase = if succeeded >= min && scheduled == 0 {
        PodGroupPhase::Succeeded
    } else if failed > 0 && scheduled + succeeded < min && facts.waiting.is_none() {
        PodGroupPhase::Failed
    } else if running + succeeded >= min {
        PodGroupPhase::Running
    } else if scheduled + succeeded >= min {
        PodGroupPhase::Scheduled
    } else {
        PodGroupPhase::Pending
    };
    let previous = group.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let mut conditions = Vec::new();
    let placed = scheduled + succeeded >= min;
    let timed_out = group.spec.schedule_timeout_seconds.is_some_and(|t| {
        let created = group.metadata.creation_timestamp.as_ref().map_or(now.0.as_second(), |c| c.0.as_second());
        now.0.as_second() - created >= t
    });
    conditions.push(if placed {
        condition(
            "Scheduled",
            true,
            "Scheduled",
            &format!("{} of {min} pods bound", scheduled + succeeded),
            previous,
            now,
        )
    } else {
        let reason = if timed_out { "ScheduleTimeout" } else { "Unschedulable" };
        condition("Scheduled", false, reason, facts.waiting.unwrap_or("waiting for a scheduling cycle"), previous, now)
    });
    if placed {
        let ok = ready + succeeded >= min;
        conditions.push(condition(
            "PodsReady",
            ok,
            if ok { "PodsReady" } else { "WaitingForPods" },
            &format!("{} of {min} pods Ready", ready + succeeded),
            previous,
            now,
        ));
    } else if scheduled > 0
        && facts.evicted.is_none()
        && previous.iter().any(|c| c.type_ == "PodsReady" && (c.status == "True" || c.reason == BROKEN))
    {
        // It was Ready and lost pods while running: said durably, so that a scheduler that
        // starts now grants it the grace period rather than take it for partly bound.
        conditions.push(condition(
            "PodsReady",
            false,
            BROKEN,
            &format!("{scheduled} of {min} pods left of a gang that was Ready"),
            previous,
            now,
        ));
    }
    if let Some((reason, message, at)) = facts.evicted {
        // Every eviction is a transition: the time is the last one's, which the preemption
        // delay and the return after an eviction count from.
        let mut evicted = condition("Evicted", true, reason, message, previous, now);
        evicted.last_transition_time = k8s_time(at);
        conditions.push(evicted);
    } else if let Some(old) = previous.iter().find(|c| c.type_ == "Evicted") {
        conditions.push(old.clone());
    }
    PodGroupStatus { phase: Some(phase), min_member: min, scheduled, running, succeeded, failed, conditions }
}

/// `PodGroupInitiallyScheduled` added to a Kubernetes PodGroup's conditions, or None when it
/// has it already.
pub fn initially_scheduled(group: &KubernetesPodGroup, now: &Time) -> Option<Vec<Condition>> {
    let conditions = group.status.as_ref().and_then(|s| s.conditions.as_ref());
    if conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled")) {
        return None;
    }
    let mut all = conditions.cloned().unwrap_or_default();
    all.push(Condition {
        type_: "PodGroupInitiallyScheduled".into(),
        status: "True".into(),
        reason: "Scheduled".into(),
        message: "the gang's pods were bound together".into(),
        last_transition_time: now.clone(),
        observed_generation: group.metadata.generation,
    });
    Some(all)
}
