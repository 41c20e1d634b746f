//! The scheduler's shell: everything that talks to the Kubernetes API server.

pub mod crd;
