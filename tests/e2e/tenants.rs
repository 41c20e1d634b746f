//! What one tenant writes costs its own pod and nobody else's: a pod asking for 35,000
//! resources nobody offers (the most the API server stores: it copies limits into requests,
//! and 70,000 names make a 2.9 MB pod, over etcd's default 1.5 MiB; benches/tenants.rs measures
//! 70,000 in-process), and a claim whose constraints force the device search's worst
//! case, each wait saying why in their events while the other pods are bound.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use crate::dra::{create_class, create_node, create_slice, driver, typed};
use crate::support::builders;
use crate::support::wait::{node_of, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

fn bound(pods: &[Pod], name: &str) -> bool {
    pods.iter().any(|p| p.metadata.name.as_deref() == Some(name) && node_of(p).is_some())
}

fn waiting(pods: &[Pod], name: &str) -> bool {
    pods.iter().any(|p| p.metadata.name.as_deref() == Some(name) && node_of(p).is_none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_asking_for_35000_resources_nobody_offers_waits_saying_why_while_others_schedule() {
    let cluster = TestCluster::new("names").await;
    cluster.create_gpu_nodes(1, "r1").await;
    let api = cluster.api::<Pod>();
    let mut greedy = builders::pod("greedy", &cluster.scheduler_name, 0, &[]);
    // About 1.47 MB as stored, under etcd's 1.5 MiB request limit.
    let limits = (0..35_000).map(|i| (format!("e.com/r{i:05}"), Quantity("1".into()))).collect();
    greedy.spec.as_mut().unwrap().containers[0].resources.get_or_insert_default().limits = Some(limits);
    cluster.create(&api, &greedy).await;
    cluster.create(&api, &builders::pod("modest", &cluster.scheduler_name, 1, &[])).await;
    let _kubelet = KubeletEmulator::start(api.clone());
    let _muster = scheduler::start(&cluster, scheduler::config(&cluster), None);

    wait_for_pods(&cluster, 60, "modest bound while greedy waits", |p| bound(p, "modest") && waiting(p, "greedy"))
        .await;
    let events = wait_for_events(&cluster, "greedy", "FailedScheduling").await;
    assert!(events.iter().any(|e| e.contains("no node offers e.com/r00000")), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_forces_the_worst_device_search_waits_naming_the_limit_while_others_schedule() {
    let cluster = TestCluster::new("worst").await;
    let class = create_class(&cluster, None).await;
    for n in 0..3 {
        let node = create_node(&cluster, &format!("n{n}")).await;
        // 32 devices, four on each of eight NUMA nodes.
        let devices = (0..32).map(|d| json!({"name": format!("gpu-{d}"), "attributes": {"numa": {"int": d / 4}}}));
        create_slice(&cluster, &node, devices.collect()).await;
    }
    let claim = |name: &str, requests: usize, constraints: serde_json::Value| -> ResourceClaim {
        let requests: Vec<_> =
            (0..requests).map(|r| json!({"name": format!("r{r}"), "exactly": {"deviceClassName": class}})).collect();
        typed(json!({"metadata": {"name": name},
                     "spec": {"devices": {"requests": requests, "constraints": constraints}}}))
    };
    let claims = cluster.api::<ResourceClaim>();
    // Nine devices on nine distinct NUMA nodes, where each node has eight.
    let numa = format!("{}/numa", driver(&cluster));
    cluster.create(&claims, &claim("worst", 9, json!([{"distinctAttribute": numa}]))).await;
    cluster.create(&claims, &claim("modest", 1, json!([]))).await;
    let api = cluster.api::<Pod>();
    for name in ["worst", "modest"] {
        let mut pod = builders::pod(name, &cluster.scheduler_name, 0, &[]);
        pod.spec.as_mut().unwrap().resource_claims =
            Some(vec![typed(json!({"name": "gpu", "resourceClaimName": name}))]);
        cluster.create(&api, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(api.clone());
    // Two nodes' worth of steps per cycle: the third is searched on a later cycle.
    let mut config = scheduler::config(&cluster);
    config.limits.device_search_steps_per_pod = 2 * config.limits.device_search_steps_per_node;
    let _muster = scheduler::start(&cluster, config, None);

    wait_for_pods(&cluster, 60, "modest bound while worst waits", |p| bound(p, "modest") && waiting(p, "worst")).await;
    let events = wait_for_events(&cluster, "worst", "FailedScheduling").await;
    assert!(events.iter().any(|e| e.contains("limits.deviceSearchSteps")), "{events:?}");
}
