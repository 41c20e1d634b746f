//! Claims that wait for their first consumer, as the simulator plays their binding: each
//! claim of a placed pod is given the pod's node as the scheduler gives it
//! ([`plan`](crate::engine::volumes::plan)), then bound at once as the volume controller and
//! the class's provisioner would bind it: to the free volume chosen, or to a volume made for
//! it on that node (`pvc-<namespace>-<claim>`, reachable from that node alone, as local
//! storage is; a zonal disk would let a later pod of the claim move within its zone).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    PersistentVolumeStatus,
};
use serde_json::json;

use super::controllers::key_of;
use crate::convert::assemble::ClusterObjects;
use crate::convert::objects::touch;
use crate::convert::volumes::{BIND_COMPLETED, SELECTED_NODE, class_of};
use crate::engine::CycleOutcome;
use crate::engine::model::{DelayedClaim, PodKey, Snapshot};
use crate::engine::volumes::{VolumeChoice, VolumeWrite, plan};

/// Gives the placed pods' delayed claims their nodes and binds them, as the binder would;
/// a placement whose claims cannot all be served (a free volume another gang of the cycle
/// took first) is rolled back: left out of the outcome returned, it is tried again next
/// cycle, when the volume is seen taken. Returns the outcome and how many were left out.
pub fn bind_delayed_claims(
    objects: &mut ClusterObjects,
    snapshot: &Snapshot,
    mut outcome: CycleOutcome,
) -> (CycleOutcome, usize) {
    let delayed: HashMap<&PodKey, &[DelayedClaim]> = snapshot
        .gangs
        .iter()
        .flat_map(|g| g.pods.iter())
        .filter(|p| !p.constraints.delayed.is_empty())
        .map(|p| (&p.key, p.constraints.delayed.as_slice()))
        .collect();
    if delayed.is_empty() {
        return (outcome, 0);
    }
    let mut taken = Vec::new();
    let before = outcome.placements.len();
    outcome.placements.retain(|placement| {
        let placed = placement
            .pods
            .iter()
            .filter_map(|(pod, node)| Some((pod, *delayed.get(pod)?, &snapshot.nodes[*node as usize])));
        let mut mine = taken.clone();
        let writes = plan(placed, &mut mine);
        if writes.iter().any(|w| w.choice.is_err()) {
            return false;
        }
        taken = mine;
        for write in writes {
            let volume = match &write.choice {
                Ok(VolumeChoice::Bind(volume)) => volume.clone(),
                _ => provision(objects, snapshot, &write),
            };
            bind(objects, &write, &volume);
        }
        true
    });
    let left_out = before - outcome.placements.len();
    (outcome, left_out)
}

/// Makes a volume for the claim on its node, as a provisioner of local storage would;
/// returns its name.
fn provision(objects: &mut ClusterObjects, snapshot: &Snapshot, write: &VolumeWrite) -> String {
    let name = format!("pvc-{}-{}", write.namespace, write.claim);
    let Some(claim) = find_claim(objects, write) else { return name };
    let spec = claim.spec.clone().unwrap_or_default();
    let class = class_of(&claim.metadata, spec.storage_class_name.as_deref());
    let node = snapshot.nodes.iter().find(|n| n.name == write.node);
    let term = match node.and_then(|n| n.labels.get("kubernetes.io/hostname")) {
        Some(host) => {
            json!({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]})
        }
        None => json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [write.node]}]}),
    };
    let size = spec.resources.as_ref().and_then(|r| r.requests.as_ref()?.get("storage").cloned());
    let mut volume = PersistentVolume {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: size.map(|s| [("storage".to_string(), s)].into_iter().collect()),
            access_modes: spec.access_modes.clone(),
            storage_class_name: Some(class),
            volume_mode: spec.volume_mode.clone(),
            node_affinity: serde_json::from_value(json!({"required": {"nodeSelectorTerms": [term]}})).ok(),
            ..Default::default()
        }),
        status: None,
    };
    touch(&mut volume.metadata);
    objects.persistent_volumes.push(volume);
    if let Some(claim) = find_claim(objects, write) {
        claim.metadata.annotations.get_or_insert_default().insert(SELECTED_NODE.into(), write.node.clone());
    }
    name
}

/// Binds the claim and `volume` to each other, as the volume controller does.
fn bind(objects: &mut ClusterObjects, write: &VolumeWrite, volume: &str) {
    let Some(claim) = find_claim(objects, write) else { return };
    let uid = claim.metadata.uid.clone();
    claim.spec.get_or_insert_default().volume_name = Some(volume.to_string());
    claim.metadata.annotations.get_or_insert_default().insert(BIND_COMPLETED.into(), "yes".into());
    claim.status = Some(PersistentVolumeClaimStatus { phase: Some("Bound".into()), ..Default::default() });
    touch(&mut claim.metadata);
    let Some(pv) = objects.persistent_volumes.iter_mut().find(|v| v.metadata.name.as_deref() == Some(volume)) else {
        return;
    };
    pv.spec.get_or_insert_default().claim_ref = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(write.namespace.clone()),
        name: Some(write.claim.clone()),
        uid,
        ..Default::default()
    });
    pv.status = Some(PersistentVolumeStatus { phase: Some("Bound".into()), ..Default::default() });
    touch(&mut pv.metadata);
}

fn find_claim<'a>(objects: &'a mut ClusterObjects, write: &VolumeWrite) -> Option<&'a mut PersistentVolumeClaim> {
    let wanted = (write.namespace.clone(), write.claim.clone());
    objects.persistent_volume_claims.iter_mut().find(|c| key_of(&c.metadata) == wanted)
}

/// A claim of a reported pod: the node its pod was given and the volume it is bound to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClaimResult {
    pub namespace: String,
    pub name: String,
    pub pod: String,
    /// The node its pod was given; None while the pod waits.
    pub node: Option<String>,
    /// The volume it is bound to; None while it is not.
    pub volume: Option<String>,
}

/// The claims the pods of `pods` (namespace, name, node) use through their volumes, in
/// the pods' order.
pub fn claim_results<'a>(
    objects: &ClusterObjects,
    pods: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a str>)>,
) -> Vec<ClaimResult> {
    let by_key: HashMap<(String, String), &PersistentVolumeClaim> =
        objects.persistent_volume_claims.iter().map(|c| (key_of(&c.metadata), c)).collect();
    let specs: HashMap<(String, String), &k8s_openapi::api::core::v1::Pod> =
        objects.pods.iter().map(|p| (key_of(&p.metadata), p)).collect();
    let mut results = Vec::new();
    for (namespace, name, node) in pods {
        let Some(pod) = specs.get(&(namespace.to_string(), name.to_string())) else { continue };
        for claim in crate::convert::volumes::claim_names(pod) {
            let bound = by_key.get(&(namespace.to_string(), claim.clone()));
            let volume = bound.and_then(|c| c.spec.as_ref()?.volume_name.clone()).filter(|v| !v.is_empty());
            results.push(ClaimResult {
                namespace: namespace.to_string(),
                name: claim,
                pod: name.to_string(),
                node: node.map(str::to_string),
                volume,
            });
        }
    }
    results
}
