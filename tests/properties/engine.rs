//! The engine's invariants on random snapshots (GPU nodes, some cordoned, tainted or partly
//! used; gangs of several sizes and priorities, some confined to a rack; with or without
//! queues, quotas and running gangs to reclaim from), over a few cycles of every queueing
//! and scoring policy: no node goes over its capacity; no pod is placed or evicted twice,
//! nor placed on a node it may not use; every gang runs with none or at least minMember
//! pods, and a rack-confined gang within one rack.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use muster::engine::build::{GIB, GPU, SnapshotBuilder};
use muster::engine::model::{
    Gang, GangKey, NodeConstraints, PendingPod, PodKey, RunningGang, RunningPod, Snapshot, Taint, TaintEffect,
};
use muster::engine::queues::DEFAULT_QUEUE;
use muster::engine::resources::Capacity;
use muster::engine::topology::DomainChoice;
use muster::engine::{CycleConfig, CycleOutcome, Queueing, Scoring, schedule};
use proptest::prelude::*;

const RACK: &str = "topology.muster.dev/rack";
const CYCLES: usize = 4;

#[derive(Clone, Debug)]
struct NodeSpec {
    cpus: i64,
    memory_gib: i64,
    gpus: i64,
    rack: u8,
    used_gpus: i64,
    cordoned: bool,
    tainted: bool,
}

#[derive(Clone, Debug)]
struct GangSpec {
    min: usize,
    extra: usize,
    gpus: i64,
    cpus: i64,
    memory_gib: i64,
    priority: i32,
    created: i64,
    queue: usize,
    in_one_rack: bool,
    preemptible: bool,
}

#[derive(Clone, Debug)]
struct RunningSpec {
    node: usize,
    pods: usize,
    gpus: i64,
    queue: usize,
    priority: i32,
    started: i64,
}

#[derive(Clone, Debug)]
struct Cluster {
    nodes: Vec<NodeSpec>,
    gangs: Vec<GangSpec>,
    running: Vec<RunningSpec>,
    /// Per queue: quota, weight, limit. Empty: no queues.
    queues: Vec<(i64, u64, Option<i64>)>,
    config: CycleConfig,
}

fn node() -> impl Strategy<Value = NodeSpec> {
    (
        prop_oneof![Just(8i64), Just(32), Just(64)],
        prop_oneof![Just(64i64), Just(512)],
        prop_oneof![1 => Just(0i64), 1 => Just(4), 3 => Just(8)],
        0u8..3,
        prop_oneof![3 => Just(0i64), 1 => 0i64..8],
        proptest::bool::weighted(0.1),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(cpus, memory_gib, gpus, rack, used, cordoned, tainted)| NodeSpec {
            cpus,
            memory_gib,
            gpus,
            rack,
            used_gpus: used.min(gpus),
            cordoned,
            tainted,
        })
}

fn gang() -> impl Strategy<Value = GangSpec> {
    (
        (1usize..5, 0usize..3),
        prop_oneof![Just(0i64), Just(1), Just(2), Just(4), Just(8)],
        1i64..20,
        prop_oneof![Just(1i64), Just(16), Just(64)],
        prop_oneof![Just(0), Just(50)],
        0i64..1000,
        0usize..4,
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.9),
    )
        .prop_map(|((min, extra), gpus, cpus, memory_gib, priority, created, queue, in_one_rack, preemptible)| {
            GangSpec { min, extra, gpus, cpus, memory_gib, priority, created, queue, in_one_rack, preemptible }
        })
}

fn running() -> impl Strategy<Value = RunningSpec> {
    (0usize..8, 1usize..4, 1i64..4, 0usize..4, prop_oneof![Just(0), Just(100)], 0i64..10_000).prop_map(
        |(node, pods, gpus, queue, priority, started)| RunningSpec { node, pods, gpus, queue, priority, started },
    )
}

fn config() -> impl Strategy<Value = CycleConfig> {
    (
        prop_oneof![Just(Scoring::BinPack), Just(Scoring::Spread)],
        prop_oneof![Just(Queueing::Backfill), Just(Queueing::StrictFifo), Just(Queueing::BestEffortFifo)],
        prop_oneof![Just(0i64), Just(600)],
        prop_oneof![Just(DomainChoice::BestFit), Just(DomainChoice::FirstFit)],
    )
        .prop_map(|(scoring, queueing, reserve_after_seconds, domain_choice)| CycleConfig {
            scoring,
            queueing,
            reserve_after_seconds,
            domain_choice,
            ..CycleConfig::default()
        })
}

fn cluster() -> impl Strategy<Value = Cluster> {
    (
        proptest::collection::vec(node(), 1..7),
        proptest::collection::vec(gang(), 1..10),
        proptest::collection::vec(running(), 0..12),
        prop_oneof![
            1 => Just(Vec::new()),
            3 => proptest::collection::vec((0i64..12, 1u64..4, proptest::option::of(4i64..24)), 1..4),
        ],
        config(),
    )
        .prop_map(|(nodes, gangs, running, queues, config)| Cluster { nodes, gangs, running, queues, config })
}

fn queue_name(cluster: &Cluster, index: usize) -> String {
    if cluster.queues.is_empty() { DEFAULT_QUEUE.to_string() } else { format!("q{}", index % cluster.queues.len()) }
}

fn snapshot(cluster: &Cluster) -> Snapshot {
    let mut builder = SnapshotBuilder::new().at(10_000);
    // Free GPUs and CPU per node, for running gangs that fit.
    let mut free: Vec<(i64, i64)> = Vec::new();
    for (i, n) in cluster.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let rack = format!("r{}", n.rack);
        builder =
            builder.gpu_node(&name, n.cpus, n.memory_gib, n.gpus, &[("kubernetes.io/hostname", &name), (RACK, &rack)]);
        let (cordoned, tainted) = (n.cordoned, n.tainted);
        builder = builder.with_last_node(|node| {
            node.unschedulable = cordoned;
            if tainted {
                std::sync::Arc::make_mut(&mut node.taints).push(Taint {
                    key: "dedicated".into(),
                    value: "x".into(),
                    effect: TaintEffect::NoSchedule,
                });
            }
        });
        if n.used_gpus > 0 {
            builder = builder.used(&name, &[(GPU, n.used_gpus)]);
        }
        free.push((n.gpus - n.used_gpus, n.cpus * 1000));
    }
    for (q, &(quota, weight, limit)) in cluster.queues.iter().enumerate() {
        builder = builder.queue(&format!("q{q}"), "", &[(GPU, quota, weight, limit, None)], |_| {});
    }
    for (r, spec) in cluster.running.iter().enumerate() {
        let node = spec.node % cluster.nodes.len();
        let (gpus, cpu) = &mut free[node];
        let pods = spec.pods as i64;
        if *gpus < spec.gpus * pods || *cpu < 1000 * pods {
            continue;
        }
        *gpus -= spec.gpus * pods;
        *cpu -= 1000 * pods;
        let queue = queue_name(cluster, spec.queue);
        let name = format!("run{r}");
        let demand = [(GPU, spec.gpus), ("cpu", 1000)];
        let priority = spec.priority;
        builder = builder
            .running(&name, &queue, &format!("n{node}"), spec.pods, &demand, spec.started)
            .with_last_running(|running| running.priority = priority);
    }
    for (g, spec) in cluster.gangs.iter().enumerate() {
        let demand = [(GPU, spec.gpus), ("cpu", spec.cpus * 1000), ("memory", spec.memory_gib * GIB)];
        builder = builder.gang(&format!("g{g}"), spec.min, spec.min + spec.extra, &demand);
        let (priority, created, preemptible) = (spec.priority, spec.created, spec.preemptible);
        builder = builder.with_last_gang(|gang| {
            gang.priority = priority;
            gang.created = created;
            gang.preemptible = preemptible;
        });
        builder = builder.in_queue(&queue_name(cluster, spec.queue));
        if spec.in_one_rack {
            builder = builder.with_topology(Some("rack"), None);
        }
    }
    builder.build()
}

/// Checks one cycle's outcome against the snapshot it came from.
fn check(snapshot: &Snapshot, outcome: &CycleOutcome, in_one_rack: &HashSet<GangKey>) -> Result<(), TestCaseError> {
    let nodes = &snapshot.nodes;
    let mut load: Vec<Capacity> = nodes.iter().map(|n| n.requested.clone()).collect();
    // Evictions: running pods, each once; a victim keeps none or at least minMember.
    let mut evicted: HashSet<&PodKey> = HashSet::new();
    for eviction in &outcome.evictions {
        let gang = snapshot.running.iter().find(|r| r.key == eviction.gang);
        let gang = gang.ok_or_else(|| TestCaseError::fail(format!("{} evicted but not running", eviction.gang)))?;
        for key in &eviction.pods {
            prop_assert!(evicted.insert(key), "{:?} evicted twice", key);
            let pod = gang.pods.iter().find(|p| &p.key == key);
            let pod = pod.ok_or_else(|| TestCaseError::fail(format!("{key:?} evicted but not running")))?;
            load[pod.node as usize].sub(&pod.demand, 1);
        }
        let left = gang.pods.iter().filter(|p| !evicted.contains(&p.key)).count();
        prop_assert!(left == 0 || left >= gang.min_member, "{} left with {} of {}", gang.key, left, gang.min_member);
    }
    // Placements: pending pods of the gang, each once, on nodes they may use.
    let mut placed: HashSet<&PodKey> = HashSet::new();
    for placement in &outcome.placements {
        let gang = snapshot.gangs.iter().find(|g| g.key == placement.gang);
        let gang = gang.ok_or_else(|| TestCaseError::fail(format!("{} placed but not pending", placement.gang)))?;
        prop_assert!(!placement.pods.is_empty(), "{} placed with no pods", gang.key);
        let mut racks = HashSet::new();
        for (key, index) in &placement.pods {
            prop_assert!(placed.insert(key), "{:?} placed twice", key);
            let pod = gang.pods.iter().find(|p| &p.key == key);
            let pod =
                pod.ok_or_else(|| TestCaseError::fail(format!("{key:?} placed but not pending in {}", gang.key)))?;
            let node = nodes.get(*index as usize);
            let node = node.ok_or_else(|| TestCaseError::fail(format!("{key:?} placed on node {index}")))?;
            prop_assert!(!node.unschedulable, "{:?} placed on cordoned {}", key, node.name);
            prop_assert!(node.taints.is_empty(), "{:?} placed on tainted {}", key, node.name);
            racks.insert(node.labels.get(RACK).cloned());
            load[*index as usize].add(&pod.demand, 1);
        }
        let total = gang.bound + placement.pods.len();
        prop_assert!(total >= gang.min_member, "{} placed with {} of {} pods", gang.key, total, gang.min_member);
        if in_one_rack.contains(&gang.key) && gang.bound == 0 {
            prop_assert_eq!(racks.len(), 1, "{} placed across racks", gang.key);
        }
    }
    for (node, load) in nodes.iter().zip(&load) {
        let resources = snapshot.resources.len();
        for id in (0..resources).map(|i| muster::engine::resources::ResourceId(i as u16)) {
            prop_assert!(
                load.get(id) <= node.allocatable.get(id),
                "{} over capacity in {}: {} > {}",
                node.name,
                snapshot.resources.name(id),
                load.get(id),
                node.allocatable.get(id)
            );
        }
    }
    Ok(())
}

/// Plays the cluster: placed pods run; evicted pods are pending again, as their controller
/// recreates them (a gang as it was first pending, in `templates`, with its topology);
/// reservations carry to the next cycle.
fn apply(snapshot: &mut Snapshot, outcome: &CycleOutcome, templates: &HashMap<GangKey, Gang>) {
    for placement in &outcome.placements {
        let index = snapshot.gangs.iter().position(|g| g.key == placement.gang).expect("checked");
        let gang = &mut snapshot.gangs[index];
        let mut started = Vec::new();
        for (key, node) in &placement.pods {
            let pod = gang.pods.remove(gang.pods.iter().position(|p| &p.key == key).expect("checked"));
            std::sync::Arc::make_mut(&mut snapshot.nodes)[*node as usize].requested.add(&pod.demand, 1);
            let demand = pod.demand;
            started.push(RunningPod {
                key: pod.key,
                node: *node,
                demand,
                started: snapshot.now,
                devices: Vec::new(),
                grace_seconds: 30,
                gpu_milli: 0,
            });
        }
        gang.bound += started.len();
        let gang = gang.clone();
        if gang.pods.is_empty() {
            snapshot.gangs.remove(index);
        }
        match snapshot.running.iter_mut().find(|r| r.key == gang.key) {
            Some(running) => running.pods.extend(started),
            None => snapshot.running.push(RunningGang {
                key: gang.key,
                queue: gang.queue,
                priority: gang.priority,
                preemptible: gang.preemptible,
                min_member: gang.min_member,
                pods: started,
                created: gang.created,
                opportunistic: placement.opportunistic.is_some(),
            }),
        }
    }
    for eviction in &outcome.evictions {
        let r = snapshot.running.iter().position(|r| r.key == eviction.gang).expect("checked");
        let mut back = Vec::new();
        for key in &eviction.pods {
            let running = &mut snapshot.running[r];
            let pod = running.pods.remove(running.pods.iter().position(|p| &p.key == key).expect("checked"));
            std::sync::Arc::make_mut(&mut snapshot.nodes)[pod.node as usize].requested.sub(&pod.demand, 1);
            back.push(PendingPod {
                key: pod.key,
                demand: pod.demand,
                constraints: Arc::new(NodeConstraints::default()),
                devices: None,
                labels: Default::default(),
                rules: None,
            });
        }
        let running = snapshot.running[r].clone();
        if running.pods.is_empty() {
            snapshot.running.remove(r);
        }
        let now = snapshot.now;
        match snapshot.gangs.iter_mut().find(|g| g.key == eviction.gang) {
            Some(gang) => {
                gang.pods.extend(back);
                gang.bound = running.pods.len();
                gang.last_evicted = Some(now);
            }
            None if templates.contains_key(&running.key) => {
                let mut gang = templates[&running.key].clone();
                gang.pods = back;
                gang.bound = running.pods.len();
                gang.last_evicted = Some(now);
                snapshot.gangs.push(gang);
            }
            None => snapshot.gangs.push(Gang {
                key: running.key,
                min_member: running.min_member,
                bound: running.pods.len(),
                pods: back,
                priority: running.priority,
                created: running.created,
                blocked: None,
                topology: None,
                queue: running.queue,
                preemption_delay: None,
                last_evicted: Some(now),
                quota_owner: None,
                preemptible: running.preemptible,
                preempts: true,
                parked: Default::default(),
                max_run_seconds: None,
            }),
        }
    }
    snapshot.reservations = outcome.reservations.clone();
    snapshot.now += 60;
}

proptest! {
    #![proptest_config(super::cases(1_000))]

    #[test]
    fn cycles_keep_nodes_within_capacity_and_gangs_whole(cluster in cluster()) {
        let mut snapshot = snapshot(&cluster);
        let in_one_rack: HashSet<GangKey> =
            snapshot.gangs.iter().filter(|g| g.topology.is_some()).map(|g| g.key.clone()).collect();
        let pods = pods_per_gang(&snapshot);
        let templates: HashMap<GangKey, Gang> = snapshot.gangs.iter().map(|g| (g.key.clone(), g.clone())).collect();
        for _ in 0..CYCLES {
            let outcome = schedule(&snapshot, &cluster.config);
            check(&snapshot, &outcome, &in_one_rack)?;
            apply(&mut snapshot, &outcome, &templates);
            // No pod is lost or made twice; running gangs are whole.
            prop_assert_eq!(&pods_per_gang(&snapshot), &pods);
            for running in &snapshot.running {
                prop_assert!(
                    running.pods.len() >= running.min_member,
                    "{} runs {} of {} pods", running.key, running.pods.len(), running.min_member
                );
            }
            if outcome.placements.is_empty() && outcome.evictions.is_empty() {
                break;
            }
        }
    }
}

/// Every gang's pods, pending or running.
fn pods_per_gang(snapshot: &Snapshot) -> HashMap<GangKey, usize> {
    let mut pods: HashMap<GangKey, usize> = HashMap::new();
    for gang in &snapshot.gangs {
        *pods.entry(gang.key.clone()).or_default() += gang.pods.len();
    }
    for running in &snapshot.running {
        *pods.entry(running.key.clone()).or_default() += running.pods.len();
    }
    pods
}
