//! The simulated disk of one node: either the in-memory storage or the real write-ahead log over
//! the fault-injecting file layer (drawn per seed), behind keel-engine's storage worker (group
//! commit, completion reports, snapshot adoptions in order with the writes), as the runtime's
//! storage thread runs it. A crash loses what the worker still holds; with the WAL it may also
//! tear the oldest such write at any file-system operation and byte, or write its sectors back
//! out of order. A stop (before a storage fault, `storage_faults.rs`) completes what the worker
//! holds and flushes the promise record, as the runtime's shutdown does. The WAL is opened as
//! the runtime opens it, repairing damage (`Wal::open_repairing`).
//!
//! Each write or snapshot adoption handed to the disk schedules a unit of work after a disk
//! latency, in order; a group commit takes along what was queued meanwhile.

use crate::mutation::Layers;
use std::path::PathBuf;

use bytes::Bytes;
use keel_core::storage::{MemStorage, Storage};
use keel_core::{HardState, Index, NodeId, RecoveredState, SnapshotMeta, Term, Write};
use keel_engine::{Completion, LogStore, StorageCommand, StorageWorker};
use keel_wal::{bootstrap_meta, Crash, DamageReport, Fs, SimFs, Wal, WalConfig};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

enum Backend {
    Mem(MemStorage),
    Wal {
        fs: SimFs,
        /// `None` while the node is down.
        wal: Option<Box<Wal<SimFs>>>,
    },
}

/// A snapshot whose data is complete here (taken locally, `from: None`, or received from the
/// leader `from`), to become this node's newest.
pub(crate) struct SnapshotAdoption {
    pub meta: SnapshotMeta,
    pub data: Bytes,
    pub from: Option<(NodeId, Term)>,
}

impl LogStore for Backend {
    type Error = String;
    type Adoption = SnapshotAdoption;
    type Adopted = SnapshotAdoption;

    fn write_batch(&mut self, writes: &[Write]) -> Result<(), String> {
        match self {
            Backend::Mem(m) => {
                for w in writes {
                    m.write(w).expect("memory storage");
                }
                Ok(())
            }
            Backend::Wal { wal, .. } => wal
                .as_mut()
                .expect("a live node has an open WAL")
                .write_batch(writes)
                .map_err(|e| format!("write failed: {e}")),
        }
    }

    /// As `Wal::adopt_snapshot`: a snapshot older than the one saved is refused; the one saved
    /// again is a no-op.
    fn adopt(&mut self, adoption: SnapshotAdoption) -> Result<Option<SnapshotAdoption>, String> {
        let meta = &adoption.meta;
        let saved = self.snapshot_index();
        if meta.last.index < saved {
            return Ok(None);
        }
        if meta.last.index > saved {
            match self {
                Backend::Mem(m) => m.save_snapshot(meta),
                Backend::Wal { wal, .. } => wal
                    .as_mut()
                    .expect("a live node has an open WAL")
                    .save_snapshot(meta, &meta.last.index.to_le_bytes())
                    .map_err(|e| format!("snapshot save failed: {e}"))?,
            }
        }
        Ok(Some(adoption))
    }
}

impl Backend {
    fn snapshot_index(&self) -> Index {
        match self {
            Backend::Mem(m) => m.snapshot().index,
            Backend::Wal { wal, .. } => wal.as_ref().map_or(0, |w| w.snapshot().index),
        }
    }
}

pub(crate) struct SimDisk {
    /// `None` only during a crash.
    worker: Option<StorageWorker<Backend>>,
    /// The file system snapshot transfers keep their partial file on: the WAL's, or one of its
    /// own beside the in-memory storage (crashed with the node all the same).
    transfer_fs: SimFs,
    mutation: Option<crate::Mutation>,
    pub last_completion: u64,
}

fn wal_dir() -> PathBuf {
    PathBuf::from("/keel")
}

/// The largest entry payload a simulated node proposes: what its WAL stores (the in-memory
/// storage has the same bound, so both kinds of seeds refuse the same proposals).
pub(crate) fn entry_bytes_max() -> usize {
    wal_config(None).entry_payload_bytes_max()
}

fn wal_config(mutation: Option<crate::Mutation>) -> WalConfig {
    // Small segments so that rotation and purge happen in every run.
    WalConfig {
        segment_size_bytes: 64 << 10,
        frame_size_bytes_max: 32 << 10,
        entry_size_bytes_max: 48 << 10,
        mutation: mutation.core(),
        ..WalConfig::default()
    }
}

impl SimDisk {
    /// A disk for a node of a new cluster (`voters` non-empty) or a node that will join one.
    pub fn new(use_wal: bool, voters: &[NodeId], mutation: Option<crate::Mutation>) -> SimDisk {
        let mut transfer_fs = SimFs::new();
        let backend = if use_wal {
            let fs = SimFs::new();
            transfer_fs = fs.clone();
            let (mut wal, _) =
                Wal::open(fs.clone(), wal_dir(), wal_config(mutation)).expect("new WAL");
            if !voters.is_empty() {
                wal.save_snapshot(&bootstrap_meta(voters.iter().copied()), &[])
                    .expect("bootstrap snapshot");
            }
            Backend::Wal { fs, wal: None }
        } else if voters.is_empty() {
            Backend::Mem(MemStorage::new_joining())
        } else {
            Backend::Mem(MemStorage::new_cluster(voters.iter().copied()))
        };
        transfer_fs
            .create_dir_all(&wal_dir())
            .expect("simulated file system");
        SimDisk {
            worker: Some(StorageWorker::with_mutation(backend, mutation.core())),
            transfer_fs,
            mutation,
            last_completion: 0,
        }
    }

    /// The file system and directory of the partial file of snapshot transfers.
    pub fn transfer_fs(&self) -> SimFs {
        self.transfer_fs.clone()
    }

    pub fn transfer_dir() -> PathBuf {
        wal_dir()
    }

    fn worker(&self) -> &StorageWorker<Backend> {
        self.worker.as_ref().expect("a disk between crashes")
    }

    fn worker_mut(&mut self) -> &mut StorageWorker<Backend> {
        self.worker.as_mut().expect("a disk between crashes")
    }

    /// Opens the storage after a (re)start, as the runtime opens it (`Wal::open_repairing`), and
    /// returns what the node recovers from, with the damage the WAL repaired, if any.
    pub fn recover(&mut self) -> Result<(RecoveredState, Option<DamageReport>), String> {
        let mutation = self.mutation;
        match self.worker_mut().store_mut() {
            Backend::Mem(m) => Ok((m.recover().expect("memory storage"), None)),
            Backend::Wal { fs, wal } => {
                let (opened, recovered, report) =
                    Wal::open_repairing(fs.clone(), wal_dir(), wal_config(mutation))
                        .map_err(|e| e.to_string())?;
                *wal = Some(Box::new(opened));
                Ok((recovered.state, report))
            }
        }
    }

    /// The WAL's file system and directory, while the node is down: what storage faults damage.
    pub fn wal_fs(&self) -> Option<(SimFs, PathBuf)> {
        match self.worker().store() {
            Backend::Wal { fs, wal: None } => Some((fs.clone(), wal_dir())),
            _ => None,
        }
    }

    /// The oldest snapshot whose file is on disk (the WAL keeps the newest two): recovery falls
    /// back to it when the newest is damaged, so its data is kept.
    pub fn oldest_snapshot_index(&self) -> Index {
        match self.worker().store() {
            Backend::Wal { fs, .. } => keel_wal::snapshot::list_snapshots(fs, &wal_dir())
                .ok()
                .and_then(|files| files.iter().map(|(last, _)| last.index).min())
                .unwrap_or(0),
            Backend::Mem(m) => m.snapshot().index,
        }
    }

    /// Hands a write or an adoption to the storage worker.
    pub fn submit(&mut self, command: StorageCommand<SnapshotAdoption>) {
        self.worker_mut().submit(command);
    }

    /// Runs the worker's next unit of work (one group commit, or one adoption).
    pub fn run_next(&mut self) -> Option<Result<Completion<SnapshotAdoption>, String>> {
        self.worker_mut().run_next()
    }

    pub fn snapshot_index(&self) -> Index {
        self.worker().store().snapshot_index()
    }

    /// The newest snapshot saved, if it can be read.
    pub fn snapshot_meta(&self) -> Option<SnapshotMeta> {
        match self.worker().store() {
            Backend::Mem(m) => Some(m.snapshot_meta()),
            Backend::Wal { fs, .. } => keel_wal::snapshot::find_latest_snapshot(fs, &wal_dir())
                .ok()?
                .chosen
                .map(|f| f.meta),
        }
    }

    /// The hard state and last index on disk, for the persisted-commit invariant.
    pub fn durable_state(&self) -> Option<(HardState, Index)> {
        match self.worker().store() {
            Backend::Mem(m) => Some((m.hard_state(), m.last_index())),
            Backend::Wal { wal, .. } => wal.as_ref().map(|w| (w.hard_state(), w.last_index())),
        }
    }

    /// The node crashed. What the worker held is lost; with `tear`, the oldest write it held is
    /// cut short first.
    pub fn crash(&mut self, tear: bool, rng: &mut ChaCha8Rng) {
        let worker = self.worker.take().expect("a disk between crashes");
        let oldest = if tear {
            worker.in_flight().next().cloned()
        } else {
            None
        };
        let mut backend = worker.into_store();
        match &mut backend {
            Backend::Mem(m) => {
                if let Some(w) = oldest {
                    let keep = rng.random_range(0..=w.entries.len());
                    let keep_hs = rng.random_bool(0.5);
                    m.write_torn(&w, keep, keep_hs);
                }
                self.transfer_fs.crash_with(random_crash(rng));
            }
            Backend::Wal { fs, wal } => {
                if let (Some(w), Some(open)) = (oldest, wal.as_mut()) {
                    // Die somewhere inside the write: after a random number of file-system
                    // operations, then keep a random prefix of what was not yet synced.
                    fs.kill_after_ops(rng.random_range(0..6));
                    let _ = open.write_batch(std::slice::from_ref(&w));
                }
                *wal = None;
                fs.crash_with(random_crash(rng));
            }
        }
        self.worker = Some(StorageWorker::with_mutation(backend, self.mutation.core()));
    }
}

impl SimDisk {
    /// The node stops as the runtime's shutdown stops it: the storage worker completes what it
    /// was handed (fsyncs included; nothing reaches the core, which is gone) and the promise
    /// record is flushed (`Wal::flush_promise`, as the storage thread does when it stops), so
    /// the durable promise covers the whole log. Returns the snapshots adopted meanwhile (their
    /// data is durable now). Only for a node over the WAL.
    pub fn stop(&mut self) -> Result<Vec<SnapshotAdoption>, String> {
        let mut adopted = Vec::new();
        while let Some(done) = self.worker_mut().run_next() {
            if let Completion::Adopted(adoption) = done? {
                adopted.push(adoption);
            }
        }
        let worker = self.worker.take().expect("a disk between crashes");
        let mut backend = worker.into_store();
        let Backend::Wal { fs, wal } = &mut backend else {
            unreachable!("only a node over the WAL is stopped this way");
        };
        let flushed = wal
            .as_mut()
            .expect("a live node has an open WAL")
            .flush_promise()
            .map(|_| ())
            .map_err(|e| format!("promise flush failed: {e}"));
        *wal = None;
        // Nothing of the log is left unsynced; a partial snapshot transfer may be.
        fs.crash_with(Crash::LoseUnsynced);
        self.worker = Some(StorageWorker::with_mutation(backend, self.mutation.core()));
        flushed.map(|()| adopted)
    }
}

/// What a crash does to the writes not yet synced: lost, a prefix kept (the last one torn), or
/// written back out of order.
fn random_crash(rng: &mut ChaCha8Rng) -> Crash {
    match rng.random_range(0..3) {
        0 => Crash::LoseUnsynced,
        1 => Crash::KeepPrefix {
            ops: rng.random_range(0..4),
            torn_bytes: rng.random_range(0..4096),
        },
        _ => Crash::Scramble { seed: rng.random() },
    }
}
