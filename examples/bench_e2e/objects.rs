//! The objects the runs create (nodes, pods, gangs of either kind, DRA claims from a template)
//! and their removal after each row and run.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup as KubePodGroup, Workload};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::Bench;
use crate::sched::Scheduler;
use crate::support::builders;

/// The label on every node of a run, with the run's node set as value; pods select it.
pub const BENCH_LABEL: &str = "bench.muster.dev/run";
/// The gang of a pod, on every gang pod whichever scheduler runs it (to count split gangs).
pub const GANG_LABEL: &str = "bench.muster.dev/gang";
/// The label that makes a pod a member of Muster's PodGroup.
pub const MUSTER_GROUP_LABEL: &str = "muster.dev/pod-group";
/// The bench's DRA driver and the one Workload a kube-scheduler namespace holds.
pub const DRIVER: &str = "bench.gpu.example.com";
const WORKLOAD: &str = "bench";
const TEMPLATE: &str = "worker";

/// Whether a failed request is worth another try: the server busy, a timeout, a dropped
/// connection.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        _ => true,
    }
}

/// Runs `request` until it succeeds, up to 6 times on transient errors.
pub async fn retry<T, F, Fut>(mut request: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        match request().await {
            Err(e) if attempt < 6 && transient(&e) => tokio::time::sleep(Duration::from_millis(200 * attempt)).await,
            result => return result,
        }
    }
}

/// Creates `objects`, 32 at a time, until `deadline`; returns how many were created (an
/// object that already exists counts: a retry whose first answer was lost).
pub async fn create_all<K>(api: &Api<K>, objects: Vec<K>, deadline: Instant) -> Result<usize, String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let created = AtomicUsize::new(0);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    futures::stream::iter(objects)
        .for_each_concurrent(32, |object| {
            let (created, failure) = (&created, &failure);
            async move {
                if Instant::now() >= deadline || failure.lock().is_ok_and(|f| f.is_some()) {
                    return;
                }
                let params = PostParams::default();
                match retry(|| api.create(&params, &object)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => {
                        let name = object.meta().name.clone().unwrap_or_default();
                        *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("creating {name}: {e}"));
                        return;
                    }
                }
                created.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(why) => Err(why),
        None => Ok(created.into_inner()),
    }
}

pub async fn create_namespace(client: &kube::Client, name: &str) -> Result<(), String> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    let (api, params) = (Api::<Namespace>::all(client.clone()), PostParams::default());
    retry(|| api.create(&params, &ns)).await.map_err(|e| format!("creating namespace {name}: {e}"))?;
    // No serviceaccount controller runs; pods need the namespace's default account.
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("account");
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), name).create(&PostParams::default(), &account).await;
    Ok(())
}

/// The nodes of a run: `<name>-n<i>`, labelled `BENCH_LABEL=<name>`, in racks of 16.
pub struct NodeSet {
    pub name: String,
    pub count: usize,
    /// Whether the nodes publish 8 GPUs in a ResourceSlice (and no nvidia.com/gpu).
    pub dra: bool,
}

impl NodeSet {
    pub fn node(&self, i: usize) -> String {
        format!("{}-n{i}", self.name)
    }

    fn slice(&self, i: usize) -> String {
        format!("{}-{}", self.node(i), DRIVER.replace('.', "-"))
    }

    pub fn selector(&self) -> String {
        format!("{BENCH_LABEL}={}", self.name)
    }

    /// Nodes of 64 cores, 512 GiB and 16 GPUs (or 8 DRA GPUs), Ready, untainted.
    pub async fn create(b: &Bench, name: &str, count: usize, dra: bool) -> Result<NodeSet, String> {
        let set = NodeSet { name: name.to_string(), count, dra };
        let deadline = Instant::now() + b.budget;
        let nodes: Vec<Node> = (0..count)
            .map(|i| {
                let rack = format!("r{}", i / 16);
                let zone = format!("zone-{}", i % ZONES);
                let gpus = if dra { 0 } else { 16 };
                let labels =
                    [(BENCH_LABEL, name), ("topology.muster.dev/rack", &rack), ("topology.kubernetes.io/zone", &zone)];
                builders::node(&set.node(i), 64, 512, gpus, &labels)
            })
            .collect();
        let api: Api<Node> = Api::all(b.client.clone());
        create_all(&api, nodes, deadline).await?;
        // Admission taints new nodes not-ready; nothing lifts it without a kubelet.
        let untaint = Patch::Merge(json!({"spec": {"taints": null}}));
        let failures = AtomicUsize::new(0);
        futures::stream::iter(0..count)
            .for_each_concurrent(32, |i| {
                let (api, untaint, failures, name) = (&api, &untaint, &failures, set.node(i));
                async move {
                    let params = PatchParams::default();
                    if retry(|| api.patch(&name, &params, untaint)).await.is_err() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .await;
        if failures.into_inner() > 0 {
            return Err("clearing the nodes' not-ready taint failed".into());
        }
        if dra {
            let slices: Vec<ResourceSlice> =
                (0..count).map(|i| builders::gpu_slice(&set.node(i), DRIVER, 8, 80)).collect();
            create_all(&Api::all(b.client.clone()), slices, deadline).await?;
        }
        Ok(set)
    }

    /// Deletes the nodes (and their ResourceSlices) and waits until they are gone.
    pub async fn delete(&self, b: &Bench) {
        b.say(format!("deleting the {} nodes of {}", self.count, self.name));
        if self.dra {
            let slices: Api<ResourceSlice> = Api::all(b.client.clone());
            futures::stream::iter(0..self.count)
                .for_each_concurrent(32, |i| {
                    let (slices, name) = (&slices, self.slice(i));
                    async move {
                        let params = DeleteParams::default();
                        let _ = retry(|| slices.delete(&name, &params)).await;
                    }
                })
                .await;
        }
        let nodes: Api<Node> = Api::all(b.client.clone());
        delete_all(b, &nodes, &ListParams::default().labels(&self.selector()), "nodes").await;
    }
}

/// The zones the nodes are dealt into, one node to each in turn.
pub const ZONES: usize = 3;

/// Makes `pod` a replica of deployment `app`, as kube-scheduler's scheduler_perf runs
/// SchedulingPodAntiAffinity and TopologySpreading: no two replicas on one node (required
/// anti-affinity on the hostname) and the replicas spread over the zones (maxSkew 1,
/// DoNotSchedule).
pub fn keep_apart(pod: &mut Pod, app: &str) {
    pod.metadata.labels.get_or_insert_default().insert("app".into(), app.into());
    let selector = json!({"matchLabels": {"app": app}});
    let spec = pod.spec.as_mut().expect("spec");
    spec.affinity = Some(
        serde_json::from_value(json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}))
        .expect("affinity"),
    );
    spec.topology_spread_constraints = Some(vec![
        serde_json::from_value(json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                      "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}))
        .expect("spread"),
    ]);
}

/// A pod of `scheduler_name` for the nodes of `nodes`, asking `gpus` nvidia.com/gpu.
pub fn pod(nodes: &NodeSet, scheduler_name: &str, name: &str, gpus: u32, labels: &[(&str, &str)]) -> Pod {
    let mut pod = builders::pod(name, scheduler_name, gpus, labels);
    pod.spec.as_mut().expect("spec").node_selector = Some([(BENCH_LABEL.to_string(), nodes.name.clone())].into());
    pod
}

/// Creates the gangs `names`, each needing `min` pods, as `scheduler` knows gangs: Muster's
/// PodGroups, or kube-scheduler's Workload and PodGroups.
pub async fn create_gangs(
    client: &kube::Client,
    ns: &str,
    scheduler: Scheduler,
    names: &[String],
    min: i32,
    deadline: Instant,
) -> Result<(), String> {
    let wanted = names.len();
    let created = if scheduler.is_kube() {
        let workload: Workload = serde_json::from_value(json!({
            "metadata": {"name": WORKLOAD},
            "spec": {"podGroupTemplates": [{"name": TEMPLATE, "schedulingPolicy": {"gang": {"minCount": min}}}]},
        }))
        .expect("Workload");
        let (api, params) = (Api::<Workload>::namespaced(client.clone(), ns), PostParams::default());
        retry(|| api.create(&params, &workload)).await.map_err(|e| format!("creating the Workload: {e}"))?;
        let groups: Vec<KubePodGroup> = names
            .iter()
            .map(|name| {
                serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {
                        "workloadRef": {"workloadName": WORKLOAD, "templateName": TEMPLATE},
                        "schedulingPolicy": {"gang": {"minCount": min}},
                    },
                }))
                .expect("PodGroup")
            })
            .collect();
        create_all(&Api::namespaced(client.clone(), ns), groups, deadline).await?
    } else {
        let groups: Vec<muster::api::pod_group::PodGroup> = names
            .iter()
            .map(|name| {
                muster::api::pod_group::PodGroup::new(
                    name,
                    muster::api::pod_group::PodGroupSpec { min_member: min, ..Default::default() },
                )
            })
            .collect();
        create_all(&Api::namespaced(client.clone(), ns), groups, deadline).await?
    };
    if created < wanted {
        return Err(format!("over budget creating the gangs ({created}/{wanted})"));
    }
    Ok(())
}

/// How many of the namespace's `scheduling.k8s.io` PodGroups kube-scheduler has marked
/// `PodGroupInitiallyScheduled` True and False (its gang scheduling at work), of how many.
pub async fn kube_groups_marked(client: &kube::Client, ns: &str) -> Option<(usize, usize, usize)> {
    let groups = Api::<KubePodGroup>::namespaced(client.clone(), ns).list(&ListParams::default()).await.ok()?;
    let marked = |status: &str| {
        groups
            .items
            .iter()
            .filter(|g| {
                g.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == status))
            })
            .count()
    };
    Some((marked("True"), marked("False"), groups.items.len()))
}

/// Makes `pod` a member of `gang`: the bench's label always; Muster's label for Muster,
/// `spec.schedulingGroup` for kube-scheduler; neither for the ceiling (`None`).
pub fn join_gang(pod: &mut Pod, scheduler: Option<Scheduler>, gang: &str) {
    let labels = pod.metadata.labels.get_or_insert_default();
    labels.insert(GANG_LABEL.to_string(), gang.to_string());
    match scheduler {
        Some(s) if s.is_kube() => {
            pod.spec.as_mut().expect("spec").scheduling_group =
                Some(serde_json::from_value(json!({"podGroupName": gang})).expect("schedulingGroup"));
        }
        Some(_) => {
            labels.insert(MUSTER_GROUP_LABEL.to_string(), gang.to_string());
        }
        None => {}
    }
}

/// The namespace's ResourceClaimTemplate `one-gpu`: one GPU of the bench's driver with at
/// least 80 GiB, selected by CEL.
pub async fn create_claim_template(client: &kube::Client, ns: &str) -> Result<(), String> {
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "bench-gpu",
            "selectors": [{"cel": {"expression":
                "device.capacity['bench.gpu.example.com'].memory.compareTo(quantity('80Gi')) >= 0"}}]}}]}}},
    }))
    .expect("template");
    let (api, params) = (Api::<ResourceClaimTemplate>::namespaced(client.clone(), ns), PostParams::default());
    retry(|| api.create(&params, &template))
        .await
        .map(|_| ())
        .map_err(|e| format!("creating the ResourceClaimTemplate: {e}"))
}

/// Gives `pod` a claim `gpu` from the template `one-gpu`, used by its container.
pub fn add_template_claim(pod: &mut Pod) {
    let spec = pod.spec.as_mut().expect("spec");
    spec.resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"})).expect("claim"),
    ]);
    spec.containers[0].resources.get_or_insert_default().claims =
        Some(vec![serde_json::from_value(json!({"name": "gpu"})).expect("claim ref")]);
}

/// Deletes what `list` selects through `api` and waits (up to two minutes) until none is left.
async fn delete_all<K>(b: &Bench, api: &Api<K>, list: &ListParams, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    let until = Instant::now() + Duration::from_secs(120);
    // One by one, 32 at a time: several times quicker than a deletecollection, which the API
    // server works through alone.
    if let Ok(found) = api.list_metadata(list).await {
        futures::stream::iter(found.items)
            .for_each_concurrent(32, |object| {
                let now = &now;
                async move {
                    let name = object.metadata.name.unwrap_or_default();
                    let _ = retry(|| api.delete(&name, now)).await;
                }
            })
            .await;
    }
    loop {
        // Whatever is left (one request may not finish a large collection in time).
        let _ = api.delete_collection(&now, list).await;
        let left = api.list_metadata(&list.clone().limit(1)).await;
        match left {
            Ok(l) if l.items.is_empty() => return,
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            _ if Instant::now() >= until => {
                b.say(format!("warning: {what} still left after 120 s of deleting"));
                return;
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Removes the finalizers of every object of `api`: the controllers that would remove them
/// (the resourceclaim controller, PodGroup protection, which does not run) are slow or
/// absent, and the bench does not wait for them once the pods are gone.
async fn unfinalize_all<K>(api: &Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Ok(list) = api.list_metadata(&ListParams::default()).await else { return };
    let held = list.items.into_iter().filter(|o| o.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()));
    let unfinalize = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    futures::stream::iter(held)
        .for_each_concurrent(32, |object| {
            let unfinalize = &unfinalize;
            async move {
                let name = object.metadata.name.unwrap_or_default();
                let params = PatchParams::default();
                let _ = retry(|| api.patch(&name, &params, unfinalize)).await;
            }
        })
        .await;
}

/// Deletes everything a row made in its namespace (pods first, so that their claims and
/// groups are released), then the namespace itself (which stays Terminating: no namespace
/// controller runs, but it is empty).
pub async fn clean_namespace(b: &Bench, ns: &str) {
    let c = || b.client.clone();
    let all = ListParams::default();
    delete_all(b, &Api::<Pod>::namespaced(c(), ns), &all, "pods").await;
    let claims: Api<ResourceClaim> = Api::namespaced(c(), ns);
    unfinalize_all(&claims).await;
    delete_all(b, &claims, &all, "claims").await;
    let groups: Api<muster::api::pod_group::PodGroup> = Api::namespaced(c(), ns);
    unfinalize_all(&groups).await;
    delete_all(b, &groups, &all, "Muster PodGroups").await;
    let groups: Api<KubePodGroup> = Api::namespaced(c(), ns);
    unfinalize_all(&groups).await;
    delete_all(b, &groups, &all, "PodGroups").await;
    let workloads: Api<Workload> = Api::namespaced(c(), ns);
    unfinalize_all(&workloads).await;
    delete_all(b, &workloads, &all, "Workloads").await;
    let _ = Api::<ResourceClaimTemplate>::namespaced(c(), ns).delete_collection(&DeleteParams::default(), &all).await;
    let _ = Api::<Namespace>::all(c()).delete(ns, &DeleteParams::default()).await;
}
