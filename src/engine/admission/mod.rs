//! Gangs admitted through their queues: what each queue holds and wants ([`account`]), the
//! capacity divided level by level into fair shares ([`share`]), device quotas
//! ([`devices`]) and GPU fractions ([`fractions`]) counted against them, a gang checked
//! against its queue's rules ([`admit`]), the order queues are served in ([`order`]), and
//! each queue's figures for people ([`report`]).

pub mod account;
pub mod admit;
pub mod devices;
pub mod fractions;
pub mod order;
pub mod report;
pub mod share;

pub use account::{GangNeeds, QueueState};
