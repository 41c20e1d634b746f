//! The cluster a trace is replayed on, as the engine sees it: generated (`--nodes N
//! --gpus-per-node G --racks R`) or read from Node objects (`--cluster`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node as KubeNode;

use crate::config::Config;
use crate::engine::dra::model::DraSnapshot;
use crate::engine::model::Node;
use crate::engine::resources::{Capacity, ResourceId, ResourceNames};
use crate::engine::topology::{DomainIndex, LevelSpec, TopologyTree};

pub const GPU: &str = "nvidia.com/gpu";
/// The label GPU feature discovery puts on nodes, naming their GPU model.
pub const MODEL_LABEL: &str = "nvidia.com/gpu.product";
const GIB: i64 = 1 << 30;

/// A generated cluster: `nodes` nodes of `gpus_per_node` GPUs (16 cores and 128 GiB per
/// GPU), numbered across `racks` racks, two racks to a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterShape {
    pub nodes: usize,
    pub gpus_per_node: u32,
    pub racks: usize,
}

/// The engine's view of the cluster, made once per replay.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub resources: ResourceNames,
    pub nodes: Vec<Node>,
    pub topology: DomainIndex,
    /// The rack level, when the nodes carry rack labels.
    pub rack_level: Option<usize>,
    /// Per node: its rack (0 for every node without racks).
    pub rack_of: Vec<u32>,
    pub racks: usize,
    pub gpu: ResourceId,
    pub cpu: ResourceId,
    pub memory: ResourceId,
    /// The most GPUs one node has, and one rack.
    pub node_gpus: u32,
    pub rack_gpus: u32,
    pub total_gpus: u32,
    /// GPU models the nodes carry (`nvidia.com/gpu.product`), none on a generated cluster.
    pub models: Vec<String>,
    /// Per node: its GPUs.
    pub gpus_of: Vec<u32>,
    /// When fractions share the GPUs: the devices that publish them (`shared::share`).
    pub shared: Option<Arc<DraSnapshot>>,
    /// In words, for the report.
    pub description: String,
}

impl Cluster {
    pub fn generated(shape: ClusterShape, config: &Config) -> Cluster {
        let racks = shape.racks.clamp(1, shape.nodes.max(1));
        let gpus = shape.gpus_per_node.max(1) as i64;
        let mut names = ResourceNames::default();
        let mut allocatable = Capacity::default();
        allocatable.set(names.intern("cpu"), 16_000 * gpus);
        allocatable.set(names.intern("memory"), 128 * GIB * gpus);
        allocatable.set(names.intern("pods"), 110);
        allocatable.set(names.intern(GPU), shape.gpus_per_node as i64);
        let nodes = (0..shape.nodes)
            .map(|i| {
                let (name, rack) = (format!("node-{i:04}"), i % racks);
                let labels: BTreeMap<String, String> = [
                    ("kubernetes.io/hostname", name.clone()),
                    ("topology.muster.dev/rack", format!("rack-{rack}")),
                    ("topology.muster.dev/block", format!("block-{}", rack / 2)),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
                Node {
                    name,
                    labels: Arc::new(labels),
                    taints: Default::default(),
                    unschedulable: false,
                    allocatable: allocatable.clone(),
                    requested: Capacity::default(),
                }
            })
            .collect();
        let description =
            format!("{} nodes x {} GPUs in {racks} racks, 2 racks a block", shape.nodes, shape.gpus_per_node);
        let gpus = vec![shape.gpus_per_node; shape.nodes];
        Cluster::new(names, nodes, gpus, config, description)
    }

    /// From Node objects (the other objects of a `--cluster` file are not read).
    pub fn from_nodes(objects: &[KubeNode], config: &Config) -> Result<Cluster, String> {
        let mut names = ResourceNames::default();
        for name in ["cpu", "memory", "pods", GPU] {
            names.intern(name);
        }
        let nodes = objects
            .iter()
            .map(|n| crate::convert::core::node(n, &mut names).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        if nodes.is_empty() {
            return Err("the cluster has no Node objects to replay the trace on".into());
        }
        let description = format!("{} nodes read from the cluster's files", nodes.len());
        let gpu = names.get(GPU).expect("interned");
        let gpus = nodes.iter().map(|n| n.allocatable.get(gpu).max(0) as u32).collect();
        Ok(Cluster::new(names, nodes, gpus, config, description))
    }

    /// The cluster of `nodes`, each with its GPUs in `gpus_of`.
    pub fn new(
        resources: ResourceNames,
        nodes: Vec<Node>,
        gpus_of: Vec<u32>,
        config: &Config,
        description: String,
    ) -> Cluster {
        let levels =
            config.topology.iter().map(|l| LevelSpec { name: l.name.clone(), label: l.node_label.clone() }).collect();
        let mut tree = TopologyTree::new(levels);
        tree.update(&nodes);
        let mut topology = tree.index(&nodes);
        let rack_level = topology
            .resolve("rack", &nodes, usize::MAX)
            .ok()
            .filter(|&level| topology.levels[level].node_domain.iter().any(Option::is_some));
        let rack_of: Vec<u32> = (0..nodes.len())
            .map(|n| rack_level.and_then(|level| topology.domain_of(level, n as u32)).unwrap_or(0))
            .collect();
        let racks = rack_of.iter().map(|r| *r as usize + 1).max().unwrap_or(1);
        let gpu = resources.get(GPU).expect("interned");
        let node_gpus = &gpus_of;
        let mut per_rack = vec![0u32; racks];
        for (n, g) in node_gpus.iter().enumerate() {
            per_rack[rack_of[n] as usize] += g;
        }
        let mut models: Vec<String> = nodes.iter().filter_map(|n| n.labels.get(MODEL_LABEL).cloned()).collect();
        models.sort();
        models.dedup();
        Cluster {
            gpu,
            cpu: resources.get("cpu").expect("interned"),
            memory: resources.get("memory").expect("interned"),
            node_gpus: node_gpus.iter().copied().max().unwrap_or(0),
            rack_gpus: per_rack.iter().copied().max().unwrap_or(0),
            total_gpus: node_gpus.iter().sum(),
            resources,
            nodes,
            topology,
            rack_level,
            rack_of,
            racks,
            models,
            description,
            gpus_of,
            shared: None,
        }
    }
}
