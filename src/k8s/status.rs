//! What Muster tells people: pod conditions, events and PodGroup status.
//!
//! Computing a status is separate from writing it: the functions here build statuses from
//! data, and [`ApiSink`] is how the background writer (`k8s::writer`) sends them.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};

use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::crd::{PodGroup as MusterPodGroup, PodGroupPhase, PodGroupStatus};
use super::request::{self, Operation, RequestError, Retry};
use super::writer::{PodRef, Sink, Write, truncate_note};
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

/// How many times an unschedulable condition is tried on a pod that keeps changing under it.
const UNBOUND_TRIES: usize = 3;

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

/// The writer's sink on a real API server: each write is one or two requests, each under
/// the deadline.
pub struct ApiSink {
    client: kube::Client,
    recorder: Recorder,
    retry: Retry,
}

impl ApiSink {
    pub fn new(client: kube::Client, scheduler_name: &str, deadline: Duration) -> ApiSink {
        let reporter = Reporter { controller: scheduler_name.to_string(), instance: std::env::var("HOSTNAME").ok() };
        ApiSink { recorder: Recorder::new(client.clone(), reporter), client, retry: Retry::new(deadline) }
    }

    async fn event(
        &self,
        pod: &PodRef,
        warning: bool,
        reason: &str,
        note: &str,
        action: &str,
    ) -> Result<(), RequestError> {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            note: Some(truncate_note(note)),
            action: action.into(),
            secondary: None,
        };
        match tokio::time::timeout(self.retry.deadline, self.recorder.publish(&event, &pod.reference())).await {
            Ok(result) => result.map_err(RequestError::Api),
            Err(_) => Err(RequestError::TimedOut(self.retry.deadline)),
        }
    }

    /// Writes `PodScheduled=False` on `pod` if it is still unbound, and says whether it did.
    /// The write may land after the pod was bound (a cycle decides it, the background
    /// writer sends it later): it is made to the version of the pod read unbound, and a
    /// conflict reads it again, so a bound pod keeps its `PodScheduled=True`.
    async fn mark_unschedulable(&self, pod: &PodRef, message: &str) -> Result<bool, RequestError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = PatchParams::default();
        for _ in 0..UNBOUND_TRIES {
            let current = match request::retry(self.retry, Operation::Idempotent, || pods.get(&pod.name)).await {
                Ok(current) => current,
                Err(e) if e.is_not_found() => return Ok(false),
                Err(e) => return Err(e),
            };
            let bound = current.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some();
            let other = pod.uid.as_ref().is_some_and(|uid| current.metadata.uid.as_ref() != Some(uid));
            if bound || other {
                return Ok(false);
            }
            let mut body = unschedulable_condition(message);
            body["metadata"] = json!({"resourceVersion": current.metadata.resource_version});
            let patch = Patch::Strategic(body);
            match request::retry(self.retry, Operation::Idempotent, || pods.patch_status(&pod.name, &params, &patch))
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if e.is_conflict() => continue,
                Err(e) if e.is_not_found() => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    async fn apply(&self, write: &Write) -> Result<(), RequestError> {
        let params = PatchParams::default();
        match write {
            Write::Unschedulable { pod, message } => {
                if self.mark_unschedulable(pod, message).await? {
                    self.event(pod, true, "FailedScheduling", message, "Scheduling").await?;
                }
                Ok(())
            }
            Write::PodEvent { pod, warning, reason, note, action } => {
                self.event(pod, *warning, reason, note, action).await
            }
            Write::MusterGroup { namespace, name, status } => {
                let api: Api<MusterPodGroup> = Api::namespaced(self.client.clone(), namespace);
                let patch = Patch::Merge(json!({"status": status}));
                request::retry(self.retry, Operation::Idempotent, || api.patch_status(name, &params, &patch))
                    .await
                    .map(|_| ())
            }
            Write::KubernetesGroup { namespace, name, conditions } => {
                let api: Api<KubernetesPodGroup> = Api::namespaced(self.client.clone(), namespace);
                let patch = Patch::Merge(json!({"status": {"conditions": conditions}}));
                request::retry(self.retry, Operation::Idempotent, || api.patch_status(name, &params, &patch))
                    .await
                    .map(|_| ())
            }
            Write::Evict { pod, .. } => {
                let key = PodKey { namespace: pod.namespace.clone(), name: pod.name.clone() };
                super::bind::evict(&self.client, self.retry, &key, pod.uid.as_deref()).await
            }
            Write::DeletePod { pod, note } => {
                let key = PodKey { namespace: pod.namespace.clone(), name: pod.name.clone() };
                tracing::warn!(pod = %key, "{note}");
                super::bind::delete(&self.client, self.retry, &key, pod.uid.as_deref()).await?;
                self.event(pod, true, "EvictionRefused", note, "Deleting").await
            }
            Write::Queue { name, status } => {
                let api: Api<super::queue_crd::Queue> = Api::all(self.client.clone());
                let patch = Patch::Merge(json!({"status": status}));
                request::retry(self.retry, Operation::Idempotent, || api.patch_status(name, &params, &patch))
                    .await
                    .map(|_| ())
            }
            Write::ReleaseClaim(release) => {
                tracing::info!(claim = %release.claim, consumers = release.remove.len(), deallocate = release.deallocate, delete = release.delete, "releasing a claim no running pod uses");
                super::claim_bind::apply_release(&self.client, self.retry, release).await
            }
        }
    }
}

impl Sink for ApiSink {
    fn write<'a>(&'a self, write: &'a Write) -> BoxFuture<'a, Result<(), RequestError>> {
        Box::pin(self.apply(write))
    }
}
