//! The test plays a storage class's external provisioner, as a CSI driver's sidecar would:
//! it watches its namespace's claims of one class, and for each claim the scheduler has
//! given a node (`volume.kubernetes.io/selected-node`), it creates a volume reachable from
//! that node only, promised to the claim, which the volume controller then binds. Told to
//! fail a claim, it takes the node back instead, as a provisioner does after a final error.
//! It records what it saw: the claims it failed, and those whose node was taken back by
//! someone else (the scheduler's undo).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::cluster::TestCluster;

pub use muster::convert::volumes::SELECTED_NODE;

/// What the provisioner is told to do and what it saw.
#[derive(Default)]
pub struct State {
    /// Fail every claim given a node while set.
    pub fail_all: bool,
    /// Fail only the first claim (by name) given a node, every time, while set; the others
    /// wait unprovisioned.
    pub fail_first: bool,
    /// Claims it failed, each once.
    pub failed: BTreeSet<String>,
    /// Claims whose node it saw and then saw gone without having taken it back itself.
    pub taken_back: BTreeSet<String>,
    /// The node each claim was last given.
    pub given: BTreeMap<String, String>,
}

pub struct Provisioner {
    pub state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Creates the test's StorageClass `<id>-<name>`, binding when the first consumer is
/// scheduled, provisioned by this test; returns its name.
pub async fn create_class(cluster: &TestCluster, name: &str) -> String {
    let class = cluster.name(name);
    let object: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class},
        "provisioner": format!("{}.e2e.muster.dev", cluster.id),
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .unwrap();
    cluster.create(&cluster.cluster_api::<StorageClass>(), &object).await;
    class
}

impl Provisioner {
    pub fn start(cluster: &TestCluster, class: &str, state: State) -> Provisioner {
        let state = Arc::new(Mutex::new(state));
        let (claims, volumes): (Api<PersistentVolumeClaim>, Api<PersistentVolume>) =
            (cluster.api(), cluster.cluster_api());
        let (class, namespace, shared) = (class.to_string(), cluster.namespace.clone(), state.clone());
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = claims.list(&ListParams::default()).await {
                    let mut mine: Vec<PersistentVolumeClaim> = list
                        .items
                        .into_iter()
                        .filter(|c| c.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) == Some(&class))
                        .collect();
                    mine.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                    for (i, claim) in mine.iter().enumerate() {
                        step(&claims, &volumes, &namespace, &class, claim, i == 0, &shared).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Provisioner { state, task }
    }
}

/// One claim, one look.
async fn step(
    claims: &Api<PersistentVolumeClaim>,
    volumes: &Api<PersistentVolume>,
    namespace: &str,
    class: &str,
    claim: &PersistentVolumeClaim,
    first: bool,
    state: &Mutex<State>,
) {
    let name = claim.metadata.name.clone().unwrap_or_default();
    if claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_some_and(|v| !v.is_empty()) {
        return;
    }
    let node = claim.metadata.annotations.as_ref().and_then(|a| a.get(SELECTED_NODE)).cloned();
    let (fail, hold) = {
        let mut state = state.lock().unwrap();
        let Some(node) = &node else {
            if state.given.remove(&name).is_some() && !state.failed.contains(&name) {
                state.taken_back.insert(name);
            }
            return;
        };
        state.given.insert(name.clone(), node.clone());
        (state.fail_all || (state.fail_first && first), state.fail_first)
    };
    let node = node.unwrap_or_default();
    if fail {
        let patch = Patch::Merge(json!({"metadata": {"annotations": {SELECTED_NODE: null}}}));
        if claims.patch(&name, &PatchParams::default(), &patch).await.is_ok() {
            let mut state = state.lock().unwrap();
            state.failed.insert(name.clone());
            state.given.remove(&name);
        }
        return;
    }
    if hold {
        return;
    }
    let size = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage").cloned())
        .map_or_else(|| "1Gi".to_string(), |q| q.0);
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("{namespace}-{name}")},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": claim.spec.as_ref().and_then(|s| s.access_modes.clone()).unwrap_or_default(),
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": format!("/tmp/{namespace}/{name}")},
            "claimRef": {"namespace": namespace, "name": name, "uid": claim.metadata.uid},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
            ]}]}},
        },
    }))
    .unwrap();
    // Made once; a second look finds it there.
    let _ = volumes.create(&Default::default(), &volume).await;
}
