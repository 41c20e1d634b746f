//! Property tests and fuzzing, bounded in time: each property runs a fixed number of
//! generated cases (no failure files are written), so the binary takes seconds.
//!
//! - [`quantity`]: the quantity parser and printer round-trip; the parser never panics.
//! - [`cel`]: the CEL environment never panics, and its cost budget refuses what would run
//!   long, on generated expressions and devices.
//! - [`config`]: the configuration loader never panics on generated or mutated YAML, and
//!   its errors name the file.
//! - [`sim_loader`]: the simulator's loader never panics on mutated test clusters; its
//!   errors name the object or the document.
//! - [`engine`] and [`engine_dra`]: the engine keeps its invariants on random snapshots: no
//!   node over capacity, no pod or device given twice, every gang none or at least minMember.
//! - [`queues`]: reclaim and preemption over many cycles on random queue trees: gangs stay
//!   whole, none is evicted twice, every eviction leads to its placement
//!   (`cargo test --test properties queues::`).

use proptest::test_runner::Config as ProptestConfig;

mod cel;
mod config;
mod engine;
mod engine_dra;
mod quantity;
mod queues;
mod sim_loader;

/// A fixed number of cases, no failure persistence, and a bounded shrink, so a run takes
/// the same short time every time and writes nothing.
pub fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, max_shrink_iters: 2_000, ..ProptestConfig::default() }
}
