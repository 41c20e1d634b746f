//! Node filters: whether a node can take a pod at all, and if not, why.

use super::model::{Node, NodeConstraints, Taint, TaintEffect};
use super::volumes::reaches;

/// Why a node was rejected before capacity was considered.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StaticRejection {
    /// The node is cordoned (`spec.unschedulable`).
    Unschedulable,
    /// The node does not match the pod's nodeSelector or required node affinity.
    Affinity,
    /// The node has a NoSchedule or NoExecute taint the pod does not tolerate.
    UntoleratedTaint { key: String, value: String },
    /// A volume the pod's claims are bound to cannot be reached from the node.
    VolumeNodeAffinity,
    /// A volume the pod's claims are bound to lies in another zone or region.
    VolumeZone,
    /// A claim waiting for its first consumer can have no volume here: no free volume
    /// reaches the node and its class cannot provision one there.
    VolumeBindConflict,
    /// Its class could provision here, but the driver's capacities leave no room.
    VolumeNoRoom,
}

/// The zone and region labels, beta names first, each with its GA name.
const ZONE_LABELS: [(&str, &str); 4] = [
    ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
    ("topology.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    ("topology.kubernetes.io/region", "topology.kubernetes.io/region"),
];

/// Whether the node is in the zones and regions of the pod's volumes: a node with no zone
/// or region label is; otherwise its value for each key (or the GA key, for a beta one)
/// must be one the volume names.
fn in_volume_zones(node: &Node, zones: &[(String, Vec<String>)]) -> bool {
    if zones.is_empty() || !ZONE_LABELS.iter().any(|(key, _)| node.labels.contains_key(*key)) {
        return true;
    }
    zones.iter().all(|(key, values)| {
        let ga = ZONE_LABELS.iter().find(|(k, _)| k == key).map(|(_, ga)| *ga);
        let value = node.labels.get(key).or_else(|| ga.and_then(|g| node.labels.get(g)));
        value.is_some_and(|v| values.contains(v))
    })
}

/// Whether the node matches the pod's nodeSelector and required node affinity.
pub fn matches_node_affinity(node: &Node, constraints: &NodeConstraints) -> bool {
    constraints.node_selector.iter().all(|(k, v)| node.labels.get(k).is_some_and(|have| have == v))
        && (constraints.affinity_terms.is_empty()
            || constraints.affinity_terms.iter().any(|term| term.iter().all(|r| r.matches_node(node))))
}

/// What a node is preferred by, before kube-scheduler's normalisation: the weights of the
/// pod's preferred node affinity terms it matches (NodeAffinity's score), and its
/// PreferNoSchedule taints the pod does not tolerate (TaintToleration's).
pub fn preference(node: &Node, constraints: &NodeConstraints) -> (i64, i64) {
    let affinity = constraints
        .preferred
        .iter()
        .filter(|(_, term)| !term.is_empty() && term.iter().all(|r| r.matches_node(node)))
        .map(|&(weight, _)| i64::from(weight))
        .sum();
    let taints = node
        .taints
        .iter()
        .filter(|taint| {
            taint.effect == TaintEffect::PreferNoSchedule && !constraints.tolerations.iter().any(|t| t.tolerates(taint))
        })
        .count() as i64;
    (affinity, taints)
}

/// The node's first NoSchedule or NoExecute taint the pod does not tolerate.
pub fn untolerated_taint<'n>(node: &'n Node, constraints: &NodeConstraints) -> Option<&'n Taint> {
    node.taints.iter().find(|taint| {
        taint.effect != TaintEffect::PreferNoSchedule && !constraints.tolerations.iter().any(|t| t.tolerates(taint))
    })
}

/// Checks everything but capacity, in kube-scheduler's order (VolumeBinding's check of
/// bound volumes last).
pub fn check_static(node: &Node, constraints: &NodeConstraints) -> Result<(), StaticRejection> {
    if node.unschedulable {
        // kube-scheduler lets pods that tolerate the unschedulable taint onto cordoned nodes.
        let cordon = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        };
        if !constraints.tolerations.iter().any(|t| t.tolerates(&cordon)) {
            return Err(StaticRejection::Unschedulable);
        }
    }
    if !matches_node_affinity(node, constraints) {
        return Err(StaticRejection::Affinity);
    }
    if let Some(taint) = untolerated_taint(node, constraints) {
        return Err(StaticRejection::UntoleratedTaint { key: taint.key.clone(), value: taint.value.clone() });
    }
    if !constraints.volume_terms.iter().all(|terms| reaches(node, terms)) {
        return Err(StaticRejection::VolumeNodeAffinity);
    }
    if !in_volume_zones(node, &constraints.volume_zones) {
        return Err(StaticRejection::VolumeZone);
    }
    for claim in &constraints.delayed {
        if claim.volumes.iter().any(|(_, terms)| reaches(node, terms)) {
            continue;
        }
        if !claim.provision.as_ref().is_some_and(|terms| reaches(node, terms)) {
            return Err(StaticRejection::VolumeBindConflict);
        }
        if claim.room.as_ref().is_some_and(|terms| !reaches(node, terms)) {
            return Err(StaticRejection::VolumeNoRoom);
        }
    }
    Ok(())
}
