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
    /// Per expression: when a cycle last asked for it (the snapshot's clock, seconds).
    last_used: Vec<i64>,
    now: i64,
    results: HashMap<(SelectorId, u64), Result<bool, Arc<str>>>,
    /// Evaluations run (not answered from the cache), for benchmarks and tests.
    pub evaluations: u64,
    /// Device searches skipped because the same search gave up before.
    pub searches_skipped: u64,
    /// Per list of selectors applied in order (a request alternative's class and own
    /// selectors): the devices of the snapshot where one fails at run time. Kept for the
    /// device set `scanned_for`, dropped whole when it changes.
    failures: HashMap<Vec<SelectorId>, Failures>,
    scanned_for: u64,
    /// Device searches that reached their step limit on a node, by what they searched for
    /// and the node's devices as they were: the same search is not run again until one of
    /// them changes.
    gave_up: HashSet<u64>,
}

/// The most searches remembered as given up; then the memory starts afresh.
const MAX_GAVE_UP: usize = 4096;

/// Devices where a list of selectors fails: (device, position of the failing selector in
/// the list, the error), by device.
pub type Failures = Arc<[(DeviceIdx, usize, Arc<str>)]>;

impl SelectorCache {
    /// The id of `expression`, compiling it the first time it is seen.
    pub fn id(&mut self, expression: &str) -> SelectorId {
        if let Some(&id) = self.ids.get(expression) {
            self.last_used[id as usize] = self.now;
            return id;
        }
        let id = self.compiled.len() as SelectorId;
        self.compiled.push(Selector::compile(expression).map_err(|e| Arc::from(e.to_string())));
        self.last_used.push(self.now);
        self.ids.insert(expression.to_string(), id);
        id
    }

    /// Sets the clock that stamps the expressions asked for (the snapshot's `now`).
    pub fn at(&mut self, now: i64) {
        self.now = now;
    }

    /// How many expressions are compiled.
    pub fn len(&self) -> usize {
        self.compiled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }

    /// Drops the expressions no cycle asked for since `oldest`, with their results, once
    /// they are more than a quarter of the cache (plus 64), so tenants who write ever new
    /// selectors cannot make it grow without bound. Ids change: call between cycles.
    fn drop_idle(&mut self, oldest: i64) {
        let idle = self.last_used.iter().filter(|&&t| t < oldest).count();
        if idle <= 64 + self.compiled.len() / 4 {
            return;
        }
        let mut remap: Vec<Option<SelectorId>> = vec![None; self.compiled.len()];
        let mut compiled = Vec::with_capacity(self.compiled.len() - idle);
        let mut last_used = Vec::with_capacity(compiled.capacity());
        for (old, (selector, used)) in std::mem::take(&mut self.compiled).into_iter().zip(&self.last_used).enumerate() {
            if *used >= oldest {
                remap[old] = Some(compiled.len() as SelectorId);
                compiled.push(selector);
                last_used.push(*used);
            }
        }
        (self.compiled, self.last_used) = (compiled, last_used);
        self.ids.retain(|_, id| remap[*id as usize].map(|new| *id = new).is_some());
        self.results = std::mem::take(&mut self.results)
            .into_iter()
            .filter_map(|((id, revision), result)| remap[id as usize].map(|new| ((new, revision), result)))
            .collect();
        self.failures.clear();
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
                selector.matches(&device.cel).map_err(|e| Arc::from(e.to_string()))
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

    /// Whether the search `key` names gave up before (counted as skipped when it did).
    pub fn gave_up(&mut self, key: u64) -> bool {
        let skipped = self.gave_up.contains(&key);
        self.searches_skipped += skipped as u64;
        skipped
    }

    /// Whether any search is remembered as given up (when none is, none is looked up).
    pub fn any_gave_up(&self) -> bool {
        !self.gave_up.is_empty()
    }

    pub fn remember_gave_up(&mut self, key: u64) {
        if self.gave_up.len() >= MAX_GAVE_UP {
            self.gave_up.clear();
        }
        self.gave_up.insert(key);
    }

    /// Between cycles: drops expressions idle for more than `idle_seconds` before `now`,
    /// and the results of devices no longer in `dra` once there are many more results than
    /// its devices could have.
    pub fn trim(&mut self, dra: &DraSnapshot, now: i64, idle_seconds: i64) {
        self.now = now;
        self.drop_idle(now.saturating_sub(idle_seconds));
        let bound = (dra.devices.len() + 64) * (self.compiled.len() + 1) * 2;
        if self.results.len() <= bound {
            return;
        }
        let live: HashSet<u64> = dra.devices.iter().map(|d| d.revision).collect();
        self.results.retain(|(_, revision), _| live.contains(revision));
    }
}
