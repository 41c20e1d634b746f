//! Everything the scheduler writes, and what lets it write: binds ([`bind`]),
//! claim allocations and releases ([`claims`]), volumes for claims that wait for their
//! first consumer ([`volumes`]), devices whose drivers must report them ready
//! ([`devices`]), the background writer ([`writer`]) and its
//! sink on the API server ([`sink`]), refused evictions ([`refusals`]) and
//! the evictions and deletes themselves ([`remove`]), the Lease
//! ([`leader`]) and the fence every write passes ([`fence`]).

pub mod bind;
pub mod claims;
pub mod devices;
pub mod fence;
pub mod leader;
pub mod refusals;
pub mod remove;
pub mod sink;
pub mod volumes;
pub mod writer;
