//! Why pods wait, as data, and its rendering in kube-scheduler's words.

use std::collections::BTreeMap;
use std::fmt;

use super::clock::at;
use super::filter::StaticRejection;
use super::model::{GangKey, Parked, PodKey};

/// One reason a node could not take a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeRejection {
    Static(StaticRejection),
    /// Not enough of this resource is free.
    Insufficient(String),
    /// Kept free for an earlier gang that does not fit yet.
    Reserved,
    /// The pod's claims cannot be allocated on the node; says which claim and request.
    Devices(String),
    /// Host ports, pod affinity or anti-affinity, or topology spread.
    Pods(super::pods::PodRejection),
}

impl fmt::Display for NodeRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRejection::Static(StaticRejection::Unschedulable) => write!(f, "node(s) were unschedulable"),
            NodeRejection::Static(StaticRejection::Affinity) => {
                write!(f, "node(s) didn't match Pod's node affinity/selector")
            }
            NodeRejection::Static(StaticRejection::UntoleratedTaint { key, value }) => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            NodeRejection::Static(StaticRejection::VolumeNodeAffinity) => {
                write!(f, "node(s) didn't match PersistentVolume's node affinity")
            }
            NodeRejection::Static(StaticRejection::VolumeZone) => write!(f, "node(s) had no available volume zone"),
            NodeRejection::Static(StaticRejection::VolumeBindConflict) => {
                write!(f, "node(s) didn't find available persistent volumes to bind")
            }
            NodeRejection::Static(StaticRejection::VolumeNoRoom) => {
                write!(f, "node(s) did not have enough free storage")
            }
            NodeRejection::Insufficient(resource) => write!(f, "Insufficient {resource}"),
            NodeRejection::Reserved => write!(f, "node(s) reserved for an earlier gang"),
            NodeRejection::Devices(why) => write!(f, "node(s) {why}"),
            NodeRejection::Pods(why) => write!(f, "{why}"),
        }
    }
}

/// How many nodes were rejected for each reason, out of how many.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRejections {
    pub total_nodes: usize,
    /// Nodes that could take at least one of the pods.
    pub available: usize,
    pub counts: BTreeMap<NodeRejection, usize>,
}

impl NodeRejections {
    pub fn add(&mut self, rejection: NodeRejection) {
        *self.counts.entry(rejection).or_default() += 1;
    }
}

impl fmt::Display for NodeRejections {
    /// "0/12 nodes are available: 8 Insufficient nvidia.com/gpu, 4 node(s) had untolerated
    /// taint {gpu: bad}", reasons sorted by their text as kube-scheduler sorts them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.counts.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
        parts.sort_by(|a, b| {
            let text = |s: &str| s.split_once(' ').map(|(_, t)| t.to_string()).unwrap_or_default();
            text(a).cmp(&text(b))
        });
        write!(f, "{}/{} nodes are available", self.available, self.total_nodes)?;
        if !parts.is_empty() {
            write!(f, ": {}", parts.join(", "))?;
        }
        Ok(())
    }
}

/// Why a gang was not placed in this cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// The gang cannot be considered (for example its PodGroup does not exist).
    Blocked(String),
    /// Not enough pods fit at once.
    DoesNotFit { nodes: NodeRejections, needed: usize, fit: usize },
    /// Not even an empty cluster could hold it.
    NeverFits { nodes: NodeRejections, needed: usize, fit: usize },
    /// Fewer pods exist than the gang's minMember; it waits for the rest to be created.
    TooFewPods { exist: usize, min_member: usize },
    /// StrictFIFO: an earlier gang that does not fit goes first.
    BehindEarlierGang(GangKey),
    /// A pod's claims cannot be allocated anywhere: an error in what it asks for (a
    /// selector failing at run time, a missing class).
    DeviceError { pod: PodKey, error: String },
    /// No domain of the gang's topology level can hold it now (or, `never_fits`, ever).
    Topology { message: String, never_fits: bool },
    /// Its queue does not admit it now.
    Queue(super::queues::Refusal),
    /// It does not fit in free capacity (`shortfall`), and this is where it stands with
    /// evicting others.
    Room { shortfall: Box<WaitReason>, room: Room },
    /// Parked by the caller (see [`super::model::Parked`]): not tried again; its last
    /// reason stands.
    Unchanged,
    /// Timed backfill: it would fit in capacity held for `gang`, but its runtime bound is
    /// unknown or ends after `gang` is expected to start (`shadow`, seconds).
    DelaysReservation { gang: GangKey, shadow: i64, now: i64 },
    /// Timed backfill: it does not fit now (`shortfall`), and holds a reservation that is
    /// expected to let it start at `shadow`.
    Reserved { shortfall: Box<WaitReason>, shadow: i64, now: i64 },
}

/// When a reserved gang is expected to start: "at 14:20 UTC, in 35 min" for a time of day,
/// "in 35 min" for a simulated clock that starts at zero.
pub fn expected_start(shadow: i64, now: i64) -> String {
    let minutes = (shadow.saturating_sub(now).max(0) + 59) / 60;
    let after = match (minutes / 60, minutes % 60) {
        (hours, 0) if hours >= 2 => format!("{hours} h"),
        (hours, rest) if hours >= 2 => format!("{hours} h {rest} min"),
        _ => format!("{minutes} min"),
    };
    // Anything after 2001 is a time of day; earlier values are a simulation's own clock.
    if shadow >= 1_000_000_000 {
        let of_day = shadow.rem_euclid(86_400);
        format!("at {:02}:{:02} UTC, in {after}", of_day / 3600, of_day % 3600 / 60)
    } else {
        format!("in {after}")
    }
}

impl WaitReason {
    /// Whether a gang that waits for this reason may be parked (see
    /// [`super::model::Parked`]), and how. Only a gang that searched for nodes and found too
    /// few is: the search is the cost saved. Not one that was kept off nodes reserved for an
    /// earlier gang (a reservation moves from one cycle to the next), nor one that capacity
    /// is held for.
    pub fn parkable(&self) -> Option<Parked> {
        match self {
            // Nor one kept off nodes by pod affinity or spread, which a pod placed since may lift.
            WaitReason::DoesNotFit { nodes, .. } => (!nodes.counts.keys().any(|r| match r {
                NodeRejection::Reserved => true,
                NodeRejection::Pods(why) => why.lifted_by_placements(),
                _ => false,
            }))
            .then_some(Parked::DidNotFit),
            WaitReason::NeverFits { .. } | WaitReason::Topology { never_fits: true, .. } => Some(Parked::NeverFits),
            WaitReason::Topology { never_fits: false, .. } => Some(Parked::DidNotFit),
            // Kept out of capacity held for a timed reservation: time passing only brings
            // its end closer to the shadow time, so only a change can help it.
            WaitReason::DelaysReservation { .. } => Some(Parked::DidNotFit),
            WaitReason::Room { shortfall, room } => match room {
                Room::Evicting { .. } | Room::Reserved { .. } => None,
                Room::InPreemptionDelay { .. } | Room::FairShareReached { .. } | Room::ProtectedByMinRuntime { .. } => {
                    shortfall.parkable()
                }
            },
            _ => None,
        }
    }
}

/// A gang left waiting, with its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub gang: GangKey,
    pub reason: WaitReason,
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            WaitReason::Room { shortfall, room } => {
                let inner = Waiting { gang: self.gang.clone(), reason: (**shortfall).clone() };
                write!(f, "{inner}; {room}")
            }
            WaitReason::Reserved { shortfall, shadow, now } => {
                let inner = Waiting { gang: self.gang.clone(), reason: (**shortfall).clone() };
                write!(f, "{inner}; capacity is held for it, expected to be enough {}", expected_start(*shadow, *now))
            }
            WaitReason::DelaysReservation { gang, shadow, now } => {
                write!(f, "would delay the reservation of {gang} (expected to start {})", expected_start(*shadow, *now))
            }
            WaitReason::Blocked(why) => write!(f, "{why}"),
            WaitReason::DoesNotFit { nodes, needed, fit } => {
                write!(f, "{nodes}")?;
                if *needed > 1 {
                    write!(f, "; {} needs {needed} pods at once, {fit} fit", self.gang)?;
                }
                Ok(())
            }
            WaitReason::NeverFits { nodes, needed, fit } => write!(
                f,
                "{nodes}; {} needs {needed} pods at once and only {fit} would fit even on an empty cluster",
                self.gang
            ),
            WaitReason::TooFewPods { exist, min_member } => write!(
                f,
                "{} has {exist} of the {min_member} pods its minMember needs; waiting for the rest to be created",
                self.gang
            ),
            WaitReason::BehindEarlierGang(earlier) => {
                write!(f, "waiting behind {earlier}, which does not fit yet (queueing StrictFIFO)")
            }
            WaitReason::Topology { message, .. } => write!(f, "{message}"),
            WaitReason::Unchanged => {
                write!(f, "{} did not fit, and nothing has changed since that could help it", self.gang)
            }
            WaitReason::Queue(refusal) => write!(f, "{refusal}"),
            WaitReason::DeviceError { pod, error } => {
                write!(f, "pod {pod}: {error}")?;
                if !matches!(self.gang.kind, super::model::GangKind::Single) {
                    write!(f, "; {} waits until this is fixed", self.gang)?;
                }
                Ok(())
            }
        }
    }
}

/// Why a gang's pods are evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvictionReason {
    /// For a gang of another queue that is owed the capacity (its fair share).
    Reclaimed,
    /// For a gang of higher priority: in the same queue, or (`borrowWithinParent`) in a
    /// queue that must borrow from one over its quota.
    Preempted,
    /// It ran opportunistically in capacity held for a reservation, and the reserved gang
    /// can start now in its place (opportunistic backfill).
    Opportunistic,
}

impl EvictionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionReason::Reclaimed => "Reclaimed",
            EvictionReason::Preempted => "Preempted",
            EvictionReason::Opportunistic => "Opportunistic",
        }
    }
}

/// Where a gang that does not fit in free capacity stands with evictions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Room {
    /// Pods were evicted for it in this cycle; the freed capacity is held for it.
    Evicting { victims: Vec<GangKey>, pods: usize, reason: EvictionReason, until: i64 },
    /// Capacity is held for it while the pods evicted for it go.
    Reserved { until: i64 },
    /// It may not evict anyone yet.
    InPreemptionDelay { until: i64 },
    /// Its queue holds its fair share already: it waits for free capacity.
    FairShareReached { queue: String, resource: String, fair_share: String, allocated: String, needs: String },
    /// Gangs that could make room have not run their minimum runtime.
    ProtectedByMinRuntime { until: i64 },
}

impl fmt::Display for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Room::Evicting { victims, pods, reason, until } => {
                let names: Vec<String> = victims.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "evicting {pods} pod(s) of {} ({}) to make room; the freed capacity is held for it until {}",
                    names.join(", "),
                    reason.as_str(),
                    at(*until)
                )
            }
            Room::Reserved { until } => {
                write!(f, "waiting for evicted pods to exit; capacity is held for it until {}", at(*until))
            }
            Room::InPreemptionDelay { until } => write!(f, "in its preemption delay until {}", at(*until)),
            Room::FairShareReached { queue, resource, fair_share, allocated, needs } => write!(
                f,
                "queue {queue} has reached its fair share of {fair_share} {resource} ({allocated} allocated, \
                 the gang needs {needs}); it waits for free capacity"
            ),
            Room::ProtectedByMinRuntime { until } => {
                write!(f, "the gangs that could make room are protected by their minimum runtime until {}", at(*until))
            }
        }
    }
}
