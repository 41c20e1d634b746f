//! The node agent's blast radius, against the real API server. With the agent's
//! ValidatingAdmissionPolicy (`manifests/agent/admission-policy.yaml`) installed, the
//! agent's service account writes only the ResourceSlices, DeviceTaintRules and Node labels
//! of the node named in its token: a token bound to its pod on node A, as the kubelet mounts
//! it, may not write node B's slice, and a token that names no node may write nothing. The
//! real agent, with only that account's RBAC and under the policy, still publishes, labels
//! and taints its own node. Both service accounts hold only the permissions their code
//! calls, shown by impersonation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::resource::v1::{DeviceTaintRule, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::agent::start_agent_as;
use crate::install::{INSTALLED, MANIFESTS};
use crate::support::cluster::{TEST_LABEL, within};
use crate::support::{TestCluster, builders};

/// The users the agent's and the scheduler's pods run as.
const AGENT: &str = "system:serviceaccount:muster-system:muster-agent";
const SCHEDULER: &str = "system:serviceaccount:muster-system:muster-scheduler";
/// The user extra a pod-bound service-account token carries its node's name in.
const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
/// How the API server words a denial by the agent's policy.
const DENIED: &str =
    "ValidatingAdmissionPolicy 'muster-agent-own-node' with binding 'muster-agent-own-node' denied request";
/// The label the agent puts on every object it writes, naming its node.
const NODE_LABEL: &str = "muster.dev/agent-node";

fn manifest(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests").join(path).to_string_lossy().into_owned()
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a test object that parses")
}

fn kubectl(cluster: &TestCluster, args: &[&str]) -> String {
    cluster.control_plane.kubectl(args).unwrap_or_else(|e| panic!("kubectl {} failed:\n{e}", args.join(" ")))
}

/// The namespace, both service accounts with their roles, and the agent's admission policy,
/// as `kubectl apply -k manifests/` installs them. Cluster-wide names: one test at a time.
/// The guard keeps them installed (see [`INSTALLED`]); hold it until the test ends.
async fn install(cluster: &TestCluster) -> tokio::sync::RwLockReadGuard<'static, ()> {
    let installed = INSTALLED.read().await;
    let _turn = MANIFESTS.lock().await;
    for file in [
        "namespace.yaml",
        "agent/serviceaccount.yaml",
        "agent/clusterrole.yaml",
        "agent/clusterrolebinding.yaml",
        "agent/admission-policy.yaml",
        "scheduler/serviceaccount.yaml",
        "scheduler/clusterrole.yaml",
        "scheduler/clusterrolebinding.yaml",
        "scheduler/lease-role.yaml",
    ] {
        kubectl(cluster, &["apply", "-f", &manifest(file)]);
    }
    installed
}

async fn create_node(cluster: &TestCluster, name: &str) -> String {
    let full = cluster.name(name);
    cluster.create_node(&builders::node(&full, 64, 512, 0, &[(TEST_LABEL, &cluster.id)])).await;
    full
}

async fn admin_config(cluster: &TestCluster) -> kube::Config {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&cluster.control_plane.kubeconfig).expect("failed to read the kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("failed to load the kubeconfig")
}

/// A client that acts as `user` (impersonated by the tests' admin identity; the API server
/// adds a service account's groups), with `node` as the node-name extra when given: what a
/// token bound to that user's pod on `node` says.
async fn client_as(cluster: &TestCluster, user: &str, node: Option<&str>) -> kube::Client {
    let mut config = admin_config(cluster).await;
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_user_extra =
        node.map(|node| HashMap::from([(NODE_NAME.to_string(), vec![node.to_string()])]));
    kube::Client::try_from(config).expect("failed to build the impersonating client")
}

/// A client that authenticates with `token` alone (no client certificate).
async fn token_client(cluster: &TestCluster, token: &str) -> kube::Client {
    let mut config = admin_config(cluster).await;
    let auth = &mut config.auth_info;
    auth.client_certificate = None;
    auth.client_certificate_data = None;
    auth.client_key = None;
    auth.client_key_data = None;
    auth.token = Some(token.to_string().into());
    kube::Client::try_from(config).expect("failed to build the token client")
}

/// A pod of the agent's account on `node` (never run: there is no kubelet), and a token bound
/// to it, as the kubelet mounts into the agent's container: the API server puts the pod's
/// node in it. Returns the pod's name and the token.
async fn pod_bound_token(cluster: &TestCluster, node: &str) -> (String, String) {
    let pod = cluster.name("agent");
    let object: Pod = typed(json!({
        "metadata": {"name": pod, "namespace": "muster-system"},
        "spec": {"serviceAccountName": "muster-agent", "nodeName": node,
                 "containers": [{"name": "agent", "image": "muster"}]},
    }));
    cluster.create(&Api::namespaced(cluster.client.clone(), "muster-system"), &object).await;
    let token = kubectl(
        cluster,
        &[
            "create",
            "token",
            "muster-agent",
            "-n",
            "muster-system",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            &pod,
        ],
    );
    (pod, token.trim().to_string())
}

async fn delete_pod(cluster: &TestCluster, pod: &str) {
    let _ = Api::<Pod>::namespaced(cluster.client.clone(), "muster-system").delete(pod, &DeleteParams::default()).await;
}

fn slice(name: &str, node: &str, pool: &str, driver: &str) -> ResourceSlice {
    typed(json!({
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}},
    }))
}

fn rule(name: &str, label: &str, pool: &str, driver: &str) -> DeviceTaintRule {
    typed(json!({
        "metadata": {"name": name, "labels": {NODE_LABEL: label}},
        "spec": {"deviceSelector": {"driver": driver, "pool": pool, "device": "gpu-0"},
                 "taint": {"key": "gpu.muster.dev/xid", "value": "79", "effect": "NoSchedule"}},
    }))
}

/// Asserts that the agent's policy refused the request, with a message containing `says`.
#[track_caller]
fn assert_denied<T: std::fmt::Debug>(result: Result<T, kube::Error>, says: &str, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains(DENIED) => {
            assert!(
                status.message.contains(says),
                "{what}: denied, but the message does not say {says:?}: {}",
                status.message
            )
        }
        other => panic!("{what}: expected the agent's admission policy to refuse it, got {other:?}"),
    }
}

/// Asserts that RBAC (not the policy) refused the request.
#[track_caller]
fn assert_forbidden_by_rbac<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 && !status.message.contains(DENIED) => {}
        other => panic!("{what}: expected RBAC to forbid it, got {other:?}"),
    }
}

#[track_caller]
fn allowed<T>(result: Result<T, kube::Error>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: expected it to be allowed, got {e}"))
}

/// Waits, 20 s at most, until the policy is in force (a new policy takes a moment to reach
/// the API server's admission): probes with a slice the agent of one node writes for
/// another, deleting it again whenever it still gets through.
async fn wait_until_enforced(cluster: &TestCluster) {
    let (here, there) = (cluster.name("probe-a"), cluster.name("probe-b"));
    let agent = Api::<ResourceSlice>::all(client_as(cluster, AGENT, Some(&here)).await);
    let admin = cluster.cluster_api::<ResourceSlice>();
    let probe = slice(&format!("{there}-probe"), &there, &there, &format!("{}.probe.example.com", cluster.id));
    within(20, "the agent's admission policy to be in force", async {
        loop {
            match agent.create(&PostParams::default(), &probe).await {
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(DENIED) => return,
                // The policy, or the agent's RBAC, is not in force yet.
                Err(kube::Error::Api(s)) if s.code == 403 => {}
                Ok(_) => {
                    let _ = admin.delete(&format!("{there}-probe"), &DeleteParams::default()).await;
                }
                Err(e) => panic!("the probe failed: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bound_to_the_agents_pod_on_one_node_may_not_write_another_nodes_resource_slice() {
    let cluster = TestCluster::new("admission-token").await;
    let _installed = install(&cluster).await;
    let a = create_node(&cluster, "a").await;
    let b = create_node(&cluster, "b").await;
    wait_until_enforced(&cluster).await;
    let (pod, token) = pod_bound_token(&cluster, &a).await;
    let agent = token_client(&cluster, &token).await;

    // The token says who and where, as the one the kubelet mounts does.
    let review: SelfSubjectReview =
        typed(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}));
    let review = Api::<SelfSubjectReview>::all(agent.clone()).create(&PostParams::default(), &review).await;
    let user = review.expect("a SelfSubjectReview").status.and_then(|s| s.user_info).expect("user info");
    assert_eq!(user.username.as_deref(), Some(AGENT));
    assert_eq!(user.extra.and_then(|e| e.get(NODE_NAME).cloned()), Some(vec![a.clone()]), "the token names node A");

    let driver = format!("{}.gpu.example.com", cluster.id);
    let slices = Api::<ResourceSlice>::all(agent);
    let theirs = slice(&format!("{b}-gpu-0"), &b, &b, &driver);
    assert_denied(
        slices.create(&PostParams::default(), &theirs).await,
        &format!("muster-agent on node {a} may write only its own node's ResourceSlices"),
        "node A's agent writing node B's ResourceSlice",
    );
    let ours = slice(&format!("{a}-gpu-0"), &a, &a, &driver);
    allowed(slices.create(&PostParams::default(), &ours).await, "node A's agent writing its own ResourceSlice");

    // A token of the same account bound to no pod names no node: it may write nothing.
    let unbound = kubectl(&cluster, &["create", "token", "muster-agent", "-n", "muster-system"]);
    let unbound = Api::<ResourceSlice>::all(token_client(&cluster, unbound.trim()).await);
    assert_denied(
        unbound.create(&PostParams::default(), &slice(&format!("{a}-gpu-1"), &a, &a, &driver)).await,
        "this request names no node",
        "the agent's account with a token bound to no pod",
    );

    let _ = cluster.cluster_api::<ResourceSlice>().delete(&format!("{a}-gpu-0"), &DeleteParams::default()).await;
    delete_pod(&cluster, &pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_account_writes_only_its_own_nodes_slices_rules_and_labels() {
    let cluster = TestCluster::new("admission-matrix").await;
    let _installed = install(&cluster).await;
    let a = create_node(&cluster, "a").await;
    let b = create_node(&cluster, "b").await;
    wait_until_enforced(&cluster).await;
    let agent = client_as(&cluster, AGENT, Some(&a)).await;
    let driver = format!("{}.gpu.example.com", cluster.id);
    let pp = PostParams::default();

    // ResourceSlices: its node's pool, under its node's names.
    let slices = Api::<ResourceSlice>::all(agent.clone());
    let admin_slices = cluster.cluster_api::<ResourceSlice>();
    let mut own = allowed(slices.create(&pp, &slice(&format!("{a}-x-0"), &a, &a, &driver)).await, "its own slice");
    assert_denied(
        slices.create(&pp, &slice(&format!("{b}-x-0"), &b, &b, &driver)).await,
        &format!("not {b}-x-0 for node {b}"),
        "a slice for node B",
    );
    assert_denied(
        slices.create(&pp, &slice(&format!("{a}-x-1"), &a, &b, &driver)).await,
        &format!("in pool {b}"),
        "a slice on its node in node B's pool",
    );
    assert_denied(
        slices.create(&pp, &slice(&format!("{b}-x-9"), &a, &a, &driver)).await,
        &format!("not {b}-x-9"),
        "a slice under node B's name",
    );
    own.spec.pool.generation = 2;
    allowed(slices.replace(&format!("{a}-x-0"), &pp, &own).await, "replacing its own slice");
    cluster.create(&admin_slices, &slice(&format!("{b}-x-0"), &b, &b, &driver)).await;
    assert_denied(
        slices.delete(&format!("{b}-x-0"), &DeleteParams::default()).await,
        &format!("may not change or delete ResourceSlice {b}-x-0 of node {b}"),
        "deleting node B's slice",
    );
    allowed(slices.delete(&format!("{a}-x-0"), &DeleteParams::default()).await, "deleting its own slice");

    // DeviceTaintRules: aimed at its node's pool, labelled and named for its node.
    let rules = Api::<DeviceTaintRule>::all(agent.clone());
    let admin_rules = cluster.cluster_api::<DeviceTaintRule>();
    allowed(rules.create(&pp, &rule(&format!("muster-{a}-gpu-0"), &a, &a, &driver)).await, "its own rule");
    assert_denied(
        rules.create(&pp, &rule(&format!("muster-{a}-gpu-1"), &a, &b, &driver)).await,
        &format!("for pool {b}"),
        "a rule aimed at node B's pool",
    );
    assert_denied(
        rules.create(&pp, &rule(&format!("muster-{a}-gpu-2"), &b, &a, &driver)).await,
        "may write only DeviceTaintRules of its own node",
        "a rule labelled for node B",
    );
    assert_denied(
        rules.create(&pp, &rule(&format!("muster-{b}-gpu-0"), &a, &a, &driver)).await,
        "may write only DeviceTaintRules of its own node",
        "a rule under node B's name",
    );
    cluster.create(&admin_rules, &rule(&format!("muster-{b}-gpu-0"), &b, &b, &driver)).await;
    assert_denied(
        rules.delete(&format!("muster-{b}-gpu-0"), &DeleteParams::default()).await,
        &format!("may not change or delete DeviceTaintRule muster-{b}-gpu-0 for pool {b}"),
        "deleting node B's rule",
    );
    allowed(rules.delete(&format!("muster-{a}-gpu-0"), &DeleteParams::default()).await, "deleting its own rule");

    // Nodes: its own, and only the GPU labels.
    let nodes = Api::<Node>::all(agent.clone());
    let labels = |key: &str, value: &str| Patch::Merge(json!({"metadata": {"labels": {key: value}}}));
    let params = PatchParams::default();
    allowed(nodes.patch(&a, &params, &labels("nvidia.com/gpu.count", "8")).await, "labelling its own Node");
    assert_denied(
        nodes.patch(&b, &params, &labels("nvidia.com/gpu.count", "8")).await,
        &format!("may write only its own Node, not Node {b}"),
        "labelling node B",
    );
    assert_denied(
        nodes.patch(&a, &params, &labels(TEST_LABEL, "moved")).await,
        "may change only the nvidia.com/gpu.* labels",
        "changing another label of its own Node",
    );
    assert_denied(
        nodes.patch(&a, &params, &Patch::Merge(json!({"spec": {"unschedulable": true}}))).await,
        "may change only the nvidia.com/gpu.* labels",
        "cordoning its own Node",
    );
    let node = cluster.cluster_api::<Node>().get(&a).await.expect("node A");
    let label = node.metadata.labels.and_then(|l| l.get("nvidia.com/gpu.count").cloned());
    assert_eq!(label.as_deref(), Some("8"));

    // Without a node in its credentials, nothing.
    let nowhere = Api::<ResourceSlice>::all(client_as(&cluster, AGENT, None).await);
    assert_denied(
        nowhere.create(&pp, &slice(&format!("{a}-x-2"), &a, &a, &driver)).await,
        "this request names no node",
        "the agent's account naming no node",
    );
    // Other users are not the policy's business: the admin writes node B's objects freely.
    allowed(admin_slices.delete(&format!("{b}-x-0"), &DeleteParams::default()).await, "the admin deleting B's slice");
    allowed(
        admin_rules.delete(&format!("muster-{b}-gpu-0"), &DeleteParams::default()).await,
        "the admin deleting B's rule",
    );
}

/// Waits up to 30 s for `check` to hold over what `read` returns.
async fn wait_for<T>(what: &str, read: impl AsyncFn() -> T, check: impl Fn(&T) -> bool) -> T {
    within(30, what, async {
        loop {
            let value = read().await;
            if check(&value) {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

/// An inventory of two H100s for `node`, GPU 1 failing with XID 79 when `failing`.
fn write_inventory(path: &Path, node: &str, failing: bool) {
    let mut text = String::from("gpus:\n");
    for minor in 0..2 {
        text.push_str(&format!(
            "- minor: {minor}\n  uuid: GPU-{node}-{minor}\n  productName: NVIDIA H100 80GB HBM3\n  memoryBytes: 85520809984\n"
        ));
        if failing && minor == 1 {
            text.push_str("  health: {state: xid, code: 79}\n");
        }
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).expect("write the inventory");
    std::fs::rename(&partial, path).expect("move the inventory into place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_with_its_pods_token_publishes_labels_and_taints_its_own_node_under_the_policy() {
    let cluster = TestCluster::new("admission-agent").await;
    let _installed = install(&cluster).await;
    let node = create_node(&cluster, "n1").await;
    wait_until_enforced(&cluster).await;
    let (pod, token) = pod_bound_token(&cluster, &node).await;
    let client = token_client(&cluster, &token).await;
    let ours = format!("{}.gpu.example.com", cluster.id);
    let nvidia = format!("{}.nvidia.example.com", cluster.id);
    let admin_slices = cluster.cluster_api::<ResourceSlice>();
    let slices_of = async |driver: &str| {
        let params = ListParams::default().fields(&format!("spec.driver={driver}"));
        admin_slices.list(&params).await.expect("list slices").items
    };

    // Driver mode: its pool published, its Node labelled, its slices withdrawn on the way out.
    let agent = start_agent_as(
        client.clone(),
        &["--node-name", &node, "--driver-name", &ours, "--nvidia-driver-name", &nvidia, "--fake-gpus", "2"],
    );
    let published = wait_for("the agent's slices", async || slices_of(&ours).await, |s| !s.is_empty()).await;
    assert!(published.iter().all(|s| s.spec.node_name.as_deref() == Some(node.as_str())));
    let devices: usize = published.iter().map(|s| s.spec.devices.as_ref().map_or(0, Vec::len)).sum();
    assert_eq!(devices, 2);
    let nodes = cluster.cluster_api::<Node>();
    let gpu_count = async || {
        let node = nodes.get(&node).await.expect("the node");
        node.metadata.labels.and_then(|l| l.get("nvidia.com/gpu.count").cloned())
    };
    wait_for("the node's GPU labels", gpu_count, |count| count.as_deref() == Some("2")).await;
    agent.stop().await;
    assert!(slices_of(&ours).await.is_empty(), "the agent withdrew its slices when it stopped");

    // Companion mode: NVIDIA's driver publishes the GPUs; a failing one gets a rule, and
    // recovery deletes it.
    let theirs: ResourceSlice = typed(json!({
        "metadata": {"name": format!("{node}-nvidia")},
        "spec": {"driver": nvidia, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [
                     {"name": "gpu-a", "attributes": {"uuid": {"string": format!("GPU-{node}-0")}}},
                     {"name": "gpu-b", "attributes": {"uuid": {"string": format!("GPU-{node}-1")}}},
                 ]},
    }));
    cluster.create(&admin_slices, &theirs).await;
    let dir = std::env::temp_dir().join(format!("muster-e2e-admission-{}-{}", std::process::id(), cluster.id));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let inventory = dir.join("gpus.yaml");
    write_inventory(&inventory, &node, true);
    let inventory_arg = inventory.display().to_string();
    let agent = start_agent_as(
        client,
        &["--node-name", &node, "--driver-name", &ours, "--nvidia-driver-name", &nvidia, "--inventory", &inventory_arg],
    );
    let rules = cluster.cluster_api::<DeviceTaintRule>();
    let node_rules = async || {
        let params = ListParams::default().labels(&format!("{NODE_LABEL}={node}"));
        rules.list(&params).await.expect("list rules").items
    };
    let found = wait_for("a DeviceTaintRule for gpu-b", &node_rules, |r| !r.is_empty()).await;
    let selector = found[0].spec.device_selector.clone().expect("a selector");
    assert_eq!((selector.pool.as_deref(), selector.device.as_deref()), (Some(node.as_str()), Some("gpu-b")));
    write_inventory(&inventory, &node, false);
    wait_for("the rule deleted on recovery", &node_rules, Vec::is_empty).await;
    agent.stop().await;

    let _ = admin_slices.delete(&format!("{node}-nvidia"), &DeleteParams::default()).await;
    delete_pod(&cluster, &pod).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `kubectl auth can-i ARGS --as=USER` against the real server.
fn can_i(cluster: &TestCluster, user: &str, args: &[&str]) -> bool {
    let output = Command::new(cluster.control_plane.bin.join("kubectl"))
        .arg(format!("--kubeconfig={}", cluster.control_plane.kubeconfig.display()))
        .args(["auth", "can-i"])
        .args(args)
        .arg(format!("--as={user}"))
        .output()
        .expect("failed to run kubectl auth can-i");
    let answer = String::from_utf8_lossy(&output.stdout);
    match answer.trim() {
        "yes" => true,
        no if no.starts_with("no") => false,
        other => panic!(
            "kubectl auth can-i {} --as={user} answered {other:?}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_account_may_do_only_what_its_code_calls() {
    let cluster = TestCluster::new("admission-rbac").await;
    let _installed = install(&cluster).await;
    let ns = cluster.namespace.as_str();
    // Roles just applied reach the authorizer within moments.
    within(20, "the scheduler's role to be in force", async {
        while !can_i(&cluster, SCHEDULER, &["create", "pods", "--subresource=binding", "-n", ns]) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    within(20, "the agent's role to be in force", async {
        while !can_i(&cluster, AGENT, &["patch", "nodes"]) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    let slices = "resourceslices.resource.k8s.io";
    let rules = "devicetaintrules.resource.k8s.io";
    let claims = "resourceclaims.resource.k8s.io";
    let agent_may: &[&[&str]] = &[
        &["list", slices],
        &["create", slices],
        &["update", slices],
        &["delete", slices],
        &["list", rules],
        &["create", rules],
        &["update", rules],
        &["delete", rules],
        &["get", claims, "-n", ns],
        &["get", "nodes"],
        &["patch", "nodes"],
    ];
    let agent_may_not: &[&[&str]] = &[
        &["get", slices],
        &["watch", slices],
        &["patch", slices],
        &["patch", rules],
        &["update", claims, "-n", ns],
        &["update", claims, "--subresource=status", "-n", ns],
        &["get", "secrets", "-n", "muster-system"],
        &["list", "secrets", "--all-namespaces"],
        &["create", "pods", "-n", ns],
        &["create", "pods", "--subresource=binding", "-n", ns],
        &["create", "pods", "--subresource=eviction", "-n", ns],
        &["update", "nodes"],
        &["delete", "nodes"],
        &["patch", "nodes", "--subresource=status"],
        &["create", "events.events.k8s.io", "-n", ns],
    ];
    let scheduler_may: &[&[&str]] = &[
        &["list", "pods", "--all-namespaces"],
        &["create", "pods", "--subresource=binding", "-n", ns],
        &["create", "pods", "--subresource=eviction", "-n", ns],
        &["delete", "pods", "-n", ns],
        &["patch", "pods", "--subresource=status", "-n", ns],
        &["create", "events.events.k8s.io", "-n", ns],
        &["patch", "events.events.k8s.io", "-n", ns],
        &["list", slices],
        &["list", rules],
        &["create", claims, "-n", ns],
        &["update", claims, "-n", ns],
        &["delete", claims, "-n", ns],
        &["update", claims, "--subresource=status", "-n", ns],
        &["patch", claims, "-n", ns],
        &["patch", claims, "--subresource=status", "-n", ns],
        &["update", claims, "--subresource=binding", "-n", ns],
        &["patch", claims, "--subresource=binding", "-n", ns],
    ];
    let scheduler_may_not: &[&[&str]] = &[
        &["create", slices],
        &["update", slices],
        &["delete", slices],
        &["create", rules],
        &["delete", rules],
        &["get", "secrets", "-n", "muster-system"],
        &["list", "secrets", "--all-namespaces"],
        &["create", "pods", "-n", ns],
        &["update", "pods", "-n", ns],
        &["patch", "pods", "-n", ns],
        &["update", "pods", "--subresource=status", "-n", ns],
        &["patch", "nodes"],
        &["update", "nodes"],
        &["delete", "nodes"],
        &["create", "events", "-n", ns],
    ];
    let mut wrong = Vec::new();
    for (user, may, expected) in [
        (AGENT, agent_may, true),
        (AGENT, agent_may_not, false),
        (SCHEDULER, scheduler_may, true),
        (SCHEDULER, scheduler_may_not, false),
    ] {
        for args in may {
            if can_i(&cluster, user, args) != expected {
                wrong.push(format!("{user} {} {}", if expected { "may not" } else { "may" }, args.join(" ")));
            }
        }
    }
    assert!(wrong.is_empty(), "permissions that differ from what the code calls:\n{}", wrong.join("\n"));

    // And for real: requests made as each account.
    let agent = client_as(&cluster, AGENT, Some(&cluster.name("n1"))).await;
    assert_forbidden_by_rbac(
        Api::<Secret>::all(agent.clone()).list(&ListParams::default()).await,
        "the agent reading Secrets",
    );
    let pod = builders::pod("p", &cluster.scheduler_name, 0, &[]);
    cluster.create(&cluster.api::<Pod>(), &pod).await;
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": cluster.name("n1")},
    });
    assert_forbidden_by_rbac(
        Api::<Pod>::namespaced(agent, ns)
            .create_subresource::<_, Value>("binding", "p", &PostParams::default(), &binding)
            .await,
        "the agent binding a pod",
    );
    let scheduler = client_as(&cluster, SCHEDULER, None).await;
    let node = cluster.name("n1");
    assert_forbidden_by_rbac(
        Api::<ResourceSlice>::all(scheduler.clone())
            .create(&PostParams::default(), &slice(&format!("{node}-x-0"), &node, &node, "gpu.example.com"))
            .await,
        "the scheduler writing a ResourceSlice",
    );
    assert_forbidden_by_rbac(
        Api::<Secret>::all(scheduler).list(&ListParams::default()).await,
        "the scheduler reading Secrets",
    );
}
