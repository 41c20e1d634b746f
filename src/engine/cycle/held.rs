//! Reservations from earlier cycles, served before anything else, and the reservation a
//! cycle makes for a gang that evictions were made for.

use super::{CycleOutcome, Placement};
use crate::engine::admission::QueueState;
use crate::engine::admission::order::Picker;
use crate::engine::model::{Gang, NodeIdx, PodKey, Reservation, Snapshot};
use crate::engine::place::{GangFit, Workspace};
use crate::engine::preempt::Room;
use crate::engine::reason::{WaitReason, Waiting};

/// The reservation for a gang that evictions were made for: the nodes of its trial.
pub(super) fn reservation(snapshot: &Snapshot, gang: &Gang, fit: &GangFit, until: i64) -> Reservation {
    let pods: Vec<(PodKey, String)> =
        fit.pods.iter().map(|&(p, n)| (gang.pods[p].key.clone(), snapshot.nodes[n as usize].name.clone())).collect();
    let mut nodes: Vec<String> = pods.iter().map(|(_, n)| n.clone()).collect();
    nodes.sort();
    nodes.dedup();
    Reservation { gang: gang.key.clone(), nodes, pods, until }
}

/// The gang's pods of a reservation, each pinned to its node (by `metadata.name`, as a
/// node affinity's matchFields).
fn pinned(gang: &Gang, pods: &[(PodKey, String)]) -> Gang {
    use crate::engine::model::{LabelRequirement, NodeConstraints, SelectorOperator};
    let mut copy = gang.clone();
    copy.pods = pods
        .iter()
        .filter_map(|(key, node)| {
            let mut pod = gang.pods.iter().find(|p| &p.key == key)?.clone();
            let requirement = LabelRequirement {
                key: "metadata.name".into(),
                operator: SelectorOperator::In,
                values: vec![node.clone()],
            };
            let mut constraints = NodeConstraints::clone(&pod.constraints);
            if constraints.affinity_terms.is_empty() {
                constraints.affinity_terms.push(Vec::new());
            }
            for term in &mut constraints.affinity_terms {
                term.push(requirement.clone());
            }
            pod.constraints = std::sync::Arc::new(constraints);
            Some(pod)
        })
        .collect();
    copy
}

/// Serves reservations from earlier cycles before anything else: a gang holding one is
/// placed if it fits now; otherwise it keeps its nodes (hidden from every other gang) and
/// counts as holding what it needs in its queue, and waits for the evicted pods to go. A
/// lapsed reservation, or one whose gang is gone, is dropped. Returns the gangs served.
pub(super) fn hold_reservations(
    snapshot: &Snapshot,
    workspace: &mut Workspace<'_>,
    queues: &mut QueueState,
    picker: &Picker,
    outcome: &mut CycleOutcome,
) -> Vec<usize> {
    let mut served = Vec::new();
    if snapshot.reservations.is_empty() {
        return served;
    }
    let tree = &snapshot.queues;
    let mut keep: Vec<NodeIdx> = Vec::new();
    for held in &snapshot.reservations {
        if held.until <= snapshot.now {
            continue;
        }
        let Some(index) = snapshot.gangs.iter().position(|g| g.key == held.gang) else { continue };
        let gang = &snapshot.gangs[index];
        let Some(leaf) = picker.leaf(index) else { continue };
        if gang.pods.is_empty() || gang.blocked.is_some() {
            continue;
        }
        served.push(index);
        // Exactly where its trial put it: what was freed there is its own.
        let nodes: Vec<NodeIdx> = held
            .nodes
            .iter()
            .filter_map(|name| snapshot.nodes.iter().position(|node| &node.name == name))
            .map(|n| n as NodeIdx)
            .collect();
        // The fit's pod indices are the pinned copy's: keys and charges come from it.
        let pinned = pinned(gang, &held.pods);
        match workspace.place(&pinned) {
            Ok(fit) => outcome.placements.push(placed(queues, snapshot, leaf, &pinned, fit)),
            Err(shortfall) => {
                if !tree.keys.is_empty() {
                    queues.charge(tree, leaf, picker.need_now(index), !gang.preemptible);
                }
                keep.extend(nodes);
                let shortfall =
                    WaitReason::DoesNotFit { nodes: shortfall.nodes, needed: shortfall.needed, fit: shortfall.fit };
                outcome.waiting.push(Waiting {
                    gang: gang.key.clone(),
                    reason: WaitReason::Room {
                        shortfall: Box::new(shortfall),
                        room: Room::Reserved { until: held.until },
                    },
                });
                outcome.reservations.push(held.clone());
            }
        }
    }
    for n in keep {
        workspace.set_reserved(n, true);
    }
    served
}

/// A gang placed: its pods charged to its queue, and the placement for the outcome.
/// `fit`'s pod indices are into `gang.pods`.
pub(super) fn placed(
    queues: &mut QueueState,
    snapshot: &Snapshot,
    leaf: usize,
    gang: &Gang,
    fit: GangFit,
) -> Placement {
    queues.charge_placed(&snapshot.queues, &snapshot.dra, leaf, gang, &fit.pods, &fit.claims);
    Placement {
        gang: gang.key.clone(),
        pods: Workspace::keys(gang, &fit.pods),
        claims: fit.claims,
        opportunistic: None,
    }
}
