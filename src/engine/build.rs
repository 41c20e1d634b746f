//! Builders for snapshots, used by tests, benchmarks and the built-in simulator scenarios.
//!
//! Amounts are in the engine's units: CPU in millicores, memory in bytes, others in units.

use std::sync::Arc;

use super::model::{
    Gang, GangKey, GangKind, Node, NodeConstraints, PendingPod, PodKey, RunningGang, RunningPod, Snapshot,
};
use super::queues::{QueueSpec, QueueTree, ResourceRule};
use super::resources::{Capacity, Demand};

pub const GPU: &str = "nvidia.com/gpu";
pub const GIB: i64 = 1 << 30;

/// A queue's rule for one resource: name, quota, weight, limit, lending limit.
pub type QueueRule<'a> = (&'a str, i64, u64, Option<i64>, Option<i64>);

#[derive(Default)]
pub struct SnapshotBuilder {
    snapshot: Snapshot,
    /// Topology constraints to resolve when built: gang index, required, preferred.
    topology: Vec<(usize, Option<String>, Option<String>)>,
    queues: Vec<QueueSpec>,
}

impl SnapshotBuilder {
    pub fn new() -> SnapshotBuilder {
        SnapshotBuilder::default()
    }

    fn capacity(&mut self, amounts: &[(&str, i64)]) -> Capacity {
        let mut capacity = Capacity::default();
        for &(name, amount) in amounts {
            capacity.set(self.snapshot.resources.intern(name), amount);
        }
        capacity
    }

    pub fn demand(&mut self, amounts: &[(&str, i64)]) -> Demand {
        let mut entries: Vec<_> = amounts.iter().map(|&(name, a)| (self.snapshot.resources.intern(name), a)).collect();
        entries.push((super::resources::ResourceId::PODS, 1));
        Demand::new(entries)
    }

    /// A node with `cpus` cores, `memory_gib` GiB, 110 pods and `gpus` nvidia.com/gpu.
    pub fn gpu_node(
        mut self,
        name: &str,
        cpus: i64,
        memory_gib: i64,
        gpus: i64,
        labels: &[(&str, &str)],
    ) -> SnapshotBuilder {
        let mut amounts = vec![("cpu", cpus * 1000), ("memory", memory_gib * GIB), ("pods", 110)];
        if gpus > 0 {
            amounts.push((GPU, gpus));
        }
        let allocatable = self.capacity(&amounts);
        Arc::make_mut(&mut self.snapshot.nodes).push(Node {
            name: name.to_string(),
            labels: std::sync::Arc::new(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            taints: Default::default(),
            unschedulable: false,
            allocatable,
            requested: Capacity::default(),
        });
        self
    }

    /// Changes the last node added.
    pub fn with_last_node(mut self, change: impl FnOnce(&mut Node)) -> SnapshotBuilder {
        change(Arc::make_mut(&mut self.snapshot.nodes).last_mut().expect("no node added yet"));
        self
    }

    /// Marks `amounts` as requested on node `name` by pods already bound there.
    pub fn used(mut self, name: &str, amounts: &[(&str, i64)]) -> SnapshotBuilder {
        let demand = Demand::new(amounts.iter().map(|&(n, a)| (self.snapshot.resources.intern(n), a)).collect());
        let node = Arc::make_mut(&mut self.snapshot.nodes).iter_mut().find(|n| n.name == name).expect("no such node");
        node.requested.add(&demand, 1);
        self
    }

    /// A gang of `pods` identical pods named `<name>-<i>` in namespace `default`, each asking
    /// for `demand`, needing `min_member` at once; kind Single when it is one pod with min 1.
    pub fn gang(mut self, name: &str, min_member: usize, pods: usize, demand: &[(&str, i64)]) -> SnapshotBuilder {
        let demand = self.demand(demand);
        let constraints = Arc::new(NodeConstraints::default());
        let kind = if pods == 1 && min_member == 1 { GangKind::Single } else { GangKind::Muster };
        let created = self.snapshot.gangs.len() as i64;
        let pods = (0..pods)
            .map(|i| PendingPod {
                devices: None,
                key: PodKey {
                    namespace: "default".into(),
                    name: if kind == GangKind::Single { name.to_string() } else { format!("{name}-{i}") },
                },
                demand: demand.clone(),
                constraints: constraints.clone(),
                labels: Default::default(),
                rules: None,
            })
            .collect();
        self.snapshot.gangs.push(Gang {
            key: GangKey { kind, namespace: "default".into(), name: name.to_string() },
            min_member,
            bound: 0,
            pods,
            priority: 0,
            created,
            blocked: None,
            topology: None,
            queue: super::queues::DEFAULT_QUEUE.to_string(),
            quota_owner: None,
            preemption_delay: None,
            last_evicted: None,
            preemptible: true,
            preempts: true,
            parked: Default::default(),
            max_run_seconds: None,
        });
        self
    }

    /// Changes the last gang added.
    pub fn with_last_gang(mut self, change: impl FnOnce(&mut Gang)) -> SnapshotBuilder {
        change(self.snapshot.gangs.last_mut().expect("no gang added yet"));
        self
    }

    /// The snapshot, with the default topology levels indexed from the nodes' labels and
    /// the gangs' topology constraints resolved against them.
    pub fn build(mut self) -> Snapshot {
        let mut tree = super::topology::TopologyTree::new(super::topology::default_levels());
        tree.update(&self.snapshot.nodes);
        let mut index = tree.index(&self.snapshot.nodes);
        let nodes = &self.snapshot.nodes;
        for (gang, required, preferred) in self.topology {
            let mut resolve =
                |name: Option<String>| name.map(|n| index.resolve(&n, nodes, usize::MAX).expect("a level"));
            let (required, preferred) = (resolve(required), resolve(preferred));
            self.snapshot.gangs[gang].topology = Some(super::topology::GangTopology { required, preferred });
        }
        self.snapshot.topology = index;
        self.snapshot.queues = QueueTree::build(&self.queues);
        self.snapshot.queues.name_keys(&self.snapshot.resources);
        self.snapshot
    }

    /// A queue: `parent` ("" for the top level) and, per resource, quota, weight, limit and
    /// lending limit (None: unset).
    pub fn queue(
        mut self,
        name: &str,
        parent: &str,
        rules: &[QueueRule<'_>],
        change: impl FnOnce(&mut QueueSpec),
    ) -> SnapshotBuilder {
        let mut spec = QueueSpec::new(name);
        spec.parent = (!parent.is_empty()).then(|| parent.to_string());
        for &(resource, quota, weight, limit, lending_limit) in rules {
            let id = self.snapshot.resources.intern(resource);
            // Queue amounts of GPUs are in thousandths; rules here are given in GPUs.
            let scale = if resource == super::queues::GPU_RESOURCE { super::queues::GPU_MILLI } else { 1 };
            let scaled = |v: Option<i64>| v.map(|v| v * scale);
            let rule = ResourceRule {
                quota: Some(quota * scale),
                weight_milli: weight * 1000,
                limit: scaled(limit),
                lending_limit: scaled(lending_limit),
            };
            spec.resources.push((id, rule));
        }
        change(&mut spec);
        self.queues.push(spec);
        self
    }

    /// Puts the last gang added in `queue`.
    pub fn in_queue(self, queue: &str) -> SnapshotBuilder {
        let queue = queue.to_string();
        self.with_last_gang(|g| g.queue = queue)
    }

    /// A running gang of `pods` pods in `queue` on node `node`, each using `demand`,
    /// started at `started`; the node's requested capacity counts them.
    pub fn running(
        mut self,
        name: &str,
        queue: &str,
        node: &str,
        pods: usize,
        demand: &[(&str, i64)],
        started: i64,
    ) -> SnapshotBuilder {
        let demand = self.demand(demand);
        let index = self.snapshot.nodes.iter().position(|n| n.name == node).expect("no such node");
        Arc::make_mut(&mut self.snapshot.nodes)[index].requested.add(&demand, pods as i64);
        let pods = (0..pods)
            .map(|i| RunningPod {
                key: PodKey { namespace: "default".into(), name: format!("{name}-{i}") },
                node: index as super::model::NodeIdx,
                demand: demand.clone(),
                started,
                devices: Vec::new(),
                grace_seconds: 30,
                gpu_milli: 0,
            })
            .collect::<Vec<_>>();
        self.snapshot.running.push(RunningGang {
            key: GangKey { kind: GangKind::Muster, namespace: "default".into(), name: name.to_string() },
            queue: queue.to_string(),
            priority: 0,
            preemptible: true,
            min_member: pods.len(),
            pods,
            created: started,
            opportunistic: false,
        });
        self
    }

    /// A pod on `node` using `demand` until `at` (its runtime bound): the node's requested
    /// capacity counts it, and the snapshot lists it as ending then.
    pub fn ending(mut self, node: &str, demand: &[(&str, i64)], at: i64) -> SnapshotBuilder {
        let demand = self.demand(demand);
        let index = self.snapshot.nodes.iter().position(|n| n.name == node).expect("no such node");
        Arc::make_mut(&mut self.snapshot.nodes)[index].requested.add(&demand, 1);
        self.snapshot.endings.push(super::model::Ending { at, node: index as super::model::NodeIdx, demand });
        self
    }

    /// Gives the last gang added a runtime bound, in seconds.
    pub fn bounded(self, seconds: i64) -> SnapshotBuilder {
        self.with_last_gang(|g| g.max_run_seconds = Some(seconds))
    }

    /// Changes the last running gang added.
    pub fn with_last_running(mut self, change: impl FnOnce(&mut RunningGang)) -> SnapshotBuilder {
        change(self.snapshot.running.last_mut().expect("no running gang added yet"));
        self
    }

    /// The time the snapshot describes, in seconds.
    pub fn at(mut self, now: i64) -> SnapshotBuilder {
        self.snapshot.now = now;
        self
    }

    /// Gives the last gang added a topology constraint, by level name or node label key.
    pub fn with_topology(mut self, required: Option<&str>, preferred: Option<&str>) -> SnapshotBuilder {
        let gang = self.snapshot.gangs.len().checked_sub(1).expect("no gang added yet");
        self.topology.push((gang, required.map(str::to_string), preferred.map(str::to_string)));
        self
    }
}
