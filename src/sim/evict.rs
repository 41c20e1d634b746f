//! Evictions in the simulator, as the cluster would carry them out: the API server deletes
//! the pods, the resourceclaim controller deletes the claims made for them (so their
//! devices are free), the pods' controller recreates them under the same names, pending,
//! for the next cycle, and the victim's PodGroup records the eviction as the scheduler
//! writes it.

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Serialize;

use crate::convert::assemble::ClusterObjects;
use crate::convert::objects::touch;
use crate::convert::status::k8s_time;
use crate::engine::model::GangKind;
use crate::engine::preempt::Eviction;

/// One evicted pod, for the JSON output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EvictionResult {
    pub namespace: String,
    pub name: String,
    /// The victim's gang as `namespace/name`.
    pub gang: String,
    /// `Reclaimed` or `Preempted`.
    pub reason: String,
    /// The gang the room was made for, as `namespace/name`.
    pub preemptor: String,
    /// The cycle that decided it, from 1.
    pub cycle: usize,
}

fn is(meta: &ObjectMeta, namespace: &str, name: &str) -> bool {
    meta.namespace.as_deref().unwrap_or("default") == namespace && meta.name.as_deref() == Some(name)
}

/// The victim's Muster PodGroup gets the `Evicted` condition at `now`, as the scheduler's
/// status writer gives it: the preemption delay and the return after an eviction count
/// from it.
fn record(objects: &mut ClusterObjects, eviction: &Eviction, now: i64) {
    let gang = &eviction.gang;
    if gang.kind != GangKind::Muster {
        return;
    }
    let Some(group) = objects.muster_groups.iter_mut().find(|g| is(&g.metadata, &gang.namespace, &gang.name)) else {
        return;
    };
    let status = group.status.get_or_insert_with(Default::default);
    status.conditions.retain(|c| c.type_ != "Evicted");
    status.conditions.push(Condition {
        type_: "Evicted".into(),
        status: "True".into(),
        reason: eviction.reason.as_str().into(),
        message: format!("evicted ({}) to make room for {}", eviction.reason.as_str(), eviction.preemptor),
        last_transition_time: k8s_time(now),
        observed_generation: None,
    });
    touch(&mut group.metadata);
}

/// Carries out a cycle's evictions, decided at `now`; returns one result per pod evicted.
pub fn evict(objects: &mut ClusterObjects, evictions: &[Eviction], cycle: usize, now: i64) -> Vec<EvictionResult> {
    let mut results = Vec::new();
    let mut uids: HashSet<String> = HashSet::new();
    let mut own_claims: HashSet<(String, String)> = HashSet::new();
    for eviction in evictions {
        record(objects, eviction, now);
        for key in &eviction.pods {
            let Some(pod) = objects.pods.iter_mut().find(|p| is(&p.metadata, &key.namespace, &key.name)) else {
                continue;
            };
            if let Some(spec) = pod.spec.as_mut() {
                spec.node_name = None;
            }
            // Recreated by its controller: no marker of how the last one was bound.
            if let Some(annotations) = pod.metadata.annotations.as_mut() {
                annotations.remove(crate::convert::view::OPPORTUNISTIC_ANNOTATION);
            }
            if let Some(status) = pod.status.as_mut() {
                status.start_time = None;
                if let Some(extended) = status.extended_resource_claim_status.take() {
                    own_claims.insert((key.namespace.clone(), extended.resource_claim_name));
                }
                for claim in status.resource_claim_statuses.iter().flatten() {
                    if let Some(name) = &claim.resource_claim_name {
                        own_claims.insert((key.namespace.clone(), name.clone()));
                    }
                }
            }
            touch(&mut pod.metadata);
            uids.extend(pod.metadata.uid.clone());
            results.push(EvictionResult {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                gang: format!("{}/{}", eviction.gang.namespace, eviction.gang.name),
                reason: eviction.reason.as_str().to_string(),
                preemptor: format!("{}/{}", eviction.preemptor.namespace, eviction.preemptor.name),
                cycle,
            });
        }
    }
    // Extended-resource claims go with their pod; a claim made from a template for the
    // pod is deleted and made again, unallocated; any other claim only loses the pod's
    // reservation (and its allocation once nobody holds it).
    objects.resource_claims.retain(|c| {
        let key = (
            c.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            c.metadata.name.clone().unwrap_or_default(),
        );
        !(own_claims.contains(&key) && key.1.ends_with("-extended-resources"))
    });
    for claim in &mut objects.resource_claims {
        let key = (
            claim.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        let Some(status) = claim.status.as_mut() else { continue };
        let before = status.reserved_for.as_ref().map_or(0, Vec::len);
        if let Some(reserved) = status.reserved_for.as_mut() {
            reserved.retain(|r| !uids.contains(&r.uid));
        }
        let after = status.reserved_for.as_ref().map_or(0, Vec::len);
        if after == before && !own_claims.contains(&key) {
            continue;
        }
        if after == 0 {
            status.reserved_for = None;
            status.allocation = None;
            claim.metadata.finalizers = None;
        }
        touch(&mut claim.metadata);
    }
    results
}
