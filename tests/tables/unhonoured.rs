//! Never silently wrong: a pod that uses a constraint Muster does not honour yet (required
//! pod affinity or anti-affinity, a `DoNotSchedule` spread, a host port) waits with a reason
//! naming the field, rather than be placed as if it were not there; a pod whose preferences
//! Muster only leaves unweighed is placed.

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
    let dir = std::env::temp_dir().join(format!("muster-unhonoured-{}", std::process::id()));
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

#[test]
fn each_constraint_not_honoured_yet_makes_its_pod_wait_naming_the_field() {
    let cases = [
        (
            "anti",
            "  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}\n",
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        ),
        (
            "follower",
            "  affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: web}}}]}}\n",
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        ),
        (
            "spread",
            "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]\n",
            "spec.topologySpreadConstraints (whenUnsatisfiable: DoNotSchedule)",
        ),
        (
            "port",
            "  initContainers: [{name: proxy, image: i, restartPolicy: Always, ports: [{containerPort: 80, hostPort: 8080}]}]\n",
            "spec.initContainers[].ports[].hostPort",
        ),
    ];
    let mut yaml = NODES.to_string();
    for (name, extra, _) in &cases {
        yaml.push_str(&pod(name, extra));
    }
    let report = simulate("waiting", &yaml);
    for (name, _, field) in cases {
        let pod = pod_report(&report, name);
        assert!(pod["node"].is_null(), "{name} was placed: {pod}");
        let reason = pod["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with(&format!("Pod default/{name}: {field} is not honoured by Muster yet")),
            "{name}: {reason}"
        );
    }
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
