use super::*;
use crate::ui::view::{
    Fragmentation, FragmentationRow, GpuState, NodeRow, QueueFigures, QueueRow, Rack, UiView, WaitingGang,
};

/// GPU squares drawn.
fn squares(html: &str) -> usize {
    GpuState::ALL.iter().map(|s| html.matches(&format!("<rect class=\"{}\"", s.word())).count()).sum()
}

fn gpu_figures(quota: &str, allocated: &str, fill: f64) -> QueueFigures {
    QueueFigures {
        resource: "nvidia.com/gpu".into(),
        quota: quota.into(),
        fair_share: "16".into(),
        allocated: allocated.into(),
        requested: "32".into(),
        fill,
    }
}

/// A cluster of `racks` racks of `nodes` nodes of 8 GPUs, a queue tree and a waiting gang.
pub(crate) fn view(racks: usize, nodes: usize) -> UiView {
    let states = [GpuState::Used, GpuState::Used, GpuState::Shared, GpuState::Held, GpuState::Tainted];
    UiView {
        at: 1_800_000_000,
        scheduler_name: "muster".into(),
        leading: true,
        queues: vec![
            QueueRow {
                name: "research".into(),
                depth: 0,
                resources: vec![gpu_figures("24", "20", 0.8)],
                ..Default::default()
            },
            QueueRow {
                name: "team-a".into(),
                depth: 1,
                pending_gangs: 1,
                running_gangs: 2,
                resources: vec![gpu_figures("8", "12", 1.5)],
                ..Default::default()
            },
        ],
        waiting: vec![WaitingGang {
            gang: "gang ml/train<b>".into(),
            namespace: "ml".into(),
            queue: "team-a".into(),
            min_member: 4,
            pods: 4,
            waiting_seconds: 4000,
            reason: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu; gang ml/train needs 4 pods at once, 1 fit"
                .into(),
            nearest: Some("rack r1 has 14 of the 32 GPUs needed".into()),
        }],
        more_waiting: 0,
        grouping: Some("rack".into()),
        racks: (0..racks)
            .map(|r| Rack {
                name: format!("r{r}"),
                nodes: (0..nodes)
                    .map(|n| NodeRow {
                        name: format!("gpu-node-{r}-{n}"),
                        cordoned: n == 1,
                        gpus: (0..8)
                            .map(|g| if g < 5 && (n + g) % 3 == 0 { states[g] } else { GpuState::Free })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
        fragmentation: Fragmentation {
            rows: vec![FragmentationRow { name: "cluster".into(), gpus: 16, free: 9, ..Default::default() }],
            expected: None,
        },
    }
}

#[test]
fn the_page_shows_queue_figures_waiting_gangs_and_every_gpu() {
    let html = page(&view(2, 3));
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"), "reloads itself");
    assert!(html.contains("<tr data-queue=\"team-a\" data-resource=\"nvidia.com/gpu\">"), "{html}");
    assert!(html.contains("<td class=\"num quota\">8</td>"));
    assert!(html.contains("<td class=\"num allocated\">12</td>"));
    assert!(html.contains("2 Insufficient nvidia.com/gpu; gang ml/train needs 4 pods at once, 1 fit"));
    assert!(html.contains("rack r1 has 14 of the 32 GPUs needed"));
    assert!(html.contains("1h6m"), "how long it waits");
    assert_eq!(squares(&html), 2 * 3 * 8, "one square per GPU");
    assert!(html.contains("<title>gpu-node-0-1 (cordoned)"));
    assert!(html.contains("<b id=\"gpus-tainted\">"));
    // Nothing runs and nothing is fetched: no script, no link out.
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));
}

#[test]
fn names_and_reasons_are_escaped() {
    let mut v = view(1, 1);
    v.waiting[0].reason = "needs <img src=x onerror=alert(1)> & \"quotes\"".into();
    v.racks[0].nodes[0].name = "n\"><script>".into();
    let html = page(&v);
    assert!(html.contains("needs &lt;img src=x onerror=alert(1)&gt; &amp; &quot;quotes&quot;"));
    assert!(html.contains("gang ml/train&lt;b&gt;"));
    assert!(!html.contains("<img") && !html.contains("<script>") && !html.contains("<b>"), "{html}");
}

#[test]
fn an_empty_cluster_says_so() {
    let html = page(&UiView { scheduler_name: "muster".into(), ..Default::default() });
    assert!(html.contains("No Queue objects"));
    assert!(html.contains("No gang waits."));
    assert!(html.contains("No node is scheduled by this scheduler."));
    assert!(not_yet().contains("No figures yet"));
}

#[test]
fn five_hundred_nodes_of_eight_gpus_make_a_page_of_reasonable_size() {
    let started = std::time::Instant::now();
    let html = page(&view(25, 20));
    let elapsed = started.elapsed();
    assert_eq!(squares(&html), 500 * 8);
    // About 70 bytes a GPU: a page a browser loads at once (the bench measures the time).
    assert!(html.len() < 600_000, "{} bytes", html.len());
    // Far above what it takes (about a millisecond in release, a few in a test build).
    assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
}

#[test]
fn durations_are_short() {
    assert_eq!(duration(42), "42s");
    assert_eq!(duration(600), "10m");
    assert_eq!(duration(12_000), "3h20m");
    assert_eq!(duration(190_000), "2d4h");
}
