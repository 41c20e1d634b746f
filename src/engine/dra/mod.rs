//! Dynamic Resource Allocation inside the engine: the device model, Kubernetes' CEL
//! environment for selectors, and the allocator that places a pod's claims on a node.
//!
//! ```text
//!  DraSnapshot (pools, devices per node, classes, devices in use)
//!      │                      SelectorCache: compiled once, result per device revision
//!      ▼                           │
//!  allocate(pod's claims, node) ◄──┘──► DeviceState (taken, shares, counters; undo log)
//! ```

pub mod allocate;
pub mod attribute;
pub mod cel;
pub mod model;
mod resolved;
pub mod selectors;
pub mod semver;
pub mod state;
