//! The storage thread: owns the WAL and runs keel-engine's `StorageWorker` over it (the group
//! commit and ordering decisions, which the simulator runs too).
//!
//! Writes arrive in `ready()` order. While one `write_batch` (and its fdatasync) runs, the node
//! keeps queueing; the next batch takes everything queued, so one fsync covers many writes under
//! load and the leader's own write overlaps with replication (it sent its Appends before handing
//! the write here). Completion is reported as the last write id of the batch: `persisted(id)`
//! means "this and every earlier write".
//!
//! The WAL sits behind `WalStore`, which times each group commit. The commands taken at once
//! are then run unit by unit. The promise record is flushed once the log has been idle for
//! [`PROMISE_IDLE_FLUSH`] (10 ms), and when the thread stops.
//!
//! A snapshot adoption is ordered with the writes around it (a later write may purge up to it or
//! install it, which the WAL refuses unless it is already saved). The snapshot's bytes were
//! written and fsynced elsewhere (a snapshot thread, or the transport receiving one), so this
//! thread only verifies the header, renames and fsyncs the directory: a large snapshot never
//! holds up group commit.
//!
//! A fatal WAL error (failed fsync, I/O error) stops the node (`failure.rs`): never retry an
//! fsync, never write again after one failed.

use std::path::PathBuf;
use std::sync::Arc;

use keel_core::{NodeId, Term, Write};
use keel_engine::{Completion, LogStore, StorageWorker};
use keel_wal::{StdFs, Wal};
use tokio::sync::mpsc;

use crate::event::Event;
use crate::failure::{guarded, FailureCell, NodeFailure};

pub(crate) type StorageCommand = keel_engine::StorageCommand<SnapshotAdoption>;

/// A complete, fsynced snapshot file at `temp`, to become the newest snapshot. `from` names the
/// leader for a received one (`None`: taken locally).
pub(crate) struct SnapshotAdoption {
    pub temp: PathBuf,
    pub from: Option<(NodeId, Term)>,
}

/// The failure of a storage step: the only safe reaction to a failed fsync or write is to stop
/// (docs/DESIGN.md section 3).
pub(crate) fn storage_failure(what: &'static str, error: &dyn std::fmt::Display) -> NodeFailure {
    NodeFailure::Storage {
        what,
        error: error.to_string(),
    }
}

/// The WAL as keel-engine's log store, timing each group commit.
struct WalStore {
    wal: Wal<StdFs>,
    metrics: crate::metrics::StorageMetrics,
}

impl LogStore for WalStore {
    type Error = (&'static str, keel_wal::WalError);
    type Adoption = SnapshotAdoption;
    type Adopted = Event;

    fn write_batch(&mut self, writes: &[Write]) -> Result<(), Self::Error> {
        let timer = self.metrics.group_commit(writes);
        // Even InvalidRequest means the core and the WAL disagree: continuing could lose data.
        self.wal
            .write_batch(writes)
            .map_err(|e| ("write_batch", e))?;
        timer.done();
        Ok(())
    }

    fn adopt(&mut self, adoption: SnapshotAdoption) -> Result<Option<Event>, Self::Error> {
        let SnapshotAdoption { temp, from } = adoption;
        match self.wal.adopt_snapshot(&temp) {
            Ok(meta) => {
                let path = self.wal.dir().join(keel_wal::snapshot_file_name(meta.last));
                Ok(Some(Event::SnapshotSaved { meta, path, from }))
            }
            Err(e) if e.is_fatal() => Err(("adopt_snapshot", e)),
            // An older snapshot than one already saved (a received one overtook a local one, or
            // the reverse), or a file that does not verify: nothing to do but drop it.
            Err(e) => {
                tracing::info!("snapshot {} not adopted: {e}", temp.display());
                let _ = std::fs::remove_file(&temp);
                Ok(None)
            }
        }
    }
}

pub(crate) fn spawn(
    wal: Wal<StdFs>,
    mut commands: mpsc::Receiver<StorageCommand>,
    events: mpsc::UnboundedSender<Event>,
    metrics: crate::metrics::StorageMetrics,
    failure: Arc<FailureCell>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let mut worker = StorageWorker::new(WalStore { wal, metrics });
    // Only for waiting on `commands` with a timeout: the thread's work is all blocking I/O.
    let timer = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("keel-storage".into())
        .spawn(move || {
            guarded(&failure, "the storage thread", || {
                run(&mut worker, &mut commands, &timer, &events, &failure);
            });
        })
}

/// The storage thread's loop. Ends when the node task drops its sender, or at the first failure
/// (recorded in `failure`, and nothing written after it).
fn run(
    worker: &mut StorageWorker<WalStore>,
    commands: &mut mpsc::Receiver<StorageCommand>,
    timer: &tokio::runtime::Runtime,
    events: &mpsc::UnboundedSender<Event>,
    failure: &FailureCell,
) {
    while let Some(first) = next_command(worker, commands, timer, failure) {
        worker.submit(first);
        // Group commit: everything queued meanwhile (the channel's bound bounds it).
        while let Ok(next) = commands.try_recv() {
            worker.submit(next);
        }
        while let Some(done) = worker.run_next() {
            let event = match done {
                Ok(Completion::Persisted(id)) => Event::Persisted(id),
                Ok(Completion::Adopted(saved)) => saved,
                Ok(Completion::NotAdopted) => Event::SnapshotNotAdopted,
                Err((what, e)) => failure.halt(storage_failure(what, &e)),
            };
            let _ = events.send(event);
        }
    }
    // Stopping: the newest promise is made durable (keel-wal's promise.rs).
    if let Err(e) = worker.store_mut().wal.flush_promise() {
        failure.halt(storage_failure("flush_promise", &e));
    }
}

/// How long the log may stay idle before the promise record raised by its last group commit is
/// flushed on its own (keel-wal's promise.rs: it rides on the next group commit's fsync when
/// there is one). Short next to any failure a person would notice; long next to the gap between
/// the batches of even one client, which would otherwise pay a second flush each.
pub(crate) const PROMISE_IDLE_FLUSH: std::time::Duration = std::time::Duration::from_millis(10);

/// The next command; while the promise waits for a flush, at most [`PROMISE_IDLE_FLUSH`] is
/// spent waiting before it is flushed. `None` once the node task is gone.
fn next_command(
    worker: &mut StorageWorker<WalStore>,
    commands: &mut mpsc::Receiver<StorageCommand>,
    timer: &tokio::runtime::Runtime,
    failure: &FailureCell,
) -> Option<StorageCommand> {
    loop {
        if !worker.store().wal.promise_unflushed() {
            return commands.blocking_recv();
        }
        // Under load the next batch is usually queued already: it is taken at once, without
        // arming and clearing the idle timer for a wait that does not happen.
        match commands.try_recv() {
            Ok(command) => return Some(command),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        // The timeout is made inside `block_on`: its timer needs the runtime's context.
        let waited = timer
            .block_on(async { tokio::time::timeout(PROMISE_IDLE_FLUSH, commands.recv()).await });
        match waited {
            Ok(command) => return command,
            Err(_idle) => {
                if let Err(e) = worker.store_mut().wal.flush_promise() {
                    failure.halt(storage_failure("flush_promise", &e));
                }
            }
        }
    }
}
