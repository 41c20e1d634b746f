//! The DRA part of a snapshot: DeviceClasses, pools (the newest generation of their
//! slices, devices memoised per slice), which nodes reach which devices, and the devices
//! allocated claims hold.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass as KubeDeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};

use super::slices::slice_devices;
use super::{Error, IMPLICIT_EXTENDED_PREFIX};
use crate::engine::dra::model::{Device, DeviceClass, DeviceIdx, DeviceNodes, DeviceUse, DraSnapshot, Pool};
use crate::engine::model::Node as EngineNode;
use crate::quantity::Quantity;

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

/// A slice's devices as converted: (resourceVersion, taint-rule fingerprint, devices).
type ConvertedSlice = (String, String, Arc<Vec<Arc<Device>>>);

/// Device conversions kept from one snapshot to the next.
#[derive(Default)]
pub struct DeviceMemo {
    /// By slice name.
    slices: HashMap<String, ConvertedSlice>,
    next_revision: u64,
    pub specs: super::ClaimSpecs,
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
    // Pools: slices of one driver and pool name; only the newest generation counts.
    let mut pools: BTreeMap<(String, String), Vec<&ResourceSlice>> = BTreeMap::new();
    for slice in view.slices {
        pools.entry((slice.spec.driver.clone(), slice.spec.pool.name.clone())).or_default().push(slice);
    }
    let mut live_slices = HashSet::new();
    for ((driver, name), slices) in pools {
        let (pool, devices, bad) = read_pool(driver.clone(), name.clone(), slices, view.rules, memo, &mut live_slices);
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
    dra.node_devices = node_devices(&dra, nodes);

    // Devices that allocated claims hold.
    let index = device_index(&dra);
    let mut in_use = Vec::new();
    for claim in view.claims {
        in_use.extend(claim_uses(&index, claim));
    }
    dra.in_use = in_use;
    dra
}

/// One pool from its slices: those of the newest generation, their counter sets and
/// devices (each slice's converted once and kept in `memo`), and the last problem found
/// (a counter or slice that does not read, a device twice), if any, for which the pool is
/// left out. Every slice read is noted in `live_slices`.
fn read_pool(
    driver: String,
    name: String,
    slices: Vec<&ResourceSlice>,
    rules: &[&DeviceTaintRule],
    memo: &mut DeviceMemo,
    live_slices: &mut HashSet<String>,
) -> (Pool, Vec<Arc<Device>>, Option<Error>) {
    let generation = slices.iter().map(|s| s.spec.pool.generation).max().unwrap_or(0);
    let mut current: Vec<&ResourceSlice> =
        slices.into_iter().filter(|s| s.spec.pool.generation == generation).collect();
    current.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let expected = current.iter().map(|s| s.spec.pool.resource_slice_count).max().unwrap_or(0);
    let complete = current.len() as i64 == expected;
    let mut pool = Pool { driver, name, generation, complete, counter_sets: HashMap::new(), binding_conditions: false };
    let mut devices: Vec<Arc<Device>> = Vec::new();
    let mut bad = None;
    for slice in &current {
        for set in slice.spec.shared_counters.iter().flatten() {
            let mut counters = HashMap::new();
            for (counter, amount) in &set.counters {
                match Quantity::parse(&amount.value.0) {
                    Ok(q) => drop(counters.insert(counter.clone(), q)),
                    Err(source) => {
                        bad = Some(Error::CounterSet { set: set.name.clone(), counter: counter.clone(), source });
                    }
                }
            }
            pool.counter_sets.insert(set.name.clone(), counters);
        }
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        live_slices.insert(slice_name.clone());
        match memoised_devices(slice, slice_name, rules, memo) {
            Ok(d) => devices.extend(d.iter().cloned()),
            Err(e) => bad = Some(e),
        }
    }
    pool.binding_conditions = devices.iter().any(|d| d.binding.is_some());
    let mut names = HashSet::new();
    if let Some(duplicate) = devices.iter().find(|d| !names.insert(d.name.as_str())) {
        bad = Some(Error::DuplicateDevice(duplicate.name.clone()));
    }
    (pool, devices, bad)
}

/// A slice's devices: as converted before while neither the slice nor a taint rule that
/// may select its devices changed (a rule for one driver's pool leaves every other pool's
/// devices, and their cached selector results, alone), else converted now and kept.
fn memoised_devices(
    slice: &ResourceSlice,
    slice_name: String,
    rules: &[&DeviceTaintRule],
    memo: &mut DeviceMemo,
) -> Result<Arc<Vec<Arc<Device>>>, Error> {
    let version = slice.metadata.resource_version.clone();
    let fingerprint = rule_fingerprint(slice, rules);
    let cached = memo.slices.get(&slice_name).filter(|(v, f, _)| Some(v) == version.as_ref() && *f == fingerprint);
    match cached {
        Some((_, _, devices)) => Ok(devices.clone()),
        None => slice_devices(slice, rules, &mut memo.next_revision).map(|d| {
            let d = Arc::new(d.into_iter().map(Arc::new).collect::<Vec<_>>());
            if let Some(v) = version {
                memo.slices.insert(slice_name, (v, fingerprint, d.clone()));
            }
            d
        }),
    }
}

/// The names and versions of the taint rules that may select a slice's devices (by its
/// driver and pool), sorted and joined: a slice's conversion is kept while this is unchanged.
fn rule_fingerprint(slice: &ResourceSlice, rules: &[&DeviceTaintRule]) -> String {
    let mut versions: Vec<String> = rules
        .iter()
        .filter(|r| {
            r.spec.device_selector.as_ref().is_some_and(|s| {
                s.driver.as_deref().is_none_or(|d| d == slice.spec.driver)
                    && s.pool.as_deref().is_none_or(|p| p == slice.spec.pool.name)
            })
        })
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
}

/// Which nodes reach which devices: per node, the devices on it, those whose node selector
/// it matches, and those every node reaches.
fn node_devices(dra: &DraSnapshot, nodes: &[EngineNode]) -> Vec<Vec<DeviceIdx>> {
    let by_name: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut node_devices = vec![Vec::new(); nodes.len()];
    for (i, device) in dra.devices.iter().enumerate() {
        match &device.nodes {
            DeviceNodes::Node(name) => {
                if let Some(&n) = by_name.get(name.as_str()) {
                    node_devices[n].push(i as DeviceIdx);
                }
            }
            DeviceNodes::Selector(selector) => {
                for (n, node) in nodes.iter().enumerate() {
                    if selector.matches(node) {
                        node_devices[n].push(i as DeviceIdx);
                    }
                }
            }
            DeviceNodes::All => node_devices.iter_mut().for_each(|list| list.push(i as DeviceIdx)),
        }
    }
    node_devices
}

/// Devices by (driver, pool, name).
pub type DeviceIndex<'d> = HashMap<(&'d str, &'d str, &'d str), DeviceIdx>;

pub fn device_index(dra: &DraSnapshot) -> DeviceIndex<'_> {
    dra.devices.iter().enumerate().map(|(i, d)| ((&*d.driver, &*d.pool, d.name.as_str()), i as DeviceIdx)).collect()
}

/// The devices an allocated claim holds (none for a claim not allocated).
pub fn claim_uses(index: &DeviceIndex<'_>, claim: &ResourceClaim) -> Vec<DeviceUse> {
    let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
    let mut uses = Vec::new();
    for r in results.and_then(|d| d.results.as_ref()).into_iter().flatten() {
        let Some(&device) = index.get(&(r.driver.as_str(), r.pool.as_str(), r.device.as_str())) else { continue };
        let consumed = r
            .consumed_capacity
            .as_ref()
            .map(|c| c.iter().filter_map(|(name, q)| Quantity::parse(&q.0).ok().map(|q| (name.clone(), q))).collect());
        uses.push(DeviceUse { device, admin_access: r.admin_access == Some(true), consumed });
    }
    uses
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(pool: &str) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pool}-slice"), "resourceVersion": "1"},
            "spec": {"driver": "gpu.example.com", "nodeName": pool,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]},
        }))
        .expect("slice")
    }

    fn rule(pool: &str, version: &str) -> DeviceTaintRule {
        serde_json::from_value(json!({
            "metadata": {"name": format!("drain-{pool}"), "resourceVersion": version},
            "spec": {"deviceSelector": {"driver": "gpu.example.com", "pool": pool},
                     "taint": {"key": "drain", "effect": "NoSchedule"}},
        }))
        .expect("rule")
    }

    /// Revisions of the devices by pool, in order.
    fn revisions(slices: &[&ResourceSlice], rules: &[&DeviceTaintRule], memo: &mut DeviceMemo) -> Vec<(String, u64)> {
        let view = DraView { slices, rules, ..Default::default() };
        let dra = snapshot(view, &[], memo, &mut Vec::new());
        dra.devices.iter().map(|d| (d.pool.to_string(), d.revision)).collect()
    }

    #[test]
    fn a_taint_rule_converts_again_only_the_pools_it_may_select() {
        let (a, b) = (slice("a"), slice("b"));
        let mut memo = DeviceMemo::default();
        let before = revisions(&[&a, &b], &[], &mut memo);
        let drain_a = rule("a", "1");
        let after = revisions(&[&a, &b], &[&drain_a], &mut memo);
        let changed: Vec<&str> =
            before.iter().zip(&after).filter(|(x, y)| x.1 != y.1).map(|(x, _)| x.0.as_str()).collect();
        assert_eq!(changed, ["a", "a"], "pool b's devices (and their selector results) are kept");
        // The same rule changed again: pool a only, again.
        let again = revisions(&[&a, &b], &[&rule("a", "2")], &mut memo);
        assert_eq!(again[2..], after[2..]);
        assert_ne!(again[..2], after[..2]);
    }
}
