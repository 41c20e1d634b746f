//! The one conversion the scheduler and the simulator share, pure (no client, no runtime,
//! no clock): Kubernetes objects into the engine's compact model, and the engine's decisions
//! back into objects (claim allocations, PodGroup status, pod conditions).
//!
//! - [`kinds`]: every kind of object scheduling reads, listed once;
//! - [`view`]: the cluster's objects as scheduling reads them, owned or borrowed;
//! - [`assemble`]: a view into the engine's snapshot, brought up to date by generation;
//! - [`membership`]: which gang a pod belongs to;
//! - [`gang_spec`]: what a gang asks, read from PodGroups of five kinds ([`groups`]) or the
//!   workloads that own its pods ([`workloads`]);
//! - [`core`], [`pod_rules`], [`default_spread`], [`dra`], [`queues`], [`volumes`]: nodes
//!   and pods, the rules between pods (host ports, pod affinity, spread, and the spread
//!   pods that set none get), DRA devices and claims, queues of three kinds, the volumes
//!   pods' claims are bound to, into the model;
//! - [`allocation`], [`status`]: decisions back into objects;
//! - [`rows`]: the snapshot builder the two replays share, which start from CSV rows: rows
//!   written as objects and read through this same conversion.

pub mod allocation;
pub mod assemble;
pub mod core;
pub mod default_spread;
pub mod dra;
pub mod gang_spec;
pub mod groups;
pub mod interner;
pub mod journal;
pub mod kinds;
pub mod membership;
pub mod objects;
pub mod pod_rules;
pub mod quantity;
pub mod queues;
pub mod rows;
pub mod status;
pub mod view;
pub mod volumes;
pub mod workloads;
