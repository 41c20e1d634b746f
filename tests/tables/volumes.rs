//! Volumes backed by claims, as kube-scheduler's VolumeBinding and VolumeZone read them once
//! the claims are bound: a pod goes where its bound volumes can be reached, and a claim that
//! is missing or not bound yet makes it wait, saying so.

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
fn a_claim_missing_or_not_bound_yet_makes_its_pod_wait_saying_so() {
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
    assert!(
        reason("waiting").starts_with("Pod default/waiting: persistentvolumeclaim \"fresh\" is not bound: choosing a node for a WaitForFirstConsumer claim is not honoured by Muster yet"),
        "{}",
        reason("waiting")
    );
    for name in ["missing", "waiting"] {
        assert!(pod_report(&report, name)["node"].is_null());
    }
}
