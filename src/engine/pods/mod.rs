//! The rules between pods that kube-scheduler's NodePorts, InterPodAffinity and
//! PodTopologySpread filters decide: host ports, required pod affinity and anti-affinity
//! (a pod's own and the bound pods' against it), and hard topology spread constraints.
//! They are counted over the pods bound to each node (`model::BoundPods`, kept between
//! snapshots) and the pods placed during the cycle, a gang's own among them, so that "one
//! worker per node" or "spread evenly over zones" holds for the gang as a whole. This
//! room holds what they are; `place::rules` counts and decides them.

pub mod model;
pub mod rejection;

pub use model::{
    BoundPod, BoundPods, HostPort, Labels, Namespaces, PodKey, PodRules, PodSelector, PodTerm, SpreadRule, WeightedTerm,
};
pub use rejection::PodRejection;
