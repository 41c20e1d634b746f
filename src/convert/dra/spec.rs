//! A claim's (or template's) spec in the engine's terms.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    DeviceSubRequest, DeviceToleration as KubeDeviceToleration, ExactDeviceRequest, ResourceClaimSpec,
};

use super::{Error, Problem, Result, toleration};
use crate::engine::dra::model::{AllocationMode, ClaimSpec, Constraint, ConstraintKind, Request, SubRequest};
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
        fraction: None,
        distinct: false,
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
