//! Equal values converted from many objects shared as one `Arc` (pods made from one
//! template share their node constraints, claim specs and rules between pods, and so one
//! shape in the engine),
//! and dropped once no conversion holds them, so tenants who write ever new values cannot
//! make the table grow without bound.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

pub struct Interner<T> {
    seen: HashSet<Arc<T>>,
    /// The size at which the next [`Interner::prune`] looks for unheld values.
    prune_at: usize,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner { seen: HashSet::new(), prune_at: MIN_PRUNE }
    }
}

/// Below this many values an interner is never pruned.
const MIN_PRUNE: usize = 1024;

impl<T: Eq + Hash> Interner<T> {
    pub fn intern(&mut self, value: T) -> Arc<T> {
        if let Some(existing) = self.seen.get(&value) {
            return existing.clone();
        }
        let value = Arc::new(value);
        self.seen.insert(value.clone());
        value
    }

    /// The shared value equal to `value`, which becomes it if there is none yet: values
    /// made as `Arc`s already are shared without being copied.
    pub fn intern_shared(&mut self, value: Arc<T>) -> Arc<T> {
        if let Some(existing) = self.seen.get(&value) {
            return existing.clone();
        }
        self.seen.insert(value.clone());
        value
    }

    /// Drops the values nothing else holds, once the table has doubled since the last time
    /// (amortised: a value is looked at a constant number of times). Called between
    /// snapshots, when what holds a value is what is live.
    pub fn prune(&mut self) {
        if self.seen.len() < self.prune_at {
            return;
        }
        self.seen.retain(|value| Arc::strong_count(value) > 1);
        self.prune_at = (2 * self.seen.len()).max(MIN_PRUNE);
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_nobody_holds_are_dropped_once_the_table_doubled() {
        let mut interner = Interner::default();
        let kept = interner.intern("template".to_string());
        assert!(Arc::ptr_eq(&kept, &interner.intern("template".to_string())));
        for i in 0..MIN_PRUNE {
            interner.intern(format!("written once {i}"));
        }
        assert_eq!(interner.len(), MIN_PRUNE + 1);
        interner.prune();
        assert_eq!(interner.len(), 1, "only the value still held is kept");
        assert!(Arc::ptr_eq(&kept, &interner.intern("template".to_string())));
        let shared = interner.intern_shared(Arc::new("template".to_string()));
        assert!(Arc::ptr_eq(&kept, &shared), "an equal Arc gives the one kept");
    }
}
