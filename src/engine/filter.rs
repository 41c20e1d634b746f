//! Node filters: whether a node can take a pod at all, and if not, why.

use super::model::{Node, NodeConstraints, Taint, TaintEffect};

/// Why a node was rejected before capacity was considered.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StaticRejection {
    /// The node is cordoned (`spec.unschedulable`).
    Unschedulable,
    /// The node does not match the pod's nodeSelector or required node affinity.
    Affinity,
    /// The node has a NoSchedule or NoExecute taint the pod does not tolerate.
    UntoleratedTaint { key: String, value: String },
}

/// Checks everything but capacity, in kube-scheduler's order.
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
    let selector_ok = constraints.node_selector.iter().all(|(k, v)| node.labels.get(k).is_some_and(|have| have == v));
    let affinity_ok = constraints.affinity_terms.is_empty()
        || constraints.affinity_terms.iter().any(|term| term.iter().all(|r| r.matches_node(node)));
    if !selector_ok || !affinity_ok {
        return Err(StaticRejection::Affinity);
    }
    if let Some(taint) = node.taints.iter().find(|taint| {
        taint.effect != TaintEffect::PreferNoSchedule && !constraints.tolerations.iter().any(|t| t.tolerates(taint))
    }) {
        return Err(StaticRejection::UntoleratedTaint { key: taint.key.clone(), value: taint.value.clone() });
    }
    Ok(())
}
