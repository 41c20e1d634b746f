//! Topology-aware gang placement in the engine: racks, blocks, best fit, the fewest racks,
//! and the reason a gang waits for a domain.

use muster::engine::build::{GPU, SnapshotBuilder};
use muster::engine::model::Snapshot;
use muster::engine::topology::DomainChoice;
use muster::engine::{CycleConfig, schedule};

const RACK: &str = "topology.muster.dev/rack";
const BLOCK: &str = "topology.muster.dev/block";

/// 4 racks × 2 nodes × 8 GPUs, two racks per block (b1: r1 r2, b2: r3 r4); `used[i]` GPUs
/// are taken on node i (rack i / 2).
fn cluster(used: [i64; 8]) -> SnapshotBuilder {
    let mut b = SnapshotBuilder::new();
    for (i, used) in used.iter().enumerate() {
        let rack = format!("r{}", i / 2 + 1);
        let block = if i < 4 { "b1" } else { "b2" };
        let name = format!("{rack}-n{}", i % 2 + 1);
        b = b.gpu_node(&name, 64, 512, 8, &[(RACK, &rack), (BLOCK, block), ("kubernetes.io/hostname", &name)]);
        if *used > 0 {
            b = b.used(&name, &[(GPU, *used)]);
        }
    }
    b
}

fn gpus(n: i64) -> [(&'static str, i64); 2] {
    [(GPU, n), ("cpu", 1000)]
}

/// The racks (as node name prefixes) the gang's pods landed in, or why it waits.
fn outcome(snapshot: &Snapshot, config: CycleConfig) -> Result<Vec<String>, String> {
    let outcome = schedule(snapshot, &config);
    if let Some(w) = outcome.waiting.first() {
        return Err(w.to_string());
    }
    let mut nodes: Vec<String> =
        outcome.placements[0].pods.iter().map(|(_, n)| snapshot.nodes[*n as usize].name.clone()).collect();
    nodes.sort();
    Ok(nodes)
}

fn racks(nodes: &[String]) -> Vec<&str> {
    let mut racks: Vec<&str> = nodes.iter().map(|n| n.split('-').next().unwrap()).collect();
    racks.dedup();
    racks
}

#[test]
fn a_gang_that_requires_a_rack_lands_in_the_rack_with_room_for_all_of_it() {
    // Free GPUs per rack: r1 12, r2 16, r3 10, r4 14 (52 in all).
    let snapshot =
        cluster([4, 0, 0, 0, 6, 0, 2, 0]).gang("big", 2, 2, &gpus(8)).with_topology(Some("rack"), None).build();
    let nodes = outcome(&snapshot, CycleConfig::default()).unwrap();
    assert_eq!(nodes, ["r2-n1", "r2-n2"]);
}

#[test]
fn when_no_rack_has_room_the_gang_waits_holding_nothing_and_says_how_close_it_came() {
    // 46 GPUs free in all, but no rack has 16.
    let snapshot = cluster([4, 0, 2, 0, 6, 0, 2, 0])
        .gang("big", 2, 2, &gpus(8))
        .with_topology(Some("rack"), None)
        .gang("small", 1, 1, &gpus(2))
        .build();
    let outcome = schedule(&snapshot, &CycleConfig::default());
    assert_eq!(outcome.placements.len(), 1, "only the small pod is placed");
    assert_eq!(outcome.placements[0].gang.name, "small");
    let reason = outcome.waiting[0].to_string();
    assert_eq!(reason, "gang default/big needs 16 GPUs in one rack; the largest free rack, r2, has 14");
}

#[test]
fn a_gang_that_requires_a_block_and_prefers_a_rack_spans_the_fewest_racks_of_one_block() {
    // 24 GPUs in 3 pods: no rack has 24 (at most 16), so one block, in as few racks as
    // possible. b1 has r1 8 free and r2 16 free; b2 has r3 12 and r4 12: b1's two racks.
    let snapshot = cluster([0, 8, 0, 0, 2, 2, 2, 2])
        .gang("wide", 3, 3, &gpus(8))
        .with_topology(Some("block"), Some("rack"))
        .build();
    let nodes = outcome(&snapshot, CycleConfig::default()).unwrap();
    assert_eq!(racks(&nodes), ["r1", "r2"], "{nodes:?}");

    // When one rack can hold it, it stays in that rack.
    let snapshot = cluster([0, 8, 0, 0, 2, 2, 2, 2])
        .gang("narrow", 2, 2, &gpus(8))
        .with_topology(Some("block"), Some("rack"))
        .build();
    assert_eq!(racks(&outcome(&snapshot, CycleConfig::default()).unwrap()), ["r2"]);
}

#[test]
fn a_preferred_rack_without_a_requirement_widens_to_the_block_and_then_the_cluster() {
    // 40 GPUs: no block has 40 free (b1 32, b2 28), so the whole cluster, freest racks first.
    let snapshot =
        cluster([0, 0, 0, 0, 0, 0, 2, 2]).gang("huge", 5, 5, &gpus(8)).with_topology(None, Some("rack")).build();
    let nodes = outcome(&snapshot, CycleConfig::default()).unwrap();
    assert_eq!(nodes.len(), 5);
    assert_eq!(racks(&nodes)[..2], ["r1", "r2"], "the free racks are filled before the used ones: {nodes:?}");
}

#[test]
fn best_fit_takes_the_fullest_rack_that_fits_and_first_fit_the_first() {
    // One 8-GPU pod that requires a rack: r1 and r3 are empty, r2 has 8 free of 16.
    let snapshot =
        cluster([8, 0, 0, 0, 0, 0, 0, 0]).gang("one", 1, 1, &gpus(8)).with_topology(Some("rack"), None).build();
    assert_eq!(
        racks(&outcome(&snapshot, CycleConfig::default()).unwrap()),
        ["r1"],
        "r1 has the least room left that fits"
    );
    let snapshot =
        cluster([0, 0, 8, 0, 0, 0, 0, 0]).gang("one", 1, 1, &gpus(8)).with_topology(Some("rack"), None).build();
    assert_eq!(racks(&outcome(&snapshot, CycleConfig::default()).unwrap()), ["r2"]);
    let first_fit = CycleConfig { domain_choice: DomainChoice::FirstFit, ..CycleConfig::default() };
    assert_eq!(racks(&outcome(&snapshot, first_fit).unwrap()), ["r1"]);
}

#[test]
fn a_level_named_by_its_node_label_or_by_any_label_key_works_like_a_configured_one() {
    let snapshot =
        cluster([4, 0, 0, 0, 6, 0, 2, 0]).gang("big", 2, 2, &gpus(8)).with_topology(Some(RACK), None).build();
    assert_eq!(outcome(&snapshot, CycleConfig::default()).unwrap(), ["r2-n1", "r2-n2"]);
    // An ad-hoc key: the nodes' own label values are its domains.
    let snapshot = cluster([0; 8])
        .with_last_node(|n| {
            drop(std::sync::Arc::make_mut(&mut n.labels).insert("example.com/island".into(), "east".into()))
        })
        .gang("island", 1, 1, &gpus(8))
        .with_topology(Some("example.com/island"), None)
        .build();
    assert_eq!(outcome(&snapshot, CycleConfig::default()).unwrap(), ["r4-n2"]);
}

#[test]
fn a_gang_larger_than_any_rack_can_ever_be_never_reserves_one() {
    let snapshot = cluster([0; 8]).gang("giant", 3, 3, &gpus(8)).with_topology(Some("rack"), None).build();
    let outcome = schedule(&snapshot, &CycleConfig { reserve_after_seconds: 0, ..CycleConfig::default() });
    match &outcome.waiting[0].reason {
        muster::engine::reason::WaitReason::Topology { never_fits, message } => {
            assert!(never_fits, "{message}");
            assert!(message.contains("needs 24 GPUs in one rack; the largest free rack, r1, has 16"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_topology_tree_follows_node_changes_one_node_at_a_time() {
    use muster::engine::topology::{TopologyTree, default_levels};
    let nodes = |spec: &[(&str, &str, &str)]| -> Vec<muster::engine::model::Node> {
        let mut b = SnapshotBuilder::new();
        for (name, rack, block) in spec {
            b = b.gpu_node(name, 8, 64, 8, &[(RACK, rack), (BLOCK, block), ("kubernetes.io/hostname", name)]);
        }
        b.build().nodes.to_vec()
    };
    let mut tree = TopologyTree::new(default_levels());
    let first = nodes(&[("a", "r1", "b1"), ("b", "r1", "b1"), ("c", "r2", "b1"), ("d", "r3", "b2")]);
    assert_eq!(tree.update(&first), 4);
    assert_eq!(tree.update(&first), 0, "nothing changed, nothing is touched");
    let index = tree.index(&first);
    let rack = index.levels.iter().position(|l| l.name == "rack").unwrap();
    let block = index.levels.iter().position(|l| l.name == "block").unwrap();
    let values = |level: usize, index: &muster::engine::topology::DomainIndex| -> Vec<(String, Vec<u32>)> {
        index.levels[level].domains.iter().map(|d| (d.value.clone(), d.nodes.clone())).collect()
    };
    assert_eq!(values(rack, &index), [("r1".into(), vec![0, 1]), ("r2".into(), vec![2]), ("r3".into(), vec![3])]);
    let r3 = &index.levels[rack].domains[2];
    assert_eq!(index.levels[block].domains[r3.parent.unwrap() as usize].value, "b2");

    // c moves to r3; d goes away: r2 is pruned, r3 keeps c, b2 keeps r3.
    let second = nodes(&[("a", "r1", "b1"), ("b", "r1", "b1"), ("c", "r3", "b2")]);
    assert_eq!(tree.update(&second), 2, "one node moved, one removed");
    let index = tree.index(&second);
    assert_eq!(values(rack, &index), [("r1".into(), vec![0, 1]), ("r3".into(), vec![2])]);
    assert_eq!(values(block, &index), [("b1".into(), vec![0, 1]), ("b2".into(), vec![2])]);
}

/// Kueue's own example topology: rack names r1 and r2 in both blocks, 2 nodes of 8 GPUs
/// each; the nodes named in `full` have all their GPUs in use.
fn repeated_rack_names(full: &[&str]) -> SnapshotBuilder {
    let mut b = SnapshotBuilder::new();
    for (i, block) in ["b1", "b1", "b1", "b1", "b2", "b2", "b2", "b2"].iter().enumerate() {
        let rack = if i % 4 < 2 { "r1" } else { "r2" };
        let name = format!("{block}-{rack}-n{}", i % 2 + 1);
        b = b.gpu_node(&name, 64, 512, 8, &[(RACK, rack), (BLOCK, block), ("kubernetes.io/hostname", &name)]);
        if full.contains(&name.as_str()) {
            b = b.used(&name, &[(GPU, 8)]);
        }
    }
    b
}

#[test]
fn racks_of_the_same_name_in_two_blocks_are_two_racks() {
    // Rack r1 summed across both blocks has 32 GPUs; each real rack has 16.
    let snapshot = repeated_rack_names(&[]).gang("big", 3, 3, &gpus(8)).with_topology(Some("rack"), None).build();
    let why = outcome(&snapshot, CycleConfig::default()).unwrap_err();
    assert!(why.contains("needs 24 GPUs in one rack") && why.contains("/r1, has 16"), "{why}");
    // One node of each r1 full: r1 summed across blocks has two free nodes, the fullest
    // "rack" that fits a pair; each real r1 has one. The pair goes to one real rack.
    let snapshot = repeated_rack_names(&["b1-r1-n2", "b2-r1-n1"])
        .gang("pair", 2, 2, &gpus(8))
        .with_topology(Some("rack"), None)
        .build();
    let nodes = outcome(&snapshot, CycleConfig::default()).unwrap();
    let racks: Vec<&str> = nodes.iter().map(|n| &n[..5]).collect();
    assert_eq!(racks[0], racks[1], "{nodes:?}");
}
