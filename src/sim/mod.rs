//! The simulator: the scheduler's conversion and engine on an in-memory cluster read from
//! YAML, built-in scenarios beside a per-pod baseline, and replay of job traces.

mod api_rules;
pub mod builtin;
pub mod controllers;
pub mod evict;
pub mod expand;
pub mod load;
pub mod openb;
pub mod placer;
pub mod replay;
pub mod run;
pub mod scenarios;
pub mod table;
pub mod tracker;
pub mod volumes;
