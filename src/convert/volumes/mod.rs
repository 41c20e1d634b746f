//! A pod's volumes backed by claims, read as kube-scheduler's VolumeBinding and VolumeZone
//! read them once the claims are bound: every PersistentVolume the pod's claims are bound to
//! must be reachable from the node (its required node affinity) and lie in the node's zone
//! (its zone and region labels). A claim that is missing, being deleted or not bound yet
//! makes the pod wait, in kube-scheduler's words, unless its class waits for the claim's
//! first consumer: then the node must let it have a volume ([`delayed`]), and the claim is
//! given the node in the gang's transaction.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity, StorageClass};
use thiserror::Error;

use super::view::ClusterView;
use crate::engine::model::{DelayedClaim, LabelRequirement};

mod delayed;
mod limits;
mod once;

pub use delayed::{SELECTED_NODE, class_of, waits_for_consumer};
pub use limits::{ClaimAttachments, volume_limits};
pub use once::{claim_names, inline_disk_field};

/// The annotation the volume controller sets once it has bound a claim to its volume.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// The labels on a volume VolumeZone reads, zones and regions, beta names first.
const ZONE_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// Why a pod's claims keep it from being placed, in kube-scheduler's words where it has
/// them.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum VolumeError {
    #[error("persistentvolumeclaim \"{0}\" not found")]
    ClaimNotFound(String),
    #[error("waiting for ephemeral volume controller to create the persistentvolumeclaim \"{0}\"")]
    EphemeralNotCreated(String),
    #[error("PVC {namespace}/{claim} was not created for pod {namespace}/{pod} (pod is not owner)")]
    NotOwner { namespace: String, claim: String, pod: String },
    #[error("persistentvolumeclaim \"{0}\" is being deleted")]
    ClaimDeleted(String),
    #[error("persistentvolumeclaim \"{claim}\" bound to non-existent persistentvolume \"{volume}\"")]
    Lost { claim: String, volume: String },
    #[error("pod has unbound immediate PersistentVolumeClaims")]
    Unbound,
    #[error(
        "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod (persistentvolumeclaim \"{claim}\", used by pod {holder})"
    )]
    ReadWriteOncePod { claim: String, holder: String },
    #[error("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)")]
    VolumeMissing,
    /// The volume's node affinity does not read ("PersistentVolume pv-1: unknown node
    /// selector operator").
    #[error(transparent)]
    Affinity(super::core::Error),
}

/// The claims and volumes of a cluster, by name, for the pods that use them.
pub struct VolumeIndex<'a> {
    claims: HashMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    volumes: HashMap<&'a str, &'a PersistentVolume>,
    /// The volumes of each class, for the claims that wait for their first consumer.
    by_class: HashMap<String, Vec<&'a PersistentVolume>>,
    classes: HashMap<&'a str, &'a StorageClass>,
    drivers: HashMap<&'a str, &'a CSIDriver>,
    capacities: Vec<&'a CSIStorageCapacity>,
    /// Who has each ReadWriteOncePod claim first.
    once: once::OncePods<'a>,
}

/// Where the volumes a pod's claims are bound to let it run: the node terms of each volume
/// (one of a volume's terms must match) and the zones and regions their labels name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumePlaces {
    pub terms: Vec<Vec<Vec<LabelRequirement>>>,
    pub zones: Vec<(String, Vec<String>)>,
    /// Its claims that wait for their first consumer.
    pub delayed: Vec<DelayedClaim>,
}

/// Where a claim stands: bound to a volume, or waiting for its pod's node.
enum Standing<'a> {
    Bound(&'a PersistentVolume),
    Delayed(DelayedClaim),
}

/// Whether `pod` has a volume backed by a claim (only such pods are looked up).
pub fn uses_claims(pod: &Pod) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

impl<'a> VolumeIndex<'a> {
    pub fn new(view: &ClusterView<'a>) -> VolumeIndex<'a> {
        let key = |c: &&'a PersistentVolumeClaim| {
            (c.metadata.namespace.as_deref().unwrap_or_default(), c.metadata.name.as_deref().unwrap_or_default())
        };
        let claims = view.persistent_volume_claims.iter().map(|c| (key(c), *c)).collect();
        let mut by_class: HashMap<String, Vec<&'a PersistentVolume>> = HashMap::new();
        for &volume in &view.persistent_volumes {
            let class = class_of(&volume.metadata, volume.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()));
            by_class.entry(class).or_default().push(volume);
        }
        VolumeIndex {
            once: once::OncePods::new(&view.pods, &claims),
            claims,
            volumes: view.persistent_volumes.iter().filter_map(|v| Some((v.metadata.name.as_deref()?, *v))).collect(),
            by_class,
            classes: view.storage_classes.iter().filter_map(|c| Some((c.metadata.name.as_deref()?, *c))).collect(),
            drivers: view.csi_drivers.iter().filter_map(|d| Some((d.metadata.name.as_deref()?, *d))).collect(),
            capacities: view.csi_storage_capacities.clone(),
        }
    }

    /// Where the volumes of `pod`'s claims let it run; an error when a claim keeps it from
    /// being placed at all.
    pub fn places(&self, pod: &Pod) -> Result<VolumePlaces, VolumeError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut places = VolumePlaces::default();
        for volume in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            let (claim_name, ephemeral) = match (&volume.persistent_volume_claim, &volume.ephemeral) {
                (Some(source), _) => (source.claim_name.clone(), false),
                (None, Some(_)) => (format!("{pod_name}-{}", volume.name), true),
                (None, None) => continue,
            };
            let claim = self.claim(namespace, &claim_name, ephemeral, pod)?;
            let bound = match self.standing(claim, &claim_name)? {
                Standing::Bound(volume) => volume,
                Standing::Delayed(delayed) => {
                    if !places.delayed.contains(&delayed) {
                        places.delayed.push(delayed);
                    }
                    continue;
                }
            };
            if bound.spec.as_ref().and_then(|s| s.node_affinity.as_ref()?.required.as_ref()).is_some() {
                places.terms.push(delayed::volume_terms(bound)?);
            }
            // VolumeZone reads claims named in the spec, not ephemeral ones.
            if !ephemeral {
                let labels = bound.metadata.labels.as_ref();
                for key in ZONE_LABELS {
                    if let Some(value) = labels.and_then(|l| l.get(key)) {
                        places.zones.push((key.to_string(), value.split("__").map(str::to_string).collect()));
                    }
                }
            }
        }
        Ok(places)
    }

    /// The claim `name` a volume of `pod` names, if it may be used.
    fn claim(
        &self,
        namespace: &str,
        name: &str,
        ephemeral: bool,
        pod: &Pod,
    ) -> Result<&'a PersistentVolumeClaim, VolumeError> {
        let Some(claim) = self.claims.get(&(namespace, name)).copied() else {
            return Err(if ephemeral {
                VolumeError::EphemeralNotCreated(name.into())
            } else {
                VolumeError::ClaimNotFound(name.into())
            });
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(VolumeError::ClaimDeleted(name.into()));
        }
        let controller = claim.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        if ephemeral && controller.is_none_or(|o| Some(&o.uid) != pod.metadata.uid.as_ref()) {
            let pod = pod.metadata.name.clone().unwrap_or_default();
            return Err(VolumeError::NotOwner { namespace: namespace.into(), claim: name.into(), pod });
        }
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        if once::once(claim)
            && let Some(holder) = self.once.holder(namespace, name, pod_name)
        {
            return Err(VolumeError::ReadWriteOncePod { claim: name.into(), holder: holder.into() });
        }
        Ok(claim)
    }

    /// The volume `claim` is bound to, or what the node must allow for a claim whose class
    /// waits for its first consumer. Any other claim not bound yet keeps the pod waiting,
    /// as kube-scheduler's "immediate" claims do: one that names its volume already, or
    /// whose class is missing or binds at once.
    fn standing(&self, claim: &'a PersistentVolumeClaim, name: &str) -> Result<Standing<'a>, VolumeError> {
        let volume_name = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty());
        let completed = claim.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(BIND_COMPLETED));
        let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
        match (volume_name, completed) {
            (Some(volume), _) if phase == Some("Lost") => {
                Err(VolumeError::Lost { claim: name.into(), volume: volume.into() })
            }
            (Some(volume), true) => {
                self.volumes.get(volume).copied().map(Standing::Bound).ok_or(VolumeError::VolumeMissing)
            }
            (Some(_), false) => Err(VolumeError::Unbound),
            (None, _) => {
                let class =
                    class_of(&claim.metadata, claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()));
                match self.classes.get(class.as_str()) {
                    Some(class) if waits_for_consumer(class) => Ok(Standing::Delayed(self.delayed(claim, class)?)),
                    _ => Err(VolumeError::Unbound),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
