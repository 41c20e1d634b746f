//! Whole cycles of the engine on built snapshots: queues (admission, fair shares, device
//! quotas) and reclaim and preemption, as a cycle decides them.

mod admission;
mod preempt;
