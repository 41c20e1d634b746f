//! Converts DRA objects (resource.k8s.io/v1) into the engine's device model: pools and
//! devices from ResourceSlices (with DeviceTaintRules applied), DeviceClasses, claim specs,
//! the devices allocated claims hold, and what each pod claims.
//!
//! Shared by the scheduler's cache and the simulator. Devices are memoised per slice and
//! resourceVersion, so an unchanged slice keeps its devices (and their selector results).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector as KubeNodeSelector, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass as KubeDeviceClass, DeviceSubRequest, DeviceTaint as KubeDeviceTaint, DeviceTaintRule,
    DeviceToleration as KubeDeviceToleration, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec, ResourceSlice,
};

use crate::engine::dra::cel::DeviceVal;
use crate::engine::dra::cel::semver::Semver;
use crate::engine::dra::model::{
    AllocationMode, AttributeValue, CapacityPolicy, ClaimKey, ClaimNeed, ClaimSpec, Constraint, ConstraintKind, Device,
    DeviceCapacity, DeviceClass, DeviceIdx, DeviceNodes, DeviceTaint, DeviceTaintEffect, DeviceToleration, DeviceUse,
    DraSnapshot, ExistingAllocation, ExtendedRequest, NodeSelector, PodClaim, Pool, Request, SubRequest,
};
use crate::engine::model::{Node as EngineNode, PodDevices};
use crate::quantity::Quantity;
use crate::engine::resources::ResourceNames;

/// The annotation the resourceclaim controller puts on a claim made from a template.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
/// The annotation of a claim made for a pod's extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";
/// The implicit extended resource name of every DeviceClass.
pub const IMPLICIT_EXTENDED_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
/// How many consumers one claim may be reserved for (`ResourceClaimReservedForMaxSize`).
pub const MAX_RESERVED_FOR: usize = 256;

fn quantity(object: &str, what: &str, text: &str) -> Result<Quantity, String> {
    Quantity::parse(text).map_err(|e| format!("{object}: {what}: {e}"))
}

fn taint_effect(effect: &str) -> Result<DeviceTaintEffect, String> {
    match effect {
        "NoSchedule" => Ok(DeviceTaintEffect::NoSchedule),
        "NoExecute" => Ok(DeviceTaintEffect::NoExecute),
        "None" => Ok(DeviceTaintEffect::None),
        other => Err(format!("unknown device taint effect {other:?}")),
    }
}

fn taint(t: &KubeDeviceTaint) -> Result<DeviceTaint, String> {
    Ok(DeviceTaint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect: taint_effect(&t.effect)? })
}

fn toleration(t: &KubeDeviceToleration) -> Result<DeviceToleration, String> {
    let exists = match t.operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(other) => return Err(format!("unknown toleration operator {other:?}")),
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
pub fn node_selector(object: &str, selector: &KubeNodeSelector) -> Result<NodeSelector, String> {
    let mut terms = Vec::new();
    for term in &selector.node_selector_terms {
        let mut requirements = Vec::new();
        for r in term.match_expressions.iter().flatten().chain(term.match_fields.iter().flatten()) {
            requirements.push(super::convert::requirement(object, r).map_err(|e| e.to_string())?);
        }
        terms.push(requirements);
    }
    Ok(NodeSelector { terms })
}

/// DeviceClasses by name, and which class serves each extended resource: its own
/// `extendedResourceName` and the implicit `deviceclass.resource.kubernetes.io/<name>`. When
/// two classes name the same resource, the one created later wins, as in Kubernetes.
pub fn classes(classes: &[&KubeDeviceClass]) -> (HashMap<String, Arc<DeviceClass>>, HashMap<String, String>) {
    let mut by_name = HashMap::new();
    let mut ordered: Vec<&&KubeDeviceClass> = classes.iter().collect();
    ordered.sort_by_key(|c| {
        (c.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()), c.metadata.name.clone().unwrap_or_default())
    });
    let mut extended = HashMap::new();
    for class in ordered {
        let name = class.metadata.name.clone().unwrap_or_default();
        let spec = class.spec.as_ref();
        let selectors = spec
            .and_then(|s| s.selectors.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
            .collect();
        let extended_resource_name = spec.and_then(|s| s.extended_resource_name.clone());
        extended.insert(format!("{IMPLICIT_EXTENDED_PREFIX}{name}"), name.clone());
        if let Some(resource) = &extended_resource_name {
            extended.insert(resource.clone(), name.clone());
        }
        by_name.insert(name.clone(), Arc::new(DeviceClass { name, selectors, extended_resource_name }));
    }
    (by_name, extended)
}

fn sub_request(
    object: &str,
    result_name: String,
    class: &str,
    exact: SubRequestFields<'_>,
) -> Result<SubRequest, String> {
    let mode = match exact.allocation_mode {
        None | Some("ExactCount") => {
            let count = exact.count.unwrap_or(1);
            if !(1..=crate::engine::dra::allocate::MAX_RESULTS as i64).contains(&count) {
                return Err(format!(
                    "{object}: request {result_name}: count {count} is outside 1..{}",
                    crate::engine::dra::allocate::MAX_RESULTS
                ));
            }
            AllocationMode::ExactCount(count as u32)
        }
        Some("All") => AllocationMode::All,
        Some(other) => return Err(format!("{object}: request {result_name}: unknown allocationMode {other:?}")),
    };
    let mut capacity = Vec::new();
    for (name, q) in exact.capacity.into_iter().flatten() {
        capacity.push((name.clone(), quantity(object, &format!("request {result_name} capacity {name}"), &q.0)?));
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
            .map_err(|e| format!("{object}: request {result_name}: {e}"))?,
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
pub fn claim_spec(object: &str, spec: &ResourceClaimSpec) -> Result<ClaimSpec, String> {
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
                return Err(format!(
                    "{object}: request {}: exactly one of exactly and firstAvailable must be set",
                    request.name
                ));
            }
        };
        requests.push(Request { name: request.name.clone(), alternatives });
    }
    if requests.len() > 32 {
        return Err(format!("{object}: {} requests, more than the 32 allowed", requests.len()));
    }
    let mut constraints = Vec::new();
    for c in devices.constraints.iter().flatten() {
        let kind = match (&c.match_attribute, &c.distinct_attribute) {
            (Some(name), None) => ConstraintKind::Match(name.clone()),
            (None, Some(name)) => ConstraintKind::Distinct(name.clone()),
            _ => {
                return Err(format!(
                    "{object}: a constraint needs exactly one of matchAttribute and distinctAttribute"
                ));
            }
        };
        constraints.push(Constraint { requests: c.requests.clone().unwrap_or_default(), kind });
    }
    Ok(ClaimSpec { requests, constraints })
}

/// Interns equal claim specs so that pods made from one template share one value (and one
/// shape in the engine).
#[derive(Default)]
pub struct SpecInterner {
    seen: HashSet<Arc<ClaimSpec>>,
}

impl SpecInterner {
    pub fn intern(&mut self, spec: ClaimSpec) -> Arc<ClaimSpec> {
        if let Some(existing) = self.seen.get(&spec) {
            return existing.clone();
        }
        let spec = Arc::new(spec);
        self.seen.insert(spec.clone());
        spec
    }
}

fn qualified(driver: &str, name: &str) -> String {
    if name.contains('/') { name.to_string() } else { format!("{driver}/{name}") }
}

/// Converts one slice's devices, with the taints of `rules` that select them.
fn slice_devices(
    slice: &ResourceSlice,
    rules: &[&DeviceTaintRule],
    next_revision: &mut u64,
) -> Result<Vec<Device>, String> {
    let spec = &slice.spec;
    let object = format!("ResourceSlice {}", slice.metadata.name.as_deref().unwrap_or(""));
    let driver: Arc<str> = Arc::from(spec.driver.as_str());
    let pool: Arc<str> = Arc::from(spec.pool.name.as_str());
    let slice_nodes = if let Some(node) = &spec.node_name {
        Some(DeviceNodes::Node(node.clone()))
    } else if let Some(selector) = &spec.node_selector {
        Some(DeviceNodes::Selector(node_selector(&object, selector)?))
    } else if spec.all_nodes == Some(true) {
        Some(DeviceNodes::All)
    } else {
        None
    };
    let mut devices = Vec::new();
    for d in spec.devices.iter().flatten() {
        let device_object = format!("{object}: device {}", d.name);
        let nodes = match &slice_nodes {
            Some(nodes) => nodes.clone(),
            None => {
                if let Some(node) = &d.node_name {
                    DeviceNodes::Node(node.clone())
                } else if let Some(selector) = &d.node_selector {
                    DeviceNodes::Selector(node_selector(&device_object, selector)?)
                } else if d.all_nodes == Some(true) {
                    DeviceNodes::All
                } else {
                    return Err(format!(
                        "{device_object}: perDeviceNodeSelection needs nodeName, nodeSelector or allNodes"
                    ));
                }
            }
        };
        let mut attributes = HashMap::new();
        for (name, a) in d.attributes.iter().flatten() {
            let value = if let Some(i) = a.int {
                AttributeValue::Int(i)
            } else if let Some(b) = a.bool {
                AttributeValue::Bool(b)
            } else if let Some(s) = &a.string {
                AttributeValue::String(s.clone())
            } else if let Some(v) = &a.version {
                AttributeValue::Version(
                    Semver::parse(v).map_err(|e| format!("{device_object}: attribute {name}: {e}"))?,
                )
            } else {
                // List-valued attributes are alpha (DRAListTypeAttributes) and not read.
                continue;
            };
            attributes.insert(qualified(&driver, name), value);
        }
        let mut capacity = Vec::new();
        for (name, c) in d.capacity.iter().flatten() {
            let what = format!("capacity {name}");
            let value = quantity(&device_object, &what, &c.value.0)?;
            let policy = match &c.request_policy {
                None => None,
                Some(p) => Some(CapacityPolicy {
                    default: p.default.as_ref().map(|q| quantity(&device_object, &what, &q.0)).transpose()?,
                    range: match &p.valid_range {
                        None => None,
                        Some(r) => Some((
                            quantity(&device_object, &what, &r.min.0)?,
                            r.max.as_ref().map(|q| quantity(&device_object, &what, &q.0)).transpose()?,
                            r.step.as_ref().map(|q| quantity(&device_object, &what, &q.0)).transpose()?,
                        )),
                    },
                    values: p
                        .valid_values
                        .iter()
                        .flatten()
                        .map(|q| quantity(&device_object, &what, &q.0))
                        .collect::<Result<_, _>>()?,
                }),
            };
            capacity.push((name.clone(), DeviceCapacity { value, policy }));
        }
        let mut taints = d
            .taints
            .iter()
            .flatten()
            .map(taint)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{device_object}: {e}"))?;
        for rule in rules {
            let selector = rule.spec.device_selector.as_ref();
            // A rule without a selector selects no device (resource.k8s.io/v1).
            let selects = selector.is_some_and(|s| {
                s.driver.as_deref().is_none_or(|v| v == &*driver)
                    && s.pool.as_deref().is_none_or(|v| v == &*pool)
                    && s.device.as_deref().is_none_or(|v| v == d.name)
            });
            if selects && let Ok(t) = taint(&rule.spec.taint) {
                taints.push(t);
            }
        }
        let mut consumes = Vec::new();
        for c in d.consumes_counters.iter().flatten() {
            for (counter, amount) in &c.counters {
                let q = quantity(&device_object, &format!("counter {counter}"), &amount.value.0)?;
                consumes.push((c.counter_set.clone(), counter.clone(), q));
            }
        }
        let allow_multiple_allocations = d.allow_multiple_allocations == Some(true);
        let cel = DeviceVal::new(
            &driver,
            attributes.iter().map(|(k, v)| (k.as_str(), v)),
            capacity.iter().map(|(k, c)| (k.as_str(), c.value)),
            allow_multiple_allocations,
        );
        *next_revision += 1;
        devices.push(Device {
            driver: driver.clone(),
            pool: pool.clone(),
            name: d.name.clone(),
            attributes,
            capacity,
            taints,
            consumes,
            allow_multiple_allocations,
            nodes,
            cel,
            revision: *next_revision,
        });
    }
    Ok(devices)
}

/// Device conversions kept from one snapshot to the next.
#[derive(Default)]
pub struct DeviceMemo {
    /// By slice name: (resourceVersion, taint-rule fingerprint, devices).
    slices: HashMap<String, (String, String, Arc<Vec<Arc<Device>>>)>,
    next_revision: u64,
    pub specs: SpecInterner,
}

/// The DRA objects a snapshot is made from.
#[derive(Clone, Copy, Default)]
pub struct DraView<'v, 'a> {
    pub slices: &'v [&'a ResourceSlice],
    pub classes: &'v [&'a KubeDeviceClass],
    pub claims: &'v [&'a ResourceClaim],
    pub rules: &'v [&'a DeviceTaintRule],
}

/// Builds the DRA part of a snapshot for `nodes`; problems (a slice that cannot be read, a
/// pool with a device twice) are reported and the devices concerned left out.
pub fn snapshot(
    view: DraView<'_, '_>,
    nodes: &[EngineNode],
    memo: &mut DeviceMemo,
    problems: &mut Vec<String>,
) -> DraSnapshot {
    let mut dra = DraSnapshot::default();
    (dra.classes, dra.extended_classes) = classes(view.classes);
    let fingerprint: String = {
        let mut versions: Vec<String> = view
            .rules
            .iter()
            .map(|r| {
                format!(
                    "{}@{}",
                    r.metadata.name.as_deref().unwrap_or(""),
                    r.metadata.resource_version.as_deref().unwrap_or("")
                )
            })
            .collect();
        versions.sort();
        versions.join(",")
    };
    // Pools: slices of one driver and pool name; only the newest generation counts.
    let mut pools: BTreeMap<(String, String), Vec<&ResourceSlice>> = BTreeMap::new();
    for slice in view.slices {
        pools.entry((slice.spec.driver.clone(), slice.spec.pool.name.clone())).or_default().push(slice);
    }
    let mut live_slices = HashSet::new();
    for ((driver, name), slices) in pools {
        let generation = slices.iter().map(|s| s.spec.pool.generation).max().unwrap_or(0);
        let mut current: Vec<&ResourceSlice> =
            slices.into_iter().filter(|s| s.spec.pool.generation == generation).collect();
        current.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let expected = current.iter().map(|s| s.spec.pool.resource_slice_count).max().unwrap_or(0);
        let mut pool = Pool {
            driver: driver.clone(),
            name: name.clone(),
            generation,
            complete: current.len() as i64 == expected,
            counter_sets: HashMap::new(),
        };
        let mut devices: Vec<Arc<Device>> = Vec::new();
        let mut bad = None;
        for slice in &current {
            for set in slice.spec.shared_counters.iter().flatten() {
                let mut counters = HashMap::new();
                for (counter, amount) in &set.counters {
                    match Quantity::parse(&amount.value.0) {
                        Ok(q) => drop(counters.insert(counter.clone(), q)),
                        Err(e) => bad = Some(format!("counter set {} counter {counter}: {e}", set.name)),
                    }
                }
                pool.counter_sets.insert(set.name.clone(), counters);
            }
            let slice_name = slice.metadata.name.clone().unwrap_or_default();
            live_slices.insert(slice_name.clone());
            let version = slice.metadata.resource_version.clone();
            let cached =
                memo.slices.get(&slice_name).filter(|(v, f, _)| Some(v) == version.as_ref() && *f == fingerprint);
            let converted = match cached {
                Some((_, _, devices)) => Ok(devices.clone()),
                None => slice_devices(slice, view.rules, &mut memo.next_revision).map(|d| {
                    let d = Arc::new(d.into_iter().map(Arc::new).collect::<Vec<_>>());
                    if let Some(v) = version {
                        memo.slices.insert(slice_name.clone(), (v, fingerprint.clone(), d.clone()));
                    }
                    d
                }),
            };
            match converted {
                Ok(d) => devices.extend(d.iter().cloned()),
                Err(e) => bad = Some(e),
            }
        }
        let mut names = HashSet::new();
        if let Some(duplicate) = devices.iter().find(|d| !names.insert(d.name.as_str())) {
            bad = Some(format!("device {} is listed twice", duplicate.name));
        }
        if let Some(why) = bad {
            problems.push(format!("resource pool {driver}/{name} left out: {why}"));
            continue;
        }
        let pool_index = dra.pools.len() as u32;
        dra.pools.push(pool);
        for device in devices {
            dra.devices.push(device);
            dra.device_pools.push(pool_index);
        }
    }
    memo.slices.retain(|name, _| live_slices.contains(name));

    // Which nodes reach which devices.
    let by_name: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    dra.node_devices = vec![Vec::new(); nodes.len()];
    for (i, device) in dra.devices.iter().enumerate() {
        match &device.nodes {
            DeviceNodes::Node(name) => {
                if let Some(&n) = by_name.get(name.as_str()) {
                    dra.node_devices[n].push(i as DeviceIdx);
                }
            }
            DeviceNodes::Selector(selector) => {
                for (n, node) in nodes.iter().enumerate() {
                    if selector.matches(node) {
                        dra.node_devices[n].push(i as DeviceIdx);
                    }
                }
            }
            DeviceNodes::All => dra.node_devices.iter_mut().for_each(|list| list.push(i as DeviceIdx)),
        }
    }

    // Devices that allocated claims hold.
    let index: HashMap<(&str, &str, &str), DeviceIdx> = dra
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| ((&*d.driver, &*d.pool, d.name.as_str()), i as DeviceIdx))
        .collect();
    let mut in_use = Vec::new();
    for claim in view.claims {
        let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
        for r in results.and_then(|d| d.results.as_ref()).into_iter().flatten() {
            let Some(&device) = index.get(&(r.driver.as_str(), r.pool.as_str(), r.device.as_str())) else { continue };
            let consumed = r.consumed_capacity.as_ref().map(|c| {
                c.iter().filter_map(|(name, q)| Quantity::parse(&q.0).ok().map(|q| (name.clone(), q))).collect()
            });
            in_use.push(DeviceUse { device, admin_access: r.admin_access == Some(true), consumed });
        }
    }
    dra.in_use = in_use;
    dra
}

/// What `pod` claims, or why it cannot be considered yet (a claim not created, missing, or
/// in use elsewhere). `claims` finds claims by namespace and name.
pub fn pod_devices(
    pod: &Pod,
    claims: &HashMap<(&str, &str), &ResourceClaim>,
    dra: &DraSnapshot,
    names: &mut ResourceNames,
    specs: &mut SpecInterner,
) -> Result<Option<PodDevices>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let pod_uid = pod.metadata.uid.as_deref();
    let Some(spec) = pod.spec.as_ref() else { return Ok(None) };
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
                    return Err(format!(
                        "waiting for the ResourceClaim of {} (from ResourceClaimTemplate {}) to be created",
                        entry.name,
                        entry.resource_claim_template_name.as_deref().unwrap_or("")
                    ));
                }
            }
        } else {
            return Err(format!("resource claim {} names neither a claim nor a template", entry.name));
        };
        let key = ClaimKey { namespace: namespace.to_string(), name: claim_name.clone() };
        let Some(claim) = claims.get(&(namespace, claim_name.as_str())) else {
            return Err(format!("ResourceClaim {key} does not exist"));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("ResourceClaim {key} is being deleted"));
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
                return Err(format!("ResourceClaim {key} was not created for pod {namespace}/{pod_name}"));
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
                    return Err(format!("ResourceClaim {key} is reserved for {reserved} consumers, the most allowed"));
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
            None => {
                let spec = match &claim.spec {
                    Some(spec) => claim_spec(&format!("ResourceClaim {key}"), spec)?,
                    None => ClaimSpec::default(),
                };
                ClaimNeed::Allocate(specs.intern(spec))
            }
        };
        devices.claims.push(PodClaim { name: entry.name.clone(), claim: key, private, group, need });
    }
    // Extended resources a DeviceClass serves, unless a claim for them exists already.
    let served = pod.status.as_ref().and_then(|s| s.extended_resource_claim_status.as_ref()).is_some();
    if !dra.extended_classes.is_empty() && !served {
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
                let count =
                    Quantity::parse(&q.0).map_err(|e| format!("container {}: {e}", container.name))?.units_ceil();
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
