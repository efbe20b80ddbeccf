//! The apply pipeline: the one ordered pipeline that feeds the state machine (docs/DESIGN.md section 4).
//!
//! Items arrive in log order: committed entries, snapshot restores, linearizable reads (queued
//! by the node only once every entry up to the read index was queued before them) and
//! snapshot requests. They run on the apply thread, so a slow state machine does not delay ticks
//! and heartbeats on the node task, except small batches of entries and reads that find the
//! thread idle: the node task applies those itself, within a time budget predicted from their
//! recent cost ([`ApplyQueue`]). Either way one lock and one order: the state machine never sees
//! two callers at once, nor an item before the ones queued ahead of it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, Index, SnapshotMeta};
use keel_wal::{Fs, StdFs};
use tokio::sync::{mpsc, oneshot};

use crate::handle::ClientError;
use crate::node::Event;

/// The application's replicated state machine. Implementations must be deterministic: every
/// replica applies the same entries in the same order and must reach the same state.
///
/// Calls come from the apply thread, or from the node task for small batches while that thread is
/// idle (`NodeConfig::apply_inline_budget_us`), never two at once.
pub trait StateMachine: Send + 'static {
    /// Applies the entry at `index` and returns the result for the client that proposed it.
    fn apply(&mut self, index: Index, data: &Bytes) -> Bytes;
    /// A view of the state at the applied index, to be serialized on another thread while this
    /// one goes on applying (docs/DESIGN.md section 4). The apply thread waits for this call only:
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

/// The state machine with its position in the log: what applies an item, on the apply thread or
/// inline on the node task (see [`ApplyQueue`]).
struct Applier<S> {
    sm: S,
    applied: Index,
    snapshot_index: Index,
    bytes_since_snapshot: u64,
    policy: SnapshotPolicy,
    last_snapshot_bytes: Arc<AtomicU64>,
    events: mpsc::UnboundedSender<Event>,
    /// Recent cost of one entry or one read, in nanoseconds (a moving average over batches),
    /// from which the node task predicts whether an item fits its budget.
    entry_cost_ns: u64,
    read_cost_ns: u64,
}

/// What an entry or a read is assumed to cost before any was measured: high enough that only
/// small batches run inline until the state machine has shown its speed.
const COST_BEFORE_MEASURED_NS: u64 = 10_000;

/// Most entry data an inline batch may carry: the cost per entry is an average, and one large
/// value (a copy of megabytes) must not run on the node task on the strength of small ones.
const INLINE_BATCH_BYTES_MAX: u64 = 64 * 1024;

fn data_bytes(batch: &[(Entry, Option<ProposalReply>)]) -> u64 {
    batch
        .iter()
        .map(|(entry, _)| match &entry.payload {
            EntryPayload::Normal(data) => data.len() as u64,
            EntryPayload::Noop | EntryPayload::Membership(_) => 0,
        })
        .sum()
}

/// Folds a new measurement into a moving average (weight 1/8): one slow batch (a page fault, a
/// preemption) moves the estimate, a lasting change takes it over.
fn moving_average(old_ns: u64, new_ns: u64) -> u64 {
    (old_ns.saturating_mul(7).saturating_add(new_ns)) / 8
}

impl<S: StateMachine> Applier<S> {
    /// Applies a batch of entries in order and reports the new applied index. Returns whether a
    /// snapshot is due.
    fn apply_entries(&mut self, batch: Vec<(Entry, Option<ProposalReply>)>) -> bool {
        let started = Instant::now();
        let count = batch.len() as u64;
        for (entry, reply) in batch {
            assert_eq!(entry.index, self.applied + 1, "entries apply in order");
            let result = match &entry.payload {
                EntryPayload::Normal(data) => {
                    self.bytes_since_snapshot += data.len() as u64;
                    self.sm.apply(entry.index, data)
                }
                EntryPayload::Noop | EntryPayload::Membership(_) => Bytes::new(),
            };
            self.applied = entry.index;
            if let Some(reply) = reply {
                let _ = reply.send(Ok(result));
            }
        }
        if let Some(per_entry_ns) = (started.elapsed().as_nanos() as u64).checked_div(count) {
            self.entry_cost_ns = moving_average(self.entry_cost_ns, per_entry_ns);
        }
        let _ = self.events.send(Event::Applied(self.applied));
        self.policy.due(
            self.applied - self.snapshot_index,
            self.bytes_since_snapshot,
            self.last_snapshot_bytes.load(Ordering::Relaxed),
        )
    }

    fn read(&mut self, read: ReadFn<S>) {
        let started = Instant::now();
        read(Ok(&self.sm));
        let read_ns = started.elapsed().as_nanos() as u64;
        self.read_cost_ns = moving_average(self.read_cost_ns, read_ns);
    }

    /// Captures a view of the state at the applied index; the node serializes it on another
    /// thread.
    fn take_snapshot(&mut self) {
        self.snapshot_index = self.applied;
        self.bytes_since_snapshot = 0;
        let view = self.sm.snapshot_view();
        let _ = self.events.send(Event::SnapshotTaken {
            index: self.applied,
            view,
        });
    }

    fn restore(&mut self, meta: SnapshotMeta, path: PathBuf, file: <StdFs as Fs>::File) {
        // Entries at or below the snapshot never come after it (the core drops them); the state
        // is replaced wholesale.
        assert!(meta.last.index > self.applied, "restore moves forward");
        let data = match keel_wal::snapshot::read_snapshot_handle(&file, &path, u64::MAX) {
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
        self.sm.restore(&data);
        self.applied = meta.last.index;
        self.snapshot_index = self.applied;
        self.bytes_since_snapshot = 0;
        let _ = self.events.send(Event::Applied(self.applied));
    }

    fn process(&mut self, item: ApplyItem<S>) {
        match item {
            ApplyItem::Entries(batch) => {
                if self.apply_entries(batch) {
                    self.take_snapshot();
                }
            }
            ApplyItem::Restore { meta, path, file } => self.restore(meta, path, file),
            ApplyItem::Read(read) => self.read(read),
            ApplyItem::Snapshot => self.take_snapshot(),
        }
    }
}

struct Shared<S> {
    applier: Mutex<Applier<S>>,
    /// Items sent to the apply thread and not yet processed by it.
    queued: AtomicUsize,
}

/// The node task's end of the apply pipeline.
///
/// Items go to the apply thread in order. But when the thread has nothing queued and is not
/// busy, and an item of entries (of at most [`INLINE_BATCH_BYTES_MAX`] of data) or a read is
/// predicted to take at most `inline_budget_ns` (from the recent cost per entry or per read), the
/// node task applies it itself: the proposer's reply then leaves from the node task's worker, and
/// the apply thread is neither woken nor has to report back, which saves two thread wake-ups per
/// batch. Order is kept: inline only when every
/// item sent before has been processed (`queued` is zero) and with the state machine's lock held.
/// A snapshot view is never captured inline (it copies the state's map): when one is due, it is
/// queued to the thread.
pub(crate) struct ApplyQueue<S> {
    shared: Arc<Shared<S>>,
    items: mpsc::UnboundedSender<ApplyItem<S>>,
    inline_budget_ns: u64,
}

impl<S: StateMachine> ApplyQueue<S> {
    /// Hands `item` to the pipeline: applied inline now if it qualifies, else queued.
    pub fn submit(&self, item: ApplyItem<S>) {
        if let Some(item) = self.try_inline(item) {
            self.enqueue(item);
        }
    }

    fn enqueue(&self, item: ApplyItem<S>) {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        if self.items.send(item).is_err() {
            // The apply thread is gone (a panic in the state machine): nothing will apply.
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Applies `item` inline if it qualifies; gives it back otherwise.
    fn try_inline(&self, item: ApplyItem<S>) -> Option<ApplyItem<S>> {
        if self.inline_budget_ns == 0 || self.shared.queued.load(Ordering::Acquire) != 0 {
            return Some(item);
        }
        let Ok(mut applier) = self.shared.applier.try_lock() else {
            return Some(item);
        };
        let predicted_ns = match &item {
            ApplyItem::Entries(batch) if data_bytes(batch) > INLINE_BATCH_BYTES_MAX => {
                return Some(item)
            }
            ApplyItem::Entries(batch) => (batch.len() as u64).saturating_mul(applier.entry_cost_ns),
            ApplyItem::Read(_) => applier.read_cost_ns,
            ApplyItem::Restore { .. } | ApplyItem::Snapshot => return Some(item),
        };
        if predicted_ns > self.inline_budget_ns {
            return Some(item);
        }
        // As `Applier::process`, except that a due snapshot is left to the thread.
        let snapshot_due = match item {
            ApplyItem::Entries(batch) => applier.apply_entries(batch),
            read => {
                applier.process(read);
                false
            }
        };
        drop(applier);
        if snapshot_due {
            self.enqueue(ApplyItem::Snapshot);
        }
        None
    }
}

/// Starts the apply thread and returns the pipeline's sending end.
pub(crate) fn spawn<S: StateMachine>(
    sm: S,
    applied: Index,
    policy: SnapshotPolicy,
    last_snapshot_bytes: Arc<AtomicU64>,
    inline_budget_ns: u64,
    events: mpsc::UnboundedSender<Event>,
) -> std::io::Result<(ApplyQueue<S>, std::thread::JoinHandle<()>)> {
    let shared = Arc::new(Shared {
        applier: Mutex::new(Applier {
            sm,
            applied,
            snapshot_index: applied,
            bytes_since_snapshot: 0,
            policy,
            last_snapshot_bytes,
            events,
            entry_cost_ns: COST_BEFORE_MEASURED_NS,
            read_cost_ns: COST_BEFORE_MEASURED_NS,
        }),
        queued: AtomicUsize::new(0),
    });
    let (items_tx, mut items) = mpsc::unbounded_channel();
    let thread_shared = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("keel-apply".into())
        .spawn(move || {
            // Ends when the node task drops its queue.
            while let Some(item) = items.blocking_recv() {
                let mut applier = thread_shared
                    .applier
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                applier.process(item);
                // Still holding the lock: the node task sees zero only once this item is done.
                thread_shared.queued.fetch_sub(1, Ordering::AcqRel);
            }
        })?;
    Ok((
        ApplyQueue {
            shared,
            items: items_tx,
            inline_budget_ns,
        },
        thread,
    ))
}

#[cfg(test)]
mod queue_tests;

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
