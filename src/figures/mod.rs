//! Figures for people, computed from the cluster's objects and the engine's snapshot without
//! I/O: GPUs total, allocated, stranded and held ([`gpus`]), what each bound pod holds for
//! the usage ledger ([`usage`]), a queue's status and gauges ([`queue_status`]), and the
//! placement nearest to fitting a waiting gang ([`nearest`]). The scheduler's metrics, the
//! page, `muster explain` and the simulator read them alike.

pub mod gpus;
pub mod nearest;
pub mod queue_status;
pub mod usage;
