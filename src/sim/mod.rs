//! The simulator: the scheduler's conversion and engine on an in-memory cluster read from
//! YAML, and built-in scenarios beside a per-pod baseline.

pub mod builtin;
pub mod evict;
pub mod expand;
pub mod load;
pub mod objects;
pub mod run;
pub mod scenarios;
pub mod table;
