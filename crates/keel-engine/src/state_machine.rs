//! What the application supplies: its replicated state machine and the snapshots of it
//! ([`StateMachine`], [`SnapshotWriter`]; keel-runtime re-exports both). Why a request failed is
//! `ClientError` (`error.rs`).

use bytes::Bytes;
use keel_core::LogId;

/// The application's replicated state machine. Implementations must be deterministic: every
/// replica applies the same entries in the same order and must reach the same state.
///
/// Calls come from one caller at a time, in log order (the runtime's apply thread, or its node
/// task for small batches while that thread is idle; the simulator's event loop).
pub trait StateMachine: Send + 'static {
    /// Applies the entry at `at` (its index, and the term of the leader that appended it) and
    /// returns the result for the client that proposed it, or why not ([`ApplyError`]): a
    /// refusal (deterministic, the state unchanged, the entry counted as applied) or a fatal
    /// error (the node stops before counting the entry as applied).
    fn apply(&mut self, at: LogId, data: &Bytes) -> Result<Bytes, ApplyError>;
    /// A view of the state at the applied index, to be serialized elsewhere while applying goes
    /// on (docs/DESIGN.md section 4). The pipeline waits for this call only: keep it to a copy of
    /// the in-memory state or a copy-on-write view (cloning maps of reference-counted values is a
    /// copy of pointers, not of the data). A small state may simply return its serialized bytes
    /// (`Box::new(bytes_vec)`).
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter>;
    /// Replaces the whole state by the bytes a [`SnapshotWriter`] of this state machine wrote,
    /// read from `data` as a stream: memory stays bounded by what the state machine keeps,
    /// whatever the snapshot's size (the runtime reads the file as it is asked, and checks its
    /// checksum on the way: a read error, the last read included, means the bytes are not the
    /// snapshot's). An error stops the node with its applied index where it was and the snapshot
    /// kept, so a restart tries again; a half-restored state machine is never served. `last` is
    /// the last entry the snapshot covers: the state afterwards is as if `apply` had been given
    /// every entry through it (a state machine that reports [`durable`](Self::durable) records
    /// it with the restored state).
    fn restore(&mut self, last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError>;

    /// For a state machine that keeps its state durably itself (in a database file of its
    /// own): the last entry its durable state reflects, as `apply` was given it (after a
    /// `restore`, the restored snapshot's last entry once that state is durable). `None` (the
    /// default): the state lives in memory, and a node restores it from the newest snapshot and
    /// replays the log after it at every start.
    ///
    /// With `Some`, a node starts the state machine where its durable state is: it checks that
    /// entry against its log (the same index with the same term, else it refuses to start),
    /// replays only the committed entries after it, and restores the newest snapshot first only
    /// when the log no longer holds the entries after it. It never compacts its log past what
    /// this reports, so a crash that loses the state machine's unsynced writes loses nothing:
    /// what it lost is replayed. It must never go back, and must never run ahead of what
    /// survives a crash of the process.
    fn durable(&self) -> Option<LogId> {
        None
    }
}

/// Why [`StateMachine::apply`] produced no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The operation is refused, and the state is as it was before the entry: a decision every
    /// replica makes alike (it may depend on the state and the entry, nothing else). The entry
    /// counts as applied; its proposer receives `ClientError::Refused` with these bytes.
    #[error("refused: {}", String::from_utf8_lossy(.0))]
    Refused(Bytes),
    /// The state machine cannot apply the entry here and now (its own storage failed, an
    /// invariant broke): the node stops (`NodeFailure::StateMachine` in keel-runtime) without
    /// counting the entry as applied, so the next start applies it again.
    #[error("{0}")]
    Fatal(String),
}

/// Why [`StateMachine::restore`] could not restore a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RestoreError(pub String);

/// A failed read of the snapshot (the file's checksum did not match, the disk failed) fails the
/// restore: `?` on the stream's reads is enough.
impl From<std::io::Error> for RestoreError {
    fn from(error: std::io::Error) -> RestoreError {
        RestoreError(format!("reading the snapshot: {error}"))
    }
}

/// A state captured by [`StateMachine::snapshot_view`], serialized straight into the snapshot
/// file (buffered, checksummed, fsynced by the runtime).
pub trait SnapshotWriter: Send + 'static {
    /// Writes the captured state to `out`, consuming the view: the bytes
    /// [`StateMachine::restore`] is later given. An error counts as a storage failure (the
    /// runtime stops the node).
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()>;
}

impl SnapshotWriter for Vec<u8> {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&self)
    }
}

impl SnapshotWriter for Bytes {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&self)
    }
}

impl std::fmt::Debug for dyn SnapshotWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotWriter")
    }
}
