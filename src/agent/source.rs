//! Where the agent's GPUs come from: NVML on a real node, an inventory file or invented
//! GPUs elsewhere. Everything downstream sees only [`DeviceSource`].

use thiserror::Error;

use super::gpu::{Gpu, GpuSample};

#[derive(Debug, Error)]
pub enum Error {
    #[error(
        "failed to load NVML ({0}); is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path? \
         On a node without GPUs use --inventory FILE or --fake-gpus N"
    )]
    NvmlUnavailable(String),
    #[error("failed to read GPU {index} through NVML: {problem}")]
    Nvml { index: u32, problem: String },
    #[error("failed to read inventory {path}: {problem}")]
    Inventory { path: String, problem: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A node's GPUs, read afresh on every call.
///
/// Not `Send`: NVML handles belong to the thread that opened them, so the agent keeps its
/// source on one thread of its own and passes the readings on.
pub trait DeviceSource {
    /// The GPUs as they are now, with their health, sorted by minor number.
    fn read(&mut self) -> Result<Vec<Gpu>>;

    /// Live readings for the metrics, one per GPU of the last `read`, in the same order.
    fn samples(&mut self) -> Vec<GpuSample> {
        Vec::new()
    }
}
