//! GPU fractions in queue amounts (QUEUES.md §2, `A_i`: fractional GPUs count fractionally):
//! a pod with KAI's `gpu-fraction: f` counts `f` of a GPU under [`GPU_RESOURCE`](super::GPU_RESOURCE) for each
//! GPU it shares, one with `gpu-memory` the part of its GPU's memory it holds. Amounts are
//! in thousandths ([`GPU_MILLI`]), as the tree keeps that key, so two half-GPU pods are 1.
//!
//! A pending `gpu-memory` pod, whose GPU is not chosen yet, counts the most it could: its
//! memory over that of the smallest shareable GPU that can hold it (Kueue's conservative
//! estimate, as for quota keys on devices); once placed, the GPU it holds.

use std::collections::HashMap;

use crate::engine::claims::ClaimPlacement;
use crate::engine::dra::model::{DeviceIdx, DeviceUse, DraSnapshot, ExtendedRequest, GpuShare, SHARED_CAPACITY};
use crate::engine::queues::GPU_MILLI;
use crate::quantity::Quantity;

/// Thousandths of a GPU that `part` of `whole` is, rounded up, at most one GPU.
fn milli_of(part: Quantity, whole: Quantity) -> i64 {
    if whole.sign() <= 0 {
        return GPU_MILLI;
    }
    ((part.as_f64() / whole.as_f64() * GPU_MILLI as f64).ceil() as i64).clamp(0, GPU_MILLI)
}

/// The part of `device`'s memory that `consumed` (a share's consumption) is.
fn consumed_milli(dra: &DraSnapshot, device: DeviceIdx, consumed: Option<&[(String, Quantity)]>) -> i64 {
    let device = &dra.devices[device as usize];
    let Some(i) = device.capacity_index(SHARED_CAPACITY) else { return 0 };
    let found = consumed.into_iter().flatten().find(|(name, _)| device.capacity_index(name) == Some(i));
    found.map_or(0, |(_, q)| milli_of(*q, device.capacity[i].1.value))
}

/// What a running pod holding `share` of `count` GPUs (its `devices`) counts.
pub fn held(dra: &DraSnapshot, share: GpuShare, count: u32, devices: &[DeviceUse]) -> i64 {
    match share {
        GpuShare::Fraction(milli) => i64::from(milli) * i64::from(count),
        GpuShare::Memory(_) => devices.iter().map(|u| consumed_milli(dra, u.device, u.consumed.as_deref())).sum(),
    }
}

/// What the fractions of a placement of this cycle count.
pub fn placed(dra: &DraSnapshot, claims: &[ClaimPlacement]) -> i64 {
    let mut sum = 0;
    for claim in claims {
        for request in &claim.extended {
            sum += match request.share {
                None => 0,
                Some(GpuShare::Fraction(milli)) => i64::from(milli) * i64::from(request.count),
                Some(GpuShare::Memory(_)) => {
                    let devices = claim.allocation.iter().flat_map(|a| &a.devices);
                    devices
                        .filter(|d| d.request == request.request_name)
                        .map(|d| consumed_milli(dra, d.device, d.consumed.as_deref()))
                        .sum()
                }
            };
        }
    }
    sum
}

/// Estimates for pending pods' fractions, memoised per amount of memory asked.
#[derive(Default)]
pub struct Pending {
    memory: HashMap<Quantity, i64>,
}

impl Pending {
    /// What pending pod's extended requests with a share count, in thousandths of GPUs.
    pub fn estimate(&mut self, dra: &DraSnapshot, requests: &[ExtendedRequest]) -> i64 {
        requests
            .iter()
            .filter_map(|request| {
                let per_gpu = match request.share? {
                    GpuShare::Fraction(milli) => i64::from(milli),
                    GpuShare::Memory(asked) => {
                        *self.memory.entry(asked).or_insert_with(|| smallest_holding(dra, asked))
                    }
                };
                Some(per_gpu * i64::from(request.count))
            })
            .sum()
    }
}

/// `asked` over the memory of the smallest shareable GPU that holds it (a whole GPU when
/// none does: the pod waits for one anyway).
fn smallest_holding(dra: &DraSnapshot, asked: Quantity) -> i64 {
    dra.devices
        .iter()
        .filter(|d| d.allow_multiple_allocations)
        .filter_map(|d| d.capacity_index(SHARED_CAPACITY).map(|i| d.capacity[i].1.value))
        .filter(|&memory| memory >= asked)
        .min()
        .map_or(GPU_MILLI, |memory| milli_of(asked, memory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_memory_is_the_part_of_the_gpu_rounded_up() {
        let gib = |n: i64| Quantity::from_units(n << 30);
        assert_eq!(milli_of(gib(40), gib(80)), 500);
        assert_eq!(milli_of(gib(20), gib(80)), 250);
        assert_eq!(milli_of(Quantity::from_units(1), gib(80)), 1);
        assert_eq!(milli_of(gib(100), gib(80)), GPU_MILLI);
    }
}
