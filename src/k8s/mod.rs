//! The scheduler's I/O shell: everything that talks to the Kubernetes API server. What it
//! reads goes through the pure conversion (`crate::convert`) to the engine; what the engine
//! decides comes back through it as objects to write.
//!
//! - [`store`]: discovery, the watches and the cache they fill;
//! - [`scheduling`]: the loop: cycles, backoff, the unschedulable pool, housekeeping and the
//!   safety net;
//! - [`write`]: binds, claim writes, the background writer and its sink, fencing and
//!   leadership;
//! - [`client`]: every request's deadline and the client-side rate limits;
//! - [`observe`]: what `/healthz` and `/readyz` say;
//! - [`scheduler`]: the process, all of it wired together.

pub mod client;
pub mod observe;
pub mod scheduler;
pub mod scheduling;
pub mod store;
pub mod write;
