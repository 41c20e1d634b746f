//! What Muster tells people: pod conditions, events and PodGroup status.
//!
//! Computing a status is separate from writing it: the functions here build patches from
//! data, and `StatusWriter` sends them, only when they differ from what was last written.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};

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
