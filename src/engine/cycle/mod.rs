//! One scheduling cycle: gangs in queue order, each placed whole or left waiting with its
//! reason, under the configured queueing policy.

mod held;
mod steps;

use steps::Cycle;

use super::admission::QueueState;
use super::claims::ClaimPlacement;
use super::dra::selectors::SelectorCache;
use super::model::{Gang, GangKey, NodeIdx, PodKey, Reservation, Snapshot};
use super::place::{CapacityMemory, Scoring, Weights};
use super::preempt::{Eviction, PreemptionConfig};
use super::reason::Waiting;
use super::topology::DomainChoice;

/// What happens behind a gang that does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Queueing {
    /// The first gang in queue order that does not fit and has waited at least
    /// `reserve_after_seconds` keeps the nodes it would need free (a reservation, as Slurm's
    /// backfill keeps one for the top job); later gangs are placed around them. Large gangs
    /// are never overtaken forever, small ones still fill the rest.
    #[default]
    Backfill,
    /// Nothing is placed behind the first gang that does not fit (Kueue's StrictFIFO).
    StrictFifo,
    /// Gangs that do not fit are skipped (Kueue's BestEffortFIFO); large gangs can starve.
    BestEffortFifo,
    /// Backfill that knows time: the first `backfill_depth` gangs that do not fit (and have
    /// waited `reserve_after_seconds`) get the earliest time the runtime bounds of the pods
    /// running let them start, and what they need then beyond what ends by then is held
    /// from now. Later gangs go around it, or into it when their own bound ends first
    /// (`place::timed`). A gang with no such time gets Backfill's reservation instead.
    TimedBackfill,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleConfig {
    pub scoring: Scoring,
    /// The weights of the preference scores computed as kube-scheduler computes them.
    pub weights: Weights,
    /// How a gang's domain is chosen among those that could hold it.
    pub domain_choice: DomainChoice,
    pub queueing: Queueing,
    /// Backfill: how long a gang waits before it gets a reservation. Until then gangs
    /// behind it may overtake it, which keeps small jobs fast when large ones clear soon.
    pub reserve_after_seconds: i64,
    /// TimedBackfill: how many waiting gangs get a timed reservation per cycle (0 counts
    /// as 1); many make it conservative backfill.
    pub backfill_depth: usize,
    /// Reclaim and preemption between and inside queues (only with Queue objects).
    pub preemption: PreemptionConfig,
    /// Opportunistic backfill, for queues that do not say: a preemptible gang kept out of
    /// capacity held for a reservation (Backfill's nodes, TimedBackfill's held capacity)
    /// runs there, and is evicted whole when the reserved gang can start in its place.
    pub opportunistic_backfill: bool,
    /// How far the device search may go per pod, per node and per cycle.
    pub device_search: super::dra::allocate::SearchLimits,
}

/// A gang placed in this cycle: every pod that got a node, and every claim its pods
/// allocate or reserve there.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub gang: GangKey,
    pub pods: Vec<(PodKey, NodeIdx)>,
    pub claims: Vec<ClaimPlacement>,
    /// Placed opportunistically in capacity held for this gang's reservation: the shell
    /// marks its pods, and it is evicted whole when that gang can start.
    pub opportunistic: Option<GangKey>,
}

/// The result of one cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleOutcome {
    /// In the order they were placed (queue order).
    pub placements: Vec<Placement>,
    /// Gangs left waiting, in the order they were considered: queue order, then the gangs
    /// put off for going beyond their queue's share.
    pub waiting: Vec<Waiting>,
    /// What queues hold and deserve after this cycle's placements.
    pub queues: QueueState,
    /// Pods to evict, per victim gang, in the order they were decided.
    pub evictions: Vec<Eviction>,
    /// Capacity held for gangs that evictions were made for, to keep for the next cycle.
    pub reservations: Vec<Reservation>,
}

/// Queue order: higher priority first, then older, then by name for determinism.
pub fn queue_order(gangs: &[Gang]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..gangs.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&gangs[a], &gangs[b]);
        b.priority.cmp(&a.priority).then(a.created.cmp(&b.created)).then_with(|| a.key.cmp(&b.key))
    });
    order
}

/// Runs one cycle over `snapshot`. Pure: the same snapshot and configuration always give
/// the same outcome.
pub fn schedule(snapshot: &Snapshot, config: &CycleConfig) -> CycleOutcome {
    schedule_with(snapshot, config, &mut SelectorCache::default())
}

/// What a caller keeps from one cycle to the next so that a cycle repeats no work: compiled
/// selectors and their results, and free capacity per node and domain. It changes no
/// outcome, only the work.
#[derive(Default)]
pub struct CycleMemory {
    pub selectors: SelectorCache,
    pub capacity: CapacityMemory,
}

/// [`schedule`], reusing compiled selectors and their results from earlier cycles; the
/// cache changes no outcome, only the work.
pub fn schedule_with(snapshot: &Snapshot, config: &CycleConfig, selectors: &mut SelectorCache) -> CycleOutcome {
    cycle(snapshot, config, selectors, &mut CapacityMemory::default())
}

/// [`schedule`], reusing everything `memory` kept from earlier cycles.
pub fn schedule_remembering(snapshot: &Snapshot, config: &CycleConfig, memory: &mut CycleMemory) -> CycleOutcome {
    cycle(snapshot, config, &mut memory.selectors, &mut memory.capacity)
}

fn cycle(
    snapshot: &Snapshot,
    config: &CycleConfig,
    selectors: &mut SelectorCache,
    capacity: &mut CapacityMemory,
) -> CycleOutcome {
    let mut cycle = Cycle::new(snapshot, config, selectors, capacity);
    while let Some((index, late)) = cycle.next() {
        cycle.consider(index, late);
    }
    cycle.finish(capacity)
}
