//! Shapes: the pods of a gang that are interchangeable, placed as one set, with the nodes
//! that pass the static filters found and ordered once per cycle.

use std::hash::{BuildHasher, Hash, Hasher};

use foldhash::fast::FixedState;
use std::sync::Arc;

use super::Workspace;
use super::rules::work::ShapeTables;
use super::score::SortKey;
use crate::engine::claims::ShapeDevices;
use crate::engine::filter::check_static;
use crate::engine::model::{Gang, NodeConstraints, NodeIdx, PendingPod, PodDevices};
use crate::engine::pods::PodRules;
use crate::engine::reason::{NodeRejection, NodeRejections};
use crate::engine::resources::{Demand, ResourceId};

/// Device needs as part of a shape's identity: equal when pods are interchangeable.
#[derive(Clone, Debug)]
struct DevicesKey(Arc<PodDevices>);

impl PartialEq for DevicesKey {
    fn eq(&self, other: &DevicesKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.same_shape(&other.0)
    }
}
impl Eq for DevicesKey {}
impl Hash for DevicesKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.shape_hash(state);
    }
}

/// What makes pods interchangeable, hashed once when made: the map of shapes rehashes and
/// compares the hash first, not the rules and constraints each time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ShapeKey {
    hash: u64,
    demand: Demand,
    constraints: Arc<NodeConstraints>,
    devices: Option<DevicesKey>,
    /// The pods' namespace and rules between pods, when they have any.
    rules: Option<(String, Arc<PodRules>)>,
}

impl Hash for ShapeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl ShapeKey {
    /// The key of `pod`'s shape, with its rules between pods or without them.
    fn of(pod: &PendingPod, rules: Option<&Arc<PodRules>>) -> ShapeKey {
        let devices = pod.devices.clone().map(DevicesKey);
        let rules = rules.map(|r| (pod.key.namespace.clone(), r.clone()));
        let hash = FixedState::with_seed(0).hash_one((&pod.demand, &pod.constraints, &devices, &rules));
        ShapeKey { hash, demand: pod.demand.clone(), constraints: pod.constraints.clone(), devices, rules }
    }
}

pub(super) struct Shape {
    pub(super) demand: Demand,
    /// Nodes passing the static filters: best first once `sorted` (node order until then;
    /// [`Shape::sorted_candidates`] sorts them by `keys` when first needed in order);
    /// shared with the shapes that differ from it only in their rules between pods.
    pub(super) candidates: Arc<Vec<NodeIdx>>,
    sorted: bool,
    keys: Vec<SortKey>,
    /// The candidates that could take a pod of the shape when it was made, best first, made
    /// while capacity had only shrunk in the cycle: until it grows (a trial gives capacity
    /// back), no other candidate can take one, and placement scans only these.
    pub(super) open: Option<Arc<Vec<NodeIdx>>>,
    /// Nodes before this index of the list placement scans (`open` while capacity has not
    /// grown, else the candidates) cannot take even one pod of the shape.
    pub(super) cursor: usize,
    pub(super) static_rejections: NodeRejections,
    /// Pods of the shape an empty cluster could hold (capped at `usize::MAX`).
    pub(super) capacity_when_empty: usize,
    pub(super) devices: Option<ShapeDevices>,
    /// Why nodes could not allocate the shape's devices, found once per cycle for reasons.
    pub(super) device_rejections: Option<Vec<(NodeIdx, String)>>,
    /// Per node: its place in `candidates` (`u32::MAX` for none); made when first needed.
    rank: Vec<u32>,
    /// The counts its pods' rules between pods are checked against, when they have any:
    /// its pods are then placed one by one, each checked.
    pub(super) tables: Option<ShapeTables>,
}

impl Shape {
    /// The candidates, best first.
    pub(super) fn sorted_candidates(&mut self) -> &[NodeIdx] {
        if !self.sorted {
            self.keys.sort_unstable();
            self.candidates = Arc::new(self.keys.iter().map(|&(_, n)| n).collect());
            self.keys = Vec::new();
            self.sorted = true;
        }
        &self.candidates
    }

    /// A shape of the same pods with rules between pods: the same candidates, found once,
    /// and the same open nodes from where this shape's scan has reached.
    fn with_rules(&mut self, tables: ShapeTables, grown: bool) -> Shape {
        self.sorted_candidates();
        Shape {
            demand: self.demand.clone(),
            candidates: self.candidates.clone(),
            sorted: true,
            keys: Vec::new(),
            open: if grown { None } else { self.open.clone() },
            cursor: if grown || self.open.is_none() { 0 } else { self.cursor },
            static_rejections: self.static_rejections.clone(),
            capacity_when_empty: self.capacity_when_empty,
            devices: None,
            device_rejections: None,
            rank: Vec::new(),
            tables: Some(tables),
        }
    }

    /// Per node, its place among the candidates (`u32::MAX`: not a candidate).
    pub(super) fn rank(&mut self) -> &[u32] {
        if self.rank.is_empty() {
            self.sorted_candidates();
            let most = self.candidates.iter().map(|&n| n as usize + 1).max().unwrap_or(0);
            self.rank = vec![u32::MAX; most];
            for (i, &n) in self.candidates.iter().enumerate() {
                self.rank[n as usize] = i as u32;
            }
        }
        &self.rank
    }
}

/// A shape of pods with rules between pods, as found by the address of their rules: the
/// rules held (so the address stays theirs for the cycle), and what else must be equal.
pub(super) struct RulesShape {
    /// Held, never read: while held, no other rules can be made at this address.
    _rules: Arc<PodRules>,
    constraints: Arc<NodeConstraints>,
    namespace: String,
    shape: usize,
}

impl Workspace<'_> {
    /// The shape of a pod with rules and no devices whose rules were seen before.
    fn known_rules_shape(&self, pod: &PendingPod) -> Option<usize> {
        let rules = pod.rules.as_ref().filter(|_| pod.devices.is_none())?;
        let found = self.shapes_by_rules.get(&(Arc::as_ptr(rules) as usize))?;
        found
            .iter()
            .find(|s| {
                // The rules are the ones at this address (held, so never freed and reused);
                // `Arc`'s equality compares addresses before values.
                s.namespace == pod.key.namespace
                    && s.constraints == pod.constraints
                    && self.shapes[s.shape].demand == pod.demand
            })
            .map(|s| s.shape)
    }

    /// The shape of `pod`, made (its candidate nodes found and ordered) on first sight.
    pub(super) fn shape_of(&mut self, pod: &PendingPod) -> usize {
        if let Some(shape) = self.known_rules_shape(pod) {
            return shape;
        }
        let shape = self.shape_by_key(pod, pod.rules.as_ref());
        if let (Some(rules), None) = (&pod.rules, &pod.devices) {
            let known = RulesShape {
                _rules: rules.clone(),
                constraints: pod.constraints.clone(),
                namespace: pod.key.namespace.clone(),
                shape,
            };
            self.shapes_by_rules.entry(Arc::as_ptr(rules) as usize).or_default().push(known);
        }
        shape
    }

    /// The shape of `pod` by its whole key, with `rules` (the pod's, or None for the same
    /// pod without them).
    fn shape_by_key(&mut self, pod: &PendingPod, rules: Option<&Arc<PodRules>>) -> usize {
        let key = ShapeKey::of(pod, rules);
        if let Some(&id) = self.shape_ids.get(&key) {
            return id;
        }
        if let (Some(rules), None) = (rules, &pod.devices) {
            // Pods with rules between pods pass the same static filters as the same pods
            // without: the candidates are found once for all of them.
            let base = self.shape_by_key(pod, None);
            let tables = self.pods.tables(&pod.key.namespace, rules, &pod.constraints);
            let shape = self.shapes[base].with_rules(tables, self.grown);
            self.shapes.push(shape);
            self.shape_ids.insert(key, self.shapes.len() - 1);
            return self.shapes.len() - 1;
        }
        let mut devices = pod.devices.as_ref().map(|d| self.claims.shape(d));
        let mut static_rejections = NodeRejections { total_nodes: self.snapshot.nodes.len(), ..Default::default() };
        let mut candidates = Vec::new();
        let mut capacity_when_empty = 0usize;
        for (i, node) in self.snapshot.nodes.iter().enumerate() {
            match check_static(node, &pod.constraints) {
                Ok(()) => {
                    candidates.push(i as NodeIdx);
                    let holds = match devices.as_mut() {
                        Some(d) => {
                            node.allocatable.fit_count(&self.claims.node_demand(d, &pod.demand, node), usize::MAX >> 1)
                        }
                        None => node.allocatable.fit_count(&pod.demand, usize::MAX >> 1),
                    };
                    capacity_when_empty = capacity_when_empty.saturating_add(holds);
                }
                Err(r) => static_rejections.add(NodeRejection::Static(r)),
            }
        }
        if let Some(d) = devices.as_mut()
            && d.error.is_none()
        {
            d.error = self.claims.runtime_error(d, &candidates);
        }
        let key_resource = self.accelerators.iter().copied().find(|&r| pod.demand.get(r) > 0);
        let mut keys = match self.shape_kind(pod) {
            Some(kind) => self.fragmentation_keys(&candidates, kind),
            None => {
                let share = devices.as_ref().and_then(|d| d.pod.extended.iter().find(|r| r.share.is_some()));
                let share = share.map(|r| r.sub_request());
                self.candidate_keys(&candidates, key_resource, devices.is_some(), share.as_ref())
            }
        };
        self.prefer(&mut keys, &pod.constraints);
        let open = (!self.grown && devices.is_none()).then(|| {
            let mut open: Vec<SortKey> =
                keys.iter().copied().filter(|&(_, n)| self.free[n as usize].fit_count(&pod.demand, 1) > 0).collect();
            open.sort_unstable();
            Arc::new(open.into_iter().map(|(_, n)| n).collect())
        });
        let tables = rules.map(|rules| self.pods.tables(&pod.key.namespace, rules, &pod.constraints));
        self.shapes.push(Shape {
            demand: pod.demand.clone(),
            candidates: Arc::new(candidates),
            sorted: false,
            keys,
            open,
            cursor: 0,
            static_rejections,
            capacity_when_empty,
            devices,
            device_rejections: None,
            rank: Vec::new(),
            tables,
        });
        if self.shapes.last().is_some_and(|s| s.devices.is_some()) {
            // Device shapes are searched pod by pod in the candidates' order, always.
            self.shapes.last_mut().expect("just made").sorted_candidates();
        }
        self.shape_ids.insert(key, self.shapes.len() - 1);
        self.shapes.len() - 1
    }

    /// Whether the shape's pods are placed one by one, each checked against the rules
    /// between pods: they have rules, or some pod's anti-affinity may refuse them.
    pub(super) fn checked(&self, shape: usize) -> bool {
        self.shapes[shape].tables.is_some() || self.pods.anti_affinity_anywhere()
    }

    /// Whether a node that took no pod of a checked shape stays refused for the rest of the
    /// cycle: it cannot take even one, or (while the scan is `leading`, at the head of the
    /// list) a pod placed or bound in its domain matches the shape's own required
    /// anti-affinity, which refuses the shape until that pod leaves, whatever else is placed.
    pub(super) fn skipped_for_good(&self, shape: usize, node: NodeIdx, leading: bool) -> bool {
        self.free[node as usize].fit_count(&self.shapes[shape].demand, 1) == 0
            || (leading && self.shapes[shape].tables.as_ref().is_some_and(|t| self.pods.anti_refuses(t, node)))
    }

    /// The gang's pods grouped by shape, largest demand first so big pods are not crowded out.
    pub(crate) fn groups(&mut self, gang: &Gang) -> Vec<(usize, Vec<usize>)> {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, pod) in gang.pods.iter().enumerate() {
            let shape = self.shape_of(pod);
            match groups.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, members)) => members.push(i),
                None => groups.push((shape, vec![i])),
            }
        }
        let weight = |shape: &Shape| -> (i64, i64) {
            let d = &shape.demand;
            let accelerators: i64 = d.entries().iter().filter(|(r, _)| r.0 >= 4).map(|&(_, a)| a).sum();
            (accelerators + shape.devices.is_some() as i64, d.get(ResourceId::CPU))
        };
        groups.sort_by_key(|(shape, _)| std::cmp::Reverse(weight(&self.shapes[*shape])));
        groups
    }
}
