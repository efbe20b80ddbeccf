//! The storage thread: owns the WAL and runs keel-engine's `StorageWorker` over it (the group
//! commit and ordering decisions, which the simulator runs too).
//!
//! Writes arrive in `ready()` order. While one `write_batch` (and its fdatasync) runs, the node
//! keeps queueing; the next batch takes everything queued, so one fsync covers many writes under
//! load and the leader's own write overlaps with replication (it sent its Appends before handing
//! the write here). Completion is reported as the last write id of the batch: `persisted(id)`
//! means "this and every earlier write".
//!
//! The log sits behind a [`NodeLog`]: `WalStore`, the built-in WAL, which times each group commit
//! and flushes its promise record once the log has been idle for [`PROMISE_IDLE_FLUSH`] (10 ms)
//! and when the thread stops; or `EmbedderStore`, an embedder's `keel_core::storage::Storage`,
//! whose snapshot files keel keeps in a directory of their own (`snapshots/` in the data
//! directory). The commands taken at once are run unit by unit.
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

use keel_core::storage::Storage;
use keel_core::{LogId, NodeId, Term, Write};
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

/// What failed, and why: the step's name and the error's text.
pub(crate) type StoreError = (&'static str, String);

/// A log the storage thread runs: keel-engine's `LogStore` with the runtime's adoption and
/// report, plus the idle flush the WAL's promise record needs.
pub(crate) trait NodeLog:
    LogStore<Adoption = SnapshotAdoption, Adopted = Event, Error = StoreError> + Send + 'static
{
    /// Whether something written waits for a flush of its own when the log goes idle.
    fn flush_pending(&self) -> bool {
        false
    }
    /// That flush (also run when the thread stops).
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

fn wal_error(what: &'static str) -> impl Fn(keel_wal::WalError) -> StoreError {
    move |e| (what, e.to_string())
}

/// The WAL as keel-engine's log store, timing each group commit.
pub(crate) struct WalStore {
    pub wal: Wal<StdFs>,
    pub metrics: crate::metrics::StorageMetrics,
}

impl LogStore for WalStore {
    type Error = StoreError;
    type Adoption = SnapshotAdoption;
    type Adopted = Event;

    fn write_batch(&mut self, writes: &[Write]) -> Result<(), Self::Error> {
        let timer = self.metrics.group_commit(writes);
        // Even InvalidRequest means the core and the WAL disagree: continuing could lose data.
        self.wal
            .write_batch(writes)
            .map_err(wal_error("write_batch"))?;
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
            Err(e) if e.is_fatal() => Err(wal_error("adopt_snapshot")(e)),
            // An older snapshot than one already saved (a received one overtook a local one, or
            // the reverse), or a file that does not verify: nothing to do but drop it.
            Err(e) => Ok(not_adopted(&temp, &e)),
        }
    }
}

impl NodeLog for WalStore {
    fn flush_pending(&self) -> bool {
        self.wal.promise_unflushed()
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.wal
            .flush_promise()
            .map(drop)
            .map_err(wal_error("flush_promise"))
    }
}

fn not_adopted(temp: &std::path::Path, why: &dyn std::fmt::Display) -> Option<Event> {
    tracing::info!("snapshot {} not adopted: {why}", temp.display());
    let _ = std::fs::remove_file(temp);
    None
}

/// An embedder's log storage. Snapshot files are keel's, in `snapshot_dir`: a complete one is
/// renamed into place there (the newest `snapshots_kept` and the bootstrap one are kept), then
/// recorded in the storage (`Storage::record_snapshot`) before any write refers to it.
pub(crate) struct EmbedderStore<L> {
    pub storage: L,
    pub snapshot_dir: PathBuf,
    pub snapshots_kept: usize,
    /// The newest snapshot recorded.
    pub recorded: LogId,
    pub metrics: crate::metrics::StorageMetrics,
}

impl<L: Storage> LogStore for EmbedderStore<L> {
    type Error = StoreError;
    type Adoption = SnapshotAdoption;
    type Adopted = Event;

    fn write_batch(&mut self, writes: &[Write]) -> Result<(), Self::Error> {
        let timer = self.metrics.group_commit(writes);
        self.storage
            .write_batch(writes)
            .map_err(|e| ("write_batch", e.to_string()))?;
        timer.done();
        Ok(())
    }

    fn adopt(&mut self, adoption: SnapshotAdoption) -> Result<Option<Event>, Self::Error> {
        let SnapshotAdoption { temp, from } = adoption;
        let header = keel_wal::Fs::open(&StdFs, &temp)
            .map_err(|e| e.to_string())
            .and_then(|f| keel_wal::snapshot::verify_snapshot_header(&f, &temp));
        match header {
            Err(e) => return Ok(not_adopted(&temp, &e)),
            Ok(file) if file.meta.last.index < self.recorded.index => {
                let why = format!("older than the snapshot at {}", self.recorded);
                return Ok(not_adopted(&temp, &why));
            }
            Ok(_) => {}
        }
        let file = keel_wal::snapshot::adopt_snapshot_file(
            &StdFs,
            &self.snapshot_dir,
            &temp,
            self.snapshots_kept,
        )
        .map_err(wal_error("adopt_snapshot"))?;
        self.storage
            .record_snapshot(&file.meta)
            .map_err(|e| ("record_snapshot", e.to_string()))?;
        self.recorded = file.meta.last;
        Ok(Some(Event::SnapshotSaved {
            meta: file.meta,
            path: file.path,
            from,
        }))
    }
}

impl<L: Storage + Send + 'static> NodeLog for EmbedderStore<L> {}

pub(crate) fn spawn<L: NodeLog>(
    log: L,
    mut commands: mpsc::Receiver<StorageCommand>,
    events: mpsc::UnboundedSender<Event>,
    failure: Arc<FailureCell>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let mut worker = StorageWorker::new(log);
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
fn run<L: NodeLog>(
    worker: &mut StorageWorker<L>,
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
    if let Err((what, e)) = worker.store_mut().flush() {
        failure.halt(storage_failure(what, &e));
    }
}

/// How long the log may stay idle before the promise record raised by its last group commit is
/// flushed on its own (keel-wal's promise.rs: it rides on the next group commit's fsync when
/// there is one). Short next to any failure a person would notice; long next to the gap between
/// the batches of even one client, which would otherwise pay a second flush each.
pub(crate) const PROMISE_IDLE_FLUSH: std::time::Duration = std::time::Duration::from_millis(10);

/// The next command; while the promise waits for a flush, at most [`PROMISE_IDLE_FLUSH`] is
/// spent waiting before it is flushed. `None` once the node task is gone.
fn next_command<L: NodeLog>(
    worker: &mut StorageWorker<L>,
    commands: &mut mpsc::Receiver<StorageCommand>,
    timer: &tokio::runtime::Runtime,
    failure: &FailureCell,
) -> Option<StorageCommand> {
    loop {
        if !worker.store().flush_pending() {
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
                if let Err((what, e)) = worker.store_mut().flush() {
                    failure.halt(storage_failure(what, &e));
                }
            }
        }
    }
}
