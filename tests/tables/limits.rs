//! The limits that keep what one tenant writes from costing the scheduler without bound:
//! each one hit leaves the tenant's own pod waiting with the limit named, and every other
//! pod scheduling. Through the shell's conversion and the engine, as the scheduler runs them.

use muster::config::Config;
use muster::convert::assemble::{Memo, assemble_view};
use muster::engine::dra::selectors::SelectorCache;
use muster::engine::schedule_with;
use muster::sim::load::load_str;

const DRIVER: &str = "dra.example.com";

fn node(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}{labels}}}}}\n\
         status: {{allocatable: {{cpu: '64', memory: 512Gi, pods: '110'}}}}\n---\n"
    )
}

/// `nodes` nodes of 36 devices, four on each of nine NUMA nodes.
fn gpu_nodes(nodes: usize) -> String {
    let mut out =
        String::from("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\nspec: {}\n---\n");
    for n in 0..nodes {
        out += &node(&format!("n{n}"), "");
        let devices: Vec<String> =
            (0..36).map(|d| format!("{{name: gpu-{d}, attributes: {{numa: {{int: {}}}}}}}", d / 4)).collect();
        out += &format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: n{n}}}\n\
             spec: {{driver: {DRIVER}, nodeName: n{n}, pool: {{name: n{n}, generation: 1, resourceSliceCount: 1}}, \
             devices: [{}]}}\n---\n",
            devices.join(", ")
        );
    }
    out
}

fn pod_with_claim(name: &str, requests: usize, distinct: bool) -> String {
    let requests: Vec<String> =
        (0..requests).map(|r| format!("{{name: r{r}, exactly: {{deviceClassName: gpu}}}}")).collect();
    let constraints = if distinct { format!("[{{distinctAttribute: {DRIVER}/numa}}]") } else { "[]".into() };
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: ml}}\n\
         spec: {{devices: {{requests: [{}], constraints: {constraints}}}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\n\
         spec: {{schedulerName: muster, containers: [{{name: c, image: i}}], \
         resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]}}\n---\n",
        requests.join(", ")
    )
}

#[test]
fn a_claim_that_forces_the_worst_search_costs_its_own_pod_and_is_not_searched_again_unchanged() {
    // Ten requests for devices on ten distinct NUMA nodes, where there are nine: no node can
    // hold it, and proving that tries every arrangement of the nine.
    let mut text = pod_with_claim("greedy", 10, true);
    text += &gpu_nodes(50);
    for i in 0..10 {
        text += &pod_with_claim(&format!("plain-{i}"), 1, false);
    }
    let objects = load_str(&text, "limits.yaml").unwrap().objects;
    let config = Config::default();
    let mut memo = Memo::new(&config);
    let snapshot = assemble_view(&objects.view(), "muster", 0, &mut memo).snapshot;
    let mut selectors = SelectorCache::default();
    let reason = |outcome: &muster::engine::CycleOutcome| {
        outcome.waiting.iter().find(|w| w.gang.name == "greedy").map(ToString::to_string).unwrap_or_default()
    };

    let first = schedule_with(&snapshot, &config.cycle(), &mut selectors);
    assert_eq!(first.placements.len(), 10, "every other pod is placed: {:?}", first.waiting);
    assert!(reason(&first).contains("limits.deviceSearchStepsPerPod"), "{}", reason(&first));
    assert_eq!(selectors.searches_skipped, 0);

    // 200,000 steps a cycle, 20,000 a node: ten nodes are searched each cycle, and a node
    // searched in vain is not searched again while nothing on it changes.
    let mut skipped = Vec::new();
    let mut last = first;
    for _ in 0..5 {
        let before = selectors.searches_skipped;
        last = schedule_with(&snapshot, &config.cycle(), &mut selectors);
        assert_eq!(last.placements.len(), 10);
        skipped.push(selectors.searches_skipped - before);
    }
    assert!(skipped.windows(2).all(|w| w[1] > w[0]), "each cycle skips more nodes: {skipped:?}");
    assert!(*skipped.last().unwrap() >= 50, "every node known in the end: {skipped:?}");
    assert!(reason(&last).contains("gave up the device search after 20000 steps"), "{}", reason(&last));
}

#[test]
fn the_step_limits_are_the_configuration_s() {
    let mut text = pod_with_claim("greedy", 10, true);
    text += &gpu_nodes(2);
    let objects = load_str(&text, "limits.yaml").unwrap().objects;
    let config =
        Config::parse("limits: {deviceSearchStepsPerNode: 50, deviceSearchStepsPerPod: 60}", "muster.yaml").unwrap();
    let snapshot = assemble_view(&objects.view(), "muster", 0, &mut Memo::new(&config)).snapshot;
    let outcome = schedule_with(&snapshot, &config.cycle(), &mut SelectorCache::default());
    let why = outcome.waiting[0].to_string();
    assert!(why.contains("its 60 steps"), "{why}");
}

#[test]
fn label_keys_named_as_topology_levels_are_capped_per_cycle() {
    let mut text = node("a", ", example.com/k0: x");
    for i in 0..20 {
        text += &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: ml, \
             annotations: {{kai.scheduler/topology-required-placement: example.com/k{i}}}}}\n\
             spec: {{schedulerName: muster, containers: [{{name: c, image: i}}]}}\n---\n"
        );
    }
    let objects = load_str(&text, "levels.yaml").unwrap().objects;
    let config = Config::default();
    let out = assemble_view(&objects.view(), "muster", 0, &mut Memo::new(&config));
    assert_eq!(out.snapshot.topology.levels.len() - out.snapshot.topology.configured, 16);
    let capped: Vec<&str> = out
        .snapshot
        .gangs
        .iter()
        .filter_map(|g| g.blocked.as_deref())
        .filter(|why| why.contains("limits.adHocTopologyLevels"))
        .collect();
    assert_eq!(capped.len(), 4, "{capped:?}");
}

#[test]
fn compiled_selectors_no_claim_asks_for_any_more_are_dropped() {
    let config = Config::default();
    let mut selectors = SelectorCache::default();
    let mut memo = Memo::new(&config);
    // A namespace writes a new selector every minute, for a day.
    for minute in 0..1_440i64 {
        let mut text = gpu_nodes(1);
        text += &format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: c, namespace: ml}}\n\
             spec: {{devices: {{requests: [{{name: r, exactly: {{deviceClassName: gpu, selectors: \
             [{{cel: {{expression: 'device.attributes[\"{DRIVER}\"].numa == {minute}'}}}}]}}}}]}}}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ml}}\n\
             spec: {{schedulerName: muster, containers: [{{name: c, image: i}}], \
             resourceClaims: [{{name: gpu, resourceClaimName: c}}]}}\n"
        );
        let objects = load_str(&text, "selectors.yaml").unwrap().objects;
        let snapshot = assemble_view(&objects.view(), "muster", minute * 60, &mut memo).snapshot;
        schedule_with(&snapshot, &config.cycle(), &mut selectors);
        // Ten minutes' worth, a quarter more and 64 at the most.
        assert!(selectors.len() <= 10 + 64 + 32, "minute {minute}: {} compiled", selectors.len());
    }
}
