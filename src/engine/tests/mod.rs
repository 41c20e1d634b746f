//! Whole cycles of the engine on built snapshots: queues (admission, fair shares, device
//! quotas), reclaim and preemption, and the rules between pods and the preferences
//! between them, as a cycle decides them.

mod admission;
mod between_pods;
mod preempt;
mod preempt_rules;
mod preemption_policy;
mod preferences;
mod volumes;
