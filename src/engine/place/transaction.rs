//! The placement transaction: a gang's pods go onto nodes (with their claims) in the
//! working copy, and if fewer than its `min_member` fit, every tentative change is undone.

use std::sync::Arc;

use super::{Key, Scope, Shortfall, Workspace};
use crate::engine::claims::ClaimPlacement;
use crate::engine::dra::allocate::Failure;
use crate::engine::model::{Gang, NodeIdx, PodKey};
use crate::engine::resources::{Capacity, Demand};
use crate::engine::topology::DomainIndex;

/// What a tentative placement took from a node: a shape's demand, or a node's own variant.
pub(super) enum Delta {
    Shape(usize),
    Own(Arc<Demand>),
}

/// A gang's tentative placement: pod index within the gang → node.
pub type Assignment = Vec<(usize, NodeIdx)>;

/// What a failed placement attempt tried: its shapes with their pods, how many it placed
/// before it gave up, how many it needed, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Attempt {
    groups: Vec<(usize, usize)>,
    fit: usize,
    needed: usize,
    scope: Scope,
}

/// A gang that fits: its pods' nodes and every claim they allocate or reserve.
#[derive(Debug, Default)]
pub struct GangFit {
    pub pods: Assignment,
    pub claims: Vec<ClaimPlacement>,
}

/// Takes `k` copies of `demand` from a node's free capacity and from its domains' (and,
/// during a trial, notes it in the journal).
pub(super) fn take(
    free: &mut super::memory::FreeCapacity,
    domain_free: &mut [Vec<Capacity>],
    journal: &mut Option<Vec<(NodeIdx, Demand, i64)>>,
    topology: &DomainIndex,
    node: NodeIdx,
    demand: &Demand,
    k: i64,
) {
    if let Some(journal) = journal {
        journal.push((node, demand.clone(), k));
    }
    free.touch(node).sub(demand, k);
    for (level, domains) in domain_free.iter_mut().enumerate() {
        if let Some(d) = topology.domain_of(level, node) {
            domains[d as usize].sub(demand, k);
        }
    }
}

impl Workspace<'_> {
    /// Places as many of the gang's pods as fit, if at least its `min_member` do, within its
    /// topology constraint; otherwise changes nothing and says why.
    pub fn place(&mut self, gang: &Gang) -> Result<GangFit, Box<Shortfall>> {
        match gang.topology {
            Some(topology) => self.place_in_topology(gang, topology),
            None => self.place_in(gang, Scope::All),
        }
    }

    /// The nodes of a shape a scoped attempt tries, in order: the shape's candidates in the
    /// domain, taking first the inner domains with the most free capacity when spreading.
    fn scoped_order(
        &mut self,
        shape: usize,
        within: Option<(usize, u32)>,
        spread: Option<(usize, Key)>,
    ) -> Vec<NodeIdx> {
        let snapshot = self.snapshot;
        let index = &snapshot.topology;
        let mut order: Vec<NodeIdx> = match within {
            // The domain's own nodes that are candidates, in the candidates' order: the
            // cost follows the domain's size, not the cluster's.
            Some((level, domain)) => {
                let rank = self.shapes[shape].rank();
                let mut nodes: Vec<NodeIdx> = index.levels[level].domains[domain as usize]
                    .nodes
                    .iter()
                    .copied()
                    .filter(|&n| rank.get(n as usize).is_some_and(|&r| r != u32::MAX))
                    .collect();
                nodes.sort_unstable_by_key(|&n| rank[n as usize]);
                nodes
            }
            None => self.shapes[shape].sorted_candidates().to_vec(),
        };
        if let Some((inner, key)) = spread {
            order.sort_by_cached_key(|&n| {
                let free = index.domain_of(inner, n).map_or(0, |d| self.domain_key_free(inner, d, key));
                (std::cmp::Reverse(free), index.domain_of(inner, n))
            });
        }
        order
    }

    /// Places the gang within `scope`, or changes nothing.
    pub(crate) fn place_in(&mut self, gang: &Gang, scope: Scope) -> Result<GangFit, Box<Shortfall>> {
        let needed = gang.still_needed();
        let groups = self.groups(gang);
        let generation = self.free.generation;
        let saved_cursors: Vec<(usize, usize)> = groups.iter().map(|(s, _)| (*s, self.shapes[*s].cursor)).collect();
        let claims_mark = self.claims.mark();
        let pods_mark = self.pods.mark();
        let mut fit = GangFit { pods: Vec::with_capacity(gang.pods.len()), claims: Vec::new() };
        let mut deltas: Vec<(NodeIdx, Delta, i64)> = Vec::new();
        let mut error = None;
        'shapes: for (shape_id, members) in &groups {
            let mut next = members.iter().peekable();
            let mut remaining = members.len();
            let order = match scope {
                Scope::All => None,
                Scope::Domain { level, domain, spread } => {
                    Some(self.scoped_order(*shape_id, Some((level, domain)), spread))
                }
                Scope::Spread { inner, key } => Some(self.scoped_order(*shape_id, None, Some((inner, key)))),
            };
            let open = !self.grown && self.shapes[*shape_id].open.is_some();
            if order.is_none() && !open {
                self.shapes[*shape_id].sorted_candidates();
            }
            if members.iter().any(|&m| self.scored(*shape_id, &gang.pods[m])) {
                let list = order.unwrap_or_else(|| self.scan_list(*shape_id, open));
                if let Err(e) = self.place_by_score(*shape_id, &list, gang, &mut next, &mut fit, &mut deltas) {
                    error = Some(e);
                    break 'shapes;
                }
                continue;
            }
            let start = if order.is_some() { 0 } else { self.shapes[*shape_id].cursor };
            // Pods checked one by one against the rules between pods may find room on a node
            // passed over once others are placed (a spread's least domain fills): the nodes
            // are gone through again while a pass places any.
            let checked = self.checked(*shape_id);
            let (mut i, mut leading, mut placed_in_pass) = (start, true, 0);
            loop {
                let node = match &order {
                    Some(order) => order.get(i).copied(),
                    None if open => self.shapes[*shape_id].open.as_ref().and_then(|o| o.get(i)).copied(),
                    None => self.shapes[*shape_id].candidates.get(i).copied(),
                };
                let Some(node) = node else {
                    if checked && remaining > 0 && placed_in_pass > 0 {
                        (i, placed_in_pass) = (start, 0);
                        continue;
                    }
                    break;
                };
                if remaining == 0 {
                    break;
                }
                let k = match self.fill_node(*shape_id, node, remaining, gang, &mut next, &mut fit, &mut deltas) {
                    Ok(k) => k,
                    Err(e) => {
                        error = Some(e);
                        break 'shapes;
                    }
                };
                if k == 0 {
                    // A node that cannot take even one pod of the shape stays skipped for
                    // the rest of the cycle (capacity only shrinks within a cycle, and pods
                    // leave only with a rollback or trial, which restores or resets the
                    // cursor), as does one the shape's own anti-affinity refuses; not one
                    // other rules refused: they may let it take one later.
                    let full = !checked || self.skipped_for_good(*shape_id, node, leading);
                    if leading && full && order.is_none() && !self.reserved[node as usize] {
                        self.shapes[*shape_id].cursor = i + 1;
                    } else if !full {
                        leading = false;
                    }
                    i += 1;
                    continue;
                }
                leading = false;
                placed_in_pass += k;
                remaining -= k;
                i += 1;
            }
        }

        let placed_enough = if needed == 0 { !fit.pods.is_empty() } else { fit.pods.len() >= needed };
        if placed_enough && error.is_none() {
            return Ok(fit);
        }
        // Where the rules between pods decide, the gang is explained as it stood when it
        // could place no more: its own pods count (a worker per node, and one node short).
        let checked = groups.iter().any(|(s, _)| self.checked(*s));
        let stuck = (checked && error.is_none()).then(|| self.shortfall(gang, &groups, fit.pods.len(), needed, scope));
        for (node, delta, k) in deltas {
            let demand = match &delta {
                Delta::Shape(shape) => &self.shapes[*shape].demand,
                Delta::Own(demand) => demand,
            };
            // Giving back is taking a negative amount.
            take(&mut self.free, &mut self.domain_free, &mut self.journal, &self.snapshot.topology, node, demand, -k);
        }
        for (shape_id, cursor) in saved_cursors {
            self.shapes[shape_id].cursor = cursor;
        }
        self.claims.rollback(claims_mark);
        self.pods.rollback(pods_mark);
        // Everything tried was given back: capacity is as it was.
        self.free.generation = generation;
        let attempt = Attempt {
            groups: groups.iter().map(|(shape, members)| (*shape, members.len())).collect(),
            fit: fit.pods.len(),
            needed,
            scope,
        };
        let mut shortfall = match stuck {
            Some(stuck) => stuck,
            None => self.remembered_shortfall(gang, &groups, &attempt),
        };
        shortfall.error = error;
        Err(Box::new(shortfall))
    }

    /// Why the attempt fell short, computed again only when capacity or the attempt changed.
    fn remembered_shortfall(&mut self, gang: &Gang, groups: &[(usize, Vec<usize>)], attempt: &Attempt) -> Shortfall {
        let (fit, needed, scope) = (attempt.fit, attempt.needed, attempt.scope);
        let shortfall = match self.shortfall_memo.take() {
            // Devices are explained per pod, so only shapes without them are remembered.
            Some((generation, ref seen, ref found))
                if generation == self.free.generation
                    && seen == attempt
                    && groups.iter().all(|(shape, _)| self.shapes[*shape].devices.is_none()) =>
            {
                found.clone()
            }
            _ => self.shortfall(gang, groups, fit, needed, scope),
        };
        self.shortfall_memo = Some((self.free.generation, attempt.clone(), shortfall.clone()));
        shortfall
    }

    /// Puts as many of the shape's `remaining` pods on `node` as fit there (with their
    /// claims), recording them in `fit` and the capacity taken in `deltas`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill_node(
        &mut self,
        shape_id: usize,
        node: NodeIdx,
        remaining: usize,
        gang: &Gang,
        next: &mut std::iter::Peekable<std::slice::Iter<'_, usize>>,
        fit: &mut GangFit,
        deltas: &mut Vec<(NodeIdx, Delta, i64)>,
    ) -> Result<usize, (PodKey, String)> {
        if self.reserved[node as usize] {
            return Ok(0);
        }
        let node_ref = &self.snapshot.nodes[node as usize];
        let checked = self.checked(shape_id);
        let shape = &mut self.shapes[shape_id];
        if shape.devices.is_none() && !checked {
            let k = self.free[node as usize].fit_count(&shape.demand, remaining);
            if k > 0 {
                take(
                    &mut self.free,
                    &mut self.domain_free,
                    &mut self.journal,
                    &self.snapshot.topology,
                    node,
                    &shape.demand,
                    k as i64,
                );
                deltas.push((node, Delta::Shape(shape_id), k as i64));
                for _ in 0..k {
                    let i = *next.next().expect("counted");
                    let pod = &gang.pods[i];
                    self.pods.place(node, &pod.key.namespace, &pod.labels, &pod.rules);
                    fit.pods.push((i, node));
                }
            }
            return Ok(k);
        }
        // Pod by pod: each takes the node only with all of its claims, and only where the
        // rules between pods let it.
        let own = shape.devices.as_mut().map(|d| self.claims.node_demand(d, &shape.demand, node_ref));
        let capacity = self.free[node as usize].fit_count(own.as_deref().unwrap_or(&shape.demand), remaining);
        let tables = shape.tables.take();
        let mut placed = 0;
        let mut error = None;
        for _ in 0..capacity {
            let pod = &gang.pods[**next.peek().expect("counted")];
            if checked
                && self
                    .pods
                    .check(tables.as_ref(), node, &pod.key.namespace, &pod.labels, pod.rules.as_deref())
                    .is_err()
            {
                break;
            }
            if let Some(devices) = self.shapes[shape_id].devices.as_mut() {
                match self.claims.fit(devices, pod, node, node_ref) {
                    Ok(claims) => fit.claims.extend(claims),
                    Err(Failure::Node(_) | Failure::GaveUp) => break,
                    Err(Failure::Pod(why)) => {
                        error = Some((pod.key.clone(), why));
                        break;
                    }
                }
            }
            self.pods.place(node, &pod.key.namespace, &pod.labels, &pod.rules);
            fit.pods.push((*next.next().expect("counted"), node));
            placed += 1;
        }
        self.shapes[shape_id].tables = tables;
        if placed > 0 {
            let demand = own.as_deref().unwrap_or(&self.shapes[shape_id].demand);
            take(
                &mut self.free,
                &mut self.domain_free,
                &mut self.journal,
                &self.snapshot.topology,
                node,
                demand,
                placed as i64,
            );
            let delta = match own {
                Some(own) => Delta::Own(own),
                None => Delta::Shape(shape_id),
            };
            deltas.push((node, delta, placed as i64));
        }
        match error {
            Some(error) => Err(error),
            None => Ok(placed),
        }
    }
}
