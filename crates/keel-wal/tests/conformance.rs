//! The storage conformance suite against every storage we have: the core's in-memory storage,
//! the WAL on the simulated disk and the WAL on the real file system.

mod common;

use std::cell::RefCell;

use common::{reopen, sim_dir, small_config, TempDir};
use keel_core::storage::MemStorage;
use keel_wal::conformance::run_all;
use keel_wal::{Fs, SimFs, StdFs, Wal, WalConfig};

/// An empty WAL in `dir`.
fn empty<F: Fs>(fs: F, dir: std::path::PathBuf, config: WalConfig) -> Wal<F> {
    Wal::open(fs, dir, config).expect("open").0
}

#[test]
fn mem_storage_conforms() {
    run_all(MemStorage::default, None);
}

#[test]
fn wal_on_sim_fs_conforms() {
    let make = || empty(SimFs::new(), sim_dir(), small_config());
    run_all(make, Some(&mut |wal: Wal<SimFs>| reopen(wal)));
}

#[test]
fn wal_on_sim_fs_with_default_config_conforms() {
    let make = || {
        empty(
            SimFs::new(),
            sim_dir(),
            WalConfig {
                segment_size_bytes: 1 << 20,
                frame_size_bytes_max: 256 << 10,
                entry_size_bytes_max: 512 << 10,
                ..WalConfig::default()
            },
        )
    };
    run_all(make, Some(&mut |wal: Wal<SimFs>| reopen(wal)));
}

#[test]
fn wal_on_std_fs_conforms() {
    let dirs = RefCell::new(Vec::new());
    let make = || {
        let dir = TempDir::new("conformance");
        let wal = empty(StdFs, dir.path().to_owned(), small_config());
        dirs.borrow_mut().push(dir);
        wal
    };
    run_all(make, Some(&mut |wal: Wal<StdFs>| reopen(wal)));
}

/// The same on the real file system with writes through the page cache (`direct_io: false`; the
/// test above writes segments directly where the file system allows it).
#[test]
fn wal_on_std_fs_through_the_page_cache_conforms() {
    let dirs = RefCell::new(Vec::new());
    let make = || {
        let dir = TempDir::new("conformance-buffered");
        let config = WalConfig {
            direct_io: false,
            ..small_config()
        };
        let wal = empty(StdFs, dir.path().to_owned(), config);
        dirs.borrow_mut().push(dir);
        wal
    };
    run_all(make, Some(&mut |wal: Wal<StdFs>| reopen(wal)));
}

/// The suite can fail: storages each broken in one way the contract forbids are refused.
mod broken {
    use keel_core::storage::{MemStorage, Never, Storage};
    use keel_core::{RecoveredState, SnapshotMeta, Write};
    use keel_wal::conformance::run_all;

    #[derive(Clone, Copy, Debug)]
    enum Defect {
        ForgetsTheVote,
        IgnoresRecordedSnapshots,
        DropsABatchsLastWrite,
        KeepsConflictingEntries,
    }

    /// `MemStorage` with one defect.
    struct Broken(MemStorage, Defect);

    impl Storage for Broken {
        type Error = Never;

        fn recover(&self) -> Result<RecoveredState, Never> {
            let mut state = self.0.recover()?;
            if let Defect::ForgetsTheVote = self.1 {
                state.hard_state.vote = None;
            }
            Ok(state)
        }

        fn write(&mut self, write: &Write) -> Result<(), Never> {
            if let Defect::KeepsConflictingEntries = self.1 {
                // Appends only what lies past the stored log: a rewritten suffix is ignored.
                let last = self.0.last_index();
                let mut kept = write.clone();
                kept.entries.retain(|e| e.index > last);
                return self.0.write(&kept);
            }
            self.0.write(write)
        }

        fn write_batch(&mut self, writes: &[Write]) -> Result<(), Never> {
            let n = match self.1 {
                Defect::DropsABatchsLastWrite if writes.len() > 1 => writes.len() - 1,
                _ => writes.len(),
            };
            writes[..n].iter().try_for_each(|w| self.write(w))
        }

        fn record_snapshot(&mut self, meta: &SnapshotMeta) -> Result<(), Never> {
            match self.1 {
                // The bootstrap snapshot is kept, so the defect shows past it.
                Defect::IgnoresRecordedSnapshots if meta.last.index > 0 => Ok(()),
                _ => self.0.record_snapshot(meta),
            }
        }
    }

    #[test]
    fn each_broken_storage_fails_the_suite() {
        for defect in [
            Defect::ForgetsTheVote,
            Defect::IgnoresRecordedSnapshots,
            Defect::DropsABatchsLastWrite,
            Defect::KeepsConflictingEntries,
        ] {
            let failed = std::panic::catch_unwind(|| {
                run_all(|| Broken(MemStorage::default(), defect), None);
            });
            assert!(failed.is_err(), "{defect:?} passed the conformance suite");
        }
    }
}
