//! The cost of the snapshot brought up to date after one pod changed, at 5,000 nodes
//! and 10,000 pods (half bound, half waiting for Muster).
//!
//! Run with `cargo bench --bench snapshot`.

use criterion::{Criterion, criterion_group, criterion_main};
use muster::convert::assemble::{Memo, assemble_view};
use muster::convert::objects::{gpu_node, training_pod};
use muster::k8s::store::cache::Cache;

/// The scheduler binary's allocator, so the figure is the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn cache() -> Cache {
    let mut cache = Cache::new(Vec::new());
    for i in 0..5_000 {
        let mut node = gpu_node(&format!("node-{i}"), &format!("rack-{}", i / 50), 8);
        node.metadata.resource_version = Some("1".into());
        cache.nodes.apply(node);
    }
    for i in 0..10_000 {
        let mut pod = training_pod(&format!("pod-{i}"), 1 + (i % 4) as u32, i as i64, "muster", None);
        pod.metadata.resource_version = Some("1".into());
        if i % 2 == 0 {
            pod.spec.as_mut().unwrap().node_name = Some(format!("node-{}", i % 5_000));
        }
        cache.apply_pod(pod);
    }
    cache
}

fn bench(c: &mut Criterion) {
    let mut cache = cache();
    let mut group = c.benchmark_group("snapshot_5000_nodes_10000_pods");
    group.sample_size(10);
    let mut n = 0u64;
    let mut memo = Memo::default();
    // The first snapshot converts everything; the ones measured convert one changed pod.
    assemble_view(&cache.view(), "muster", 0, &mut memo);
    group.bench_function("one_pod_changed_then_snapshot", |b| {
        b.iter(|| {
            n += 1;
            let mut pod = training_pod("pod-1", 1 + (n % 4) as u32, 1, "muster", None);
            pod.metadata.resource_version = Some(n.to_string());
            cache.apply_pod(pod);
            assemble_view(&cache.view(), "muster", 0, &mut memo).snapshot.nodes.len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
