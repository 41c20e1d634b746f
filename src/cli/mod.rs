//! Commands a person runs against a live cluster: `muster explain` (a pod, a PodGroup or a
//! queue, from one cycle of the scheduler's own code over the cluster as read).

pub mod explain;
pub mod explain_queue;
