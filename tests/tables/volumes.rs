//! Volumes backed by claims, as kube-scheduler's VolumeBinding and VolumeZone read them: a
//! pod goes where its bound volumes can be reached; a claim whose class waits for its first
//! consumer is given its pod's node (a free volume there, or one provisioned where the class
//! allows), and the report says which; a claim that is missing or that must be bound first
//! makes the pod wait, saying so.

use super::between_pods::{NODES, pod, pod_report, simulate};

/// A claim `name` bound to volume `pv-{name}`, and that volume with `spec` (indented by two)
/// and `labels`.
fn bound_claim(name: &str, spec: &str, labels: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-{name}, labels: {{{labels}}}}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  claimRef: {{namespace: default, name: {name}}}
{spec}---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default, annotations: {{pv.kubernetes.io/bind-completed: 'yes'}}}}
spec: {{accessModes: [ReadWriteOnce], volumeName: pv-{name}, resources: {{requests: {{storage: 10Gi}}}}}}
status: {{phase: Bound}}
"
    )
}

fn mounting(claim: &str) -> String {
    format!("  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n")
}

#[test]
fn a_pod_goes_where_its_bound_volumes_are_reachable() {
    let local = "  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]}]}}\n";
    let yaml = [
        NODES.to_string(),
        bound_claim("local", local, ""),
        bound_claim("zonal", "", "topology.kubernetes.io/zone: b"),
        bound_claim("shared", "  nfs: {server: nfs.example, path: /data}\n", ""),
        pod("on-local", &mounting("local")),
        pod("on-zonal", &mounting("zonal")),
        pod("on-shared", &mounting("shared")),
    ]
    .concat();
    let report = simulate("bound", &yaml);
    assert_eq!(pod_report(&report, "on-local")["node"], "n2", "the local volume's node");
    assert_eq!(pod_report(&report, "on-zonal")["node"], "n2", "the volume's zone, b");
    assert!(pod_report(&report, "on-shared")["node"].is_string(), "a volume reachable from anywhere");
}

#[test]
fn a_pod_whose_volume_is_pinned_to_a_full_node_waits_in_kube_schedulers_words() {
    let pinned = "  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]}]}}\n";
    let big = "  containers: [{name: c, image: i, resources: {requests: {cpu: '8'}}}]\n";
    let filler = format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: filler}}\nspec:\n  nodeName: n1\n{big}");
    let yaml =
        [NODES.to_string(), filler, bound_claim("local", pinned, ""), pod("mounts", &mounting("local"))].concat();
    let report = simulate("pinned", &yaml);
    let pod = pod_report(&report, "mounts");
    assert!(pod["node"].is_null(), "{pod}");
    let reason = pod["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("1 node(s) didn't match PersistentVolume's node affinity"), "{reason}");
    assert!(reason.contains("1 Insufficient cpu"), "{reason}");
}

#[test]
fn a_claim_missing_or_bound_at_once_but_not_yet_makes_its_pod_wait_saying_so() {
    let unbound = "---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: fresh, namespace: default}
spec: {accessModes: [ReadWriteOnce], storageClassName: standard-wffc, resources: {requests: {storage: 1Gi}}}
";
    let yaml = [
        NODES.to_string(),
        unbound.to_string(),
        pod("missing", &mounting("absent")),
        pod("waiting", &mounting("fresh")),
    ]
    .concat();
    let report = simulate("unbound", &yaml);
    let reason = |name: &str| pod_report(&report, name)["reason"].as_str().unwrap_or_default().to_string();
    assert_eq!(reason("missing"), "Pod default/missing: persistentvolumeclaim \"absent\" not found");
    // Its class does not exist: kube-scheduler treats it as bound at once, by the volume
    // controller, and waits for that.
    assert_eq!(reason("waiting"), "Pod default/waiting: pod has unbound immediate PersistentVolumeClaims");
    for name in ["missing", "waiting"] {
        assert!(pod_report(&report, name)["node"].is_null());
    }
}

/// A StorageClass `name` that waits for the first consumer, with `extra` (unindented).
fn delayed_class(name: &str, provisioner: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\nprovisioner: {provisioner}\nvolumeBindingMode: WaitForFirstConsumer\n{extra}"
    )
}

fn claim(name: &str, class: &str, size: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: default}}\nspec: {{accessModes: [ReadWriteOnce], storageClassName: {class}, resources: {{requests: {{storage: {size}}}}}}}\n"
    )
}

/// A free local volume of `class` on `node`, of `size`.
fn local_volume(name: &str, class: &str, node: &str, size: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}}}\nspec:\n  capacity: {{storage: {size}}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: {class}\n  local: {{path: /mnt/{name}}}\n  nodeAffinity: {{required: {{nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]}}]}}}}\nstatus: {{phase: Available}}\n"
    )
}

fn claim_report<'r>(report: &'r serde_json::Value, name: &str) -> &'r serde_json::Value {
    report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {report}"))
}

#[test]
fn a_delayed_claim_is_given_its_pods_node_where_its_class_can_provision() {
    let zone_b = "allowedTopologies: [{matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [b]}]}]\n";
    let yaml = [
        NODES.to_string(),
        delayed_class("zonal-b", "disk.example.com", zone_b),
        delayed_class("anywhere", "disk.example.com", ""),
        claim("in-b", "zonal-b", "10Gi"),
        claim("free", "anywhere", "10Gi"),
        pod("uses-b", &mounting("in-b")),
        pod("uses-free", &mounting("free")),
    ]
    .concat();
    let report = simulate("delayed", &yaml);
    assert_eq!(pod_report(&report, "uses-b")["node"], "n2", "the class provisions in zone b only");
    let given = claim_report(&report, "in-b");
    assert_eq!((given["node"].as_str(), given["volume"].as_str()), (Some("n2"), Some("pvc-default-in-b")));
    let node = pod_report(&report, "uses-free")["node"].clone();
    assert!(node.is_string());
    assert_eq!(claim_report(&report, "free")["node"], node, "a claim is given its pod's node");
}

#[test]
fn delayed_claims_take_free_local_volumes_one_each_and_wait_in_kube_schedulers_words_without_one() {
    let yaml = [
        NODES.to_string(),
        delayed_class("local", "kubernetes.io/no-provisioner", ""),
        local_volume("small-n1", "local", "n1", "5Gi"),
        local_volume("big-n1", "local", "n1", "50Gi"),
        claim("a", "local", "10Gi"),
        claim("b", "local", "10Gi"),
        pod("first", &mounting("a")),
        pod("second", &mounting("b")),
    ]
    .concat();
    let report = simulate("local", &yaml);
    let nodes: Vec<&serde_json::Value> = ["first", "second"].iter().map(|p| &pod_report(&report, p)["node"]).collect();
    // Only n1 has a volume large enough, and only one: one pod gets it, the other waits.
    let placed: Vec<&&serde_json::Value> = nodes.iter().filter(|n| n.is_string()).collect();
    assert_eq!(placed.len(), 1, "{report}");
    assert_eq!(placed[0].as_str(), Some("n1"));
    let waiting = if nodes[0].is_null() { "first" } else { "second" };
    let reason = pod_report(&report, waiting)["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("node(s) didn't find available persistent volumes to bind"), "{reason}");
    let bound: Vec<&str> = ["a", "b"].iter().filter_map(|c| claim_report(&report, c)["volume"].as_str()).collect();
    assert_eq!(bound, ["big-n1"], "the smallest free volume that fits, taken once");
}

#[test]
fn a_read_write_once_pod_claim_serves_one_pod_the_others_wait_in_kube_schedulers_words() {
    let once = |name: &str| {
        bound_claim(name, "", "").replace("accessModes: [ReadWriteOnce]", "accessModes: [ReadWriteOncePod]")
    };
    let holder = format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: holder}}\nspec:\n  nodeName: n1\n  containers: [{{name: c, image: i}}]\n{}",
        mounting("held")
    );
    let yaml = [
        NODES.to_string(),
        once("held"),
        once("free"),
        holder,
        pod("wants-held", &mounting("held")),
        pod("a-first", &mounting("free")),
        pod("b-second", &mounting("free")),
    ]
    .concat();
    let report = simulate("once", &yaml);
    let reason = |name: &str| pod_report(&report, name)["reason"].as_str().unwrap_or_default().to_string();
    assert!(pod_report(&report, "wants-held")["node"].is_null());
    assert_eq!(
        reason("wants-held"),
        "Pod default/wants-held: node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod (persistentvolumeclaim \"held\", used by pod holder)"
    );
    // Two pods waiting for one such claim: the first (by creation, then name) has it.
    assert!(pod_report(&report, "a-first")["node"].is_string(), "{report}");
    assert!(pod_report(&report, "b-second")["node"].is_null());
    assert!(reason("b-second").contains("used by pod a-first"), "{}", reason("b-second"));
}

#[test]
fn an_inline_disk_whose_conflicts_are_not_checked_makes_its_pod_wait_naming_the_field() {
    let disk = "  volumes: [{name: d, awsElasticBlockStore: {volumeID: vol-1}}]\n";
    let report = simulate("inline", &[NODES.to_string(), pod("ebs", disk)].concat());
    let pod = pod_report(&report, "ebs");
    assert!(pod["node"].is_null());
    let reason = pod["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("spec.volumes[].awsElasticBlockStore is not honoured by Muster yet"), "{reason}");
}

/// A node's CSINode, letting driver `ebs.example` attach `count` volumes there.
fn csi_node(node: &str, count: u32) -> String {
    format!(
        "---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {{name: {node}}}
spec: {{drivers: [{{name: ebs.example, nodeID: {node}, allocatable: {{count: {count}}}}}]}}
"
    )
}

#[test]
fn a_nodes_csi_attach_limit_counts_each_volume_once_and_the_pod_past_it_waits() {
    let csi = |handle: &str| format!("  csi: {{driver: ebs.example, volumeHandle: {handle}}}\n");
    let old = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: old}\nspec:\n  nodeName: n2\n  containers: [{name: c, image: i}]\n";
    let on_n2 = "  nodeSelector: {kubernetes.io/hostname: n2}\n";
    let yaml = [
        NODES.to_string(),
        csi_node("n1", 1),
        csi_node("n2", 2),
        bound_claim("c0", &csi("vol-0"), ""),
        bound_claim("c1", &csi("vol-1"), ""),
        bound_claim("c2", &csi("vol-2"), ""),
        bound_claim("c3", &csi("vol-3"), ""),
        format!("{old}{}", mounting("c0")),
        pod("p1", &mounting("c1")),
        pod("p2", &mounting("c2")),
        pod("p3", &mounting("c3")),
        // vol-0 is attached to n2 already: a second pod using it attaches nothing more.
        pod("shared", &format!("{}{on_n2}", mounting("c0"))),
    ]
    .concat();
    let report = simulate("attach-limits", &yaml);
    let placed: Vec<&str> = ["p1", "p2", "p3"].iter().filter_map(|p| pod_report(&report, p)["node"].as_str()).collect();
    let mut sorted = placed.clone();
    sorted.sort();
    assert_eq!(sorted, ["n1", "n2"], "one more volume fits on each node");
    let waiting = ["p1", "p2", "p3"].into_iter().find(|p| pod_report(&report, p)["node"].is_null()).unwrap();
    let reason = pod_report(&report, waiting)["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("2 node(s) exceed max volume count"), "{reason}");
    assert_eq!(pod_report(&report, "shared")["node"], "n2", "{report}");
}
