//! The one loop that drives the engine over time, for the scheduler and the simulators
//! alike. Each supplies a [`Driver`]: a clock (when the next cycle runs), a source (the
//! snapshot to decide then) and a sink (what to do with the decisions). The [`Engine`]
//! runs the cycles and keeps what passes from one to the next: the compiled selectors and
//! free capacity ([`CycleMemory`]), and the capacity held for gangs that evictions were
//! made for ([`Reservation`]s).
//!
//! The clock may wait: the scheduler's waits for a change, a timer or a binding's end;
//! the simulators' clocks never wait, so their runs complete on the first poll.

use std::future::Future;

use super::cycle::{CycleConfig, CycleMemory, CycleOutcome, schedule_remembering};
use super::model::{Reservation, Snapshot};

/// A clock, a source of snapshots and a sink of decisions, as one value (the three share
/// their state: a source keeps the snapshot it gave until its decisions come back).
pub trait Driver {
    /// The clock: waits for the moment of the next cycle and gives it, in Unix seconds, or
    /// None when the run is over.
    fn next(&mut self) -> impl Future<Output = Option<i64>> + Send;

    /// The source: the snapshot to decide at `now`, kept by the driver until
    /// [`Driver::decided`]; None when there is nothing to decide then (no cycle runs).
    /// `memory` is the engine's, for a source that warms compiled selectors before the
    /// cycle so that their cost is measured apart.
    fn snapshot(&mut self, now: i64, memory: &mut CycleMemory) -> Option<&mut Snapshot>;

    /// The sink: what the cycle decided on the snapshot last given, with the engine's
    /// memory as the cycle left it.
    fn decided(&mut self, outcome: CycleOutcome, memory: &mut CycleMemory);
}

/// The engine over time: the cycle's configuration and what one cycle leaves the next.
#[derive(Default)]
pub struct Engine {
    config: CycleConfig,
    memory: CycleMemory,
    /// Capacity freed by evictions and held for the gangs they were made for, from the last
    /// cycle into the next.
    reservations: Vec<Reservation>,
    cycles: usize,
}

impl Engine {
    pub fn new(config: CycleConfig) -> Engine {
        Engine { config, ..Engine::default() }
    }

    /// Cycles run so far.
    pub fn cycles(&self) -> usize {
        self.cycles
    }

    /// The loop: a cycle at every moment the clock gives, until it gives none.
    pub async fn run<D: Driver>(&mut self, driver: &mut D) {
        while let Some(now) = driver.next().await {
            self.cycle(driver, now);
        }
    }

    /// [`Engine::run`] for a clock that never waits (the simulators'): the whole run at
    /// once, with no executor. A clock that waits here is a defect, and panics.
    pub fn run_to_end<D: Driver>(&mut self, driver: &mut D) {
        let mut run = std::pin::pin!(self.run(driver));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        if run.as_mut().poll(&mut context).is_pending() {
            panic!("a clock that never waits left the run pending");
        }
    }

    /// One cycle at `now`: the source's snapshot, with the reservations the last cycle
    /// left, decided and handed to the sink. False when the source had nothing to decide.
    pub fn cycle<D: Driver>(&mut self, driver: &mut D, now: i64) -> bool {
        let Some(snapshot) = driver.snapshot(now, &mut self.memory) else { return false };
        snapshot.now = now;
        snapshot.reservations = std::mem::take(&mut self.reservations);
        let outcome = schedule_remembering(snapshot, &self.config, &mut self.memory);
        self.reservations.clone_from(&outcome.reservations);
        self.cycles += 1;
        driver.decided(outcome, &mut self.memory);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::build::SnapshotBuilder;

    /// A clock of fixed moments over a snapshot that never changes; records what it was
    /// given.
    struct Moments {
        at: Vec<i64>,
        snapshot: Snapshot,
        skip: Option<i64>,
        seen: Vec<(i64, usize, usize)>,
    }

    impl Driver for Moments {
        async fn next(&mut self) -> Option<i64> {
            (!self.at.is_empty()).then(|| self.at.remove(0))
        }
        fn snapshot(&mut self, now: i64, _: &mut CycleMemory) -> Option<&mut Snapshot> {
            (self.skip != Some(now)).then_some(&mut self.snapshot)
        }
        fn decided(&mut self, outcome: CycleOutcome, _: &mut CycleMemory) {
            self.seen.push((self.snapshot.now, outcome.placements.len(), outcome.waiting.len()));
        }
    }

    #[test]
    fn a_cycle_runs_at_each_moment_the_clock_gives_unless_the_source_has_nothing() {
        let snapshot = SnapshotBuilder::new()
            .gpu_node("n1", 8, 64, 8, &[])
            .gang("fits", 1, 1, &[("nvidia.com/gpu", 4)])
            .gang("too-big", 1, 1, &[("nvidia.com/gpu", 16)])
            .build();
        let mut driver = Moments { at: vec![10, 20, 30], snapshot, skip: Some(20), seen: Vec::new() };
        let mut engine = Engine::default();
        engine.run_to_end(&mut driver);
        assert_eq!(engine.cycles(), 2);
        // The clock's moment is the snapshot's; the one the source skipped ran no cycle.
        assert_eq!(driver.seen, vec![(10, 1, 1), (30, 1, 1)]);
    }
}
