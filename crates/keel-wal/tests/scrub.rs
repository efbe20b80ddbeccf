//! The scrub finds what a restart would refuse in the files no write touches (sealed segments,
//! snapshots), changes nothing, and is paced and stoppable.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{files, frames, new_cluster, segment, sim_dir, small_config, snapshot_files};
use keel_core::LogId;
use keel_wal::conformance::{entries, hard_state, snapshot_meta, write};
use keel_wal::{scrub_pass, DamageKind, FileHandle, Fs, ReadOnlyFs, SimFs, Throttled};

/// A log of 200 synced batches of 10 entries (many sealed segments) and one snapshot.
fn live_log() -> SimFs {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    for b in 0..200u64 {
        let from = b * 10 + 1;
        wal.write_batch(&[write(
            b + 1,
            entries(1, from, from + 9),
            Some(hard_state(1, Some(1), from - 1)),
        )])
        .unwrap();
    }
    wal.save_snapshot(
        &snapshot_meta(LogId::new(1, 1500), vec![]),
        b"state at 1500",
    )
    .unwrap();
    fs
}

fn unthrottled(fs: &SimFs) -> Throttled<SimFs> {
    Throttled::new(fs.clone(), u64::MAX / 4, Arc::new(AtomicBool::new(false)))
}

#[test]
fn a_healthy_directory_scrubs_clean_and_unchanged() {
    let fs = live_log();
    let before = files(&fs);
    let pass = scrub_pass(&unthrottled(&fs), &sim_dir()).unwrap();
    assert!(pass.is_clean(), "{:?}", pass.findings);
    assert!(pass.segments_read >= 2, "{pass:?}");
    assert_eq!(
        pass.snapshots_read, 2,
        "the bootstrap snapshot and the one saved: {pass:?}"
    );
    assert_eq!(files(&fs), before, "a pass changes nothing");
}

#[test]
fn a_flipped_bit_in_a_sealed_segment_is_found_where_it_is() {
    let fs = live_log();
    let (at, size) = frames(&fs.read_file(&segment(2)).unwrap())[2];
    fs.flip_bit(&segment(2), at + size as u64 / 2, 3).unwrap();
    let pass = scrub_pass(&unthrottled(&fs), &sim_dir()).unwrap();
    assert_eq!(pass.findings.len(), 1, "{:?}", pass.findings);
    let d = &pass.findings[0];
    assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
    assert_eq!(d.path, Some(segment(2)), "{d}");
    assert_eq!(d.offset, Some(at), "{d}");
    assert!(d.detail.contains("found by the scrub"), "{d}");
    // A restart judges it the same way: damage in the same file.
    let inspection = keel_wal::inspect(&fs, &sim_dir()).unwrap();
    assert!(
        inspection
            .damage
            .iter()
            .any(|x| x.kind == DamageKind::CorruptLog && x.path == Some(segment(2))),
        "{:?}",
        inspection.damage
    );
}

#[test]
fn a_flipped_bit_in_a_snapshot_is_found() {
    let fs = live_log();
    let snap = fs
        .paths()
        .into_iter()
        .find(|p| p.extension().is_some_and(|x| x == "snap"))
        .expect("a snapshot file");
    let len = fs.read_file(&snap).unwrap().len() as u64;
    fs.flip_bit(&snap, len - 3, 0).unwrap();
    let pass = scrub_pass(&unthrottled(&fs), &sim_dir()).unwrap();
    assert_eq!(pass.findings.len(), 1, "{:?}", pass.findings);
    assert_eq!(pass.findings[0].kind, DamageKind::CorruptSnapshot);
    assert_eq!(pass.findings[0].path.as_ref(), Some(&snap));
}

/// The active segment (and the spare ahead of it) are the writer's: the scrub leaves them to
/// recovery, which reads them at every start.
#[test]
fn the_active_segment_is_not_scrubbed() {
    let fs = live_log();
    let mut seqs: Vec<u64> = fs
        .list_dir(&sim_dir())
        .unwrap()
        .iter()
        .filter_map(|n| keel_wal::segment::parse_segment_file_name(n))
        .collect();
    seqs.sort_unstable();
    let newest_with_frames = seqs
        .iter()
        .rev()
        .copied()
        .find(|s| !frames(&fs.read_file(&segment(*s)).unwrap()).is_empty())
        .unwrap();
    let (at, _) = frames(&fs.read_file(&segment(newest_with_frames)).unwrap())[0];
    fs.flip_bit(&segment(newest_with_frames), at + 20, 1)
        .unwrap();
    let pass = scrub_pass(&unthrottled(&fs), &sim_dir()).unwrap();
    assert!(pass.is_clean(), "{:?}", pass.findings);
}

#[test]
fn reads_are_paced_and_stop_when_asked() {
    let dir = std::env::temp_dir().join(format!("keel-scrub-pace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    std::fs::write(&path, vec![7u8; 64 << 10]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // 256 KiB/s: 64 KiB in four reads cost at least 0.25 s however fast the machine.
    let fs = Throttled::new(ReadOnlyFs, 256 << 10, stop.clone());
    let file = fs.open(&path).unwrap();
    let started = Instant::now();
    let mut buf = vec![0u8; 16 << 10];
    for i in 0..4u64 {
        assert_eq!(file.read_at(&mut buf, i * (16 << 10)).unwrap(), 16 << 10);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(240),
        "{:?}",
        started.elapsed()
    );
    assert!(fs.create(&dir.join("x")).is_err(), "read-only underneath");
    stop.store(true, Ordering::Relaxed);
    let error = file.read_at(&mut buf, 0).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::Interrupted);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rot in an older snapshot: a restart would not see it (recovery stops at the newest that
/// verifies), so the scrub sets it aside itself; rot in the newest stays a finding for the
/// restart to repair.
#[test]
fn a_damaged_older_snapshot_is_set_aside_by_the_scrub_and_the_newest_left_to_a_restart() {
    let fs = live_log();
    let snapshots = snapshot_files(&fs);
    let newest = snapshots.last().expect("snapshots").clone();
    let older = snapshots[snapshots.len() - 2].clone();
    let len = fs.read_file(&older).unwrap().len() as u64;
    fs.flip_bit(&older, len - 1, 2).unwrap();
    assert!(
        keel_wal::inspect(&fs, &sim_dir())
            .unwrap()
            .damage
            .is_empty(),
        "a restart does not look at an older snapshot"
    );
    let mut pass = scrub_pass(&unthrottled(&fs), &sim_dir()).unwrap();
    assert_eq!(pass.newest_snapshot.as_ref(), Some(&newest));
    assert_eq!(pass.findings.len(), 1, "{:?}", pass.findings);
    let aside = keel_wal::set_aside_spare_snapshots(&fs, &sim_dir(), &mut pass).unwrap();
    assert_eq!(aside, vec![older.clone()]);
    assert!(pass.is_clean());
    let mut damaged = older.into_os_string();
    damaged.push(".damaged");
    assert!(fs.read_file(std::path::Path::new(&damaged)).is_some());
    assert!(scrub_pass(&unthrottled(&fs), &sim_dir())
        .unwrap()
        .is_clean());

    // The newest one is left for a restart.
    let len = fs.read_file(&newest).unwrap().len() as u64;
    fs.flip_bit(&newest, len - 1, 2).unwrap();
    let mut pass = scrub_pass(&unthrottled(&fs), &sim_dir()).unwrap();
    let aside = keel_wal::set_aside_spare_snapshots(&fs, &sim_dir(), &mut pass).unwrap();
    assert!(aside.is_empty());
    assert_eq!(pass.findings.len(), 1);
    assert_eq!(pass.findings[0].path.as_ref(), Some(&newest));
}
