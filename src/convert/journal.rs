//! What changed in one store, by generation: each store records the objects it applies or
//! deletes, so that the snapshot memo converts again only what changed since it last
//! looked, and rebuilds from scratch when it cannot tell (another store, too far behind, a
//! relist).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// Changes kept at most; a reader further behind than this starts afresh.
const KEPT: usize = 8192;

/// Every journal gets its own identity, so a reader never takes one store's generations
/// for another's (a clone is a new history too).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// An object's identity in its store: namespace (empty for cluster objects) and name.
pub type ObjectKey = (String, String);

/// The changes of one store: the keys of objects applied or deleted, in order.
#[derive(Debug)]
pub struct Journal {
    id: u64,
    /// The generation of the first key kept.
    base: u64,
    keys: VecDeque<ObjectKey>,
}

impl Default for Journal {
    fn default() -> Journal {
        Journal { id: next_id(), base: 0, keys: VecDeque::new() }
    }
}

impl Clone for Journal {
    /// A clone changes on its own from here: readers of the original start afresh on it.
    fn clone(&self) -> Journal {
        Journal::default()
    }
}

/// Where a reader stands in a journal: its identity and the generation read up to.
pub type JournalMark = (u64, u64);

/// Where a snapshot's reader stands in the journals read by object (pods and nodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub pods: JournalMark,
    pub nodes: JournalMark,
}

impl Journal {
    /// Where a reader that has read everything stands.
    pub fn mark(&self) -> JournalMark {
        (self.id, self.base + self.keys.len() as u64)
    }

    /// `key` changed.
    pub fn record(&mut self, key: ObjectKey) {
        self.keys.push_back(key);
        if self.keys.len() > KEPT {
            self.keys.drain(..KEPT / 2);
            self.base += (KEPT / 2) as u64;
        }
    }

    /// Anything may have changed (a relist): every reader starts afresh.
    pub fn reset(&mut self) {
        self.base += self.keys.len() as u64 + 1;
        self.keys.clear();
    }

    /// The keys changed since `mark`, or None when this journal cannot tell (another
    /// journal's mark, or one older than what is kept).
    pub fn since(&self, mark: JournalMark) -> Option<impl Iterator<Item = &ObjectKey>> {
        let (id, generation) = mark;
        let end = self.base + self.keys.len() as u64;
        (id == self.id && generation >= self.base && generation <= end)
            .then(|| self.keys.range((generation - self.base) as usize..))
    }

    /// A copy that answers `since(mark)` as this one does (and nothing earlier): what a
    /// reader takes along to read after the store's lock is released.
    pub fn tail(&self, mark: JournalMark) -> Journal {
        match self.since(mark) {
            Some(keys) => Journal { id: self.id, base: mark.1, keys: keys.cloned().collect() },
            None => Journal { id: self.id, base: self.mark().1, keys: VecDeque::new() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ("ml".into(), name.into())
    }

    #[test]
    fn a_reader_gets_what_changed_since_its_mark_and_nothing_from_another_journal() {
        let mut journal = Journal::default();
        journal.record(key("a"));
        let mark = journal.mark();
        journal.record(key("b"));
        journal.record(key("c"));
        let names: Vec<&str> = journal.since(mark).unwrap().map(|k| k.1.as_str()).collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(journal.since(journal.mark()).unwrap().count(), 0);
        let tail = journal.tail(mark);
        assert_eq!(tail.since(mark).unwrap().count(), 2);
        assert!(Journal::default().since(mark).is_none(), "another journal cannot answer");
        assert!(journal.clone().since(mark).is_none(), "a clone is another history");
    }

    #[test]
    fn a_reader_too_far_behind_or_before_a_reset_starts_afresh() {
        let mut journal = Journal::default();
        let start = journal.mark();
        for i in 0..=KEPT {
            journal.record(key(&i.to_string()));
        }
        assert!(journal.since(start).is_none(), "the oldest changes were let go");
        assert!(journal.tail(start).since(start).is_none());
        let recent = journal.mark();
        journal.reset();
        assert!(journal.since(recent).is_none(), "a relist may have changed anything");
        assert_eq!(journal.since(journal.mark()).unwrap().count(), 0);
    }
}
