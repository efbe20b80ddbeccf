//! The in-memory view of the replicated log: entries after the snapshot, the term history (first
//! index of every term, kept across compaction so the term of any index ever held is known), and
//! the configuration entries with the base configuration they override.
//!
//! The log here is the node's *intended* log: it changes as soon as the core decides (append,
//! truncate). What is durable is tracked separately by the node (see `durability.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::membership::Membership;
use crate::types::{Entry, EntryPayload, Index, LogId, Term};

/// The node's log in memory: the entries after the purged prefix, with the term history and the
/// configurations it holds. A node's own is read through [`RaftNode::log`](crate::RaftNode::log),
/// which lends it only immutably.
#[derive(Clone, Debug)]
pub struct RaftLog {
    /// The last position purged from memory (or the sentinel 0/0): a snapshot covers it. Entries
    /// at or below it are gone from `entries`.
    purged: LogId,
    /// `entries[i].index == snapshot.index + 1 + i`.
    entries: VecDeque<Entry>,
    /// `(term, first index of that term)` ascending in both fields, covering compacted entries
    /// too. Bounded by the number of terms in which this log gained entries.
    term_history: Vec<LogId>,
    /// The configuration at the purged position.
    base_membership: Arc<Membership>,
    /// Configuration entries in `entries`, ascending by index.
    memberships: Vec<(Index, Arc<Membership>)>,
}

impl RaftLog {
    /// A log that starts after `purged`, whose configuration there is `membership`, and whose
    /// term history up to that position is `term_history`.
    pub fn new(purged: LogId, membership: Arc<Membership>, term_history: Vec<LogId>) -> Self {
        debug_assert!(term_history
            .windows(2)
            .all(|w| w[0].term < w[1].term && w[0].index < w[1].index));
        RaftLog {
            purged,
            entries: VecDeque::new(),
            term_history,
            base_membership: membership,
            memberships: Vec::new(),
        }
    }

    /// The last position no longer held as an entry (covered by a snapshot).
    pub fn purged(&self) -> LogId {
        self.purged
    }

    /// The first index still held as an entry.
    pub fn first_index(&self) -> Index {
        self.purged.index + 1
    }

    /// The index of the last entry, or the purged index when no entry is held.
    pub fn last_index(&self) -> Index {
        self.purged.index + self.entries.len() as Index
    }

    /// The position of the last entry, or [`RaftLog::purged`] when no entry is held: what
    /// elections compare.
    pub fn last_log_id(&self) -> LogId {
        match self.entries.back() {
            Some(e) => e.log_id(),
            None => self.purged,
        }
    }

    /// `(term, first index of that term)` for every term of the log, compacted part included,
    /// rising in both fields.
    pub fn term_history(&self) -> &[LogId] {
        &self.term_history
    }

    /// The term of the entry at `index` if this log holds it (or it is the snapshot position).
    pub fn term_at(&self, index: Index) -> Option<Term> {
        if index == self.purged.index {
            return Some(self.purged.term);
        }
        self.entry(index).map(|e| e.term)
    }

    /// The term of `index` for any index up to the last one, compacted or not, from the term
    /// history. `None` beyond the log.
    pub fn term_of_any(&self, index: Index) -> Option<Term> {
        if index > self.last_index() {
            return None;
        }
        if index == 0 {
            return Some(0);
        }
        if let Some(term) = self.term_at(index) {
            return Some(term);
        }
        let pos = self.term_history.partition_point(|t| t.index <= index);
        if pos == 0 {
            // Below the first known term: only the sentinel, which index 0 already covered.
            None
        } else {
            Some(self.term_history[pos - 1].term)
        }
    }

    /// The entry at `index`; `None` at or below the purged index and beyond the last.
    pub fn entry(&self, index: Index) -> Option<&Entry> {
        if index <= self.purged.index {
            return None;
        }
        self.entries.get((index - self.purged.index - 1) as usize)
    }

    /// Whether this log holds the entry `id` (or `id` is the purged position): the consistency
    /// check of an Append's `prev`. `false` for a compacted index other than the purged one,
    /// even if its term is right.
    pub fn matches(&self, id: LogId) -> bool {
        self.term_at(id.index) == Some(id.term)
    }

    /// The first index at which `term` appears in this log, from the term history.
    pub fn first_index_of_term(&self, term: Term) -> Option<Index> {
        self.term_history
            .iter()
            .find(|t| t.term == term)
            .map(|t| t.index)
    }

    /// The last index of the greatest term `<= term` held in this log: where a leader continues
    /// after a follower reports a conflict in `term` (fast backtracking).
    pub fn last_index_of_term_at_most(&self, term: Term) -> Option<Index> {
        let pos = self.term_history.partition_point(|t| t.term <= term);
        if pos == 0 {
            return None;
        }
        let last = match self.term_history.get(pos) {
            Some(next) => next.index - 1,
            None => self.last_index(),
        };
        Some(last)
    }

    /// Entries in `[lo, hi]`, at most `entries_max` and, beyond the first, at most `bytes_max`.
    pub fn slice(&self, lo: Index, hi: Index, entries_max: usize, bytes_max: usize) -> Vec<Entry> {
        debug_assert!(lo > self.purged.index, "slice below the purged prefix");
        let hi = hi.min(self.last_index());
        if lo > hi {
            return Vec::new();
        }
        let count = ((hi - lo + 1) as usize).min(entries_max);
        let start = (lo - self.purged.index - 1) as usize;
        let mut out = Vec::with_capacity(count);
        let mut bytes = 0;
        for e in self.entries.range(start..start + count) {
            bytes += e.size_bytes();
            if !out.is_empty() && bytes > bytes_max {
                break;
            }
            out.push(e.clone());
        }
        out
    }

    /// Whether the entries from `lo` to the end exceed one message of at most `entries_max` and
    /// `bytes_max`: whether an Append starting at `lo` would be cut by the limits (the same
    /// measure as [`RaftLog::slice`]) instead of reaching the last entry.
    pub fn exceeds_one_message(&self, lo: Index, entries_max: usize, bytes_max: usize) -> bool {
        debug_assert!(lo > self.purged.index, "range below the purged prefix");
        let Some(start) = lo.checked_sub(self.purged.index + 1) else {
            return false;
        };
        let start = start as usize;
        if start >= self.entries.len() {
            return false;
        }
        if self.entries.len() - start > entries_max {
            return true;
        }
        let mut bytes = 0;
        for (i, e) in self.entries.range(start..).enumerate() {
            bytes += e.size_bytes();
            if i > 0 && bytes > bytes_max {
                return true;
            }
        }
        false
    }

    /// Appends entries that must directly follow the last one.
    pub fn append(&mut self, entry: Entry) {
        assert_eq!(
            entry.index,
            self.last_index() + 1,
            "log append must be contiguous"
        );
        assert!(
            entry.term >= self.last_log_id().term,
            "log terms must not decrease"
        );
        if self.term_history.last().is_none_or(|t| t.term < entry.term) {
            self.term_history.push(entry.log_id());
        }
        if let EntryPayload::Membership(m) = &entry.payload {
            self.memberships.push((entry.index, m.clone()));
        }
        self.entries.push_back(entry);
    }

    /// Removes every entry at or after `index`. The caller guarantees none of them is committed.
    pub fn truncate_from(&mut self, index: Index) {
        assert!(
            index > self.purged.index,
            "cannot truncate into the purged prefix"
        );
        if index > self.last_index() {
            return;
        }
        self.entries
            .truncate((index - self.purged.index - 1) as usize);
        while self.term_history.last().is_some_and(|t| t.index >= index) {
            self.term_history.pop();
        }
        while self.memberships.last().is_some_and(|(i, _)| *i >= index) {
            self.memberships.pop();
        }
    }

    /// Drops the entries up to `index` from memory (a durable snapshot covers them). The term
    /// history is kept whole, so terms of purged indexes stay known.
    pub fn compact_to(&mut self, index: Index) {
        assert!(index <= self.last_index(), "cannot purge beyond the log");
        if index <= self.purged.index {
            return;
        }
        let term = self.term_at(index).expect("index within the log");
        self.base_membership = self.membership_arc_at(index);
        let count = (index - self.purged.index) as usize;
        self.entries.drain(..count);
        self.memberships.retain(|(i, _)| *i > index);
        self.purged = LogId::new(term, index);
    }

    /// Replaces the whole log by an empty one that continues after `last`: a snapshot install
    /// whose last entry this log did not hold. Configuration and term history come from the
    /// snapshot (scenario S32: nothing the snapshot covers may linger).
    pub fn reset_to(&mut self, last: LogId, membership: Arc<Membership>, term_history: Vec<LogId>) {
        self.entries.clear();
        self.memberships.clear();
        self.purged = last;
        self.base_membership = membership;
        self.term_history = term_history;
    }

    fn membership_arc_at(&self, index: Index) -> Arc<Membership> {
        match self.memberships.iter().rev().find(|(i, _)| *i <= index) {
            Some((_, m)) => m.clone(),
            None => self.base_membership.clone(),
        }
    }

    /// The effective configuration: the latest configuration entry, else the snapshot's.
    pub fn membership(&self) -> &Membership {
        match self.memberships.last() {
            Some((_, m)) => m,
            None => &self.base_membership,
        }
    }

    /// The effective configuration, shared: a caller that keeps it can tell a change by pointer.
    pub fn membership_shared(&self) -> &Arc<Membership> {
        match self.memberships.last() {
            Some((_, m)) => m,
            None => &self.base_membership,
        }
    }

    /// The index of the entry that set the effective configuration (the purged index if none).
    pub fn membership_index(&self) -> Index {
        self.memberships
            .last()
            .map_or(self.purged.index, |(i, _)| *i)
    }

    /// The configuration entries in the log after `index`, oldest first, with their indexes.
    pub fn memberships_after(&self, index: Index) -> impl Iterator<Item = (Index, &Membership)> {
        let start = self.memberships.partition_point(|(i, _)| *i <= index);
        self.memberships[start..].iter().map(|(i, m)| (*i, &**m))
    }

    /// The latest configuration at or below `index`.
    pub fn membership_at(&self, index: Index) -> &Membership {
        match self.memberships.iter().rev().find(|(i, _)| *i <= index) {
            Some((_, m)) => m,
            None => &self.base_membership,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(term: Term, index: Index) -> Entry {
        Entry {
            term,
            index,
            payload: EntryPayload::Noop,
        }
    }

    fn log_with(terms: &[Term]) -> RaftLog {
        let mut log = RaftLog::new(LogId::ZERO, Membership::new_voters([1]).into(), Vec::new());
        for (i, t) in terms.iter().enumerate() {
            log.append(entry(*t, i as Index + 1));
        }
        log
    }

    #[test]
    fn term_history_tracks_first_index_of_each_term() {
        let log = log_with(&[1, 1, 2, 2, 2, 5]);
        assert_eq!(
            log.term_history(),
            &[LogId::new(1, 1), LogId::new(2, 3), LogId::new(5, 6)]
        );
        assert_eq!(log.first_index_of_term(2), Some(3));
        assert_eq!(log.last_index_of_term_at_most(2), Some(5));
        assert_eq!(log.last_index_of_term_at_most(4), Some(5));
        assert_eq!(log.last_index_of_term_at_most(0), None);
        assert_eq!(log.term_of_any(4), Some(2));
        assert_eq!(log.term_of_any(7), None);
    }

    #[test]
    fn truncate_drops_terms_and_memberships_after_the_cut() {
        let mut log = log_with(&[1, 1, 2, 3]);
        log.append(Entry {
            term: 3,
            index: 5,
            payload: EntryPayload::Membership(Membership::new_voters([1, 2]).into()),
        });
        assert_eq!(log.membership(), &Membership::new_voters([1, 2]));
        log.truncate_from(3);
        assert_eq!(log.last_log_id(), LogId::new(1, 2));
        assert_eq!(log.term_history(), &[LogId::new(1, 1)]);
        assert_eq!(log.membership(), &Membership::new_voters([1]));
    }

    #[test]
    fn compaction_keeps_terms_and_the_configuration_at_the_cut() {
        let mut log = log_with(&[1, 1, 2, 2]);
        log.append(Entry {
            term: 2,
            index: 5,
            payload: EntryPayload::Membership(Membership::new_voters([1, 2]).into()),
        });
        log.append(entry(3, 6));
        log.compact_to(5);
        assert_eq!(log.purged(), LogId::new(2, 5));
        assert_eq!(log.first_index(), 6);
        assert_eq!(log.term_at(5), Some(2));
        assert_eq!(log.term_at(4), None);
        assert_eq!(log.term_of_any(4), Some(2));
        assert_eq!(log.term_of_any(1), Some(1));
        assert_eq!(log.membership(), &Membership::new_voters([1, 2]));
        log.reset_to(
            LogId::new(4, 9),
            Membership::new_voters([7]).into(),
            vec![LogId::new(1, 1), LogId::new(4, 8)],
        );
        assert_eq!(log.last_log_id(), LogId::new(4, 9));
        assert_eq!(log.term_of_any(7), Some(1));
        assert_eq!(log.membership(), &Membership::new_voters([7]));
    }

    #[test]
    fn slice_respects_entry_and_byte_bounds_but_always_returns_one() {
        let log = log_with(&[1; 10]);
        assert_eq!(log.slice(2, 9, 3, usize::MAX).len(), 3);
        assert_eq!(log.slice(2, 9, 100, 1).len(), 1);
        assert_eq!(log.slice(9, 20, 100, usize::MAX).len(), 2);
        assert!(log.slice(11, 20, 100, usize::MAX).is_empty());
    }

    #[test]
    fn exceeds_one_message_agrees_with_where_slice_stops() {
        let log = log_with(&[1; 10]);
        let one = entry(1, 1).size_bytes();
        for lo in 1..=11 {
            for entries_max in [1, 3, 10, 100] {
                for bytes_max in [1, one, 3 * one, usize::MAX] {
                    let slice = log.slice(lo, log.last_index(), entries_max, bytes_max);
                    let cut = slice.last().is_some_and(|e| e.index < log.last_index());
                    assert_eq!(
                        log.exceeds_one_message(lo, entries_max, bytes_max),
                        cut,
                        "from {lo}, {entries_max} entries, {bytes_max} bytes"
                    );
                }
            }
        }
    }
}
