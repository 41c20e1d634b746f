//! Devices given back: a claim allocated for pods that are not bound, whose gang is not
//! being bound and was not placed this cycle, holds devices no pod uses. That happens when a
//! leader stops between a gang's claim writes and its binds, or when a write's answer was
//! lost. At the end of each cycle such claims lose their allocation, as kube-scheduler's DRA
//! PostFilter does for a pod it cannot place, so the gang is placed afresh (anywhere) and
//! the devices are free for others meanwhile. A claim made for a pod's extended resources
//! is deleted; a new one is made when the pod is placed.
//!
//! Given back only when every reservation is for a pod of that gang that is not bound, or for
//! the gang's PodGroup, or there is none; never a claim a bound pod uses; never a claim
//! without the delete-protection finalizer every scheduler adds when it allocates (one
//! allocated by hand stays as it is). The decision is pure, over the cache; the loop writes
//! it through the writer, as claim releases.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::convert::allocation::FINALIZER;
use crate::convert::assemble::{ClusterView, gang_key};
use crate::convert::dra::{ClaimIndex, EXTENDED_CLAIM_ANNOTATION};
use crate::engine::dra::model::ClaimKey;
use crate::engine::model::GangKey;
use crate::k8s::write::claims::Release;

fn terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// The names of the claims `pod` uses: its own (named or made from a template) and the one
/// for its extended resources that its status names.
fn claims_named(pod: &Pod) -> Vec<&str> {
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    let mut names = Vec::new();
    for entry in pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).into_iter().flatten() {
        let name = match &entry.resource_claim_name {
            Some(name) => Some(name.as_str()),
            None => statuses
                .and_then(|s| s.iter().find(|s| s.name == entry.name))
                .and_then(|s| s.resource_claim_name.as_deref()),
        };
        names.extend(name);
    }
    if let Some(extended) = pod.status.as_ref().and_then(|s| s.extended_resource_claim_status.as_ref()) {
        names.push(extended.resource_claim_name.as_str());
    }
    names
}

/// The releases that give back devices held for pods of this scheduler that are not bound,
/// whose gangs are not in `busy` (being bound, placed this cycle).
pub fn give_back(view: &ClusterView<'_>, scheduler_name: &str, busy: &HashSet<GangKey>) -> Vec<Release> {
    let index = ClaimIndex::new(&view.resource_claims);
    let mut pods_by_uid: HashMap<&str, &Pod> = HashMap::new();
    let mut in_use: HashSet<(&str, &str)> = HashSet::new();
    for pod in &view.pods {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            pods_by_uid.insert(uid, pod);
        }
        if view.node_of(pod).is_some() && !terminal(pod) {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            in_use.extend(claims_named(pod).into_iter().map(|name| (namespace, name)));
        }
    }
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    let mut releases = Vec::new();
    for pod in &view.pods {
        let ours = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
        if !ours || view.node_of(pod).is_some() || terminal(pod) {
            continue;
        }
        let gang = gang_key(pod);
        if busy.contains(&gang) {
            continue;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut candidates: Vec<&ResourceClaim> =
            claims_named(pod).into_iter().filter_map(|name| index.by_name.get(&(namespace, name)).copied()).collect();
        candidates.extend(index.extended_of(pod));
        for claim in candidates {
            let name = claim.metadata.name.as_deref().unwrap_or("");
            if in_use.contains(&(namespace, name)) || !seen.insert((namespace, name)) {
                continue;
            }
            if let Some(release) = release_of(claim, pod, &gang, &pods_by_uid) {
                releases.push(release);
            }
        }
    }
    releases
}

/// What to do with one claim of `pod` (of `gang`), if it holds devices for nobody who runs.
fn release_of(claim: &ResourceClaim, pod: &Pod, gang: &GangKey, pods: &HashMap<&str, &Pod>) -> Option<Release> {
    let meta = &claim.metadata;
    let status = claim.status.as_ref();
    let allocated = status.is_some_and(|s| s.allocation.is_some());
    let protected = meta.finalizers.iter().flatten().any(|f| f == FINALIZER);
    let extended = meta.annotations.as_ref().is_some_and(|a| a.contains_key(EXTENDED_CLAIM_ANNOTATION))
        && meta.owner_references.iter().flatten().any(|o| o.kind == "Pod" && Some(&o.uid) == pod.metadata.uid.as_ref());
    if !(extended || allocated && protected) {
        return None;
    }
    let reserved = status.and_then(|s| s.reserved_for.as_ref());
    let mut remove = Vec::new();
    for consumer in reserved.into_iter().flatten() {
        let of_gang = match consumer.resource.as_str() {
            "pods" => pods
                .get(consumer.uid.as_str())
                .is_some_and(|p| p.spec.as_ref().is_none_or(|s| s.node_name.is_none()) && gang_key(p) == *gang),
            "podgroups" => consumer.name == gang.name,
            _ => false,
        };
        if !of_gang {
            return None;
        }
        remove.push(consumer.uid.clone());
    }
    let key = ClaimKey {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    };
    Some(Release { claim: key, remove, deallocate: allocated && protected, delete: extended })
}
