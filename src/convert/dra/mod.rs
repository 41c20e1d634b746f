//! Converts DRA objects (resource.k8s.io/v1) into the engine's device model: pools and
//! devices from ResourceSlices (with DeviceTaintRules applied), DeviceClasses, claim specs,
//! the devices allocated claims hold, and what each pod claims.
//!
//! Shared by the scheduler's cache and the simulator. Devices are memoised per slice and
//! resourceVersion, so an unchanged slice keeps its devices (and their selector results).

mod claims;
pub mod fraction;
mod held;
mod slices;
mod snapshot;
mod spec;
mod spec_memo;

use k8s_openapi::api::core::v1::NodeSelector as KubeNodeSelector;
use k8s_openapi::api::resource::v1::{DeviceTaint as KubeDeviceTaint, DeviceToleration as KubeDeviceToleration};
use thiserror::Error;

use crate::engine::dra::allocate::MAX_RESULTS;
use crate::engine::dra::model::{ClaimKey, DeviceTaint, DeviceTaintEffect, DeviceToleration, NodeSelector};
use crate::quantity;
pub use claims::{ClaimIndex, pod_devices};
pub use fraction::{
    FRACTION_ANNOTATION, FRACTION_CLAIM, FRACTION_RESOURCE, FRACTION_TEMPLATE, MEMORY_ANNOTATION, fraction_claim_entry,
    gpu_fraction, running_gpu_milli,
};
pub use held::HeldDevices;
pub use snapshot::{DeviceMemo, DraView, classes, snapshot};
pub use spec::claim_spec;
pub use spec_memo::{ClaimSpecs, SpecInterner};

/// The annotation the resourceclaim controller puts on a claim made from a template.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
/// The annotation of a claim made for a pod's extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";
/// The implicit extended resource name of every DeviceClass.
pub const IMPLICIT_EXTENDED_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
/// How many consumers one claim may be reserved for (`ResourceClaimReservedForMaxSize`).
pub const MAX_RESERVED_FOR: usize = 256;

/// Why DRA objects cannot be converted, or why a pod's claims cannot be considered yet.
#[derive(Debug, PartialEq, Eq, Error)]
pub enum Error {
    /// Something in one object, or in one part of it ("ResourceSlice s: device d"), is wrong.
    #[error("{object}: {problem}")]
    Invalid { object: String, problem: Problem },
    /// A node selector requirement that cannot be read.
    #[error(transparent)]
    NodeSelector(#[from] crate::convert::core::Error),
    /// A pool's shared counter whose amount is no quantity.
    #[error("counter set {set} counter {counter}: {source}")]
    CounterSet { set: String, counter: String, source: quantity::Error },
    /// Two devices of one pool with the same name.
    #[error("device {0} is listed twice")]
    DuplicateDevice(String),
    /// The resourceclaim controller has not yet made the pod's claim from its template.
    #[error("waiting for the ResourceClaim of {entry} (from ResourceClaimTemplate {template}) to be created")]
    ClaimNotCreated { entry: String, template: String },
    #[error("resource claim {0} names neither a claim nor a template")]
    NoClaimNamed(String),
    #[error("ResourceClaim {0} does not exist")]
    ClaimMissing(ClaimKey),
    #[error("ResourceClaim {0} is being deleted")]
    ClaimDeleted(ClaimKey),
    /// A claim for the pod's extended resources made by an earlier placement that did not
    /// end in a bind: given back before another is made.
    #[error("its earlier ResourceClaim {0} for extended resources is being given back")]
    ExtendedClaimHeld(ClaimKey),
    #[error("ResourceClaim {claim} was not created for pod {pod}")]
    ClaimOfAnotherPod { claim: ClaimKey, pod: String },
    /// The claim recorded for a GPU fraction's entry is not one Muster made.
    #[error(
        "ResourceClaim {0} of the GPU fraction was not made by Muster, which makes that claim itself (delete any ResourceClaimTemplate muster-gpu-fraction in the namespace)"
    )]
    FractionClaimNotMusters(ClaimKey),
    #[error("ResourceClaim {claim} is reserved for {reserved} consumers, the most allowed")]
    ClaimFullyReserved { claim: ClaimKey, reserved: usize },
    /// A GPU fraction annotation that cannot be read.
    #[error("annotation {annotation}: {problem}")]
    Fraction { annotation: String, problem: String },
    /// An extended resource request that is no quantity.
    #[error("container {container}: {source}")]
    ExtendedResource { container: String, source: quantity::Error },
}

/// What is wrong in an object.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Problem {
    #[error("unknown device taint effect {0:?}")]
    TaintEffect(String),
    #[error("unknown toleration operator {0:?}")]
    TolerationOperator(String),
    /// A problem in one request of a claim.
    #[error("request {request}: {problem}")]
    Request { request: String, problem: Box<Problem> },
    #[error("count {count} is outside 1..{max}", max = MAX_RESULTS)]
    Count { count: i64 },
    #[error("unknown allocationMode {0:?}")]
    AllocationMode(String),
    #[error("exactly one of exactly and firstAvailable must be set")]
    ExactlyOrFirstAvailable,
    #[error("request {request} capacity {name}: {source}")]
    RequestCapacity { request: String, name: String, source: quantity::Error },
    #[error("{0} requests, more than the 32 allowed")]
    TooManyRequests(usize),
    #[error("a constraint needs exactly one of matchAttribute and distinctAttribute")]
    ConstraintAttribute,
    #[error("perDeviceNodeSelection needs nodeName, nodeSelector or allNodes")]
    NoDeviceNodes,
    #[error("attribute {name}: {reason}")]
    Version { name: String, reason: crate::engine::dra::semver::Error },
    #[error("capacity {name}: {source}")]
    Capacity { name: String, source: quantity::Error },
    #[error("counter {counter}: {source}")]
    Counter { counter: String, source: quantity::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn invalid(object: &str, problem: Problem) -> Error {
        Error::Invalid { object: object.to_string(), problem }
    }
}

impl Problem {
    fn in_request(self, request: &str) -> Problem {
        Problem::Request { request: request.to_string(), problem: Box::new(self) }
    }
}

fn taint_effect(effect: &str) -> Result<DeviceTaintEffect, Problem> {
    match effect {
        "NoSchedule" => Ok(DeviceTaintEffect::NoSchedule),
        "NoExecute" => Ok(DeviceTaintEffect::NoExecute),
        "None" => Ok(DeviceTaintEffect::None),
        other => Err(Problem::TaintEffect(other.to_string())),
    }
}

fn taint(t: &KubeDeviceTaint) -> Result<DeviceTaint, Problem> {
    Ok(DeviceTaint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect: taint_effect(&t.effect)? })
}

fn toleration(t: &KubeDeviceToleration) -> Result<DeviceToleration, Problem> {
    let exists = match t.operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(other) => return Err(Problem::TolerationOperator(other.to_string())),
    };
    Ok(DeviceToleration {
        key: t.key.clone().unwrap_or_default(),
        exists,
        value: t.value.clone().unwrap_or_default(),
        effect: match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(taint_effect(e)?),
        },
    })
}

/// A Kubernetes NodeSelector, with `matchFields` on `metadata.name`.
pub fn node_selector(object: &str, selector: &KubeNodeSelector) -> Result<NodeSelector> {
    let mut terms = Vec::new();
    for term in &selector.node_selector_terms {
        let mut requirements = Vec::new();
        for r in term.match_expressions.iter().flatten().chain(term.match_fields.iter().flatten()) {
            requirements.push(crate::convert::core::requirement(object, r)?);
        }
        terms.push(requirements);
    }
    Ok(NodeSelector { terms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;

    /// The messages read exactly as they did when they were built with `format!`: events,
    /// logs and the simulator's output show them.
    #[test]
    fn errors_name_the_object_and_the_problem() {
        let bad = || Quantity::parse("lots").unwrap_err();
        let q = bad().to_string();
        let claim = ClaimKey { namespace: "ns".into(), name: "c".into() };
        let device = "ResourceSlice s: device d";
        let cases = [
            (
                Error::invalid("ResourceClaim ns/c", Problem::Count { count: 0 }.in_request("gpu")),
                "ResourceClaim ns/c: request gpu: count 0 is outside 1..32",
            ),
            (
                Error::invalid("ResourceClaim ns/c", Problem::AllocationMode("Some".into()).in_request("gpu")),
                r#"ResourceClaim ns/c: request gpu: unknown allocationMode "Some""#,
            ),
            (
                Error::invalid("ResourceClaim ns/c", Problem::TolerationOperator("Near".into()).in_request("gpu/a")),
                r#"ResourceClaim ns/c: request gpu/a: unknown toleration operator "Near""#,
            ),
            (
                Error::invalid("ResourceClaim ns/c", Problem::ExactlyOrFirstAvailable.in_request("gpu")),
                "ResourceClaim ns/c: request gpu: exactly one of exactly and firstAvailable must be set",
            ),
            (
                Error::invalid(
                    "ResourceClaim ns/c",
                    Problem::RequestCapacity { request: "gpu".into(), name: "memory".into(), source: bad() },
                ),
                r#"ResourceClaim ns/c: request gpu capacity memory: {q}"#,
            ),
            (
                Error::invalid("ResourceClaim ns/c", Problem::TooManyRequests(33)),
                "ResourceClaim ns/c: 33 requests, more than the 32 allowed",
            ),
            (
                Error::invalid("ResourceClaim ns/c", Problem::ConstraintAttribute),
                "ResourceClaim ns/c: a constraint needs exactly one of matchAttribute and distinctAttribute",
            ),
            (
                Error::invalid(device, Problem::NoDeviceNodes),
                "ResourceSlice s: device d: perDeviceNodeSelection needs nodeName, nodeSelector or allNodes",
            ),
            (
                Error::invalid(
                    device,
                    Problem::Version {
                        name: "gpu.example.com/v".into(),
                        reason: crate::engine::dra::semver::Error::NotThreeParts("bad".into()),
                    },
                ),
                "ResourceSlice s: device d: attribute gpu.example.com/v: \"bad\" is not a semantic version: it needs major.minor.patch",
            ),
            (
                Error::invalid(device, Problem::Capacity { name: "memory".into(), source: bad() }),
                r#"ResourceSlice s: device d: capacity memory: {q}"#,
            ),
            (
                Error::invalid(device, Problem::Counter { counter: "mem".into(), source: bad() }),
                r#"ResourceSlice s: device d: counter mem: {q}"#,
            ),
            (
                Error::invalid(device, Problem::TaintEffect("Sometimes".into())),
                r#"ResourceSlice s: device d: unknown device taint effect "Sometimes""#,
            ),
            (
                Error::CounterSet { set: "gpu-0".into(), counter: "mem".into(), source: bad() },
                r#"counter set gpu-0 counter mem: {q}"#,
            ),
            (Error::DuplicateDevice("gpu-0".into()), "device gpu-0 is listed twice"),
            (
                Error::ClaimNotCreated { entry: "gpu".into(), template: "t".into() },
                "waiting for the ResourceClaim of gpu (from ResourceClaimTemplate t) to be created",
            ),
            (Error::NoClaimNamed("gpu".into()), "resource claim gpu names neither a claim nor a template"),
            (Error::ClaimMissing(claim.clone()), "ResourceClaim ns/c does not exist"),
            (Error::ClaimDeleted(claim.clone()), "ResourceClaim ns/c is being deleted"),
            (
                Error::ClaimOfAnotherPod { claim: claim.clone(), pod: "ns/p".into() },
                "ResourceClaim ns/c was not created for pod ns/p",
            ),
            (
                Error::FractionClaimNotMusters(claim.clone()),
                "ResourceClaim ns/c of the GPU fraction was not made by Muster, which makes that claim itself (delete any ResourceClaimTemplate muster-gpu-fraction in the namespace)",
            ),
            (
                Error::ClaimFullyReserved { claim, reserved: 256 },
                "ResourceClaim ns/c is reserved for 256 consumers, the most allowed",
            ),
            (Error::ExtendedResource { container: "main".into(), source: bad() }, r#"container main: {q}"#),
        ];
        for (error, message) in cases {
            // `{q}` stands for the quantity parser's own message.
            assert_eq!(error.to_string(), message.replace("{q}", &q));
        }
    }
}
