//! The vocabulary every other module speaks: identifiers, log positions, entries, hard state.
//!
//! [`LogId`] is a log position (term, index); [`Entry`] an entry at one, carrying an
//! [`EntryPayload`] (`Noop`, `Normal` application data, or a `Membership` configuration);
//! [`HardState`] the term, vote and commit index a node persists; [`SnapshotMeta`] what a
//! snapshot records beside its data.

use std::sync::Arc;

use bytes::Bytes;

use crate::membership::Membership;

/// A node's identity. Zero is reserved for "nobody" on the wire and in hard state.
pub type NodeId = u64;
/// A Raft group: one replicated log and its members. A process may host nodes of many groups
/// sharing connections (and, later, storage); every peer message and snapshot offer carries
/// its group, and a node drops what is addressed to another. Group 0 is the default of a
/// process that runs one group.
pub type GroupId = u64;
/// A Raft term. Terms start at 1; term 0 belongs only to the empty log's sentinel position.
pub type Term = u64;
/// A log index. Index 0 is the sentinel before the first entry.
pub type Index = u64;

/// Terms at or above this are refused in every message. An honest cluster would need 2^62
/// elections to reach one; refusing them keeps 2^62 terms above anything a peer made this node
/// adopt, so it can always campaign again (with `u64::MAX` adopted it never could).
pub const TERM_LIMIT: Term = 1 << 62;
/// Indexes (commit indexes included) at or above this are refused in every message, for the
/// same reason: a log that could never grow by another entry.
pub const INDEX_LIMIT: Index = 1 << 62;

/// The position of one entry: its term and its index. Ordered by term first, then index, which is
/// the "at least as up to date" order of the Raft paper (section 5.4.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogId {
    /// The term of the leader that appended the entry. Term 0 goes only with index 0: the
    /// sentinel [`LogId::ZERO`].
    pub term: Term,
    /// The entry's index, from 1; 0 only in the sentinel.
    pub index: Index,
}

impl LogId {
    /// The sentinel before the first entry (written `0/0`): the last position of an empty log
    /// that starts at index 1, and below every real position.
    pub const ZERO: LogId = LogId { term: 0, index: 0 };

    /// The position `term/index`. Takes the term first, like the order and `Display`.
    pub const fn new(term: Term, index: Index) -> Self {
        LogId { term, index }
    }
}

impl std::fmt::Display for LogId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.term, self.index)
    }
}

/// What an entry carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryPayload {
    /// Appended by every new leader so it can commit entries of its term (Raft paper section 8).
    Noop,
    /// Application data, opaque to the core.
    Normal(Bytes),
    /// A configuration. It takes effect as soon as it is appended, not when it commits
    /// (Raft thesis section 4.1). Shared: entries are cloned into every message and write, and
    /// keeping the rare large variant behind a pointer keeps every entry small.
    Membership(Arc<Membership>),
}

/// One log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The term of the leader that appended it (at least 1).
    pub term: Term,
    /// Its position in the log (at least 1).
    pub index: Index,
    /// What it carries.
    pub payload: EntryPayload,
}

impl Entry {
    /// Its position, `term/index`.
    pub fn log_id(&self) -> LogId {
        LogId::new(self.term, self.index)
    }

    /// Bytes this entry counts for in flow control: the payload plus a fixed header estimate.
    pub fn size_bytes(&self) -> usize {
        const HEADER_SIZE_BYTES: usize = 24;
        HEADER_SIZE_BYTES
            + match &self.payload {
                EntryPayload::Noop => 0,
                EntryPayload::Normal(data) => data.len(),
                EntryPayload::Membership(m) => m.size_bytes(),
            }
    }
}

/// The state that must survive a crash besides the log: the current term, the vote cast in it and
/// the commit index (docs/DESIGN.md section 3: the commit index is persisted with the log so a restarted
/// node can replay what it had committed without waiting for a leader).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    /// The latest term this node has seen (0 before it has seen any).
    pub term: Term,
    /// The candidate this node voted for in `term`, `None` if it has not voted in it. A leader
    /// has voted for itself.
    pub vote: Option<NodeId>,
    /// The highest index this node knows committed. Never stored above the last index of the
    /// log as written with it; clamped into the log on recovery.
    pub commit: Index,
}

/// What a snapshot covers: its last entry, the configuration at that entry and the term history up
/// to it (so the term of every covered index stays known: exact commit status after compaction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// The last entry the snapshot covers ([`LogId::ZERO`] for the bootstrap snapshot, which
    /// covers nothing).
    pub last: LogId,
    /// The configuration in effect at `last`: the latest configuration entry at or below it,
    /// joint or not.
    pub membership: Arc<Membership>,
    /// `(term, first index of that term)` for every term of the log through `last`, rising in
    /// both fields.
    pub term_history: Vec<LogId>,
}

impl SnapshotMeta {
    /// The empty snapshot of a log that starts at index 1 with configuration `membership`.
    pub fn initial(membership: Arc<Membership>) -> Self {
        SnapshotMeta {
            last: LogId::ZERO,
            membership,
            term_history: Vec::new(),
        }
    }
}
