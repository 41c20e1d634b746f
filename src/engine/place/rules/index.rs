//! Finding by label what a pod's labels concern, so that a change costs what it touches:
//! the tables whose selector could match a pod, the pods a new table could count, the
//! shields an anti-affinity term could reach.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use crate::engine::node::SelectorOperator;
use crate::engine::pods::PodSelector;

/// Items filed under label values: by one `In` requirement of their selector (an item is
/// found for a pod only if that label matches), or by every label they carry.
pub(super) struct LabelIndex<T> {
    by: HashMap<String, HashMap<String, Vec<T>>>,
    /// Items whose selector has no `In` requirement: every pod may concern them.
    always: Vec<T>,
}

impl<T> Default for LabelIndex<T> {
    fn default() -> Self {
        LabelIndex { by: HashMap::new(), always: Vec::new() }
    }
}

/// The first `In` requirement of a selector: a pod it matches has one of these values.
fn key_requirement(selector: &PodSelector) -> Option<(&str, &[String])> {
    let requirements = selector.as_ref()?;
    let r = requirements.iter().find(|r| r.operator == SelectorOperator::In)?;
    Some((r.key.as_str(), r.values.as_slice()))
}

impl<T: Copy> LabelIndex<T> {
    /// Files an item with a selector; one that selects nothing is not filed at all.
    pub fn file_selector(&mut self, selector: &PodSelector, item: T) {
        if selector.is_none() {
            return;
        }
        match key_requirement(selector) {
            Some((key, values)) => {
                for value in values {
                    self.file(key, value, item);
                }
            }
            None => self.always.push(item),
        }
    }

    /// Files an item under each of its labels.
    pub fn file_labels(&mut self, labels: &BTreeMap<String, String>, item: T) {
        for (key, value) in labels {
            self.file(key, value, item);
        }
    }

    /// Files an item under one label, copying the key and value only when new.
    fn file(&mut self, key: &str, value: &str, item: T) {
        let by_value = match self.by.get_mut(key) {
            Some(by_value) => by_value,
            None => self.by.entry(key.to_string()).or_default(),
        };
        match by_value.get_mut(value) {
            Some(items) => items.push(item),
            None => {
                by_value.insert(value.to_string(), vec![item]);
            }
        }
    }

    /// Each item filed by selector whose selector a pod with `labels` could match.
    pub fn for_labels(&self, labels: &BTreeMap<String, String>, mut f: impl FnMut(T)) {
        self.always.iter().copied().for_each(&mut f);
        for (key, value) in labels {
            if let Some(items) = self.by.get(key).and_then(|v| v.get(value)) {
                items.iter().copied().for_each(&mut f);
            }
        }
    }

    /// Each item filed by labels that `selector` could match; None when the selector has no
    /// `In` requirement to narrow it (every item must then be tried).
    pub fn for_selector(&self, selector: &PodSelector, mut f: impl FnMut(T)) -> Option<()> {
        let (key, values) = key_requirement(selector)?;
        let Some(by_value) = self.by.get(key) else { return Some(()) };
        for value in values {
            by_value.get(value).into_iter().flatten().copied().for_each(&mut f);
        }
        Some(())
    }
}
