//! The steps of one cycle over the gangs, in queue order: each gang is screened (blocked,
//! too few pods, no queue), put off behind its queue's order when the policy says so,
//! admitted by its queue, placed, and when it does not fit, given room by evictions, placed
//! opportunistically, or given the cycle's reservation. [`Cycle`] holds what the steps
//! share: the working copy of the cluster, the queues' accounts, and what each queueing
//! policy remembers from one gang to the next.

use super::held::placed;
use super::{CycleConfig, CycleOutcome, Placement, Queueing, queue_order};
use crate::engine::admission::admit::{admit, resolve};
use crate::engine::admission::devices::DeviceCharges;
use crate::engine::admission::order::Picker;
use crate::engine::admission::{GangNeeds, QueueState};
use crate::engine::dra::selectors::SelectorCache;
use crate::engine::model::{Gang, GangKey, NodeIdx, Parked, Snapshot};
use crate::engine::place::{CapacityMemory, GangFit, Shortfall, Timed, Workspace};
use crate::engine::preempt::Evictor;
use crate::engine::queues::{QueueTree, QueueingStrategy, Refusal, WithinQueue};
use crate::engine::reason::{WaitReason, Waiting};

mod misfit;

use misfit::{room_for_one, shortfall_reason};

/// One cycle's state, from its first gang to its outcome.
pub(super) struct Cycle<'s> {
    snapshot: &'s Snapshot,
    config: &'s CycleConfig,
    workspace: Workspace<'s>,
    queues: QueueState,
    picker: Picker,
    evictor: Evictor<'s>,
    outcome: CycleOutcome,
    /// Gangs served from their reservations before the first pass.
    served: Vec<usize>,
    /// The backfill reservation, at most one per cycle, and the gang and nodes it keeps.
    reserved: bool,
    held: Option<(GangKey, Vec<NodeIdx>)>,
    /// TimedBackfill's reservations.
    timed: Option<Timed>,
    depth: usize,
    /// StrictFIFO: per leaf queue, the first gang that did not fit.
    heads: Vec<Option<&'s GangKey>>,
    /// Gangs that would take their queue beyond what it deserves go after every gang that
    /// stays within its own (a second pass, in the order they were put off): capacity goes
    /// first where it will not be reclaimed. StrictFIFO keeps the rest of the leaf behind a
    /// gang put off, and a leaf that preempts by priority its lower-priority gangs: taking
    /// the leaf's share first, they would be the victims of its next cycle.
    later: Vec<usize>,
    /// Per leaf, the highest priority of a gang put off.
    put_off: Vec<Option<i32>>,
    second: usize,
    /// Running gangs with only optional pods (beyond minMember) pending: a third pass.
    optional: Vec<usize>,
    third: usize,
}

impl<'s> Cycle<'s> {
    pub(super) fn new(
        snapshot: &'s Snapshot,
        config: &'s CycleConfig,
        selectors: &'s mut SelectorCache,
        capacity: &mut CapacityMemory,
    ) -> Cycle<'s> {
        selectors.trim(&snapshot.dra, snapshot.now, config.device_search.selector_idle_seconds);
        let devices = std::sync::Arc::new(DeviceCharges::new(snapshot, selectors));
        let mut workspace = Workspace::new(
            snapshot,
            (config.scoring, config.weights),
            config.domain_choice,
            selectors,
            config.device_search,
            capacity,
        );
        let mut outcome = CycleOutcome::default();
        let tree = &snapshot.queues;
        let needs = GangNeeds::new(snapshot, &devices);
        let mut queues = QueueState::new(snapshot, &needs, devices);
        let picker = Picker::new(snapshot, needs, &queues, &queue_order(&snapshot.gangs));
        let served = super::held::hold_reservations(snapshot, &mut workspace, &mut queues, &picker, &mut outcome);
        let mut evictor = Evictor::new(snapshot, config.preemption, &queues);
        for placement in &outcome.placements {
            evictor.placed(&placement.gang);
        }
        let timed = (config.queueing == Queueing::TimedBackfill)
            .then(|| Timed::new(&snapshot.endings, evictor.leaving(), snapshot.now));
        Cycle {
            snapshot,
            config,
            workspace,
            queues,
            picker,
            evictor,
            outcome,
            served,
            reserved: false,
            held: None,
            timed,
            depth: config.backfill_depth.max(1),
            heads: vec![None; tree.queues.len()],
            later: Vec::new(),
            put_off: vec![None; tree.queues.len()],
            second: 0,
            optional: Vec::new(),
            third: 0,
        }
    }

    /// The next gang to consider, and whether it comes late (from the second or third
    /// pass); None once every pass is done.
    pub(super) fn next(&mut self) -> Option<(usize, bool)> {
        if let Some(index) = self.picker.next(self.tree(), &self.queues) {
            return Some((index, false));
        }
        if self.second < self.later.len() {
            self.second += 1;
            return Some((self.later[self.second - 1], true));
        }
        if self.third < self.optional.len() {
            self.third += 1;
            return Some((self.optional[self.third - 1], true));
        }
        None
    }

    /// The outcome, with what queues hold after it; the free capacity is kept in `capacity`
    /// for the next cycle.
    pub(super) fn finish(mut self, capacity: &mut CapacityMemory) -> CycleOutcome {
        self.outcome.queues = self.queues;
        self.workspace.remember(capacity);
        self.outcome
    }

    /// Decides for the gang at `index`: placed, put off to a later pass, or waiting with
    /// its reason.
    pub(super) fn consider(&mut self, index: usize, late: bool) {
        let snapshot = self.snapshot;
        let gang = &snapshot.gangs[index];
        if gang.pods.is_empty() || self.served.contains(&index) {
            return;
        }
        let Some(leaf) = self.screen(index, gang) else { return };
        let queueing = match self.tree().queues[leaf].spec.queueing {
            None => self.config.queueing,
            Some(QueueingStrategy::StrictFifo) => Queueing::StrictFifo,
            Some(QueueingStrategy::BestEffortFifo) => Queueing::BestEffortFifo,
        };
        if let (Queueing::StrictFifo, Some(earlier)) = (queueing, self.heads[leaf]) {
            self.wait(gang, WaitReason::BehindEarlierGang(earlier.clone()));
            return;
        }
        if !late && self.put_off(index, gang, leaf, queueing) {
            return;
        }
        let admitted = match admit(
            self.tree(),
            &self.queues,
            &snapshot.resources,
            leaf,
            (index, gang),
            self.picker.need_now(index),
        ) {
            Ok(admitted) => admitted,
            Err(refusal) => return self.wait(gang, WaitReason::Queue(refusal)),
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
        if self.stays_parked(index, gang, leaf, queueing) {
            return;
        }
        let Some(placed_now) = self.place(index, gang, leaf, late, admitted_gang) else { return };
        match placed_now {
            Ok(fit) => self.placed(leaf, admitted_gang, fit, None),
            Err(shortfall) => self.does_not_fit(index, gang, leaf, queueing, admitted_gang, *shortfall),
        }
    }

    /// The checks before a gang's queue is consulted; its leaf queue when it passes them.
    /// A gang without a leaf is one whose quota another system keeps (placed here in free
    /// capacity, charged to no queue), or one whose queue does not resolve: it says why.
    fn screen(&mut self, index: usize, gang: &Gang) -> Option<usize> {
        if self.evictor.is_victim(&gang.key) {
            let why = format!("{} is losing pods to an eviction in this cycle; its other pods wait", gang.key);
            self.wait(gang, WaitReason::Blocked(why));
            return None;
        }
        if let Some(why) = &gang.blocked {
            self.wait(gang, WaitReason::Blocked(why.clone()));
            return None;
        }
        let exist = gang.bound + gang.pods.len();
        if exist < gang.min_member {
            self.wait(gang, WaitReason::TooFewPods { exist, min_member: gang.min_member });
            return None;
        }
        let leaf = self.picker.leaf(index);
        if leaf.is_none() {
            if gang.quota_owner.is_some() {
                match self.workspace.place(gang) {
                    Ok(fit) => {
                        self.evictor.placed(&gang.key);
                        self.outcome.placements.push(Placement {
                            gang: gang.key.clone(),
                            pods: Workspace::keys(gang, &fit.pods),
                            claims: fit.claims,
                            opportunistic: None,
                        });
                    }
                    Err(shortfall) => self.wait(gang, shortfall_reason(*shortfall)),
                }
            } else if let Err(refusal) = resolve(self.tree(), &gang.queue, &gang.key.namespace) {
                self.wait(gang, WaitReason::Queue(refusal));
            }
        }
        leaf
    }

    /// Whether the gang goes to a later pass. A running gang's optional pods (beyond its
    /// minMember) that would borrow go after every gang that still needs its minimum:
    /// placed first, they would take capacity another queue's gang is owed, and be
    /// reclaimed for it in the next cycle (within quota they keep their turn). A gang that
    /// would take its queue beyond what it deserves goes to the second pass.
    fn put_off(&mut self, index: usize, gang: &Gang, leaf: usize, queueing: Queueing) -> bool {
        let tree = self.tree();
        if !tree.is_configured() {
            return false;
        }
        let need = self.picker.need_now(index);
        if gang.still_needed() == 0 && self.queues.beyond_quota(tree, leaf, need) {
            self.optional.push(index);
            return true;
        }
        let put_off = self.put_off[leaf];
        if (queueing == Queueing::StrictFifo && put_off.is_some())
            || (tree.queues[leaf].spec.preemption.within != WithinQueue::Never
                && put_off.is_some_and(|p| p > gang.priority))
            || self.queues.beyond_deserved(tree, leaf, need)
        {
            self.put_off[leaf] = Some(put_off.map_or(gang.priority, |p| p.max(gang.priority)));
            self.later.push(index);
            return true;
        }
        false
    }

    /// Parked: it did not fit and nothing since could help it. It keeps its place without a
    /// search; only the backfill reservation (made afresh every cycle) is still made for
    /// it, by trying it. Whether it stays parked (and waits unchanged).
    fn stays_parked(&mut self, index: usize, gang: &'s Gang, leaf: usize, queueing: Queueing) -> bool {
        if gang.parked == Parked::No {
            return false;
        }
        let reservable = gang.parked == Parked::DidNotFit
            && room_for_one(queueing, self.reserved, self.timed.as_ref(), self.depth)
            && self.starving(index, gang, leaf);
        if reservable {
            return false;
        }
        if gang.parked == Parked::DidNotFit
            && queueing == Queueing::StrictFifo
            && self.heads[leaf].is_none()
            && gang.still_needed() > 0
        {
            self.heads[leaf] = Some(&gang.key);
        }
        self.wait(gang, WaitReason::Unchanged);
        true
    }

    /// The gang placed in free capacity, or why not. Back after an eviction, for a while
    /// it takes only what its queue is owed: where it would borrow, its placement is tried
    /// and undone, so that the reason it waits is this rule only when the rule is what
    /// holds it (None: it waits for that reason).
    fn place(
        &mut self,
        index: usize,
        gang: &Gang,
        leaf: usize,
        late: bool,
        admitted: &Gang,
    ) -> Option<Result<GangFit, Box<Shortfall>>> {
        let (snapshot, tree) = (self.snapshot, self.tree());
        let back = gang.last_evicted.map(|at| at.saturating_add(self.config.preemption.borrow_after_eviction)).filter(
            |&until| {
                late && snapshot.now < until && self.queues.beyond_deserved(tree, leaf, self.picker.need_now(index))
            },
        );
        let mark = back.map(|_| self.workspace.trial());
        let placed_now = self.workspace.place(admitted);
        if let (Some(until), Some(mark)) = (back, mark) {
            self.workspace.undo_trial(mark);
            if placed_now.is_ok() {
                let queue = tree.queues[leaf].spec.name.clone();
                self.wait(gang, WaitReason::Queue(Refusal::RecentlyEvicted { queue, until }));
                return None;
            }
        }
        Some(placed_now)
    }

    /// The gang placed: charged to its queue, and in the outcome.
    fn placed(&mut self, leaf: usize, gang: &Gang, fit: GangFit, holder: Option<GangKey>) {
        self.evictor.placed(&gang.key);
        let mut placement = placed(&mut self.queues, self.snapshot, leaf, gang, fit);
        placement.opportunistic = holder;
        self.outcome.placements.push(placement);
    }

    /// The queue tree the snapshot holds.
    fn tree(&self) -> &'s QueueTree {
        let snapshot: &'s Snapshot = self.snapshot;
        &snapshot.queues
    }

    fn wait(&mut self, gang: &Gang, reason: WaitReason) {
        self.outcome.waiting.push(Waiting { gang: gang.key.clone(), reason });
    }
}
