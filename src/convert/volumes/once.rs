//! Claims with access mode ReadWriteOncePod, as kube-scheduler's VolumeRestrictions reads
//! them: such a claim serves one pod at a time. A pod whose claim another pod already uses
//! (bound to a node and not finished) waits; among pods not yet placed that share one, the
//! oldest (then the first by name) goes first and the others wait, so that no cycle places
//! two of them at once.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

/// The access mode that gives a claim to one pod at a time.
const ONE_POD: &str = "ReadWriteOncePod";

/// Whether `claim` may serve one pod only.
pub fn once(claim: &PersistentVolumeClaim) -> bool {
    claim.spec.as_ref().and_then(|s| s.access_modes.as_ref()).is_some_and(|m| m.iter().any(|m| m == ONE_POD))
}

/// The claims a pod's volumes name: `persistentVolumeClaim` ones by name, ephemeral ones as
/// `<pod>-<volume>`.
pub fn claim_names(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().filter_map(move |v| match (&v.persistent_volume_claim, &v.ephemeral) {
        (Some(source), _) => Some(source.claim_name.clone()),
        (None, Some(_)) => Some(format!("{name}-{}", v.name)),
        (None, None) => None,
    })
}

/// The first inline volume of `pod` whose kind kube-scheduler's VolumeRestrictions checks
/// against the other pods of the node (the same disk mounted twice), which Muster does not
/// check yet: the field, for the pod's wait.
pub fn inline_disk_field(pod: &Pod) -> Option<&'static str> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().find_map(|v| {
        if v.gce_persistent_disk.is_some() {
            Some("spec.volumes[].gcePersistentDisk")
        } else if v.aws_elastic_block_store.is_some() {
            Some("spec.volumes[].awsElasticBlockStore")
        } else if v.iscsi.is_some() {
            Some("spec.volumes[].iscsi")
        } else if v.rbd.is_some() {
            Some("spec.volumes[].rbd")
        } else {
            None
        }
    })
}

/// Who uses each ReadWriteOncePod claim: a pod bound to a node, or, among those not
/// placed yet, the first in line.
#[derive(Default)]
pub(super) struct OncePods<'a> {
    bound: HashMap<(&'a str, String), &'a str>,
    first: HashMap<(&'a str, String), (i64, &'a str)>,
}

impl<'a> OncePods<'a> {
    pub(super) fn new(
        pods: &[&'a Pod],
        claims: &HashMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    ) -> OncePods<'a> {
        let mut users = OncePods::default();
        if !claims.values().any(|c| once(c)) {
            return users;
        }
        for &pod in pods {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            for claim in claim_names(pod) {
                if !claims.get(&(namespace, claim.as_str())).is_some_and(|c| once(c)) {
                    continue;
                }
                let key = (namespace, claim);
                if node.is_some() {
                    users.bound.insert(key, name);
                } else if pod.metadata.deletion_timestamp.is_none() {
                    let here = (pod.metadata.creation_timestamp.as_ref().map_or(i64::MAX, |t| t.0.as_second()), name);
                    let first = users.first.entry(key).or_insert(here);
                    *first = (*first).min(here);
                }
            }
        }
        users
    }

    /// The other pod that has the claim first, if any.
    pub(super) fn holder(&self, namespace: &str, claim: &str, pod: &str) -> Option<&'a str> {
        let key = (namespace, claim.to_string());
        let bound = self.bound.get(&key).copied().filter(|&p| p != pod);
        bound.or_else(|| self.first.get(&key).map(|&(_, p)| p).filter(|&p| p != pod))
    }
}
