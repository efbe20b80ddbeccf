//! The apply thread: the one ordered pipeline that feeds the state machine (DESIGN.md section 4).
//!
//! Items arrive in log order: committed entries, snapshot restores, linearizable reads (queued
//! by the node only once every entry up to the read index was queued before them) and
//! snapshot requests. Applying on a thread of its own keeps a slow state machine from delaying
//! ticks and heartbeats on the node task.

use std::path::PathBuf;

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, Index, SnapshotMeta};
use keel_wal::{Fs, StdFs};
use tokio::sync::{mpsc, oneshot};

use crate::handle::ClientError;
use crate::node::Event;

/// The application's replicated state machine. Implementations must be deterministic: every
/// replica applies the same entries in the same order and must reach the same state.
pub trait StateMachine: Send + 'static {
    /// Applies the entry at `index` and returns the result for the client that proposed it.
    fn apply(&mut self, index: Index, data: &Bytes) -> Bytes;
    /// A view of the state at the applied index, to be serialized on another thread while this
    /// one goes on applying (DESIGN.md section 4). The apply thread waits for this call only:
    /// keep it to a copy of the in-memory state or a copy-on-write view (cloning maps of
    /// reference-counted values is a copy of pointers, not of the data). A small state may simply
    /// return its serialized bytes (`Box::new(bytes_vec)`).
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter>;
    /// Replaces the whole state by the bytes a [`SnapshotWriter`] of this state machine wrote.
    fn restore(&mut self, data: &[u8]);
}

/// A state captured by [`StateMachine::snapshot_view`], serialized on a snapshot thread straight
/// into the snapshot file (buffered, checksummed, fsynced by the runtime).
pub trait SnapshotWriter: Send + 'static {
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

pub(crate) type ProposalReply = oneshot::Sender<Result<Bytes, ClientError>>;
/// A read runs against the state, or is told why it cannot.
pub(crate) type ReadFn<S> = Box<dyn FnOnce(Result<&S, ClientError>) + Send>;

pub(crate) enum ApplyItem<S> {
    Entries(Vec<(Entry, Option<ProposalReply>)>),
    /// Restore from the snapshot file at `path`, opened by the node when it queued this (so a
    /// newer snapshot pruning it meanwhile cannot take it away).
    Restore {
        meta: SnapshotMeta,
        path: PathBuf,
        file: <StdFs as Fs>::File,
    },
    Read(ReadFn<S>),
    /// Take a snapshot now (at whatever is applied).
    Snapshot,
}

/// When the apply thread takes a snapshot: after this many entries, or this many bytes of entry
/// data, applied since the last one (whichever comes first).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SnapshotPolicy {
    pub entries: u64,
    pub bytes: u64,
}

pub(crate) fn spawn<S: StateMachine>(
    mut sm: S,
    applied: Index,
    policy: SnapshotPolicy,
    mut items: mpsc::UnboundedReceiver<ApplyItem<S>>,
    events: mpsc::UnboundedSender<Event>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("keel-apply".into())
        .spawn(move || {
            let mut applied = applied;
            let mut snapshot_index = applied;
            let mut bytes_since_snapshot: u64 = 0;
            let take = |sm: &S, applied: Index, snapshot_index: &mut Index, bytes: &mut u64| {
                *snapshot_index = applied;
                *bytes = 0;
                // Only a view here; the node serializes it on another thread.
                let view = sm.snapshot_view();
                let _ = events.send(Event::SnapshotTaken {
                    index: applied,
                    view,
                });
            };
            while let Some(item) = items.blocking_recv() {
                match item {
                    ApplyItem::Entries(batch) => {
                        for (entry, reply) in batch {
                            assert_eq!(entry.index, applied + 1, "entries apply in order");
                            let result = match &entry.payload {
                                EntryPayload::Normal(data) => {
                                    bytes_since_snapshot += data.len() as u64;
                                    sm.apply(entry.index, data)
                                }
                                EntryPayload::Noop | EntryPayload::Membership(_) => Bytes::new(),
                            };
                            applied = entry.index;
                            if let Some(reply) = reply {
                                let _ = reply.send(Ok(result));
                            }
                        }
                        let _ = events.send(Event::Applied(applied));
                        if applied - snapshot_index >= policy.entries
                            || bytes_since_snapshot >= policy.bytes
                        {
                            take(&sm, applied, &mut snapshot_index, &mut bytes_since_snapshot);
                        }
                    }
                    ApplyItem::Restore { meta, path, file } => {
                        // Entries at or below the snapshot never come after it (the core drops
                        // them); the state is replaced wholesale.
                        assert!(meta.last.index > applied, "restore moves forward");
                        let data = match keel_wal::snapshot::read_snapshot_handle(
                            &file,
                            &path,
                            u64::MAX,
                        ) {
                            Ok((read, data)) if read.meta.last == meta.last => data,
                            Ok((read, _)) => crate::storage::fatal(
                                "restore",
                                &format!(
                                    "{} holds {}, not {}",
                                    path.display(),
                                    read.meta.last,
                                    meta.last
                                ),
                            ),
                            Err(e) => crate::storage::fatal("restore", &e),
                        };
                        drop(file);
                        sm.restore(&data);
                        applied = meta.last.index;
                        snapshot_index = applied;
                        bytes_since_snapshot = 0;
                        let _ = events.send(Event::Applied(applied));
                    }
                    ApplyItem::Read(read) => read(Ok(&sm)),
                    ApplyItem::Snapshot => {
                        take(&sm, applied, &mut snapshot_index, &mut bytes_since_snapshot)
                    }
                }
            }
        })
}
