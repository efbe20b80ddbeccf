//! Damage to stored data: flipped bits in acknowledged records, headers and snapshots, missing
//! segments, failing fsyncs. Acknowledged data is never silently truncated: recovery either
//! returns it intact or refuses with a damage report naming the file, offset and the index the
//! intact prefix reaches.

mod common;

use std::path::{Path, PathBuf};

use common::{files, frames, item_payload, new_cluster, open_sim, segment, sim_dir, small_config};
use keel_core::{Index, LogId};
use keel_wal::conformance::{entries, hard_state, snapshot_meta, write};
use keel_wal::segment::{FRAME_HEADER_SIZE_BYTES, ITEM_HARD_STATE};
use keel_wal::{recover, Crash, Damage, DamageKind, SimFs, Wal, WalError};

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

/// The first damage a refused open or recovery reports.
fn damage_of(result: Result<impl Sized, WalError>) -> Damage {
    match result.map(|_| ()) {
        Err(WalError::Damaged(report)) => report.damage[0].clone(),
        other => panic!("expected a damage report, got {other:?}"),
    }
}

/// A corrupt record at `offset` of `path`, the intact log ending just before `index`.
fn expect_corrupt_record(
    result: Result<impl Sized, WalError>,
    path: &Path,
    offset: u64,
    index: Index,
) {
    let d = damage_of(result);
    assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
    assert_eq!(
        (d.path.as_deref(), d.offset, d.intact_through + 1),
        (Some(path), Some(offset), index),
        "{d}"
    );
}

#[test]
fn any_flipped_bit_in_an_acknowledged_middle_frame_is_reported_not_truncated() {
    let (fs, frames) = three_frames();
    let (offset, size) = frames[1];
    for at in offset..offset + size as u64 {
        let bit = (at % 8) as u8;
        fs.flip_bit(&segment(1), at, bit).unwrap();
        let before = files(&fs);
        let result = Wal::open(fs.clone(), sim_dir(), small_config());
        expect_corrupt_record(result, &segment(1), offset, 4);
        expect_corrupt_record(recover(&fs, &sim_dir()), &segment(1), offset, 4);
        assert_eq!(
            files(&fs),
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

/// The last frame was acknowledged too. A flipped bit in it is refused: as a corrupt record, or,
/// where damage to its 16-byte header (magic, length, sequence number) makes it look torn, as a
/// log that ends below the promise. Before the promise record such a frame was discarded as a
/// torn tail. Nothing damaged is ever accepted, and nothing is changed on disk.
#[test]
fn a_flipped_bit_in_the_last_frame_is_refused_even_where_it_looks_torn() {
    let (fs, frames) = three_frames();
    let (offset, size) = frames[2];
    let mut looked_torn = 0;
    for at in offset..offset + size as u64 {
        let bit = (at % 8) as u8;
        fs.flip_bit(&segment(1), at, bit).unwrap();
        let before = files(&fs);
        let d = damage_of(Wal::open(fs.clone(), sim_dir(), small_config()));
        if d.kind == DamageKind::LostTail {
            assert!(
                at < offset + FRAME_HEADER_SIZE_BYTES as u64,
                "flip at {at}: {d}"
            );
            assert_eq!(
                (d.promised, d.intact_through),
                (Some(LogId::new(1, 9)), 6),
                "{d}"
            );
            looked_torn += 1;
        } else {
            expect_corrupt_record(Err::<(), _>(damage_error(&fs)), &segment(1), offset, 7);
        }
        assert_eq!(
            files(&fs),
            before,
            "flip at {at}: a refused open changes nothing"
        );
        fs.flip_bit(&segment(1), at, bit).unwrap();
    }
    assert!(looked_torn <= FRAME_HEADER_SIZE_BYTES, "{looked_torn}");
}

fn damage_error(fs: &SimFs) -> WalError {
    Wal::open(fs.clone(), sim_dir(), small_config())
        .map(|_| ())
        .unwrap_err()
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
    let d = damage_of(Wal::open(fs.clone(), sim_dir(), small_config()));
    assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
    assert_eq!(
        (d.path.as_deref(), d.offset),
        (Some(segment(1).as_path()), Some(last_offset)),
        "{d}"
    );
    // The intact prefix ends before the damaged frame's entries (segment 1 holds 20 batches of
    // 40: the last one, 761..=800, is damaged).
    assert_eq!(d.intact_through, 760, "{d}");
}

#[test]
fn a_damaged_checkpoint_is_refused() {
    let fs = three_segments();
    let first = frames(&fs.read_file(&segment(2)).unwrap())[0].0;
    fs.flip_bit(&segment(2), first + 20, 0).unwrap();
    let d = damage_of(Wal::open(fs.clone(), sim_dir(), small_config()));
    assert_eq!(
        (d.kind, d.offset),
        (DamageKind::CorruptLog, Some(first)),
        "{d}"
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
        assert!(err.is_corruption());
        let d = damage_of(Err::<(), _>(err));
        assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
        assert_eq!(d.path, Some(segment(2)), "{d}");
        assert!(d.detail.starts_with("segment header"), "{d}");
        fs.flip_bit(&segment(2), at, 3).unwrap();
    }
}

#[test]
fn a_missing_middle_segment_is_refused() {
    let fs = three_segments();
    use keel_wal::Fs;
    fs.remove_file(&segment(2)).unwrap();
    let d = damage_of(Wal::open(fs.clone(), sim_dir(), small_config()));
    assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
    assert!(d.detail.contains("segment 2 is missing"), "{d}");
    // Segment 1 (20 batches of 40 entries) is intact; nothing after the gap is used.
    assert_eq!(d.intact_through, 800, "{d}");
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

/// A snapshot that fails its checksums is damage, even when an older one and the log still
/// cover everything (the report then says the intact state reaches the log's end); once the log
/// is purged beyond the older one, the intact state ends at the older snapshot.
#[test]
fn a_corrupt_newest_snapshot_is_damage_and_the_report_says_how_far_the_rest_reaches() {
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

    // The log still holds everything after 50: nothing is lost, but the file is damaged.
    fs.flip_bit(&snapshot_path(newer), 60, 1).unwrap();
    let report = match Wal::open(fs.clone(), sim_dir(), small_config()) {
        Err(WalError::Damaged(report)) => report,
        other => panic!("{:?}", other.map(|_| ())),
    };
    assert_eq!(report.damage.len(), 1, "{report}");
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::CorruptSnapshot, "{d}");
    assert_eq!(d.path, Some(snapshot_path(newer)), "{d}");
    assert_eq!(d.intact_through, last, "{d}");
    assert_eq!(report.recovered.state.snapshot, older);
    assert_eq!(report.recovered.state.entries.first().unwrap().index, 51);
    fs.flip_bit(&snapshot_path(newer), 60, 1).unwrap();

    // Once the log is purged beyond 50, the older snapshot is all that is left.
    let (mut wal, _) = open_sim(&fs);
    assert!(wal.purge_up_to(newer.index).unwrap() > 0);
    drop(wal);
    fs.flip_bit(&snapshot_path(newer), 60, 1).unwrap();
    let report = match Wal::open(fs.clone(), sim_dir(), small_config()) {
        Err(WalError::Damaged(report)) => report,
        other => panic!("{:?}", other.map(|_| ())),
    };
    assert!(
        report
            .damage
            .iter()
            .all(|d| d.kind == DamageKind::CorruptSnapshot && d.intact_through == older.index),
        "{report}"
    );
    assert!(
        report.to_string().contains("the log starts at index"),
        "{report}"
    );
}

#[test]
fn a_corrupt_only_snapshot_is_refused() {
    let fs = SimFs::new();
    let wal = new_cluster(fs.clone(), sim_dir(), small_config());
    drop(wal);
    fs.flip_bit(&snapshot_path(LogId::ZERO), 20, 0).unwrap();
    let d = damage_of(Wal::open(fs.clone(), sim_dir(), small_config()));
    assert_eq!(d.kind, DamageKind::CorruptSnapshot, "{d}");
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
