//! The claims of a gang's transaction: every allocation and reservation is written before
//! any pod is bound, and undone when the gang cannot stand.
//!
//! Order per claim, as kube-scheduler does it: create the claim (only the one for extended
//! resources), add the `resource.kubernetes.io/delete-protection` finalizer, then write
//! `status.allocation` and `status.reservedFor` together, with optimistic concurrency (a
//! conflict is re-read and retried; a claim allocated by someone else meanwhile fails the
//! gang). Both writes are merge patches that carry the resourceVersion they were built
//! from, starting from the claim as the cache holds it: two requests per claim, no read
//! unless a conflict calls for one, and no field they do not name touched (the cache
//! keeps claims without their managedFields and last-applied annotation). The undo removes what this transaction added: reservations, then the allocation
//! and the finalizer of a claim it allocated, and a claim it created.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim, ResourceClaimConsumerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::convert::allocation::FINALIZER;
use crate::convert::dra::POD_CLAIM_NAME_ANNOTATION;
use crate::engine::dra::model::ClaimKey;
use crate::engine::model::PodKey;
use crate::k8s::client::request::{Operation, RequestError, Retry, within};

/// What one claim of the gang needs written.
#[derive(Clone, Debug)]
pub struct ClaimWrite {
    /// The claim; its name is empty for a claim to create for `pod`'s extended resources.
    pub claim: ClaimKey,
    /// The pod whose placement allocated it (or the first of its consumers).
    pub pod: PodKey,
    /// The allocation to write; None when the claim is allocated and only reserved here.
    pub allocation: Option<AllocationResult>,
    /// Who the claim is reserved for: the gang's pods using it, or its PodGroup.
    pub consumers: Vec<ResourceClaimConsumerReference>,
    /// For extended resources: the claim to create, and the pod status that names it.
    pub create: Option<(ResourceClaim, k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus)>,
    /// The claim as the watch last showed it: the first attempt starts from it rather than
    /// from a fresh read.
    pub cached: Option<ResourceClaim>,
}

/// What the transaction did to one claim, so that it can be undone.
#[derive(Clone, Debug)]
pub struct ClaimDone {
    pub namespace: String,
    pub name: String,
    pub allocated: bool,
    pub added_finalizer: bool,
    pub created: bool,
    pub reserved: Vec<String>,
}

const ATTEMPTS: usize = 5;

/// A read-modify-write worth repeating: someone wrote the claim meanwhile, or the server
/// failed in a way the classifier calls transient (replaces carry a resourceVersion).
fn again(e: &RequestError) -> bool {
    e.is_conflict() || e.is_transient(Operation::Idempotent)
}

/// Writes `write`; on error nothing of it stays (what it did is undone before returning).
/// `lose_answer` (a test's fault) drops the answer of the first status write, which lands.
pub async fn write(
    client: &kube::Client,
    retry: Retry,
    write: &ClaimWrite,
    lose_answer: bool,
) -> Result<ClaimDone, String> {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &write.claim.namespace);
    let mut done = ClaimDone {
        namespace: write.claim.namespace.clone(),
        name: write.claim.name.clone(),
        allocated: false,
        added_finalizer: false,
        created: false,
        reserved: Vec::new(),
    };
    let result = write_steps(client, retry.deadline, &api, write, &mut done, lose_answer).await;
    if let Err(e) = result {
        undo(client, retry, &done, &HashSet::new()).await;
        return Err(e);
    }
    Ok(done)
}

async fn write_steps(
    client: &kube::Client,
    deadline: Duration,
    api: &Api<ResourceClaim>,
    write: &ClaimWrite,
    done: &mut ClaimDone,
    lose_answer: bool,
) -> Result<(), String> {
    let mut created = None;
    if let Some((claim, _)) = &write.create {
        let claim = within(deadline, api.create(&PostParams::default(), claim))
            .await
            .map_err(|e| format!("creating the claim for the extended resources of pod {}: {e}", write.pod))?;
        done.name = claim.metadata.name.clone().unwrap_or_default();
        done.created = true;
        created = Some(claim);
    }
    let name = done.name.clone();
    let shown = format!("{}/{name}", done.namespace);
    let mut added: Vec<String> = Vec::new();
    // The first attempt starts from what the watch (or the create) showed; a conflict, or
    // an answer that never came, reads the claim afresh.
    let mut known = created.or_else(|| write.cached.clone()).filter(|c| c.metadata.resource_version.is_some());
    for attempt in 1..=ATTEMPTS {
        let claim = match known.take() {
            Some(claim) => claim,
            None => {
                within(deadline, api.get(&name)).await.map_err(|e| format!("reading ResourceClaim {shown}: {e}"))?
            }
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("ResourceClaim {shown} is being deleted"));
        }
        let current = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
        match (&write.allocation, current) {
            // An allocation equal to ours is ours: an earlier attempt landed and its answer
            // was lost.
            (Some(ours), Some(theirs)) if same_allocation(ours, theirs) => {}
            (Some(_), Some(_)) => return Err(format!("ResourceClaim {shown} got allocated elsewhere in the meantime")),
            (None, None) => return Err(format!("ResourceClaim {shown} is no longer allocated")),
            _ => {}
        }
        // Patches that name the resourceVersion they were built from: written only over
        // exactly that claim (a conflict otherwise), and touching no field they do not name.
        let mut version = claim.metadata.resource_version.clone();
        if write.allocation.is_some() && !claim.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER) {
            let mut finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
            finalizers.push(FINALIZER.to_string());
            let patch = Patch::Merge(json!({"metadata": {"resourceVersion": version, "finalizers": finalizers}}));
            match within(deadline, api.patch(&name, &PatchParams::default(), &patch)).await {
                Ok(updated) => {
                    done.added_finalizer = true;
                    version = updated.metadata.resource_version;
                }
                Err(e) if again(&e) && attempt < ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(50 * attempt as u64)).await;
                    continue;
                }
                Err(e) => return Err(format!("adding the finalizer to ResourceClaim {shown}: {e}")),
            }
        }
        let mut reserved = claim.status.and_then(|s| s.reserved_for).unwrap_or_default();
        for consumer in &write.consumers {
            if !reserved.iter().any(|r| r.uid == consumer.uid) {
                reserved.push(consumer.clone());
                // Kept across attempts: one whose answer was lost may have added it.
                if !added.contains(&consumer.uid) {
                    added.push(consumer.uid.clone());
                }
            }
        }
        let mut status = json!({"reservedFor": reserved});
        if let Some(allocation) = &write.allocation {
            status["allocation"] = json!(allocation);
        }
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": version}, "status": status}));
        let written = match within(deadline, api.patch_status(&name, &PatchParams::default(), &patch)).await {
            Ok(_) if lose_answer && attempt == 1 => Err(crate::k8s::client::request::RequestError::TimedOut(deadline)),
            result => result,
        };
        match written {
            Ok(_) => {
                done.allocated = write.allocation.is_some();
                done.reserved = std::mem::take(&mut added);
                break;
            }
            Err(e) if again(&e) && attempt < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(50 * attempt as u64)).await;
            }
            Err(e) => return Err(format!("writing the allocation and reservation of ResourceClaim {shown}: {e}")),
        }
    }
    // A GPU fraction's claim the pod names by an entry of its spec is recorded there, as the
    // resourceclaim controller records a claim it makes from a template: the kubelet prepares
    // the claims a pod's spec and status name. (The controller, finding the claim it would
    // have made, records the same.)
    let entry =
        write.create.as_ref().and_then(|(c, _)| c.metadata.annotations.as_ref()?.get(POD_CLAIM_NAME_ANNOTATION));
    if let Some(entry) = entry {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &write.pod.namespace);
        let patch = Patch::Strategic(
            json!({"status": {"resourceClaimStatuses": [{"name": entry, "resourceClaimName": name}]}}),
        );
        within(deadline, pods.patch_status(&write.pod.name, &PatchParams::default(), &patch))
            .await
            .map_err(|e| format!("recording ResourceClaim {shown} in pod {} under {entry}: {e}", write.pod))?;
    }
    if let Some((_, status)) = write.create.as_ref().filter(|(_, status)| !status.request_mappings.is_empty()) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &write.pod.namespace);
        let mut status = status.clone();
        status.resource_claim_name = name.clone();
        let patch = Patch::Merge(json!({"status": {"extendedResourceClaimStatus": status}}));
        within(deadline, pods.patch_status(&write.pod.name, &PatchParams::default(), &patch))
            .await
            .map_err(|e| format!("recording ResourceClaim {shown} in pod {}: {e}", write.pod))?;
    }
    Ok(())
}

/// Whether two allocations give the same devices on the same nodes (the order of the results
/// and the timestamp aside).
fn same_allocation(a: &AllocationResult, b: &AllocationResult) -> bool {
    let devices = |r: &AllocationResult| {
        let mut results: Vec<(String, String, String, String)> = r
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|d| (d.request.clone(), d.driver.clone(), d.pool.clone(), d.device.clone()))
            .collect();
        results.sort();
        results
    };
    a.node_selector == b.node_selector && devices(a) == devices(b)
}

/// Removes what the transaction added to one claim; reservations of the pods in `keep`
/// (bound pods, which hold the claim now) stay. A claim left with no reservation loses the
/// allocation and finalizer this transaction gave it; a claim it created is deleted.
pub async fn undo(client: &kube::Client, retry: Retry, done: &ClaimDone, keep: &HashSet<String>) {
    if done.name.is_empty() {
        return;
    }
    let remove: Vec<String> = done.reserved.iter().filter(|uid| !keep.contains(*uid)).cloned().collect();
    let release = Release {
        claim: ClaimKey { namespace: done.namespace.clone(), name: done.name.clone() },
        remove,
        deallocate: done.allocated,
        delete: done.created,
    };
    if let Err(e) = apply_release(client, retry, &release).await {
        tracing::warn!(claim = %release.claim, error = %e, "failed to undo the claim's allocation; released later");
    }
}

/// Reservations to drop from a claim, and what to do when none is left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub claim: ClaimKey,
    /// Consumer UIDs whose reservations go.
    pub remove: Vec<String>,
    /// With no reservation left: clear the allocation and remove the finalizer.
    pub deallocate: bool,
    /// With no reservation left: delete the claim (one this scheduler created).
    pub delete: bool,
}

/// Drops the reservations of `release` and, if none is left, deallocates (and deletes) the
/// claim as it says. Every request runs under the deadline; a failure is returned, and the
/// next cycle decides again.
pub async fn apply_release(client: &kube::Client, retry: Retry, release: &Release) -> Result<(), RequestError> {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &release.claim.namespace);
    let name = &release.claim.name;
    let deadline = retry.deadline;
    for attempt in 1..=ATTEMPTS {
        let mut claim = match within(deadline, api.get(name)).await {
            Ok(claim) => claim,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) if again(&e) && attempt < ATTEMPTS => continue,
            Err(e) => return Err(e),
        };
        let status = claim.status.get_or_insert_default();
        let reserved = status.reserved_for.get_or_insert_default();
        let before = reserved.len();
        reserved.retain(|r| !release.remove.contains(&r.uid));
        let now_unused = reserved.is_empty();
        let deallocate = now_unused && release.deallocate && status.allocation.is_some();
        if deallocate {
            status.allocation = None;
            // What the drivers reported of the devices goes with them.
            status.devices = None;
        }
        if now_unused {
            status.reserved_for = None;
        }
        if before != status.reserved_for.as_ref().map_or(0, Vec::len) || deallocate {
            match within(deadline, api.replace_status(name, &PostParams::default(), &claim)).await {
                Ok(_) => {}
                Err(e) if again(&e) && attempt < ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
        if now_unused && release.deallocate {
            remove_finalizer(&api, deadline, name).await?;
        }
        if now_unused && release.delete {
            match within(deadline, api.delete(name, &DeleteParams::default())).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(());
    }
    Ok(())
}

/// Removes Muster's (and kube-scheduler's) finalizer from a claim that holds nothing.
pub async fn remove_finalizer(api: &Api<ResourceClaim>, deadline: Duration, name: &str) -> Result<(), RequestError> {
    for attempt in 1..=ATTEMPTS {
        let mut claim = match within(deadline, api.get(name)).await {
            Ok(claim) => claim,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) if again(&e) && attempt < ATTEMPTS => continue,
            Err(e) => return Err(e),
        };
        let before = claim.metadata.finalizers.as_ref().map_or(0, Vec::len);
        claim.metadata.finalizers.get_or_insert_default().retain(|f| f != FINALIZER);
        if claim.metadata.finalizers.as_ref().map_or(0, Vec::len) == before {
            return Ok(());
        }
        match within(deadline, api.replace(name, &PostParams::default(), &claim)).await {
            Ok(_) => return Ok(()),
            Err(e) if again(&e) && attempt < ATTEMPTS => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The claim writes of a placed gang, and the claims to assume in the cache meanwhile:
/// one write per claim (a claim shared by several of the gang's pods is allocated once and
/// reserved for all of them), one per pod for the claims of extended resources (recorded
/// under the pod's `spec.resourceClaims` entry that `entry` gives, if any: a GPU fraction's).
pub fn plan(
    dra: &crate::engine::dra::model::DraSnapshot,
    claims: &[crate::engine::claims::ClaimPlacement],
    uids: &std::collections::HashMap<PodKey, String>,
    cached: impl Fn(&ClaimKey) -> Option<ResourceClaim>,
    entry: impl Fn(&PodKey) -> Option<String>,
) -> (Vec<ClaimWrite>, Vec<(PodKey, ResourceClaim)>) {
    use crate::convert::allocation::{allocation_result, extended_claim, extended_status, reserved_for};
    let mut writes: Vec<ClaimWrite> = Vec::new();
    let mut assumed = Vec::new();
    for placement in claims {
        let uid = uids.get(&placement.pod).cloned().unwrap_or_default();
        let consumer = match &placement.group {
            Some((name, group_uid)) => ResourceClaimConsumerReference {
                api_group: Some("scheduling.k8s.io".into()),
                resource: "podgroups".into(),
                name: name.clone(),
                uid: group_uid.clone(),
            },
            None => reserved_for(&placement.pod, &uid),
        };
        if placement.claim.name.is_empty() {
            let Some(allocation) = &placement.allocation else { continue };
            let result = allocation_result(dra, allocation, &placement.pod.to_string(), None);
            let create = extended_claim(&placement.pod, &uid, placement, entry(&placement.pod).as_deref());
            let mut held = create.clone();
            held.status = Some(k8s_openapi::api::resource::v1::ResourceClaimStatus {
                allocation: Some(result.clone()),
                reserved_for: Some(vec![consumer.clone()]),
                devices: None,
            });
            assumed.push((placement.pod.clone(), held));
            writes.push(ClaimWrite {
                claim: placement.claim.clone(),
                pod: placement.pod.clone(),
                allocation: Some(result),
                consumers: vec![consumer],
                create: Some((create, extended_status(placement, ""))),
                cached: None,
            });
            continue;
        }
        let index = match writes.iter().position(|w| w.claim == placement.claim) {
            Some(i) => i,
            None => {
                writes.push(ClaimWrite {
                    claim: placement.claim.clone(),
                    pod: placement.pod.clone(),
                    allocation: None,
                    consumers: Vec::new(),
                    create: None,
                    cached: cached(&placement.claim),
                });
                writes.len() - 1
            }
        };
        let write = &mut writes[index];
        if let Some(allocation) = &placement.allocation {
            let result = allocation_result(dra, allocation, &placement.claim.to_string(), None);
            if let Some(mut held) = write.cached.clone() {
                held.status.get_or_insert_default().allocation = Some(result.clone());
                assumed.push((placement.pod.clone(), held));
            }
            write.allocation = Some(result);
            write.pod = placement.pod.clone();
        }
        if !write.consumers.iter().any(|c| c.uid == consumer.uid) {
            write.consumers.push(consumer);
        }
    }
    (writes, assumed)
}
