//! Muster: a gang scheduler for Kubernetes GPU clusters.
//!
//! ```text
//!  Kubernetes API ──watch──► k8s::store ──objects──► convert (pure) ──snapshot──► engine (pure)
//!                               ▲                          ▲                        │ plans,
//!                               │ assume / forget          │ same conversion        │ evictions,
//!  Kubernetes API ◄──writes── k8s::write ◄─────────────────┼────────────────────────┘ reasons
//!                                                          │
//!                     sim (in-memory cluster + clock) ─────┘
//! ```
//!
//! Crate map, lowest layer first (docs/ARCHITECTURE.md has the rooms and the invariants;
//! `tests/architecture.rs` holds them):
//! - [`quantity`], [`yaml`], [`html`]: exact quantities, the YAML Muster prints, escaping
//!   and plots for pages.
//! - [`engine`]: the pure scheduling engine: a snapshot in, gang placements and reasons out.
//! - [`config`]: the configuration file, read into the engine's terms.
//! - [`api`]: the Kubernetes types Muster defines (from which `muster crds` generates
//!   `manifests/crds/`) or reads.
//! - [`convert`]: the pure conversion of objects into the engine's model and of decisions
//!   back into objects, shared by the scheduler and the simulator.
//! - [`metrics`], [`figures`]: the Prometheus registry and server; GPU, usage and queue
//!   figures computed without I/O.
//! - [`ui`], [`sim`], [`report`]: the read-only page at `/ui`; the simulator; usage reports.
//! - [`k8s`]: the I/O shell: the store, the scheduling loop, the writes, the client.
//! - [`cli`]: `muster explain`.
//! - [`agent`]: the node agent (GPUs from NVML, ResourceSlices, health, the kubelet plugin),
//!   beside all of it and sharing none of it.
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod cli;
pub mod config;
pub mod convert;
pub mod engine;
pub mod figures;
pub mod html;
pub mod k8s;
pub mod metrics;
pub mod quantity;
pub mod report;
pub mod sim;
pub mod ui;
pub mod yaml;
