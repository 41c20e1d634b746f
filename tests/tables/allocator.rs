//! The allocator's conformance table (tests/allocator/cases.yaml): each case is turned into
//! ordinary Kubernetes objects, scheduled by the simulator (the same conversion and engine
//! as the scheduler), and the pod's devices, or why it waits, compared with what
//! Kubernetes' structured allocator does.

use std::collections::BTreeMap;

use muster::config::Config;
use muster::sim::{load, run};
use yaml_serde::{Mapping, Value};

const DRIVER: &str = "dra.example.com";

fn get<'a>(case: &'a Value, field: &str) -> Option<&'a Value> {
    case.get(field).filter(|v| !v.is_null())
}

fn yaml(value: &Value) -> String {
    yaml_serde::to_string(value).expect("serialisable")
}

fn object(api_version: &str, kind: &str, mut body: Mapping) -> Value {
    body.insert("apiVersion".into(), api_version.into());
    body.insert("kind".into(), kind.into());
    Value::Mapping(body)
}

fn parse(text: &str) -> Value {
    yaml_serde::from_str(text).expect("valid YAML in the harness")
}

/// The case as a stream of Kubernetes objects.
fn cluster(case: &Value) -> String {
    let mut docs: Vec<Value> = Vec::new();
    let mut nodes: BTreeMap<String, Mapping> = BTreeMap::new();
    let mut add_node = |name: &str| {
        nodes.entry(name.to_string()).or_default();
    };
    if let Some(Value::Mapping(per_node)) = get(case, "nodes") {
        for (node, devices) in per_node {
            let node = node.as_str().unwrap();
            add_node(node);
            docs.push(parse(&format!(
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}-devices}}\n\
                 spec: {{driver: {DRIVER}, nodeName: {node}, pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}, devices: {}}}",
                serde_json::to_string(&devices).unwrap()
            )));
        }
    }
    for slice in get(case, "slices").and_then(Value::as_sequence).into_iter().flatten() {
        let mut slice = slice.as_mapping().unwrap().clone();
        let spec = slice.get("spec").unwrap();
        if let Some(node) = spec.get("nodeName").and_then(Value::as_str) {
            add_node(node);
        }
        for device in spec.get("devices").and_then(Value::as_sequence).into_iter().flatten() {
            if let Some(node) = device.get("nodeName").and_then(Value::as_str) {
                add_node(node);
            }
        }
        slice.remove("apiVersion");
        docs.push(object("resource.k8s.io/v1", "ResourceSlice", slice));
    }
    let labels: BTreeMap<String, Mapping> = get(case, "nodeLabels")
        .and_then(Value::as_mapping)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.as_mapping().unwrap().clone()))
        .collect();
    for node in labels.keys() {
        nodes.entry(node.clone()).or_default();
    }
    for name in nodes.keys() {
        let mut node_labels = labels.get(name).cloned().unwrap_or_default();
        node_labels.insert("kubernetes.io/hostname".into(), name.as_str().into());
        docs.push(parse(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {}}}\n\
             status: {{allocatable: {{cpu: '64', memory: 512Gi, pods: '110'}}}}",
            serde_json::to_string(&node_labels).unwrap()
        )));
    }
    let mut classes: BTreeMap<String, String> = [("gpu".to_string(), format!("device.driver == '{DRIVER}'"))].into();
    for (name, selector) in get(case, "classes").and_then(Value::as_mapping).into_iter().flatten() {
        classes.insert(name.as_str().unwrap().into(), selector.as_str().unwrap().into());
    }
    for (name, selector) in &classes {
        let selectors = if selector.is_empty() {
            "[]".to_string()
        } else {
            format!("[{{cel: {{expression: {}}}}}]", serde_json::to_string(selector).unwrap())
        };
        docs.push(parse(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {name}}}\nspec: {{selectors: {selectors}}}"
        )));
    }
    for (i, rule) in get(case, "taintRules").and_then(Value::as_sequence).into_iter().flatten().enumerate() {
        docs.push(parse(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {{name: rule-{i}}}\nspec: {}",
            serde_json::to_string(rule).unwrap()
        )));
    }
    // Devices other claims hold: an allocated claim each, reserved for some other pod.
    let mut held = Vec::new();
    for device in get(case, "inUse").and_then(Value::as_sequence).into_iter().flatten() {
        held.push((device.as_str().unwrap().to_string(), None));
    }
    for share in get(case, "inUseShares").and_then(Value::as_sequence).into_iter().flatten() {
        held.push((share["device"].as_str().unwrap().to_string(), Some(share["consumed"].clone())));
    }
    for (i, (device, consumed)) in held.into_iter().enumerate() {
        let (pool, name) = device.split_once('/').unwrap();
        let extra = match consumed {
            Some(c) => format!(
                ", shareID: 11111111-2222-4333-8444-55555555555{i}, consumedCapacity: {}",
                serde_json::to_string(&c).unwrap()
            ),
            None => String::new(),
        };
        docs.push(parse(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: held-{i}}}\n\
             spec: {{devices: {{requests: [{{name: held, exactly: {{deviceClassName: gpu}}}}]}}}}\n\
             status:\n  allocation: {{devices: {{results: [{{request: held, driver: {DRIVER}, pool: {pool}, device: {name}{extra}}}]}}}}\n\
             \x20 reservedFor: [{{resource: pods, name: other, uid: other-uid-{i}}}]"
        )));
    }
    let mut entries = Vec::new();
    for (name, spec) in get(case, "claims").and_then(Value::as_mapping).expect("every case has claims") {
        let name = name.as_str().unwrap();
        docs.push(parse(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: {name}}}\nspec: {{spec: {{devices: {}}}}}",
            serde_json::to_string(spec).unwrap()
        )));
        entries.push(format!("{{name: {name}, resourceClaimTemplateName: {name}}}"));
    }
    docs.push(parse(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: test, uid: test-uid}}\n\
         spec: {{schedulerName: muster, resourceClaims: [{}], containers: [{{name: main, image: main}}]}}",
        entries.join(", ")
    )));
    docs.iter().map(yaml).collect::<Vec<_>>().join("---\n")
}

/// What the shares of a case consumed: per device, capacity name to quantity.
type Consumed = BTreeMap<String, BTreeMap<String, String>>;

/// The case's outcome, in the table's words: Ok(node, devices) or Err(reason).
fn outcome(case: &Value) -> (Result<(String, Vec<String>), String>, Consumed) {
    let text = cluster(case);
    let mut loaded = load::load_str(&text, "case.yaml").unwrap_or_else(|e| panic!("case does not load: {e}\n{text}"));
    let report = run::run(&mut loaded.objects, &Config::default());
    let pod = report.pods.iter().find(|p| p.name == "test").expect("the pod is reported");
    // What shares consumed, per device, from the claims the pod got.
    let mut consumed = Consumed::new();
    for claim in &loaded.objects.resource_claims {
        if !claim.metadata.name.as_deref().unwrap_or("").starts_with("test-") {
            continue;
        }
        let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
        for r in results.and_then(|d| d.results.as_ref()).into_iter().flatten() {
            for (name, q) in r.consumed_capacity.iter().flatten() {
                consumed.entry(r.device.clone()).or_default().insert(name.clone(), q.0.clone());
            }
        }
    }
    let result = match &pod.node {
        Some(node) => {
            let mut devices: Vec<String> =
                pod.devices.iter().map(|d| format!("{} {} {}", d.claim, d.request, d.device)).collect();
            devices.sort();
            Ok((node.clone(), devices))
        }
        None => Err(pod.reason.clone().unwrap_or_default()),
    };
    (result, consumed)
}

fn quantity(text: &str) -> muster::quantity::Quantity {
    muster::quantity::Quantity::parse(text).expect("a quantity")
}

#[test]
fn the_allocator_does_what_kubernetes_structured_allocator_does() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/allocator/cases.yaml")).unwrap();
    let cases: Vec<Value> = yaml_serde::from_str(&text).expect("the table parses");
    assert!(cases.len() >= 30, "the table has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let (got, consumed) = outcome(case);
        let problem = match (get(case, "expect"), get(case, "waits"), &got) {
            (Some(expect), None, Ok((node, devices))) => {
                let mut want: Vec<String> =
                    expect["devices"].as_sequence().unwrap().iter().map(|d| d.as_str().unwrap().to_string()).collect();
                want.sort();
                let mut problem = None;
                if node != expect["node"].as_str().unwrap() || *devices != want {
                    problem =
                        Some(format!("expected {} {want:?}, got {node} {devices:?}", expect["node"].as_str().unwrap()));
                }
                for (device, amounts) in get(expect, "consumed").and_then(Value::as_mapping).into_iter().flatten() {
                    for (capacity, amount) in amounts.as_mapping().unwrap() {
                        let got =
                            consumed.get(device.as_str().unwrap()).and_then(|c| c.get(capacity.as_str().unwrap()));
                        if got.map(|g| quantity(g)) != Some(quantity(amount.as_str().unwrap())) {
                            problem =
                                Some(format!("expected {device:?} to consume {amount:?} {capacity:?}, got {got:?}"));
                        }
                    }
                }
                problem
            }
            (None, Some(waits), Err(reason)) => (!reason.contains(waits.as_str().unwrap()))
                .then(|| format!("expected a wait with {waits:?}, got {reason:?}")),
            (_, _, got) => Some(format!("got {got:?}")),
        };
        if let Some(problem) = problem {
            failures.push(format!("{name}: {problem}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
