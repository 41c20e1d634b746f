//! What each pod claims: its ResourceClaims and the extended resources a DeviceClass serves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim, PodResourceClaimStatus, PodSpec};
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::{Error, MAX_RESERVED_FOR, Result, node_selector};
use crate::engine::dra::model::{ClaimKey, ClaimNeed, DraSnapshot, ExistingAllocation, ExtendedRequest, PodClaim};
use crate::engine::model::PodDevices;
use crate::engine::resources::ResourceNames;
use crate::quantity::Quantity;

/// Claims by namespace and name, and claims for extended resources by the UID of the pod
/// that owns them.
pub struct ClaimIndex<'a> {
    pub by_name: HashMap<(&'a str, &'a str), &'a ResourceClaim>,
    pub extended_by_owner: HashMap<&'a str, &'a ResourceClaim>,
}

impl<'a> ClaimIndex<'a> {
    pub fn new(claims: &[&'a ResourceClaim]) -> ClaimIndex<'a> {
        let mut index = ClaimIndex { by_name: HashMap::new(), extended_by_owner: HashMap::new() };
        for claim in claims {
            let meta = &claim.metadata;
            index
                .by_name
                .insert((meta.namespace.as_deref().unwrap_or("default"), meta.name.as_deref().unwrap_or("")), *claim);
            if meta.annotations.as_ref().is_some_and(|a| a.contains_key(super::EXTENDED_CLAIM_ANNOTATION)) {
                for owner in meta.owner_references.iter().flatten().filter(|o| o.kind == "Pod") {
                    index.extended_by_owner.insert(owner.uid.as_str(), *claim);
                }
            }
        }
        index
    }

    /// The claim for `pod`'s extended resources that exists now: the one its status names,
    /// or one created for it whose name never reached its status (found by its owner).
    pub fn extended_of(&self, pod: &Pod) -> Option<&'a ResourceClaim> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let named = pod.status.as_ref().and_then(|s| s.extended_resource_claim_status.as_ref());
        named
            .and_then(|s| self.by_name.get(&(namespace, s.resource_claim_name.as_str())))
            .or_else(|| pod.metadata.uid.as_deref().and_then(|uid| self.extended_by_owner.get(uid)))
            .copied()
    }
}

/// What `pod` (not bound) claims: each of its claim entries resolved to the claim it
/// names, then the extended resources a DeviceClass serves and its GPU fraction; or why it
/// cannot be considered yet (a claim not created, missing, or in use elsewhere), which a
/// gang's blocked reason keeps in words.
pub fn pod_devices(
    pod: &Pod,
    index: &ClaimIndex<'_>,
    dra: &DraSnapshot,
    names: &mut ResourceNames,
    specs: &mut super::ClaimSpecs,
) -> Result<Option<PodDevices>> {
    let Some(spec) = pod.spec.as_ref() else { return Ok(None) };
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    let mut devices = PodDevices::default();
    let fraction_entry = super::fraction_claim_entry(pod);
    for entry in spec.resource_claims.iter().flatten() {
        // The claim of the pod's GPU fraction is made with the fraction's request (below), and
        // recorded under this entry, unless one made earlier for the pod is being given back.
        if Some(entry.name.as_str()) == fraction_entry {
            check_fraction_claim(pod, &entry.name, index, statuses)?;
            continue;
        }
        let Some((claim_name, private)) = claim_name_of(entry, statuses)? else { continue };
        devices.claims.push(pod_claim(pod, &entry.name, &claim_name, private, index, specs)?);
    }
    // Extended resources a DeviceClass serves. A pod that is not bound and still has a claim
    // for them from an earlier placement waits while that claim is given back (see
    // claim_giveback), so that no second claim holds devices beside it.
    if let Some(earlier) = index.extended_of(pod) {
        let meta = &earlier.metadata;
        let key = ClaimKey {
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
        };
        return Err(Error::ExtendedClaimHeld(key));
    }
    if !dra.extended_classes.is_empty() {
        devices.extended.extend(extended_requests(spec, dra, names)?);
    }
    devices.extended.extend(super::fraction::gpu_fraction(pod, dra, names)?);
    Ok((!devices.claims.is_empty() || !devices.extended.is_empty()).then_some(devices))
}

/// The entry of a pod's GPU fraction: fine when no claim is recorded for it, or the one
/// recorded is Muster's own for the pod; an error when it names a claim Muster did not make.
fn check_fraction_claim(
    pod: &Pod,
    entry: &str,
    index: &ClaimIndex<'_>,
    statuses: Option<&Vec<PodResourceClaimStatus>>,
) -> Result<()> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let recorded = statuses.and_then(|s| s.iter().find(|s| s.name == entry));
    let Some(name) = recorded.and_then(|s| s.resource_claim_name.as_deref()) else { return Ok(()) };
    match index.by_name.get(&(namespace, name)) {
        None => Ok(()),
        Some(claim) if index.extended_of(pod).is_some_and(|ours| std::ptr::eq(ours, *claim)) => Ok(()),
        Some(_) => {
            let claim = ClaimKey { namespace: namespace.to_string(), name: name.to_string() };
            Err(Error::FractionClaimNotMusters(claim))
        }
    }
}

/// The name of the claim a pod's claim entry stands for, and whether it was made for the
/// pod from a template (private); None when the controller decided no claim is needed.
fn claim_name_of(
    entry: &PodResourceClaim,
    statuses: Option<&Vec<PodResourceClaimStatus>>,
) -> Result<Option<(String, bool)>> {
    if let Some(name) = &entry.resource_claim_name {
        return Ok(Some((name.clone(), false)));
    }
    if entry.resource_claim_template_name.is_none() {
        return Err(Error::NoClaimNamed(entry.name.clone()));
    }
    match statuses.and_then(|s| s.iter().find(|s| s.name == entry.name)) {
        Some(status) => match &status.resource_claim_name {
            Some(name) => Ok(Some((name.clone(), true))),
            // The controller decided no claim is needed.
            None => Ok(None),
        },
        None => Err(Error::ClaimNotCreated {
            entry: entry.name.clone(),
            template: entry.resource_claim_template_name.clone().unwrap_or_default(),
        }),
    }
}

/// The claim `claim_name` that the pod's entry `entry` names, as the engine needs it: the
/// gang's when its PodGroup owns it, and either its allocation (if it has room for one more
/// consumer) or what must be allocated for it. An error when it is missing, deleted, or
/// another pod's.
fn pod_claim(
    pod: &Pod,
    entry: &str,
    claim_name: &str,
    private: bool,
    index: &ClaimIndex<'_>,
    specs: &mut super::ClaimSpecs,
) -> Result<PodClaim> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let pod_uid = pod.metadata.uid.as_deref();
    let key = ClaimKey { namespace: namespace.to_string(), name: claim_name.to_string() };
    let Some(claim) = index.by_name.get(&(namespace, claim_name)) else {
        return Err(Error::ClaimMissing(key));
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(Error::ClaimDeleted(key));
    }
    // A claim the controller made for the pod's PodGroup is the gang's, shared by its pods.
    let group = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "PodGroup" && o.api_version.starts_with("scheduling.k8s.io/"))
        .map(|o| (o.name.clone(), o.uid.clone()));
    let private = private && group.is_none();
    if private {
        let owned = claim.metadata.owner_references.iter().flatten().any(|o| Some(o.uid.as_str()) == pod_uid);
        if pod_uid.is_some() && !owned {
            return Err(Error::ClaimOfAnotherPod { claim: key, pod: format!("{namespace}/{pod_name}") });
        }
    }
    let status = claim.status.as_ref();
    let reserved = status.and_then(|s| s.reserved_for.as_ref()).map_or(0, Vec::len);
    let reserved_for_pod = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .any(|r| Some(r.uid.as_str()) == pod_uid || group.as_ref().is_some_and(|(_, uid)| *uid == r.uid));
    let need = match status.and_then(|s| s.allocation.as_ref()) {
        Some(allocation) => {
            if !reserved_for_pod && reserved >= MAX_RESERVED_FOR {
                return Err(Error::ClaimFullyReserved { claim: key, reserved });
            }
            let selector = match &allocation.node_selector {
                Some(s) => Some(node_selector(&format!("ResourceClaim {key}"), s)?),
                None => None,
            };
            ClaimNeed::Allocated(Arc::new(ExistingAllocation {
                node_selector: selector,
                reserved,
                reserved_for_gang: group.is_some() && reserved_for_pod,
            }))
        }
        None => ClaimNeed::Allocate(specs.of(claim, &key)?),
    };
    Ok(PodClaim { name: entry.to_string(), claim: key, private, group, need })
}

/// The pod's requests for extended resources that a DeviceClass serves, one per container
/// and resource.
fn extended_requests(spec: &PodSpec, dra: &DraSnapshot, names: &mut ResourceNames) -> Result<Vec<ExtendedRequest>> {
    let mut extended = Vec::new();
    // Requests are named as kube-scheduler names them: the container's index among init
    // and regular containers, the resource's index among its sorted requests (a limit
    // without a request is its request, as the API server defaults it).
    let init = spec.init_containers.as_ref().map_or(0, Vec::len);
    for (c, container) in spec.containers.iter().enumerate() {
        let resources = container.resources.as_ref();
        let mut requests: BTreeMap<&String, &k8s_openapi::apimachinery::pkg::api::resource::Quantity> = BTreeMap::new();
        for (resource, q) in resources.and_then(|r| r.limits.as_ref()).into_iter().flatten() {
            requests.insert(resource, q);
        }
        for (resource, q) in resources.and_then(|r| r.requests.as_ref()).into_iter().flatten() {
            requests.insert(resource, q);
        }
        for (index, (resource, q)) in requests.iter().enumerate() {
            let Some(class) = dra.extended_classes.get(*resource) else { continue };
            let count = Quantity::parse(&q.0)
                .map_err(|source| Error::ExtendedResource { container: container.name.clone(), source })?
                .units_ceil();
            if count <= 0 {
                continue;
            }
            extended.push(ExtendedRequest {
                resource: names.intern(resource),
                resource_name: (*resource).clone(),
                class: class.clone(),
                count: count as u32,
                container: container.name.clone(),
                request_name: format!("container-{}-request-{index}", init + c),
                share: None,
            });
        }
    }
    Ok(extended)
}
