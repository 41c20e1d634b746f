//! Topology: where a gang's pods may go together (one rack, one block, one zone).
//!
//! ```text
//!  node labels ──► TopologyTree (petgraph; updated incrementally, node by node)
//!                        │ index(nodes)
//!                        ▼
//!                  DomainIndex (per level: domains, their parents and nodes) ──► Workspace:
//!                  per-domain free capacity, domains searched by aggregate before nodes
//! ```

pub mod index;
pub mod tree;

pub use index::{Domain, DomainIndex, Level};

/// The default levels, outermost first: zone, block, rack, host.
pub fn default_levels() -> Vec<LevelSpec> {
    [
        ("zone", "topology.kubernetes.io/zone"),
        ("block", "topology.muster.dev/block"),
        ("rack", "topology.muster.dev/rack"),
        ("host", "kubernetes.io/hostname"),
    ]
    .into_iter()
    .map(|(name, label)| LevelSpec { name: name.into(), label: label.into() })
    .collect()
}
pub use tree::{LevelSpec, TopologyTree};

/// A gang's topology constraint: levels by index into the snapshot's [`DomainIndex`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GangTopology {
    /// Every pod in one domain of this level, or wait.
    pub required: Option<usize>,
    /// One domain of this level if any fits, else as few as possible, widening level by
    /// level up to the required one (or the whole cluster).
    pub preferred: Option<usize>,
}

/// How a domain is chosen among those that fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DomainChoice {
    /// The one left with the least free capacity after placing the gang, so whole domains
    /// stay free for the large gangs that need them.
    #[default]
    BestFit,
    /// The first in label order (for comparison).
    FirstFit,
}
