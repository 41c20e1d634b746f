//! Claims whose pods are gone are released: their reservations for pods that were deleted,
//! replaced or finished are dropped, and a claim left reserved for nobody loses its
//! allocation (when it carries the scheduler's finalizer), so its devices are free again.
//!
//! The decisions are pure, over the cache; the scheduling loop writes them. The resourceclaim
//! controller of kube-controller-manager does the same; whichever comes first wins, and the
//! other finds nothing to do. A pod the cache has not seen is given a grace period first,
//! since its creation may simply not have reached this watch yet.

use std::collections::{HashMap, HashSet};

use crate::convert::allocation::FINALIZER;
use crate::convert::assemble::ClusterView;
use crate::engine::dra::model::ClaimKey;
use crate::k8s::write::claims::Release;

/// How long a reservation's pod may be missing from the cache before it is released.
pub const GRACE_SECONDS: i64 = 10;

#[derive(Default)]
pub struct ReleaseTracker {
    /// (claim, consumer UID) → when the consumer was first found missing.
    missing_since: HashMap<(ClaimKey, String), i64>,
}

impl ReleaseTracker {
    /// The releases due at `now`.
    pub fn check(&mut self, view: &ClusterView<'_>, now: i64) -> Vec<Release> {
        let pods: HashMap<(&str, &str), (&str, bool)> = view
            .pods
            .iter()
            .map(|p| {
                let terminal =
                    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
                (
                    (p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or("")),
                    (p.metadata.uid.as_deref().unwrap_or(""), terminal),
                )
            })
            .collect();
        let mut releases = Vec::new();
        let mut still_missing = HashSet::new();
        for claim in &view.resource_claims {
            let Some(reserved) = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()) else { continue };
            let namespace = claim.metadata.namespace.as_deref().unwrap_or("");
            let key =
                ClaimKey { namespace: namespace.to_string(), name: claim.metadata.name.clone().unwrap_or_default() };
            let mut remove = Vec::new();
            for consumer in reserved {
                let is_pod = consumer.resource == "pods" && consumer.api_group.as_deref().unwrap_or("").is_empty();
                if !is_pod {
                    continue;
                }
                match pods.get(&(namespace, consumer.name.as_str())) {
                    Some((uid, terminal)) if *uid == consumer.uid => {
                        if *terminal {
                            remove.push(consumer.uid.clone());
                        }
                    }
                    _ => {
                        let since = *self.missing_since.entry((key.clone(), consumer.uid.clone())).or_insert(now);
                        still_missing.insert((key.clone(), consumer.uid.clone()));
                        if now - since >= GRACE_SECONDS {
                            remove.push(consumer.uid.clone());
                        }
                    }
                }
            }
            if !remove.is_empty() {
                let deallocate = claim.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER);
                releases.push(Release { claim: key, remove, deallocate, delete: false });
            }
        }
        self.missing_since.retain(|k, _| still_missing.contains(k));
        releases
    }

    /// When the next release falls due, if any consumer is missing.
    pub fn next_due(&self) -> Option<i64> {
        self.missing_since.values().map(|since| since + GRACE_SECONDS).min()
    }
}
