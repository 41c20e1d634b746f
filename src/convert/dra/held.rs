//! The devices a running pod holds alone: those of its claims reserved for it and nobody
//! else (its own, and the one made for its extended resources or GPU fraction), which an
//! eviction gives back.

use k8s_openapi::api::core::v1::Pod;

use super::claims::ClaimIndex;
use super::snapshot::{DeviceIndex, claim_uses, device_index};
use crate::engine::dra::model::{DeviceUse, DraSnapshot};

/// Looks up running pods' own devices; built once per snapshot.
pub struct HeldDevices<'a> {
    index: DeviceIndex<'a>,
    claims: &'a ClaimIndex<'a>,
}

impl<'a> HeldDevices<'a> {
    pub fn new(dra: &'a DraSnapshot, claims: &'a ClaimIndex<'a>) -> HeldDevices<'a> {
        HeldDevices { index: device_index(dra), claims }
    }

    /// The devices of the pod's claims that are reserved for it alone.
    pub fn of(&self, pod: &Pod) -> Vec<DeviceUse> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let status = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
        let generated = status.into_iter().flatten().filter_map(|c| c.resource_claim_name.as_deref());
        let spec = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
        let named = spec.into_iter().flatten().filter_map(|c| c.resource_claim_name.as_deref());
        let mut uses = Vec::new();
        let mut claims: Vec<_> =
            generated.chain(named).filter_map(|name| self.claims.by_name.get(&(namespace, name)).copied()).collect();
        // The claim made for its extended resources or fraction, unless its status names it.
        if let Some(extended) = self.claims.extended_of(pod)
            && !claims.iter().any(|c| std::ptr::eq(*c, extended))
        {
            claims.push(extended);
        }
        for claim in claims {
            let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref());
            let alone = reserved.is_some_and(|r| r.len() == 1 && r[0].uid == uid);
            if alone {
                uses.extend(claim_uses(&self.index, claim));
            }
        }
        uses
    }
}
