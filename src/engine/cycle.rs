//! One scheduling cycle: gangs in queue order, each placed whole or left waiting with its
//! reason, under the configured queueing policy.

use super::admission::{GangNeeds, QueueState};
use super::claims::ClaimPlacement;
use super::dra::selectors::SelectorCache;
use super::model::{Gang, GangKey, NodeIdx, Parked, PodKey, Reservation, Snapshot};
use super::place::{Backfilled, CapacityMemory, GangFit, Scoring, Shortfall, Timed, Workspace};
use super::preempt::{Eviction, Evictor, PreemptionConfig, Room};
use super::queues::{QueueingStrategy, Refusal, WithinQueue};
use super::reason::{WaitReason, Waiting};
use super::topology::DomainChoice;
use crate::engine::admission::admit::{admit, resolve};
use crate::engine::admission::devices::DeviceCharges;
use crate::engine::admission::order::Picker;

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
    /// Backfill that knows time: the first `backfill_depth` gangs that do not fit (and have
    /// waited `reserve_after_seconds`) get the earliest time the runtime bounds of the pods
    /// running let them start, and what they need then beyond what ends by then is held
    /// from now. Later gangs go around it, or into it when their own bound ends first
    /// (`place::timed`). A gang with no such time gets Backfill's reservation instead.
    TimedBackfill,
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
    /// TimedBackfill: how many waiting gangs get a timed reservation per cycle (0 counts
    /// as 1); many make it conservative backfill.
    pub backfill_depth: usize,
    /// Reclaim and preemption between and inside queues (only with Queue objects).
    pub preemption: PreemptionConfig,
    /// Opportunistic backfill, for queues that do not say: a preemptible gang kept out of
    /// capacity held for a reservation (Backfill's nodes, TimedBackfill's held capacity)
    /// runs there, and is evicted whole when the reserved gang can start in its place.
    pub opportunistic_backfill: bool,
    /// How far the device search may go per pod, per node and per cycle.
    pub device_search: super::dra::allocate::SearchLimits,
}

/// A gang placed in this cycle: every pod that got a node, and every claim its pods
/// allocate or reserve there.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub gang: GangKey,
    pub pods: Vec<(PodKey, NodeIdx)>,
    pub claims: Vec<ClaimPlacement>,
    /// Placed opportunistically in capacity held for this gang's reservation: the shell
    /// marks its pods, and it is evicted whole when that gang can start.
    pub opportunistic: Option<GangKey>,
}

/// The result of one cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleOutcome {
    /// In the order they were placed (queue order).
    pub placements: Vec<Placement>,
    /// Gangs left waiting, in the order they were considered: queue order, then the gangs
    /// put off for going beyond their queue's share.
    pub waiting: Vec<Waiting>,
    /// What queues hold and deserve after this cycle's placements.
    pub queues: QueueState,
    /// Pods to evict, per victim gang, in the order they were decided.
    pub evictions: Vec<Eviction>,
    /// Capacity held for gangs that evictions were made for, to keep for the next cycle.
    pub reservations: Vec<Reservation>,
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

/// What a caller keeps from one cycle to the next so that a cycle repeats no work: compiled
/// selectors and their results, and free capacity per node and domain. It changes no
/// outcome, only the work.
#[derive(Default)]
pub struct CycleMemory {
    pub selectors: SelectorCache,
    pub capacity: CapacityMemory,
}

/// [`schedule`], reusing compiled selectors and their results from earlier cycles; the
/// cache changes no outcome, only the work.
pub fn schedule_with(snapshot: &Snapshot, config: &CycleConfig, selectors: &mut SelectorCache) -> CycleOutcome {
    cycle(snapshot, config, selectors, &mut CapacityMemory::default())
}

/// [`schedule`], reusing everything `memory` kept from earlier cycles.
pub fn schedule_remembering(snapshot: &Snapshot, config: &CycleConfig, memory: &mut CycleMemory) -> CycleOutcome {
    cycle(snapshot, config, &mut memory.selectors, &mut memory.capacity)
}

fn cycle(
    snapshot: &Snapshot,
    config: &CycleConfig,
    selectors: &mut SelectorCache,
    capacity: &mut CapacityMemory,
) -> CycleOutcome {
    selectors.trim(&snapshot.dra, snapshot.now, config.device_search.selector_idle_seconds);
    let devices = std::sync::Arc::new(DeviceCharges::new(snapshot, selectors));
    let mut workspace =
        Workspace::new(snapshot, config.scoring, config.domain_choice, selectors, config.device_search, capacity);
    let mut outcome = CycleOutcome::default();
    let tree = &snapshot.queues;
    let needs = GangNeeds::new(snapshot, &devices);
    let mut queues = QueueState::new(snapshot, &needs, devices);
    let mut picker = Picker::new(snapshot, needs, &queues, &queue_order(&snapshot.gangs));
    let served = hold_reservations(snapshot, &mut workspace, &mut queues, &picker, &mut outcome);
    let mut evictor = Evictor::new(snapshot, config.preemption, &queues);
    for placement in &outcome.placements {
        evictor.placed(&placement.gang);
    }
    // The backfill reservation, at most one per cycle, and the gang and nodes it keeps.
    let mut reserved = false;
    let mut held: Option<(GangKey, Vec<NodeIdx>)> = None;
    // TimedBackfill's reservations.
    let mut timed = (config.queueing == Queueing::TimedBackfill)
        .then(|| Timed::new(&snapshot.endings, evictor.leaving(), snapshot.now));
    let depth = config.backfill_depth.max(1);
    // StrictFIFO: per leaf queue, the first gang that did not fit.
    let mut heads: Vec<Option<&GangKey>> = vec![None; tree.queues.len()];
    // Gangs that would take their queue beyond what it deserves go after every gang that
    // stays within its own (a second pass, in the order they were put off): capacity goes
    // first where it will not be reclaimed. StrictFIFO keeps the rest of the leaf behind a
    // gang put off, and a leaf that preempts by priority its lower-priority gangs: taking
    // the leaf's share first, they would be the victims of its next cycle.
    let mut later: Vec<usize> = Vec::new();
    // Per leaf, the highest priority of a gang put off.
    let mut put_off: Vec<Option<i32>> = vec![None; tree.queues.len()];
    let mut second = 0;
    // Running gangs with only optional pods (beyond minMember) pending: a third pass.
    let mut optional: Vec<usize> = Vec::new();
    let mut third = 0;
    loop {
        let (index, late) = match picker.next(tree, &queues) {
            Some(index) => (index, false),
            None if second < later.len() => {
                second += 1;
                (later[second - 1], true)
            }
            None if third < optional.len() => {
                third += 1;
                (optional[third - 1], true)
            }
            None => break,
        };
        let gang = &snapshot.gangs[index];
        if gang.pods.is_empty() || served.contains(&index) {
            continue;
        }
        let wait = |reason| Waiting { gang: gang.key.clone(), reason };
        if evictor.is_victim(&gang.key) {
            let why = format!("{} is losing pods to an eviction in this cycle; its other pods wait", gang.key);
            outcome.waiting.push(wait(WaitReason::Blocked(why)));
            continue;
        }
        if let Some(why) = &gang.blocked {
            outcome.waiting.push(wait(WaitReason::Blocked(why.clone())));
            continue;
        }
        let exist = gang.bound + gang.pods.len();
        if exist < gang.min_member {
            outcome.waiting.push(wait(WaitReason::TooFewPods { exist, min_member: gang.min_member }));
            continue;
        }
        // A gang without a leaf is one whose quota another system keeps (placed in free
        // capacity, charged to no queue), or one whose queue does not resolve: say why.
        let Some(leaf) = picker.leaf(index) else {
            if gang.quota_owner.is_some() {
                match workspace.place(gang) {
                    Ok(fit) => {
                        evictor.placed(&gang.key);
                        outcome.placements.push(Placement {
                            gang: gang.key.clone(),
                            pods: Workspace::keys(gang, &fit.pods),
                            claims: fit.claims,
                            opportunistic: None,
                        });
                    }
                    Err(shortfall) => outcome.waiting.push(wait(shortfall_reason(*shortfall))),
                }
            } else if let Err(refusal) = resolve(tree, &gang.queue, &gang.key.namespace) {
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
        // A running gang's optional pods (beyond its minMember) that would borrow go after
        // every gang that still needs its minimum: placed first, they would take capacity
        // another queue's gang is owed, and be reclaimed for it in the next cycle. Within
        // quota they keep their turn.
        if !late
            && tree.is_configured()
            && gang.still_needed() == 0
            && queues.beyond_quota(tree, leaf, picker.need_now(index))
        {
            optional.push(index);
            continue;
        }
        if !late
            && tree.is_configured()
            && ((queueing == Queueing::StrictFifo && put_off[leaf].is_some())
                || (tree.queues[leaf].spec.preemption.within != WithinQueue::Never
                    && put_off[leaf].is_some_and(|p| p > gang.priority))
                || queues.beyond_deserved(tree, leaf, picker.need_now(index)))
        {
            put_off[leaf] = Some(put_off[leaf].map_or(gang.priority, |p| p.max(gang.priority)));
            later.push(index);
            continue;
        }
        let admitted = match admit(tree, &queues, &snapshot.resources, leaf, (index, gang), picker.need_now(index)) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                outcome.waiting.push(wait(WaitReason::Queue(refusal)));
                continue;
            }
        };
        let fewer;
        let admitted_gang = if admitted < gang.pods.len() {
            let mut copy = gang.clone();
            copy.pods.truncate(admitted);
            fewer = copy;
            &fewer
        } else {
            gang
        };
        // Parked: it did not fit and nothing since could help it. It keeps its place
        // without a search; only the backfill reservation (made afresh every cycle) is
        // still made for it, by trying it.
        if gang.parked != Parked::No {
            let reservable = gang.parked == Parked::DidNotFit
                && room_for_one(queueing, reserved, timed.as_ref(), depth)
                && starving(snapshot, config, gang, || {
                    tree.is_configured() && queues.beyond_deserved(tree, leaf, picker.need_now(index))
                });
            if !reservable {
                if gang.parked == Parked::DidNotFit
                    && queueing == Queueing::StrictFifo
                    && heads[leaf].is_none()
                    && gang.still_needed() > 0
                {
                    heads[leaf] = Some(&gang.key);
                }
                outcome.waiting.push(wait(WaitReason::Unchanged));
                continue;
            }
        }
        // Back after an eviction: for a while, only what its queue is owed. Where it would
        // borrow, its placement is tried and undone, so that the reason it waits is this
        // rule only when the rule is what holds it.
        let back =
            gang.last_evicted.map(|at| at.saturating_add(config.preemption.borrow_after_eviction)).filter(|&until| {
                late && snapshot.now < until && queues.beyond_deserved(tree, leaf, picker.need_now(index))
            });
        let mark = back.map(|_| workspace.trial());
        let placed_now = workspace.place(admitted_gang);
        if let (Some(until), Some(mark)) = (back, mark) {
            workspace.undo_trial(mark);
            if placed_now.is_ok() {
                let queue = tree.queues[leaf].spec.name.clone();
                outcome.waiting.push(wait(WaitReason::Queue(Refusal::RecentlyEvicted { queue, until })));
                continue;
            }
        }
        match placed_now {
            Ok(fit) => {
                evictor.placed(&gang.key);
                outcome.placements.push(placed(&mut queues, snapshot, leaf, admitted_gang, fit));
            }
            Err(shortfall) => {
                let never_fits = shortfall.never_fits;
                let mut reason = shortfall_reason(*shortfall);
                if matches!(reason, WaitReason::DeviceError { .. }) {
                    // What the pod asks for is wrong: it waits, and holds nobody back.
                    outcome.waiting.push(wait(reason));
                    continue;
                }
                // Into capacity held for a timed reservation, if it ends first.
                let mut delays = None;
                match timed.as_mut().map(|t| t.backfill(&mut workspace, admitted_gang, snapshot.now, false)) {
                    Some(Backfilled::Placed(fit)) => {
                        evictor.placed(&gang.key);
                        outcome.placements.push(placed(&mut queues, snapshot, leaf, admitted_gang, fit));
                        continue;
                    }
                    Some(Backfilled::Delays { gang, shadow }) => {
                        delays = Some(WaitReason::DelaysReservation { gang, shadow, now: snapshot.now });
                    }
                    Some(Backfilled::No) | None => {}
                }
                // A gang that could never fit must not hold the cluster hostage, and one that
                // already has its minimum bound is only waiting for optional extra pods.
                let starving = starving(snapshot, config, gang, || {
                    tree.is_configured() && queues.beyond_deserved(tree, leaf, picker.need_now(index))
                });
                let waits = !never_fits && gang.still_needed() > 0;
                // The gang the cycle's first reservation is for takes back what runs
                // opportunistically (a later one could take what the first counts on).
                let first = !reserved && timed.as_ref().is_none_or(|t| t.reservations.is_empty());
                let turn = waits && starving && first && room_for_one(queueing, reserved, timed.as_ref(), depth);
                if !never_fits {
                    let need = picker.need_now(index).to_vec();
                    match evictor.make_room(&mut workspace, &mut queues, admitted_gang, leaf, &need, turn) {
                        Ok(plan) => {
                            picker.changed(tree, leaf);
                            let mut victims: Vec<GangKey> = Vec::new();
                            let mut pods = 0;
                            for eviction in &plan.evictions {
                                let victim = snapshot.running.iter().find(|r| r.key == eviction.gang);
                                if let Some(victim_leaf) = victim.and_then(|v| tree.get(&v.queue)) {
                                    picker.changed(tree, victim_leaf);
                                }
                                victims.push(eviction.gang.clone());
                                pods += eviction.pods.len();
                            }
                            let room =
                                Room::Evicting { victims, pods, reason: plan.evictions[0].reason, until: plan.until };
                            outcome.reservations.push(reservation(snapshot, gang, &plan.fit, plan.until));
                            if queueing == Queueing::StrictFifo && heads[leaf].is_none() {
                                heads[leaf] = Some(&gang.key);
                            }
                            if let Some(timed) = timed.as_mut() {
                                for eviction in &plan.evictions {
                                    timed.gone(&eviction.pods);
                                }
                            }
                            outcome.evictions.extend(plan.evictions);
                            outcome.waiting.push(wait(WaitReason::Room { shortfall: Box::new(reason), room }));
                            continue;
                        }
                        Err(Some(room)) => reason = WaitReason::Room { shortfall: Box::new(reason), room },
                        Err(None) => {}
                    }
                }
                // Opportunistic backfill: kept out of held capacity, a preemptible gang that
                // opted in runs there until the reserved gang can start.
                if waits && gang.preemptible && tree.opportunistic_backfill(leaf, config.opportunistic_backfill) {
                    let now = snapshot.now;
                    if let Some((fit, holder)) = opportunistic(
                        &mut workspace,
                        timed.as_mut(),
                        held.as_ref(),
                        admitted_gang,
                        delays.as_ref(),
                        now,
                    ) {
                        evictor.placed(&gang.key);
                        let mut placement = placed(&mut queues, snapshot, leaf, admitted_gang, fit);
                        placement.opportunistic = Some(holder);
                        outcome.placements.push(placement);
                        continue;
                    }
                }
                if waits {
                    match (queueing, timed.as_mut()) {
                        (Queueing::StrictFifo, _) if heads[leaf].is_none() => heads[leaf] = Some(&gang.key),
                        (Queueing::Backfill, _) if starving && !reserved => {
                            reserved = true;
                            held = Some((gang.key.clone(), workspace.reserve_around(gang, evictor.leaving())));
                        }
                        (Queueing::TimedBackfill, Some(timed)) if starving && timed.reservations.len() < depth => {
                            // Devices are not counted as pods end: a gang that claims some
                            // is kept whole nodes, as under Backfill.
                            let devices = admitted_gang.pods.iter().any(|p| p.devices.is_some());
                            let shadow = if devices { None } else { timed.reserve(&mut workspace, admitted_gang) };
                            match shadow {
                                Some(shadow) => {
                                    let now = snapshot.now;
                                    reason = WaitReason::Reserved { shortfall: Box::new(reason), shadow, now };
                                    delays = None;
                                }
                                None if !reserved => {
                                    reserved = true;
                                    held = Some((gang.key.clone(), workspace.reserve_around(gang, evictor.leaving())));
                                }
                                None => {}
                            }
                        }
                        _ => {}
                    }
                }
                outcome.waiting.push(wait(delays.unwrap_or(reason)));
            }
        }
    }
    outcome.queues = queues;
    workspace.remember(capacity);
    outcome
}

/// Whether the cycle can still give a gang of a leaf queueing by `queueing` a reservation.
fn room_for_one(queueing: Queueing, reserved: bool, timed: Option<&Timed>, depth: usize) -> bool {
    match queueing {
        Queueing::Backfill => !reserved,
        Queueing::TimedBackfill => timed.is_some_and(|t| t.reservations.len() < depth),
        _ => false,
    }
}

/// Places `gang`, kept out of capacity held for a reservation, in that capacity anyway:
/// TimedBackfill's held capacity when it would delay a timed reservation (`delays`), else
/// the nodes Backfill's reservation keeps (`held`). Returns the placement and the gang the
/// capacity is held for.
fn opportunistic(
    workspace: &mut Workspace<'_>,
    timed: Option<&mut Timed>,
    held: Option<&(GangKey, Vec<NodeIdx>)>,
    gang: &Gang,
    delays: Option<&WaitReason>,
    now: i64,
) -> Option<(GangFit, GangKey)> {
    if let (Some(timed), Some(WaitReason::DelaysReservation { gang: holder, .. })) = (timed, delays)
        && let Backfilled::Placed(fit) = timed.backfill(workspace, gang, now, true)
    {
        return Some((fit, holder.clone()));
    }
    let (holder, nodes) = held?;
    Some((workspace.place_on_reserved(gang, nodes)?, holder.clone()))
}

/// Whether a gang that does not fit has waited long enough for the backfill reservation.
/// Capacity is not held for a gang that its queue's share would not cover
/// (`beyond_deserved`): placed there, it would be reclaimed at once.
fn starving(snapshot: &Snapshot, config: &CycleConfig, gang: &Gang, beyond_deserved: impl FnOnce() -> bool) -> bool {
    snapshot.now.saturating_sub(gang.created) >= config.reserve_after_seconds && !beyond_deserved()
}

/// Why a gang that did not fit waits.
fn shortfall_reason(shortfall: Shortfall) -> WaitReason {
    if let Some((pod, error)) = shortfall.error {
        WaitReason::DeviceError { pod, error }
    } else if let Some(message) = shortfall.topology {
        WaitReason::Topology { message, never_fits: shortfall.never_fits }
    } else if shortfall.never_fits {
        WaitReason::NeverFits { nodes: shortfall.nodes, needed: shortfall.needed, fit: shortfall.fit }
    } else {
        WaitReason::DoesNotFit { nodes: shortfall.nodes, needed: shortfall.needed, fit: shortfall.fit }
    }
}

/// A gang placed: its pods charged to its queue, and the placement for the outcome.
/// `fit`'s pod indices are into `gang.pods`.
fn placed(queues: &mut QueueState, snapshot: &Snapshot, leaf: usize, gang: &Gang, fit: GangFit) -> Placement {
    queues.charge_placed(&snapshot.queues, &snapshot.dra, leaf, gang, &fit.pods, &fit.claims);
    Placement {
        gang: gang.key.clone(),
        pods: Workspace::keys(gang, &fit.pods),
        claims: fit.claims,
        opportunistic: None,
    }
}

/// The reservation for a gang that evictions were made for: the nodes of its trial.
fn reservation(snapshot: &Snapshot, gang: &Gang, fit: &GangFit, until: i64) -> Reservation {
    let pods: Vec<(PodKey, String)> =
        fit.pods.iter().map(|&(p, n)| (gang.pods[p].key.clone(), snapshot.nodes[n as usize].name.clone())).collect();
    let mut nodes: Vec<String> = pods.iter().map(|(_, n)| n.clone()).collect();
    nodes.sort();
    nodes.dedup();
    Reservation { gang: gang.key.clone(), nodes, pods, until }
}

/// The gang's pods of a reservation, each pinned to its node (by `metadata.name`, as a
/// node affinity's matchFields).
fn pinned(gang: &Gang, pods: &[(PodKey, String)]) -> Gang {
    use super::model::{LabelRequirement, NodeConstraints, SelectorOperator};
    let mut copy = gang.clone();
    copy.pods = pods
        .iter()
        .filter_map(|(key, node)| {
            let mut pod = gang.pods.iter().find(|p| &p.key == key)?.clone();
            let requirement = LabelRequirement {
                key: "metadata.name".into(),
                operator: SelectorOperator::In,
                values: vec![node.clone()],
            };
            let mut constraints = NodeConstraints::clone(&pod.constraints);
            if constraints.affinity_terms.is_empty() {
                constraints.affinity_terms.push(Vec::new());
            }
            for term in &mut constraints.affinity_terms {
                term.push(requirement.clone());
            }
            pod.constraints = std::sync::Arc::new(constraints);
            Some(pod)
        })
        .collect();
    copy
}

/// Serves reservations from earlier cycles before anything else: a gang holding one is
/// placed if it fits now; otherwise it keeps its nodes (hidden from every other gang) and
/// counts as holding what it needs in its queue, and waits for the evicted pods to go. A
/// lapsed reservation, or one whose gang is gone, is dropped. Returns the gangs served.
fn hold_reservations(
    snapshot: &Snapshot,
    workspace: &mut Workspace<'_>,
    queues: &mut QueueState,
    picker: &Picker,
    outcome: &mut CycleOutcome,
) -> Vec<usize> {
    let mut served = Vec::new();
    if snapshot.reservations.is_empty() {
        return served;
    }
    let tree = &snapshot.queues;
    let mut keep: Vec<NodeIdx> = Vec::new();
    for held in &snapshot.reservations {
        if held.until <= snapshot.now {
            continue;
        }
        let Some(index) = snapshot.gangs.iter().position(|g| g.key == held.gang) else { continue };
        let gang = &snapshot.gangs[index];
        let Some(leaf) = picker.leaf(index) else { continue };
        if gang.pods.is_empty() || gang.blocked.is_some() {
            continue;
        }
        served.push(index);
        // Exactly where its trial put it: what was freed there is its own.
        let nodes: Vec<NodeIdx> = held
            .nodes
            .iter()
            .filter_map(|name| snapshot.nodes.iter().position(|node| &node.name == name))
            .map(|n| n as NodeIdx)
            .collect();
        // The fit's pod indices are the pinned copy's: keys and charges come from it.
        let pinned = pinned(gang, &held.pods);
        match workspace.place(&pinned) {
            Ok(fit) => outcome.placements.push(placed(queues, snapshot, leaf, &pinned, fit)),
            Err(shortfall) => {
                if !tree.keys.is_empty() {
                    queues.charge(tree, leaf, picker.need_now(index), !gang.preemptible);
                }
                keep.extend(nodes);
                let shortfall =
                    WaitReason::DoesNotFit { nodes: shortfall.nodes, needed: shortfall.needed, fit: shortfall.fit };
                outcome.waiting.push(Waiting {
                    gang: gang.key.clone(),
                    reason: WaitReason::Room {
                        shortfall: Box::new(shortfall),
                        room: Room::Reserved { until: held.until },
                    },
                });
                outcome.reservations.push(held.clone());
            }
        }
    }
    for n in keep {
        workspace.set_reserved(n, true);
    }
    served
}
