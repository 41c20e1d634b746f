//! The page at `/ui` in a real browser: a scheduler runs against the test control plane
//! with a team queue, a gang that runs and a gang too large to fit; headless Chromium
//! (`MUSTER_CHROMIUM_BIN`, else `chromium` on the PATH; `hack/test.sh` installs Debian's
//! package when it is missing) loads the page, and its DOM must show the waiting gang's
//! reason, word for word as the pod's condition says it, and the queue's quota and
//! allocated GPUs. A screenshot is kept as `test-artifacts/ui.png` in the target folder.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::api::queue::Queue;
use muster::k8s::scheduler::{Options, health_for};
use muster::metrics::{Metrics, Site};
use muster::ui::Board;
use serde_json::json;

use crate::support::cluster::within;
use crate::support::gangs::GROUP_LABEL;
use crate::support::wait::{node_of, unschedulable_message, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler};

/// The Chromium to run: `MUSTER_CHROMIUM_BIN`, else `chromium` on the PATH.
fn chromium_binary() -> String {
    std::env::var("MUSTER_CHROMIUM_BIN").unwrap_or_else(|_| "chromium".into())
}

/// Where test artifacts are kept: `test-artifacts/` in the target folder.
fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("failed to create {}: {e}", dir.display()));
    dir
}

/// Runs headless Chromium with `args` and then `url`, in a profile of its own; its
/// standard output. Fails the test, naming the binary, when it cannot be run, fails, or
/// takes over 90 s.
async fn chromium(profile: &std::path::Path, args: &[&str], url: &str) -> String {
    let binary = chromium_binary();
    std::fs::create_dir_all(profile).expect("a folder for Chromium's profile");
    let (out, err) = (profile.join("stdout"), profile.join("stderr"));
    let mut child = std::process::Command::new(&binary)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.join("data").display()))
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).expect("Chromium's output file"))
        .stderr(std::fs::File::create(&err).expect("Chromium's error file"))
        .spawn()
        .unwrap_or_else(|e| {
            panic!("failed to run {binary} ({e}); hack/test.sh installs Debian's chromium package, or set MUSTER_CHROMIUM_BIN")
        });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("Chromium's status") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{binary} {args:?} {url} ran over 90 s:\n{}", std::fs::read_to_string(&err).unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        status.success(),
        "{binary} {args:?} {url} failed ({status}):\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    std::fs::read_to_string(&out).expect("Chromium's output")
}

/// GETs `path` from the server on `port`; the body.
async fn get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect to the page");
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

/// Text as the DOM serialises it back, so that a message can be found in a dump.
fn as_in_dom(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The cells of the row of `queue` (and resource) in a dump of the page.
fn queue_row<'a>(dom: &'a str, queue: &str) -> &'a str {
    let start = format!("<tr data-queue=\"{queue}\" data-resource=\"nvidia.com/gpu\">");
    let at = dom.find(&start).unwrap_or_else(|| panic!("no row for queue {queue} on the page:\n{dom}"));
    let row = &dom[at..];
    &row[..row.find("</tr>").unwrap_or(row.len())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_waiting_gangs_reason_and_its_queues_figures_in_a_browser() {
    // The browser first: a machine without it fails here, before anything starts.
    let profile = std::env::temp_dir().join(format!("muster-e2e-chromium-{}", std::process::id()));
    let version = chromium(&profile, &[], "--version").await;
    assert!(version.contains("Chromium"), "{version}");

    let cluster = TestCluster::new("ui").await;
    scheduler::install_crds(&cluster).await;
    let team = cluster.name("team");
    let queue: Queue = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Queue", "metadata": {"name": team},
        "spec": {"resources": {"nvidia.com/gpu": {"quota": "8"}}},
    }))
    .expect("queue");
    cluster.create(&cluster.cluster_api::<Queue>(), &queue).await;
    cluster.create_gpu_nodes(2, "r1").await;
    let _kubelet = KubeletEmulator::start(cluster.api::<Pod>());
    for (gang, pods, gpus) in [("warmup", 1, 4), ("train", 4, 8)] {
        let spec = PodGroupSpec { min_member: pods, queue: Some(team.clone()), ..Default::default() };
        cluster.create(&cluster.api::<PodGroup>(), &PodGroup::new(gang, spec)).await;
        for i in 0..pods {
            let pod = builders::pod(&format!("{gang}-{i}"), &cluster.scheduler_name, gpus, &[(GROUP_LABEL, gang)]);
            cluster.create(&cluster.api::<Pod>(), &pod).await;
        }
    }

    let config = scheduler::config(&cluster);
    let metrics = Arc::new(Metrics::new());
    let health = health_for(&config);
    let board = Arc::new(Board::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let site = Site { page: Some(board.clone()), access: config.metrics_server.clone() };
    tokio::spawn(muster::metrics::serve_site(
        listener,
        metrics.registry.clone(),
        health.clone(),
        site,
        std::future::pending(),
    ));
    let options = Options { metrics, health: Some(health), ui: board, ..Default::default() };
    let _scheduler = scheduler::start_with(&cluster, config, options);

    // The small gang runs; the large one waits and is told why.
    let all = wait_for_pods(&cluster, 60, "warmup bound and train-0 told why it waits", |all| {
        let bound = all.iter().any(|p| p.metadata.name.as_deref() == Some("warmup-0") && node_of(p).is_some());
        bound && all.iter().any(|p| p.metadata.name.as_deref() == Some("train-0") && unschedulable_message(p).is_some())
    })
    .await;
    let train = all.iter().find(|p| p.metadata.name.as_deref() == Some("train-0")).expect("train-0");
    let reason = unschedulable_message(train).expect("a reason");

    // The page follows the loop's housekeeping: wait until it has the reason and the figures.
    let url = format!("http://127.0.0.1:{port}/ui");
    within(30, "the page to show the waiting gang and the queue's allocation", async {
        loop {
            let html = get(port, "/ui").await;
            if html.contains(&as_in_dom(&reason)) && html.contains("<td class=\"num allocated\">4</td>") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    let started = Instant::now();
    let dom = chromium(&profile, &["--dump-dom"], &url).await;
    let loaded = started.elapsed();
    let gang = format!("gang {}/train", cluster.namespace);
    let row_at = dom.find(&format!("<tr data-gang=\"{gang}\">")).unwrap_or_else(|| panic!("{gang} not listed:\n{dom}"));
    let gang_row = &dom[row_at..row_at + dom[row_at..].find("</tr>").expect("row ends")];
    assert!(gang_row.contains(&as_in_dom(&reason)), "the page does not give {gang}'s reason {reason:?}:\n{gang_row}");
    assert!(gang_row.contains(&format!("<td class=\"queue\">{team}</td>")), "{gang_row}");
    assert!(gang_row.contains("<td class=\"nearest\">the cluster has 12 of the 32 GPUs needed free"), "{gang_row}");
    let queue = queue_row(&dom, &team);
    assert!(queue.contains("<td class=\"num quota\">8</td>"), "{queue}");
    assert!(queue.contains("<td class=\"num allocated\">4</td>"), "{queue}");
    assert!(queue.contains("class=\"num pending\">1</td>"), "{queue}");
    assert!(dom.contains("<b id=\"gpus-used\">4</b>") && dom.contains("<b id=\"gpus-free\">12</b>"), "{dom}");

    let screenshot = artifacts().join("ui.png");
    let _ = std::fs::remove_file(&screenshot);
    chromium(
        &profile,
        &[&format!("--screenshot={}", screenshot.display()), "--window-size=1400,1000", "--hide-scrollbars"],
        &url,
    )
    .await;
    let png = std::fs::read(&screenshot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", screenshot.display()));
    assert!(png.starts_with(b"\x89PNG"), "{} is no PNG", screenshot.display());
    println!("the page loaded in Chromium (start included) in {loaded:?}; screenshot: {}", screenshot.display());

    // The same page at 500 nodes of 8 GPUs: every GPU drawn; the time beside the small
    // page's is what 500 nodes add to a load.
    let large = Arc::new(Board::default());
    large.publish(five_hundred_nodes());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let large_port = listener.local_addr().expect("address").port();
    let site = Site { page: Some(large), access: Default::default() };
    let (_, ready) = tokio::sync::watch::channel(true);
    let registry = prometheus::Registry::new();
    tokio::spawn(muster::metrics::serve_site(listener, registry, Arc::new(ready), site, std::future::pending()));
    let started = Instant::now();
    let dom = chromium(&profile, &["--dump-dom"], &format!("http://127.0.0.1:{large_port}/ui")).await;
    let loaded_large = started.elapsed();
    let squares = ["free", "used", "shared", "tainted", "held"]
        .iter()
        .map(|state| dom.matches(&format!("<rect class=\"{state}\"")).count())
        .sum::<usize>();
    assert_eq!(squares, 4_000, "one square per GPU of 500 nodes");
    println!("the page of 500 nodes loaded in Chromium (start included) in {loaded_large:?}, against {loaded:?}");
    let _ = std::fs::remove_dir_all(&profile);
}

/// A view of 500 nodes of 8 GPUs in 25 racks, some GPUs busy.
fn five_hundred_nodes() -> muster::ui::UiView {
    use muster::ui::view::{GpuState, NodeRow, Rack};
    let racks = (0..25)
        .map(|r| Rack {
            name: format!("r{r}"),
            nodes: (0..20)
                .map(|n| NodeRow {
                    name: format!("gpu-node-{r}-{n}"),
                    cordoned: false,
                    gpus: (0..8).map(|g| if (r + n + g) % 3 == 0 { GpuState::Used } else { GpuState::Free }).collect(),
                })
                .collect(),
        })
        .collect();
    muster::ui::UiView {
        scheduler_name: "muster".into(),
        leading: true,
        grouping: Some("rack".into()),
        racks,
        ..Default::default()
    }
}
