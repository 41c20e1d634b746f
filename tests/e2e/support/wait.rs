//! Waiting on what the API server shows: pods, their conditions and events.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use super::cluster::{TestCluster, within};

pub async fn pods(cluster: &TestCluster) -> Vec<Pod> {
    cluster.api::<Pod>().list(&ListParams::default()).await.expect("list pods").items
}

pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Polls until `check` holds over the test's pods.
pub async fn wait_for_pods(
    cluster: &TestCluster,
    seconds: u64,
    what: &str,
    check: impl Fn(&[Pod]) -> bool,
) -> Vec<Pod> {
    within(seconds, what, async {
        loop {
            let all = pods(cluster).await;
            if check(&all) {
                return all;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

/// Why the scheduler left the pod Unschedulable, once that is about the pod itself: not while
/// it only waits for kube-controller-manager to make its claims from their templates, or for
/// a claim just made to reach the scheduler's cache. That passes on its own, but with many
/// tests at once on a loaded machine it can last long enough to be seen, and a test waiting
/// for "marked Unschedulable" would then read the wrong reason.
pub fn unschedulable_message(pod: &Pod) -> Option<String> {
    let condition = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
    let message = condition.message.clone().unwrap_or_default();
    (condition.status == "False" && condition.reason.as_deref() == Some("Unschedulable") && !waits_for_claims(&message))
        .then_some(message)
}

/// Whether a scheduling message only says the pod's claims are not made or not seen yet.
fn waits_for_claims(message: &str) -> bool {
    (message.contains("(from ResourceClaimTemplate ") && message.contains(") to be created"))
        || (message.contains("ResourceClaim ") && message.contains(" does not exist"))
}

/// Waits up to 10 s for at least one `reason` event on `pod` (one that is more than a wait for
/// the pod's claims, as [`unschedulable_message`] reads it); returns all their notes.
pub async fn wait_for_events(cluster: &TestCluster, pod: &str, reason: &str) -> Vec<String> {
    within(10, &format!("a {reason} event on {pod}"), async {
        loop {
            let events = events_for(cluster, pod, reason).await;
            if events.iter().any(|note| !waits_for_claims(note)) {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

pub async fn events_for(cluster: &TestCluster, pod: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = cluster.api();
    events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod) && e.reason.as_deref() == Some(reason)
        })
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// Waits up to 30 s for Muster's PodGroup `name` to say its phase is Running.
pub async fn wait_for_group_running(cluster: &TestCluster, name: &str) {
    use muster::api::pod_group::{PodGroup, PodGroupPhase};
    within(30, &format!("PodGroup {name}'s status to say Running"), async {
        loop {
            let group = cluster.api::<PodGroup>().get(name).await.expect("PodGroup");
            if group.status.as_ref().and_then(|s| s.phase.as_ref()) == Some(&PodGroupPhase::Running) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}
