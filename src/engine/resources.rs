//! Resource names interned to small ids, dense per-node capacity and sparse per-pod demand.

use std::collections::HashMap;

/// Index of a resource name in a snapshot's [`ResourceNames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(pub u16);

impl ResourceId {
    pub const CPU: ResourceId = ResourceId(0);
    pub const MEMORY: ResourceId = ResourceId(1);
    pub const EPHEMERAL_STORAGE: ResourceId = ResourceId(2);
    pub const PODS: ResourceId = ResourceId(3);
}

/// The resource names a snapshot knows, in id order. CPU is counted in millicores, memory
/// and storage in bytes, everything else in units.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceNames {
    names: Vec<String>,
    ids: HashMap<String, ResourceId>,
}

impl Default for ResourceNames {
    fn default() -> Self {
        let mut names = ResourceNames { names: Vec::new(), ids: HashMap::new() };
        for builtin in ["cpu", "memory", "ephemeral-storage", "pods"] {
            names.intern(builtin);
        }
        names
    }
}

impl ResourceNames {
    /// The id of `name`, adding it if it is new. For names from objects a cluster's
    /// operators write (nodes, DeviceClasses, queues); pods' names go through
    /// [`ResourceNames::get`] only, so no tenant can grow the table.
    pub fn intern(&mut self, name: &str) -> ResourceId {
        self.try_intern(name).expect("65,535 resource names from operators' objects")
    }

    /// The id of `name`, adding it if it is new and the table has room (65,535 names);
    /// None when it is full.
    pub fn try_intern(&mut self, name: &str) -> Option<ResourceId> {
        if let Some(id) = self.ids.get(name) {
            return Some(*id);
        }
        let id = ResourceId(u16::try_from(self.names.len()).ok().filter(|&i| i < u16::MAX)?);
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        Some(id)
    }

    pub fn get(&self, name: &str) -> Option<ResourceId> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, id: ResourceId) -> &str {
        &self.names[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Ids below this are kept densely in a [`Capacity`]: the built-in resources and the names
/// interned first (GPUs, the common extended resources), read by index on the hot path.
const DENSE_IDS: usize = 64;

/// Amounts of every resource by [`ResourceId`]; a missing entry is zero. The first
/// [`DENSE_IDS`] ids are kept densely, the rest only where set, so a node's capacity costs
/// what it lists, however many names the cluster's other nodes offer.
#[derive(Clone, Debug, Default, Eq)]
pub struct Capacity {
    /// Inline for the usual handful of resources: copying a node's capacity allocates
    /// nothing.
    dense: smallvec::SmallVec<[i64; 8]>,
    /// Ids from [`DENSE_IDS`] on, sorted.
    sparse: Vec<(ResourceId, i64)>,
}

impl PartialEq for Capacity {
    /// Element by element, inline: capacities are compared per node per cycle to find what
    /// changed, and they are a handful of numbers.
    fn eq(&self, other: &Capacity) -> bool {
        self.dense.len() == other.dense.len()
            && self.dense.iter().zip(other.dense.iter()).all(|(a, b)| a == b)
            && self.sparse == other.sparse
    }
}

impl Capacity {
    pub fn get(&self, id: ResourceId) -> i64 {
        let i = id.0 as usize;
        if i < DENSE_IDS {
            return self.dense.get(i).copied().unwrap_or(0);
        }
        self.sparse.binary_search_by_key(&id, |&(k, _)| k).map_or(0, |at| self.sparse[at].1)
    }

    pub fn set(&mut self, id: ResourceId, amount: i64) {
        let i = id.0 as usize;
        if i < DENSE_IDS {
            if self.dense.len() <= i {
                self.dense.resize(i + 1, 0);
            }
            self.dense[i] = amount;
            return;
        }
        match self.sparse.binary_search_by_key(&id, |&(k, _)| k) {
            Ok(at) => self.sparse[at].1 = amount,
            Err(at) => self.sparse.insert(at, (id, amount)),
        }
    }

    pub fn add(&mut self, demand: &Demand, times: i64) {
        for &(id, amount) in demand.entries() {
            self.set(id, self.get(id) + amount * times);
        }
    }

    /// Adds another capacity, resource by resource.
    pub fn add_capacity(&mut self, other: &Capacity) {
        if self.dense.len() < other.dense.len() {
            self.dense.resize(other.dense.len(), 0);
        }
        for (mine, theirs) in self.dense.iter_mut().zip(&other.dense) {
            *mine += theirs;
        }
        for &(id, amount) in &other.sparse {
            self.set(id, self.get(id) + amount);
        }
    }

    /// Subtracts another capacity, resource by resource.
    pub fn sub_capacity(&mut self, other: &Capacity) {
        if self.dense.len() < other.dense.len() {
            self.dense.resize(other.dense.len(), 0);
        }
        for (mine, theirs) in self.dense.iter_mut().zip(&other.dense) {
            *mine -= theirs;
        }
        for &(id, amount) in &other.sparse {
            self.set(id, self.get(id) - amount);
        }
    }

    pub fn sub(&mut self, demand: &Demand, times: i64) {
        self.add(demand, -times);
    }

    /// The amounts above zero, as a demand.
    pub fn positive(&self) -> Demand {
        let dense = self.dense.iter().enumerate().map(|(i, &a)| (ResourceId(i as u16), a));
        Demand::new(dense.chain(self.sparse.iter().copied()).filter(|&(_, a)| a > 0).collect())
    }

    /// How many copies of `demand` fit in `self` (at most `limit`).
    pub fn fit_count(&self, demand: &Demand, limit: usize) -> usize {
        let mut count = limit as i64;
        for &(id, amount) in demand.entries() {
            if amount > 0 {
                count = count.min(self.get(id).max(0) / amount);
                if count == 0 {
                    return 0;
                }
            }
        }
        count as usize
    }
}

/// What one pod asks for: its non-zero requests, sorted by resource id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Demand(Vec<(ResourceId, i64)>);

impl Demand {
    pub fn new(mut entries: Vec<(ResourceId, i64)>) -> Demand {
        entries.retain(|&(_, amount)| amount != 0);
        entries.sort_by_key(|&(id, _)| id);
        entries.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 += later.1;
                true
            } else {
                false
            }
        });
        Demand(entries)
    }

    pub fn entries(&self) -> &[(ResourceId, i64)] {
        &self.0
    }

    pub fn get(&self, id: ResourceId) -> i64 {
        self.0.iter().find(|(i, _)| *i == id).map_or(0, |&(_, amount)| amount)
    }

    /// The first resource, in id order, for which `free` cannot hold this demand.
    pub fn first_shortfall(&self, free: &Capacity) -> Option<ResourceId> {
        self.0.iter().find(|&&(id, amount)| amount > free.get(id)).map(|&(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capacity_holds_what_it_lists_however_high_the_ids() {
        let (gpu, rare) = (ResourceId(4), ResourceId(60_000));
        let mut node = Capacity::default();
        node.set(ResourceId::CPU, 8_000);
        node.set(rare, 2);
        node.set(gpu, 8);
        assert_eq!((node.get(rare), node.get(gpu), node.get(ResourceId(59_999))), (2, 8, 0));
        // Stored only where set: not 60,000 slots.
        assert_eq!((node.dense.len(), node.sparse.len()), (5, 1));

        let mut total = Capacity::default();
        total.add_capacity(&node);
        total.add_capacity(&node);
        assert_eq!((total.get(ResourceId::CPU), total.get(rare)), (16_000, 4));
        let pod = Demand::new(vec![(rare, 1), (ResourceId::CPU, 1_000)]);
        assert_eq!(node.fit_count(&pod, 10), 2);
        node.sub(&pod, 2);
        assert_eq!(node.positive(), Demand::new(vec![(ResourceId::CPU, 6_000), (gpu, 8)]));
    }
}
