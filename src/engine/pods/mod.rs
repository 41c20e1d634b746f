//! The rules between pods that kube-scheduler's NodePorts, InterPodAffinity and
//! PodTopologySpread filters decide: host ports, required pod affinity and anti-affinity
//! (a pod's own and the bound pods' against it), and hard topology spread constraints.
//! They are counted over the pods bound to each node (`model::BoundPods`, kept between
//! snapshots) and the pods placed during the cycle, a gang's own among them, so that "one
//! worker per node" or "spread evenly over zones" holds for the gang as a whole.

mod index;
pub mod model;
pub mod rejection;
mod tables;
pub(crate) mod work;

pub use model::{BoundPod, BoundPods, HostPort, Labels, Namespaces, PodRules, PodSelector, PodTerm, SpreadRule};
pub use rejection::PodRejection;
#[cfg(test)]
mod tests;
