//! One scheduling cycle: gangs in queue order, each placed whole or left waiting with its
//! reason, under the configured queueing policy.

use super::claims::ClaimPlacement;
use super::dra::selectors::SelectorCache;
use super::model::{Gang, GangKey, NodeIdx, PodKey, Snapshot};
use super::place::{Scoring, Workspace};
use super::queues::admit::{admit, resolve};
use super::queues::order::Picker;
use super::queues::{GangNeeds, QueueState, QueueingStrategy};
use super::reason::{WaitReason, Waiting};
use super::topology::DomainChoice;

/// What happens behind a gang that does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Queueing {
    /// The first gang in queue order that does not fit and has waited at least
    /// `reserve_after_seconds` keeps the nodes it would need free (a reservation, as Slurm's
    /// backfill keeps one for the top job); later gangs are placed around them. Large gangs
    /// are never overtaken forever, small ones still fill the rest.
    #[default]
    Backfill,
    /// Nothing is placed behind the first gang that does not fit (Kueue's StrictFIFO).
    StrictFifo,
    /// Gangs that do not fit are skipped (Kueue's BestEffortFIFO); large gangs can starve.
    BestEffortFifo,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleConfig {
    pub scoring: Scoring,
    /// How a gang's domain is chosen among those that could hold it.
    pub domain_choice: DomainChoice,
    pub queueing: Queueing,
    /// Backfill: how long a gang waits before it gets a reservation. Until then gangs
    /// behind it may overtake it, which keeps small jobs fast when large ones clear soon.
    pub reserve_after_seconds: i64,
}

/// A gang placed in this cycle: every pod that got a node, and every claim its pods
/// allocate or reserve there.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub gang: GangKey,
    pub pods: Vec<(PodKey, NodeIdx)>,
    pub claims: Vec<ClaimPlacement>,
}

/// The result of one cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleOutcome {
    /// In the order they were placed (queue order).
    pub placements: Vec<Placement>,
    /// Gangs left waiting, in queue order.
    pub waiting: Vec<Waiting>,
    /// What queues hold and deserve after this cycle's placements.
    pub queues: QueueState,
}

/// Queue order: higher priority first, then older, then by name for determinism.
pub fn queue_order(gangs: &[Gang]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..gangs.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&gangs[a], &gangs[b]);
        b.priority.cmp(&a.priority).then(a.created.cmp(&b.created)).then_with(|| a.key.cmp(&b.key))
    });
    order
}

/// Runs one cycle over `snapshot`. Pure: the same snapshot and configuration always give
/// the same outcome.
pub fn schedule(snapshot: &Snapshot, config: &CycleConfig) -> CycleOutcome {
    schedule_with(snapshot, config, &mut SelectorCache::default())
}

/// [`schedule`], reusing compiled selectors and their results from earlier cycles; the
/// cache changes no outcome, only the work.
pub fn schedule_with(snapshot: &Snapshot, config: &CycleConfig, selectors: &mut SelectorCache) -> CycleOutcome {
    selectors.trim(&snapshot.dra);
    let mut workspace = Workspace::new(snapshot, config.scoring, config.domain_choice, selectors);
    let mut outcome = CycleOutcome::default();
    let tree = &snapshot.queues;
    let needs = GangNeeds::new(snapshot);
    let mut queues = QueueState::new(snapshot, &needs);
    let mut picker = Picker::new(snapshot, needs, &queues, &queue_order(&snapshot.gangs));
    let mut charged = vec![0; tree.keys.len()];
    // The backfill reservation, at most one per cycle.
    let mut reserved = false;
    // StrictFIFO: per leaf queue, the first gang that did not fit.
    let mut heads: Vec<Option<&GangKey>> = vec![None; tree.queues.len()];
    while let Some(index) = picker.next(tree, &queues) {
        let gang = &snapshot.gangs[index];
        if gang.pods.is_empty() {
            continue;
        }
        let wait = |reason| Waiting { gang: gang.key.clone(), reason };
        if let Some(why) = &gang.blocked {
            outcome.waiting.push(wait(WaitReason::Blocked(why.clone())));
            continue;
        }
        let exist = gang.bound + gang.pods.len();
        if exist < gang.min_member {
            outcome.waiting.push(wait(WaitReason::TooFewPods { exist, min_member: gang.min_member }));
            continue;
        }
        // A gang without a leaf is one whose queue does not resolve: say why.
        let Some(leaf) = picker.leaf(index) else {
            if let Err(refusal) = resolve(tree, &gang.queue, &gang.key.namespace) {
                outcome.waiting.push(wait(WaitReason::Queue(refusal)));
            }
            continue;
        };
        let queueing = match tree.queues[leaf].spec.queueing {
            None => config.queueing,
            Some(QueueingStrategy::StrictFifo) => Queueing::StrictFifo,
            Some(QueueingStrategy::BestEffortFifo) => Queueing::BestEffortFifo,
        };
        if let (Queueing::StrictFifo, Some(earlier)) = (queueing, heads[leaf]) {
            outcome.waiting.push(wait(WaitReason::BehindEarlierGang(earlier.clone())));
            continue;
        }
        let admitted = match admit(tree, &queues, &snapshot.resources, leaf, gang, picker.need_now(index)) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                outcome.waiting.push(wait(WaitReason::Queue(refusal)));
                continue;
            }
        };
        let attempt = if admitted < gang.pods.len() {
            let mut fewer = gang.clone();
            fewer.pods.truncate(admitted);
            workspace.place(&fewer)
        } else {
            workspace.place(gang)
        };
        match attempt {
            Ok(fit) => {
                if !tree.keys.is_empty() {
                    charged.fill(0);
                    for &(pod, _) in &fit.pods {
                        for &(id, amount) in gang.pods[pod].demand.entries() {
                            if let Some(k) = tree.key_index(id) {
                                charged[k] += amount;
                            }
                        }
                    }
                    queues.charge(tree, leaf, &charged, !gang.preemptible);
                }
                outcome.placements.push(Placement {
                    gang: gang.key.clone(),
                    pods: Workspace::keys(gang, &fit.pods),
                    claims: fit.claims,
                })
            }
            Err(shortfall) => {
                if let Some((pod, error)) = shortfall.error {
                    // What the pod asks for is wrong: it waits, and holds nobody back.
                    outcome.waiting.push(wait(WaitReason::DeviceError { pod, error }));
                    continue;
                }
                let reason = if let Some(message) = shortfall.topology.clone() {
                    WaitReason::Topology { message, never_fits: shortfall.never_fits }
                } else if shortfall.never_fits {
                    WaitReason::NeverFits { nodes: shortfall.nodes, needed: shortfall.needed, fit: shortfall.fit }
                } else {
                    WaitReason::DoesNotFit { nodes: shortfall.nodes, needed: shortfall.needed, fit: shortfall.fit }
                };
                // A gang that could never fit must not hold the cluster hostage, and one that
                // already has its minimum bound is only waiting for optional extra pods.
                let starving = snapshot.now.saturating_sub(gang.created) >= config.reserve_after_seconds;
                if !shortfall.never_fits && gang.still_needed() > 0 {
                    match queueing {
                        Queueing::StrictFifo if heads[leaf].is_none() => heads[leaf] = Some(&gang.key),
                        Queueing::Backfill if starving && !reserved => {
                            reserved = true;
                            workspace.reserve_for(gang);
                        }
                        _ => {}
                    }
                }
                outcome.waiting.push(wait(reason));
            }
        }
    }
    outcome.queues = queues;
    outcome
}
