//! The storage contract between a node and its durable state ([`Storage`]), and an in-memory
//! implementation ([`MemStorage`]). keel-wal's WAL implements the same trait, and its
//! conformance suite checks both.
//!
//! Contract (docs/DESIGN.md section 3): writes are applied in the order they are issued; a write first
//! drops every entry at or after its first entry's index, then appends its entries, then stores its
//! hard state; completion of a write means it and every earlier write survive a crash. A write
//! marked `sync: false` carries only a moved commit index and may be lost in a crash, never
//! reordered before an earlier write.

use crate::durability::Write;
use crate::membership::Membership;
use crate::node::RecoveredState;
use crate::types::{Entry, HardState, Index, LogId, SnapshotMeta};

/// Durable storage for one node's log: its entries, its hard state (term, vote and commit index)
/// and the position, configuration and term history of its newest snapshot. The snapshot's
/// *data* is not the log storage's: keel keeps it in snapshot files of its own (keel-wal's
/// snapshot format) and records here that a durable snapshot covers a position
/// ([`Storage::record_snapshot`]) before any write refers to it.
///
/// The built-in write-ahead log (keel-wal) implements it; [`MemStorage`] keeps everything in
/// memory. keel-wal's conformance suite checks an implementation against this contract in one
/// call (`keel_wal::conformance::run_all`).
pub trait Storage {
    /// Why a recovery or a write failed. A failed write is fatal for the node: it is never
    /// retried, and nothing is written after it (docs/DESIGN.md section 3).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Everything that survived, in the form the node starts from. Storage that was never
    /// written to recovers the empty state (`RecoveredState::default()`).
    fn recover(&self) -> Result<RecoveredState, Self::Error>;

    /// Makes `write` durable (a synchronous implementation returns once it is).
    fn write(&mut self, write: &Write) -> Result<(), Self::Error>;

    /// Makes `writes` durable together, in order: what a group commit hands over. An
    /// implementation that can sync once for many writes overrides it; the default writes them
    /// one by one.
    fn write_batch(&mut self, writes: &[Write]) -> Result<(), Self::Error> {
        writes.iter().try_for_each(|w| self.write(w))
    }

    /// Records durably that a snapshot covering `meta.last` exists (its data is already durable
    /// elsewhere): from now on a write may install it (`Write::install`) or purge the entries
    /// it covers (`Write::purge_to`), and [`Storage::recover`] reports it (position,
    /// configuration, term history) unless a newer one was recorded. A snapshot older than the
    /// one recorded changes nothing. Entries after `meta.last` are kept: only a later write
    /// changes the log.
    fn record_snapshot(&mut self, meta: &SnapshotMeta) -> Result<(), Self::Error>;
}

/// Keeps the "durable" state in memory. Used by tests, the simulator (which decides when writes
/// reach it) and embedders that want a volatile log. Snapshot *data* is the application's; this
/// keeps the snapshot's metadata.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    hard_state: HardState,
    snapshot: LogId,
    snapshot_membership: Membership,
    snapshot_term_history: Vec<LogId>,
    /// Entries after `log_start` (which may be below the snapshot: trailing entries).
    log_start: Index,
    entries: Vec<Entry>,
}

/// `MemStorage` cannot fail; this error type is never constructed.
#[derive(Debug, thiserror::Error)]
#[error("in-memory storage does not fail")]
pub enum Never {}

impl MemStorage {
    /// Storage of a node in a brand-new cluster whose initial voters are `voters`.
    pub fn new_cluster(voters: impl IntoIterator<Item = crate::NodeId>) -> Self {
        MemStorage {
            snapshot_membership: Membership::new_voters(voters),
            ..Default::default()
        }
    }

    /// Storage of a member of a cluster of `voters` that already holds `entries` (from index 1)
    /// and `hard_state`: how tests and tools construct a precise history.
    pub fn with_log(
        voters: impl IntoIterator<Item = crate::NodeId>,
        entries: Vec<Entry>,
        hard_state: HardState,
    ) -> Self {
        let mut storage = MemStorage::new_cluster(voters);
        storage.write_torn(
            &Write {
                id: 0,
                install: None,
                entries,
                hard_state: Some(hard_state),
                purge_to: None,
                sync: true,
                release_promise: false,
                lower_promise_to: None,
            },
            usize::MAX,
            true,
        );
        storage
    }

    /// Storage of a node joining an existing cluster: it learns the configuration from the leader.
    pub fn new_joining() -> Self {
        MemStorage::default()
    }

    /// The stored hard state (all zero until a write carries one).
    pub fn hard_state(&self) -> HardState {
        self.hard_state
    }

    /// The stored entries, contiguous from the log start: they may begin below the snapshot's
    /// index (trailing entries kept for slow followers).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The last entry of the saved snapshot (0/0 for none).
    pub fn snapshot(&self) -> LogId {
        self.snapshot
    }

    /// The saved snapshot's position, configuration and term history.
    pub fn snapshot_meta(&self) -> SnapshotMeta {
        SnapshotMeta {
            last: self.snapshot,
            membership: std::sync::Arc::new(self.snapshot_membership.clone()),
            term_history: self.snapshot_term_history.clone(),
        }
    }

    /// The index of the last stored entry, or the snapshot's index if that is higher.
    pub fn last_index(&self) -> Index {
        (self.log_start + self.entries.len() as Index).max(self.snapshot.index)
    }

    /// Records that the application saved a snapshot (its data is the application's). One at
    /// the position already recorded replaces it (the bootstrap snapshot of a new cluster sits
    /// at 0/0, where an empty storage starts).
    pub fn save_snapshot(&mut self, meta: &SnapshotMeta) {
        if meta.last.index >= self.snapshot.index {
            self.snapshot = meta.last;
            self.snapshot_membership = (*meta.membership).clone();
            self.snapshot_term_history = meta.term_history.clone();
        }
    }

    /// Applies `write` only partly, as a crash in its middle leaves it (a torn write): the
    /// install (which comes first) always, then the first `keep_entries` entries and, if
    /// `keep_hard_state` and every entry was kept, the hard state and the purge.
    pub fn write_torn(&mut self, write: &Write, keep_entries: usize, keep_hard_state: bool) {
        if let Some(meta) = &write.install {
            self.save_snapshot(meta);
            self.entries.clear();
            self.log_start = meta.last.index;
        }
        if let Some(first) = write.entries.first() {
            assert!(first.index > self.log_start, "write below the log start");
            let keep = (first.index - self.log_start - 1) as usize;
            assert!(keep <= self.entries.len(), "write leaves a gap");
            self.entries.truncate(keep);
        }
        for e in write.entries.iter().take(keep_entries) {
            self.entries.push(e.clone());
        }
        if keep_hard_state && keep_entries >= write.entries.len() {
            if let Some(hs) = write.hard_state {
                self.hard_state = hs;
            }
            if let Some(p) = write.purge_to {
                assert!(p <= self.snapshot.index, "purge beyond the snapshot");
                let drop = (p.saturating_sub(self.log_start) as usize).min(self.entries.len());
                self.entries.drain(..drop);
                self.log_start = self.log_start.max(p);
            }
        }
    }
}

impl Storage for MemStorage {
    type Error = Never;

    fn record_snapshot(&mut self, meta: &SnapshotMeta) -> Result<(), Never> {
        self.save_snapshot(meta);
        Ok(())
    }

    fn recover(&self) -> Result<RecoveredState, Never> {
        Ok(RecoveredState {
            hard_state: self.hard_state,
            snapshot: self.snapshot,
            snapshot_membership: self.snapshot_membership.clone(),
            snapshot_term_history: self.snapshot_term_history.clone(),
            entries: self.entries.clone(),
            applied: self.snapshot.index,
        })
    }

    fn write(&mut self, write: &Write) -> Result<(), Never> {
        self.write_torn(write, write.entries.len(), true);
        Ok(())
    }
}
