//! An independent checker of the rules between pods, sharing no code with Muster: given the
//! nodes and the pods where they ended up (as the API server shows them), it says which
//! placed pod breaks which rule: the node's filters (nodeSelector, required node affinity,
//! taints, cordons, CPU), host ports, required pod affinity and anti-affinity (the pod's own
//! and the other pods' against it), and DoNotSchedule topology spread.
//!
//! Spread is checked on the end state: for each domain that received a placed pod, its
//! count less the smallest count must not pass maxSkew. Counts only grow, so the last pod
//! placed in a domain under the constraint saw a count one less and a minimum no larger:
//! the end state breaks this only if some placement broke the rule.

use std::collections::BTreeMap;

use serde_json::Value;

/// A node as the checker knows it.
pub struct CheckNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Value>,
    pub unschedulable: bool,
    pub cpu_milli: i64,
}

/// A pod as the API server shows it, with where it ended up.
pub struct CheckPod {
    pub name: String,
    pub namespace: String,
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Its spec as JSON (camelCase, as the API server returns it).
    pub spec: Value,
    /// Whether the scheduler under test placed it (not a pod made bound).
    pub placed: bool,
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// Whether a label selector (matchLabels, matchExpressions) matches `labels`. A missing
/// selector matches nothing, as for affinity terms and spread constraints.
pub fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    if selector.is_null() {
        return false;
    }
    let by_label = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str()));
    by_label
        && arr(&selector["matchExpressions"]).iter().all(|e| {
            let value = labels.get(s(&e["key"]));
            let values: Vec<&str> = arr(&e["values"]).iter().map(s).collect();
            match s(&e["operator"]) {
                "In" => value.is_some_and(|v| values.contains(&v.as_str())),
                "NotIn" => value.is_none_or(|v| !values.contains(&v.as_str())),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => panic!("operator {other} in a label selector"),
            }
        })
}

/// A node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) on `labels`.
fn node_requirement(e: &Value, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(s(&e["key"]));
    let values: Vec<&str> = arr(&e["values"]).iter().map(s).collect();
    let number = |v: &str| v.parse::<i64>().ok();
    match s(&e["operator"]) {
        "In" => value.is_some_and(|v| values.contains(&v.as_str())),
        "NotIn" => value.is_none_or(|v| !values.contains(&v.as_str())),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => value.and_then(|v| number(v)).zip(number(values[0])).is_some_and(|(a, b)| a > b),
        "Lt" => value.and_then(|v| number(v)).zip(number(values[0])).is_some_and(|(a, b)| a < b),
        other => panic!("operator {other} in a node selector"),
    }
}

/// The pod's nodeSelector and required node affinity on `node`.
fn node_affinity_holds(spec: &Value, node: &CheckNode) -> bool {
    let selector = spec["nodeSelector"].as_object();
    let by_selector =
        selector.is_none_or(|m| m.iter().all(|(k, v)| node.labels.get(k).map(String::as_str) == v.as_str()));
    let terms =
        &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let by_affinity = terms.is_null()
        || arr(terms).iter().any(|t| arr(&t["matchExpressions"]).iter().all(|e| node_requirement(e, &node.labels)));
    by_selector && by_affinity
}

fn tolerates(spec: &Value, taint: &Value) -> bool {
    arr(&spec["tolerations"]).iter().any(|t| {
        let key_ok = t["key"].is_null() || s(&t["key"]).is_empty() || t["key"] == taint["key"];
        let effect_ok = t["effect"].is_null() || s(&t["effect"]).is_empty() || t["effect"] == taint["effect"];
        let value_ok = s(&t["operator"]) == "Exists" || s(&t["value"]) == s(&taint["value"]);
        key_ok && effect_ok && value_ok
    })
}

/// The node's taints of `effects` the pod does not tolerate.
fn untolerated(spec: &Value, node: &CheckNode, effects: &[&str]) -> bool {
    node.taints.iter().any(|t| effects.contains(&s(&t["effect"])) && !tolerates(spec, t))
}

fn cpu_milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => (q.parse::<f64>().unwrap() * 1000.0).round() as i64,
    }
}

/// The pod's CPU request as kube-scheduler counts it: its containers summed, or its largest
/// init container if larger (sidecars counted with the containers).
fn pod_cpu(spec: &Value) -> i64 {
    let request = |c: &Value| c["resources"]["requests"]["cpu"].as_str().map(cpu_milli).unwrap_or(0);
    let mut sidecars = 0;
    let mut init_peak = 0;
    for c in arr(&spec["initContainers"]) {
        if s(&c["restartPolicy"]) == "Always" {
            sidecars += request(c);
        } else {
            init_peak = init_peak.max(sidecars + request(c));
        }
    }
    let main: i64 = arr(&spec["containers"]).iter().map(request).sum::<i64>() + sidecars;
    main.max(init_peak)
}

/// The pod's host ports as (hostIP, protocol, port): its containers' and its sidecars'.
fn host_ports(spec: &Value) -> Vec<(String, String, i64)> {
    let sidecars = arr(&spec["initContainers"]).iter().filter(|c| s(&c["restartPolicy"]) == "Always");
    let mut out = Vec::new();
    for c in arr(&spec["containers"]).iter().chain(sidecars) {
        for p in arr(&c["ports"]) {
            let Some(port) = p["hostPort"].as_i64().filter(|&p| p > 0) else { continue };
            let ip = match s(&p["hostIP"]) {
                "" => "0.0.0.0",
                ip => ip,
            };
            let protocol = match s(&p["protocol"]) {
                "" => "TCP",
                pr => pr,
            };
            out.push((ip.to_string(), protocol.to_string(), port));
        }
    }
    out
}

fn ports_conflict(a: &(String, String, i64), b: &(String, String, i64)) -> bool {
    a.2 == b.2 && a.1 == b.1 && (a.0 == b.0 || a.0 == "0.0.0.0" || b.0 == "0.0.0.0")
}

fn required<'a>(spec: &'a Value, kind: &str) -> &'a [Value] {
    arr(&spec["affinity"][kind]["requiredDuringSchedulingIgnoredDuringExecution"])
}

/// Whether `other` is in the namespaces `term` of `owner` names (the owner's own when none).
fn in_term_namespaces(term: &Value, owner: &CheckPod, other: &CheckPod) -> bool {
    let listed: Vec<&str> = arr(&term["namespaces"]).iter().map(s).collect();
    if term["namespaceSelector"].is_object() {
        // `{}` selects every namespace; the scenarios use no other namespace selector.
        return true;
    }
    if listed.is_empty() { other.namespace == owner.namespace } else { listed.contains(&other.namespace.as_str()) }
}

/// Every broken rule among the placed pods, in words.
pub fn check(nodes: &[CheckNode], pods: &[CheckPod]) -> Vec<String> {
    let node = |name: &str| nodes.iter().find(|n| n.name == name).unwrap_or_else(|| panic!("node {name}"));
    let domain = |pod: &CheckPod, key: &str| pod.node.as_deref().and_then(|n| node(n).labels.get(key).cloned());
    let mut problems = Vec::new();
    for n in nodes {
        let on: Vec<&CheckPod> = pods.iter().filter(|p| p.node.as_deref() == Some(&n.name)).collect();
        let cpu: i64 = on.iter().map(|p| pod_cpu(&p.spec)).sum();
        if cpu > n.cpu_milli && on.iter().any(|p| p.placed) {
            problems.push(format!("node {} holds {cpu}m CPU of {}m", n.name, n.cpu_milli));
        }
        let ports: Vec<(&str, (String, String, i64))> =
            on.iter().flat_map(|p| host_ports(&p.spec).into_iter().map(|hp| (p.name.as_str(), hp))).collect();
        for (i, (a, pa)) in ports.iter().enumerate() {
            for (b, pb) in &ports[i + 1..] {
                if a != b && ports_conflict(pa, pb) {
                    problems.push(format!("{a} and {b} both hold host port {pa:?} / {pb:?} on {}", n.name));
                }
            }
        }
    }
    for p in pods.iter().filter(|p| p.placed) {
        let Some(node_name) = p.node.as_deref() else { continue };
        let n = node(node_name);
        if !node_affinity_holds(&p.spec, n) {
            problems.push(format!("{} on {node_name}: nodeSelector or node affinity not met", p.name));
        }
        if untolerated(&p.spec, n, &["NoSchedule", "NoExecute"]) {
            problems.push(format!("{} on {node_name}: an untolerated taint", p.name));
        }
        let cordon = serde_json::json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
        if n.unschedulable && !tolerates(&p.spec, &cordon) {
            problems.push(format!("{} on {node_name}: the node is cordoned", p.name));
        }
        problems.extend(pod_affinity_problems(p, pods, &domain));
        problems.extend(spread_problems(p, nodes, pods));
    }
    problems
}

/// The pod's required affinity and anti-affinity, and the other pods' anti-affinity to it.
fn pod_affinity_problems(
    p: &CheckPod,
    pods: &[CheckPod],
    domain: &dyn Fn(&CheckPod, &str) -> Option<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let others =
        || pods.iter().filter(move |q| q.name != p.name || q.namespace != p.namespace).filter(|q| q.node.is_some());
    for term in required(&p.spec, "podAffinity") {
        let key = s(&term["topologyKey"]);
        let Some(d) = domain(p, key) else {
            problems.push(format!("{}: affinity on {key}, which its node lacks", p.name));
            continue;
        };
        let matched = others().any(|q| {
            in_term_namespaces(term, p, q)
                && selector_matches(&term["labelSelector"], &q.labels)
                && domain(q, key).as_ref() == Some(&d)
        });
        let itself = selector_matches(&term["labelSelector"], &p.labels);
        if !matched && !itself {
            problems.push(format!("{}: no pod its affinity term selects in its {key} {d}", p.name));
        }
    }
    for term in required(&p.spec, "podAntiAffinity") {
        let key = s(&term["topologyKey"]);
        let Some(d) = domain(p, key) else { continue };
        for q in others() {
            if in_term_namespaces(term, p, q)
                && selector_matches(&term["labelSelector"], &q.labels)
                && domain(q, key).as_ref() == Some(&d)
            {
                problems.push(format!("{}: anti-affine to {} in {key} {d}", p.name, q.name));
            }
        }
    }
    for q in others() {
        for term in required(&q.spec, "podAntiAffinity") {
            let key = s(&term["topologyKey"]);
            let (Some(dq), Some(dp)) = (domain(q, key), domain(p, key)) else { continue };
            if dq == dp && in_term_namespaces(term, q, p) && selector_matches(&term["labelSelector"], &p.labels) {
                problems.push(format!("{}: placed in {key} {dp}, where {}'s anti-affinity forbids it", p.name, q.name));
            }
        }
    }
    problems
}

/// The pod's DoNotSchedule spread constraints on the end state.
fn spread_problems(p: &CheckPod, nodes: &[CheckNode], pods: &[CheckPod]) -> Vec<String> {
    let mut problems = Vec::new();
    let node_name = p.node.as_deref().expect("placed");
    for c in arr(&p.spec["topologySpreadConstraints"]) {
        if s(&c["whenUnsatisfiable"]) != "DoNotSchedule" {
            continue;
        }
        let key = s(&c["topologyKey"]);
        let eligible = |n: &CheckNode| {
            n.labels.contains_key(key)
                && (s(&c["nodeAffinityPolicy"]) == "Ignore" || node_affinity_holds(&p.spec, n))
                && (s(&c["nodeTaintsPolicy"]) != "Honor" || !untolerated(&p.spec, n, &["NoSchedule", "NoExecute"]))
        };
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        for n in nodes.iter().filter(|n| eligible(n)) {
            let here = pods
                .iter()
                .filter(|q| q.node.as_deref() == Some(&n.name) && q.namespace == p.namespace)
                .filter(|q| selector_matches(&c["labelSelector"], &q.labels))
                .count() as i64;
            *counts.entry(n.labels[key].as_str()).or_default() += here;
        }
        let own = nodes.iter().find(|n| n.name == node_name).expect("its node");
        let Some(d) = own.labels.get(key) else {
            problems.push(format!("{}: spread on {key}, which its node lacks", p.name));
            continue;
        };
        let min_domains = c["minDomains"].as_i64().unwrap_or(1);
        let min = if (counts.len() as i64) < min_domains { 0 } else { counts.values().copied().min().unwrap_or(0) };
        let max_skew = c["maxSkew"].as_i64().expect("maxSkew");
        let count = counts.get(d.as_str()).copied().unwrap_or(0);
        if count - min > max_skew {
            problems
                .push(format!("{}: {key} {d} holds {count} where the least holds {min} (maxSkew {max_skew})", p.name));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, zone: &str) -> CheckNode {
        let labels = [("host".to_string(), name.to_string()), ("zone".to_string(), zone.to_string())].into();
        CheckNode { name: name.into(), labels, taints: Vec::new(), unschedulable: false, cpu_milli: 4000 }
    }

    fn pod(name: &str, node: &str, app: &str, spec: Value) -> CheckPod {
        let labels = [("app".to_string(), app.to_string())].into();
        CheckPod { name: name.into(), namespace: "ns".into(), node: Some(node.into()), labels, spec, placed: true }
    }

    /// The checker is what the side-by-side table trusts: it must see each kind of break.
    #[test]
    fn the_checker_finds_each_kind_of_broken_rule() {
        let nodes = [node("a", "z1"), node("b", "z2")];
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "host"}]}}});
        let together = [pod("w0", "a", "web", anti.clone()), pod("w1", "a", "web", anti.clone())];
        assert_eq!(check(&nodes, &together).len(), 4, "each is anti-affine to the other, both ways");
        let apart = [pod("w0", "a", "web", anti.clone()), pod("w1", "b", "web", anti)];
        assert!(check(&nodes, &apart).is_empty());

        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
        let skewed: Vec<CheckPod> = (0..3).map(|i| pod(&format!("s{i}"), "a", "web", spread.clone())).collect();
        assert!(check(&nodes, &skewed).iter().any(|p| p.contains("maxSkew 1")), "{:?}", check(&nodes, &skewed));

        let port = json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]});
        let ports = [pod("p0", "a", "x", port.clone()), pod("p1", "a", "y", port)];
        assert_eq!(check(&nodes, &ports).len(), 1);

        let follower = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]}}});
        let lost = [pod("db", "a", "db", json!({})), pod("f", "b", "web", follower.clone())];
        assert_eq!(check(&nodes, &lost).len(), 1);
        let found = [pod("db", "a", "db", json!({})), pod("f", "a", "web", follower)];
        assert!(check(&nodes, &found).is_empty());
    }
}
