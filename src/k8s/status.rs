//! What Muster tells people: pod conditions, events and PodGroup status.
//!
//! Computing a status is separate from writing it: the functions here build patches from
//! data, and `StatusWriter` sends them, only when they differ from what was last written.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};

use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::crd::{PodGroup as MusterPodGroup, PodGroupPhase, PodGroupStatus};
use crate::engine::model::PodKey;

/// The pod condition kube-scheduler sets on a pod it cannot place; cluster autoscalers
/// look for exactly this.
pub fn unschedulable_condition(message: &str) -> Value {
    json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }]}})
}

fn reference(pod: &PodKey) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        ..Default::default()
    }
}

pub struct StatusWriter {
    client: kube::Client,
    recorder: Recorder,
    /// The last unschedulable message written per pod, so an unchanged reason is not
    /// written again every cycle.
    written: HashMap<PodKey, String>,
}

impl StatusWriter {
    pub fn new(client: kube::Client, scheduler_name: &str) -> StatusWriter {
        let reporter = Reporter { controller: scheduler_name.to_string(), instance: std::env::var("HOSTNAME").ok() };
        StatusWriter { recorder: Recorder::new(client.clone(), reporter), client, written: HashMap::new() }
    }

    /// Marks a pending pod unschedulable, with a FailedScheduling event, when its reason changed.
    pub async fn unschedulable(&mut self, pod: &PodKey, message: &str) {
        if self.written.get(pod).is_some_and(|m| m == message) {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let patch = Patch::Strategic(unschedulable_condition(message));
        if let Err(e) = pods.patch_status(&pod.name, &PatchParams::default(), &patch).await {
            tracing::debug!(%pod, error = %e, "failed to set PodScheduled=False");
            return;
        }
        let event = Event {
            type_: EventType::Warning,
            reason: "FailedScheduling".into(),
            note: Some(message.to_string()),
            action: "Scheduling".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference(pod)).await {
            tracing::debug!(%pod, error = %e, "failed to publish FailedScheduling");
        }
        self.written.insert(pod.clone(), message.to_string());
    }

    /// Records that a pod was bound, and forgets its last unschedulable message.
    pub async fn scheduled(&mut self, pod: &PodKey, node: &str, gang: &str) {
        self.written.remove(pod);
        let event = Event {
            type_: EventType::Normal,
            reason: "Scheduled".into(),
            note: Some(format!("Successfully assigned {pod} to {node} ({gang})")),
            action: "Binding".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference(pod)).await {
            tracing::debug!(%pod, error = %e, "failed to publish Scheduled");
        }
    }

    /// Records why a gang's pod was evicted.
    pub async fn evicted(&mut self, pod: &PodKey, reason: &str, message: &str) {
        self.written.remove(pod);
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message.to_string()),
            action: "Evicting".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference(pod)).await {
            tracing::debug!(%pod, error = %e, "failed to publish {reason}");
        }
    }

    /// Forgets pods that no longer exist.
    pub fn retain(&mut self, keep: impl Fn(&PodKey) -> bool) {
        self.written.retain(|k, _| keep(k));
    }
}

/// What the scheduler knows of a Muster PodGroup beyond its pods.
#[derive(Clone, Debug, Default)]
pub struct GroupFacts<'a> {
    /// Why it waits, from this cycle.
    pub waiting: Option<&'a str>,
    /// Its last eviction: reason and message.
    pub evicted: Option<(&'a str, &'a str)>,
}

fn condition(kind: &str, ok: bool, reason: &str, message: &str, previous: &[Condition], now: &Time) -> Condition {
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
    }
    if let Some((reason, message)) = facts.evicted {
        conditions.push(condition("Evicted", true, reason, message, previous, now));
    } else if let Some(old) = previous.iter().find(|c| c.type_ == "Evicted") {
        conditions.push(old.clone());
    }
    PodGroupStatus { phase: Some(phase), min_member: min, scheduled, running, succeeded, failed, conditions }
}

/// PodGroup statuses to write: Muster's with their new status, Kubernetes' to mark
/// PodGroupInitiallyScheduled.
#[derive(Default)]
pub struct GroupUpdates {
    pub muster: Vec<(MusterPodGroup, PodGroupStatus)>,
    pub kubernetes: Vec<KubernetesPodGroup>,
}

impl StatusWriter {
    pub async fn write_groups(&self, updates: GroupUpdates, now: &Time) {
        for (group, status) in updates.muster {
            self.podgroup(&group, status).await;
        }
        for group in updates.kubernetes {
            self.initially_scheduled(&group, now).await;
        }
    }

    /// Writes a Muster PodGroup's status when it differs from the one it has.
    pub async fn podgroup(&self, group: &MusterPodGroup, status: PodGroupStatus) {
        if group.status.as_ref() == Some(&status) {
            return;
        }
        let namespace = group.metadata.namespace.clone().unwrap_or_default();
        let name = group.metadata.name.clone().unwrap_or_default();
        let api: Api<MusterPodGroup> = Api::namespaced(self.client.clone(), &namespace);
        let patch = Patch::Merge(json!({"status": status}));
        if let Err(e) = api.patch_status(&name, &PatchParams::default(), &patch).await {
            tracing::debug!(podgroup = %format!("{namespace}/{name}"), error = %e, "failed to write PodGroup status");
        }
    }

    /// Sets `PodGroupInitiallyScheduled` on a Kubernetes PodGroup the first time it is placed.
    pub async fn initially_scheduled(&self, group: &KubernetesPodGroup, now: &Time) {
        let conditions = group.status.as_ref().and_then(|s| s.conditions.as_ref());
        if conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled")) {
            return;
        }
        let namespace = group.metadata.namespace.clone().unwrap_or_default();
        let name = group.metadata.name.clone().unwrap_or_default();
        let mut all = conditions.cloned().unwrap_or_default();
        all.push(Condition {
            type_: "PodGroupInitiallyScheduled".into(),
            status: "True".into(),
            reason: "Scheduled".into(),
            message: "the gang's pods were bound together".into(),
            last_transition_time: now.clone(),
            observed_generation: group.metadata.generation,
        });
        let api: Api<KubernetesPodGroup> = Api::namespaced(self.client.clone(), &namespace);
        let patch = Patch::Merge(json!({"status": {"conditions": all}}));
        if let Err(e) = api.patch_status(&name, &PatchParams::default(), &patch).await {
            tracing::debug!(podgroup = %format!("{namespace}/{name}"), error = %e, "failed to set PodGroupInitiallyScheduled");
        }
    }
}
