//! What the backfill tests ([`crate::timed_backfill`], [`crate::opportunistic_backfill`])
//! share: the busy four-node cluster and readers of a cycle's outcome.

use muster::engine::CycleOutcome;
use muster::engine::build::{GPU, SnapshotBuilder};
use muster::engine::model::Snapshot;
use muster::engine::reason::WaitReason;

pub fn gpus(n: i64) -> [(&'static str, i64); 2] {
    [(GPU, n), ("cpu", 1000)]
}

pub fn four_nodes() -> SnapshotBuilder {
    let mut builder = SnapshotBuilder::new();
    for node in ["n1", "n2", "n3", "n4"] {
        builder = builder.gpu_node(node, 64, 512, 8, &[]);
    }
    builder
}

/// Four nodes of 8 GPUs at time 0: n1 runs 4 GPUs until 3600, n2 runs 4 until 7200, n3 and
/// n4 run 6 each with no known end. A gang of two 8-GPU pods (`big`) fits only once n1 and
/// n2 are empty: at 7200, holding the 4 free GPUs of each from now.
pub fn busy() -> SnapshotBuilder {
    four_nodes()
        .ending("n1", &gpus(4), 3600)
        .ending("n2", &gpus(4), 7200)
        .used("n3", &[(GPU, 6)])
        .used("n4", &[(GPU, 6)])
        .gang("big", 2, 2, &gpus(8))
}

pub fn reason<'o>(outcome: &'o CycleOutcome, gang: &str) -> Option<&'o WaitReason> {
    outcome.waiting.iter().find(|w| w.gang.name == gang).map(|w| &w.reason)
}

pub fn message(outcome: &CycleOutcome, gang: &str) -> String {
    outcome.waiting.iter().find(|w| w.gang.name == gang).map(|w| w.to_string()).unwrap_or_default()
}

pub fn nodes_of(snapshot: &Snapshot, outcome: &CycleOutcome, gang: &str) -> Vec<String> {
    let placement = outcome.placements.iter().find(|p| p.gang.name == gang);
    placement.map_or_else(Vec::new, |p| p.pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.clone()).collect())
}
