//! A kubelet emulator: the fake nodes have no kubelet, so this marks pods bound to them
//! Running and Ready, and on request fails or completes one, as a real kubelet reports it.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

pub struct KubeletEmulator {
    pods: Api<Pod>,
    task: tokio::task::JoinHandle<()>,
}

impl KubeletEmulator {
    /// Starts emulating the kubelet for every pod of `pods` (one namespace) that is bound.
    pub fn start(pods: Api<Pod>) -> KubeletEmulator {
        let watched = pods.clone();
        let task = tokio::spawn(async move {
            let mut events =
                watcher(watched.clone(), watcher::Config::default()).default_backoff().applied_objects().boxed();
            while let Some(event) = events.next().await {
                let Ok(pod) = event else { continue };
                let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
                let name = pod.metadata.name.clone().unwrap_or_default();
                if bound && pod.metadata.deletion_timestamp.is_some() {
                    // A kubelet stops the containers, then removes the pod for good.
                    let _ = watched
                        .delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
                        .await;
                } else if bound && phase == "Pending" && !self_hold(&pod) {
                    // A pod deleted meanwhile is no error: there is nothing left to run.
                    let _ = patch_status(&watched, &name, running(&pod)).await;
                }
            }
        });
        KubeletEmulator { pods, task }
    }

    /// Ends the pod's container with exit code 1: phase Failed.
    pub async fn fail(&self, name: &str) {
        self.terminate(name, "Failed", 1, "Error").await;
    }

    /// Ends the pod's container with exit code 0: phase Succeeded.
    pub async fn complete(&self, name: &str) {
        self.terminate(name, "Succeeded", 0, "Completed").await;
    }

    async fn terminate(&self, name: &str, phase: &str, exit_code: i32, reason: &str) {
        let pod = self.pods.get(name).await.unwrap_or_else(|e| panic!("kubelet emulator: no pod {name}: {e}"));
        let statuses: Vec<Value> = containers(&pod)
            .map(|c| {
                json!({"name": c, "ready": false, "restartCount": 0, "image": "registry.invalid/train:latest",
                       "imageID": "", "started": false,
                       "state": {"terminated": {"exitCode": exit_code, "reason": reason}}})
            })
            .collect();
        let status = json!({
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted"},
                {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
            ],
            "containerStatuses": statuses,
        });
        patch_status(&self.pods, name, status)
            .await
            .unwrap_or_else(|e| panic!("kubelet emulator: failed to mark pod {name} {phase}: {e}"));
    }
}

impl Drop for KubeletEmulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The label that keeps a pod from starting (it stays Pending on its node), to test gangs
/// whose pods never become Ready.
pub const HOLD_LABEL: &str = "e2e.muster.dev/hold";

fn self_hold(pod: &Pod) -> bool {
    pod.metadata.labels.as_ref().is_some_and(|l| l.contains_key(HOLD_LABEL))
}

fn containers(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec.iter().flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
}

fn running(pod: &Pod) -> Value {
    let statuses: Vec<Value> = containers(pod)
        .map(|c| {
            json!({"name": c, "ready": true, "restartCount": 0, "image": "registry.invalid/train:latest",
                   "imageID": "", "started": true, "state": {"running": {}}})
        })
        .collect();
    json!({
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "True"},
        ],
        "containerStatuses": statuses,
    })
}

async fn patch_status(pods: &Api<Pod>, name: &str, status: Value) -> kube::Result<Pod> {
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(json!({"status": status}))).await
}
