//! Claims that wait for their first consumer (`WaitForFirstConsumer`), as kube-scheduler's
//! VolumeBinding reads them: where a node may take the pod (a free volume it reaches, or a
//! volume the class can provision there with room for it), and, once the node is chosen,
//! how the claim gets its volume there ([`plan`]).

use super::node::{LabelRequirement, Node};
use super::pods::PodKey;

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

/// One delayed claim given a node: how it gets its volume there, or why it cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeWrite {
    /// The pod whose node the claim was given.
    pub pod: PodKey,
    pub namespace: String,
    pub claim: String,
    pub node: String,
    pub choice: Result<VolumeChoice, VolumeConflict>,
}

/// Why a delayed claim cannot have its volume where its pod was placed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeConflict {
    #[error(
        "PersistentVolumeClaim {namespace}/{claim} is used by pods placed on {first} and {second}; it can have a volume on one node only"
    )]
    Shared { namespace: String, claim: String, first: String, second: String },
    #[error(
        "PersistentVolumeClaim {namespace}/{claim} can have no volume on node {node}: node(s) didn't find available persistent volumes to bind"
    )]
    NoVolume { namespace: String, claim: String, node: String },
}

impl VolumeWrite {
    pub fn object(&self) -> String {
        format!("PersistentVolumeClaim {}/{}", self.namespace, self.claim)
    }
}

/// The volume writes of a placed gang: each delayed claim of each pod, given the pod's node,
/// a free volume not already `taken` (by another claim of the gang, or of a gang placed
/// before it in the same cycle: the engine counts no volumes, so two gangs may have counted
/// on the same one), or provisioning. A claim two pods on different nodes share cannot
/// follow both: the second says so. A plan with a claim that cannot be served fails its
/// gang's binding before anything is written, and the next cycle sees the volume taken.
pub fn plan<'a>(
    placed: impl IntoIterator<Item = (&'a PodKey, &'a [DelayedClaim], &'a Node)>,
    taken: &mut Vec<String>,
) -> Vec<VolumeWrite> {
    let mut writes: Vec<VolumeWrite> = Vec::new();
    for (pod, claims, node) in placed {
        for claim in claims {
            let same = |w: &&VolumeWrite| w.namespace == claim.namespace && w.claim == claim.name;
            if let Some(first) = writes.iter().find(same) {
                if first.node != node.name {
                    let why = VolumeConflict::Shared {
                        namespace: claim.namespace.clone(),
                        claim: claim.name.clone(),
                        first: first.node.clone(),
                        second: node.name.clone(),
                    };
                    writes.push(VolumeWrite { choice: Err(why), ..first.clone() });
                }
                continue;
            }
            let choice = claim.choose(node, taken).ok_or_else(|| VolumeConflict::NoVolume {
                namespace: claim.namespace.clone(),
                claim: claim.name.clone(),
                node: node.name.clone(),
            });
            if let Ok(VolumeChoice::Bind(volume)) = &choice {
                taken.push(volume.clone());
            }
            writes.push(VolumeWrite {
                pod: pod.clone(),
                namespace: claim.namespace.clone(),
                claim: claim.name.clone(),
                node: node.name.clone(),
                choice,
            });
        }
    }
    writes
}
