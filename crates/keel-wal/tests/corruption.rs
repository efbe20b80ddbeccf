//! Damage to stored data: flipped bits in acknowledged records, headers and snapshots, missing
//! segments, failing fsyncs. Acknowledged data is never silently truncated: recovery either
//! returns it intact or refuses with a typed error naming the file, offset and index.

mod common;

use std::path::{Path, PathBuf};

use common::{frames, item_payload, new_cluster, open_sim, segment, sim_dir, small_config};
use keel_core::{Index, LogId};
use keel_wal::conformance::{entries, hard_state, snapshot_meta, write};
use keel_wal::segment::{FRAME_HEADER_SIZE_BYTES, ITEM_HARD_STATE};
use keel_wal::{recover, Crash, SimFs, Wal, WalError};

fn snapshot_of(fs: &SimFs) -> Vec<(PathBuf, Vec<u8>)> {
    fs.paths()
        .into_iter()
        .map(|p| {
            let bytes = fs.read_file(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Three synced frames holding entries 1..=3, 4..=6, 7..=9; returns the frames' offsets.
fn three_frames() -> (SimFs, Vec<(u64, usize)>) {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    wal.write_batch(&[write(1, entries(1, 1, 3), Some(hard_state(1, Some(1), 0)))])
        .unwrap();
    wal.write_batch(&[write(2, entries(1, 4, 6), Some(hard_state(1, Some(1), 3)))])
        .unwrap();
    wal.write_batch(&[write(3, entries(1, 7, 9), Some(hard_state(1, Some(1), 6)))])
        .unwrap();
    drop(wal);
    let all = frames(&fs.read_file(&segment(1)).unwrap());
    assert_eq!(all.len(), 4, "checkpoint frame and three batches");
    (fs, all[1..].to_vec())
}

fn expect_corrupt_record(
    result: Result<impl Sized, WalError>,
    path: &Path,
    offset: u64,
    index: Index,
) {
    match result.map(|_| ()) {
        Err(WalError::CorruptRecord {
            path: p,
            offset: o,
            index: i,
            reason,
        }) => {
            assert_eq!((p.as_path(), o, i), (path, offset, index), "{reason}");
        }
        other => panic!("expected a corrupt record at {offset} (index {index}), got {other:?}"),
    }
}

#[test]
fn any_flipped_bit_in_an_acknowledged_middle_frame_is_reported_not_truncated() {
    let (fs, frames) = three_frames();
    let (offset, size) = frames[1];
    for at in offset..offset + size as u64 {
        let bit = (at % 8) as u8;
        fs.flip_bit(&segment(1), at, bit).unwrap();
        let before = snapshot_of(&fs);
        let result = Wal::open(fs.clone(), sim_dir(), small_config());
        expect_corrupt_record(result, &segment(1), offset, 4);
        expect_corrupt_record(recover(&fs, &sim_dir()), &segment(1), offset, 4);
        assert_eq!(
            snapshot_of(&fs),
            before,
            "a refused open must not change any file"
        );
        fs.flip_bit(&segment(1), at, bit).unwrap();
    }
    assert_eq!(
        open_sim(&fs).1.state.entries.len(),
        9,
        "flipped back: intact"
    );
}

/// The last frame was acknowledged too. A flipped bit in it is refused — except that damage to
/// its 16-byte header (magic, length, sequence number) may make it look torn, and then it is
/// discarded: the documented residual ambiguity. Nothing damaged is ever accepted.
#[test]
fn a_flipped_bit_in_the_last_frame_is_refused_unless_it_hits_the_frame_header() {
    let (fs, frames) = three_frames();
    let (offset, size) = frames[2];
    let mut discarded = 0;
    for at in offset..offset + size as u64 {
        let bit = (at % 8) as u8;
        fs.flip_bit(&segment(1), at, bit).unwrap();
        let result = Wal::open(fs.clone(), sim_dir(), small_config());
        if at < offset + FRAME_HEADER_SIZE_BYTES as u64 {
            if let Ok((_, rec)) = &result {
                assert_eq!(rec.state.entries.len(), 6, "flip at {at}");
                assert_eq!(rec.stats.torn_tail.as_ref().unwrap().offset, offset);
                discarded += 1;
                drop(result);
                return_to_original(&fs, offset, size);
                continue;
            }
        }
        expect_corrupt_record(result, &segment(1), offset, 7);
        fs.flip_bit(&segment(1), at, bit).unwrap();
    }
    assert!(discarded <= FRAME_HEADER_SIZE_BYTES, "{discarded}");
}

/// Re-creates the three frames after an open discarded (and zeroed) the last one.
fn return_to_original(fs: &SimFs, offset: u64, _size: usize) {
    let (mut wal, rec) = open_sim(fs);
    assert_eq!(rec.state.entries.len(), 6);
    wal.write_batch(&[write(3, entries(1, 7, 9), Some(hard_state(1, Some(1), 6)))])
        .unwrap();
    drop(wal);
    let again = frames(&fs.read_file(&segment(1)).unwrap());
    assert_eq!(
        again.last().unwrap().0,
        offset,
        "rewritten at the same offset"
    );
}

#[test]
fn a_torn_final_batch_is_discarded_even_with_a_flipped_bit_in_it() {
    let (fs, frames) = three_frames();
    let end = frames[2].0 + frames[2].1 as u64;
    let (mut wal, _) = open_sim(&fs);
    fs.kill_after_ops(1); // the write lands, its fsync never happens
    let batch = write(4, entries(1, 10, 40), Some(hard_state(1, Some(1), 9)));
    assert!(wal.write_batch(&[batch]).is_err());
    drop(wal);
    fs.crash_with(Crash::KeepPrefix {
        ops: 0,
        torn_bytes: 300,
    });
    fs.flip_bit(&segment(1), end + 100, 2).unwrap();
    let (_, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries.len(), 9);
    assert_eq!(rec.state.hard_state, hard_state(1, Some(1), 6));
    let torn = rec.stats.torn_tail.expect("reported");
    assert_eq!((torn.path, torn.offset), (segment(1), end));
}

/// S38 case 3: a damaged term or vote must never be rolled back silently, wherever it is.
#[test]
fn a_flipped_bit_in_a_hard_state_record_is_refused() {
    for last in [false, true] {
        let fs = SimFs::new();
        let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
        wal.write_batch(&[write(1, entries(4, 1, 3), Some(hard_state(4, None, 2)))])
            .unwrap();
        wal.write_batch(&[write(2, Vec::new(), Some(hard_state(5, Some(2), 2)))])
            .unwrap();
        if !last {
            wal.write_batch(&[write(3, entries(5, 4, 4), None)])
                .unwrap();
        }
        drop(wal);
        let bytes = fs.read_file(&segment(1)).unwrap();
        let vote_frame = frames(&bytes)[2].0;
        let term_at = item_payload(&bytes, vote_frame, ITEM_HARD_STATE);
        for (at, bit) in [(term_at, 0), (term_at + 8, 1), (term_at + 16, 0)] {
            fs.flip_bit(&segment(1), at, bit).unwrap();
            let result = Wal::open(fs.clone(), sim_dir(), small_config());
            expect_corrupt_record(result, &segment(1), vote_frame, 4);
            fs.flip_bit(&segment(1), at, bit).unwrap();
        }
        assert_eq!(open_sim(&fs).1.state.hard_state, hard_state(5, Some(2), 2));
    }
}

/// Writes enough to fill three segments; returns the file system.
fn three_segments() -> SimFs {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    let mut next = 1;
    let mut id = 1;
    while wal.segment_count() < 3 {
        wal.write_batch(&[write(
            id,
            entries(1, next, next + 39),
            Some(hard_state(1, None, next)),
        )])
        .unwrap();
        next += 40;
        id += 1;
    }
    fs
}

#[test]
fn damage_in_a_sealed_segment_is_refused() {
    let fs = three_segments();
    let bytes = fs.read_file(&segment(1)).unwrap();
    let (last_offset, last_size) = *frames(&bytes).last().unwrap();
    // The last frame of a sealed segment was synced before the next segment began.
    fs.flip_bit(&segment(1), last_offset + last_size as u64 - 12, 5)
        .unwrap();
    let result = Wal::open(fs.clone(), sim_dir(), small_config());
    assert!(
        matches!(&result, Err(WalError::CorruptRecord { path, offset, .. })
            if *path == segment(1) && *offset == last_offset),
        "{:?}",
        result.map(|_| ())
    );
}

#[test]
fn a_damaged_checkpoint_is_refused() {
    let fs = three_segments();
    let first = frames(&fs.read_file(&segment(2)).unwrap())[0].0;
    fs.flip_bit(&segment(2), first + 20, 0).unwrap();
    let err = Wal::open(fs.clone(), sim_dir(), small_config())
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(err, WalError::CorruptRecord { offset, .. } if offset == first),
        "{err}"
    );
}

#[test]
fn a_damaged_segment_header_is_refused() {
    let fs = three_segments();
    for at in [0, 9, 17, 30, 61] {
        fs.flip_bit(&segment(2), at, 3).unwrap();
        let err = Wal::open(fs.clone(), sim_dir(), small_config())
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(err, WalError::CorruptHeader { ref path, .. } if *path == segment(2)),
            "{err}"
        );
        assert!(err.is_corruption());
        fs.flip_bit(&segment(2), at, 3).unwrap();
    }
}

#[test]
fn a_missing_middle_segment_is_refused() {
    let fs = three_segments();
    use keel_wal::Fs;
    fs.remove_file(&segment(2)).unwrap();
    let err = Wal::open(fs.clone(), sim_dir(), small_config())
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, WalError::CorruptLog(_)), "{err}");
}

#[test]
fn a_failed_fsync_is_fatal_and_poisons_the_wal() {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    wal.write_batch(&[write(1, entries(1, 1, 2), Some(hard_state(1, None, 0)))])
        .unwrap();
    fs.fail_next_sync();
    let err = wal
        .write_batch(&[write(2, Vec::new(), Some(hard_state(2, Some(3), 0)))])
        .unwrap_err();
    assert!(
        matches!(err, WalError::SyncFailed { .. }) && err.is_fatal(),
        "{err}"
    );
    let again = wal
        .write_batch(&[write(3, entries(2, 3, 3), None)])
        .unwrap_err();
    assert!(matches!(again, WalError::Poisoned), "{again}");
    assert!(matches!(wal.purge_up_to(0), Err(WalError::Poisoned)));
    drop(wal);
    // The failed write may or may not have reached the disk; either state is consistent.
    fs.crash();
    let (_, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries.len(), 2);
    assert!([hard_state(1, None, 0), hard_state(2, Some(3), 0)].contains(&rec.state.hard_state));
}

fn snapshot_path(last: LogId) -> PathBuf {
    sim_dir().join(keel_wal::snapshot::snapshot_file_name(last))
}

#[test]
fn a_corrupt_newest_snapshot_falls_back_only_when_the_log_covers_the_gap() {
    let fs = three_segments();
    let (mut wal, rec) = open_sim(&fs);
    let last = rec.state.entries.last().unwrap().index;
    let older = LogId::new(1, 50);
    let newer = LogId::new(1, last - 10);
    wal.save_snapshot(&snapshot_meta(older, vec![]), b"older")
        .unwrap();
    wal.save_snapshot(&snapshot_meta(newer, vec![]), b"newer")
        .unwrap();
    drop(wal);

    // The log still holds everything after 50: fall back, and say so.
    fs.flip_bit(&snapshot_path(newer), 60, 1).unwrap();
    let (wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.snapshot, older);
    assert_eq!(rec.stats.skipped_snapshots.len(), 1);
    assert_eq!(rec.stats.skipped_snapshots[0].path, snapshot_path(newer));
    assert_eq!(rec.state.entries.first().unwrap().index, 51);
    drop(wal);
    fs.flip_bit(&snapshot_path(newer), 60, 1).unwrap();

    // Once the log is purged beyond 50, the older snapshot is no use: refuse.
    let (mut wal, _) = open_sim(&fs);
    assert!(wal.purge_up_to(newer.index).unwrap() > 0);
    drop(wal);
    fs.flip_bit(&snapshot_path(newer), 60, 1).unwrap();
    let err = Wal::open(fs.clone(), sim_dir(), small_config())
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&err, WalError::SnapshotBehindLog { snapshot, skipped, .. }
            if *snapshot == older && skipped == &vec![snapshot_path(newer)]),
        "{err}"
    );
}

#[test]
fn a_corrupt_only_snapshot_is_refused() {
    let fs = SimFs::new();
    let wal = new_cluster(fs.clone(), sim_dir(), small_config());
    drop(wal);
    fs.flip_bit(&snapshot_path(LogId::ZERO), 20, 0).unwrap();
    let err = Wal::open(fs.clone(), sim_dir(), small_config())
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, WalError::CorruptSnapshot { .. }), "{err}");
}

/// Entries 1..=3 synced, commit-only frames (3 then 4 if `two`), then entries 4..=5 synced with
/// `hard_state(1, Some(1), 5)`. Returns the offsets of the frames of segment 1.
fn commits_then_append(two: bool, sync_commits: bool) -> (SimFs, Vec<(u64, usize)>) {
    use keel_wal::conformance::commit_write;
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    wal.write_batch(&[write(1, entries(1, 1, 3), Some(hard_state(1, Some(1), 0)))])
        .unwrap();
    wal.write_batch(&[commit_write(2, hard_state(1, Some(1), 2))])
        .unwrap();
    if two {
        wal.write_batch(&[commit_write(3, hard_state(1, Some(1), 3))])
            .unwrap();
    }
    if sync_commits {
        // Nothing new: only makes the commit-only frames durable.
        wal.write_batch(&[write(4, Vec::new(), None)]).unwrap();
    }
    wal.write_batch(&[write(5, entries(1, 4, 5), None)])
        .unwrap();
    drop(wal);
    let all = frames(&fs.read_file(&segment(1)).unwrap());
    (fs, all)
}

/// Commit-only frames are appended, never overwritten, and the next frame supersedes them: when
/// they are damaged (a crash wrote that frame back but not them) recovery skips them, since the
/// superseding frame restates the commit. Nothing acknowledged is lost.
#[test]
fn damaged_commit_only_frames_superseded_by_a_later_frame_are_skipped() {
    for (two, damaged) in [(false, 0), (true, 0), (true, 1)] {
        let (fs, all) = commits_then_append(two, false);
        let commit_frames = if two { 2 } else { 1 };
        assert_eq!(all.len(), 2 + commit_frames + 1, "{all:?}");
        let (at, _) = all[2 + damaged];
        fs.flip_bit(&segment(1), at + FRAME_HEADER_SIZE_BYTES as u64 + 9, 0)
            .unwrap();
        let (_, rec) = open_sim(&fs);
        assert_eq!(rec.state.entries, entries(1, 1, 5));
        // The appended batch carried the latest commit along.
        let commit = if two { 3 } else { 2 };
        assert_eq!(rec.state.hard_state, hard_state(1, Some(1), commit));
        assert!(rec.stats.torn_tail.is_none());
        // Opening again skips them again.
        let (_, rec) = open_sim(&fs);
        assert_eq!(rec.state.entries, entries(1, 1, 5));
    }
}

/// Only unsynced commit-only frames are superseded: once a sync made them durable, the next
/// frame does not supersede them and damage to them is corruption like anywhere else.
#[test]
fn damaged_synced_commit_only_frame_is_corruption() {
    let (fs, all) = commits_then_append(false, true);
    assert_eq!(all.len(), 4, "{all:?}");
    let (at, _) = all[2];
    fs.flip_bit(&segment(1), at + FRAME_HEADER_SIZE_BYTES as u64 + 9, 0)
        .unwrap();
    expect_corrupt_record(open_sim_result(&fs), &segment(1), at, 4);
}

/// A superseding frame never excuses damage to the frame before the commit-only ones (here the
/// entries 1..=3): its supersede item does not reach back that far.
#[test]
fn a_supersede_item_does_not_excuse_damage_to_entries() {
    let (fs, all) = commits_then_append(true, false);
    let (at, size) = all[1];
    fs.flip_bit(&segment(1), at + size as u64 / 2, 3).unwrap();
    expect_corrupt_record(open_sim_result(&fs), &segment(1), at, 1);
}

fn open_sim_result(fs: &SimFs) -> Result<(), WalError> {
    Wal::open(fs.clone(), sim_dir(), small_config()).map(|_| ())
}
