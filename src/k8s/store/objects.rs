//! The store of one kind of object, by namespace and name, with relist support and a
//! journal of what changed; the cache holds one per kind it watches.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use crate::convert::journal::Journal;

/// One kind of object, by namespace and name, with relist support. Objects are kept
/// shared, so a cycle takes what it reads under the lock by reference counts alone
/// (`Cache::shared`) and reads it after the lock is released.
#[derive(Clone, Debug)]
pub struct Store<K> {
    pub(super) objects: BTreeMap<(String, String), Arc<K>>,
    relisting: Option<BTreeMap<(String, String), Arc<K>>>,
    /// What changed, for the snapshot memo.
    pub(super) journal: Journal,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Store { objects: BTreeMap::new(), relisting: None, journal: Journal::default() }
    }
}

/// An object's namespace and name, its key in a store.
fn id<K: ResourceExt>(object: &K) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

impl<K: ResourceExt + Clone> Store<K> {
    pub fn apply(&mut self, object: K) {
        let key = id(&object);
        self.journal.record(key.clone());
        self.objects.insert(key, Arc::new(object));
    }

    pub fn delete(&mut self, object: &K) {
        let key = id(object);
        self.objects.remove(&key);
        self.journal.record(key);
    }

    /// What changed in this store.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// A relist starts: objects arrive through `relisted`, then `relist_done` replaces
    /// the store with them, dropping whatever was deleted meanwhile.
    pub fn relist_start(&mut self) {
        self.relisting = Some(BTreeMap::new());
    }

    pub fn relisted(&mut self, object: K) {
        self.relisting.get_or_insert_default().insert(id(&object), Arc::new(object));
    }

    pub fn relist_done(&mut self) {
        if let Some(objects) = self.relisting.take() {
            self.objects = objects;
            self.journal.reset();
        }
    }

    /// The stored object with the same namespace and name as `object`.
    pub fn find(&self, object: &K) -> Option<&K> {
        self.objects.get(&id(object)).map(|o| &**o)
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&K> {
        self.objects.get(&(namespace.to_string(), name.to_string())).map(|o| &**o)
    }

    pub fn values(&self) -> impl Iterator<Item = &K> {
        self.objects.values().map(|o| &**o)
    }

    /// The objects of one namespace.
    pub fn in_namespace<'s>(&'s self, namespace: &'s str) -> impl Iterator<Item = &'s K> {
        self.objects
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((n, _), _)| n == namespace)
            .map(|(_, o)| &**o)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}
