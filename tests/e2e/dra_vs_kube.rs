//! Muster's allocator against the real kube-scheduler, on the same API server and the same
//! objects, one scheduler at a time: on generated and hand-written scenarios (one pod and
//! its claim, on nodes of its own), both must agree on whether the pod can be scheduled,
//! and every allocation either makes must satisfy every selector, count and constraint, as
//! an independent checker here, which shares no code with the allocator, verifies.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::builders;
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::wait::{node_of, unschedulable_message};
use crate::support::{TestCluster, muster as scheduler};

const PRODUCTS: [&str; 3] = ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA L4"];
const ROOTS: [&str; 2] = ["pci-a", "pci-b"];
const VERSIONS: [&str; 3] = ["535.104.5", "550.54.15", "580.95.5"];

/// One device, as the checker knows it.
#[derive(Clone, Debug)]
struct Dev {
    name: String,
    memory_gi: u32,
    product: &'static str,
    /// Negative: not published (a driver version that no longer writes it).
    index: i64,
    root: &'static str,
    version: &'static str,
    tainted: bool,
}

/// A selector the checker can evaluate itself, and that is written in CEL for the schedulers.
#[derive(Clone, Debug)]
enum Pred {
    MemoryAtLeast(u32),
    Product(&'static str),
    IndexBelow(i64),
    VersionAbove(&'static str),
    Root(&'static str),
    ProductContains(&'static str),
}

fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap()).collect()
}

impl Pred {
    fn cel(&self, driver: &str) -> String {
        let a = format!(r#"device.attributes["{driver}"]"#);
        match self {
            Pred::MemoryAtLeast(gi) => {
                format!(r#"device.capacity["{driver}"].memory.compareTo(quantity("{gi}Gi")) >= 0"#)
            }
            Pred::Product(p) => format!(r#"{a}.productName == "{p}""#),
            Pred::IndexBelow(i) => format!("{a}.index < {i}"),
            Pred::VersionAbove(v) => format!(r#"{a}.driverVersion.isGreaterThan(semver("{v}"))"#),
            Pred::Root(r) => format!(r#"device.attributes["resource.kubernetes.io"].pcieRoot == "{r}""#),
            Pred::ProductContains(s) => format!(r#"{a}.productName.lowerAscii().contains("{}")"#, s.to_lowercase()),
        }
    }

    fn holds(&self, d: &Dev) -> bool {
        match self {
            Pred::MemoryAtLeast(gi) => d.memory_gi >= *gi,
            Pred::Product(p) => d.product == *p,
            Pred::IndexBelow(i) => d.index >= 0 && d.index < *i,
            Pred::VersionAbove(v) => version_key(d.version) > version_key(v),
            Pred::Root(r) => d.root == *r,
            Pred::ProductContains(s) => d.product.to_lowercase().contains(&s.to_lowercase()),
        }
    }
}

#[derive(Clone, Debug)]
enum Mode {
    Count(u32),
    All,
}

/// One way to satisfy a request (`exactly`, or an entry of `firstAvailable`).
#[derive(Clone, Debug)]
struct Alt {
    preds: Vec<Pred>,
    mode: Mode,
    tolerate: bool,
}

#[derive(Clone, Debug)]
struct Req {
    name: String,
    /// One: `exactly`; more: `firstAvailable`.
    alts: Vec<Alt>,
}

#[derive(Clone, Debug)]
enum Constraint {
    SameRoot,
    DistinctIndex,
}

#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    nodes: Vec<Vec<Dev>>,
    requests: Vec<Req>,
    constraint: Option<Constraint>,
}

/// A small deterministic generator, so that a failing scenario can be run again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

fn devices(rng: &mut Rng, count: usize) -> Vec<Dev> {
    (0..count)
        .map(|i| {
            let product = rng.pick(&PRODUCTS);
            Dev {
                name: format!("gpu-{i}"),
                memory_gi: match product {
                    "NVIDIA A100-SXM4-40GB" => 40,
                    "NVIDIA H100 80GB HBM3" => 80,
                    _ => 24,
                },
                product,
                index: i as i64,
                root: rng.pick(&ROOTS),
                version: rng.pick(&VERSIONS),
                tainted: rng.below(6) == 0,
            }
        })
        .collect()
}

fn pred(rng: &mut Rng) -> Pred {
    match rng.below(6) {
        0 => Pred::MemoryAtLeast(rng.pick(&[24, 40, 80, 100])),
        1 => Pred::Product(rng.pick(&PRODUCTS)),
        2 => Pred::IndexBelow(rng.below(5) as i64 + 1),
        3 => Pred::VersionAbove(rng.pick(&["540.0.0", "560.0.0"])),
        4 => Pred::Root(rng.pick(&ROOTS)),
        _ => Pred::ProductContains(rng.pick(&["h100", "a100", "l4"])),
    }
}

fn alt(rng: &mut Rng) -> Alt {
    let preds = (0..rng.below(3)).map(|_| pred(rng)).collect();
    let mode = if rng.below(7) == 0 { Mode::All } else { Mode::Count(1 + rng.below(3) as u32) };
    Alt { preds, mode, tolerate: rng.below(3) == 0 }
}

fn generated(count: usize) -> Vec<Scenario> {
    let mut rng = Rng(0x5eed);
    (0..count)
        .map(|i| {
            let nodes = (0..1 + rng.below(2)).map(|_| {
                let n = 2 + rng.below(4) as usize;
                devices(&mut rng, n)
            });
            let nodes: Vec<Vec<Dev>> = nodes.collect();
            let requests = (0..1 + rng.below(2))
                .map(|r| Req {
                    name: format!("r{r}"),
                    alts: (0..if rng.below(4) == 0 { 2 } else { 1 }).map(|_| alt(&mut rng)).collect(),
                })
                .collect();
            let constraint = match rng.below(5) {
                0 => Some(Constraint::SameRoot),
                1 => Some(Constraint::DistinctIndex),
                _ => None,
            };
            Scenario { name: format!("gen{i}"), nodes, requests, constraint }
        })
        .collect()
}

fn dev(name: &str, memory_gi: u32, product: &'static str, index: i64, root: &'static str, tainted: bool) -> Dev {
    Dev { name: name.into(), memory_gi, product, index, root, version: "580.95.5", tainted }
}

fn one(preds: Vec<Pred>, mode: Mode) -> Vec<Req> {
    vec![Req { name: "gpu".into(), alts: vec![Alt { preds, mode, tolerate: false }] }]
}

fn hand_written() -> Vec<Scenario> {
    let h100 = PRODUCTS[1];
    let a100 = PRODUCTS[0];
    let s = |name: &str, nodes: Vec<Vec<Dev>>, requests: Vec<Req>, constraint| Scenario {
        name: name.into(),
        nodes,
        requests,
        constraint,
    };
    vec![
        s(
            "guide-80gb",
            vec![vec![dev("gpu-0", 40, a100, 0, "pci-a", false)], vec![dev("gpu-0", 80, h100, 0, "pci-a", false)]],
            one(vec![Pred::MemoryAtLeast(80)], Mode::Count(1)),
            None,
        ),
        s(
            "no-80gb-anywhere",
            vec![vec![dev("gpu-0", 40, a100, 0, "pci-a", false), dev("gpu-1", 40, a100, 1, "pci-a", false)]],
            one(vec![Pred::MemoryAtLeast(80)], Mode::Count(1)),
            None,
        ),
        s(
            "same-root-needs-backtracking",
            vec![vec![
                dev("gpu-0", 80, h100, 0, "pci-a", false),
                dev("gpu-1", 80, h100, 1, "pci-b", false),
                dev("gpu-2", 80, h100, 2, "pci-b", false),
            ]],
            one(vec![], Mode::Count(2)),
            Some(Constraint::SameRoot),
        ),
        s(
            "same-root-impossible",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", false), dev("gpu-1", 80, h100, 1, "pci-b", false)]],
            one(vec![], Mode::Count(2)),
            Some(Constraint::SameRoot),
        ),
        s(
            "tainted-only-device",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", true)]],
            one(vec![], Mode::Count(1)),
            None,
        ),
        s(
            "tainted-but-tolerated",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", true)]],
            vec![Req { name: "gpu".into(), alts: vec![Alt { preds: vec![], mode: Mode::Count(1), tolerate: true }] }],
            None,
        ),
        s(
            "all-with-a-tainted-match",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", false), dev("gpu-1", 80, h100, 1, "pci-a", true)]],
            one(vec![], Mode::All),
            None,
        ),
        s(
            "all-of-the-h100s",
            vec![vec![
                dev("gpu-0", 80, h100, 0, "pci-a", false),
                dev("gpu-1", 40, a100, 1, "pci-a", false),
                dev("gpu-2", 80, h100, 2, "pci-b", false),
            ]],
            one(vec![Pred::Product(h100)], Mode::All),
            None,
        ),
        s(
            "first-available-falls-back",
            vec![vec![dev("gpu-0", 40, a100, 0, "pci-a", false), dev("gpu-1", 40, a100, 1, "pci-a", false)]],
            vec![Req {
                name: "gpu".into(),
                alts: vec![
                    Alt { preds: vec![Pred::MemoryAtLeast(80)], mode: Mode::Count(1), tolerate: false },
                    Alt { preds: vec![Pred::MemoryAtLeast(40)], mode: Mode::Count(2), tolerate: false },
                ],
            }],
            None,
        ),
        s(
            "count-across-nodes-does-not-add-up",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", false)], vec![dev("gpu-0", 80, h100, 0, "pci-a", false)]],
            one(vec![], Mode::Count(2)),
            None,
        ),
        s(
            // A driver upgrade half rolled out: the selector fails at run time on the node
            // whose driver no longer publishes index. Kubernetes aborts the allocation on
            // the error rather than use the node where it evaluates.
            "index-on-one-node-only",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", false)], vec![dev("gpu-0", 80, h100, -1, "pci-a", false)]],
            one(vec![Pred::IndexBelow(8)], Mode::Count(1)),
            None,
        ),
        s(
            "distinct-index-two-requests",
            vec![vec![dev("gpu-0", 80, h100, 0, "pci-a", false), dev("gpu-1", 80, h100, 1, "pci-b", false)]],
            vec![
                Req { name: "a".into(), alts: vec![Alt { preds: vec![], mode: Mode::Count(1), tolerate: false }] },
                Req { name: "b".into(), alts: vec![Alt { preds: vec![], mode: Mode::Count(1), tolerate: false }] },
            ],
            Some(Constraint::DistinctIndex),
        ),
    ]
}

/// What the checker finds wrong with an allocation on a node (empty: nothing).
fn check(scenario: &Scenario, node: usize, results: &[(String, String)]) -> Vec<String> {
    let devices = &scenario.nodes[node];
    let find = |name: &str| devices.iter().find(|d| d.name == name);
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let mut chosen: Vec<&Dev> = Vec::new();
    for request in &scenario.requests {
        let mine: Vec<(&str, &str)> = results
            .iter()
            .filter(|(r, _)| r == &request.name || r.starts_with(&format!("{}/", request.name)))
            .map(|(r, d)| (r.as_str(), d.as_str()))
            .collect();
        let Some((result_name, _)) = mine.first() else {
            problems.push(format!("request {} got no device", request.name));
            continue;
        };
        let alt = match result_name.split_once('/') {
            Some((_, sub)) => &request.alts[sub.trim_start_matches('s').parse::<usize>().unwrap()],
            None => &request.alts[0],
        };
        for (_, device) in &mine {
            let Some(d) = find(device) else {
                problems.push(format!("device {device} is not on the pod's node"));
                continue;
            };
            if !used.insert(device.to_string()) {
                problems.push(format!("device {device} was given twice"));
            }
            for p in &alt.preds {
                if !p.holds(d) {
                    problems.push(format!("device {device} does not satisfy {p:?}"));
                }
            }
            if d.tainted && !alt.tolerate {
                problems.push(format!("device {device} is tainted and the request does not tolerate it"));
            }
            chosen.push(d);
        }
        match alt.mode {
            Mode::Count(n) if mine.len() != n as usize => {
                problems.push(format!("request {} got {} devices, asked for {n}", request.name, mine.len()));
            }
            Mode::All => {
                let all: BTreeSet<&str> =
                    devices.iter().filter(|d| alt.preds.iter().all(|p| p.holds(d))).map(|d| d.name.as_str()).collect();
                let got: BTreeSet<&str> = mine.iter().map(|(_, d)| *d).collect();
                if all != got {
                    problems.push(format!("request {} asked for all of {all:?}, got {got:?}", request.name));
                }
            }
            _ => {}
        }
    }
    match scenario.constraint {
        Some(Constraint::SameRoot) if chosen.iter().map(|d| d.root).collect::<BTreeSet<_>>().len() > 1 => {
            problems.push("devices on different PCIe roots".into());
        }
        Some(Constraint::DistinctIndex)
            if chosen.iter().map(|d| d.index).collect::<BTreeSet<_>>().len() < chosen.len() =>
        {
            problems.push("devices with the same index".into());
        }
        _ => {}
    }
    problems
}

/// Whether the checker can find any allocation at all: a brute force over the node's devices.
fn fits_somewhere(scenario: &Scenario) -> bool {
    fn assign(s: &Scenario, node: usize, request: usize, chosen: &mut Vec<(String, String)>) -> bool {
        if request == s.requests.len() {
            return check(s, node, chosen).is_empty();
        }
        let req = &s.requests[request];
        for (a, alt) in req.alts.iter().enumerate() {
            let result = if req.alts.len() > 1 { format!("{}/s{a}", req.name) } else { req.name.clone() };
            let devices: Vec<&Dev> = s.nodes[node].iter().collect();
            match alt.mode {
                Mode::All => {
                    let base = chosen.len();
                    for d in devices.iter().filter(|d| alt.preds.iter().all(|p| p.holds(d))) {
                        chosen.push((result.clone(), d.name.clone()));
                    }
                    if chosen.len() > base && assign(s, node, request + 1, chosen) {
                        return true;
                    }
                    chosen.truncate(base);
                }
                Mode::Count(n) => {
                    let n = n as usize;
                    let m = devices.len();
                    // Every n-subset of the node's devices.
                    for mask in 0u32..(1 << m) {
                        if mask.count_ones() as usize != n {
                            continue;
                        }
                        let base = chosen.len();
                        for (i, d) in devices.iter().enumerate() {
                            if mask & (1 << i) != 0 {
                                chosen.push((result.clone(), d.name.clone()));
                            }
                        }
                        if assign(s, node, request + 1, chosen) {
                            return true;
                        }
                        chosen.truncate(base);
                    }
                }
            }
        }
        false
    }
    (0..scenario.nodes.len()).any(|node| assign(scenario, node, 0, &mut Vec::new()))
}

struct Names {
    driver: String,
    class: String,
}

fn node_name(cluster: &TestCluster, scenario: &Scenario, i: usize) -> String {
    cluster.name(&format!("{}-n{i}", scenario.name))
}

fn claim_spec(scenario: &Scenario, names: &Names) -> Value {
    let requests: Vec<Value> = scenario
        .requests
        .iter()
        .map(|r| {
            let fields = |alt: &Alt| {
                let mut v = json!({"deviceClassName": names.class});
                let selectors: Vec<Value> =
                    alt.preds.iter().map(|p| json!({"cel": {"expression": p.cel(&names.driver)}})).collect();
                if !selectors.is_empty() {
                    v["selectors"] = json!(selectors);
                }
                match alt.mode {
                    Mode::Count(n) => v["count"] = json!(n),
                    Mode::All => v["allocationMode"] = json!("All"),
                }
                if alt.tolerate {
                    v["tolerations"] = json!([{"key": "gpu.example.com/xid", "operator": "Exists"}]);
                }
                v
            };
            if r.alts.len() == 1 {
                json!({"name": r.name, "exactly": fields(&r.alts[0])})
            } else {
                let subs: Vec<Value> = r
                    .alts
                    .iter()
                    .enumerate()
                    .map(|(a, alt)| {
                        let mut f = fields(alt);
                        f["name"] = json!(format!("s{a}"));
                        f
                    })
                    .collect();
                json!({"name": r.name, "firstAvailable": subs})
            }
        })
        .collect();
    let mut devices = json!({"requests": requests});
    match scenario.constraint {
        Some(Constraint::SameRoot) => {
            devices["constraints"] = json!([{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
        }
        Some(Constraint::DistinctIndex) => {
            devices["constraints"] = json!([{"distinctAttribute": format!("{}/index", names.driver)}])
        }
        None => {}
    }
    json!({"devices": devices})
}

async fn create_cluster_objects(cluster: &TestCluster, scenarios: &[Scenario], names: &Names) {
    let slices = cluster.cluster_api::<ResourceSlice>();
    for s in scenarios {
        for (i, devs) in s.nodes.iter().enumerate() {
            let node = node_name(cluster, s, i);
            cluster
                .create_node(&builders::node(&node, 64, 512, 0, &[(TEST_LABEL, &cluster.id), ("scenario", &s.name)]))
                .await;
            let devices: Vec<Value> = devs
                .iter()
                .map(|d| {
                    let mut v = json!({
                        "name": d.name,
                        "attributes": {
                            "productName": {"string": d.product},
                            "driverVersion": {"version": d.version},
                            "resource.kubernetes.io/pcieRoot": {"string": d.root},
                        },
                        "capacity": {"memory": {"value": format!("{}Gi", d.memory_gi)}},
                    });
                    if d.index >= 0 {
                        v["attributes"]["index"] = json!({"int": d.index});
                    }
                    if d.tainted {
                        v["taints"] = json!([{"key": "gpu.example.com/xid", "value": "79", "effect": "NoSchedule"}]);
                    }
                    v
                })
                .collect();
            let slice: ResourceSlice = serde_json::from_value(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{node}-gpus")},
                "spec": {"driver": names.driver, "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
            }))
            .unwrap();
            cluster.create(&slices, &slice).await;
        }
    }
    let class = builders::device_class(&names.class, &names.driver);
    cluster.create(&cluster.cluster_api::<DeviceClass>(), &class).await;
}

/// Creates one claim and one pod per scenario for `scheduler`; pods stay on their nodes.
async fn create_pods(cluster: &TestCluster, scenarios: &[Scenario], names: &Names, prefix: &str, scheduler: &str) {
    let claims = cluster.api::<ResourceClaim>();
    let pods = cluster.api::<Pod>();
    for s in scenarios {
        let name = format!("{prefix}-{}", s.name);
        let claim: ResourceClaim = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": claim_spec(s, names),
        }))
        .unwrap();
        cluster.create(&claims, &claim).await;
        let mut pod = builders::pod(&name, scheduler, 0, &[("scenario", &s.name)]);
        let spec = pod.spec.as_mut().unwrap();
        spec.node_selector = Some([("scenario".to_string(), s.name.clone())].into());
        spec.resource_claims =
            Some(vec![serde_json::from_value(json!({"name": "gpu", "resourceClaimName": name})).unwrap()]);
        cluster.create(&pods, &pod).await;
    }
}

/// Per scenario: the node index and devices (request, device) if bound, None if the
/// scheduler said the pod cannot be scheduled.
async fn outcomes(
    cluster: &TestCluster,
    scenarios: &[Scenario],
    prefix: &str,
) -> BTreeMap<String, Option<(usize, Vec<(String, String)>)>> {
    let pods = cluster.api::<Pod>();
    let claims = cluster.api::<ResourceClaim>();
    within(120, &format!("every {prefix} pod bound or marked Unschedulable"), async {
        loop {
            let list = pods.list(&ListParams::default()).await.expect("list pods").items;
            let decided = scenarios.iter().all(|s| {
                let name = format!("{prefix}-{}", s.name);
                list.iter().any(|p| {
                    p.metadata.name.as_deref() == Some(name.as_str())
                        && (node_of(p).is_some() || unschedulable_message(p).is_some() || scheduler_error(p))
                })
            });
            if decided {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    // A pod is bound only once its claim is written; give the writes a moment to be visible.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let list = pods.list(&ListParams::default()).await.expect("list pods").items;
    let mut out = BTreeMap::new();
    for s in scenarios {
        let name = format!("{prefix}-{}", s.name);
        let pod = list.iter().find(|p| p.metadata.name.as_deref() == Some(name.as_str())).unwrap();
        let outcome = match node_of(pod) {
            None => None,
            Some(node) => {
                let index = (0..s.nodes.len()).find(|&i| node_name(cluster, s, i) == node).expect("one of its nodes");
                let claim = claims.get(&name).await.expect("the claim");
                let results = claim
                    .status
                    .and_then(|st| st.allocation)
                    .and_then(|a| a.devices)
                    .and_then(|d| d.results)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|r| (r.request, r.device))
                    .collect();
                Some((index, results))
            }
        };
        out.insert(s.name.clone(), outcome);
    }
    out
}

/// Whether the scheduler gave up on the pod with an error rather than a verdict, as
/// kube-scheduler does when a selector fails at run time (reason `SchedulerError`).
fn scheduler_error(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| {
        c.iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("SchedulerError"))
    })
}

/// Removes one scheduler's pods and claims so the next starts from the same free devices.
async fn clear(cluster: &TestCluster, prefix: &str) {
    let pods = cluster.api::<Pod>();
    let claims = cluster.api::<ResourceClaim>();
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let name = pod.metadata.name.unwrap();
        if name.starts_with(prefix) {
            let _ = pods.delete(&name, &now).await;
        }
    }
    for claim in claims.list(&ListParams::default()).await.unwrap().items {
        let name = claim.metadata.name.unwrap();
        if name.starts_with(prefix) {
            let _ = claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
                .await;
            let _ = claims.delete(&name, &now).await;
        }
    }
    within(60, "the previous scheduler's claims gone", async {
        while claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)))
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn muster_and_kube_scheduler_agree_on_every_scenario_and_both_allocate_correctly() {
    let cluster = TestCluster::new("vs-kube").await;
    let names = Names { driver: format!("{}.gpu.example.com", cluster.id), class: cluster.name("gpu") };
    let mut scenarios = hand_written();
    scenarios.extend(generated(30));
    create_cluster_objects(&cluster, &scenarios, &names).await;

    // Muster first, alone.
    create_pods(&cluster, &scenarios, &names, "m", &cluster.scheduler_name).await;
    let muster = {
        let _running = scheduler::start(&cluster, scheduler::config(&cluster), None);
        outcomes(&cluster, &scenarios, "m").await
    };
    clear(&cluster, "m").await;

    // Then the real kube-scheduler, alone, on the same objects.
    let kube_name = format!("kube-{}", cluster.id);
    cluster.control_plane.start_kube_scheduler(&kube_name);
    create_pods(&cluster, &scenarios, &names, "k", &kube_name).await;
    let kube = outcomes(&cluster, &scenarios, "k").await;

    let mut problems = Vec::new();
    let mut schedulable = 0;
    for s in &scenarios {
        let (m, k) = (&muster[&s.name], &kube[&s.name]);
        if m.is_some() != k.is_some() {
            problems.push(format!(
                "{}: Muster {}, kube-scheduler {} (the checker's brute force says {})\n    {s:?}",
                s.name,
                if m.is_some() { "schedules it" } else { "does not" },
                if k.is_some() { "schedules it" } else { "does not" },
                if fits_somewhere(s) { "it fits" } else { "it does not fit" },
            ));
        }
        for (who, outcome) in [("Muster", m), ("kube-scheduler", k)] {
            if let Some((node, results)) = outcome {
                for p in check(s, *node, results) {
                    problems.push(format!("{}: {who}'s allocation {results:?}: {p}", s.name));
                }
            }
        }
        schedulable += m.is_some() as usize;
    }
    let report = format!(
        "DRA side by side, one scheduler at a time on the same objects: Muster and kube-scheduler on {} scenarios \
         ({} hand-written, {} generated): {} schedulable, {} not; {} disagreements or incorrect allocations\n",
        scenarios.len(),
        hand_written().len(),
        scenarios.len() - hand_written().len(),
        schedulable,
        scenarios.len() - schedulable,
        problems.len()
    );
    eprint!("{report}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("side-by-side-dra.txt"), &report).expect("failed to record the side-by-side result");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The generator must exercise both answers.
    assert!(
        schedulable >= 10 && scenarios.len() - schedulable >= 5,
        "{schedulable} of {} schedulable",
        scenarios.len()
    );
}
