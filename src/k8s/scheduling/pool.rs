//! The unschedulable pool: a gang that did not fit is not searched for again until a change
//! that could help it (`k8s::store::changes`), a change to the gang itself, a timer of its own
//! (its backfill reservation's age, its preemption delay, its victims' minimum runtime), or
//! `retryUnschedulableSeconds` at the latest. Parked gangs still go to the engine, marked,
//! so that queues count what they ask and StrictFIFO keeps them at the head; they wait with
//! the reason they last had.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::engine::model::{Gang, GangKey, Parked};
use crate::engine::reason::WaitReason;

struct Entry {
    /// The count of helping changes when it was parked (`Changes::helped`).
    helped: u64,
    since: Instant,
    parked: Parked,
    /// What it was told when it was parked.
    message: String,
    /// A time of its own to be tried again (Unix seconds).
    due: Option<i64>,
}

pub struct UnschedulablePool {
    flush: Duration,
    entries: HashMap<GangKey, Entry>,
}

impl UnschedulablePool {
    pub fn new(flush: Duration) -> UnschedulablePool {
        UnschedulablePool { flush, entries: HashMap::new() }
    }

    /// Before a cycle: lets go of every gang a change since it was parked could help
    /// (`helped` moved on, or it is in `touched`), whose own time came, or that was parked
    /// `retryUnschedulableSeconds` ago; and of gangs no longer pending. Marks the rest.
    pub fn mark(
        &mut self,
        gangs: &mut [Gang],
        helped: u64,
        touched: &HashSet<GangKey>,
        now: Instant,
        unix: i64,
    ) -> usize {
        let flush = self.flush;
        self.entries.retain(|key, e| {
            e.helped == helped
                && !touched.contains(key)
                && now.duration_since(e.since) < flush
                && e.due.is_none_or(|due| due > unix)
        });
        let pending: HashSet<&GangKey> = gangs.iter().map(|g| &g.key).collect();
        self.entries.retain(|key, _| pending.contains(key));
        let mut marked = 0;
        for gang in gangs.iter_mut() {
            if let Some(entry) = self.entries.get(&gang.key) {
                gang.parked = entry.parked;
                marked += 1;
            }
        }
        marked
    }

    /// After a cycle: parks a gang that did not fit, when its reason allows it.
    pub fn park(
        &mut self,
        gang: &GangKey,
        reason: &WaitReason,
        message: &str,
        due: Option<i64>,
        helped: u64,
        now: Instant,
    ) {
        if let Some(parked) = reason.parkable() {
            let entry = Entry { helped, since: now, parked, message: message.to_string(), due };
            self.entries.insert(gang.clone(), entry);
        }
    }

    /// What a parked gang was told when it was parked, and its own time to be tried again.
    pub fn parked(&self, gang: &GangKey) -> Option<(&str, Option<i64>)> {
        self.entries.get(gang).map(|e| (e.message.as_str(), e.due))
    }

    /// When the first parked gang is to be tried again without any change.
    pub fn next_flush(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.since + self.flush).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::build::SnapshotBuilder;
    use crate::engine::preempt::Room;
    use crate::engine::reason::{NodeRejection, NodeRejections};

    fn does_not_fit(reserved: bool) -> WaitReason {
        let mut nodes = NodeRejections { total_nodes: 2, available: 0, ..Default::default() };
        nodes.add(NodeRejection::Insufficient("nvidia.com/gpu".into()));
        if reserved {
            nodes.add(NodeRejection::Reserved);
        }
        WaitReason::DoesNotFit { nodes, needed: 2, fit: 1 }
    }

    fn gangs() -> Vec<Gang> {
        SnapshotBuilder::new()
            .gang("a", 2, 2, &[("nvidia.com/gpu", 8)])
            .gang("b", 2, 2, &[("nvidia.com/gpu", 8)])
            .build()
            .gangs
    }

    #[test]
    fn a_gang_that_did_not_fit_is_parked_until_a_change_could_help_it() {
        let mut pool = UnschedulablePool::new(Duration::from_secs(60));
        let now = Instant::now();
        let mut gangs = gangs();
        let a = gangs[0].key.clone();
        pool.park(&a, &does_not_fit(false), "0/2 nodes are available", None, 7, now);
        assert_eq!(pool.mark(&mut gangs, 7, &HashSet::new(), now, 0), 1);
        assert_eq!(gangs[0].parked, Parked::DidNotFit);
        assert_eq!(gangs[1].parked, Parked::No);
        assert_eq!(pool.parked(&a), Some(("0/2 nodes are available", None)));
        // Its own pods changed.
        let mut fresh = self::gangs();
        assert_eq!(pool.mark(&mut fresh, 7, &HashSet::from([a.clone()]), now, 0), 0);
        // A change that could help any gang.
        pool.park(&a, &does_not_fit(false), "again", None, 7, now);
        assert_eq!(pool.mark(&mut self::gangs(), 8, &HashSet::new(), now, 0), 0);
        // Its flush interval.
        pool.park(&a, &does_not_fit(false), "again", None, 8, now);
        assert_eq!(pool.mark(&mut self::gangs(), 8, &HashSet::new(), now + Duration::from_secs(61), 0), 0);
        // A time of its own.
        pool.park(&a, &does_not_fit(false), "again", Some(100), 8, now);
        assert_eq!(pool.mark(&mut self::gangs(), 8, &HashSet::new(), now, 99), 1);
        assert_eq!(pool.mark(&mut self::gangs(), 8, &HashSet::new(), now, 100), 0);
        assert_eq!(pool.parked(&a), None);
    }

    #[test]
    fn only_a_gang_that_searched_and_found_too_few_nodes_is_parked() {
        assert_eq!(does_not_fit(false).parkable(), Some(Parked::DidNotFit));
        // Kept off nodes held for an earlier gang: that changes from one cycle to the next.
        assert_eq!(does_not_fit(true).parkable(), None);
        assert_eq!(WaitReason::TooFewPods { exist: 1, min_member: 2 }.parkable(), None);
        let held = WaitReason::Room { shortfall: Box::new(does_not_fit(false)), room: Room::Reserved { until: 5 } };
        assert_eq!(held.parkable(), None);
        let delayed =
            WaitReason::Room { shortfall: Box::new(does_not_fit(false)), room: Room::InPreemptionDelay { until: 5 } };
        assert_eq!(delayed.parkable(), Some(Parked::DidNotFit));
    }
}
