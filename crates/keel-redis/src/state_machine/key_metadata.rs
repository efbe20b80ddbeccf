//! What the state machine keeps about keys besides their values: the index of deadlines in time
//! order (active expiry), and the tombstones WATCH compares absent keys by.
//!
//! Both are functions of the log alone (the indexes and log times at which keys changed), so they
//! are the same on every replica at the same applied index, and both travel in snapshots.
//!
//! ## What WATCH compares
//!
//! WATCH reads, linearizably, the applied index w and the log's time t_w of the state it saw
//! (`RAFT.WATCHPOINT`); the transaction carries (key, w, t_w) for each watched key, and the
//! state machine aborts it when applying EXEC finds that a watched key changed since:
//!
//! | the key is now | it changed since w if |
//! |---|---|
//! | present, last changed at index v (its version) | v > w, or it has a deadline d with t_w < d <= now (it expired since) |
//! | absent, with a tombstone t (the index that removed it) | t > w |
//! | absent, no tombstone | horizon > w |
//!
//! Every removal (DEL, GETDEL, a write or tick that removes an expired key, ...) records the
//! removing entry's index as the key's tombstone. Removing a key that had already expired before
//! w therefore also counts as a change: a spurious abort, never a missed change. Tombstones are
//! bounded ([`TOMBSTONES_MAX`]): when the table is full it is cleared and the horizon moves to
//! the current index, so every absent key counts as changed for transactions watching from
//! before: again spurious aborts only. Tombstones are per database, as WATCH is per (database,
//! key). SWAPDB tombstones every key leaving a database and versions every key arriving at the
//! swap's index, so a watched key that exists in either database counts as changed (Redis's
//! rule). FLUSHDB and FLUSHALL give every key they remove a tombstone (a key
//! that did not exist is untouched, as in Redis), or, when they would not fit, does the same. Versions and tombstones are
//! functions of the log, the same on every replica, so every replica decides the same.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;

use super::key::Key;

/// Most tombstones kept (about 100 bytes each); see the module documentation.
pub const TOMBSTONES_MAX: usize = 65_536;

/// Keys with a deadline, in deadline order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Deadlines {
    by_time: BTreeSet<(u64, Key)>,
}

impl Deadlines {
    pub(crate) fn insert(&mut self, deadline_ms: u64, key: &[u8]) {
        debug_assert_ne!(deadline_ms, 0, "0 means no deadline");
        self.by_time.insert((deadline_ms, Key::new(key)));
    }

    pub(crate) fn remove(&mut self, deadline_ms: u64, key: &[u8]) {
        let removed = self.by_time.remove(&(deadline_ms, Key::new(key)));
        debug_assert!(removed, "a deadline the index did not hold");
    }

    /// `key`'s deadline changed from `old_ms` to `new_ms` (either 0: none).
    pub(crate) fn moved(&mut self, key: &[u8], old_ms: u64, new_ms: u64) {
        if old_ms == new_ms {
            return;
        }
        if old_ms != 0 {
            self.remove(old_ms, key);
        }
        if new_ms != 0 {
            self.insert(new_ms, key);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.by_time.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.by_time.len()
    }

    /// Up to `max` keys whose deadline is at or before `now_ms`, earliest first.
    pub(crate) fn due(&self, now_ms: u64, max: usize) -> Vec<Bytes> {
        self.by_time
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(max)
            .map(|(_, key)| Bytes::copy_from_slice(key))
            .collect()
    }

    /// [`Self::due`], each key with its deadline.
    pub(crate) fn due_with_deadlines(&self, now_ms: u64, max: usize) -> Vec<(u64, Bytes)> {
        self.by_time
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(max)
            .map(|(deadline, key)| (*deadline, Bytes::copy_from_slice(key)))
            .collect()
    }

    /// The earliest deadline, if any key has one.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.by_time.first().map(|(deadline, _)| *deadline)
    }
}

/// The tombstones of removed keys and the horizon below which none is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tombstones {
    removed_at: HashMap<Key, u64>,
    horizon: u64,
}

impl Tombstones {
    pub(crate) fn from_parts(removed_at: HashMap<Key, u64>, horizon: u64) -> Tombstones {
        Tombstones {
            removed_at,
            horizon,
        }
    }

    /// Records that the entry at `index` removed `key`.
    pub(crate) fn record(&mut self, key: &[u8], index: u64) {
        if self.removed_at.len() >= TOMBSTONES_MAX && !self.removed_at.contains_key(key) {
            self.clear_at(index);
        }
        self.removed_at.insert(Key::new(key), index);
    }

    /// The key exists again: its token comes from its version now.
    pub(crate) fn forget(&mut self, key: &[u8]) {
        if !self.removed_at.is_empty() {
            self.removed_at.remove(key);
        }
    }

    /// Every tombstone dropped: the token of every absent key changes at `index`.
    pub(crate) fn clear_at(&mut self, index: u64) {
        self.removed_at.clear();
        self.horizon = index;
    }

    /// The index at or before which an absent key last changed: its tombstone, or the horizon.
    pub(crate) fn removed_at(&self, key: &[u8]) -> u64 {
        self.removed_at.get(key).copied().unwrap_or(self.horizon)
    }

    pub(crate) fn horizon(&self) -> u64 {
        self.horizon
    }

    pub(crate) fn len(&self) -> usize {
        self.removed_at.len()
    }

    /// Every tombstone in ascending key order (for snapshots).
    pub(crate) fn sorted(&self) -> Vec<(&Key, u64)> {
        let mut all: Vec<(&Key, u64)> = self.removed_at.iter().map(|(k, t)| (k, *t)).collect();
        all.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_keys_come_earliest_first_and_stop_at_now() {
        let mut deadlines = Deadlines::default();
        deadlines.insert(30, b"c");
        deadlines.insert(10, b"a");
        deadlines.insert(20, b"b");
        deadlines.insert(20, b"bb");
        assert_eq!(deadlines.earliest(), Some(10));
        assert_eq!(deadlines.due(20, 10), vec!["a", "b", "bb"]);
        assert_eq!(deadlines.due(20, 2), vec!["a", "b"]);
        assert!(deadlines.due(9, 10).is_empty());
        deadlines.remove(10, b"a");
        assert_eq!(deadlines.due(100, 10), vec!["b", "bb", "c"]);
        assert_eq!(deadlines.len(), 3);
    }

    #[test]
    fn a_full_tombstone_table_moves_the_horizon_and_changes_every_absent_token() {
        let mut tombstones = Tombstones::default();
        assert_eq!(tombstones.removed_at(b"never"), 0);
        for i in 0..TOMBSTONES_MAX as u64 {
            tombstones.record(format!("k{i}").as_bytes(), i + 1);
        }
        assert_eq!(tombstones.removed_at(b"k7"), 8);
        assert_eq!(tombstones.len(), TOMBSTONES_MAX);
        // One more: the table is cleared first, and the horizon is the removing entry's index.
        tombstones.record(b"one-more", 100_000);
        assert_eq!(tombstones.len(), 1);
        assert_eq!(tombstones.horizon(), 100_000);
        assert_eq!(tombstones.removed_at(b"k7"), 100_000);
        assert_eq!(tombstones.removed_at(b"never"), 100_000);
        tombstones.forget(b"one-more");
        assert_eq!(tombstones.removed_at(b"one-more"), 100_000);
    }
}
