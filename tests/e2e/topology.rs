//! Topology end to end, against the real API server: a gang that requires a rack lands in
//! the rack with room for all of it, waits holding nothing when no rack has room, and a
//! gang that requires a block and prefers a rack spans the fewest racks of one block; and
//! a Kueue Topology object makes rack names repeated across blocks distinct racks.

use k8s_openapi::api::core::v1::Pod;
use muster::api::pod_group::{PodGroup, PodGroupSpec, PodGroupTopology};

use crate::support::builders;
use crate::support::cluster::TEST_LABEL;
use crate::support::wait::{node_of, unschedulable_message, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

/// 4 racks × 2 nodes × 8 GPUs, two racks per block; `used[i]` GPUs on node i are held by
/// a pod of another scheduler, bound there. Returns the node names.
async fn racks(cluster: &TestCluster, used: [u32; 8]) -> Vec<String> {
    let api = cluster.api::<Pod>();
    let mut names = Vec::new();
    for (i, used) in used.iter().enumerate() {
        let rack = format!("r{}", i / 2 + 1);
        let block = if i < 4 { "b1" } else { "b2" };
        let name = cluster.name(&format!("{rack}-n{}", i % 2 + 1));
        let labels = [
            (TEST_LABEL, cluster.id.as_str()),
            ("topology.muster.dev/rack", &rack),
            ("topology.muster.dev/block", block),
        ];
        cluster.create_node(&builders::node(&name, 64, 512, 8, &labels)).await;
        if *used > 0 {
            let busy = format!("busy-{i}");
            cluster.create(&api, &builders::pod(&busy, "someone-else", *used, &[])).await;
            cluster.bind(&busy, &name).await;
        }
        names.push(name);
    }
    names
}

async fn gang(cluster: &TestCluster, pods: usize, required: &str, preferred: Option<&str>) {
    let topology = PodGroupTopology { required: Some(required.into()), preferred: preferred.map(str::to_string) };
    let group = PodGroup::new(
        "train",
        PodGroupSpec { min_member: pods as i32, topology: Some(topology), ..Default::default() },
    );
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let api = cluster.api::<Pod>();
    for i in 0..pods {
        let pod =
            builders::pod(&format!("train-{i}"), &cluster.scheduler_name, 8, &[("muster.dev/pod-group", "train")]);
        cluster.create(&api, &pod).await;
    }
}

fn train(pods: &[Pod]) -> impl Iterator<Item = &Pod> {
    pods.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("train-")))
}

/// Waits until all `pods` of the gang say why they wait; asserts none is bound and returns
/// what they say.
async fn waiting_unbound(cluster: &TestCluster, pods: usize) -> String {
    let all = wait_for_pods(cluster, 60, "the gang marked Unschedulable", |p| {
        train(p).count() == pods && train(p).all(|p| unschedulable_message(p).is_some())
    })
    .await;
    assert!(train(&all).all(|p| node_of(p).is_none()), "nothing of the gang is bound");
    unschedulable_message(train(&all).next().unwrap()).unwrap()
}

/// The racks the gang's pods were bound in.
fn racks_of(cluster: &TestCluster, pods: &[Pod]) -> Vec<String> {
    let prefix = format!("{}-", cluster.id);
    let mut racks: Vec<String> = train(pods)
        .filter_map(node_of)
        .map(|n| n.trim_start_matches(&prefix).split('-').next().unwrap().to_string())
        .collect();
    racks.sort();
    racks.dedup();
    racks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_requires_a_rack_lands_in_the_one_rack_with_room_for_it() {
    let cluster = TestCluster::new("rack-fit").await;
    scheduler::install_crds(&cluster).await;
    // Free per rack: r1 12, r2 16, r3 10, r4 14.
    racks(&cluster, [4, 0, 0, 0, 6, 0, 2, 0]).await;
    gang(&cluster, 2, "rack", None).await;
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let pods =
        wait_for_pods(&cluster, 60, "the gang bound", |p| train(p).filter(|p| node_of(p).is_some()).count() == 2).await;
    assert_eq!(racks_of(&cluster, &pods), ["r2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_holding_nothing_when_no_rack_has_room_though_the_cluster_has() {
    let cluster = TestCluster::new("rack-full").await;
    scheduler::install_crds(&cluster).await;
    // 46 GPUs free, no rack with 16.
    racks(&cluster, [4, 0, 2, 0, 6, 0, 2, 0]).await;
    gang(&cluster, 2, "rack", None).await;
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let message = waiting_unbound(&cluster, 2).await;
    assert_eq!(
        message,
        format!("gang {}/train needs 16 GPUs in one rack; the largest free rack, r2, has 14", cluster.namespace)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_requires_a_block_and_prefers_a_rack_spans_the_fewest_racks_of_one_block() {
    let cluster = TestCluster::new("block").await;
    scheduler::install_crds(&cluster).await;
    // 24 GPUs in 3 pods; no rack holds 24. b1: r1 8 free and r2 16; b2: r3 12 and r4 12.
    racks(&cluster, [0, 8, 0, 0, 2, 2, 2, 2]).await;
    gang(&cluster, 3, "block", Some("rack")).await;
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    let pods =
        wait_for_pods(&cluster, 60, "the gang bound", |p| train(p).filter(|p| node_of(p).is_some()).count() == 3).await;
    assert_eq!(racks_of(&cluster, &pods), ["r1", "r2"], "two racks of block b1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kueue_topology_object_makes_a_rack_name_repeated_in_two_blocks_two_racks() {
    use muster::api::topology::{KueueTopologySpec, Topology, TopologyObjectLevel};
    let cluster = TestCluster::new("tas-topology").await;
    scheduler::install_crds(&cluster).await;
    scheduler::install_topology_crds(&cluster).await;
    // Label keys of this test's own, so the object describes only its nodes.
    let (block, rack) = (format!("{}.e2e.muster.dev/block", cluster.id), format!("{}.e2e.muster.dev/rack", cluster.id));
    let levels = [&block, &rack].map(|l| TopologyObjectLevel { node_label: l.to_string() }).to_vec();
    let topology = Topology::new(&cluster.name("default"), KueueTopologySpec { levels });
    cluster.create(&cluster.cluster_api::<Topology>(), &topology).await;
    // Two blocks of racks r1 and r2; 4 GPUs free in r1 of each block, none in r2.
    let api = cluster.api::<Pod>();
    for (b, r, used) in [("b1", "r1", 4), ("b1", "r2", 8), ("b2", "r1", 4), ("b2", "r2", 8)] {
        let name = cluster.name(&format!("{b}-{r}"));
        let labels = [(TEST_LABEL, cluster.id.as_str()), (block.as_str(), b), (rack.as_str(), r)];
        cluster.create_node(&builders::node(&name, 64, 512, 8, &labels)).await;
        let busy = format!("busy-{b}-{r}");
        cluster.create(&api, &builders::pod(&busy, "someone-else", used, &[])).await;
        cluster.bind(&busy, &name).await;
    }
    // A job of 2 × 4 GPUs that requires one rack, as Kueue's users annotate it.
    let mut group = PodGroup::new("train", PodGroupSpec { min_member: 2, topology: None, ..Default::default() });
    group.metadata.annotations = Some([("kueue.x-k8s.io/podset-required-topology".to_string(), rack.clone())].into());
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    for i in 0..2 {
        let pod =
            builders::pod(&format!("train-{i}"), &cluster.scheduler_name, 4, &[("muster.dev/pod-group", "train")]);
        cluster.create(&api, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(cluster.api());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);
    // Read as one rack, r1 would have the 8 GPUs; as two, neither has.
    let message = waiting_unbound(&cluster, 2).await;
    assert_eq!(
        message,
        format!("gang {}/train needs 8 GPUs in one {rack}; the largest free {rack}, b1/r1, has 4", cluster.namespace)
    );
}
