//! Quota keys on devices (QUEUES.md §2.11): `deviceclass/<class>` counts devices that the
//! class's selectors select, `<capacity>.deviceclass/<class>` (`memory.deviceclass/<class>`)
//! sums a capacity of them. A running pod and a gang placed in the cycle are charged on
//! the devices actually allocated to them; a pending pod, whose devices are not chosen yet,
//! on Kueue's conservative estimate: per request, its count times the most any device it
//! could get would charge. One device may charge several keys.
//!
//! Computed once per cycle, before anything is placed; with no device key in the tree it
//! is empty and costs nothing.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::claims::ClaimPlacement;
use crate::engine::dra::allocate::ResolvedSpec;
use crate::engine::dra::model::{AllocationMode, ClaimNeed, ClaimSpec, DeviceIdx, DraSnapshot, GpuShare, SubRequest};
use crate::engine::dra::selectors::{SelectorCache, SelectorId};
use crate::engine::model::{PendingPod, Snapshot};
use crate::engine::queues::QueueTree;
use crate::engine::resources::ResourceNames;
use crate::quantity::Quantity;

/// Amounts per key index of the tree, only the keys charged.
pub type Charges = Vec<(usize, i64)>;

/// What a device key measures.
#[derive(Clone, Debug, PartialEq)]
struct DeviceKey {
    /// Index in the tree's keys.
    k: usize,
    /// None: devices are counted; else the capacity summed.
    capacity: Option<String>,
}

/// The device class a quota key names, and the capacity it sums (None: it counts
/// devices); None for a key that is not on devices.
pub fn device_key(name: &str) -> Option<(Option<&str>, &str)> {
    if let Some(class) = name.strip_prefix("deviceclass/") {
        return Some((None, class));
    }
    let (capacity, class) = name.split_once(".deviceclass/")?;
    Some((Some(capacity), class))
}

/// Charges of one cycle.
#[derive(Debug, Default, PartialEq)]
pub struct DeviceCharges {
    keys: Vec<DeviceKey>,
    /// Per device of the snapshot: what it charges when held whole.
    per_device: Vec<Charges>,
    /// Per key of the tree: what the queues divide (devices published, less what claims
    /// of others hold); zero for keys that are not on devices.
    pub capacity: Vec<i64>,
    /// Per running gang, per pod: what its devices charge.
    running: Vec<Vec<Charges>>,
    /// Per pending gang, per pod: the estimate.
    pending: Vec<Vec<Charges>>,
    /// What is wrong with a device key (its class is missing, a selector fails), in words.
    pub problems: Vec<String>,
}

impl DeviceCharges {
    /// The charges of `snapshot`: on device keys, and GPU fractions on the GPU key; empty
    /// unless a queue governs one of them.
    pub fn new(snapshot: &Snapshot, selectors: &mut SelectorCache) -> DeviceCharges {
        let mut out = DeviceCharges::on_devices(snapshot, selectors);
        if let Some(k) = snapshot.queues.gpu_key {
            out.add_fractions(snapshot, k);
        }
        out
    }

    /// Fractions of GPUs (KAI's annotations) charged on the GPU key `k`.
    fn add_fractions(&mut self, snapshot: &Snapshot, k: usize) {
        let dra = &snapshot.dra;
        self.running.resize_with(snapshot.running.len(), Vec::new);
        for (gang, charged) in snapshot.running.iter().zip(&mut self.running) {
            charged.resize_with(gang.pods.len(), Charges::new);
            for (pod, charges) in gang.pods.iter().zip(charged) {
                if pod.gpu_milli > 0 {
                    add(charges, &[(k, pod.gpu_milli)]);
                }
            }
        }
        let mut estimates = super::fractions::Pending::default();
        self.pending.resize_with(snapshot.gangs.len(), Vec::new);
        for (gang, charged) in snapshot.gangs.iter().zip(&mut self.pending) {
            charged.resize_with(gang.pods.len(), Charges::new);
            for (pod, charges) in gang.pods.iter().zip(charged) {
                let Some(devices) = &pod.devices else { continue };
                let milli = estimates.estimate(dra, &devices.extended);
                if milli > 0 {
                    add(charges, &[(k, milli)]);
                }
            }
        }
    }

    /// The charges on device keys; empty unless a queue governs one.
    fn on_devices(snapshot: &Snapshot, selectors: &mut SelectorCache) -> DeviceCharges {
        let tree = &snapshot.queues;
        let keys = device_keys(tree, &snapshot.resources);
        if keys.is_empty() {
            return DeviceCharges::default();
        }
        let dra = &snapshot.dra;
        let mut out = DeviceCharges {
            per_device: vec![Vec::new(); dra.devices.len()],
            capacity: vec![0; tree.keys.len()],
            ..DeviceCharges::default()
        };
        for key in &keys {
            let (_, class) = device_key(snapshot.resources.name(tree.keys[key.k])).expect("a device key");
            let Some(ids) = class_selectors(dra, class, selectors, &mut out.problems) else { continue };
            for (d, device) in dra.devices.iter().enumerate() {
                match all_match(selectors, &ids, d as DeviceIdx, dra) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        if out.problems.len() < 8 {
                            out.problems.push(format!("class {class}: on device {}: {e}", device.id()));
                        }
                        continue;
                    }
                }
                let amount = full(dra, d as DeviceIdx, key.capacity.as_deref());
                if amount > 0 {
                    out.per_device[d].push((key.k, amount));
                    out.capacity[key.k] += amount;
                }
            }
        }
        out.keys = keys;
        for used in &dra.in_use {
            if !used.admin_access {
                let charged = out.charge(dra, used.device, used.consumed.as_deref());
                for (k, amount) in charged {
                    out.capacity[k] -= amount;
                }
            }
        }
        out.running = snapshot
            .running
            .iter()
            .map(|gang| {
                gang.pods
                    .iter()
                    .map(|pod| {
                        let mut sum = Charges::new();
                        for used in pod.devices.iter().filter(|u| !u.admin_access) {
                            add(&mut sum, &out.charge(dra, used.device, used.consumed.as_deref()));
                        }
                        sum
                    })
                    .collect()
            })
            .collect();
        let mut estimates = Estimates { dra, selectors, specs: HashMap::new(), classes: HashMap::new() };
        out.pending = snapshot
            .gangs
            .iter()
            .map(|gang| {
                let mut shared: Vec<&crate::engine::dra::model::ClaimKey> = Vec::new();
                gang.pods.iter().map(|pod| estimates.pod(&out, pod, &mut shared)).collect()
            })
            .collect();
        out
    }

    /// Whether any queue governs a key on devices.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// What pod `p` of running gang `r` holds in devices.
    pub fn running(&self, r: usize, p: usize) -> &[(usize, i64)] {
        self.running.get(r).and_then(|pods| pods.get(p)).map_or(&[], Vec::as_slice)
    }

    /// What pending pod `p` of gang `g` is estimated to take in devices.
    pub fn pending(&self, g: usize, p: usize) -> &[(usize, i64)] {
        self.pending.get(g).and_then(|pods| pods.get(p)).map_or(&[], Vec::as_slice)
    }

    /// What the devices allocated by `claims` (a placement of this cycle) charge.
    pub fn placed(&self, dra: &DraSnapshot, claims: &[ClaimPlacement]) -> Charges {
        let mut sum = Charges::new();
        if self.is_empty() {
            return sum;
        }
        for allocation in claims.iter().filter_map(|c| c.allocation.as_ref()) {
            for d in allocation.devices.iter().filter(|d| !d.admin_access) {
                add(&mut sum, &self.charge(dra, d.device, d.consumed.as_deref()));
            }
        }
        sum
    }

    /// What holding `device` charges: all of it, or the share `consumed`.
    fn charge(&self, dra: &DraSnapshot, device: DeviceIdx, consumed: Option<&[(String, Quantity)]>) -> Charges {
        let Some(whole) = self.per_device.get(device as usize) else { return Charges::new() };
        let Some(consumed) = consumed else { return whole.clone() };
        let d = &dra.devices[device as usize];
        whole
            .iter()
            .map(|&(k, amount)| {
                let capacity = self.keys.iter().find(|key| key.k == k).and_then(|key| key.capacity.as_deref());
                let Some(capacity) = capacity else { return (k, amount) };
                // A share charges the part of the capacity it consumes.
                let i = d.capacity_index(capacity);
                let share = consumed
                    .iter()
                    .find(|(name, _)| i.is_some() && d.capacity_index(name) == i)
                    .map_or(0, |(_, q)| q.units_ceil());
                (k, share.min(amount))
            })
            .collect()
    }
}

/// Adds `more` to `sum`, key by key.
pub fn add(sum: &mut Charges, more: &[(usize, i64)]) {
    for &(k, amount) in more {
        match sum.iter_mut().find(|(s, _)| *s == k) {
            Some(entry) => entry.1 += amount,
            None => sum.push((k, amount)),
        }
    }
}

fn device_keys(tree: &QueueTree, names: &ResourceNames) -> Vec<DeviceKey> {
    tree.keys
        .iter()
        .enumerate()
        .filter_map(|(k, &id)| {
            let (capacity, _) = device_key(names.name(id))?;
            Some(DeviceKey { k, capacity: capacity.map(str::to_string) })
        })
        .collect()
}

/// The compiled selectors of `class`, or None (with the problem noted) when it is missing
/// or one of them does not compile.
fn class_selectors(
    dra: &DraSnapshot,
    class: &str,
    selectors: &mut SelectorCache,
    problems: &mut Vec<String>,
) -> Option<Vec<SelectorId>> {
    let Some(found) = dra.classes.get(class) else {
        problems.push(format!("device class {class} does not exist"));
        return None;
    };
    let ids: Vec<SelectorId> = found.selectors.iter().map(|e| selectors.id(e)).collect();
    if let Some(error) = ids.iter().find_map(|&id| selectors.compile_error(id)) {
        problems.push(format!("class {class}: {error}"));
        return None;
    }
    Some(ids)
}

fn all_match(
    selectors: &mut SelectorCache,
    ids: &[SelectorId],
    d: DeviceIdx,
    dra: &DraSnapshot,
) -> Result<bool, Arc<str>> {
    let device = &dra.devices[d as usize];
    for &id in ids {
        if !selectors.matches(id, device)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a key charges for `device` held whole: one device, or its capacity.
fn full(dra: &DraSnapshot, device: DeviceIdx, capacity: Option<&str>) -> i64 {
    let d = &dra.devices[device as usize];
    match capacity {
        None => 1,
        Some(name) => d.capacity_index(name).map_or(0, |i| d.capacity[i].1.value.units_ceil()),
    }
}

/// Estimates for pending pods, memoised per claim spec and per extended-resource class.
struct Estimates<'a> {
    dra: &'a DraSnapshot,
    selectors: &'a mut SelectorCache,
    /// By content: pods of one template have equal specs, not always one `Arc`.
    specs: HashMap<Arc<ClaimSpec>, Charges>,
    classes: HashMap<(String, u32, Option<GpuShare>), Charges>,
}

impl<'a> Estimates<'a> {
    /// A pod's estimate: its claims to allocate (a claim shared by several pods of the gang
    /// counted once, in `shared`) and the extended resources DRA may serve.
    fn pod<'p>(
        &mut self,
        charges: &DeviceCharges,
        pod: &'p PendingPod,
        shared: &mut Vec<&'p crate::engine::dra::model::ClaimKey>,
    ) -> Charges {
        let mut sum = Charges::new();
        let Some(devices) = &pod.devices else { return sum };
        for claim in &devices.claims {
            let ClaimNeed::Allocate(spec) = &claim.need else { continue };
            if !claim.private {
                if shared.contains(&&claim.claim) {
                    continue;
                }
                shared.push(&claim.claim);
            }
            if !self.specs.contains_key(&**spec) {
                let estimate = self.spec(charges, spec);
                self.specs.insert(spec.clone(), estimate);
            }
            add(&mut sum, &self.specs[&**spec]);
        }
        for request in &devices.extended {
            let key = (request.class.clone(), request.count, request.share);
            if !self.classes.contains_key(&key) {
                let spec = Arc::new(ClaimSpec {
                    requests: vec![crate::engine::dra::model::Request {
                        name: request.request_name.clone(),
                        alternatives: vec![request.sub_request()],
                    }],
                    constraints: Vec::new(),
                });
                let estimate = self.spec(charges, &spec);
                self.classes.insert(key.clone(), estimate);
            }
            add(&mut sum, &self.classes[&key]);
        }
        sum
    }

    /// Per request, the most any of its alternatives could charge; summed over requests.
    fn spec(&mut self, charges: &DeviceCharges, spec: &Arc<ClaimSpec>) -> Charges {
        let resolved = ResolvedSpec::resolve(spec, self.dra, self.selectors);
        let mut sum = Charges::new();
        for (r, request) in spec.requests.iter().enumerate() {
            let mut most = Charges::new();
            for (a, sub) in request.alternatives.iter().enumerate() {
                // An unusable alternative (a missing class) is never allocated.
                let Ok(ids) = &resolved.selectors[r][a] else { continue };
                let ids: Vec<SelectorId> = ids.iter().map(|&(id, _)| id).collect();
                let alternative = self.alternative(charges, sub, &ids);
                for (k, amount) in alternative {
                    match most.iter_mut().find(|(m, _)| *m == k) {
                        Some(entry) => entry.1 = entry.1.max(amount),
                        None => most.push((k, amount)),
                    }
                }
            }
            add(&mut sum, &most);
        }
        sum
    }

    /// One alternative: the devices it could get that some key charges, the most each key
    /// charges for one of them, times the number of devices (for `All`, the most devices
    /// it would get on one node).
    fn alternative(&mut self, charges: &DeviceCharges, sub: &SubRequest, ids: &[SelectorId]) -> Charges {
        let dra = self.dra;
        let mut eligible = vec![false; dra.devices.len()];
        let mut per_device = Charges::new();
        for (d, whole) in charges.per_device.iter().enumerate() {
            if whole.is_empty() || !matches!(all_match(self.selectors, ids, d as DeviceIdx, dra), Ok(true)) {
                continue;
            }
            eligible[d] = true;
            let device = &dra.devices[d];
            for &(k, amount) in whole {
                let capacity = charges.keys.iter().find(|key| key.k == k).and_then(|key| key.capacity.as_deref());
                // A share of a device that allows several consumes what it asks for, as
                // the device's policy rounds it (or the policy's default).
                let share = capacity
                    .filter(|_| device.allow_multiple_allocations)
                    .and_then(|name| sub.consumes(device, device.capacity_index(name)?));
                let amount = share.map_or(amount, |q| q.units_ceil().min(amount));
                match per_device.iter_mut().find(|(m, _)| *m == k) {
                    Some(entry) => entry.1 = entry.1.max(amount),
                    None => per_device.push((k, amount)),
                }
            }
        }
        let count = match sub.mode {
            AllocationMode::ExactCount(n) => i64::from(n),
            AllocationMode::All => dra
                .node_devices
                .iter()
                .map(|devices| devices.iter().filter(|&&d| eligible[d as usize]).count() as i64)
                .max()
                .unwrap_or(0),
        };
        per_device.into_iter().map(|(k, amount)| (k, amount.saturating_mul(count))).collect()
    }
}
