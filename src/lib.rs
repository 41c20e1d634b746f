//! Muster: a gang scheduler for Kubernetes GPU clusters.
//!
//! ```text
//!  Kubernetes API ──watch──► k8s::watch ──apply()──► k8s::cache ──snapshot()──► engine (pure)
//!                                                       ▲                         │ plans,
//!                                                       │ assume / forget         │ reasons
//!  Kubernetes API ◄──writes── k8s::bind, k8s::status ◄──┴─────────────────────────┘
//! ```
//!
//! Crate map (see docs/ARCHITECTURE.md for the invariants):
//! - [`engine`]: the pure scheduling engine: a snapshot in, gang placements and reasons out.
//! - [`agent`]: the node agent (GPUs from NVML, ResourceSlices, health, the kubelet plugin).
//! - [`k8s`]: the shell that talks to the API server, and Muster's own API types
//!   ([`k8s::crd`]), from which `muster crds` generates `manifests/crds/`.
//! - [`sim`]: the simulator: the shell's conversion and the engine on an in-memory cluster.
//! - [`metrics`]: Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` server.
//! - [`ui`]: the read-only page at `/ui` on the metrics port, rendered from the view the
//!   scheduling loop publishes.
//! - [`html`]: escaping and inline-SVG plots shared by the pages Muster writes.
//! - [`config`]: the scheduler's configuration file.
//! - [`quantity`]: Kubernetes quantities as exact numbers, shared by the engine, the shell
//!   and the agent.
//! - [`yaml`]: the YAML Muster prints (`muster crds`, the agent's dry run), quoted so that
//!   YAML 1.1 and 1.2 readers alike read every string as a string.
#![forbid(unsafe_code)]

pub mod agent;
pub mod config;
pub mod engine;
pub mod html;
pub mod k8s;
pub mod metrics;
pub mod quantity;
pub mod report;
pub mod sim;
pub mod ui;
pub mod yaml;
