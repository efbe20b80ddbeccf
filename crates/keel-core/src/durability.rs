//! Tracks what the storage has made durable, so the node acknowledges, votes and counts itself
//! only for state that will survive a crash (docs/DESIGN.md section 3; Raft thesis 10.2.1).
//!
//! The node hands storage one [`Write`] per `Ready`. A write replaces the log from its first entry
//! on (dropping any conflicting suffix) and may carry the hard state. Storage completes writes in
//! the order it received them; completing write `w` implies every earlier write is durable.
//!
//! # The persistence model (asynchronous writes)
//!
//! The node changes its in-memory log and hard state at once, and hands storage one [`Write`] per
//! `ready()`: entries to store (storage first drops everything at or after the first one) and the
//! hard state. `persisted(id)` reports that write `id` and all earlier ones are durable. From that
//! the node derives `durable_index`: every entry at or below it is on disk *and* equal to the
//! in-memory log (a later write that rewrites part of the log lowers it until it completes). This
//! module also tracks the durable hard state and whether a promise release or lowering
//! (`release_promise`, `lower_promise_to`, from `node/repair.rs`) is durable yet. Consequences,
//! each enforced in one place:
//!
//! - **Leader**: sends Appends before its own write completes; counts itself toward commit only
//!   up to `durable_index` (`maybe_commit`). While every follower's window of Appends is full it
//!   writes new entries only with the Append that carries them (`write_limit`): one group commit
//!   fewer, and they could not commit earlier anyway. The limit only holds back entries not yet
//!   written: a leader never writes an entry twice, since a rewrite of entries it counted durable
//!   could lose a committed one in a crash (checked on every write: only a truncation rewrites
//!   the log).
//! - **Follower**: acknowledgements and vote grants are held (`send_after_persist`) until the
//!   write that makes them true completes. A heartbeat response asserts only the term and vote,
//!   so it waits only until those are durable (`send_after_term_persisted`), not behind entries
//!   still being written: a follower whose disk stalls keeps answering, and check-quorum keeps a
//!   healthy leader.
//! - **Candidate**: its own vote counts only once durable; RequestVote leaves only then.
//! - **Apply**: only entries that are committed *and* locally durable are handed out (scenario
//!   S23), and at most `unapplied_entries_max` beyond what the application reported applied, so
//!   the apply pipeline is bounded however far behind the state machine is.
//! - **Restart**: the node comes back with the persisted commit index and hands out the committed
//!   entries from the snapshot on (configuration entries included, they are part of the log);
//!   `is_replaying()` stays true, and the node does not campaign, until the application has
//!   applied up to that index (docs/DESIGN.md section 1.3). A replay of millions of entries
//!   streams through the bounded apply pipeline (S19).
//! - **Commit index**: written with every write; a commit-only change waits for the next
//!   heartbeat tick and is written without forcing a sync (`sync: false`). On restart it is
//!   clamped into `[max(snapshot, applied), last index]`. A torn batch that kept entries of a
//!   newer term than its hard state resumes in that term with no vote (no vote of that term was
//!   ever released).

use std::collections::VecDeque;

use crate::types::{Entry, HardState, Index, LogId, SnapshotMeta};

/// One unit of work for storage, applied in field order: `install`, `entries`, `hard_state`,
/// `purge_to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Completion is reported with this id via `RaftNode::persisted`.
    pub id: u64,
    /// A snapshot install: the log restarts, empty, after `install.last` (whose snapshot data
    /// storage already holds durably). Everything the old log held is dropped.
    pub install: Option<SnapshotMeta>,
    /// Entries to store. Storage first drops every entry at or after `entries[0].index`.
    pub entries: Vec<Entry>,
    /// The hard state to store after the entries, if it changed.
    pub hard_state: Option<HardState>,
    /// Drop entries at or below this index: a durable snapshot covers them.
    pub purge_to: Option<Index>,
    /// Whether completion must wait for an fsync. False only for a write that carries nothing but
    /// a moved commit index, which may be lost in a crash (the log is replayed to the commit index
    /// that did survive, and the leader tells us the rest).
    pub sync: bool,
    /// The node, recovering from storage damage, let go of the promise it recovered to
    /// (keel-core's `node/repair.rs`): storage lowers its promise record to what the log holds
    /// now, so that a restart does not take the log for damaged again. Always synced.
    pub release_promise: bool,
    /// The node, recovering, lowered the promise it recovers to, to this entry beyond its log:
    /// committed in the cluster, or one of the lost entries after which none was ever committed
    /// (keel-core's `node/repair.rs`). Storage records it as the promise and keeps it as the
    /// floor until the log reaches it. Always synced.
    pub lower_promise_to: Option<LogId>,
}

#[derive(Clone, Copy, Debug)]
struct IssuedWrite {
    id: u64,
    /// First index this write (re)writes, if it carries entries.
    first_index: Option<Index>,
    /// The log's last index once this write is on disk.
    last_index: Index,
    /// The hard state on disk once this write is.
    hard_state: HardState,
}

#[derive(Debug)]
pub(crate) struct Durability {
    next_write_id: u64,
    completed_write_id: u64,
    issued: VecDeque<IssuedWrite>,
    /// Every entry at or below this index is durable and equal to the in-memory log.
    durable_index: Index,
    /// Lowest index of the in-memory log not yet handed to storage.
    unissued_from: Index,
    /// The log's last index as storage will see it once all issued writes complete.
    issued_last_index: Index,
    /// A snapshot install and a purge decided but not yet handed to storage.
    pending_install: Option<SnapshotMeta>,
    pending_purge_to: Option<Index>,
    /// A promise release decided but not yet handed to storage, and the write that carries it.
    pending_release: bool,
    release_write_id: Option<u64>,
    /// A promise lowering decided but not yet handed to storage.
    pending_lower: Option<LogId>,
    /// Hard state as last handed to storage, and as durable.
    issued_hard_state: HardState,
    durable_hard_state: HardState,
}

impl Durability {
    pub fn new(recovered_last_index: Index, hard_state: HardState) -> Self {
        Durability {
            next_write_id: 1,
            completed_write_id: 0,
            issued: VecDeque::new(),
            durable_index: recovered_last_index,
            unissued_from: recovered_last_index + 1,
            issued_last_index: recovered_last_index,
            issued_hard_state: hard_state,
            durable_hard_state: hard_state,
            pending_install: None,
            pending_purge_to: None,
            pending_release: false,
            release_write_id: None,
            pending_lower: None,
        }
    }

    /// The node let go of its promise: the next write tells storage ([`Write::release_promise`]).
    pub fn release_promise(&mut self) {
        self.pending_release = true;
    }

    /// The node lowered the promise it recovers to, to `point`: the next write tells storage
    /// ([`Write::lower_promise_to`]).
    pub fn lower_promise_to(&mut self, point: LogId) {
        self.pending_lower = Some(point);
    }

    /// Whether the write telling storage of a promise release is durable.
    pub fn promise_release_durable(&self) -> bool {
        self.release_write_id
            .is_some_and(|id| id <= self.completed_write_id)
    }

    /// The in-memory log was replaced by an empty one after `meta.last` (snapshot install).
    pub fn installed(&mut self, meta: SnapshotMeta) {
        let after = meta.last.index + 1;
        self.unissued_from = after;
        self.durable_index = self.durable_index.min(meta.last.index);
        self.pending_purge_to = None;
        self.pending_install = Some(meta);
    }

    /// Entries up to `index` may be dropped from storage.
    pub fn purge(&mut self, index: Index) {
        self.pending_purge_to = Some(self.pending_purge_to.map_or(index, |p| p.max(index)));
    }

    pub fn durable_index(&self) -> Index {
        self.durable_index
    }

    pub fn durable_hard_state(&self) -> HardState {
        self.durable_hard_state
    }

    pub fn completed_write_id(&self) -> u64 {
        self.completed_write_id
    }

    /// The in-memory log dropped entries from `index` on.
    pub fn truncated(&mut self, index: Index) {
        self.unissued_from = self.unissued_from.min(index);
        self.durable_index = self.durable_index.min(index - 1);
    }

    /// Whether a write must be issued for the current log and hard state. A commit-only change
    /// counts only when `include_commit` (the node batches those until a heartbeat tick).
    pub fn is_dirty(&self, last_index: Index, hard_state: HardState, include_commit: bool) -> bool {
        self.unissued_from <= last_index
            || self.pending_install.is_some()
            || self.pending_purge_to.is_some()
            || self.pending_release
            || self.pending_lower.is_some()
            || hard_state.term != self.issued_hard_state.term
            || hard_state.vote != self.issued_hard_state.vote
            || (include_commit && hard_state.commit != self.issued_hard_state.commit)
    }

    /// The write id whose completion makes the present state durable: the one about to be issued
    /// if anything is dirty, else the last one issued.
    pub fn barrier(&self, dirty: bool) -> u64 {
        if dirty {
            self.next_write_id
        } else {
            self.next_write_id - 1
        }
    }

    /// Builds the next write, handing storage the log up to `limit` (a leader may hold entries
    /// back: `RaftNode::write_limit`). `entries(lo, hi)` returns the in-memory log from `lo` to
    /// `hi`.
    ///
    /// Entries already handed to storage stay handed when `limit` is below them (a leader's
    /// follower that replicates again from a lower index lowers it): the limit holds back only
    /// entries not yet issued. Taking issued ones back would make the next write rewrite them
    /// while they count as durable, and a crash during that write would lose entries a quorum
    /// had committed (simulator seed 631361).
    pub fn issue(
        &mut self,
        limit: Index,
        hard_state: HardState,
        entries: impl FnOnce(Index, Index) -> Vec<Entry>,
    ) -> Write {
        let last_index = limit.max(self.unissued_from - 1);
        let term_or_vote_changed = hard_state.term != self.issued_hard_state.term
            || hard_state.vote != self.issued_hard_state.vote;
        let entries = if self.unissued_from <= last_index {
            entries(self.unissued_from, last_index)
        } else {
            Vec::new()
        };
        debug_assert!(entries
            .first()
            .is_none_or(|e| e.index == self.unissued_from));
        // Always checked: a write that rewrote durable entries would lose them in a crash during
        // it, and only a truncation (which lowers the durable index) may rewrite the log.
        assert!(
            entries.first().is_none_or(|e| e.index > self.durable_index),
            "a write rewrites durable entries from {}",
            self.unissued_from
        );
        let install = self.pending_install.take();
        let first_index = match &install {
            Some(meta) => Some(meta.last.index + 1),
            None => entries.first().map(|e| e.index),
        };
        let hard_state_changed = hard_state != self.issued_hard_state;
        assert!(
            hard_state.commit <= last_index,
            "commit index persisted beyond the log"
        );
        let id = self.next_write_id;
        self.next_write_id += 1;
        self.issued.push_back(IssuedWrite {
            id,
            first_index,
            last_index,
            hard_state,
        });
        self.unissued_from = last_index + 1;
        self.issued_last_index = last_index;
        self.issued_hard_state = hard_state;
        let release_promise = std::mem::take(&mut self.pending_release);
        if release_promise {
            self.release_write_id = Some(id);
        }
        let lower_promise_to = self.pending_lower.take();
        Write {
            id,
            sync: !entries.is_empty()
                || term_or_vote_changed
                || install.is_some()
                || release_promise
                || lower_promise_to.is_some(),
            release_promise,
            lower_promise_to,
            install,
            entries,
            hard_state: hard_state_changed.then_some(hard_state),
            purge_to: self.pending_purge_to.take(),
        }
    }

    /// Storage completed every write up to `id`. Returns whether the durable index moved.
    pub fn completed(&mut self, id: u64) -> bool {
        assert!(
            id < self.next_write_id,
            "completion for a write never issued"
        );
        if id <= self.completed_write_id {
            return false;
        }
        let mut last = None;
        while self.issued.front().is_some_and(|w| w.id <= id) {
            let w = self.issued.pop_front().expect("checked non-empty");
            self.durable_hard_state = w.hard_state;
            last = Some(w);
        }
        self.completed_write_id = id;
        let Some(w) = last else { return false };
        // Later writes (issued or not) that rewrite part of the log make that part not durable in
        // its present form until they complete.
        let mut durable = w.last_index;
        for later in &self.issued {
            if let Some(first) = later.first_index {
                durable = durable.min(first - 1);
            }
        }
        if self.unissued_from <= self.issued_last_index {
            durable = durable.min(self.unissued_from - 1);
        }
        let moved = durable != self.durable_index;
        self.durable_index = durable;
        moved
    }
}
