//! The page at `/ui` at 500 nodes of 8 GPUs (25 racks, 3,000 bound pods, 100 gangs of 8
//! waiting): building the view from what the loop computed, rendering it, and serving it
//! over HTTP on loopback as a browser fetches it.
//!
//! Run with `cargo bench --bench ui`.

use std::collections::HashMap;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use muster::config::Config;
use muster::convert::assemble::{ClusterObjects, assemble};
use muster::convert::objects::{gpu_node, training_pod};
use muster::figures::gpus::gpu_usage;
use muster::ui::Board;
use muster::ui::build::{Inputs, build};

/// The scheduler binary's allocator, so the figure is the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NOW: i64 = 1_800_000_000;

fn cluster() -> ClusterObjects {
    let mut objects = ClusterObjects::default();
    for i in 0..500 {
        objects.nodes.push(gpu_node(&format!("node-{i}"), &format!("rack-{}", i / 20), 8));
    }
    for i in 0..3_000 {
        let mut pod = training_pod(&format!("bound-{i}"), 1, NOW - 3_600, "muster", None);
        pod.spec.as_mut().unwrap().node_name = Some(format!("node-{}", (i * 7) % 500));
        objects.pods.push(pod);
    }
    for gang in 0..100 {
        for i in 0..8 {
            let name = format!("train-{gang}-{i}");
            objects.pods.push(training_pod(&name, 8, NOW - 60 * gang, "muster", Some(&format!("train-{gang}"))));
        }
    }
    objects
}

fn bench(c: &mut Criterion) {
    let config = Config::default();
    let objects = cluster();
    let assembled = assemble(&objects, &muster::config::Config::default(), NOW);
    let outcome = muster::engine::schedule(&assembled.snapshot, &config.cycle());
    let waits: HashMap<_, _> = outcome.waiting.iter().map(|w| (w.gang.clone(), w.to_string())).collect();
    let gpus = gpu_usage(&objects.view(), &assembled.groups, &config.topology);
    let inputs = Inputs {
        scheduler_name: "muster",
        assembled: &assembled,
        queues: &[],
        waits: &waits,
        gpus: &gpus,
        kinds: None,
        now: NOW,
    };

    let mut group = c.benchmark_group("ui_500_nodes_8_gpus");
    group.bench_function("build_view", |b| b.iter(|| build(&inputs)));
    let view = build(&inputs);
    assert_eq!(view.racks.iter().map(|r| r.nodes.len()).sum::<usize>(), 500);
    group.bench_function("render_page", |b| b.iter(|| muster::ui::render::page(&view)));
    println!("page: {} bytes, {} gangs waiting listed", muster::ui::render::page(&view).len(), view.waiting.len());

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let port = runtime.block_on(async {
        let board = Arc::new(Board::default());
        board.publish(view.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let site = muster::metrics::Site { page: Some(board), access: Default::default() };
        let (_, ready) = tokio::sync::watch::channel(true);
        let registry = prometheus::Registry::new();
        tokio::spawn(muster::metrics::serve_site(listener, registry, Arc::new(ready), site, std::future::pending()));
        port
    });
    group.bench_function("get_over_http", |b| {
        b.iter(|| {
            runtime.block_on(async {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                stream.write_all(b"GET /ui HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
                let mut body = Vec::new();
                stream.read_to_end(&mut body).await.unwrap();
                assert!(body.starts_with(b"HTTP/1.0 200"));
                body.len()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
