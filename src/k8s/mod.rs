//! The scheduler's shell: everything that talks to the Kubernetes API server, and the
//! conversion of Kubernetes objects into the engine's model that the simulator shares.

pub mod allocation;
pub mod assemble;
pub mod bind;
pub mod cache;
pub mod claim_bind;
pub mod claim_release;
pub mod convert;
pub mod convert_dra;
pub mod crd;
pub mod explain;
pub mod foreign;
pub mod leader;
pub mod quantity;
pub mod safety;
pub mod scheduler;
pub mod status;
pub mod watch;
