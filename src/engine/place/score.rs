//! How nodes are ordered for a shape, and how domains are compared for a gang.

use super::Workspace;
use crate::engine::dra::model::SubRequest;
use crate::engine::filter::preference;
use crate::engine::model::{Gang, NodeConstraints, NodeIdx, PendingPod, TaintEffect};
use crate::engine::node::Node;
use crate::engine::resources::ResourceId;
use crate::engine::topology::DomainChoice;

/// The weights of kube-scheduler's scores that Muster computes, as a scheduling profile
/// names them (its default profile's by default); 0 turns a score off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weights {
    pub node_affinity: i64,
    pub taint_toleration: i64,
    pub inter_pod_affinity: i64,
    pub pod_topology_spread: i64,
    /// InterPodAffinity's `hardPodAffinityWeight`: what a bound pod's required affinity
    /// adds for the pods it selects.
    pub hard_pod_affinity: i32,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            node_affinity: 2,
            taint_toleration: 3,
            inter_pod_affinity: 2,
            pod_topology_spread: 2,
            hard_pod_affinity: 1,
        }
    }
}

/// How nodes are ordered for a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scoring {
    /// Fill partly used nodes first, keeping whole nodes free for large gangs; pods that ask
    /// for no accelerator go to nodes without accelerators first.
    #[default]
    BinPack,
    /// Spread pods over the emptiest nodes.
    Spread,
}

/// What a gang needs most, by which domains are compared: its accelerators, its devices, or
/// its CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    Resource(ResourceId),
    Devices,
}

/// How many devices a pod's claims ask for at least (an `All` request asks for one).
fn devices_asked(pod: &PendingPod) -> i64 {
    pod.devices.as_deref().map_or(0, devices_of)
}

/// How many devices `devices` ask for at least: its claims' requests still to allocate and
/// its extended resources served by DRA (a share of a device counts one).
pub(super) fn devices_of(devices: &crate::engine::model::PodDevices) -> i64 {
    use crate::engine::dra::model::{AllocationMode, ClaimNeed};
    let claimed: i64 = devices
        .claims
        .iter()
        .filter_map(|c| match &c.need {
            ClaimNeed::Allocate(spec) => Some(spec),
            ClaimNeed::Allocated(_) => None,
        })
        .flat_map(|spec| spec.requests.iter())
        .map(|r| {
            r.alternatives
                .iter()
                .map(|a| match a.mode {
                    AllocationMode::ExactCount(n) => i64::from(n),
                    AllocationMode::All => 1,
                })
                .min()
                .unwrap_or(0)
        })
        .sum();
    claimed + devices.extended.iter().map(|e| i64::from(e.count)).sum::<i64>()
}

/// A candidate node's place in the scoring order, the node last.
/// A candidate's place in a shape's order (smallest first): the pod's preferences (the
/// negated score of [`Workspace::prefer`], 0 without any), then the scoring strategy's key.
pub(super) type SortKey = ((i64, i64, i64, i64, i64), NodeIdx);

impl Workspace<'_> {
    /// Each of a shape's candidate nodes with its place in the scoring strategy's order
    /// (smallest first): on the resource the shape needs most (`key_resource`), or on free
    /// devices `with_devices`. Keys are unique (the node breaks ties).
    pub(super) fn candidate_keys(
        &self,
        candidates: &[NodeIdx],
        key_resource: Option<ResourceId>,
        with_devices: bool,
        share: Option<&SubRequest>,
    ) -> Vec<SortKey> {
        let free = &self.free;
        let nodes = &self.snapshot.nodes;
        let accelerators = &self.accelerators;
        let claims = &self.claims;
        let score = |n: NodeIdx| -> (i64, i64, i64) {
            let f = &free[n as usize];
            match key_resource {
                _ if with_devices => (claims.free_devices(n) as i64, f.get(ResourceId::CPU), 0),
                Some(r) => (f.get(r), f.get(ResourceId::CPU), 0),
                None => {
                    let has_accelerators = accelerators.iter().any(|&r| nodes[n as usize].allocatable.get(r) > 0)
                        || !claims.dra.node_devices.get(n as usize).is_none_or(Vec::is_empty);
                    (has_accelerators as i64, f.get(ResourceId::CPU), f.get(ResourceId::MEMORY))
                }
            }
        };
        // Between nodes equally full, bin-packing takes the one in the fullest domain of the
        // packing level (racks, by default), so that whole domains stay free too.
        let topology = &self.snapshot.topology;
        let domain_free = &self.domain_free;
        let pack_level = self.pack_level;
        let first_fit = self.domain_choice == DomainChoice::FirstFit;
        let packed = |n: NodeIdx| -> i64 {
            let (Some(level), Some(r)) = (pack_level, key_resource) else { return 0 };
            match topology.domain_of(level, n) {
                None => i64::MAX,
                Some(d) if first_fit => i64::from(d),
                Some(d) => domain_free[level][d as usize].get(r),
            }
        };
        let scored = |n: NodeIdx| match self.scoring {
            // A GPU fraction goes where a partly shared GPU has room for it, the one it
            // would leave least of first (best fit); then to the node with the fewest
            // free GPUs.
            Scoring::BinPack if share.is_some() => {
                let sub = share.expect("a share");
                match claims.share_left_after(n, sub) {
                    Some(left) => ((0, 0, left.units_ceil() >> 20, 0, 0), n),
                    None => {
                        let (a, b, _) = score(n);
                        ((0, 1, packed(n), a, b), n)
                    }
                }
            }
            Scoring::BinPack => {
                let (a, b, c) = score(n);
                ((0, packed(n), a, b, c), n)
            }
            Scoring::Spread => {
                let (a, b, c) = score(n);
                let first = if key_resource.is_some() || with_devices { -a } else { a };
                ((0, first, 0, -b, -c), n)
            }
        };
        candidates.iter().map(|&n| scored(n)).collect()
    }

    /// Puts the candidates the pod prefers first, as kube-scheduler's NodeAffinity and
    /// TaintToleration scores rank them ([`node_preferences`]). Nothing changes for a pod
    /// without preferred terms on nodes without such taints.
    pub(super) fn prefer(&self, keys: &mut [SortKey], constraints: &NodeConstraints) {
        let nodes: Vec<NodeIdx> = keys.iter().map(|&(_, n)| n).collect();
        if let Some(scores) = node_preferences(&self.snapshot.nodes, &nodes, constraints, &self.weights) {
            for (key, score) in keys.iter_mut().zip(scores) {
                key.0.0 = -score;
            }
        }
    }

    /// The free amount of `key` in a domain.
    pub(crate) fn domain_key_free(&self, level: usize, domain: u32, key: Key) -> i64 {
        match key {
            Key::Resource(r) => self.domain_free[level][domain as usize].get(r),
            Key::Devices => self.snapshot.topology.levels[level].domains[domain as usize]
                .nodes
                .iter()
                .map(|&n| self.claims.free_devices(n) as i64)
                .sum(),
        }
    }

    /// What the gang's pods ask of `key`, over the pods it still needs (the largest first).
    pub(crate) fn gang_key(&mut self, gang: &Gang) -> (Key, i64) {
        let needed = gang.still_needed().max(1);
        let accelerator = self
            .accelerators
            .iter()
            .copied()
            .filter(|&r| gang.pods.iter().any(|p| p.demand.get(r) > 0))
            .max_by_key(|&r| gang.pods.iter().map(|p| p.demand.get(r)).sum::<i64>());
        let with_devices = gang.pods.iter().any(|p| p.devices.is_some());
        let (key, per_pod): (Key, Vec<i64>) = match accelerator {
            Some(r) if !with_devices => (Key::Resource(r), gang.pods.iter().map(|p| p.demand.get(r)).collect()),
            _ if with_devices => (Key::Devices, gang.pods.iter().map(devices_asked).collect()),
            _ => (Key::Resource(ResourceId::CPU), gang.pods.iter().map(|p| p.demand.get(ResourceId::CPU)).collect()),
        };
        let mut per_pod = per_pod;
        per_pod.sort_unstable_by(|a, b| b.cmp(a));
        (key, per_pod.iter().take(needed).sum())
    }
}

/// The score a pod's node preferences give each of `among`, as kube-scheduler's NodeAffinity
/// and TaintToleration give it, each normalised over `among` to 0..=100 and weighted: the
/// matched preferred terms' weights against the most any node matches, and the untolerated
/// PreferNoSchedule taints, fewest best. None when nothing could tell the nodes apart (no
/// preferred terms, no such taints).
pub(super) fn node_preferences(
    nodes: &[Node],
    among: &[NodeIdx],
    constraints: &NodeConstraints,
    weights: &Weights,
) -> Option<Vec<i64>> {
    let tainted = |n: NodeIdx| nodes[n as usize].taints.iter().any(|t| t.effect == TaintEffect::PreferNoSchedule);
    if constraints.preferred.is_empty() && !among.iter().any(|&n| tainted(n)) {
        return None;
    }
    let parts: Vec<(i64, i64)> = among.iter().map(|&n| preference(&nodes[n as usize], constraints)).collect();
    let most_affinity = parts.iter().map(|p| p.0).max().unwrap_or(0);
    let most_taints = parts.iter().map(|p| p.1).max().unwrap_or(0);
    let score = |(affinity, taints): (i64, i64)| {
        let affinity = if most_affinity > 0 { affinity * 100 / most_affinity } else { 0 };
        let taints = if most_taints > 0 { 100 - taints * 100 / most_taints } else { 100 };
        weights.node_affinity * affinity + weights.taint_toleration * taints
    };
    Some(parts.into_iter().map(score).collect())
}
