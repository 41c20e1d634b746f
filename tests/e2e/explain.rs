//! `muster explain` against a live cluster: the same reason the scheduler's events give,
//! and the nearest placement, for a pod and for its PodGroup, named any way kubectl would.

use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use muster::api::pod_group::{PodGroup, PodGroupSpec, PodGroupTopology};

use crate::support::wait::{unschedulable_message, wait_for_pods};
use crate::support::{TestCluster, builders, muster as scheduler};

/// Runs the `muster` binary's `explain` with the test's kubeconfig and configuration.
fn explain(cluster: &TestCluster, config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("explain")
        .args(args)
        .args(["-n", &cluster.namespace])
        .arg(format!("--kubeconfig={}", cluster.control_plane.kubeconfig.display()))
        .arg(format!("--config={}", config.display()))
        .output()
        .expect("run muster explain");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_why_a_rack_gang_waits_and_which_rack_comes_nearest() {
    let cluster = TestCluster::new("explain").await;
    scheduler::install_crds(&cluster).await;
    let r1 = cluster.create_gpu_nodes(2, "r1").await;
    let r2 = cluster.create_gpu_nodes(2, "r2").await;
    // Another scheduler's pods hold 2 GPUs in r1 and 4 in r2: r1 has 14 free, r2 12.
    let other = format!("other-{}", cluster.id);
    let pods = cluster.api::<Pod>();
    for (name, gpus, node) in [("busy-a", 2, &r1[0]), ("busy-b", 4, &r2[0])] {
        cluster.create(&pods, &builders::pod(name, &other, gpus, &[])).await;
        cluster.bind(name, node).await;
    }
    let spec = PodGroupSpec {
        min_member: 2,
        topology: Some(PodGroupTopology { required: Some("rack".into()), preferred: None }),
        ..Default::default()
    };
    cluster.create(&cluster.api::<PodGroup>(), &PodGroup::new("big", spec)).await;
    for i in 0..2 {
        let pod = builders::pod(&format!("big-{i}"), &cluster.scheduler_name, 8, &[("muster.dev/pod-group", "big")]);
        cluster.create(&pods, &pod).await;
    }
    let config = scheduler::config(&cluster);
    let _muster = scheduler::start(&cluster, config.clone(), None);
    let waiting = wait_for_pods(&cluster, 30, "the gang marked Unschedulable", |all| {
        all.iter().filter(|p| unschedulable_message(p).is_some()).count() == 2
    })
    .await;
    let event_reason = waiting.iter().find_map(unschedulable_message).expect("a reason");

    let file = cluster.control_plane.dir.join(format!("explain-{}.yaml", cluster.id));
    std::fs::write(&file, yaml_serde::to_string(&config).expect("config as YAML")).expect("write the configuration");
    for args in [&["podgroup", "big"][..], &["podgroups.muster.dev", "big"], &["mpg", "big"], &["pod", "big-0"]] {
        let (ok, out, err) = explain(&cluster, &file, args);
        assert!(ok, "muster explain {args:?} failed: {err}");
        assert!(
            out.contains(&event_reason),
            "explain {args:?} does not give the event's reason {event_reason:?}:\n{out}"
        );
        assert!(out.contains("rack r1 has 14 of the 16 GPUs needed"), "explain {args:?}:\n{out}");
        assert!(
            out.contains("0 of 2 minMember pods bound") || out.contains("0 of its 2 minMember pods bound"),
            "{out}"
        );
    }

    // A pod of another scheduler, and names that do not exist, are said plainly.
    let (ok, out, _) = explain(&cluster, &file, &["pod", "busy-a"]);
    assert!(ok && out.contains("is not Muster's"), "{out}");
    let (ok, _, err) = explain(&cluster, &file, &["podgroup", "nope"]);
    assert!(!ok && err.contains(&format!("podgroup {}/nope not found", cluster.namespace)), "{err}");
    let (ok, _, err) = explain(&cluster, &file, &["podgroups.example.com", "big"]);
    assert!(!ok && err.contains("unknown resource"), "{err}");
}
