//! The simulated disk itself: what survives which crash, stale handles, injected faults.

use std::path::PathBuf;

use keel_wal::simfs::SECTOR_SIZE_BYTES;
use keel_wal::{Crash, FileHandle, Fs, SimFs};

type SimFile = <SimFs as Fs>::File;

fn dir() -> PathBuf {
    PathBuf::from("/d")
}

fn setup() -> (SimFs, SimFile) {
    let fs = SimFs::new();
    fs.create_dir_all(&dir()).unwrap();
    let f = fs.create(&dir().join("a")).unwrap();
    (fs, f)
}

#[test]
fn unsynced_writes_and_names_are_lost() {
    let (fs, mut f) = setup();
    f.write_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    fs.crash();
    // The data was synced but the directory entry was not.
    assert!(fs.read_file(&dir().join("a")).is_none());
}

#[test]
fn synced_data_and_dir_survive_and_prefix_tears() {
    let (fs, mut f) = setup();
    fs.sync_dir(&dir()).unwrap();
    f.write_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    f.write_at(b"world", 5).unwrap();
    f.write_at(b"!!", 10).unwrap();
    fs.crash_with(Crash::KeepPrefix {
        ops: 0,
        torn_bytes: 3,
    });
    assert_eq!(fs.read_file(&dir().join("a")).unwrap(), b"hellowor");
    assert!(f.write_at(b"x", 0).is_err(), "stale handle must fail");
}

#[test]
fn kill_after_ops_and_failed_sync() {
    let (fs, mut f) = setup();
    fs.kill_after_ops(1);
    f.write_at(b"a", 0).unwrap();
    assert!(f.sync_data().is_err());
    assert!(f.len_bytes().is_err());
    fs.crash();
    let mut f = {
        fs.create(&dir().join("b")).unwrap();
        fs.sync_dir(&dir()).unwrap();
        fs.open(&dir().join("b")).unwrap()
    };
    f.write_at(b"data", 0).unwrap();
    fs.fail_next_sync();
    assert!(f.sync_data().is_err());
    fs.crash();
    assert_eq!(fs.read_file(&dir().join("b")).unwrap(), b"");
}

#[test]
fn flip_bit_is_durable_and_rename_needs_dir_sync() {
    let (fs, mut f) = setup();
    f.write_at(&[0u8; 4], 0).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(&dir()).unwrap();
    fs.flip_bit(&dir().join("a"), 2, 7).unwrap();
    fs.rename(&dir().join("a"), &dir().join("b")).unwrap();
    fs.crash();
    assert_eq!(fs.read_file(&dir().join("a")).unwrap(), [0, 0, 0x80, 0]);
    assert!(fs.read_file(&dir().join("b")).is_none());
}

#[test]
fn scramble_is_deterministic() {
    let run = |seed| {
        let (fs, mut f) = setup();
        fs.sync_dir(&dir()).unwrap();
        f.write_at(&[7u8; 4096], 0).unwrap();
        fs.crash_with(Crash::Scramble { seed });
        fs.read_file(&dir().join("a")).unwrap()
    };
    assert_eq!(run(3), run(3));
    let kept = run(3).iter().filter(|b| **b == 7).count();
    assert!(kept % SECTOR_SIZE_BYTES == 0);
}

#[test]
fn a_write_pushed_to_the_device_is_durable_with_the_next_sync_of_any_file() {
    let (fs, mut a) = setup();
    fs.sync_dir(&dir()).unwrap();
    let mut b = fs.create(&dir().join("b")).unwrap();
    fs.sync_dir(&dir()).unwrap();
    a.write_at(b"pushed", 0).unwrap();
    assert!(a.write_back().unwrap());
    // Written after the push: not at the device yet.
    a.write_at(b"later", 6).unwrap();
    b.write_at(b"other", 0).unwrap();
    let syncs = fs.sync_count();
    b.sync_data().unwrap();
    assert_eq!(fs.sync_count(), syncs + 1);
    fs.crash();
    assert_eq!(fs.read_file(&dir().join("a")).unwrap(), b"pushed");
    assert_eq!(fs.read_file(&dir().join("b")).unwrap(), b"other");
}

#[test]
fn a_pushed_write_without_a_later_sync_is_lost_like_any_unsynced_one() {
    let (fs, mut a) = setup();
    fs.sync_dir(&dir()).unwrap();
    a.write_at(b"pushed", 0).unwrap();
    assert!(a.write_back().unwrap());
    fs.crash();
    assert_eq!(fs.read_file(&dir().join("a")).unwrap(), b"");
}
