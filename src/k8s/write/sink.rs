//! The background writer's sink on a real API server: pod conditions, events, PodGroup and
//! Queue status, evictions and claim releases, each one or two requests under a deadline.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

use super::writer::{PodRef, Sink, Write, truncate_note};
use crate::api::pod_group::PodGroup as MusterPodGroup;
use crate::convert::status::{Unplaced, unschedulable_condition};
use crate::engine::model::PodKey;
use crate::k8s::client::{
    request,
    request::{Operation, RequestError, Retry},
};
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;

/// How many times an unschedulable condition is tried on a pod that keeps changing under it.
const UNBOUND_TRIES: usize = 3;

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
    async fn mark_unschedulable(&self, pod: &PodRef, unplaced: Unplaced, message: &str) -> Result<bool, RequestError> {
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
            let mut body = unschedulable_condition(unplaced, message);
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
            Write::Unschedulable { pod, message, unplaced } => {
                if self.mark_unschedulable(pod, *unplaced, message).await? {
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
                super::remove::evict(&self.client, self.retry, &key, pod.uid.as_deref()).await
            }
            Write::DeletePod { pod, note } => {
                let key = PodKey { namespace: pod.namespace.clone(), name: pod.name.clone() };
                tracing::warn!(pod = %key, "{note}");
                super::remove::delete(&self.client, self.retry, &key, pod.uid.as_deref()).await?;
                // The pod is gone: an event that fails to land must not make the writer
                // count the delete as refused and send it again.
                if let Err(e) = self.event(pod, true, "EvictionRefused", note, "Deleting").await {
                    tracing::warn!(pod = %key, error = %e, "the pod was deleted but its event was not written");
                }
                Ok(())
            }
            Write::Queue { name, status } => {
                let api: Api<crate::api::queue::Queue> = Api::all(self.client.clone());
                let patch = Patch::Merge(json!({"status": status}));
                request::retry(self.retry, Operation::Idempotent, || api.patch_status(name, &params, &patch))
                    .await
                    .map(|_| ())
            }
            Write::ReleaseClaim(release) => {
                tracing::info!(claim = %release.claim, consumers = release.remove.len(), deallocate = release.deallocate, delete = release.delete, "releasing a claim no running pod uses");
                crate::k8s::write::claims::apply_release(&self.client, self.retry, release).await
            }
        }
    }
}

impl Sink for ApiSink {
    fn write<'a>(&'a self, write: &'a Write) -> BoxFuture<'a, Result<(), RequestError>> {
        Box::pin(self.apply(write))
    }
}
