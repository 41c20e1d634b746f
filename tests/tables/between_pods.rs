//! The rules between pods, decided as kube-scheduler decides them: host ports, required pod
//! affinity and anti-affinity (the pod's own and the bound pods' against it), and
//! `DoNotSchedule` spread constraints; inside a gang, its own pods count for each other,
//! and a gang that cannot meet them waits whole, in kube-scheduler's words.

use std::process::Command;

use serde_json::Value;

pub(crate) const NODES: &str = "\
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: a}}
status: {allocatable: {cpu: '8', memory: 16Gi, pods: '10'}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: b}}
status: {allocatable: {cpu: '8', memory: 16Gi, pods: '10'}}
";

/// A Muster pod named `name` in app `web`, with `extra` appended to its spec (indented by two).
pub(crate) fn pod(name: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: web}}}}\nspec:\n  schedulerName: muster\n  containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1'}}}}}}]\n{extra}"
    )
}

/// `muster simulate` on `yaml`, written to a file of its own named `name`.
pub(crate) fn simulate(name: &str, yaml: &str) -> Value {
    let dir = std::env::temp_dir().join(format!("muster-between-pods-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["simulate", "--cluster", path.to_str().unwrap(), "--output", "json"])
        .output()
        .expect("muster runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

pub(crate) fn pod_report<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {report}"))
}

/// `count` nodes `n1`… of 8 CPUs, alternating between zones `a` and `b`.
fn nodes(count: usize) -> String {
    (1..=count)
        .map(|i| {
            let zone = if i % 2 == 1 { "a" } else { "b" };
            format!(
                "---\napiVersion: v1\nkind: Node\nmetadata: {{name: n{i}, labels: {{kubernetes.io/hostname: n{i}, topology.kubernetes.io/zone: {zone}}}}}\nstatus: {{allocatable: {{cpu: '8', memory: 16Gi, pods: '10'}}}}\n"
            )
        })
        .collect()
}

/// The node each named pod was placed on (None: it waits).
fn placements(report: &Value, names: &[String]) -> Vec<Option<String>> {
    names.iter().map(|n| pod_report(report, n)["node"].as_str().map(String::from)).collect()
}

fn zone(node: &str) -> &'static str {
    let i: usize = node.trim_start_matches('n').parse().unwrap();
    if i % 2 == 1 { "a" } else { "b" }
}

const ANTI: &str = "  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}\n";
const SPREAD: &str = "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]\n";

#[test]
fn four_anti_affine_replicas_go_to_four_nodes_and_a_fifth_waits_in_kube_schedulers_words() {
    let names: Vec<String> = (0..5).map(|i| format!("web-{i}")).collect();
    let yaml = nodes(4) + &names.iter().map(|n| pod(n, ANTI)).collect::<String>();
    let report = simulate("anti", &yaml);
    let placed = placements(&report, &names);
    let mut nodes: Vec<&String> = placed.iter().flatten().collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!((placed.iter().flatten().count(), nodes.len()), (4, 4), "{placed:?}");
    let waiting = names.iter().find(|n| pod_report(&report, n)["node"].is_null()).unwrap();
    assert_eq!(
        pod_report(&report, waiting)["reason"],
        "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules"
    );
}

#[test]
fn a_spread_over_two_zones_puts_two_pods_in_each() {
    let names: Vec<String> = (0..4).map(|i| format!("web-{i}")).collect();
    let yaml = nodes(4) + &names.iter().map(|n| pod(n, SPREAD)).collect::<String>();
    let report = simulate("spread", &yaml);
    let zones: Vec<&str> = placements(&report, &names).iter().map(|n| zone(n.as_deref().expect("placed"))).collect();
    assert_eq!(zones.iter().filter(|z| **z == "a").count(), 2, "{zones:?}");
    assert_eq!(zones.iter().filter(|z| **z == "b").count(), 2, "{zones:?}");
}

#[test]
fn followers_go_to_their_leaders_zone_and_wait_while_it_has_none() {
    let follower = |name: &str, leader: &str| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: worker}}}}\nspec:\n  schedulerName: muster\n  containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1'}}}}}}]\n  affinity: {{podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: topology.kubernetes.io/zone, labelSelector: {{matchLabels: {{role: {leader}}}}}}}]}}}}\n"
        )
    };
    // The leader runs on n4, in zone b, placed by someone else.
    let leader = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: leader, labels: {role: leader}}\nspec:\n  nodeName: n4\n  containers: [{name: c, image: i}]\nstatus: {phase: Running}\n";
    let yaml = nodes(4) + leader + &follower("f1", "leader") + &follower("f2", "leader") + &follower("lost", "absent");
    let report = simulate("follow", &yaml);
    for name in ["f1", "f2"] {
        let node = pod_report(&report, name)["node"].as_str().expect("placed").to_string();
        assert_eq!(zone(&node), "b", "{name} on {node}");
    }
    assert_eq!(
        pod_report(&report, "lost")["reason"],
        "0/4 nodes are available: 4 node(s) didn't match pod affinity rules"
    );
}

#[test]
fn host_ports_are_held_per_node_address_and_protocol() {
    let port = |ip: &str, protocol: &str| {
        format!(
            "  containers: [{{name: c, image: i, ports: [{{containerPort: 80, hostPort: 8080, hostIP: '{ip}', protocol: {protocol}}}]}}]\n"
        )
    };
    // Three pods on the wildcard address; one on a named address; one on UDP.
    let mut yaml = nodes(2);
    for name in ["p1", "p2", "p3"] {
        yaml += &pod(name, "")
            .replace("  containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]\n", &port("", "TCP"));
    }
    yaml += &pod("udp", "")
        .replace("  containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]\n", &port("", "UDP"));
    let report = simulate("ports", &yaml);
    let placed = placements(&report, &["p1".into(), "p2".into(), "p3".into()]);
    assert_eq!(placed.iter().flatten().count(), 2, "{placed:?}");
    assert_ne!(placed[0], placed[1]);
    let waiting = ["p1", "p2", "p3"].into_iter().find(|n| pod_report(&report, n)["node"].is_null()).unwrap();
    assert_eq!(
        pod_report(&report, waiting)["reason"],
        "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports"
    );
    assert!(pod_report(&report, "udp")["node"].is_string(), "another protocol shares the port");
}

#[test]
fn a_gang_that_cannot_put_one_worker_per_node_waits_whole() {
    let group = "---\napiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: train}\nspec: {minMember: 4}\n";
    let names: Vec<String> = (0..4).map(|i| format!("w{i}")).collect();
    let member =
        |n: &String| pod(n, ANTI).replace("labels: {app: web}", "labels: {app: web, muster.dev/pod-group: train}");
    let three = nodes(3) + group + &names.iter().map(member).collect::<String>();
    let report = simulate("gang3", &three);
    assert!(placements(&report, &names).iter().all(Option::is_none), "no worker placed alone");
    let gang = &report["gangs"][0];
    assert_eq!(gang["placed"], 0);
    assert_eq!(
        gang["reason"],
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules; gang default/train needs 4 pods at once, 3 fit"
    );
    // With a fourth node the gang runs, one worker per node.
    let four = nodes(4) + group + &names.iter().map(member).collect::<String>();
    let placed = placements(&simulate("gang4", &four), &names);
    let mut nodes: Vec<String> = placed.into_iter().map(|n| n.expect("placed")).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 4);
}

#[test]
fn a_bound_pods_anti_affinity_keeps_matching_pods_off_its_node() {
    // A database on n1 refuses web pods on its node; web pods carry no rule of their own.
    let db = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: db, labels: {app: db}}\nspec:\n  nodeName: n1\n  containers: [{name: c, image: i}]\n  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}\nstatus: {phase: Running}\n";
    let names: Vec<String> = (0..3).map(|i| format!("web-{i}")).collect();
    let yaml = nodes(2) + db + &names.iter().map(|n| pod(n, "")).collect::<String>();
    let placed = placements(&simulate("shield", &yaml), &names);
    assert!(placed.iter().all(|n| n.as_deref() == Some("n2")), "{placed:?}");
    // Alone with it, a web pod waits, saying why.
    let report = simulate("shield1", &(nodes(1) + db + &pod("web", "")));
    assert_eq!(
        pod_report(&report, "web")["reason"],
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules"
    );
}

#[test]
fn preferences_plain_volumes_and_container_ports_are_placed() {
    let extra = "  \
initContainers: [{name: setup, image: i, ports: [{containerPort: 80, hostPort: 8080}]}]
  affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 50, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}}]}}
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]
  volumes: [{name: scratch, emptyDir: {}}]
";
    let report = simulate("relaxed", &format!("{NODES}{}", pod("relaxed", extra)));
    let pod = pod_report(&report, "relaxed");
    assert!(pod["node"].is_string(), "{pod}");
}
