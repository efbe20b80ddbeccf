//! The apply pipeline's tokio-side shell: the engine's ordered pipeline (`keel_engine::ApplyQueue`
//! and `Applier`, which check the order) run by the apply thread, except small batches of entries
//! and reads that find the thread idle: the node task applies those itself, within a time budget
//! predicted from their recent cost ([`ApplyWorker`]). Either way one lock and one order: the state
//! machine never sees two callers at once, nor an item before the ones queued ahead of it.
//!
//! The queue sits behind a mutex and a condition variable; snapshot views are always captured
//! on the apply thread, never inline. A restore reads the snapshot file the node opened when it
//! queued it (in order with the adoption, so nothing prunes it first), verified, then streamed
//! into `StateMachine::restore` (bounded memory). An order the applier refuses stops the node (`failure.rs`). The queue is bounded by
//! the core's `unapplied_entries_max` (16,384 by default).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use keel_core::{Entry, EntryPayload, Index, SnapshotMeta};
use keel_engine::{Applier, SnapshotPolicy};
use keel_wal::{Fs, StdFs};
use tokio::sync::mpsc;

pub use keel_engine::{SnapshotWriter, StateMachine};

use crate::event::Event;
use crate::failure::{guarded, FailureCell, NodeFailure};
use crate::handle::{ClientError, ProposalReply, ReadFn};
use crate::storage::storage_failure;

/// The snapshot file a restore reads, opened by the node when it queued the restore (so a newer
/// snapshot pruning it meanwhile cannot take it away).
pub(crate) type SnapshotFile = (PathBuf, <StdFs as Fs>::File);
pub(crate) type ApplyItem<S> = keel_engine::ApplyItem<ProposalReply, ReadFn<S>, SnapshotFile>;
type EngineQueue<S> = keel_engine::ApplyQueue<ProposalReply, ReadFn<S>, SnapshotFile>;

/// The engine's applier with what the runtime adds: reporting to the node task, and the recent
/// cost of an entry and of a read, from which the node task predicts whether an item fits its
/// inline budget.
struct RuntimeApplier<S> {
    applier: Applier<S>,
    last_snapshot_bytes: Arc<AtomicU64>,
    events: mpsc::UnboundedSender<Event>,
    failure: Arc<FailureCell>,
    /// Moving averages over batches, in nanoseconds.
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

impl<S: StateMachine> RuntimeApplier<S> {
    /// The pipeline stopped: an item out of order (which would make this replica diverge
    /// silently) or a state machine that cannot go on. Either way the node stops.
    fn stopped(&self, e: keel_engine::PipelineError) -> ! {
        self.failure.halt(match e {
            keel_engine::PipelineError::StateMachine { index, message } => {
                NodeFailure::StateMachine { index, message }
            }
            other => NodeFailure::Pipeline(other.to_string()),
        })
    }

    /// Applies a batch of entries in order and reports the new applied index. Returns whether a
    /// snapshot is due.
    fn apply_entries(&mut self, batch: Vec<(Entry, Option<ProposalReply>)>) -> bool {
        let started = Instant::now();
        let count = batch.len() as u64;
        let answered = self.applier.apply_entries(batch, |_, reply, result, _| {
            if let Some(reply) = reply {
                let _ = reply.send(result.map_err(ClientError::Refused));
            }
        });
        if let Err(e) = answered {
            self.stopped(e);
        }
        if let Some(per_entry_ns) = (started.elapsed().as_nanos() as u64).checked_div(count) {
            self.entry_cost_ns = moving_average(self.entry_cost_ns, per_entry_ns);
        }
        self.report_applied();
        self.applier
            .snapshot_due(self.last_snapshot_bytes.load(Ordering::Relaxed))
    }

    /// Tells the node task what is applied now, and what of it the state machine holds
    /// durably by itself (`StateMachine::durable`: the log is kept after it).
    fn report_applied(&self) {
        let _ = self.events.send(Event::Applied {
            index: self.applier.applied(),
            durable: self.applier.state().durable().map(|id| id.index),
        });
    }

    fn read(&mut self, read: ReadFn<S>) {
        let started = Instant::now();
        read(Ok(self.applier.state()));
        let read_ns = started.elapsed().as_nanos() as u64;
        self.read_cost_ns = moving_average(self.read_cost_ns, read_ns);
    }

    /// Captures a view of the state at the applied index; the node serializes it on another
    /// thread.
    fn take_snapshot(&mut self) {
        let (index, view) = self.applier.take_snapshot();
        let _ = self.events.send(Event::SnapshotTaken { index, view });
    }

    /// Restores the snapshot file the node opened, streamed into the state machine: its header
    /// and its whole data are verified first (in bounded memory), so the state machine only
    /// ever reads a snapshot that checks out.
    fn restore(&mut self, meta: SnapshotMeta, (path, file): SnapshotFile) {
        let verified = keel_wal::snapshot::verify_snapshot_header(&file, &path)
            .and_then(|read| keel_wal::snapshot::verify_snapshot_data(&file, &read).map(|()| read));
        let read = match verified {
            Ok(read) if read.meta.last == meta.last => read,
            Ok(read) => self.failure.halt(storage_failure(
                "restore",
                &format!(
                    "{} holds {}, not {}",
                    path.display(),
                    read.meta.last,
                    meta.last
                ),
            )),
            Err(e) => self.failure.halt(storage_failure(
                "restore",
                &format!("{}: {e}", path.display()),
            )),
        };
        let mut data = keel_wal::snapshot::data_reader(&file, &read);
        if let Err(e) = self.applier.restore(&meta, &mut data) {
            self.stopped(e);
        }
        drop(file);
        self.report_applied();
    }

    fn process(&mut self, item: ApplyItem<S>) {
        match item {
            ApplyItem::Entries(batch) => {
                if self.apply_entries(batch) {
                    self.take_snapshot();
                }
            }
            ApplyItem::Restore { meta, snapshot } => self.restore(meta, snapshot),
            ApplyItem::Read(read) => self.read(read),
            ApplyItem::Snapshot => self.take_snapshot(),
        }
    }
}

struct Shared<S> {
    applier: Mutex<RuntimeApplier<S>>,
    queue: Mutex<QueueState<S>>,
    /// Signalled when an item is queued while the thread waits (or the node task lets go).
    queue_filled: Condvar,
    /// Items handed to the apply thread and not yet processed by it.
    queued: AtomicUsize,
}

/// The engine's queue of items for the apply thread, and what the two sides know of each other.
struct QueueState<S> {
    items: EngineQueue<S>,
    /// The node task let go of the queue: the thread ends once it is empty.
    let_go: bool,
    /// The thread waits on `queue_filled`: only then is it signalled (a signal is a system call,
    /// and a busy thread finds the item when it looks next).
    waiting: bool,
}

/// The node task's end of the apply pipeline.
///
/// Items go to the apply thread in order. But when the thread has nothing queued and is not
/// busy, and an item of entries (of at most [`INLINE_BATCH_BYTES_MAX`] of data) or a read is
/// predicted to take at most `inline_budget_ns` (from the recent cost per entry or per read), the
/// node task applies it itself: the proposer's reply then leaves from the node task's worker, and
/// the apply thread is neither woken nor has to report back, which saves two thread wake-ups per
/// batch. Order is kept: inline only when every item sent before has been processed (`queued` is
/// zero) and with the state machine's lock held. A snapshot view is never captured inline (it
/// copies the state's map): when one is due, it is queued to the thread.
pub(crate) struct ApplyWorker<S> {
    shared: Arc<Shared<S>>,
    inline_budget_ns: u64,
}

impl<S> Drop for ApplyWorker<S> {
    fn drop(&mut self) {
        // The thread ends once it has processed what is queued.
        self.shared
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .let_go = true;
        self.shared.queue_filled.notify_one();
    }
}

impl<S: StateMachine> ApplyWorker<S> {
    /// Hands `item` to the pipeline: applied inline now if it qualifies, else queued.
    pub fn submit(&self, item: ApplyItem<S>) {
        if let Some(item) = self.try_inline(item) {
            self.enqueue(item);
        }
    }

    fn enqueue(&self, item: ApplyItem<S>) {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        let waiting = {
            let mut queue = self
                .shared
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            queue.items.push(item);
            queue.waiting
        };
        if waiting {
            self.shared.queue_filled.notify_one();
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
        // As `RuntimeApplier::process`, except that a due snapshot is left to the thread.
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

/// Starts the apply thread and returns the pipeline's sending end. With a `mutation`, the
/// engine's queue is the deliberately broken one (simulator builds only).
pub(crate) fn spawn<S: StateMachine>(
    sm: S,
    applied: Index,
    policy: SnapshotPolicy,
    last_snapshot_bytes: Arc<AtomicU64>,
    inline_budget_ns: u64,
    events: mpsc::UnboundedSender<Event>,
    failure: Arc<FailureCell>,
) -> std::io::Result<(ApplyWorker<S>, std::thread::JoinHandle<()>)> {
    let shared = Arc::new(Shared {
        applier: Mutex::new(RuntimeApplier {
            applier: Applier::new(sm, applied, policy),
            last_snapshot_bytes,
            events,
            failure: Arc::clone(&failure),
            entry_cost_ns: COST_BEFORE_MEASURED_NS,
            read_cost_ns: COST_BEFORE_MEASURED_NS,
        }),
        queue: Mutex::new(QueueState {
            items: EngineQueue::default(),
            let_go: false,
            waiting: false,
        }),
        queue_filled: Condvar::new(),
        queued: AtomicUsize::new(0),
    });
    let thread_shared = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("keel-apply".into())
        .spawn(move || {
            guarded(&failure, "the apply thread", || run(&thread_shared));
        })?;
    Ok((
        ApplyWorker {
            shared,
            inline_budget_ns,
        },
        thread,
    ))
}

/// The apply thread's loop: ends once the node task lets go and the queue is empty.
fn run<S: StateMachine>(shared: &Shared<S>) {
    loop {
        let item = {
            let mut queue = shared
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if let Some(item) = queue.items.pop() {
                    break item;
                }
                if queue.let_go {
                    return; // the node task let go and everything was processed
                }
                queue.waiting = true;
                queue = shared
                    .queue_filled
                    .wait(queue)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                queue.waiting = false;
            }
        };
        let mut applier = shared
            .applier
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        applier.process(item);
        // Still holding the lock: the node task sees zero only once this item is done.
        shared.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
