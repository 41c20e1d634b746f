//! Why the rules between pods keep a pod off a node, in kube-scheduler's words.

use std::fmt;

/// Why a node was refused by the rules between pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodRejection {
    /// A host port the pod asks for is held on the node (NodePorts).
    Ports,
    /// The node's CSI driver would attach more volumes than its limit (NodeVolumeLimits).
    VolumeLimit,
    /// The node lacks a hard spread constraint's topology key (PodTopologySpread).
    SpreadLabel,
    /// Placing the pod there would skew its domain past `maxSkew`.
    Spread,
    /// No pod its required affinity names runs in the node's domain (InterPodAffinity).
    Affinity,
    /// A pod its required anti-affinity names runs in the node's domain.
    AntiAffinity,
    /// A pod in the node's domain has required anti-affinity that names this one.
    ExistingAntiAffinity,
}

impl PodRejection {
    /// Whether a pod placed elsewhere later could lift it (and so a gang refused for it is
    /// tried again rather than left waiting until something is deleted).
    pub fn lifted_by_placements(self) -> bool {
        matches!(self, PodRejection::Spread | PodRejection::Affinity)
    }
}

impl fmt::Display for PodRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PodRejection::Ports => "node(s) didn't have free ports for the requested pod ports",
            PodRejection::VolumeLimit => "node(s) exceed max volume count",
            PodRejection::SpreadLabel => {
                "node(s) didn't match pod topology spread constraints (missing required label)"
            }
            PodRejection::Spread => "node(s) didn't match pod topology spread constraints",
            PodRejection::Affinity => "node(s) didn't match pod affinity rules",
            PodRejection::AntiAffinity => "node(s) didn't match pod anti-affinity rules",
            PodRejection::ExistingAntiAffinity => "node(s) didn't satisfy existing pods anti-affinity rules",
        })
    }
}
