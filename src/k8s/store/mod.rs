//! What the scheduler knows of the cluster: which APIs it serves ([`discovery`]) and which
//! kinds it reads as what ([`reads`]), the
//! watches ([`watch`]) and the cache they fill ([`cache`]), which events matter
//! ([`relevance`]) and whom a change could help ([`changes`]), and pods resolved to the
//! gangs their workloads imply as they arrive ([`follow`]).

pub mod cache;
pub mod changes;
pub mod discovery;
pub mod follow;
mod objects;
pub mod reads;
pub mod relevance;
pub mod watch;
