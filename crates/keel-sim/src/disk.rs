//! The simulated disk of one node: either the in-memory storage or the real write-ahead log over
//! the fault-injecting file layer (drawn per seed), plus the writes still in flight. A crash loses
//! what is in flight; with the WAL it may also tear the oldest in-flight write at any file-system
//! operation and byte, or write its sectors back out of order.

use std::collections::VecDeque;
use std::path::PathBuf;

use keel_core::storage::{MemStorage, Storage};
use keel_core::{HardState, Index, NodeId, RecoveredState, SnapshotMeta, Write};
use keel_wal::{bootstrap_meta, Crash, SimFs, Wal, WalConfig};
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

pub(crate) struct SimDisk {
    backend: Backend,
    pending: VecDeque<Write>,
    pub last_completion: u64,
}

fn wal_dir() -> PathBuf {
    PathBuf::from("/keel")
}

/// The largest entry payload a simulated node proposes: what its WAL stores (the in-memory
/// storage has the same bound, so both kinds of seeds refuse the same proposals).
pub(crate) fn entry_bytes_max() -> usize {
    wal_config().entry_payload_bytes_max()
}

fn wal_config() -> WalConfig {
    // Small segments so that rotation and purge happen in every run.
    WalConfig {
        segment_size_bytes: 64 << 10,
        frame_size_bytes_max: 32 << 10,
        entry_size_bytes_max: 48 << 10,
        ..WalConfig::default()
    }
}

impl SimDisk {
    /// A disk for a node of a new cluster (`voters` non-empty) or a node that will join one.
    pub fn new(use_wal: bool, voters: &[NodeId]) -> SimDisk {
        let backend = if use_wal {
            let fs = SimFs::new();
            let (mut wal, _) = Wal::open(fs.clone(), wal_dir(), wal_config()).expect("new WAL");
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
        SimDisk {
            backend,
            pending: VecDeque::new(),
            last_completion: 0,
        }
    }

    /// Opens the storage after a (re)start and returns what the node recovers from.
    pub fn recover(&mut self) -> Result<RecoveredState, String> {
        match &mut self.backend {
            Backend::Mem(m) => Ok(m.recover().expect("memory storage")),
            Backend::Wal { fs, wal } => {
                let (opened, recovered) =
                    Wal::open(fs.clone(), wal_dir(), wal_config()).map_err(|e| e.to_string())?;
                *wal = Some(Box::new(opened));
                Ok(recovered.state)
            }
        }
    }

    pub fn push_pending(&mut self, write: Write) {
        self.pending.push_back(write);
    }

    /// Completes the oldest in-flight write, which must be `id` (storage completes in order).
    pub fn complete(&mut self, id: u64) -> Result<(), String> {
        let w = self
            .pending
            .pop_front()
            .expect("a completion has a pending write");
        assert_eq!(w.id, id, "disk completions are in order");
        match &mut self.backend {
            Backend::Mem(m) => {
                m.write(&w).expect("memory storage");
                Ok(())
            }
            Backend::Wal { wal, .. } => wal
                .as_mut()
                .expect("a live node has an open WAL")
                .write_batch(std::slice::from_ref(&w))
                .map_err(|e| format!("write {id} failed: {e}")),
        }
    }

    /// A snapshot's data is durable (taken locally, or fully received from a leader).
    pub fn save_snapshot(&mut self, meta: &SnapshotMeta) -> Result<(), String> {
        if meta.last.index <= self.snapshot_index() {
            return Ok(());
        }
        match &mut self.backend {
            Backend::Mem(m) => {
                m.save_snapshot(meta);
                Ok(())
            }
            Backend::Wal { wal, .. } => wal
                .as_mut()
                .expect("a live node has an open WAL")
                .save_snapshot(meta, &meta.last.index.to_le_bytes())
                .map_err(|e| format!("snapshot save failed: {e}")),
        }
    }

    pub fn snapshot_index(&self) -> Index {
        match &self.backend {
            Backend::Mem(m) => m.snapshot().index,
            Backend::Wal { wal, .. } => wal.as_ref().map_or(0, |w| w.snapshot().index),
        }
    }

    /// The hard state and last index on disk, for the persisted-commit invariant.
    pub fn durable_state(&self) -> Option<(HardState, Index)> {
        match &self.backend {
            Backend::Mem(m) => Some((m.hard_state(), m.last_index())),
            Backend::Wal { wal, .. } => wal.as_ref().map(|w| (w.hard_state(), w.last_index())),
        }
    }

    /// The node crashed. In-flight writes are lost; with `tear`, the oldest is cut short first.
    pub fn crash(&mut self, tear: bool, rng: &mut ChaCha8Rng) {
        let oldest = if tear {
            self.pending.front().cloned()
        } else {
            None
        };
        self.pending.clear();
        match &mut self.backend {
            Backend::Mem(m) => {
                if let Some(w) = oldest {
                    let keep = rng.random_range(0..=w.entries.len());
                    let keep_hs = rng.random_bool(0.5);
                    m.write_torn(&w, keep, keep_hs);
                }
            }
            Backend::Wal { fs, wal } => {
                if let (Some(w), Some(open)) = (oldest, wal.as_mut()) {
                    // Die somewhere inside the write: after a random number of file-system
                    // operations, then keep a random prefix of what was not yet synced.
                    fs.kill_after_ops(rng.random_range(0..6));
                    let _ = open.write_batch(std::slice::from_ref(&w));
                }
                *wal = None;
                let crash = match rng.random_range(0..3) {
                    0 => Crash::LoseUnsynced,
                    1 => Crash::KeepPrefix {
                        ops: rng.random_range(0..4),
                        torn_bytes: rng.random_range(0..4096),
                    },
                    _ => Crash::Scramble { seed: rng.random() },
                };
                fs.crash_with(crash);
            }
        }
    }
}
