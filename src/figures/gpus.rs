//! GPUs in the cluster, counted one way for the metrics, the dashboards and `muster explain`:
//! what a GPU is (one definition), and GPUs total, allocated, stranded and held per node and
//! per topology domain, from the cluster's objects.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::config::TopologyLevel;
use crate::convert::assemble::{ClusterView, GroupSummary, gang_key};
use crate::metrics::Metrics;

pub use crate::engine::queues::GPU_RESOURCE;
/// DRA drivers whose devices are GPUs: NVIDIA's and Muster's node agent's.
pub const GPU_DRIVERS: &[&str] = &["gpu.nvidia.com", "gpu.muster.dev"];

/// The one definition of a GPU among DRA devices: a device of a GPU driver whose `type`
/// attribute, when it has one, is `gpu`. NVIDIA's driver publishes MIG slices too
/// (`type: mig`); they are parts of a GPU counted already, so they do not count again.
pub fn is_gpu(driver: &str, kind: Option<&str>) -> bool {
    GPU_DRIVERS.contains(&driver) && kind.is_none_or(|k| k == "gpu")
}

/// GPUs of one node or domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gpus {
    pub total: i64,
    pub allocated: i64,
    pub stranded: i64,
    /// Devices of allocated claims that no bound pod uses: allocated, doing no work.
    pub held: i64,
}

impl std::ops::AddAssign for Gpus {
    fn add_assign(&mut self, other: Gpus) {
        self.total += other.total;
        self.allocated += other.allocated;
        self.stranded += other.stranded;
        self.held += other.held;
    }
}

/// GPUs by node and by (level, domain).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuUsage {
    pub nodes: BTreeMap<String, Gpus>,
    pub domains: BTreeMap<(String, String), Gpus>,
    /// The held GPU devices themselves, as (driver, pool, device), for the page's drawing.
    pub held_devices: HashSet<(String, String, String)>,
}

impl GpuUsage {
    /// Replaces the GPU gauges of `metrics` with these figures, dropping nodes and domains
    /// that are gone.
    pub fn export(&self, metrics: &Metrics) {
        let usage = self;
        for vec in
            [&metrics.node_gpus, &metrics.node_gpus_allocated, &metrics.node_gpus_stranded, &metrics.node_gpus_held]
        {
            vec.reset();
        }
        for vec in [
            &metrics.domain_gpus,
            &metrics.domain_gpus_allocated,
            &metrics.domain_gpus_stranded,
            &metrics.domain_gpus_held,
        ] {
            vec.reset();
        }
        for (node, gpus) in &usage.nodes {
            metrics.node_gpus.with_label_values(&[node]).set(gpus.total);
            metrics.node_gpus_allocated.with_label_values(&[node]).set(gpus.allocated);
            metrics.node_gpus_stranded.with_label_values(&[node]).set(gpus.stranded);
            metrics.node_gpus_held.with_label_values(&[node]).set(gpus.held);
        }
        for ((level, domain), gpus) in &usage.domains {
            metrics.domain_gpus.with_label_values(&[level, domain]).set(gpus.total);
            metrics.domain_gpus_allocated.with_label_values(&[level, domain]).set(gpus.allocated);
            metrics.domain_gpus_stranded.with_label_values(&[level, domain]).set(gpus.stranded);
            metrics.domain_gpus_held.with_label_values(&[level, domain]).set(gpus.held);
        }
    }
}

pub(crate) fn gpus_requested(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else { return 0 };
    let per_container = |c: &k8s_openapi::api::core::v1::Container| {
        let resources = c.resources.as_ref();
        let get = |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.and_then(|m| m.get(GPU_RESOURCE)).and_then(|q| q.0.parse::<i64>().ok())
        };
        resources.and_then(|r| get(r.requests.as_ref()).or_else(|| get(r.limits.as_ref()))).unwrap_or(0)
    };
    let regular: i64 = spec.containers.iter().map(per_container).sum();
    let init = spec.init_containers.iter().flatten().map(per_container).max().unwrap_or(0);
    regular.max(init)
}

pub(crate) fn is_gpu_device(driver: &str, device: &k8s_openapi::api::resource::v1::Device) -> bool {
    let kind = device.attributes.as_ref().and_then(|a| a.get("type")).and_then(|v| v.string.as_deref());
    is_gpu(driver, kind)
}

/// GPUs total, allocated and stranded per node and per topology domain, from the cluster's
/// objects. A node's GPUs are its `nvidia.com/gpu` allocatable when it advertises one, else
/// the GPU devices its ResourceSlices publish. Allocated: requested by bound, unfinished
/// pods, plus devices of allocated claims. Stranded: the part of that held by pods of a gang
/// (`groups`) with at least one but fewer than `minMember` pods bound. Held: devices of
/// allocated claims reserved for no bound, unfinished pod (nor for the PodGroup of a gang with
/// one), which no pod uses while they stay allocated. Levels whose label
/// is the host name are left out of the domains (they repeat the nodes).
pub fn gpu_usage(view: &ClusterView<'_>, groups: &[GroupSummary], levels: &[TopologyLevel]) -> GpuUsage {
    let mut usage = GpuUsage::default();
    let extended = advertised_gpus(view, &mut usage);
    let device_node = gpu_devices(view, &extended, &mut usage);
    let gpu_claimed = gpu_claimed_pods(view, &device_node);
    let running = count_pods(view, groups, &extended, &gpu_claimed, &mut usage);
    count_claims(view, &device_node, &extended, &running, &mut usage);
    add_domains(view, levels, &mut usage);
    usage
}

/// Every node with its `nvidia.com/gpu` allocatable as its total; returns the nodes that
/// advertise some (whose GPUs the extended resource counts, not their devices).
fn advertised_gpus<'v>(view: &'v ClusterView<'_>, usage: &mut GpuUsage) -> HashSet<&'v str> {
    let mut extended: HashSet<&str> = HashSet::new();
    for node in &view.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let advertised = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(GPU_RESOURCE))
            .and_then(|q| q.0.parse::<i64>().ok())
            .unwrap_or(0);
        if advertised > 0 {
            extended.insert(name);
        }
        usage.nodes.insert(name.to_string(), Gpus { total: advertised, ..Gpus::default() });
    }
    extended
}

/// Device (driver, pool, name) → node, for the GPU devices that nodes' ResourceSlices
/// publish; each counts toward its node's total when the node does not advertise the
/// extended resource.
fn gpu_devices<'v>(
    view: &'v ClusterView<'_>,
    extended: &HashSet<&str>,
    usage: &mut GpuUsage,
) -> HashMap<(&'v str, &'v str, &'v str), &'v str> {
    let mut device_node: HashMap<(&str, &str, &str), &str> = HashMap::new();
    for slice in &view.resource_slices {
        let Some(node) = slice.spec.node_name.as_deref() else { continue };
        let Some(gpus) = usage.nodes.get_mut(node) else { continue };
        let driver = slice.spec.driver.as_str();
        for device in slice.spec.devices.iter().flatten() {
            if is_gpu_device(driver, device) {
                device_node.insert((driver, slice.spec.pool.name.as_str(), device.name.as_str()), node);
                if !extended.contains(node) {
                    gpus.total += 1;
                }
            }
        }
    }
    device_node
}

/// Pods (namespace, name) with a GPU device of a claim reserved for them: on a node whose
/// GPUs DRA serves, their GPUs are counted with the claims, not by their `nvidia.com/gpu`
/// request.
fn gpu_claimed_pods<'v>(
    view: &'v ClusterView<'_>,
    device_node: &HashMap<(&str, &str, &str), &str>,
) -> HashSet<(&'v str, &'v str)> {
    let mut gpu_claimed: HashSet<(&str, &str)> = HashSet::new();
    for claim in &view.resource_claims {
        let Some(status) = claim.status.as_ref() else { continue };
        let results = status.allocation.as_ref().and_then(|a| a.devices.as_ref()).and_then(|d| d.results.as_deref());
        let gpu = |r: &&k8s_openapi::api::resource::v1::DeviceRequestAllocationResult| {
            device_node.contains_key(&(r.driver.as_str(), r.pool.as_str(), r.device.as_str()))
        };
        if results.unwrap_or_default().iter().any(|r| gpu(&r)) {
            let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
            let pods = status.reserved_for.iter().flatten().filter(|c| c.resource == "pods");
            gpu_claimed.extend(pods.map(|c| (namespace, c.name.as_str())));
        }
    }
    gpu_claimed
}

/// The bound, unfinished pods, as the claims' count needs them.
struct Running<'v> {
    /// Pods (namespace, name) of gangs with some but fewer than `minMember` pods bound.
    stranded_pods: HashSet<(&'v str, &'v str)>,
    /// Pods by uid.
    pods: HashSet<&'v str>,
    /// Gangs (namespace, name) with a pod running.
    gangs: HashSet<(String, String)>,
}

/// Counts the GPUs bound, unfinished pods request as allocated on their nodes (stranded
/// too for a gang short of its minimum), but for pods whose GPUs their claims count.
fn count_pods<'v>(
    view: &'v ClusterView<'_>,
    groups: &[GroupSummary],
    extended: &HashSet<&str>,
    gpu_claimed: &HashSet<(&str, &str)>,
    usage: &mut GpuUsage,
) -> Running<'v> {
    let stranded_gangs: HashSet<&crate::engine::model::GangKey> =
        groups.iter().filter(|g| g.bound > 0 && g.bound < g.min_member).map(|g| &g.key).collect();
    let mut running = Running { stranded_pods: HashSet::new(), pods: HashSet::new(), gangs: HashSet::new() };
    for pod in &view.pods {
        let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else { continue };
        if finished {
            continue;
        }
        let gang = gang_key(pod);
        let stranded = stranded_gangs.contains(&gang);
        running.pods.extend(pod.metadata.uid.as_deref());
        running.gangs.insert((gang.namespace, gang.name));
        if stranded {
            running.stranded_pods.insert((
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
            ));
        }
        let key =
            (pod.metadata.namespace.as_deref().unwrap_or_default(), pod.metadata.name.as_deref().unwrap_or_default());
        let by_claim = !extended.contains(node) && gpu_claimed.contains(&key);
        if let Some(gpus) = usage.nodes.get_mut(node).filter(|_| !by_claim) {
            let n = gpus_requested(pod);
            gpus.allocated += n;
            if stranded {
                gpus.stranded += n;
            }
        }
    }
    running
}

/// Counts the GPU devices of allocated claims on nodes without the extended resource:
/// allocated, stranded when reserved for a stranded pod, held when reserved for nothing
/// that runs.
fn count_claims(
    view: &ClusterView<'_>,
    device_node: &HashMap<(&str, &str, &str), &str>,
    extended: &HashSet<&str>,
    running: &Running<'_>,
    usage: &mut GpuUsage,
) {
    for claim in &view.resource_claims {
        let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else { continue };
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let stranded = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).is_some_and(|r| {
            r.iter().any(|c| c.resource == "pods" && running.stranded_pods.contains(&(namespace, c.name.as_str())))
        });
        let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_deref()).unwrap_or_default();
        let held = !reserved.iter().any(|c| match c.resource.as_str() {
            "pods" => running.pods.contains(c.uid.as_str()),
            "podgroups" => running.gangs.contains(&(namespace.to_string(), c.name.clone())),
            _ => true,
        });
        let results = allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default();
        for result in results {
            let key = (result.driver.as_str(), result.pool.as_str(), result.device.as_str());
            let Some(node) = device_node.get(&key) else { continue };
            if extended.contains(node) {
                continue;
            }
            if let Some(gpus) = usage.nodes.get_mut(*node) {
                gpus.allocated += 1;
                if stranded {
                    gpus.stranded += 1;
                }
                if held {
                    gpus.held += 1;
                    usage.held_devices.insert((key.0.to_string(), key.1.to_string(), key.2.to_string()));
                }
            }
        }
    }
}

/// Adds each node's GPUs to the domains it is in, level by level (host-name levels left out).
fn add_domains(view: &ClusterView<'_>, levels: &[TopologyLevel], usage: &mut GpuUsage) {
    for node in &view.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let Some(&gpus) = usage.nodes.get(name) else { continue };
        let labels = node.metadata.labels.as_ref();
        // A domain is named by its path: rack r1 of block b1 is `b1/r1`, apart from r1 of b2.
        let mut path = String::new();
        for level in levels.iter().filter(|l| l.node_label != "kubernetes.io/hostname") {
            if let Some(value) = labels.and_then(|l| l.get(&level.node_label)) {
                if !path.is_empty() {
                    path.push('/');
                }
                path.push_str(value);
                *usage.domains.entry((level.name.clone(), path.clone())).or_default() += gpus;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::assemble::ClusterObjects;
    use crate::engine::model::{GangKey, GangKind};
    use serde_json::json;

    fn node(name: &str, rack: &str, gpus: u32) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"topology.muster.dev/rack": rack, "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()}},
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, gpus: u32, group: Option<&str>) -> Pod {
        let labels = group.map_or(json!({}), |g| json!({"muster.dev/pod-group": g}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "labels": labels},
            "spec": {"nodeName": node, "schedulerName": "muster", "containers": [{"name": "c",
                     "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        }))
        .unwrap()
    }

    #[test]
    fn gpus_are_counted_per_node_and_rack_and_a_half_placed_gang_strands_its_gpus() {
        let objects = ClusterObjects {
            nodes: vec![node("a", "r1", 8), node("b", "r1", 8), node("c", "r2", 8)],
            pods: vec![
                pod("whole-0", Some("a"), 4, Some("whole")),
                pod("whole-1", Some("a"), 4, Some("whole")),
                pod("half-0", Some("b"), 8, Some("half")),
                pod("half-1", None, 8, Some("half")),
                pod("alone", Some("c"), 2, None),
            ],
            ..Default::default()
        };
        let key = |name: &str| GangKey { kind: GangKind::Muster, namespace: "ml".into(), name: name.into() };
        let groups = vec![
            GroupSummary { key: key("whole"), min_member: 2, bound: 2 },
            GroupSummary { key: key("half"), min_member: 2, bound: 1 },
        ];
        let usage = gpu_usage(&objects.view(), &groups, &crate::config::Config::default().topology);
        let gpus = |total, allocated, stranded| Gpus { total, allocated, stranded, held: 0 };
        assert_eq!(usage.nodes["a"], gpus(8, 8, 0));
        assert_eq!(usage.nodes["b"], gpus(8, 8, 8));
        assert_eq!(usage.nodes["c"], gpus(8, 2, 0));
        assert_eq!(usage.domains[&("rack".to_string(), "r1".to_string())], gpus(16, 16, 8));
        assert_eq!(usage.domains[&("rack".to_string(), "r2".to_string())], gpus(8, 2, 0));
        assert!(usage.domains.keys().all(|(level, _)| level != "host"), "hosts repeat the nodes");

        let metrics = crate::metrics::Metrics::new();
        usage.export(&metrics);
        let text = metrics.render();
        assert!(text.contains("muster_node_gpus_stranded{node=\"b\"} 8"), "{text}");
        assert!(text.contains("muster_topology_domain_gpus{domain=\"r1\",level=\"rack\"} 16"), "{text}");
    }

    #[test]
    fn a_rack_name_repeated_in_two_blocks_is_two_domains_named_by_their_paths() {
        let in_block = |name: &str, block: &str| {
            let mut n = node(name, "r1", 8);
            n.metadata.labels.as_mut().unwrap().insert("topology.muster.dev/block".into(), block.into());
            n
        };
        let objects = ClusterObjects { nodes: vec![in_block("a", "b1"), in_block("b", "b2")], ..Default::default() };
        let usage = gpu_usage(&objects.view(), &[], &crate::config::Config::default().topology);
        let racks: Vec<&str> = usage.domains.keys().filter(|(l, _)| l == "rack").map(|(_, d)| d.as_str()).collect();
        assert_eq!(racks, ["b1/r1", "b2/r1"]);
        assert_eq!(usage.domains[&("block".to_string(), "b1".to_string())].total, 8);
    }

    #[test]
    fn devices_allocated_to_claims_no_bound_pod_uses_are_held() {
        let slice = serde_json::from_value(json!({
            "metadata": {"name": "d-gpus"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "d", "pool": {"name": "d", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}, {"name": "gpu-2"}]},
        }))
        .unwrap();
        let claim = |name: &str, device: &str, pod: &str, uid: &str| {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml"},
                "status": {"allocation": {"devices": {"results": [
                              {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "d", "device": device}]}},
                           "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]},
            }))
            .unwrap()
        };
        // It asks `nvidia.com/gpu: 1`, which its claim serves: one GPU, not two.
        let mut running = pod("running", Some("d"), 1, None);
        running.metadata.uid = Some("uid-running".into());
        let mut waiting = pod("waiting", None, 0, None);
        waiting.metadata.uid = Some("uid-waiting".into());
        // Bound without a claim (by hand, or by another scheduler): its request counts.
        let stray = pod("stray", Some("d"), 1, None);
        let mut dra_node = node("d", "r1", 0);
        dra_node.status = None;
        let objects = ClusterObjects {
            nodes: vec![dra_node],
            pods: vec![running, waiting, stray],
            resource_slices: vec![slice],
            resource_claims: vec![
                claim("used", "gpu-0", "running", "uid-running"),
                claim("held", "gpu-1", "waiting", "uid-waiting"),
            ],
            ..Default::default()
        };
        let usage = gpu_usage(&objects.view(), &[], &crate::config::Config::default().topology);
        assert_eq!(usage.nodes["d"], Gpus { total: 3, allocated: 3, stranded: 0, held: 1 });
        assert_eq!(usage.domains[&("rack".to_string(), "r1".to_string())].held, 1);
    }
}
