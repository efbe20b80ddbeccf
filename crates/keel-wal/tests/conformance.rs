//! The storage conformance suite against every storage we have: the core's in-memory storage,
//! the WAL on the simulated disk and the WAL on the real file system.

mod common;

use std::cell::RefCell;

use common::{new_cluster, reopen, sim_dir, small_config, TempDir};
use keel_core::storage::MemStorage;
use keel_wal::conformance::{run_all, run_snapshot_checks};
use keel_wal::{SimFs, StdFs, Wal, WalConfig};

#[test]
fn mem_storage_conforms() {
    run_all(|| MemStorage::new_cluster([1, 2, 3]), None);
    run_snapshot_checks(
        || MemStorage::new_cluster([1, 2, 3]),
        None,
        |s, meta| s.save_snapshot(meta),
    );
}

#[test]
fn wal_on_sim_fs_conforms() {
    let make = || new_cluster(SimFs::new(), sim_dir(), small_config());
    let mut reopen_wal = |wal: Wal<SimFs>| reopen(wal);
    run_all(make, Some(&mut reopen_wal));
    run_snapshot_checks(make, Some(&mut reopen_wal), |wal, meta| {
        wal.save_snapshot(meta, b"state machine image").unwrap()
    });
}

#[test]
fn wal_on_sim_fs_with_default_config_conforms() {
    let make = || {
        new_cluster(
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
        let wal = new_cluster(StdFs, dir.path().to_owned(), small_config());
        dirs.borrow_mut().push(dir);
        wal
    };
    let mut reopen_wal = |wal: Wal<StdFs>| reopen(wal);
    run_all(make, Some(&mut reopen_wal));
    run_snapshot_checks(make, Some(&mut reopen_wal), |wal, meta| {
        wal.save_snapshot(meta, b"state machine image").unwrap()
    });
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
        let wal = new_cluster(StdFs, dir.path().to_owned(), config);
        dirs.borrow_mut().push(dir);
        wal
    };
    run_all(make, Some(&mut |wal: Wal<StdFs>| reopen(wal)));
}
