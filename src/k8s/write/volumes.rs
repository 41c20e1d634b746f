//! A gang's claims that wait for their first consumer, given their nodes inside its
//! transaction, as kube-scheduler's volume binder does in PreBind: a free volume is bound to
//! the claim (its `claimRef`), or the claim is annotated with the node for its provisioner;
//! then the binder waits until every claim is bound before any pod is. A provisioner that
//! fails takes the annotation back, which fails the gang's binding; so does a claim not bound
//! within the configured time. Undoing takes back the annotations this transaction wrote on
//! claims still unbound; a volume bound meanwhile stays bound (its node is where the gang's
//! next try must go, and the next cycle reads it so).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::convert::volumes::SELECTED_NODE;
use crate::engine::model::{DelayedClaim, PodKey};
use crate::engine::node::Node;
use crate::engine::volumes::VolumeChoice;
use crate::k8s::client::request::{self, Operation, RequestError, Retry};

/// The annotation the volume controller sets once it has bound a claim to its volume.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// The annotation that says the binding of a volume was not asked for by its user.
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// How often the claims are read while the binder waits for them.
const POLL: Duration = Duration::from_secs(1);

/// One delayed claim given a node: how it gets its volume there, or why it cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeWrite {
    /// The pod whose node the claim was given.
    pub pod: PodKey,
    pub namespace: String,
    pub claim: String,
    pub node: String,
    pub choice: Result<VolumeChoice, String>,
}

impl VolumeWrite {
    fn object(&self) -> String {
        format!("PersistentVolumeClaim {}/{}", self.namespace, self.claim)
    }
}

/// The volume writes of a placed gang: each delayed claim of each pod, given the pod's node,
/// a free volume not already chosen for another claim of the gang, or provisioning. A claim
/// two pods on different nodes share cannot follow both: the second says so.
pub fn plan<'a>(placed: impl IntoIterator<Item = (&'a PodKey, &'a [DelayedClaim], &'a Node)>) -> Vec<VolumeWrite> {
    let mut writes: Vec<VolumeWrite> = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    for (pod, claims, node) in placed {
        for claim in claims {
            let same = |w: &&VolumeWrite| w.namespace == claim.namespace && w.claim == claim.name;
            if let Some(first) = writes.iter().find(same) {
                if first.node != node.name {
                    let why = format!(
                        "PersistentVolumeClaim {}/{} is used by pods placed on {} and {}; it can have a volume on one node only",
                        claim.namespace, claim.name, first.node, node.name
                    );
                    writes.push(VolumeWrite { choice: Err(why), ..first.clone() });
                }
                continue;
            }
            let choice = claim.choose(node, &taken).ok_or_else(|| {
                format!(
                    "PersistentVolumeClaim {}/{} can have no volume on node {}: node(s) didn't find available persistent volumes to bind",
                    claim.namespace, claim.name, node.name
                )
            });
            if let Ok(VolumeChoice::Bind(volume)) = &choice {
                taken.push(volume.clone());
            }
            writes.push(VolumeWrite {
                pod: pod.clone(),
                namespace: claim.namespace.clone(),
                claim: claim.name.clone(),
                node: node.name.clone(),
                choice,
            });
        }
    }
    writes
}

/// Sends the writes and waits, up to `timeout`, until every claim is bound. `fenced` is
/// asked before each request is sent.
pub async fn bind(
    client: &kube::Client,
    retry: Retry,
    fenced: &(dyn Fn() -> Result<(), RequestError> + Sync),
    writes: &[VolumeWrite],
    timeout: Duration,
) -> Result<(), String> {
    for write in writes {
        fenced().map_err(|e| e.to_string())?;
        let choice = write.choice.as_ref().map_err(String::clone)?;
        let sent = match choice {
            VolumeChoice::Provision => {
                select_node(client, retry, write, Some(&write.node)).await.map_err(|e| e.to_string())
            }
            VolumeChoice::Bind(volume) => bind_volume(client, retry, write, volume).await,
        };
        sent.map_err(|e| format!("giving {} its volume on {} failed: {e}", write.object(), write.node))?;
    }
    let started = Instant::now();
    let mut waiting: Vec<&VolumeWrite> = writes.iter().collect();
    loop {
        let mut still = Vec::with_capacity(waiting.len());
        for write in waiting {
            if !bound(client, retry, write).await? {
                still.push(write);
            }
        }
        waiting = still;
        let Some(first) = waiting.first() else { return Ok(()) };
        if started.elapsed() >= timeout {
            return Err(format!(
                "{} was not bound within {}s of being given node {} (volumeBindTimeoutSeconds)",
                first.object(),
                timeout.as_secs(),
                first.node
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Takes back the node written on each provisioned claim that is still unbound and still
/// names it.
pub async fn undo(
    client: &kube::Client,
    retry: Retry,
    fenced: &(dyn Fn() -> Result<(), RequestError> + Sync),
    writes: &[VolumeWrite],
) {
    for write in writes.iter().filter(|w| w.choice == Ok(VolumeChoice::Provision)) {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &write.namespace);
        let Ok(claim) = request::retry(retry, Operation::Idempotent, || claims.get(&write.claim)).await else {
            continue;
        };
        let annotations = claim.metadata.annotations.unwrap_or_default();
        if annotations.contains_key(BIND_COMPLETED) || annotations.get(SELECTED_NODE) != Some(&write.node) {
            continue;
        }
        if fenced().is_err() {
            return;
        }
        if let Err(e) = select_node(client, retry, write, None).await {
            tracing::warn!(claim = %write.object(), error = %e, "could not take back the node given to a claim");
        }
    }
}

/// Writes (or, with None, removes) the node annotation on the claim.
async fn select_node(
    client: &kube::Client,
    retry: Retry,
    write: &VolumeWrite,
    node: Option<&str>,
) -> Result<(), RequestError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &write.namespace);
    let patch = Patch::Merge(json!({"metadata": {"annotations": {SELECTED_NODE: node}}}));
    let params = PatchParams::default();
    request::retry(retry, Operation::Idempotent, || claims.patch(&write.claim, &params, &patch)).await.map(|_| ())
}

/// Promises the free `volume` to the claim (its `claimRef`, as the volume controller
/// writes it); the controller completes the binding. The update carries the
/// resourceVersion it was read at, so a volume taken meanwhile is not taken twice.
async fn bind_volume(client: &kube::Client, retry: Retry, write: &VolumeWrite, volume: &str) -> Result<(), String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &write.namespace);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let text = |e: RequestError| e.to_string();
    let claim = request::retry(retry, Operation::Idempotent, || claims.get(&write.claim)).await.map_err(text)?;
    let mut pv = request::retry(retry, Operation::Idempotent, || volumes.get(volume)).await.map_err(text)?;
    let spec = pv.spec.get_or_insert_with(Default::default);
    let other = |r: &k8s_openapi::api::core::v1::ObjectReference| {
        r.name.as_deref() != Some(write.claim.as_str()) || r.namespace.as_deref() != Some(write.namespace.as_str())
    };
    if spec.claim_ref.as_ref().is_some_and(other) {
        return Err(format!("PersistentVolume {volume} was bound to another claim meanwhile"));
    }
    spec.claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(write.namespace.clone()),
        name: Some(write.claim.clone()),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    });
    pv.metadata.annotations.get_or_insert_with(Default::default).insert(BOUND_BY_CONTROLLER.into(), "yes".into());
    request::within(retry.deadline, volumes.replace(volume, &PostParams::default(), &pv))
        .await
        .map(|_| ())
        .map_err(text)
}

/// Whether the claim is bound now; an error when it can no longer be (its provisioner took
/// its node back, its volume's promise was dropped, it is gone).
async fn bound(client: &kube::Client, retry: Retry, write: &VolumeWrite) -> Result<bool, String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &write.namespace);
    let claim = match request::retry(retry, Operation::Idempotent, || claims.get(&write.claim)).await {
        Ok(claim) => claim,
        Err(e) if e.is_not_found() => return Err(format!("{} was deleted while it was being bound", write.object())),
        // Unanswered: asked again next round, until the timeout.
        Err(_) => return Ok(false),
    };
    let annotations = claim.metadata.annotations.unwrap_or_default();
    let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty());
    if volume.is_some() && annotations.contains_key(BIND_COMPLETED) {
        return Ok(true);
    }
    match &write.choice {
        Ok(VolumeChoice::Provision) if annotations.get(SELECTED_NODE) != Some(&write.node) => Err(format!(
            "provisioning failed for {}: its provisioner took back node {} (see the claim's events)",
            write.object(),
            write.node
        )),
        Ok(VolumeChoice::Bind(name)) => {
            let volumes: Api<PersistentVolume> = Api::all(client.clone());
            match request::retry(retry, Operation::Idempotent, || volumes.get(name)).await {
                Ok(pv) if pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none() => {
                    Err(format!("PersistentVolume {name} was released before {} was bound to it", write.object()))
                }
                _ => Ok(false),
            }
        }
        _ => Ok(false),
    }
}
