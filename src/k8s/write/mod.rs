//! Everything the scheduler writes, and what lets it write: binds and evictions ([`bind`]),
//! claim allocations and releases ([`claims`]), volumes for claims that wait for their
//! first consumer ([`volumes`]), the background writer ([`writer`]) and its
//! sink on the API server ([`sink`]), refused evictions ([`refusals`]), the Lease
//! ([`leader`]) and the fence every write passes ([`fence`]).

pub mod bind;
pub mod claims;
pub mod fence;
pub mod leader;
pub mod refusals;
pub mod sink;
pub mod volumes;
pub mod writer;
