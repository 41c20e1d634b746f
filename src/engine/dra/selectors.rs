//! Compiled selectors and their results per device, kept from one cycle to the next.
//!
//! Each expression is compiled once, whatever number of classes and claims use it; its
//! result on a device is computed once per device revision, and dropped with the revision
//! when the device changes. The cache changes no result: the engine stays pure, it only
//! stops repeating work.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::cel::Selector;
use super::model::{Device, DeviceIdx, DraSnapshot};

/// An expression's index in a [`SelectorCache`].
pub type SelectorId = u32;

#[derive(Default)]
pub struct SelectorCache {
    ids: HashMap<String, SelectorId>,
    compiled: Vec<Result<Selector, Arc<str>>>,
    results: HashMap<(SelectorId, u64), Result<bool, Arc<str>>>,
    /// Evaluations run (not answered from the cache), for benchmarks and tests.
    pub evaluations: u64,
    /// Per list of selectors applied in order (a request alternative's class and own
    /// selectors): the devices of the snapshot where one fails at run time. Kept for the
    /// device set `scanned_for`, dropped whole when it changes.
    failures: HashMap<Vec<SelectorId>, Failures>,
    scanned_for: u64,
}

/// Devices where a list of selectors fails: (device, position of the failing selector in
/// the list, the error), by device.
pub type Failures = Arc<[(DeviceIdx, usize, Arc<str>)]>;

impl SelectorCache {
    /// The id of `expression`, compiling it the first time it is seen.
    pub fn id(&mut self, expression: &str) -> SelectorId {
        if let Some(&id) = self.ids.get(expression) {
            return id;
        }
        let id = self.compiled.len() as SelectorId;
        self.compiled.push(Selector::compile(expression).map_err(Arc::from));
        self.ids.insert(expression.to_string(), id);
        id
    }

    /// Why the expression does not compile, if it does not.
    pub fn compile_error(&self, id: SelectorId) -> Option<&Arc<str>> {
        self.compiled[id as usize].as_ref().err()
    }

    pub fn expression(&self, id: SelectorId) -> Option<&str> {
        self.compiled[id as usize].as_ref().ok().map(|s| s.expression.as_str())
    }

    /// The selector's verdict on `device`: from the cache, or evaluated now.
    pub fn matches(&mut self, id: SelectorId, device: &Device) -> Result<bool, Arc<str>> {
        if let Some(result) = self.results.get(&(id, device.revision)) {
            return result.clone();
        }
        let result = match &self.compiled[id as usize] {
            Ok(selector) => {
                self.evaluations += 1;
                selector.matches(&device.cel).map_err(Arc::from)
            }
            Err(e) => Err(e.clone()),
        };
        self.results.insert((id, device.revision), result.clone());
        result
    }

    /// Where `ids`, applied in order until one is false (as the allocator applies them),
    /// fail at run time on any device of `dra` in a complete pool. Kubernetes aborts a
    /// pod's allocation on such an error wherever it is met, so the scheduler must know of
    /// it before it picks a node where the expression happens to evaluate. `fingerprint`
    /// names `dra`'s device set: a scan is reused until it changes.
    pub fn failures(&mut self, ids: &[SelectorId], dra: &DraSnapshot, fingerprint: u64) -> Failures {
        if self.scanned_for != fingerprint {
            self.failures.clear();
            self.scanned_for = fingerprint;
        }
        if let Some(found) = self.failures.get(ids) {
            return found.clone();
        }
        let mut found = Vec::new();
        for (d, device) in dra.devices.iter().enumerate() {
            if !dra.pool_of(d as DeviceIdx).complete {
                continue;
            }
            for (position, &id) in ids.iter().enumerate() {
                match self.matches(id, device) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        found.push((d as DeviceIdx, position, e));
                        break;
                    }
                }
            }
        }
        let found: Failures = found.into();
        self.failures.insert(ids.to_vec(), found.clone());
        found
    }

    /// Drops the results of devices no longer in `dra`, once there are many more results
    /// than its devices could have.
    pub fn trim(&mut self, dra: &DraSnapshot) {
        let bound = (dra.devices.len() + 64) * (self.compiled.len() + 1) * 2;
        if self.results.len() <= bound {
            return;
        }
        let live: HashSet<u64> = dra.devices.iter().map(|d| d.revision).collect();
        self.results.retain(|(_, revision), _| live.contains(revision));
    }
}
