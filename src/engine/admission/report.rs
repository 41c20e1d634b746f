//! Each queue's figures per resource key, as status, metrics, `explain` and the simulator
//! show them: quota, limit, fair share, allocated (and by non-preemptible gangs),
//! requested, borrowed and lent. Computed in one place from one cycle's [`QueueState`].

use crate::engine::admission::QueueState;
use crate::engine::model::Snapshot;
use crate::engine::resources::ResourceId;

/// One queue's figures for one resource key, in the engine's units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// None: unlimited.
    pub quota: Option<i64>,
    /// None: no limit.
    pub limit: Option<i64>,
    pub fair_share: i64,
    pub allocated: i64,
    pub allocated_non_preemptible: i64,
    pub requested: i64,
    /// Held beyond its quota.
    pub borrowed: i64,
    /// Quota it does not use and lets others use.
    pub lent: i64,
}

/// One queue, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueReport {
    pub name: String,
    pub parent: Option<String>,
    pub children: Vec<String>,
    /// Why it takes no gangs, if it is invalid.
    pub problem: Option<String>,
    /// Its children's quotas do not fit in its share.
    pub oversubscribed: bool,
    /// Per key the queue governs (every key for the implicit default).
    pub resources: Vec<(ResourceId, Figures)>,
    /// Gangs waiting and gangs running in its subtree.
    pub pending_gangs: usize,
    pub running_gangs: usize,
}

/// Every queue object (and the implicit default when others exist), in name order; empty
/// when no Queue exists.
pub fn report(snapshot: &Snapshot, state: &QueueState) -> Vec<QueueReport> {
    let tree = &snapshot.queues;
    if !tree.is_configured() {
        return Vec::new();
    }
    // Gang counts per queue, each gang counted in its leaf and every ancestor.
    let count = |queues: &mut dyn Iterator<Item = &String>| {
        let mut counts = vec![0; tree.queues.len()];
        for leaf in queues.filter_map(|queue| tree.get(queue)) {
            for q in tree.path(leaf) {
                counts[q] += 1;
            }
        }
        counts
    };
    let pending = count(&mut snapshot.gangs.iter().filter(|g| g.quota_owner.is_none()).map(|g| &g.queue));
    let running = count(&mut snapshot.running.iter().map(|g| &g.queue));
    let mut out: Vec<QueueReport> = tree
        .queues
        .iter()
        .enumerate()
        .map(|(q, queue)| {
            let valid = queue.problem.is_none();
            let resources = tree
                .keys
                .iter()
                .enumerate()
                .filter(|&(k, _)| queue.governed[k] || queue.implicit)
                .map(|(k, &id)| {
                    let rule = queue.rules[k];
                    let at = |v: &Vec<Vec<i64>>| if valid { v[q][k] } else { 0 };
                    let allocated = at(&state.allocated);
                    let quota = rule.quota;
                    let lendable = rule.lending_limit.or(quota).unwrap_or(i64::MAX);
                    let figures = Figures {
                        quota,
                        limit: rule.limit,
                        fair_share: at(&state.fair_share),
                        allocated,
                        allocated_non_preemptible: at(&state.non_preemptible),
                        requested: at(&state.requested),
                        borrowed: quota.map_or(0, |q| (allocated - q).max(0)),
                        lent: quota.map_or(0, |q| (q - allocated).max(0).min(lendable)),
                    };
                    (id, figures)
                })
                .collect();
            QueueReport {
                name: queue.spec.name.clone(),
                parent: queue.spec.parent.clone(),
                children: queue.children.iter().map(|&c| tree.queues[c].spec.name.clone()).collect(),
                problem: queue.problem.as_ref().map(ToString::to_string),
                oversubscribed: state.oversubscribed[q],
                resources,
                pending_gangs: pending[q],
                running_gangs: running[q],
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
