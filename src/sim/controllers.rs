//! The cluster's other parts, as the simulator plays them: the resourceclaim controller
//! (a claim for every template a pod names, before the first cycle) and the API server's
//! side of binding (pods get their node, claims their allocation and reservation, a claim
//! is made for extended resources served by DRA).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::PodResourceClaimStatus;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::convert::allocation;
use crate::convert::assemble::ClusterObjects;
use crate::convert::dra::POD_CLAIM_NAME_ANNOTATION;
use crate::convert::objects::touch;
use crate::engine::CycleOutcome;
use crate::engine::model::Snapshot;

/// An object's namespace ("default" when it names none) and name.
pub(super) fn key_of(meta: &ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_else(|| "default".into()), meta.name.clone().unwrap_or_default())
}

/// What the resourceclaim controller does: a claim for each template a pod names (named
/// `<pod>-<entry>`, owned by the pod, annotated with the entry), recorded in the pod's
/// `status.resourceClaimStatuses`.
pub fn create_template_claims(objects: &mut ClusterObjects) {
    let templates: HashMap<(String, String), usize> =
        objects.resource_claim_templates.iter().enumerate().map(|(i, t)| (key_of(&t.metadata), i)).collect();
    let existing: std::collections::HashSet<(String, String)> =
        objects.resource_claims.iter().map(|c| key_of(&c.metadata)).collect();
    let mut created = Vec::new();
    for pod in objects.pods.iter_mut() {
        let (namespace, pod_name) = key_of(&pod.metadata);
        let Some(spec) = pod.spec.as_ref() else { continue };
        let mut statuses = Vec::new();
        for entry in spec.resource_claims.iter().flatten() {
            let Some(template) = &entry.resource_claim_template_name else { continue };
            let Some(&t) = templates.get(&(namespace.clone(), template.clone())) else { continue };
            let already = pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .is_some_and(|s| s.iter().any(|s| s.name == entry.name));
            if already {
                continue;
            }
            let name = format!("{pod_name}-{}", entry.name);
            if !existing.contains(&(namespace.clone(), name.clone())) {
                let Some(template) = objects.resource_claim_templates[t].spec.as_ref() else { continue };
                let mut meta = template.metadata.clone().unwrap_or_default();
                meta.name = Some(name.clone());
                meta.namespace = Some(namespace.clone());
                meta.annotations.get_or_insert_default().insert(POD_CLAIM_NAME_ANNOTATION.into(), entry.name.clone());
                meta.owner_references = pod.metadata.uid.as_ref().map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: pod_name.clone(),
                        uid: uid.clone(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]
                });
                meta.resource_version = Some("sim-claim".into());
                created.push(ResourceClaim { metadata: meta, spec: template.spec.clone(), status: None });
            }
            statuses.push(PodResourceClaimStatus { name: entry.name.clone(), resource_claim_name: Some(name) });
        }
        if !statuses.is_empty() {
            let status = pod.status.get_or_insert_default();
            status.resource_claim_statuses.get_or_insert_default().extend(statuses);
        }
    }
    objects.resource_claims.extend(created);
}

/// Binds what the cycle placed, as the binder would: the pods' nodeName, the claims'
/// allocation and reservation, a claim for extended resources served by DRA.
pub fn apply(objects: &mut ClusterObjects, snapshot: &Snapshot, outcome: &CycleOutcome) -> usize {
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for (i, pod) in objects.pods.iter().enumerate() {
        index.insert(key_of(&pod.metadata), i);
    }
    let claim_index: HashMap<(String, String), usize> =
        objects.resource_claims.iter().enumerate().map(|(i, c)| (key_of(&c.metadata), i)).collect();
    let mut count = 0;
    for placement in &outcome.placements {
        for claim in &placement.claims {
            let pod_uid = index
                .get(&(claim.pod.namespace.clone(), claim.pod.name.clone()))
                .and_then(|&i| objects.pods[i].metadata.uid.clone())
                .unwrap_or_default();
            let reservation = allocation::reserved_for(&claim.pod, &pod_uid);
            if claim.claim.name.is_empty() {
                // Extended resources: the claim is made now, allocated and reserved.
                let Some(alloc) = &claim.allocation else { continue };
                // A GPU fraction's claim the pod names by an entry of its spec is recorded
                // there, as the binder records it.
                let pod = index.get(&(claim.pod.namespace.clone(), claim.pod.name.clone())).copied();
                let entry =
                    pod.and_then(|i| crate::convert::dra::fraction_claim_entry(&objects.pods[i])).map(str::to_string);
                let mut object = allocation::extended_claim(&claim.pod, &pod_uid, claim, entry.as_deref());
                let name = format!("{}-{}", claim.pod.name, entry.as_deref().unwrap_or("extended-resources"));
                object.metadata.name = Some(name.clone());
                object.metadata.generate_name = None;
                if let (Some(i), Some(entry)) = (pod, entry) {
                    let status = PodResourceClaimStatus { name: entry, resource_claim_name: Some(name.clone()) };
                    objects.pods[i]
                        .status
                        .get_or_insert_default()
                        .resource_claim_statuses
                        .get_or_insert_default()
                        .push(status);
                }
                touch(&mut object.metadata);
                object.status = Some(ResourceClaimStatus {
                    allocation: Some(allocation::allocation_result(&snapshot.dra, alloc, &claim.pod.to_string(), None)),
                    reserved_for: Some(vec![reservation]),
                    devices: None,
                });
                let status = allocation::extended_status(claim, &name);
                if let Some(&i) = index.get(&(claim.pod.namespace.clone(), claim.pod.name.clone()))
                    && !status.request_mappings.is_empty()
                {
                    objects.pods[i].status.get_or_insert_default().extended_resource_claim_status = Some(status);
                }
                objects.resource_claims.push(object);
                continue;
            }
            let Some(&c) = claim_index.get(&(claim.claim.namespace.clone(), claim.claim.name.clone())) else {
                continue;
            };
            let object = &mut objects.resource_claims[c];
            let status = object.status.get_or_insert_default();
            if let Some(alloc) = &claim.allocation {
                status.allocation =
                    Some(allocation::allocation_result(&snapshot.dra, alloc, &claim.claim.to_string(), None));
                object.metadata.finalizers.get_or_insert_default().push(allocation::FINALIZER.into());
            }
            let status = object.status.get_or_insert_default();
            status.reserved_for.get_or_insert_default().push(reservation);
            touch(&mut object.metadata);
        }
        for (key, node) in &placement.pods {
            if let Some(&i) = index.get(&(key.namespace.clone(), key.name.clone()))
                && let Some(spec) = objects.pods[i].spec.as_mut()
            {
                spec.node_name = Some(snapshot.nodes[*node as usize].name.clone());
                // It starts as it is bound: its runtime bound counts from now.
                objects.pods[i].status.get_or_insert_default().start_time =
                    Some(crate::convert::status::k8s_time(snapshot.now));
                // Bound as the scheduler binds it: marked when it runs opportunistically.
                if placement.opportunistic.is_some() {
                    objects.pods[i]
                        .metadata
                        .annotations
                        .get_or_insert_default()
                        .insert(crate::convert::view::OPPORTUNISTIC_ANNOTATION.into(), "true".into());
                }
                touch(&mut objects.pods[i].metadata);
                count += 1;
            }
        }
    }
    count
}
