//! The apply thread: the one ordered pipeline that feeds the state machine (DESIGN.md section 4).
//!
//! Items arrive in log order: committed entries, snapshot restores, linearizable reads (queued
//! by the node only once every entry up to the read index was queued before them) and
//! snapshot requests. Applying on a thread of its own keeps a slow state machine from delaying
//! ticks and heartbeats on the node task.

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, Index, SnapshotMeta};
use tokio::sync::{mpsc, oneshot};

use crate::handle::ClientError;
use crate::node::Event;

/// The application's replicated state machine. Implementations must be deterministic: every
/// replica applies the same entries in the same order and must reach the same state.
pub trait StateMachine: Send + 'static {
    /// Applies the entry at `index` and returns the result for the client that proposed it.
    fn apply(&mut self, index: Index, data: &Bytes) -> Bytes;
    /// The whole state, serialized.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole state by a snapshot taken with [`StateMachine::snapshot`].
    fn restore(&mut self, data: &[u8]);
}

pub(crate) type ProposalReply = oneshot::Sender<Result<Bytes, ClientError>>;
/// A read runs against the state, or is told why it cannot.
pub(crate) type ReadFn<S> = Box<dyn FnOnce(Result<&S, ClientError>) + Send>;

pub(crate) enum ApplyItem<S> {
    Entries(Vec<(Entry, Option<ProposalReply>)>),
    Restore {
        meta: SnapshotMeta,
        data: Bytes,
    },
    Read(ReadFn<S>),
    /// Take a snapshot now (at whatever is applied).
    Snapshot,
}

pub(crate) fn spawn<S: StateMachine>(
    mut sm: S,
    applied: Index,
    snapshot_threshold_entries: u64,
    mut items: mpsc::UnboundedReceiver<ApplyItem<S>>,
    events: mpsc::UnboundedSender<Event>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("keel-apply".into())
        .spawn(move || {
            let mut applied = applied;
            let mut snapshot_index = applied;
            let take = |sm: &S, applied: Index, snapshot_index: &mut Index| {
                *snapshot_index = applied;
                let data = Bytes::from(sm.snapshot());
                let _ = events.send(Event::SnapshotTaken {
                    index: applied,
                    data,
                });
            };
            while let Some(item) = items.blocking_recv() {
                match item {
                    ApplyItem::Entries(batch) => {
                        for (entry, reply) in batch {
                            assert_eq!(entry.index, applied + 1, "entries apply in order");
                            let result = match &entry.payload {
                                EntryPayload::Normal(data) => sm.apply(entry.index, data),
                                EntryPayload::Noop | EntryPayload::Membership(_) => Bytes::new(),
                            };
                            applied = entry.index;
                            if let Some(reply) = reply {
                                let _ = reply.send(Ok(result));
                            }
                        }
                        let _ = events.send(Event::Applied(applied));
                        if applied - snapshot_index >= snapshot_threshold_entries {
                            take(&sm, applied, &mut snapshot_index);
                        }
                    }
                    ApplyItem::Restore { meta, data } => {
                        // Entries at or below the snapshot never come after it (the core drops
                        // them); the state is replaced wholesale.
                        assert!(meta.last.index > applied, "restore moves forward");
                        sm.restore(&data);
                        applied = meta.last.index;
                        snapshot_index = applied;
                        let _ = events.send(Event::Applied(applied));
                    }
                    ApplyItem::Read(read) => read(Ok(&sm)),
                    ApplyItem::Snapshot => take(&sm, applied, &mut snapshot_index),
                }
            }
        })
}
