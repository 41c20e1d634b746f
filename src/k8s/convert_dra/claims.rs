//! Claims: a claim's (or template's) spec in the engine's terms, and what each pod claims
//! (its ResourceClaims and the extended resources a DeviceClass serves).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceSubRequest, DeviceToleration as KubeDeviceToleration, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};

use super::{Error, MAX_RESERVED_FOR, Problem, Result, node_selector, toleration};
use crate::engine::dra::model::{
    AllocationMode, ClaimKey, ClaimNeed, ClaimSpec, Constraint, ConstraintKind, DraSnapshot, ExistingAllocation,
    ExtendedRequest, PodClaim, Request, SubRequest,
};
use crate::engine::model::PodDevices;
use crate::engine::resources::ResourceNames;
use crate::quantity::Quantity;

fn sub_request(object: &str, result_name: String, class: &str, exact: SubRequestFields<'_>) -> Result<SubRequest> {
    let invalid = |problem: Problem| Error::invalid(object, problem.in_request(&result_name));
    let mode = match exact.allocation_mode {
        None | Some("ExactCount") => {
            let count = exact.count.unwrap_or(1);
            if !(1..=crate::engine::dra::allocate::MAX_RESULTS as i64).contains(&count) {
                return Err(invalid(Problem::Count { count }));
            }
            AllocationMode::ExactCount(count as u32)
        }
        Some("All") => AllocationMode::All,
        Some(other) => return Err(invalid(Problem::AllocationMode(other.to_string()))),
    };
    let mut capacity = Vec::new();
    for (name, q) in exact.capacity.into_iter().flatten() {
        let value = Quantity::parse(&q.0).map_err(|source| {
            let problem = Problem::RequestCapacity { request: result_name.clone(), name: name.clone(), source };
            Error::invalid(object, problem)
        })?;
        capacity.push((name.clone(), value));
    }
    Ok(SubRequest {
        class: class.to_string(),
        selectors: exact
            .selectors
            .into_iter()
            .flatten()
            .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
            .collect(),
        mode,
        admin_access: exact.admin_access.unwrap_or(false),
        tolerations: exact
            .tolerations
            .into_iter()
            .flatten()
            .map(toleration)
            .collect::<Result<_, _>>()
            .map_err(invalid)?,
        capacity,
        result_name,
    })
}

/// The fields `exactly` and a `firstAvailable` entry share.
struct SubRequestFields<'a> {
    allocation_mode: Option<&'a str>,
    count: Option<i64>,
    selectors: Option<&'a Vec<k8s_openapi::api::resource::v1::DeviceSelector>>,
    admin_access: Option<bool>,
    tolerations: Option<&'a Vec<KubeDeviceToleration>>,
    capacity: Option<&'a BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
}

impl<'a> From<&'a ExactDeviceRequest> for SubRequestFields<'a> {
    fn from(r: &'a ExactDeviceRequest) -> Self {
        SubRequestFields {
            allocation_mode: r.allocation_mode.as_deref(),
            count: r.count,
            selectors: r.selectors.as_ref(),
            admin_access: r.admin_access,
            tolerations: r.tolerations.as_ref(),
            capacity: r.capacity.as_ref().and_then(|c| c.requests.as_ref()),
        }
    }
}

impl<'a> From<&'a DeviceSubRequest> for SubRequestFields<'a> {
    fn from(r: &'a DeviceSubRequest) -> Self {
        SubRequestFields {
            allocation_mode: r.allocation_mode.as_deref(),
            count: r.count,
            selectors: r.selectors.as_ref(),
            admin_access: None,
            tolerations: r.tolerations.as_ref(),
            capacity: r.capacity.as_ref().and_then(|c| c.requests.as_ref()),
        }
    }
}

/// A claim's (or template's) spec in the engine's terms; `object` names it in errors.
pub fn claim_spec(object: &str, spec: &ResourceClaimSpec) -> Result<ClaimSpec> {
    let Some(devices) = spec.devices.as_ref() else { return Ok(ClaimSpec::default()) };
    let mut requests = Vec::new();
    for request in devices.requests.iter().flatten() {
        let alternatives = match (&request.exactly, &request.first_available) {
            (Some(exact), None) => {
                vec![sub_request(object, request.name.clone(), &exact.device_class_name, exact.into())?]
            }
            (None, Some(subs)) if !subs.is_empty() => subs
                .iter()
                .map(|sub| {
                    sub_request(object, format!("{}/{}", request.name, sub.name), &sub.device_class_name, sub.into())
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(Error::invalid(object, Problem::ExactlyOrFirstAvailable.in_request(&request.name)));
            }
        };
        requests.push(Request { name: request.name.clone(), alternatives });
    }
    if requests.len() > 32 {
        return Err(Error::invalid(object, Problem::TooManyRequests(requests.len())));
    }
    let mut constraints = Vec::new();
    for c in devices.constraints.iter().flatten() {
        let kind = match (&c.match_attribute, &c.distinct_attribute) {
            (Some(name), None) => ConstraintKind::Match(name.clone()),
            (None, Some(name)) => ConstraintKind::Distinct(name.clone()),
            _ => {
                return Err(Error::invalid(object, Problem::ConstraintAttribute));
            }
        };
        constraints.push(Constraint { requests: c.requests.clone().unwrap_or_default(), kind });
    }
    Ok(ClaimSpec { requests, constraints })
}

/// Interns equal claim specs so that pods made from one template share one value (and one
/// shape in the engine).
pub type SpecInterner = crate::k8s::interner::Interner<ClaimSpec>;

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

/// What `pod` (not bound) claims, or why it cannot be considered yet (a claim not created,
/// missing, or in use elsewhere), in words, as a gang's blocked reason keeps it.
pub fn pod_devices(
    pod: &Pod,
    claims: &ClaimIndex<'_>,
    dra: &DraSnapshot,
    names: &mut ResourceNames,
    specs: &mut super::ClaimSpecs,
) -> Result<Option<PodDevices>, String> {
    claims_of_pod(pod, claims, dra, names, specs).map_err(|e| e.to_string())
}

fn claims_of_pod(
    pod: &Pod,
    index: &ClaimIndex<'_>,
    dra: &DraSnapshot,
    names: &mut ResourceNames,
    specs: &mut super::ClaimSpecs,
) -> Result<Option<PodDevices>> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let pod_uid = pod.metadata.uid.as_deref();
    let Some(spec) = pod.spec.as_ref() else { return Ok(None) };
    let claims = &index.by_name;
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    let mut devices = PodDevices::default();
    for entry in spec.resource_claims.iter().flatten() {
        let (claim_name, private) = if let Some(name) = &entry.resource_claim_name {
            (name.clone(), false)
        } else if entry.resource_claim_template_name.is_some() {
            match statuses.and_then(|s| s.iter().find(|s| s.name == entry.name)) {
                Some(status) => match &status.resource_claim_name {
                    Some(name) => (name.clone(), true),
                    // The controller decided no claim is needed.
                    None => continue,
                },
                None => {
                    return Err(Error::ClaimNotCreated {
                        entry: entry.name.clone(),
                        template: entry.resource_claim_template_name.clone().unwrap_or_default(),
                    });
                }
            }
        } else {
            return Err(Error::NoClaimNamed(entry.name.clone()));
        };
        let key = ClaimKey { namespace: namespace.to_string(), name: claim_name.clone() };
        let Some(claim) = claims.get(&(namespace, claim_name.as_str())) else {
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
        devices.claims.push(PodClaim { name: entry.name.clone(), claim: key, private, group, need });
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
        // Requests are named as kube-scheduler names them: the container's index among init
        // and regular containers, the resource's index among its sorted requests (a limit
        // without a request is its request, as the API server defaults it).
        let init = spec.init_containers.as_ref().map_or(0, Vec::len);
        for (c, container) in spec.containers.iter().enumerate() {
            let resources = container.resources.as_ref();
            let mut requests: BTreeMap<&String, &k8s_openapi::apimachinery::pkg::api::resource::Quantity> =
                BTreeMap::new();
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
                devices.extended.push(ExtendedRequest {
                    resource: names.intern(resource),
                    resource_name: (*resource).clone(),
                    class: class.clone(),
                    count: count as u32,
                    container: container.name.clone(),
                    request_name: format!("container-{}-request-{index}", init + c),
                });
            }
        }
    }
    Ok((!devices.claims.is_empty() || !devices.extended.is_empty()).then_some(devices))
}
