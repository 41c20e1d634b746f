//! The scheduling engine: pure, with no I/O, no clock and no Kubernetes types.
//!
//! A [`model::Snapshot`] goes in, a [`cycle::CycleOutcome`] comes out: the gangs placed
//! whole, and for every gang left waiting, why, as data ([`reason`]).

pub mod admission;
pub mod build;
pub mod claims;
pub mod clock;
pub mod cycle;
pub mod dra;
pub mod drive;
pub mod filter;
pub mod fragmentation;
pub mod model;
pub mod node;
pub mod place;
pub mod pods;
pub mod preempt;
pub mod queues;
pub mod reason;
pub mod resources;
#[cfg(test)]
mod tests;
pub mod topology;
pub mod volumes;

pub use cycle::{
    CycleConfig, CycleMemory, CycleOutcome, Placement, Queueing, schedule, schedule_remembering, schedule_with,
};
pub use place::{Scoring, Weights};
