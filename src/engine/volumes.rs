//! Claims that wait for their first consumer (`WaitForFirstConsumer`), as kube-scheduler's
//! VolumeBinding reads them: where a node may take the pod (a free volume it reaches, or a
//! volume the class can provision there with room for it), and, once the node is chosen,
//! how the claim gets its volume there.

use super::node::{LabelRequirement, Node};

/// Node terms: a node matches one of them, every requirement of it.
pub type NodeTerms = Vec<Vec<LabelRequirement>>;

/// A claim whose StorageClass binds it when its first pod is given a node
/// (`WaitForFirstConsumer`), as that node must allow: a free volume it could be bound to
/// that the node reaches, or a volume its class can provision there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DelayedClaim {
    pub namespace: String,
    pub name: String,
    /// Free volumes that match it, smallest first, each by name with the node terms it
    /// reaches.
    pub volumes: Vec<(String, NodeTerms)>,
    /// Where its class can provision one; None when it cannot (no provisioner, a
    /// selector on the claim).
    pub provision: Option<NodeTerms>,
    /// Where the CSI driver's published capacities leave room for it; None when the
    /// driver tracks none.
    pub room: Option<NodeTerms>,
}

/// How a node gives a delayed claim its volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeChoice {
    /// Bind this free volume to the claim.
    Bind(String),
    /// Name the node on the claim for its provisioner.
    Provision,
}

/// Whether `node` matches one of `terms`.
pub fn reaches(node: &Node, terms: &NodeTerms) -> bool {
    terms.iter().any(|term| term.iter().all(|r| r.matches_node(node)))
}

impl DelayedClaim {
    /// How `node` gives the claim its volume: the smallest free volume it reaches that is
    /// not `taken` (by another claim of the same gang), else provisioning, if the class can
    /// provision there; None when neither.
    pub fn choose(&self, node: &Node, taken: &[String]) -> Option<VolumeChoice> {
        if let Some((name, _)) = self.volumes.iter().find(|(name, terms)| !taken.contains(name) && reaches(node, terms))
        {
            return Some(VolumeChoice::Bind(name.clone()));
        }
        let can = |terms: &Option<NodeTerms>| terms.as_ref().is_some_and(|t| reaches(node, t));
        (can(&self.provision) && (self.room.is_none() || can(&self.room))).then_some(VolumeChoice::Provision)
    }
}
