//! Engine benchmarks: one scheduling cycle at 5,000 nodes.
//!
//! Run with `cargo bench --bench engine`. Throughput is reported in pods per second.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use muster::engine::build::{GIB, GPU, SnapshotBuilder};
use muster::engine::model::{
    LabelRequirement, SelectorOperator, Snapshot, Taint, TaintEffect, Toleration, TolerationOperator,
};
use muster::engine::pods::{Labels, Namespaces, PodRules, PodTerm, SpreadRule, WeightedTerm};
use muster::engine::{CycleConfig, schedule};

/// The scheduler binary's allocator, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NODES: usize = 5_000;

/// 5,000 nodes: 8-GPU nodes in 4 pools and 100 racks, every 10th without GPUs, every 50th
/// tainted, some partly used.
fn cluster() -> SnapshotBuilder {
    let mut b = SnapshotBuilder::new();
    for i in 0..NODES {
        let name = format!("node-{i}");
        let pool = format!("pool-{}", i % 4);
        let rack = format!("rack-{}", i / 50);
        let block = format!("block-{}", i / 1000);
        let gpus = if i % 10 == 9 { 0 } else { 8 };
        b = b.gpu_node(
            &name,
            96,
            1024,
            gpus,
            &[("pool", &pool), ("topology.muster.dev/rack", &rack), ("topology.muster.dev/block", &block)],
        );
        if i % 50 == 7 {
            b = b.with_last_node(|n| {
                std::sync::Arc::make_mut(&mut n.taints).push(Taint {
                    key: "maintenance".into(),
                    value: "true".into(),
                    effect: TaintEffect::NoSchedule,
                })
            });
        }
        if i % 3 == 0 && gpus > 0 {
            b = b.used(&name, &[(GPU, 2), ("cpu", 8000), ("memory", 64 * GIB)]);
        }
    }
    b
}

/// Ten pod shapes: CPU, memory and GPU counts, node selectors and tolerations.
fn add_pods(mut b: SnapshotBuilder, gangs: usize, pods_per_gang: usize) -> Snapshot {
    let shapes: [(i64, i64, i64, Option<&str>, bool); 10] = [
        (1000, 2, 0, None, false),
        (2000, 8, 0, Some("pool-1"), false),
        (4000, 16, 1, None, false),
        (8000, 32, 1, Some("pool-2"), false),
        (8000, 64, 2, None, true),
        (16000, 128, 4, None, false),
        (16000, 128, 4, Some("pool-3"), true),
        (500, 1, 0, None, true),
        (32000, 256, 8, None, false),
        (4000, 16, 1, Some("pool-0"), false),
    ];
    for g in 0..gangs {
        let (cpu, mem, gpus, pool, tolerate) = shapes[g % shapes.len()];
        let mut demand = vec![("cpu", cpu), ("memory", mem * GIB)];
        if gpus > 0 {
            demand.push((GPU, gpus));
        }
        b = b.gang(&format!("job-{g}"), pods_per_gang, pods_per_gang, &demand).with_last_gang(|gang| {
            if pool.is_some() || tolerate {
                // One shared constraints value per gang, as the converter shares it.
                let c = Arc::make_mut(&mut gang.pods[0].constraints);
                if let Some(pool) = pool {
                    c.node_selector.push(("pool".into(), pool.into()));
                }
                if tolerate {
                    c.tolerations.push(Toleration {
                        key: "maintenance".into(),
                        operator: TolerationOperator::Exists,
                        value: String::new(),
                        effect: None,
                    });
                }
                let shared = gang.pods[0].constraints.clone();
                for pod in &mut gang.pods {
                    pod.constraints = shared.clone();
                }
            }
        });
    }
    b.build()
}

/// Says how much of the workload one cycle places, so the figures are read in context.
fn report(what: &str, snapshot: &Snapshot) {
    let outcome = schedule(snapshot, &CycleConfig::default());
    let pods: usize = outcome.placements.iter().map(|p| p.pods.len()).sum();
    eprintln!(
        "{what}: one cycle places {} gangs ({pods} pods); {} wait",
        outcome.placements.len(),
        outcome.waiting.len()
    );
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("cycle_5000_nodes");
    group.sample_size(10);

    let singles = add_pods(cluster(), 10_000, 1);
    report("10000 single pods", &singles);
    group.throughput(Throughput::Elements(10_000));
    group.bench_function("10000_single_pods", |b| b.iter(|| schedule(&singles, &CycleConfig::default())));

    // The same pods in 50 queues, a tree of 3 levels: 2 organisations, 8 departments, 40
    // teams with GPU quotas and limits.
    let mut queued = cluster();
    for org in 0..2 {
        queued = queued.queue(&format!("org-{org}"), "", &[(GPU, 16_000, 1, None, None)], |_| {});
        for dept in 0..4 {
            let dept_name = format!("dept-{org}-{dept}");
            queued = queued.queue(&dept_name, &format!("org-{org}"), &[(GPU, 4_000, 1, None, None)], |_| {});
            for team in 0..5 {
                let rule = (GPU, 700, 1 + team as u64, Some(2_000), None);
                queued = queued.queue(&format!("team-{org}-{dept}-{team}"), &dept_name, &[rule], |_| {});
            }
        }
    }
    let mut queued = add_pods(queued, 10_000, 1);
    for (i, gang) in queued.gangs.iter_mut().enumerate() {
        gang.queue = format!("team-{}-{}-{}", i % 2, (i / 2) % 4, (i / 8) % 5);
    }
    report("10000 single pods in 50 queues", &queued);
    group.throughput(Throughput::Elements(10_000));
    group.bench_function("10000_single_pods_50_queues", |b| b.iter(|| schedule(&queued, &CycleConfig::default())));

    let gangs = add_pods(cluster(), 1_000, 8);
    report("1000 gangs of 8", &gangs);
    group.throughput(Throughput::Elements(1_000));
    group.bench_function("1000_gangs_of_8", |b| b.iter(|| schedule(&gangs, &CycleConfig::default())));

    // One 512-pod gang of 8-GPU pods that must share a block of 1,000 nodes.
    let block_gang = cluster()
        .gang("block-job", 512, 512, &[(GPU, 8), ("cpu", 16_000), ("memory", 128 * GIB)])
        .with_topology(Some("block"), Some("rack"))
        .build();
    report("one 512-pod gang requiring a block", &block_gang);
    group.throughput(Throughput::Elements(512));
    group.bench_function("512_pod_gang_in_one_block", |b| b.iter(|| schedule(&block_gang, &CycleConfig::default())));
    group.finish();

    // Reclaim: team-a has lent itself the whole cluster, 2,000 running gangs of one 8-GPU
    // pod on 2,000 nodes; team-b (quota 64) submits an 8-pod gang of 8 GPUs each. One
    // cycle chooses the victims (with trial placements and minimising) and plans them.
    let mut reclaim = SnapshotBuilder::new()
        .queue("team-a", "", &[(GPU, 0, 1, None, None)], |_| {})
        .queue("team-b", "", &[(GPU, 64, 1, None, None)], |_| {})
        .at(1_000_000);
    for i in 0..2_000 {
        reclaim = reclaim.gpu_node(
            &format!("node-{i}"),
            96,
            1024,
            8,
            &[("topology.muster.dev/rack", &format!("rack-{}", i / 50))],
        );
    }
    for i in 0..2_000 {
        reclaim = reclaim.running(&format!("a-{i}"), "team-a", &format!("node-{i}"), 1, &[(GPU, 8)], i as i64);
    }
    let reclaim = reclaim.gang("b-job", 8, 8, &[(GPU, 8)]).in_queue("team-b").build();
    let outcome = schedule(&reclaim, &CycleConfig::default());
    let evicted: usize = outcome.evictions.iter().map(|e| e.pods.len()).sum();
    eprintln!("reclaim over 2000 running gangs: {evicted} pods of {} gangs evicted", outcome.evictions.len());
    let mut group = c.benchmark_group("reclaim");
    group.sample_size(10);
    group.bench_function("2000_running_gangs", |b| b.iter(|| schedule(&reclaim, &CycleConfig::default())));
    group.finish();
}

/// The rules of the deployments' pods.
#[derive(Clone, Copy)]
enum Rules {
    None,
    /// Required anti-affinity on the hostname, DoNotSchedule spread over zones.
    Required,
    /// The same as preferences: preferred anti-affinity (weight 100), ScheduleAnyway.
    Preferred,
}

/// 5,000 nodes over three zones and 10,000 one-CPU pods of 1,000 deployments of ten, as
/// kube-scheduler's scheduler_perf SchedulingPodAntiAffinity and TopologySpreading run
/// them: with `Required` rules, each pod keeps one replica of its deployment per node
/// (required anti-affinity on the hostname) and spreads its deployment over the zones
/// (maxSkew 1, DoNotSchedule); with `Preferred`, it prefers both; without, the same pods
/// and nodes.
fn deployments(rules: Rules) -> Snapshot {
    let mut b = SnapshotBuilder::new();
    for i in 0..NODES {
        let name = format!("node-{i}");
        let zone = format!("zone-{}", i % 3);
        b = b.gpu_node(
            &name,
            96,
            1024,
            0,
            &[("kubernetes.io/hostname", &name), ("topology.kubernetes.io/zone", &zone)],
        );
    }
    for d in 0..1_000 {
        let app = format!("app-{d}");
        let selector = Some(vec![LabelRequirement {
            key: "app".into(),
            operator: SelectorOperator::In,
            values: vec![app.clone()],
        }]);
        let term = PodTerm {
            namespaces: Namespaces::Only(vec!["default".into()]),
            selector: selector.clone(),
            topology_key: "kubernetes.io/hostname".into(),
        };
        let spread = SpreadRule {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".into(),
            selector,
            min_domains: 1,
            honor_affinity: true,
            honor_taints: false,
        };
        let own = match rules {
            Rules::None => None,
            Rules::Required => {
                Some(Arc::new(PodRules { anti_affinity: vec![term], spread: vec![spread], ..Default::default() }))
            }
            Rules::Preferred => Some(Arc::new(PodRules {
                preferred_anti_affinity: vec![WeightedTerm { weight: 100, term }],
                soft_spread: vec![spread],
                ..Default::default()
            })),
        };
        let labels: Labels = Arc::new([("app".to_string(), app)].into());
        for r in 0..10 {
            b = b.gang(&format!("{d}-{r}"), 1, 1, &[("cpu", 1000), ("memory", GIB)]).with_last_gang(|g| {
                g.pods[0].labels = labels.clone();
                g.pods[0].rules = own.clone();
            });
        }
    }
    b.build()
}

fn bench_rules(c: &mut Criterion) {
    let mut group = c.benchmark_group("rules_between_pods");
    group.sample_size(10);
    for (name, rules) in [
        ("10000_pods_plain", Rules::None),
        ("10000_pods_anti_affinity_and_spread", Rules::Required),
        ("10000_pods_preferred_anti_affinity_and_spread", Rules::Preferred),
    ] {
        let snapshot = deployments(rules);
        report(name, &snapshot);
        group.throughput(Throughput::Elements(10_000));
        group.bench_function(name, |b| b.iter(|| schedule(&snapshot, &CycleConfig::default())));
    }
    group.finish();
}

criterion_group!(benches, bench, bench_rules);
criterion_main!(benches);
