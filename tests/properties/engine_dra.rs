//! The engine's invariants with DRA devices, through the simulator (the shell's conversion
//! and the engine, as the scheduler runs them) on random clusters: nodes with ResourceSlices
//! of GPUs of two sizes and models, and gangs whose pods each claim some GPUs through a
//! ResourceClaimTemplate, with or without a selector. No device is given to two pods; a
//! placed pod has exactly the devices its claim asks for, on its own node, matching its
//! selector; no node goes over its CPU; every gang has none or at least minMember pods placed.

use std::collections::{HashMap, HashSet};

use muster::config::Config;
use muster::sim::load::load_str;
use muster::sim::run::{SimOptions, run_with};
use proptest::prelude::*;

const DRIVER: &str = "gpu.example.com";
const NODE_CPUS: i64 = 16;

/// A device: model "A" or "B", 40 or 80 GiB.
#[derive(Clone, Debug)]
struct Gpu {
    model_a: bool,
    big: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Selector {
    Any,
    Big,
    ModelA,
}

impl Selector {
    fn cel(self) -> Option<String> {
        match self {
            Selector::Any => None,
            Selector::Big => Some(format!("device.capacity[\"{DRIVER}\"].memory.compareTo(quantity(\"80Gi\")) >= 0")),
            Selector::ModelA => Some(format!("device.attributes[\"{DRIVER}\"].model == \"A\"")),
        }
    }

    fn accepts(self, gpu: &Gpu) -> bool {
        match self {
            Selector::Any => true,
            Selector::Big => gpu.big,
            Selector::ModelA => gpu.model_a,
        }
    }
}

#[derive(Clone, Debug)]
struct GangSpec {
    min: usize,
    pods: usize,
    /// GPUs per pod, and which.
    count: usize,
    selector: Selector,
    cpus: i64,
    created: i64,
}

#[derive(Clone, Debug)]
struct Cluster {
    nodes: Vec<Vec<Gpu>>,
    gangs: Vec<GangSpec>,
}

fn cluster() -> impl Strategy<Value = Cluster> {
    let gpu = (any::<bool>(), any::<bool>()).prop_map(|(model_a, big)| Gpu { model_a, big });
    let gang = (
        (1usize..4, 0usize..3),
        1usize..4,
        prop_oneof![Just(Selector::Any), Just(Selector::Big), Just(Selector::ModelA)],
        1i64..9,
        0i64..100,
    )
        .prop_map(|((min, extra), count, selector, cpus, created)| GangSpec {
            min,
            pods: min + extra,
            count,
            selector,
            cpus,
            created,
        });
    (proptest::collection::vec(proptest::collection::vec(gpu, 0..7), 1..4), proptest::collection::vec(gang, 1..6))
        .prop_map(|(nodes, gangs)| Cluster { nodes, gangs })
}

fn yaml(cluster: &Cluster) -> String {
    let mut docs = vec![format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: gpu}}\n\
         spec: {{selectors: [{{cel: {{expression: \"device.driver == '{DRIVER}'\"}}}}]}}"
    )];
    for (n, gpus) in cluster.nodes.iter().enumerate() {
        docs.push(format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{n}, labels: {{kubernetes.io/hostname: node-{n}}}}}\n\
             status: {{allocatable: {{cpu: \"{NODE_CPUS}\", memory: 256Gi, pods: \"110\"}}}}"
        ));
        let devices: Vec<String> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                format!(
                    "{{name: gpu-{i}, attributes: {{model: {{string: {}}}}}, capacity: {{memory: {{value: {}}}}}}}",
                    if g.model_a { "A" } else { "B" },
                    if g.big { "80Gi" } else { "40Gi" }
                )
            })
            .collect();
        docs.push(format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: node-{n}-gpus}}\n\
             spec: {{driver: {DRIVER}, nodeName: node-{n}, pool: {{name: node-{n}, generation: 1, resourceSliceCount: 1}}, devices: [{}]}}",
            devices.join(", ")
        ));
    }
    for (g, gang) in cluster.gangs.iter().enumerate() {
        let selectors = gang.selector.cel().map_or(String::new(), |cel| {
            format!(", selectors: [{{cel: {{expression: {}}}}}]", serde_json::to_string(&cel).unwrap())
        });
        docs.push(format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: gpus-{g}, namespace: ml}}\n\
             spec: {{spec: {{devices: {{requests: [{{name: gpu, exactly: {{deviceClassName: gpu, count: {}{selectors}}}}}]}}}}}}",
            gang.count
        ));
        docs.push(format!(
            "apiVersion: muster.dev/v1alpha1\nkind: PodGroup\n\
             metadata: {{name: gang-{g}, namespace: ml, creationTimestamp: \"2026-01-01T00:{:02}:{:02}Z\"}}\n\
             spec: {{minMember: {}}}",
            gang.created / 60,
            gang.created % 60,
            gang.min
        ));
        for p in 0..gang.pods {
            docs.push(format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: gang-{g}-{p}, namespace: ml, labels: {{muster.dev/pod-group: gang-{g}}}}}\n\
                 spec:\n  schedulerName: muster\n  resourceClaims: [{{name: gpu, resourceClaimTemplateName: gpus-{g}}}]\n  \
                 containers: [{{name: c, image: train, resources: {{requests: {{cpu: \"{}\"}}, claims: [{{name: gpu}}]}}}}]",
                gang.cpus
            ));
        }
    }
    docs.join("\n---\n")
}

proptest! {
    #![proptest_config(super::cases(300))]

    #[test]
    fn no_device_is_given_twice_and_gangs_stay_whole(cluster in cluster()) {
        let text = yaml(&cluster);
        let mut loaded = load_str(&text, "generated.yaml").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let report = run_with(&mut loaded.objects, &Config::default(), &SimOptions { now: None, cycles: 5 });
        let mut given: HashSet<(String, String)> = HashSet::new();
        let mut cpus: HashMap<String, i64> = HashMap::new();
        let mut placed: HashMap<String, usize> = HashMap::new();
        for pod in &report.pods {
            let (gang, _) = pod.name.rsplit_once('-').expect("gang-<g>-<p>");
            let g: usize = gang.trim_start_matches("gang-").parse().expect("a gang number");
            let spec = &cluster.gangs[g];
            let Some(node) = &pod.node else {
                prop_assert!(pod.devices.is_empty(), "{} waits but holds {:?}", pod.name, pod.devices);
                continue;
            };
            *placed.entry(gang.to_string()).or_default() += 1;
            *cpus.entry(node.clone()).or_default() += spec.cpus;
            prop_assert_eq!(pod.devices.len(), spec.count, "{} got {:?}", pod.name, pod.devices);
            let n: usize = node.trim_start_matches("node-").parse().expect("a node number");
            for device in &pod.devices {
                prop_assert_eq!(&device.driver, DRIVER);
                prop_assert_eq!(&device.pool, node, "{} on {} got {:?}", pod.name, node, device);
                prop_assert!(given.insert((device.pool.clone(), device.device.clone())), "{:?} given twice", device);
                let i: usize = device.device.trim_start_matches("gpu-").parse().expect("a device number");
                let gpu = &cluster.nodes[n][i];
                prop_assert!(spec.selector.accepts(gpu), "{} got {:?} ({:?}) against {:?}", pod.name, device, gpu, spec.selector);
            }
        }
        for (node, used) in &cpus {
            prop_assert!(*used <= NODE_CPUS, "{} has {} of {} CPUs requested", node, used, NODE_CPUS);
        }
        for (g, spec) in cluster.gangs.iter().enumerate() {
            let count = placed.get(&format!("gang-{g}")).copied().unwrap_or(0);
            prop_assert!(count == 0 || count >= spec.min, "gang-{} has {} of {} pods placed", g, count, spec.min);
            let result = report.gangs.iter().find(|r| r.name == format!("gang-{g}"));
            let result = result.ok_or_else(|| TestCaseError::fail(format!("gang-{g} is not reported")))?;
            prop_assert_eq!(result.placed, count, "gang-{} reported as {:?}", g, result);
        }
    }
}
