//! The engine's memory between cycles (`schedule_remembering`): free capacity kept from one
//! cycle to the next gives exactly the outcomes of a cycle made afresh.

use std::sync::Arc;

use muster::engine::build::{GPU, SnapshotBuilder};
use muster::engine::model::Snapshot;
use muster::engine::{CycleConfig, CycleMemory, Queueing, schedule, schedule_remembering};

fn cluster() -> Snapshot {
    let mut builder = SnapshotBuilder::new();
    for i in 0..8 {
        let rack = format!("r{}", i / 4);
        let labels = [("topology.muster.dev/rack", rack.as_str())];
        builder = builder.gpu_node(&format!("n{i}"), 64, 512, 8, &labels);
    }
    for (i, (pods, gpus)) in [(2, 8), (1, 4), (4, 2), (3, 8), (1, 1), (8, 1)].into_iter().enumerate() {
        builder = builder.gang(&format!("g{i}"), pods, pods, &[("cpu", 1000), (GPU, gpus)]);
        if pods > 1 {
            builder = builder.with_topology(Some("rack"), None);
        }
    }
    builder.build()
}

/// The fresh cluster's gangs, renamed for `step`.
fn more(fresh: &Snapshot, step: usize) -> Vec<muster::engine::model::Gang> {
    let mut gangs = fresh.gangs.clone();
    for gang in &mut gangs {
        gang.key.name = format!("{}-{step}", gang.key.name);
        for pod in &mut gang.pods {
            pod.key.name = format!("{}-{step}", pod.key.name);
        }
    }
    gangs
}

/// Binds what `outcome` placed into the snapshot's nodes and drops the gangs placed.
fn bind(snapshot: &mut Snapshot, outcome: &muster::engine::CycleOutcome) {
    for placement in &outcome.placements {
        let gang = snapshot.gangs.iter().find(|g| g.key == placement.gang).unwrap().clone();
        for (key, node) in &placement.pods {
            let pod = gang.pods.iter().find(|p| &p.key == key).unwrap();
            Arc::make_mut(&mut snapshot.nodes)[*node as usize].requested.add(&pod.demand, 1);
        }
        snapshot.gangs.retain(|g| g.key != placement.gang);
    }
}

#[test]
fn kept_capacity_gives_the_outcomes_of_a_fresh_cycle_as_the_cluster_changes() {
    for queueing in [Queueing::Backfill, Queueing::BestEffortFifo, Queueing::TimedBackfill] {
        let config = CycleConfig { queueing, reserve_after_seconds: 0, ..Default::default() };
        let mut memory = CycleMemory::default();
        let mut snapshot = cluster();
        let fresh = cluster();
        for step in 0..5 {
            let remembered = schedule_remembering(&snapshot, &config, &mut memory);
            assert_eq!(remembered, schedule(&snapshot, &config), "{queueing:?}, step {step}");
            bind(&mut snapshot, &remembered);
            match step {
                // Pods end: a node's requests go.
                0 => Arc::make_mut(&mut snapshot.nodes)[0].requested = Default::default(),
                // More gangs arrive.
                1 => snapshot.gangs.extend(more(&fresh, step)),
                // A node shrinks.
                2 => {
                    let gpu = snapshot.resources.get(GPU).unwrap();
                    Arc::make_mut(&mut snapshot.nodes)[5].allocatable.set(gpu, 4);
                }
                // A node joins: everything is made again.
                _ => {
                    let mut node = snapshot.nodes[7].clone();
                    node.name = format!("extra-{step}");
                    node.requested = Default::default();
                    Arc::make_mut(&mut snapshot.nodes).push(node);
                    let topology =
                        muster::engine::topology::TopologyTree::new(muster::engine::topology::default_levels());
                    let mut tree = topology;
                    tree.update(&snapshot.nodes);
                    snapshot.topology = tree.index(&snapshot.nodes);
                    snapshot.gangs.extend(more(&fresh, step));
                }
            }
        }
        assert_eq!(memory.capacity.rebuilds, 2, "made from scratch at first and once a node joined");
    }
}
