//! The API server's rules that the simulator's loader follows: which kinds play a part in
//! scheduling, which live in a namespace, and the checks made of DRA objects before they
//! are stored (selectors that compile, well-formed claim requests, slices that say where
//! their devices are).

use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::convert::dra;
use crate::convert::kinds::object_kinds;
use crate::engine::dra::cel::Selector;

/// Whether objects of `kind` in API `group` live in a namespace.
pub fn is_namespaced(group: &str, kind: &str) -> bool {
    !matches!(
        (group, kind),
        ("", "Node" | "Namespace" | "PersistentVolume")
            | ("resource.k8s.io", "ResourceSlice" | "DeviceClass" | "DeviceTaintRule")
            | ("scheduling.k8s.io", "PriorityClass")
            | ("storage.k8s.io", "StorageClass" | "CSIDriver" | "CSINode")
            | ("muster.dev" | "scheduling.run.ai", "Queue")
            | ("kueue.x-k8s.io", "ClusterQueue" | "Cohort" | "ResourceFlavor" | "Topology")
            | ("kai.scheduler", "Topology")
    )
}

/// Whether a kind that is not a workload plays a part in scheduling (else it is skipped
/// with a note): a kind of the list scheduling reads, or Kueue's kinds at their older
/// version, or a claim template (the simulator makes claims from them).
pub fn is_known(api_version: &str, kind: &str) -> bool {
    listed(api_version, kind)
        || api_version == "kueue.x-k8s.io/v1beta1" && listed("kueue.x-k8s.io/v1beta2", kind)
        || (api_version, kind) == ("resource.k8s.io/v1", "ResourceClaimTemplate")
}

/// Whether `(api_version, kind)` is `K`'s.
pub fn is_kind<K: kube::Resource<DynamicType = ()>>(api_version: &str, kind: &str) -> bool {
    api_version == K::api_version(&()) && kind == K::kind(&())
}

/// Whether `(api_version, kind)` names a kind of the list scheduling reads (the workloads
/// aside: their kinds are [`WorkloadKind`](crate::convert::workloads::WorkloadKind)s).
fn listed(api_version: &str, kind: &str) -> bool {
    macro_rules! listed {
        ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
            false $(|| listed!(@one $field, $kind))*
        };
        (@one workloads, $kind:ty) => {
            false
        };
        (@one $field:ident, $kind:ty) => {
            is_kind::<$kind>(api_version, kind)
        };
    }
    object_kinds!(listed)
}

/// Selectors must compile, as the API server checks them.
pub fn check_selectors<'a>(
    selectors: impl Iterator<Item = &'a k8s_openapi::api::resource::v1::DeviceSelector>,
) -> std::result::Result<(), String> {
    for (i, selector) in selectors.enumerate() {
        if let Some(cel) = &selector.cel {
            Selector::compile(&cel.expression).map_err(|e| format!("selectors[{i}].cel.expression: {e}"))?;
        }
    }
    Ok(())
}

/// A claim's requests must be well formed and their selectors compile.
pub fn check_claim_spec(
    object: &str,
    spec: &k8s_openapi::api::resource::v1::ResourceClaimSpec,
) -> std::result::Result<(), String> {
    // The caller names the object; the message says only what is wrong in it.
    dra::claim_spec(object, spec).map_err(|e| match e {
        dra::Error::Invalid { problem, .. } => problem.to_string(),
        other => other.to_string(),
    })?;
    for request in spec.devices.iter().flat_map(|d| d.requests.iter().flatten()) {
        let exact = request.exactly.iter().flat_map(|e| e.selectors.iter().flatten());
        let subs = request.first_available.iter().flatten().flat_map(|s| s.selectors.iter().flatten());
        check_selectors(exact.chain(subs)).map_err(|e| format!("request {}: {e}", request.name))?;
    }
    Ok(())
}

/// A slice must name its pool and where its devices are, as the API server checks.
pub fn check_slice(slice: &ResourceSlice) -> std::result::Result<(), String> {
    let spec = &slice.spec;
    let ways = [
        spec.node_name.is_some(),
        spec.node_selector.is_some(),
        spec.all_nodes == Some(true),
        spec.per_device_node_selection == Some(true),
    ];
    if ways.iter().filter(|w| **w).count() != 1 {
        return Err("exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection must be set".into());
    }
    if spec.pool.resource_slice_count < 1 {
        return Err("pool.resourceSliceCount must be at least 1".into());
    }
    Ok(())
}
