//! Which devices are taken, during one cycle: exclusive allocations, shares of devices that
//! allow several, and the shared counters of partitionable devices. Every change is logged,
//! so a gang that does not fit is undone to a mark.

use std::collections::HashMap;

use super::model::{DeviceIdx, DeviceUse, DraSnapshot};
use crate::quantity::Quantity;

enum Undo {
    Exclusive(DeviceIdx),
    Share(DeviceIdx, Vec<(usize, Quantity)>),
    Counter((u32, String, String), Quantity),
    /// A device given back (by an evicted pod), taken again on rollback.
    Released(DeviceIdx, Option<Vec<(usize, Quantity)>>),
    /// A counter given back with a released device.
    CounterReleased((u32, String, String), Quantity),
}

/// A point to roll back to.
#[derive(Clone, Copy, Debug)]
pub struct Mark(usize);

pub struct DeviceState {
    exclusive: Vec<bool>,
    shares: Vec<u32>,
    /// Per shared device: consumed amount per capacity index.
    consumed: HashMap<DeviceIdx, Vec<Quantity>>,
    /// (pool index, counter set, counter) → consumed amount.
    counters: HashMap<(u32, String, String), Quantity>,
    undo: Vec<Undo>,
}

impl DeviceState {
    /// The state before the cycle: what allocated claims use.
    pub fn new(dra: &DraSnapshot) -> DeviceState {
        let mut state = DeviceState {
            exclusive: vec![false; dra.devices.len()],
            shares: vec![0; dra.devices.len()],
            consumed: HashMap::new(),
            counters: HashMap::new(),
            undo: Vec::new(),
        };
        for DeviceUse { device, admin_access, consumed } in &dra.in_use {
            if *admin_access || *device as usize >= dra.devices.len() {
                continue;
            }
            let amounts = consumed.as_ref().map(|c| {
                let d = &dra.devices[*device as usize];
                c.iter().filter_map(|(name, q)| d.capacity_index(name).map(|i| (i, *q))).collect()
            });
            state.take(dra, *device, amounts);
        }
        state.undo.clear();
        state
    }

    pub fn mark(&self) -> Mark {
        Mark(self.undo.len())
    }

    pub fn rollback(&mut self, mark: Mark) {
        while self.undo.len() > mark.0 {
            match self.undo.pop().expect("longer than the mark") {
                Undo::Exclusive(d) => self.exclusive[d as usize] = false,
                Undo::Share(d, amounts) => {
                    self.shares[d as usize] -= 1;
                    let consumed = self.consumed.get_mut(&d).expect("a share was consumed");
                    for (i, q) in amounts {
                        consumed[i] = consumed[i].checked_sub(q).unwrap_or_default();
                    }
                }
                Undo::Counter(key, q) => {
                    let c = self.counters.get_mut(&key).expect("a counter was consumed");
                    *c = c.checked_sub(q).unwrap_or_default();
                }
                Undo::Released(d, amounts) => self.apply(d, amounts.as_deref(), 1),
                Undo::CounterReleased(key, q) => {
                    let c = self.counters.entry(key).or_default();
                    *c = c.checked_add(q).unwrap_or(*c);
                }
            }
        }
    }

    /// Adds (`sign` 1) or removes (`sign` -1) one use of a device without logging it:
    /// exclusive when `amounts` is None, else one share consuming `amounts`.
    fn apply(&mut self, device: DeviceIdx, amounts: Option<&[(usize, Quantity)]>, sign: i8) {
        match amounts {
            None => self.exclusive[device as usize] = sign > 0,
            Some(amounts) => {
                let shares = &mut self.shares[device as usize];
                *shares = if sign > 0 { *shares + 1 } else { shares.saturating_sub(1) };
                if let Some(consumed) = self.consumed.get_mut(&device) {
                    for &(i, q) in amounts {
                        consumed[i] = if sign > 0 {
                            consumed[i].checked_add(q).unwrap_or(consumed[i])
                        } else {
                            consumed[i].checked_sub(q).unwrap_or_default()
                        };
                    }
                }
            }
        }
    }

    /// Gives back one use of a device held before the cycle (an evicted pod's claim), so
    /// a trial placement may take it; undone by [`DeviceState::rollback`].
    pub fn release(&mut self, dra: &DraSnapshot, used: &DeviceUse) {
        let device = used.device;
        if used.admin_access || device as usize >= dra.devices.len() || self.is_free(device) {
            return;
        }
        let amounts: Option<Vec<(usize, Quantity)>> = used.consumed.as_ref().map(|c| {
            let d = &dra.devices[device as usize];
            c.iter().filter_map(|(name, q)| d.capacity_index(name).map(|i| (i, *q))).collect()
        });
        self.apply(device, amounts.as_deref(), -1);
        self.undo.push(Undo::Released(device, amounts));
        if self.is_free(device) {
            // Free again: its pool's counters come back too.
            let pool_index = dra.device_pools[device as usize];
            for (set, counter, q) in &dra.devices[device as usize].consumes {
                let key = (pool_index, set.clone(), counter.clone());
                let c = self.counters.entry(key.clone()).or_default();
                *c = c.checked_sub(*q).unwrap_or_default();
                self.undo.push(Undo::CounterReleased(key, *q));
            }
        }
    }

    /// Takes one use of a device back after [`DeviceState::release`] was kept (an evicted
    /// pod's claim, still allocated while the pod exits), unless the device went to
    /// someone else exclusively since. Not logged: it stays for the rest of the cycle.
    pub fn hold_again(&mut self, dra: &DraSnapshot, used: &DeviceUse) {
        let device = used.device;
        if used.admin_access || device as usize >= dra.devices.len() || self.exclusive[device as usize] {
            return;
        }
        if used.consumed.is_none() && self.shares[device as usize] > 0 {
            return;
        }
        let was_free = self.is_free(device);
        let amounts: Option<Vec<(usize, Quantity)>> = used.consumed.as_ref().map(|c| {
            let d = &dra.devices[device as usize];
            c.iter().filter_map(|(name, q)| d.capacity_index(name).map(|i| (i, *q))).collect()
        });
        self.apply(device, amounts.as_deref(), 1);
        if was_free {
            let pool_index = dra.device_pools[device as usize];
            for (set, counter, q) in &dra.devices[device as usize].consumes {
                let c = self.counters.entry((pool_index, set.clone(), counter.clone())).or_default();
                *c = c.checked_add(*q).unwrap_or(*c);
            }
        }
    }

    /// Feeds what holds `device` now (allocations, shares, consumed capacity, its pool's
    /// counters) into `h`: equal digests, equal answers from the allocator.
    pub fn digest(&self, dra: &DraSnapshot, device: DeviceIdx, h: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        let i = device as usize;
        (dra.devices[i].revision, self.exclusive[i], self.shares[i], self.consumed.get(&device)).hash(h);
        let pool_index = dra.device_pools[i];
        for (set, counter, _) in &dra.devices[i].consumes {
            self.counters.get(&(pool_index, set.clone(), counter.clone())).hash(h);
        }
    }

    /// Whether nothing holds the device (shares of a shared device hold it too).
    pub fn is_free(&self, device: DeviceIdx) -> bool {
        !self.exclusive[device as usize] && self.shares[device as usize] == 0
    }

    /// How much of the capacity `name` a device has left (None when taken whole or it has
    /// no such capacity, ordered last).
    pub fn left(&self, dra: &DraSnapshot, device: DeviceIdx, name: &str) -> (bool, Quantity) {
        let d = &dra.devices[device as usize];
        let Some(i) = d.capacity_index(name) else { return (true, Quantity::ZERO) };
        if self.exclusive[device as usize] {
            return (true, Quantity::ZERO);
        }
        let used = self.consumed.get(&device).map_or(Quantity::ZERO, |c| c[i]);
        (false, d.capacity[i].1.value.checked_sub(used).unwrap_or(Quantity::ZERO))
    }

    /// Whether a shared device has `amounts` (capacity index, amount) left.
    pub fn share_fits(&self, dra: &DraSnapshot, device: DeviceIdx, amounts: &[(usize, Quantity)]) -> bool {
        if self.exclusive[device as usize] {
            return false;
        }
        let d = &dra.devices[device as usize];
        let consumed = self.consumed.get(&device);
        amounts.iter().all(|&(i, q)| {
            let used = consumed.map_or(Quantity::ZERO, |c| c[i]);
            used.checked_add(q).is_some_and(|total| total <= d.capacity[i].1.value)
        })
    }

    /// Whether the device's pool still has the counters it consumes (when not yet in use).
    pub fn counters_fit(&self, dra: &DraSnapshot, device: DeviceIdx) -> bool {
        if !self.is_free(device) {
            return true;
        }
        let d = &dra.devices[device as usize];
        let pool = dra.pool_of(device);
        let pool_index = dra.device_pools[device as usize];
        d.consumes.iter().all(|(set, counter, q)| {
            let Some(available) = pool.counter_sets.get(set).and_then(|s| s.get(counter)) else { return false };
            let key = (pool_index, set.clone(), counter.clone());
            let used = self.counters.get(&key).copied().unwrap_or_default();
            used.checked_add(*q).is_some_and(|total| total <= *available)
        })
    }

    /// Takes the device: exclusively (`amounts` None) or as one share consuming `amounts`.
    pub fn take(&mut self, dra: &DraSnapshot, device: DeviceIdx, amounts: Option<Vec<(usize, Quantity)>>) {
        let d = &dra.devices[device as usize];
        if self.is_free(device) {
            let pool_index = dra.device_pools[device as usize];
            for (set, counter, q) in &d.consumes {
                let key = (pool_index, set.clone(), counter.clone());
                let c = self.counters.entry(key.clone()).or_default();
                *c = c.checked_add(*q).unwrap_or(*c);
                self.undo.push(Undo::Counter(key, *q));
            }
        }
        match amounts {
            None => {
                self.exclusive[device as usize] = true;
                self.undo.push(Undo::Exclusive(device));
            }
            Some(amounts) => {
                self.shares[device as usize] += 1;
                let consumed = self.consumed.entry(device).or_insert_with(|| vec![Quantity::ZERO; d.capacity.len()]);
                for &(i, q) in &amounts {
                    consumed[i] = consumed[i].checked_add(q).unwrap_or(consumed[i]);
                }
                self.undo.push(Undo::Share(device, amounts));
            }
        }
    }
}
