//! The node agent: reads the node's GPUs (NVML, an inventory file, or fakes), publishes them
//! as DRA ResourceSlices (driver mode) or takes NVIDIA's driver's failing devices out of
//! service (companion mode), labels the Node, and exports per-GPU metrics.
//!
//! ```text
//!  DeviceSource ──read()──► Vec<Gpu> ──► slices::desired ──► publish (ResourceSlices)
//!  (nvml, file, fake)            │   └──► companion::rules ──► DeviceTaintRules
//!                                ├──────► labels::node_labels ──► Node patch
//!                                └──────► metrics (dcgm-exporter names)
//! ```

pub mod companion;
pub mod gpu;
pub mod inventory;
pub mod kubelet;
pub mod labels;
pub mod metrics;
pub mod nvml;
pub mod options;
pub mod publish;
pub mod run;
pub mod slices;
pub mod source;

pub use run::serve;
