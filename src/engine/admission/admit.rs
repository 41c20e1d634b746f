//! A gang against its queue's hard rules (QUEUES.md §2.2), checked when it is placed: the
//! queue exists, takes gangs and takes this namespace; the gang stays within every
//! ancestor's limit; a non-preemptible gang stays within quota; and idle quota that a
//! sibling does not lend stays free. Each refusal is a reason a person can act on.

use super::account::QueueState;
use crate::engine::model::Gang;
use crate::engine::queues::QueueTree;
pub use crate::engine::queues::refusal::{Refusal, quantity};
pub use crate::engine::queues::tree::resolve;
use crate::engine::resources::ResourceNames;

/// Checks `need` (per key) for a gang in `leaf` against every rule; the first refusal.
pub fn check(
    tree: &QueueTree,
    state: &QueueState,
    names: &ResourceNames,
    leaf: usize,
    need: &[i64],
    preemptible: bool,
) -> Result<(), Refusal> {
    let amount = |k: usize, a: i64| quantity(names, tree.keys[k], a);
    let resource = |k: usize| names.name(tree.keys[k]).to_string();
    for q in tree.path(leaf) {
        let queue = &tree.queues[q];
        for (k, &needs) in need.iter().enumerate() {
            if needs <= 0 || !queue.governed[k] {
                continue;
            }
            let rule = queue.rules[k];
            if let Some(limit) = rule.limit
                && state.allocated[q][k] + needs > limit
            {
                return Err(Refusal::OverLimit {
                    queue: queue.spec.name.clone(),
                    resource: resource(k),
                    limit: amount(k, limit),
                    allocated: amount(k, state.allocated[q][k]),
                    needs: amount(k, needs),
                });
            }
            if !preemptible
                && let Some(quota) = rule.quota
                && state.non_preemptible[q][k] + needs > quota
            {
                return Err(Refusal::NonPreemptibleOverQuota {
                    queue: queue.spec.name.clone(),
                    resource: resource(k),
                    quota: amount(k, quota),
                    allocated: amount(k, state.non_preemptible[q][k]),
                    needs: amount(k, needs),
                });
            }
        }
    }
    // Lending: what siblings along the path keep and do not use must stay free.
    for (k, &needs) in need.iter().enumerate() {
        if needs <= 0 {
            continue;
        }
        let mut kept = Vec::new();
        let mut total = 0;
        for q in tree.path(leaf) {
            let siblings = match tree.queues[q].parent {
                Some(p) => &tree.queues[p].children,
                None => &tree.roots,
            };
            for &s in siblings.iter().filter(|&&s| s != q) {
                let idle = tree.queues[s].rules[k].kept() - state.allocated[s][k];
                if idle > 0 {
                    total += idle;
                    kept.push((tree.queues[s].spec.name.clone(), amount(k, idle)));
                }
            }
        }
        if total > 0 && state.capacity[k] - state.used[k] - needs < total {
            return Err(Refusal::LendingLimit { resource: resource(k), kept });
        }
    }
    Ok(())
}

/// How many of gang `g`'s pending pods its queue admits now (at least the pods it still
/// needs, whose demand is `now`), or why it admits none.
pub fn admit(
    tree: &QueueTree,
    state: &QueueState,
    names: &ResourceNames,
    leaf: usize,
    (g, gang): (usize, &Gang),
    now: &[i64],
) -> Result<usize, Refusal> {
    if tree.keys.is_empty() {
        return Ok(gang.pods.len());
    }
    check(tree, state, names, leaf, now, gang.preemptible)?;
    let needed = gang.pods_now();
    let mut admitted = needed;
    let mut need = now.to_vec();
    for (p, pod) in gang.pods.iter().enumerate().skip(needed) {
        tree.add_demand(&mut need, &pod.demand, 1);
        for &(k, amount) in state.devices.pending(g, p) {
            need[k] += amount;
        }
        // Pods beyond minMember are extras: they never take the queue past what it
        // deserves, where a queue owed its share would reclaim them at once.
        if check(tree, state, names, leaf, &need, gang.preemptible).is_err()
            || (tree.is_configured() && state.beyond_deserved(tree, leaf, &need))
        {
            break;
        }
        admitted += 1;
    }
    Ok(admitted)
}
