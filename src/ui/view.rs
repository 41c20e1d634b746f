//! What the page shows, as plain data: the queue tree with its figures, the gangs that
//! wait with why and what comes nearest, the nodes by rack with the state of each GPU, and
//! fragmentation. The scheduling loop builds one after its housekeeping pass from what it
//! computed anyway (`ui::build`); the page only renders it. Every text is as the
//! scheduler would print it, unescaped: the renderer escapes.

/// One picture of the scheduler's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UiView {
    /// When it was made, in Unix seconds.
    pub at: i64,
    /// The scheduler's name (`schedulerName`) and whether this replica leads.
    pub scheduler_name: String,
    pub leading: bool,
    /// Queues in tree order (each parent before its children); empty without Queue objects.
    pub queues: Vec<QueueRow>,
    /// Gangs that wait, oldest first, at most [`MAX_WAITING`]; `more_waiting` counts the rest.
    pub waiting: Vec<WaitingGang>,
    pub more_waiting: usize,
    /// The topology level nodes are grouped by (`rack`), or None: one group of every node.
    pub grouping: Option<String>,
    pub racks: Vec<Rack>,
    pub fragmentation: Fragmentation,
}

/// Gangs listed on the page at most; a cluster with more waiting says how many more.
pub const MAX_WAITING: usize = 200;

/// A queue and its figures per resource key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueRow {
    pub name: String,
    /// How deep in the tree (0: top level).
    pub depth: usize,
    /// Why it takes no gangs, when it is invalid.
    pub problem: Option<String>,
    pub pending_gangs: usize,
    pub running_gangs: usize,
    pub resources: Vec<QueueFigures>,
}

/// One resource key of a queue, in the words `kubectl get mq -o yaml` shows them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueFigures {
    pub resource: String,
    /// `unlimited` when the queue sets none.
    pub quota: String,
    pub fair_share: String,
    pub allocated: String,
    pub requested: String,
    /// Allocated over the larger of quota and fair share, for the bar (0 to 1, or above
    /// when it borrows beyond both).
    pub fill: f64,
}

/// A gang that waits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WaitingGang {
    /// As the scheduler names it (`gang ml/train`, `pod ml/notebook`).
    pub gang: String,
    pub namespace: String,
    pub queue: String,
    pub min_member: usize,
    pub pods: usize,
    /// Seconds since it was created.
    pub waiting_seconds: i64,
    /// Why it waits, as its events say.
    pub reason: String,
    /// The placement that comes nearest, as `muster explain` says it.
    pub nearest: Option<String>,
}

/// The nodes of one domain of the grouping level.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rack {
    /// The domain's name; empty for nodes without the label.
    pub name: String,
    pub nodes: Vec<NodeRow>,
}

/// A node and its GPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRow {
    pub name: String,
    pub cordoned: bool,
    pub gpus: Vec<GpuState>,
}

/// What one GPU is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuState {
    Free,
    /// Allocated whole to a pod.
    Used,
    /// Some of it allocated as shares, the rest free.
    Shared,
    /// Out of service: a device taint that stops new allocations.
    Tainted,
    /// Allocated to a claim no bound pod uses: held, doing no work.
    Held,
}

impl GpuState {
    pub const ALL: [GpuState; 5] =
        [GpuState::Free, GpuState::Used, GpuState::Shared, GpuState::Tainted, GpuState::Held];

    pub fn word(self) -> &'static str {
        match self {
            GpuState::Free => "free",
            GpuState::Used => "used",
            GpuState::Shared => "shared",
            GpuState::Tainted => "tainted",
            GpuState::Held => "held",
        }
    }
}

/// How scattered the free GPUs are, per rack and for the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fragmentation {
    /// The cluster's figures under the name `cluster`, then each rack's.
    pub rows: Vec<FragmentationRow>,
    /// The engine's measure under the mix of GPU pods it has learned, in GPUs' worth of
    /// free capacity those pods could not use; None until it has learned GPU shares.
    pub expected: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FragmentationRow {
    pub name: String,
    pub gpus: usize,
    pub free: usize,
    /// Free GPUs on nodes where some GPU is busy: a whole-node job cannot use them.
    pub free_on_busy_nodes: usize,
    /// Nodes whose GPUs are all free.
    pub free_nodes: usize,
    /// The most free GPUs on one node.
    pub largest_free_block: usize,
    /// GPUs held by gangs bound short of their minMember.
    pub stranded: i64,
}
