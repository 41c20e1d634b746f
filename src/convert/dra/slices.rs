//! Devices from ResourceSlices: attributes, capacity, counters, the nodes that reach them,
//! and their taints (their own and those of the DeviceTaintRules that select them).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{Device as KubeDevice, DeviceTaintRule, ResourceSlice};

use super::{Error, Problem, Result, node_selector, taint};
use crate::engine::dra::cel::DeviceVal;
use crate::engine::dra::model::{
    AttributeValue, CapacityPolicy, Device, DeviceBinding, DeviceCapacity, DeviceNodes, DeviceTaint,
};
use crate::engine::dra::semver::Semver;
use crate::quantity::Quantity;

fn qualified(driver: &str, name: &str) -> String {
    if name.contains('/') { name.to_string() } else { format!("{driver}/{name}") }
}

/// Converts one slice's devices, with the taints of `rules` that select them.
pub(super) fn slice_devices(
    slice: &ResourceSlice,
    rules: &[&DeviceTaintRule],
    next_revision: &mut u64,
) -> Result<Vec<Device>> {
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
            None => device_nodes(d, &device_object)?,
        };
        let attributes = attributes(d, &driver, &device_object)?;
        let capacity = capacity(d, &device_object)?;
        let taints = taints(d, rules, (&driver, &pool), &device_object)?;
        let consumes = consumed_counters(d, &device_object)?;
        let allow_multiple_allocations = d.allow_multiple_allocations == Some(true);
        let binding = binding(d);
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
            binding,
            cel,
            revision: *next_revision,
        });
    }
    Ok(devices)
}

/// A device's binding conditions, if it has any.
fn binding(d: &KubeDevice) -> Option<Arc<DeviceBinding>> {
    let conditions = d.binding_conditions.clone().unwrap_or_default();
    let failure_conditions = d.binding_failure_conditions.clone().unwrap_or_default();
    let binds_to_node = d.binds_to_node == Some(true);
    let any = !conditions.is_empty() || !failure_conditions.is_empty() || binds_to_node;
    any.then(|| Arc::new(DeviceBinding { conditions, failure_conditions, binds_to_node }))
}

/// The nodes that reach a device of a slice that does not say for all its devices: the
/// device's own node, node selector or all nodes (one must be set).
fn device_nodes(d: &KubeDevice, device_object: &str) -> Result<DeviceNodes> {
    if let Some(node) = &d.node_name {
        Ok(DeviceNodes::Node(node.clone()))
    } else if let Some(selector) = &d.node_selector {
        Ok(DeviceNodes::Selector(node_selector(device_object, selector)?))
    } else if d.all_nodes == Some(true) {
        Ok(DeviceNodes::All)
    } else {
        Err(Error::invalid(device_object, Problem::NoDeviceNodes))
    }
}

/// A device's attributes by qualified name (`driver/name` unless the name has a domain);
/// list-valued ones are left out.
fn attributes(d: &KubeDevice, driver: &str, device_object: &str) -> Result<HashMap<String, AttributeValue>> {
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
                Semver::parse(v)
                    .map_err(|reason| Error::invalid(device_object, Problem::Version { name: name.clone(), reason }))?,
            )
        } else {
            // List-valued attributes are alpha (DRAListTypeAttributes) and not read.
            continue;
        };
        attributes.insert(qualified(driver, name), value);
    }
    Ok(attributes)
}

/// A device's capacities, each with the policy for what a request may consume of it.
fn capacity(d: &KubeDevice, device_object: &str) -> Result<Vec<(String, DeviceCapacity)>> {
    let mut capacity = Vec::new();
    for (name, c) in d.capacity.iter().flatten() {
        let quantity = |text: &str| {
            Quantity::parse(text)
                .map_err(|source| Error::invalid(device_object, Problem::Capacity { name: name.clone(), source }))
        };
        let value = quantity(&c.value.0)?;
        let policy = match &c.request_policy {
            None => None,
            Some(p) => Some(CapacityPolicy {
                default: p.default.as_ref().map(|q| quantity(&q.0)).transpose()?,
                range: match &p.valid_range {
                    None => None,
                    Some(r) => Some((
                        quantity(&r.min.0)?,
                        r.max.as_ref().map(|q| quantity(&q.0)).transpose()?,
                        r.step.as_ref().map(|q| quantity(&q.0)).transpose()?,
                    )),
                },
                values: p.valid_values.iter().flatten().map(|q| quantity(&q.0)).collect::<Result<_, _>>()?,
            }),
        };
        capacity.push((name.clone(), DeviceCapacity { value, policy }));
    }
    Ok(capacity)
}

/// A device's taints: its own, then those of the rules that select it by driver, pool and
/// name (given as the device's driver and pool).
fn taints(
    d: &KubeDevice,
    rules: &[&DeviceTaintRule],
    (driver, pool): (&str, &str),
    device_object: &str,
) -> Result<Vec<DeviceTaint>> {
    let mut taints = d
        .taints
        .iter()
        .flatten()
        .map(taint)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|problem| Error::invalid(device_object, problem))?;
    for rule in rules {
        let selector = rule.spec.device_selector.as_ref();
        // A rule without a selector selects no device (resource.k8s.io/v1).
        let selects = selector.is_some_and(|s| {
            s.driver.as_deref().is_none_or(|v| v == driver)
                && s.pool.as_deref().is_none_or(|v| v == pool)
                && s.device.as_deref().is_none_or(|v| v == d.name)
        });
        if selects && let Ok(t) = taint(&rule.spec.taint) {
            taints.push(t);
        }
    }
    Ok(taints)
}

/// What a device consumes of its pool's shared counters: (counter set, counter, amount).
fn consumed_counters(d: &KubeDevice, device_object: &str) -> Result<Vec<(String, String, Quantity)>> {
    let mut consumes = Vec::new();
    for c in d.consumes_counters.iter().flatten() {
        for (counter, amount) in &c.counters {
            let q = Quantity::parse(&amount.value.0).map_err(|source| {
                Error::invalid(device_object, Problem::Counter { counter: counter.clone(), source })
            })?;
            consumes.push((c.counter_set.clone(), counter.clone(), q));
        }
    }
    Ok(consumes)
}
