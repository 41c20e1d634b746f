//! One test's private corner of the shared control plane.
//!
//! Nodes, ResourceSlices and DeviceClasses are cluster-scoped, so every test gets its own
//! id: a namespace, a scheduler name, node and class names, and a label on its nodes, all
//! derived from that id. One test never sees or touches another's objects.

use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::control_plane::{ControlPlane, control_plane};

/// The label every node of a test carries, with the test's id as value.
pub const TEST_LABEL: &str = "e2e.muster.dev/test";

pub struct TestCluster {
    pub control_plane: &'static ControlPlane,
    pub client: kube::Client,
    /// Short, unique, DNS-label-safe id of this test.
    pub id: String,
    pub namespace: String,
    /// The scheduler name this test's pods use, so no other scheduler binds them.
    pub scheduler_name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl TestCluster {
    /// Connects to the control plane and creates this test's namespace.
    pub async fn new(test: &str) -> TestCluster {
        let control_plane = control_plane();
        let client = control_plane.client().await;
        let id = format!("{test}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let namespace = format!("e2e-{id}");
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("failed to create namespace {namespace}: {e}"));
        // No serviceaccount controller runs; pods need the namespace's default account.
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("account");
        Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &account)
            .await
            .unwrap_or_else(|e| panic!("failed to create the default service account in {namespace}: {e}"));
        TestCluster { control_plane, client, scheduler_name: format!("muster-{id}"), namespace, id }
    }

    /// A cluster-scoped name private to this test (`<id>-<name>`).
    pub fn name(&self, name: &str) -> String {
        format!("{}-{name}", self.id)
    }

    /// The label selector matching this test's nodes.
    pub fn node_selector(&self) -> String {
        format!("{TEST_LABEL}={}", self.id)
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn cluster_api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }
}

impl TestCluster {
    /// Creates `object` through the API server, naming it in the panic if that fails.
    pub async fn create<K>(&self, api: &Api<K>, object: &K) -> K
    where
        K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        api.create(&PostParams::default(), object)
            .await
            .unwrap_or_else(|e| panic!("failed to create {} {name}: {e}", K::kind(&Default::default())))
    }

    /// Creates a fake node and clears the `node.kubernetes.io/not-ready` taint the API
    /// server's admission puts on every new node: the node lifecycle controller that would
    /// lift it once the kubelet reports Ready is not running, and there is no kubelet.
    pub async fn create_node(&self, node: &k8s_openapi::api::core::v1::Node) {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = self.cluster_api();
        let created = self.create(&nodes, node).await;
        let name = created.metadata.name.unwrap_or_default();
        nodes
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .unwrap_or_else(|e| panic!("failed to clear the taints of node {name}: {e}"));
    }

    /// Creates `count` fake GPU nodes of this test (8 GPUs each) in `rack`; returns their names.
    pub async fn create_gpu_nodes(&self, count: usize, rack: &str) -> Vec<String> {
        let mut names = Vec::with_capacity(count);
        for i in 0..count {
            let name = self.name(&format!("{rack}-node-{i}"));
            let node = super::builders::gpu_node(&name, rack, &[(TEST_LABEL, &self.id)]);
            self.create_node(&node).await;
            names.push(name);
        }
        names
    }

    /// Binds a pod to a node through the pods/binding subresource, as a scheduler does.
    pub async fn bind(&self, pod: &str, node: &str) {
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": self.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        self.api::<k8s_openapi::api::core::v1::Pod>()
            .create_subresource::<_, serde_json::Value>("binding", pod, &PostParams::default(), &binding)
            .await
            .unwrap_or_else(|e| panic!("failed to bind pod {pod} to {node}: {e}"));
    }
}

/// Waits up to `seconds` for `what`, panicking with its description on time-out.
pub async fn within<T>(seconds: u64, what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(seconds), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {seconds}s waiting for {what}"))
}
