//! The steps for a gang that does not fit in free capacity: room made by evictions, an
//! opportunistic place in capacity held for another gang, or the policy's reservation, and
//! the reason it waits.

use crate::engine::cycle::steps::Cycle;
use crate::engine::cycle::{CycleConfig, Queueing};
use crate::engine::model::{Gang, GangKey, NodeIdx, Snapshot};
use crate::engine::place::{Backfilled, GangFit, Shortfall, Timed, Workspace};
use crate::engine::preempt::Room;
use crate::engine::reason::WaitReason;

impl<'s> Cycle<'s> {
    /// A gang that does not fit in free capacity: into capacity held for a timed
    /// reservation if it ends first, else room made by evictions, else opportunistically
    /// into held capacity, else the cycle's reservation when its turn has come; otherwise
    /// it waits with the reason.
    pub(super) fn does_not_fit(
        &mut self,
        index: usize,
        gang: &'s Gang,
        leaf: usize,
        queueing: Queueing,
        admitted: &Gang,
        shortfall: Shortfall,
    ) {
        let never_fits = shortfall.never_fits;
        let mut reason = shortfall_reason(shortfall);
        if matches!(reason, WaitReason::DeviceError { .. }) {
            // What the pod asks for is wrong: it waits, and holds nobody back.
            return self.wait(gang, reason);
        }
        let now = self.snapshot.now;
        let mut delays = None;
        match self.timed.as_mut().map(|t| t.backfill(&mut self.workspace, admitted, now, false)) {
            Some(Backfilled::Placed(fit)) => return self.placed(leaf, admitted, fit, None),
            Some(Backfilled::Delays { gang, shadow }) => {
                delays = Some(WaitReason::DelaysReservation { gang, shadow, now });
            }
            Some(Backfilled::No) | None => {}
        }
        // A gang that could never fit must not hold the cluster hostage, and one that
        // already has its minimum bound is only waiting for optional extra pods.
        let starving = self.starving(index, gang, leaf);
        let waits = !never_fits && gang.still_needed() > 0;
        // The gang the cycle's first reservation is for takes back what runs
        // opportunistically (a later one could take what the first counts on).
        let first = !self.reserved && self.timed.as_ref().is_none_or(|t| t.reservations.is_empty());
        let turn = waits && starving && first && room_for_one(queueing, self.reserved, self.timed.as_ref(), self.depth);
        if !never_fits && gang.preempts {
            match self.make_room(index, gang, leaf, queueing, admitted, turn) {
                Ok(room) => return self.wait(gang, WaitReason::Room { shortfall: Box::new(reason), room }),
                Err(Some(room)) => reason = WaitReason::Room { shortfall: Box::new(reason), room },
                Err(None) => {}
            }
        }
        // Opportunistic backfill: kept out of held capacity, a preemptible gang that opted
        // in runs there until the reserved gang can start.
        if waits && gang.preemptible && self.tree().opportunistic_backfill(leaf, self.config.opportunistic_backfill) {
            let held = self.held.as_ref();
            if let Some((fit, holder)) =
                opportunistic(&mut self.workspace, self.timed.as_mut(), held, admitted, delays.as_ref(), now)
            {
                return self.placed(leaf, admitted, fit, Some(holder));
            }
        }
        if waits {
            self.reserve(gang, leaf, queueing, starving, admitted, &mut reason, &mut delays);
        }
        self.wait(gang, delays.unwrap_or(reason));
    }

    /// Evictions that make room for the gang: the room they make (the gang reserved where
    /// its trial put it), or why none is made (None: nothing to say).
    fn make_room(
        &mut self,
        index: usize,
        gang: &'s Gang,
        leaf: usize,
        queueing: Queueing,
        admitted: &Gang,
        turn: bool,
    ) -> Result<Room, Option<Room>> {
        let (snapshot, tree) = (self.snapshot, self.tree());
        let need = self.picker.need_now(index).to_vec();
        let plan = self.evictor.make_room(&mut self.workspace, &mut self.queues, admitted, leaf, &need, turn)?;
        self.picker.changed(tree, leaf);
        let mut victims: Vec<GangKey> = Vec::new();
        let mut pods = 0;
        for eviction in &plan.evictions {
            let victim = snapshot.running.iter().find(|r| r.key == eviction.gang);
            if let Some(victim_leaf) = victim.and_then(|v| tree.get(&v.queue)) {
                self.picker.changed(tree, victim_leaf);
            }
            victims.push(eviction.gang.clone());
            pods += eviction.pods.len();
        }
        let room = Room::Evicting { victims, pods, reason: plan.evictions[0].reason, until: plan.until };
        self.outcome.reservations.push(crate::engine::cycle::held::reservation(snapshot, gang, &plan.fit, plan.until));
        if queueing == Queueing::StrictFifo && self.heads[leaf].is_none() {
            self.heads[leaf] = Some(&gang.key);
        }
        if let Some(timed) = self.timed.as_mut() {
            for eviction in &plan.evictions {
                timed.gone(&eviction.pods);
            }
        }
        self.outcome.evictions.extend(plan.evictions);
        Ok(room)
    }

    /// The policy's hold for a gang that waits: StrictFIFO's head of its leaf, Backfill's
    /// node reservation, or TimedBackfill's timed reservation (Backfill's when it has no
    /// time), changing the reason it is told.
    #[allow(clippy::too_many_arguments)]
    fn reserve(
        &mut self,
        gang: &'s Gang,
        leaf: usize,
        queueing: Queueing,
        starving: bool,
        admitted: &Gang,
        reason: &mut WaitReason,
        delays: &mut Option<WaitReason>,
    ) {
        let now = self.snapshot.now;
        match (queueing, self.timed.as_mut()) {
            (Queueing::StrictFifo, _) if self.heads[leaf].is_none() => self.heads[leaf] = Some(&gang.key),
            (Queueing::Backfill, _) if starving && !self.reserved => self.reserve_nodes(gang),
            (Queueing::TimedBackfill, Some(timed)) if starving && timed.reservations.len() < self.depth => {
                // Devices are not counted as pods end: a gang that claims some is kept
                // whole nodes, as under Backfill.
                let devices = admitted.pods.iter().any(|p| p.devices.is_some());
                let shadow = if devices { None } else { timed.reserve(&mut self.workspace, admitted) };
                match shadow {
                    Some(shadow) => {
                        let shortfall = std::mem::replace(reason, WaitReason::Unchanged);
                        *reason = WaitReason::Reserved { shortfall: Box::new(shortfall), shadow, now };
                        *delays = None;
                    }
                    None if !self.reserved => self.reserve_nodes(gang),
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// Backfill's reservation: the nodes the gang would need, kept from gangs behind it.
    fn reserve_nodes(&mut self, gang: &Gang) {
        self.reserved = true;
        self.held = Some((gang.key.clone(), self.workspace.reserve_around(gang, self.evictor.leaving())));
    }

    /// Whether the gang has waited long enough for the backfill reservation ([`starving`]).
    pub(super) fn starving(&self, index: usize, gang: &Gang, leaf: usize) -> bool {
        let tree = self.tree();
        starving(self.snapshot, self.config, gang, || {
            tree.is_configured() && self.queues.beyond_deserved(tree, leaf, self.picker.need_now(index))
        })
    }
}

/// Whether the cycle can still give a gang of a leaf queueing by `queueing` a reservation.
pub(super) fn room_for_one(queueing: Queueing, reserved: bool, timed: Option<&Timed>, depth: usize) -> bool {
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
pub(super) fn shortfall_reason(shortfall: Shortfall) -> WaitReason {
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
