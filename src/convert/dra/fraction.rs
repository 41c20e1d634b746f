//! GPU fractions as KAI Scheduler's users write them, on pod annotations: `gpu-fraction`
//! (a share of one GPU, above 0 and at most 1), or `gpu-memory` (MiB of one GPU), with
//! `gpu-fraction-num-devices` (that share of each of several GPUs) and
//! `gpu-fraction-container-name` (the container that gets them; the first by default).
//! Read as a request DRA serves from devices that allow several allocations, through the
//! claim Muster makes for the pod as it does for extended resources. When the pod names that
//! claim in `spec.resourceClaims` (the entry `gpu-fraction` from the template
//! `muster-gpu-fraction`, which the admission policy
//! `manifests/scheduler/gpu-fraction-policy.yaml` writes, and which never exists), Muster's
//! claim is made as the resourceclaim controller would make it from a template and recorded
//! in the pod's `status.resourceClaimStatuses`, so that the kubelet prepares it; otherwise
//! it is the pod's by ownership alone.

use k8s_openapi::api::core::v1::Pod;

use super::Error;
use crate::engine::dra::allocate::MAX_RESULTS;
use crate::engine::dra::model::{DeviceUse, DraSnapshot, ExtendedRequest, GpuShare};
use crate::engine::resources::ResourceNames;
use crate::quantity::Quantity;

pub const FRACTION_ANNOTATION: &str = "gpu-fraction";
pub const MEMORY_ANNOTATION: &str = "gpu-memory";
pub const DEVICES_ANNOTATION: &str = "gpu-fraction-num-devices";
pub const CONTAINER_ANNOTATION: &str = "gpu-fraction-container-name";
/// The pod's `spec.resourceClaims` entry that names the claim of its fraction.
pub const FRACTION_CLAIM: &str = "gpu-fraction";
/// The template that entry names. It never exists: Muster makes the claim itself, with the
/// share the annotations ask for, and the resourceclaim controller adopts it.
pub const FRACTION_TEMPLATE: &str = "muster-gpu-fraction";
/// The resource name a fraction's request is mapped to in the pod's
/// `status.extendedResourceClaimStatus`.
pub const FRACTION_RESOURCE: &str = "muster.dev/gpu-fraction";
/// Classes that serve GPUs, tried in order when none serves `nvidia.com/gpu` through DRA:
/// the node agent's and NVIDIA's DRA driver's.
const GPU_CLASSES: &[&str] = &["gpu.muster.dev", "gpu.nvidia.com"];

/// The `spec.resourceClaims` entry by which `pod` names the claim of its GPU fraction
/// (`gpu-fraction`, from the template `muster-gpu-fraction`), when it asks for a fraction by
/// annotation and has one. Muster records the claim it makes under that entry.
pub fn fraction_claim_entry(pod: &Pod) -> Option<&str> {
    let annotations = pod.metadata.annotations.as_ref()?;
    if !annotations.contains_key(FRACTION_ANNOTATION) && !annotations.contains_key(MEMORY_ANNOTATION) {
        return None;
    }
    let entries = pod.spec.as_ref()?.resource_claims.as_ref()?;
    let entry = entries.iter().find(|e| e.name == FRACTION_CLAIM)?;
    (entry.resource_claim_template_name.as_deref() == Some(FRACTION_TEMPLATE)).then_some(entry.name.as_str())
}

/// The share of each GPU `pod` asks for by annotation and on how many GPUs, if any.
pub fn share(pod: &Pod) -> Result<Option<(GpuShare, u32)>, Error> {
    let Some(annotations) = pod.metadata.annotations.as_ref() else { return Ok(None) };
    let fraction = annotations.get(FRACTION_ANNOTATION);
    let memory = annotations.get(MEMORY_ANNOTATION);
    let fail = |annotation: &str, problem: String| Error::Fraction { annotation: annotation.to_string(), problem };
    let share = match (fraction, memory) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(fail(MEMORY_ANNOTATION, format!("set {FRACTION_ANNOTATION} or {MEMORY_ANNOTATION}, not both")));
        }
        (Some(text), None) => {
            let value = Quantity::parse(text.trim()).ok().filter(|q| q.sign() > 0 && *q <= Quantity::from_units(1));
            let Some(value) = value else {
                return Err(fail(FRACTION_ANNOTATION, format!("{text:?} is not a number above 0 and at most 1")));
            };
            GpuShare::Fraction(value.milli_ceil() as u32)
        }
        (None, Some(text)) => {
            let mib = text.trim().parse::<i64>().ok().filter(|m| *m > 0);
            let Some(mib) = mib else {
                return Err(fail(MEMORY_ANNOTATION, format!("{text:?} is not a whole number of MiB above 0")));
            };
            let bytes =
                mib.checked_mul(1 << 20).ok_or_else(|| fail(MEMORY_ANNOTATION, format!("{text:?} is too large")))?;
            GpuShare::Memory(Quantity::from_units(bytes))
        }
    };
    let count = match annotations.get(DEVICES_ANNOTATION) {
        None => 1,
        Some(text) => match text.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_RESULTS as u32).contains(&n) => n,
            _ => {
                return Err(fail(
                    DEVICES_ANNOTATION,
                    format!("{text:?} is not a whole number from 1 to {MAX_RESULTS}"),
                ));
            }
        },
    };
    Ok(Some((share, count)))
}

/// What a running pod holding `devices` counts in queues as GPU fractions, in thousandths
/// of GPUs (0 for a pod without, or with an annotation that cannot be read).
pub fn running_gpu_milli(pod: &Pod, dra: &DraSnapshot, devices: &[DeviceUse]) -> i64 {
    match share(pod) {
        Ok(Some((share, count))) => crate::engine::admission::fractions::held(dra, share, count, devices),
        _ => 0,
    }
}

/// The GPU fraction `pod` asks for by annotation, if any; an annotation that cannot be
/// read is an error naming it.
pub fn gpu_fraction(pod: &Pod, dra: &DraSnapshot, names: &mut ResourceNames) -> Result<Option<ExtendedRequest>, Error> {
    let Some((share, count)) = share(pod)? else { return Ok(None) };
    let Some(annotations) = pod.metadata.annotations.as_ref() else { return Ok(None) };
    let fail = |annotation: &str, problem: String| Error::Fraction { annotation: annotation.to_string(), problem };
    let Some(spec) = pod.spec.as_ref() else { return Ok(None) };
    let (index, container) = match annotations.get(CONTAINER_ANNOTATION) {
        None => match spec.containers.first() {
            Some(c) => (0, c),
            None => return Ok(None),
        },
        Some(name) => match spec.containers.iter().enumerate().find(|(_, c)| c.name == *name) {
            Some(found) => found,
            None => return Err(fail(CONTAINER_ANNOTATION, format!("the pod has no container {name:?}"))),
        },
    };
    // Named after the container's extended resources, as Kubernetes names their requests,
    // so the two never share a name.
    let resources = container.resources.as_ref();
    let mut listed: Vec<&String> = Vec::new();
    for map in resources.into_iter().flat_map(|r| [r.limits.as_ref(), r.requests.as_ref()]).flatten() {
        listed.extend(map.keys().filter(|k| !listed.contains(k)).collect::<Vec<_>>());
    }
    let init = spec.init_containers.as_ref().map_or(0, Vec::len);
    let class = dra
        .extended_classes
        .get(crate::engine::queues::GPU_RESOURCE)
        .cloned()
        .or_else(|| GPU_CLASSES.iter().find(|c| dra.classes.contains_key(**c)).map(|c| c.to_string()))
        .unwrap_or_else(|| GPU_CLASSES[0].to_string());
    Ok(Some(ExtendedRequest {
        resource: names.intern(FRACTION_RESOURCE),
        resource_name: FRACTION_RESOURCE.to_string(),
        class,
        count,
        container: container.name.clone(),
        request_name: format!("container-{}-request-{}", init + index, listed.len()),
        share: Some(share),
    }))
}
