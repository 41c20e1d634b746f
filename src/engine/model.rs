//! The engine's compact model of a cluster: nodes, pending pods and the gangs they form.
//!
//! Built by the conversion (`convert::core`, `convert::assemble`) for the scheduler or the simulator from Kubernetes objects; nothing
//! here knows about the Kubernetes API.

use std::fmt;
use std::sync::Arc;

use super::dra::model::{ClaimNeed, DeviceUse, DraSnapshot, ExtendedRequest, PodClaim};
pub use super::node::{
    LabelRequirement, Node, NodeIdx, SelectorOperator, Taint, TaintEffect, Toleration, TolerationOperator,
};
pub use super::pods::PodKey;
use super::pods::{BoundPods, Labels, PodRules, VolumeLimits};
use super::queues::QueueTree;
use super::resources::{Demand, ResourceNames};
use super::topology::{DomainIndex, GangTopology};
pub use super::volumes::DelayedClaim;

/// Where a pod may run, apart from capacity: shared by all identical pods of a gang.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeConstraints {
    /// `spec.nodeSelector`: every pair must be a node label.
    pub node_selector: Vec<(String, String)>,
    /// Required node affinity: the node must match at least one term (all requirements of
    /// it). Empty: no affinity.
    pub affinity_terms: Vec<Vec<LabelRequirement>>,
    /// Preferred node affinity: each term's weight, given to a node matching all its
    /// requirements (a term without requirements matches no node).
    pub preferred: Vec<(i32, Vec<LabelRequirement>)>,
    pub tolerations: Vec<Toleration>,
    /// The node affinity of each PersistentVolume the pod's claims are bound to (and the
    /// zone its labels name): the node must match at least one term of every volume.
    pub volume_terms: Vec<Vec<Vec<LabelRequirement>>>,
    /// The zones and regions those volumes' labels name, by label key (a node with no zone
    /// or region label takes any).
    pub volume_zones: Vec<(String, Vec<String>)>,
    /// Its claims that wait for their first consumer: the node it is given must let each
    /// have a volume.
    pub delayed: Vec<DelayedClaim>,
}

/// A pod waiting for Muster.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingPod {
    pub key: PodKey,
    pub demand: Demand,
    pub constraints: Arc<NodeConstraints>,
    /// Its DRA claims and the extended resources DRA may serve; None when it has neither.
    pub devices: Option<Arc<PodDevices>>,
    /// Its labels, which other pods' affinity and spread rules select on.
    pub labels: Labels,
    /// Its host ports, required pod affinity and anti-affinity, hard spread constraints;
    /// None when it has none.
    pub rules: Option<Arc<PodRules>>,
}

/// What a pod asks of DRA.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodDevices {
    pub claims: Vec<PodClaim>,
    /// Extended resources (`nvidia.com/gpu: 2`) that a DeviceClass serves on nodes that do
    /// not list them as allocatable.
    pub extended: Vec<ExtendedRequest>,
}

impl PodDevices {
    /// Whether two pods' needs are interchangeable: the same claim specs for their private
    /// claims, the same shared claims, the same extended resources.
    pub fn same_shape(&self, other: &PodDevices) -> bool {
        self.extended == other.extended
            && self.claims.len() == other.claims.len()
            && self.claims.iter().zip(&other.claims).all(|(a, b)| {
                a.name == b.name
                    && a.private == b.private
                    && (a.private || a.claim == b.claim)
                    && match (&a.need, &b.need) {
                        (ClaimNeed::Allocate(x), ClaimNeed::Allocate(y)) => Arc::ptr_eq(x, y) || x == y,
                        (ClaimNeed::Allocated(x), ClaimNeed::Allocated(y)) => x == y,
                        _ => false,
                    }
            })
    }

    /// A hash consistent with [`PodDevices::same_shape`].
    pub fn shape_hash<H: std::hash::Hasher>(&self, state: &mut H) {
        use std::hash::Hash;
        self.extended.hash(state);
        for claim in &self.claims {
            claim.name.hash(state);
            claim.private.hash(state);
            if !claim.private {
                claim.claim.hash(state);
            }
            if let ClaimNeed::Allocate(spec) = &claim.need {
                spec.hash(state);
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GangKind {
    /// A pod that belongs to no PodGroup.
    Single,
    /// `scheduling.k8s.io/v1beta1` PodGroup.
    Kubernetes,
    /// `muster.dev/v1alpha1` PodGroup.
    Muster,
    /// `scheduling.x-k8s.io/v1alpha1` PodGroup (scheduler-plugins).
    SchedulerPlugins,
    /// `scheduling.run.ai/v2alpha2` PodGroup (KAI Scheduler), when KAI is imported.
    Kai,
    /// The pods of one workload (a Job, a PyTorchJob, a LeaderWorkerSet group, a Kueue pod
    /// group), named `Kind/name`: no PodGroup.
    Workload,
}

impl GangKind {
    /// The PodGroup's apiVersion, as the simulator's JSON output names it.
    pub fn api_version(self) -> Option<&'static str> {
        match self {
            GangKind::Single | GangKind::Workload => None,
            GangKind::Kubernetes => Some("scheduling.k8s.io/v1beta1"),
            GangKind::Muster => Some("muster.dev/v1alpha1"),
            GangKind::SchedulerPlugins => Some("scheduling.x-k8s.io/v1alpha1"),
            GangKind::Kai => Some("scheduling.run.ai/v2alpha2"),
        }
    }
}

/// A gang's identity: its PodGroup, or the pod itself for a gang of one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangKey {
    pub kind: GangKind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for GangKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            GangKind::Single => write!(f, "pod {}/{}", self.namespace, self.name),
            GangKind::Workload => match self.name.split_once('/') {
                Some((kind, name)) => write!(f, "{kind} {}/{name}", self.namespace),
                None => write!(f, "gang {}/{}", self.namespace, self.name),
            },
            _ => write!(f, "gang {}/{}", self.namespace, self.name),
        }
    }
}

/// Pods placed together or not at all.
#[derive(Clone, Debug, PartialEq)]
pub struct Gang {
    pub key: GangKey,
    /// Pods that must be placed at once (counting those already bound).
    pub min_member: usize,
    /// Pods already bound to nodes; they count toward `min_member`.
    pub bound: usize,
    /// Pods waiting for a node.
    pub pods: Vec<PendingPod>,
    pub priority: i32,
    /// Creation time, in seconds; earlier gangs go first among equal priorities.
    pub created: i64,
    /// Set when the gang cannot be considered at all (for example a pod names a PodGroup
    /// that does not exist); the gang waits with this reason.
    pub blocked: Option<String>,
    /// Where its pods must or should be together.
    pub topology: Option<GangTopology>,
    /// The queue it is admitted through ([`super::queues::DEFAULT_QUEUE`] unless named).
    pub queue: String,
    /// Its own preemption delay in seconds (its PodGroup's), before its queue's and the
    /// configuration's.
    pub preemption_delay: Option<i64>,
    /// When it was last evicted, in seconds: its preemption delay counts from then too.
    pub last_evicted: Option<i64>,
    /// Another system that keeps its quota (Kueue, not imported): while queues exist, the
    /// gang is placed in free capacity outside them, charged to none, and evicts nobody.
    pub quota_owner: Option<&'static str>,
    /// Whether it may be evicted for others (reclaim, preemption); a non-preemptible gang
    /// runs only within its queue's quota.
    pub preemptible: bool,
    /// Whether others may be evicted for it: false when a pod of it says
    /// `preemptionPolicy: Never` (it waits for free capacity, as kube-scheduler lets it).
    pub preempts: bool,
    /// Set by the caller when the gang did not fit before and nothing has changed since
    /// that could help it: it is not tried again (see [`Parked`]).
    pub parked: Parked,
    /// How long it runs at most once started, in seconds: the tightest bound its pods
    /// carry (`activeDeadlineSeconds`, its Job's, its PodGroup's `maxRunSeconds`). None:
    /// unknown, and timed backfill never lets it into capacity held for another gang.
    pub max_run_seconds: Option<i64>,
}

/// A gang held in the caller's unschedulable pool: it did not fit in an earlier cycle and
/// no change since could help it. The cycle keeps its place (StrictFIFO's head, its
/// queue's demand) without searching for nodes again, and it waits with
/// [`super::reason::WaitReason::Unchanged`]; only the backfill reservation, which the
/// cycle makes afresh, is still made for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Parked {
    /// Tried as usual.
    #[default]
    No,
    /// It did not fit in free capacity.
    DidNotFit,
    /// It would not fit even on an empty cluster.
    NeverFits,
}

impl Gang {
    /// How many more pods must be placed for the gang to reach `min_member`.
    pub fn still_needed(&self) -> usize {
        self.min_member.saturating_sub(self.bound)
    }

    /// How many of its pending pods it takes at the least when it is placed now: those it
    /// still needs, or one when it only adds pods beyond minMember. Queues order, admit and
    /// charge it by these.
    pub fn pods_now(&self) -> usize {
        self.still_needed().max(1).min(self.pods.len())
    }
}

/// A pod of Muster's running on a node.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningPod {
    pub key: PodKey,
    pub node: NodeIdx,
    pub demand: Demand,
    /// When it started (or was bound), in seconds.
    pub started: i64,
    /// Devices its own claims hold (claims reserved for it alone), given back with it.
    pub devices: Vec<DeviceUse>,
    /// Its `terminationGracePeriodSeconds`: how long it may take to go once evicted.
    pub grace_seconds: i64,
    /// Thousandths of GPUs it holds as GPU fractions (KAI's annotations), which queues
    /// count under `nvidia.com/gpu` ([`fractions::held`](crate::engine::admission::fractions::held)).
    pub gpu_milli: i64,
}

/// A gang with pods running, as queues account for it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningGang {
    pub key: GangKey,
    pub queue: String,
    pub priority: i32,
    pub preemptible: bool,
    pub min_member: usize,
    pub pods: Vec<RunningPod>,
    /// When it was created (its PodGroup, else its oldest pod), in seconds: "newer" in
    /// `LowerOrNewerEqualPriority` compares creation times.
    pub created: i64,
    /// It was placed in capacity held for a reservation (opportunistic backfill; the shell
    /// reads the marker its pods were bound with): the reserved gang evicts it whole once
    /// it can start in its place.
    pub opportunistic: bool,
}

impl RunningGang {
    /// When its newest pod started.
    pub fn last_started(&self) -> i64 {
        self.pods.iter().map(|p| p.started).max().unwrap_or(0)
    }

    /// When its oldest pod started: how long the gang has run.
    pub fn first_started(&self) -> i64 {
        self.pods.iter().map(|p| p.started).min().unwrap_or(0)
    }
}

/// A bound pod that will be gone by `at` (seconds): when it started plus its runtime bound.
/// Timed backfill counts on the capacity it frees then.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    pub at: i64,
    pub node: NodeIdx,
    pub demand: Demand,
}

/// Capacity freed by evictions and held for the gang they were made for, until it binds or
/// `until` passes. The shell keeps it between cycles (the engine keeps no state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub gang: GangKey,
    /// The nodes of its trial placement, by name (indices change between snapshots).
    pub nodes: Vec<String>,
    /// Each pod of the trial and its node: the gang goes exactly there, so that gangs
    /// holding parts of one node each find their own part.
    pub pods: Vec<(PodKey, String)>,
    /// When it lapses, in seconds.
    pub until: i64,
}

/// Everything one scheduling cycle reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The time the snapshot describes, in seconds, as the shell read it; the engine only
    /// compares it with creation times and never reads a clock.
    pub now: i64,
    pub resources: ResourceNames,
    /// Shared with what the shell keeps between cycles (`Arc::make_mut` to change them):
    /// a snapshot after one pod changed copies no node.
    pub nodes: Arc<Vec<Node>>,
    pub gangs: Vec<Gang>,
    /// Devices, classes and what allocated claims hold.
    pub dra: DraSnapshot,
    /// Zones, blocks, racks and any ad-hoc levels gangs name.
    pub topology: DomainIndex,
    /// Team queues; with no Queue objects, only the implicit default.
    pub queues: QueueTree,
    /// Muster's running gangs, listed when queues are configured (they are what queues
    /// hold), and opportunistic ones always (a reservation may evict them). Pods already
    /// terminating are not listed: they are leaving.
    pub running: Vec<RunningGang>,
    /// Reservations made by earlier cycles' evictions.
    pub reservations: Vec<Reservation>,
    /// Every pod bound to each node, whichever scheduler placed it, with its labels and
    /// rules: what pod affinity, anti-affinity, spread and host ports are decided on.
    pub bound: Arc<BoundPods>,
    /// How many volumes each node's CSI drivers may attach (CSINodes).
    pub volume_limits: Arc<VolumeLimits>,
    /// Bound pods of Muster's with a known runtime bound, in any order; not opportunistic
    /// ones, which leave whenever a reservation needs their capacity (timed backfill counts
    /// them from `running`).
    pub endings: Vec<Ending>,
}

impl Snapshot {
    /// The queue a gang is admitted through: a running gang's, else a pending one's.
    pub fn queue_of(&self, gang: &GangKey) -> Option<&str> {
        let running = self.running.iter().find(|g| &g.key == gang).map(|g| g.queue.as_str());
        running.or_else(|| self.gangs.iter().find(|g| &g.key == gang).map(|g| g.queue.as_str()))
    }
}
