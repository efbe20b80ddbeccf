//! The apply thread: the one ordered pipeline that feeds the state machine (DESIGN.md section 4).
//!
//! Items arrive in log order: committed entries, snapshot restores, linearizable reads (queued
//! by the node only once every entry up to the read index was queued before them) and
//! snapshot requests. Applying on a thread of its own keeps a slow state machine from delaying
//! ticks and heartbeats on the node task.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// When the apply thread takes a snapshot. A snapshot rewrites the whole state, so its cost grows
/// with the state, while the log it lets the node drop grows with the writes: taking one only once
/// the log since the last one is a multiple of that snapshot's size keeps the share of work spent
/// on snapshots bounded (about `1 / log_to_state_ratio` of the log's bytes) whatever the state's
/// size. The bounds on entries and bytes cap the log kept meanwhile (it is held in memory).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SnapshotPolicy {
    /// At most this many entries applied between snapshots.
    pub entries_max: u64,
    /// At most this many bytes of entry data applied between snapshots.
    pub bytes_max: u64,
    /// At least this many bytes between snapshots (unless `entries_max` comes first), so a small
    /// state is not snapshotted after every few writes.
    pub bytes_min: u64,
    /// Between the two byte bounds: wait for this multiple of the last snapshot's size.
    pub log_to_state_ratio: u64,
}

impl SnapshotPolicy {
    /// Whether a snapshot is due after `entries` entries holding `bytes` bytes of data were
    /// applied since the last one, whose file was `last_snapshot_bytes` long.
    pub fn due(&self, entries: u64, bytes: u64, last_snapshot_bytes: u64) -> bool {
        let proportional = self.log_to_state_ratio.saturating_mul(last_snapshot_bytes);
        let bytes_threshold = proportional.max(self.bytes_min).min(self.bytes_max);
        entries >= self.entries_max || bytes >= bytes_threshold
    }
}

pub(crate) fn spawn<S: StateMachine>(
    mut sm: S,
    applied: Index,
    policy: SnapshotPolicy,
    last_snapshot_bytes: Arc<AtomicU64>,
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
                        if policy.due(
                            applied - snapshot_index,
                            bytes_since_snapshot,
                            last_snapshot_bytes.load(Ordering::Relaxed),
                        ) {
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

#[cfg(test)]
mod tests {
    use super::SnapshotPolicy;

    const MIB: u64 = 1 << 20;

    fn policy() -> SnapshotPolicy {
        SnapshotPolicy {
            entries_max: 1_000_000,
            bytes_max: 256 * MIB,
            bytes_min: 16 * MIB,
            log_to_state_ratio: 4,
        }
    }

    #[test]
    fn a_small_state_waits_for_the_minimum() {
        let p = policy();
        assert!(!p.due(1000, 16 * MIB - 1, 1024));
        assert!(p.due(1000, 16 * MIB, 1024));
    }

    #[test]
    fn a_larger_state_waits_for_its_multiple() {
        let p = policy();
        assert!(!p.due(1000, 40 * MIB - 1, 10 * MIB));
        assert!(p.due(1000, 40 * MIB, 10 * MIB));
    }

    #[test]
    fn the_maximum_caps_a_huge_state_and_entries_cap_tiny_entries() {
        let p = policy();
        assert!(p.due(1000, 256 * MIB, 1 << 40));
        assert!(!p.due(1000, 256 * MIB - 1, 1 << 40));
        assert!(p.due(1_000_000, 0, 0));
        assert!(!p.due(999_999, 0, 0));
    }

    #[test]
    fn ratio_zero_leaves_the_minimum_and_no_overflow() {
        let p = SnapshotPolicy {
            log_to_state_ratio: 0,
            ..policy()
        };
        assert!(p.due(1, 16 * MIB, 1 << 40));
        let p = SnapshotPolicy {
            log_to_state_ratio: u64::MAX,
            ..policy()
        };
        assert!(p.due(1, 256 * MIB, u64::MAX));
    }
}
