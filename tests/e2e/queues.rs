//! Team queues end to end, against the real API server: a team that lent its idle GPUs
//! gets them back, with Muster's own Queues, KAI Scheduler's, or Kueue's ClusterQueues and
//! LocalQueues (their CRDs from the project's minimal definitions). The lender's newest gang is evicted whole through the Eviction API, its
//! Job recreates the pods, the owner's gang binds on the freed GPUs, and the lender's new
//! pods wait, saying the queue has reached its fair share.
//!
//! Queues are cluster-scoped: each test names its own (after its id), so that tests running
//! beside it see queues that hold none of their gangs.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use muster::api::kai::Queue as KaiQueue;
use muster::api::kueue::{ClusterQueue, LocalQueue};
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::api::queue::Queue;
use muster::config::QueueImport;
use serde_json::json;

use crate::support::builders;
use crate::support::cluster::TEST_LABEL;
use crate::support::gangs::{GROUP_LABEL, in_group, job};
use crate::support::wait::{node_of, phase, unschedulable_message, wait_for_events, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, muster as scheduler};

/// Where a test's queues come from: Muster's own Queue, KAI Scheduler's, or Kueue's
/// ClusterQueues with LocalQueues (imported by the configuration).
#[derive(Clone, Copy, PartialEq)]
enum Source {
    Muster,
    Kai,
    Kueue,
}

/// A team's queue: how its gangs name it, and its name in Muster's reasons.
struct Team {
    shown: String,
    /// Set on its PodGroups (Muster's queue).
    group_queue: Option<String>,
    /// Set on its pods (KAI's and Kueue's).
    label: Option<(&'static str, String)>,
}

async fn create_team(cluster: &TestCluster, source: Source, team: &str, gpus: u32) -> Team {
    let name = cluster.name(team);
    match source {
        Source::Muster => {
            let queue: Queue = serde_json::from_value(json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name},
                "spec": {"resources": {"nvidia.com/gpu": {"quota": gpus.to_string()}}},
            }))
            .expect("queue");
            cluster.create(&cluster.cluster_api::<Queue>(), &queue).await;
            Team { shown: name.clone(), group_queue: Some(name), label: None }
        }
        Source::Kai => {
            let queue: KaiQueue = serde_json::from_value(json!({
                "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                "spec": {"resources": {"gpu": {"quota": gpus, "limit": -1, "overQuotaWeight": 1}}},
            }))
            .expect("KAI queue");
            cluster.create(&cluster.cluster_api::<KaiQueue>(), &queue).await;
            Team { shown: name.clone(), group_queue: None, label: Some(("kai.scheduler/queue", name)) }
        }
        Source::Kueue => {
            let queue: ClusterQueue = serde_json::from_value(json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                "spec": {
                    "cohortName": cluster.name("research"),
                    "namespaceSelector": {},
                    "preemption": {"reclaimWithinCohort": "Any"},
                    "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{
                        "name": "default-flavor",
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                    }]}],
                },
            }))
            .expect("ClusterQueue");
            cluster.create(&cluster.cluster_api::<ClusterQueue>(), &queue).await;
            let local: LocalQueue = serde_json::from_value(json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": team},
                "spec": {"clusterQueue": name},
            }))
            .expect("LocalQueue");
            cluster.create(&cluster.api::<LocalQueue>(), &local).await;
            Team {
                shown: format!("kueue/{name}"),
                group_queue: None,
                label: Some(("kueue.x-k8s.io/queue-name", team.to_string())),
            }
        }
    }
}

async fn delete_team(cluster: &TestCluster, source: Source, team: &str) {
    let name = cluster.name(team);
    let dp = DeleteParams::default();
    let _ = match source {
        Source::Muster => cluster.cluster_api::<Queue>().delete(&name, &dp).await.map(|_| ()),
        Source::Kai => cluster.cluster_api::<KaiQueue>().delete(&name, &dp).await.map(|_| ()),
        Source::Kueue => cluster.cluster_api::<ClusterQueue>().delete(&name, &dp).await.map(|_| ()),
    };
}

async fn create_queued_group(cluster: &TestCluster, name: &str, min_member: i32, team: &Team) {
    let spec = PodGroupSpec { min_member, queue: team.group_queue.clone(), ..Default::default() };
    cluster.create(&cluster.api::<PodGroup>(), &PodGroup::new(name, spec)).await;
}

fn running(all: &[Pod], group: &str) -> usize {
    in_group(all, group).iter().filter(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_gets_its_lent_gpus_back_and_the_lenders_newest_gang_is_evicted_whole() {
    reclaim(Source::Muster, "reclaim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_kai_schedulers_queue_objects() {
    reclaim(Source::Kai, "reclaim-kai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_kueues_cluster_queues_and_local_queues() {
    reclaim(Source::Kueue, "reclaim-kueue").await;
}

/// Two teams with quotas of 8 GPUs each on 16 GPUs, their queues from `source`.
async fn reclaim(source: Source, test: &str) {
    let cluster = TestCluster::new(test).await;
    scheduler::install_crds(&cluster).await;
    scheduler::install_foreign_queue_crds(&cluster).await;
    for name in ["n1", "n2"] {
        let node = builders::node(&cluster.name(name), 32, 256, 8, &[(TEST_LABEL, &cluster.id)]);
        cluster.create_node(&node).await;
    }
    let team_a = create_team(&cluster, source, "team-a", 8).await;
    let team_b = create_team(&cluster, source, "team-b", 8).await;
    let api = cluster.api::<Pod>();
    let jobs = cluster.api::<Job>();
    let kubelet = KubeletEmulator::start(api.clone());
    cluster.control_plane.start_controller_manager();
    let mut config = scheduler::config(&cluster);
    config.queues.import = match source {
        Source::Muster => vec![],
        Source::Kai => vec![QueueImport::Kai],
        Source::Kueue => vec![QueueImport::Kueue],
    };
    let _muster = scheduler::start(&cluster, config.clone(), None);
    let labels = |group: &str| {
        let mut labels = vec![(GROUP_LABEL, group.to_string())];
        labels.extend(team_a.label.clone());
        labels
    };

    // Team A fills the cluster with two Jobs' gangs while team B is idle: a1, then a2.
    for name in ["a1", "a2"] {
        create_queued_group(&cluster, name, 2, &team_a).await;
        let mut job = job(&cluster, name, 2, 4);
        let template = job.spec.as_mut().unwrap().template.metadata.get_or_insert_default();
        template.labels = Some(labels(name).into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        cluster.create(&jobs, &job).await;
        wait_for_pods(&cluster, 60, &format!("{name} running whole"), |p| running(p, name) == 2).await;
        // Start times are in seconds: a2 must start later than a1 to be the newest.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let first: Vec<String> = in_group(&crate::support::wait::pods(&cluster).await, "a2")
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();

    // Team B submits a gang of two 4-GPU pods: within its quota, owed its share.
    create_queued_group(&cluster, "b", 2, &team_b).await;
    for i in 0..2 {
        let mut labels = vec![(GROUP_LABEL, "b")];
        labels.extend(team_b.label.as_ref().map(|(k, v)| (*k, v.as_str())));
        let pod = builders::pod(&format!("b-{i}"), &cluster.scheduler_name, 4, &labels);
        cluster.create(&api, &pod).await;
    }
    let all = wait_for_pods(&cluster, 60, "b running whole on the GPUs a2 held", |p| running(p, "b") == 2).await;
    // a1 was never touched; a2's original pods are gone, evicted whole.
    assert_eq!(running(&all, "a1"), 2);
    for name in &first {
        assert!(!all.iter().any(|p| p.metadata.name.as_ref() == Some(name)), "{name} should have been evicted");
        let events = wait_for_events(&cluster, name, "Reclaimed").await;
        assert!(
            events.iter().any(|e| e.contains(&format!(
                "gang {}/a2 evicted whole (Reclaimed) to make room for gang {}/b",
                cluster.namespace, cluster.namespace
            ))),
            "{name}: {events:?}"
        );
    }
    let events = wait_for_events(&cluster, "b-0", "Reclaiming").await;
    assert!(events[0].contains(&format!("evicting 2 pod(s) of gang {}/a2", cluster.namespace)), "{events:?}");
    // The Job recreated a2's pods; they wait, and say why. (The Job creates them one at a
    // time: until the second exists, the first says its gang lacks a pod.)
    let team_a = &team_a.shown;
    let fair_share = format!("queue {team_a} has reached its fair share of 8 nvidia.com/gpu");
    let all = wait_for_pods(&cluster, 30, "a2's new pods waiting with a reason", |p| {
        let new: Vec<&Pod> =
            in_group(p, "a2").into_iter().filter(|p| !first.contains(p.metadata.name.as_ref().unwrap())).collect();
        new.len() == 2
            && new
                .iter()
                .all(|p| node_of(p).is_none() && unschedulable_message(p).is_some_and(|m| m.contains(&fair_share)))
    })
    .await;
    assert!(in_group(&all, "a2").iter().all(|p| node_of(p).is_none()));
    // And the PodGroup of a2 says it was evicted, and why.
    let groups = cluster.api::<PodGroup>();
    let status = groups.get("a2").await.unwrap().status.unwrap_or_default();
    let evicted = status.conditions.iter().find(|c| c.type_ == "Evicted");
    assert!(evicted.is_some_and(|c| c.reason == "Reclaimed"), "{:?}", status.conditions);

    // `muster explain queue` says the same, with the tree and the figures.
    let target = muster::cli::explain::Target::Queue { name: team_a.clone() };
    let text = muster::cli::explain::explain(&cluster.client, &config, &target).await.unwrap();
    assert!(text.contains(&format!("queue {team_a} (parent: ")), "{text}");
    assert!(text.contains("nvidia.com/gpu: quota 8, limit none, fair share 8, allocated 8"), "{text}");
    assert!(text.contains(&format!("gang {}/a2: ", cluster.namespace)), "{text}");
    assert!(text.contains(&format!("queue {team_a} has reached its fair share of 8 nvidia.com/gpu")), "{text}");

    drop(kubelet);
    for team in ["team-a", "team-b"] {
        delete_team(&cluster, source, team).await;
    }
}
