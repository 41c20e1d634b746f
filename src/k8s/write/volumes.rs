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

use crate::convert::volumes::{BIND_COMPLETED, SELECTED_NODE};
use crate::engine::volumes::VolumeChoice;
pub use crate::engine::volumes::{VolumeWrite, plan};
use crate::k8s::client::request::{self, Operation, RequestError, Retry};

/// The annotation that says the binding of a volume was not asked for by its user.
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// How often the claims are read while the binder waits for them.
const POLL: Duration = Duration::from_secs(1);

/// Sends the writes and waits, up to `timeout`, until every claim is bound. `fenced` is
/// asked before each request is sent.
pub async fn bind(
    client: &kube::Client,
    retry: Retry,
    fenced: &(dyn Fn() -> Result<(), RequestError> + Sync),
    writes: &[VolumeWrite],
    timeout: Duration,
) -> Result<(), String> {
    if let Some(Err(why)) = writes.iter().map(|w| &w.choice).find(|c| c.is_err()) {
        return Err(why.to_string());
    }
    for write in writes {
        fenced().map_err(|e| e.to_string())?;
        let Ok(choice) = &write.choice else { continue };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::PodKey;
    use crate::engine::volumes::VolumeConflict;

    /// A client to an address where nothing listens: any request sent fails to connect.
    fn nowhere() -> kube::Client {
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap()
    }

    fn write(claim: &str, choice: Result<VolumeChoice, VolumeConflict>) -> VolumeWrite {
        let pod = PodKey { namespace: "ml".into(), name: format!("{claim}-pod") };
        VolumeWrite { pod, namespace: "ml".into(), claim: claim.into(), node: "n1".into(), choice }
    }

    #[tokio::test]
    async fn nothing_is_sent_behind_a_closed_fence_or_for_a_gang_with_a_claim_it_cannot_serve() {
        let retry = Retry::new(Duration::from_secs(1));
        let fenced = || Err(RequestError::Fenced);
        let writes = [write("a", Ok(VolumeChoice::Provision))];
        let why = bind(&nowhere(), retry, &fenced, &writes, Duration::from_secs(1)).await.unwrap_err();
        assert!(why.contains("not sent: this replica may no longer lead"), "{why}");
        let open = || Ok(());
        let conflict = VolumeConflict::NoVolume { namespace: "ml".into(), claim: "b".into(), node: "n1".into() };
        let writes = [write("a", Ok(VolumeChoice::Provision)), write("b", Err(conflict))];
        let why = bind(&nowhere(), retry, &open, &writes, Duration::from_secs(1)).await.unwrap_err();
        // The conflict, not a failed connection: the first claim was not written either.
        assert!(why.starts_with("PersistentVolumeClaim ml/b can have no volume on node n1"), "{why}");
    }
}
