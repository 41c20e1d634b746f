//! The placement that comes nearest to fitting a waiting gang, in the scheduler's terms
//! ("rack r3 has 14 of the 16 GPUs needed"): for `muster explain` and the page at `/ui`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::engine::dra::model::{AllocationMode, AttributeValue, ClaimNeed};
use crate::engine::model::{Gang, Snapshot};

/// GPUs one pod needs: its `nvidia.com/gpu` and the devices its claims to allocate ask for.
fn pod_gpus(snapshot: &Snapshot, pod: &crate::engine::model::PendingPod) -> i64 {
    let extended = snapshot.resources.get(super::gpus::GPU_RESOURCE).map_or(0, |id| pod.demand.get(id));
    let claimed: i64 = pod
        .devices
        .iter()
        .flat_map(|d| &d.claims)
        .filter_map(|c| match &c.need {
            ClaimNeed::Allocate(spec) => Some(spec),
            ClaimNeed::Allocated(_) => None,
        })
        .flat_map(|spec| &spec.requests)
        .filter_map(|r| r.alternatives.first())
        .map(|sub| match sub.mode {
            AllocationMode::ExactCount(n) => i64::from(n),
            AllocationMode::All => 1,
        })
        .sum();
    extended + claimed
}

/// Free GPUs per node: `nvidia.com/gpu` not requested, or GPU devices no claim holds.
pub fn free_gpus(snapshot: &Snapshot) -> Vec<i64> {
    let id = snapshot.resources.get(super::gpus::GPU_RESOURCE);
    let mut used = vec![false; snapshot.dra.devices.len()];
    for u in snapshot.dra.in_use.iter().filter(|u| !u.admin_access) {
        if let Some(slot) = used.get_mut(u.device as usize) {
            *slot = true;
        }
    }
    snapshot
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let extended = id.map_or(0, |id| node.allocatable.get(id) - node.requested.get(id));
            if id.is_some_and(|id| node.allocatable.get(id) > 0) {
                return extended.max(0);
            }
            let devices = snapshot.dra.node_devices.get(i).map(Vec::as_slice).unwrap_or_default();
            devices
                .iter()
                .filter(|&&d| !used[d as usize])
                .filter(|&&d| {
                    let device = &snapshot.dra.devices[d as usize];
                    let kind = match device.attributes.get(&format!("{}/type", device.driver)) {
                        Some(AttributeValue::String(kind)) => Some(kind.as_str()),
                        _ => None,
                    };
                    super::gpus::is_gpu(&device.driver, kind)
                })
                .count() as i64
        })
        .collect()
}

/// The placement closest to fitting: the domain of the required level (or the cluster) with
/// the most free GPUs, in the scheduler's terms.
pub fn nearest(snapshot: &Snapshot, gang: &Gang) -> Option<String> {
    nearest_with(snapshot, &free_gpus(snapshot), gang)
}

/// [`nearest`] with the free GPUs per node (`free_gpus`) computed once for many gangs.
pub fn nearest_with(snapshot: &Snapshot, free: &[i64], gang: &Gang) -> Option<String> {
    let needed_pods = gang.still_needed().max(1).min(gang.pods.len().max(1));
    let per_pod: Vec<i64> = gang.pods.iter().take(needed_pods).map(|p| pod_gpus(snapshot, p)).collect();
    let needed: i64 = per_pod.iter().sum();
    if needed == 0 {
        return None;
    }
    let largest_pod = per_pod.iter().copied().max().unwrap_or(0);
    let pods_fitting = |nodes: &mut dyn Iterator<Item = usize>| -> usize {
        nodes.map(|n| if largest_pod > 0 { (free[n] / largest_pod).max(0) as usize } else { 0 }).sum()
    };
    let level = gang.topology.as_ref().and_then(|t| t.required).and_then(|l| snapshot.topology.levels.get(l));
    let mut line = match level {
        Some(level) => {
            let mut domains: BTreeMap<&str, (i64, usize)> = BTreeMap::new();
            for domain in &level.domains {
                let gpus: i64 = domain.nodes.iter().map(|&n| free[n as usize]).sum();
                let fit = pods_fitting(&mut domain.nodes.iter().map(|&n| n as usize));
                domains.insert(domain.value.as_str(), (gpus, fit));
            }
            let (domain, (gpus, fit)) =
                domains.into_iter().max_by_key(|(name, (gpus, fit))| (*fit, *gpus, std::cmp::Reverse(*name)))?;
            format!(
                "{} {domain} has {gpus} of the {needed} GPUs needed ({} of the {needed_pods} pods fit there)",
                level.name,
                fit.min(needed_pods)
            )
        }
        None => {
            let gpus: i64 = free.iter().sum();
            let fit = pods_fitting(&mut (0..free.len()));
            format!(
                "the cluster has {gpus} of the {needed} GPUs needed free ({} of the {needed_pods} pods fit)",
                fit.min(needed_pods)
            )
        }
    };
    // For pods that do not fit a node alone: the node that comes closest.
    if largest_pod > 0
        && let Some((best, &gpus)) = free.iter().enumerate().max_by_key(|(i, g)| (**g, std::cmp::Reverse(*i)))
        && gpus < largest_pod
    {
        write!(
            line,
            "; the freest node, {}, has {gpus} of the {largest_pod} GPUs one pod needs",
            snapshot.nodes[best].name
        )
        .ok();
    }
    Some(line)
}
