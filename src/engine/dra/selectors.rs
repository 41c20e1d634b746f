//! Compiled selectors and their results per device, kept from one cycle to the next.
//!
//! Each expression is compiled once, whatever number of classes and claims use it; its
//! result on a device is computed once per device revision, and dropped with the revision
//! when the device changes. The cache changes no result: the engine stays pure, it only
//! stops repeating work.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::cel::Selector;
use super::model::{Device, DraSnapshot};

/// An expression's index in a [`SelectorCache`].
pub type SelectorId = u32;

#[derive(Default)]
pub struct SelectorCache {
    ids: HashMap<String, SelectorId>,
    compiled: Vec<Result<Selector, Arc<str>>>,
    results: HashMap<(SelectorId, u64), Result<bool, Arc<str>>>,
    /// Evaluations run (not answered from the cache), for benchmarks and tests.
    pub evaluations: u64,
}

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
