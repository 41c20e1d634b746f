//! The rules between pods that kube-scheduler's NodePorts, NodeVolumeLimits,
//! InterPodAffinity and PodTopologySpread plugins decide and score: host ports, the volumes
//! pods' claims attach (against each node's CSI limits), pod affinity and anti-affinity
//! (required and preferred; a pod's own and the bound pods' towards it), and topology
//! spread (hard and `ScheduleAnyway`). They are counted over the pods bound to each node
//! (`model::BoundPods`, kept between snapshots) and the pods placed during the cycle, a
//! gang's own among them, so that "one worker per node" or "spread evenly over zones" holds
//! for the gang as a whole. This room holds what they are; `place::rules` counts, decides
//! and scores them.

pub mod model;
pub mod rejection;

pub use model::{
    Attachment, BoundPod, BoundPods, HostPort, Labels, Namespaces, PodKey, PodRules, PodSelector, PodTerm, SpreadRule,
    VolumeLimits, WeightedTerm,
};
pub use rejection::PodRejection;
