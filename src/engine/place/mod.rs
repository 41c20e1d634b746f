//! Gang placement over one cycle's working copy of free capacity and devices.
//!
//! Pods of a gang with the same demand, node constraints and device needs form a *shape*
//! and are placed as one set. Per shape and cycle, the nodes that pass the static filters
//! are found once and ordered once by the scoring strategy; a cursor skips the leading
//! nodes that can no longer take the shape, so placing many pods of one shape does not
//! rescan full nodes. A pod with claims is placed on a node only when all its claims can be
//! allocated there, in the same working copy. A gang either gets at least `min_member`
//! pods placed, with every device they claim, committed into the working copy, or nothing:
//! every tentative change is undone.

mod domains;
mod gpu_kinds;
mod memory;
mod prefer;
mod reserve;
mod rules;
mod score;
mod shapes;
mod shortfall;
mod timed;
mod transaction;
mod trial;

use foldhash::{HashMap, HashMapExt};

use super::claims::ClaimWork;
use super::dra::selectors::SelectorCache;
use super::model::{Gang, NodeIdx, PodKey, Snapshot};
use super::resources::{Capacity, ResourceId};
use super::topology::DomainChoice;
pub use memory::CapacityMemory;
use rules::work::PodWork;
pub(crate) use score::Key;
pub use score::{Scoring, Weights};
use shapes::{Shape, ShapeKey};
pub use shortfall::Shortfall;
pub use timed::{Backfilled, Timed};
pub use transaction::{Assignment, GangFit};
pub use trial::TrialMark;

/// Which nodes a placement attempt may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    /// The nodes of one domain; with `spread`, the domains of that inner level with the most
    /// free capacity first, so that the gang spans as few of them as possible.
    Domain {
        level: usize,
        domain: u32,
        spread: Option<(usize, Key)>,
    },
    /// Every node, the domains of the inner level with the most free capacity first.
    Spread {
        inner: usize,
        key: Key,
    },
}

/// One cycle's working copy: free capacity per node and per domain, reserved nodes, the
/// shapes seen so far, and the claims allocated so far.
pub struct Workspace<'s> {
    pub(crate) snapshot: &'s Snapshot,
    scoring: Scoring,
    weights: Weights,
    pub(crate) domain_choice: DomainChoice,
    free: memory::FreeCapacity,
    /// Per topology level, per domain: the free capacity of its nodes, kept with `free`.
    pub(crate) domain_free: Vec<Vec<Capacity>>,
    /// Per topology level, per domain: its nodes' allocatable capacity.
    pub(crate) domain_allocatable: Vec<Vec<Capacity>>,
    reserved: Vec<bool>,
    /// The last shortfall computed, with what it was computed for and the capacity's
    /// generation then: gangs of the same shapes that fail one after another (pods of one
    /// job under the per-pod policy, copies of one job) are explained once.
    shortfall_memo: Option<(u64, transaction::Attempt, Shortfall)>,
    /// The level bin-packing keeps whole: the innermost configured one whose domains hold
    /// several nodes (racks, unless configured otherwise).
    pack_level: Option<usize>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<ShapeKey, usize>,
    /// Shapes of pods with rules between pods, found again by the address of their rules
    /// (pods of one template share them) without hashing the rules each time.
    shapes_by_rules: HashMap<usize, Vec<shapes::RulesShape>>,
    accelerators: Vec<ResourceId>,
    pub(crate) claims: ClaimWork<'s>,
    /// Host ports, pod affinity and anti-affinity, and spread, counted as pods are placed.
    pub(crate) pods: PodWork<'s>,
    /// Whether free capacity grew beyond what the cycle started with somewhere (a trial gave
    /// back what running pods hold): shapes' `open` lists are then not enough.
    pub(crate) grown: bool,
    /// During a trial (eviction plans), every change of free capacity, to undo it.
    journal: Option<Vec<(NodeIdx, crate::engine::resources::Demand, i64)>>,
    /// The most common kinds of GPU pods placed recently.
    kinds: std::sync::Arc<crate::engine::fragmentation::Kinds>,
}

impl<'s> Workspace<'s> {
    pub fn new(
        snapshot: &'s Snapshot,
        (scoring, weights): (Scoring, Weights),
        domain_choice: DomainChoice,
        selectors: &'s mut SelectorCache,
        limits: crate::engine::dra::allocate::SearchLimits,
        capacity: &mut CapacityMemory,
    ) -> Workspace<'s> {
        let memory::Parts { free, domain_free, domain_allocatable } = capacity.parts(snapshot);
        let kinds = capacity.mix.top();
        // Extended resources (anything but the four built-ins) are the scarce ones.
        let accelerators = (4..snapshot.resources.len()).map(|i| ResourceId(i as u16)).collect();
        let topology = &snapshot.topology;
        let pack_level =
            (0..topology.configured).rev().find(|&l| topology.levels[l].domains.iter().any(|d| d.nodes.len() > 1));
        Workspace {
            snapshot,
            scoring,
            weights,
            domain_choice,
            pack_level,
            free,
            domain_free,
            domain_allocatable,
            reserved: vec![false; snapshot.nodes.len()],
            shapes: Vec::new(),
            shape_ids: HashMap::new(),
            shapes_by_rules: HashMap::new(),
            accelerators,
            claims: ClaimWork::new(&snapshot.dra, selectors, limits),
            pods: PodWork::new(&snapshot.nodes, &snapshot.bound, &snapshot.volume_limits, weights.hard_pod_affinity),
            grown: false,
            shortfall_memo: None,
            journal: None,
            kinds,
        }
    }

    /// Gives the working copies back to the memory they came from, for the next cycle,
    /// with the kinds of GPU pods of gangs seen for the first time.
    pub fn remember(self, capacity: &mut CapacityMemory) {
        for kind in self.arrived_kinds(&mut capacity.learned) {
            capacity.mix.learn(kind);
        }
        let Workspace { free, domain_free, domain_allocatable, .. } = self;
        capacity.give_back(memory::Parts { free, domain_free, domain_allocatable });
    }

    /// Keeps `node` from (or opens it to) gangs placed later in the cycle.
    pub fn set_reserved(&mut self, node: NodeIdx, reserved: bool) {
        if self.reserved[node as usize] != reserved {
            self.reserved[node as usize] = reserved;
            self.free.generation += 1;
        }
    }

    pub fn is_reserved(&self, node: NodeIdx) -> bool {
        self.reserved[node as usize]
    }

    /// Free capacity of a node in the working copy.
    pub fn free(&self, node: NodeIdx) -> &Capacity {
        &self.free[node as usize]
    }

    /// Pod keys of an assignment, for the outcome.
    pub fn keys(gang: &Gang, assignment: &Assignment) -> Vec<(PodKey, NodeIdx)> {
        assignment.iter().map(|&(i, node)| (gang.pods[i].key.clone(), node)).collect()
    }
}
