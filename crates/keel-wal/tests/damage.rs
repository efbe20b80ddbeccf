//! Recovery against the promise record: what is damage (acknowledged data lost or corrupt, a
//! corrupt snapshot or promise) and what is only a torn final write. A damaged directory is
//! refused with a report of every finding and the intact prefix, and nothing on disk changes.

mod common;

use std::path::PathBuf;

use common::{
    files, first_damage, frames, new_cluster, open_sim, segment, sim_dir, small_config,
    snapshot_files,
};
use keel_core::{Index, LogId};
use keel_wal::conformance::{entries, hard_state, snapshot_meta, write};
use keel_wal::promise::{read_promise, PROMISE_FILE_NAME, PROMISE_SLOT_STRIDE_BYTES};
use keel_wal::{inspect, Crash, DamageKind, FileHandle, Fs, SimFs, Wal, WalError};

/// A log of `batches` synced batches of 10 entries each, in term 1, all acknowledged.
fn acknowledged(batches: u64) -> SimFs {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    for b in 0..batches {
        let from = b * 10 + 1;
        let hs = hard_state(1, Some(1), from - 1);
        wal.write_batch(&[write(b + 1, entries(1, from, from + 9), Some(hs))])
            .unwrap();
    }
    assert_eq!(
        wal.promise().unwrap().acked,
        LogId::new(1, batches * 10),
        "the promise covers every synced batch"
    );
    drop(wal);
    fs
}

/// Overwrites `[from, to)` of `path` with zeros, durably: a disk that lost writes it had
/// reported flushed reads back zeros there.
fn zero_fill(fs: &SimFs, path: &std::path::Path, from: u64, to: u64) {
    let mut file = fs.open(path).unwrap();
    file.write_at(&vec![0; (to - from) as usize], from).unwrap();
    file.sync_data().unwrap();
}

/// The last segment holding frames (a spare prepared ahead holds none).
fn last_segment(fs: &SimFs) -> PathBuf {
    let mut names: Vec<_> = fs
        .list_dir(&sim_dir())
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    names
        .iter()
        .rev()
        .map(|n| sim_dir().join(n))
        .find(|p| !frames(&fs.read_file(p).unwrap()).is_empty())
        .unwrap()
}

fn refused(fs: &SimFs) -> Box<keel_wal::DamageReport> {
    let before = files(fs);
    let report = match Wal::open(fs.clone(), sim_dir(), small_config()) {
        Err(WalError::Damaged(report)) => report,
        other => panic!("expected damage, got {:?}", other.map(|_| ())),
    };
    assert_eq!(files(fs), before, "a refused open changes nothing");
    // The read-only paths say the same.
    let inspection = inspect(fs, &sim_dir()).unwrap();
    assert_eq!(inspection.damage, report.damage);
    assert!(keel_wal::recover(fs, &sim_dir()).is_err());
    report
}

fn last_index(report: &keel_wal::DamageReport) -> Index {
    let state = &report.recovered.state;
    state
        .entries
        .last()
        .map_or(state.snapshot.index, |e| e.index)
}

/// Six acknowledged batches (entries 1..=60) whose last two frames read back as zeros.
fn six_batches_the_last_two_lost() -> SimFs {
    let fs = acknowledged(6);
    lose_the_last_two_frames(&fs);
    fs
}

/// Zero-fills the last two frames of the last segment holding any.
fn lose_the_last_two_frames(fs: &SimFs) {
    let seg = last_segment(fs);
    let frames = frames(&fs.read_file(&seg).unwrap());
    let (from, _) = frames[frames.len() - 2];
    let (last, size) = frames[frames.len() - 1];
    zero_fill(fs, &seg, from, last + size as u64);
}

#[test]
fn a_zero_filled_tail_below_the_promise_is_damage_not_a_torn_tail() {
    let fs = six_batches_the_last_two_lost();
    let report = refused(&fs);
    assert_eq!(report.damage.len(), 1, "{report}");
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::LostTail, "{d}");
    assert_eq!(d.promised, Some(LogId::new(1, 60)));
    assert_eq!(d.intact_through, 40, "{d}");
    assert!(d.detail.contains("20 acknowledged entries are gone"), "{d}");
    // The intact prefix: everything before the lost frames, and the hard state kept.
    assert_eq!(last_index(&report), 40);
    assert_eq!(report.recovered.state.hard_state.term, 1);
    assert_eq!(report.recovered.state.hard_state.vote, Some(1));
    assert!(report.to_string().contains("lost-tail"), "{report}");
}

#[test]
fn a_flipped_byte_in_an_older_segment_is_damage_with_the_intact_prefix() {
    let fs = acknowledged(200);
    let first = frames(&fs.read_file(&segment(1)).unwrap());
    assert_ne!(last_segment(&fs), segment(1), "segment 1 is sealed");
    // The third batch of segment 1 (entries 21..=30).
    let (at, size) = first[3];
    fs.flip_bit(&segment(1), at + size as u64 / 2, 6).unwrap();
    let report = refused(&fs);
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
    assert_eq!(d.path, Some(segment(1)));
    assert_eq!(d.offset, Some(at));
    assert_eq!(d.intact_through, 20, "{d}");
    assert_eq!(d.promised, Some(LogId::new(1, 2000)));
    assert_eq!(last_index(&report), 20);
    assert_eq!(report.recovered.state.entries, entries(1, 1, 20));
    // The commit is clamped into the intact prefix.
    assert!(report.recovered.state.hard_state.commit <= 20);
}

#[test]
fn a_torn_tail_above_the_promise_is_truncated_without_damage() {
    // The batch's frame is about 400 bytes.
    for torn_bytes in [1, 40, 200, 1000] {
        let fs = acknowledged(3);
        let (mut wal, _) = open_sim(&fs);
        // The batch's write is issued, and the process dies before its fsync.
        fs.kill_after_ops(1);
        let hs = hard_state(1, Some(1), 30);
        assert!(wal
            .write_batch(&[write(9, entries(1, 31, 40), Some(hs))])
            .is_err());
        drop(wal);
        // The batch's write is the last change issued.
        fs.crash_with(Crash::KeepPrefix {
            ops: fs.unsynced_ops() - 1,
            torn_bytes,
        });
        let promise = read_promise(&fs, &sim_dir()).unwrap().promise().unwrap();
        assert_eq!(promise.acked, LogId::new(1, 30));
        let (wal, rec) = Wal::open(fs.clone(), sim_dir(), small_config())
            .unwrap_or_else(|e| panic!("torn after {torn_bytes} bytes: {e}"));
        let last = rec.state.entries.last().unwrap().index;
        if torn_bytes < 300 {
            assert_eq!(last, 30, "torn after {torn_bytes} bytes");
            assert!(
                rec.stats.torn_tail.is_some(),
                "torn after {torn_bytes} bytes"
            );
        } else {
            // The whole frame reached the disk: durable, if never acknowledged.
            assert_eq!(last, 40, "kept {torn_bytes} bytes");
        }
        // What the node now holds and will act on is promised.
        assert_eq!(wal.promise().unwrap().acked, LogId::new(1, last));
    }
}

#[test]
fn a_deleted_last_segment_is_a_lost_tail() {
    let fs = acknowledged(200);
    let last = last_segment(&fs);
    assert_ne!(last, segment(1));
    fs.remove_file(&last).unwrap();
    let report = refused(&fs);
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::LostTail, "{d}");
    assert!(d.intact_through < 2000, "{d}");
}

#[test]
fn a_lost_vote_is_damage() {
    let fs = acknowledged(2);
    let (mut wal, _) = open_sim(&fs);
    wal.write_batch(&[write(5, Vec::new(), Some(hard_state(2, Some(3), 20)))])
        .unwrap();
    assert_eq!(wal.promise().unwrap().vote, Some(3));
    drop(wal);
    let seg = last_segment(&fs);
    let all = frames(&fs.read_file(&seg).unwrap());
    let (at, size) = *all.last().unwrap();
    zero_fill(&fs, &seg, at, at + size as u64);
    let report = refused(&fs);
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::LostTail, "{d}");
    assert!(d.detail.contains("behind the promised term 2"), "{d}");
    // The intact prefix never goes back on the vote: it takes the promised one.
    assert_eq!(report.recovered.state.hard_state.term, 2);
    assert_eq!(report.recovered.state.hard_state.vote, Some(3));
}

#[test]
fn both_promise_copies_corrupt_is_damage_one_is_not() {
    let fs = acknowledged(3);
    let path = sim_dir().join(PROMISE_FILE_NAME);
    fs.flip_bit(&path, 20, 0).unwrap();
    fs.flip_bit(&path, PROMISE_SLOT_STRIDE_BYTES + 20, 0)
        .unwrap();
    let report = refused(&fs);
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::CorruptPromise, "{d}");
    assert_eq!((d.promised, d.intact_through), (None, 30), "{d}");
    // One good copy: opens (on the older promise, if the newer one was hit), and the next write
    // replaces the bad copy.
    fs.flip_bit(&path, 20, 0).unwrap();
    let (mut wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries.len(), 30);
    wal.write_batch(&[write(7, entries(1, 31, 31), None)])
        .unwrap();
    let read = read_promise(&fs, &sim_dir()).unwrap();
    assert!(read
        .slots
        .iter()
        .all(|s| !matches!(s, keel_wal::promise::SlotState::Corrupt(_))));
}

/// A directory from before the promise record (or one whose promise file was lost: that loss is
/// undetectable) opens and gets a promise covering its log.
#[test]
fn a_missing_promise_file_is_created_from_the_log() {
    let fs = acknowledged(3);
    fs.remove_file(&sim_dir().join(PROMISE_FILE_NAME)).unwrap();
    fs.sync_dir(&sim_dir()).unwrap();
    let (wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries.len(), 30);
    assert_eq!(wal.promise().unwrap().acked, LogId::new(1, 30));
    let read = read_promise(&fs, &sim_dir()).unwrap();
    assert_eq!(read.promise().unwrap().acked, LogId::new(1, 30));
}

/// A snapshot from a leader that replaces entries past the promise, adopted, with a crash before
/// the install reached the log: recovery drops the conflicting entries, which is no damage (they
/// were never committed).
#[test]
fn an_interrupted_install_over_promised_entries_is_not_damage() {
    let fs = acknowledged(3);
    let (mut wal, _) = open_sim(&fs);
    // The leader's snapshot at 25 has another term than the local entry 25.
    wal.save_snapshot(&snapshot_meta(LogId::new(2, 25), vec![]), b"leader")
        .unwrap();
    drop(wal);
    let (wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.snapshot, LogId::new(2, 25));
    assert!(rec.state.entries.is_empty());
    assert_eq!(wal.promise().unwrap().acked, LogId::new(2, 25));
}

/// A follower overwriting entries below its promise lowers the promise first: a crash at any
/// point of that batch opens without damage.
#[test]
fn a_truncation_below_the_promise_never_reads_as_damage() {
    let reference = acknowledged(3);
    let (mut wal, _) = open_sim(&reference);
    let base = reference.op_count();
    let rewrite = write(9, entries(2, 15, 16), Some(hard_state(2, None, 10)));
    wal.write_batch(std::slice::from_ref(&rewrite)).unwrap();
    assert_eq!(wal.promise().unwrap().acked, LogId::new(2, 16));
    let ops = reference.op_count() - base;
    drop(wal);
    for crash_after in 0..ops {
        for crash in [
            Crash::LoseUnsynced,
            Crash::KeepPrefix {
                ops: usize::MAX,
                torn_bytes: 0,
            },
            Crash::Scramble { seed: crash_after },
        ] {
            let fs = acknowledged(3);
            let (mut wal, _) = open_sim(&fs);
            fs.kill_after_ops(crash_after);
            assert!(wal.write_batch(std::slice::from_ref(&rewrite)).is_err());
            drop(wal);
            fs.crash_with(crash);
            let (_, rec) = Wal::open(fs.clone(), sim_dir(), small_config())
                .unwrap_or_else(|e| panic!("crash after {crash_after} ops, {crash:?}: {e}"));
            let last = rec.state.entries.last().unwrap().log_id();
            assert!(
                [LogId::new(1, 30), LogId::new(2, 16)].contains(&last),
                "{last}"
            );
        }
    }
}

/// A lost tail after a truncation lowered and raised the promise again is still seen.
#[test]
fn a_lost_tail_after_a_truncation_is_still_seen() {
    let fs = acknowledged(3);
    let (mut wal, _) = open_sim(&fs);
    wal.write_batch(&[write(9, entries(2, 15, 16), Some(hard_state(2, None, 10)))])
        .unwrap();
    drop(wal);
    let seg = last_segment(&fs);
    let (at, size) = *frames(&fs.read_file(&seg).unwrap()).last().unwrap();
    zero_fill(&fs, &seg, at, at + size as u64);
    let d = first_damage(Err::<(), _>(WalError::Damaged(refused(&fs))));
    assert_eq!(d.kind, DamageKind::LostTail, "{d}");
    assert_eq!(d.promised, Some(LogId::new(2, 16)), "{d}");
}

/// One device flush per group commit: the promise raised by a batch rides on the next batch's
/// log fsync, and only an idle log needs a flush of its own ([`Wal::flush_promise`]).
#[test]
fn the_promise_rides_on_the_next_group_commit_and_never_costs_a_flush_of_its_own() {
    let fs = acknowledged(1);
    let (mut wal, _) = open_sim(&fs);
    assert!(!wal.promise_unflushed(), "open leaves the promise durable");
    for b in 1..=5u64 {
        let from = b * 10 + 1;
        let syncs = fs.sync_count();
        wal.write_batch(&[write(b + 1, entries(1, from, from + 9), None)])
            .unwrap();
        assert_eq!(fs.sync_count(), syncs + 1, "batch {b}: one flush");
        assert!(wal.promise_unflushed());
        assert_eq!(wal.promise().unwrap().acked, LogId::new(1, from + 9));
    }
    // A crash now keeps the promise of the batch before the last: it trails by one group commit,
    // and is never ahead of the log.
    fs.crash();
    let durable = read_promise(&fs, &sim_dir()).unwrap().promise().unwrap();
    assert_eq!(durable.acked, LogId::new(1, 50));
    let (mut wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries.last().unwrap().index, 60);
    // An idle log flushes it on its own, once.
    wal.write_batch(&[write(9, entries(1, 61, 70), None)])
        .unwrap();
    let syncs = fs.sync_count();
    assert!(wal.flush_promise().unwrap());
    assert!(!wal.flush_promise().unwrap(), "nothing left to flush");
    assert_eq!(fs.sync_count(), syncs + 1);
    fs.crash();
    let durable = read_promise(&fs, &sim_dir()).unwrap().promise().unwrap();
    assert_eq!(durable.acked, LogId::new(1, 70));
}

/// With the promise written once per N batches (the default is 16), the durable promise trails
/// the log by at most N group commits, and still costs no flush of its own.
#[test]
fn a_promise_written_every_fourth_batch_trails_by_at_most_four() {
    let config = keel_wal::WalConfig {
        promise_write_every_batches: 4,
        ..small_config()
    };
    let fs = acknowledged(1);
    let (mut wal, _) = Wal::open(fs.clone(), sim_dir(), config.clone()).unwrap();
    for b in 1..=9u64 {
        let from = b * 10 + 1;
        let syncs = fs.sync_count();
        wal.write_batch(&[write(b + 1, entries(1, from, from + 9), None)])
            .unwrap();
        assert_eq!(fs.sync_count(), syncs + 1, "batch {b}: one flush");
        assert_eq!(wal.promise().unwrap().acked, LogId::new(1, from + 9));
    }
    // Raises 4 and 8 were written; 8's rode on batch 9's fsync.
    fs.crash();
    let durable = read_promise(&fs, &sim_dir()).unwrap().promise().unwrap();
    assert_eq!(durable.acked, LogId::new(1, 90));
    let (_, rec) = Wal::open(fs.clone(), sim_dir(), config).unwrap();
    assert_eq!(rec.state.entries.last().unwrap().index, 100);
}

/// `open_repairing` opens a log that lost its tail on the intact prefix and keeps the promise as a
/// floor: until the log holds the promised index again, every open finds the same damage; then it
/// is clean.
#[test]
fn a_lost_tail_is_opened_on_its_intact_prefix_and_the_promise_kept_until_the_log_is_whole() {
    let fs = six_batches_the_last_two_lost();
    let (mut wal, rec, report) =
        Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    let report = report.expect("the damage is reported");
    assert_eq!(report.damage[0].kind, DamageKind::LostTail);
    assert_eq!(report.damage[0].promised, Some(LogId::new(1, 60)));
    assert_eq!(rec.state.entries.last().unwrap().index, 40);
    assert_eq!(wal.promise().unwrap().acked, LogId::new(1, 60), "kept");
    // Entries 41..=50 arrive: still below the promise, which stays.
    wal.write_batch(&[write(20, entries(1, 41, 50), None)])
        .unwrap();
    assert_eq!(wal.promise().unwrap().acked, LogId::new(1, 60));
    drop(wal);
    fs.crash();
    let (mut wal, rec, report) =
        Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_some(), "still below the promise after a crash");
    assert_eq!(rec.state.entries.last().unwrap().index, 50);
    // Through the promised index (from a leader of a later term, say): whole, the floor gone.
    wal.write_batch(&[write(21, entries(2, 51, 65), Some(hard_state(2, None, 50)))])
        .unwrap();
    assert!(wal.flush_promise().unwrap() || !wal.promise_unflushed());
    assert_eq!(wal.promise().unwrap().acked, LogId::new(2, 65));
    drop(wal);
    fs.crash();
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_none(), "{report:?}");
    assert_eq!(rec.state.entries.last().unwrap().index, 65);
    // Plain open agrees.
    assert!(Wal::open(fs.clone(), sim_dir(), small_config()).is_ok());
}

/// The floor ends where keel-core's recovery ends: once the log's last entry is at least as up
/// to date as the promise, in Raft's order. A leader of a later term whose log is shorter
/// replaced the promised entries (they were never committed); the node's log continues in that
/// term below the promised index, and the next open finds nothing lost (it reported a lost
/// tail while the floor waited for the index; simulator, storage faults).
#[test]
fn a_later_term_below_the_promised_index_ends_the_floor() {
    let fs = six_batches_the_last_two_lost();
    let (mut wal, rec, report) =
        Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert_eq!(report.unwrap().recover_to(), Some(LogId::new(1, 60)));
    assert_eq!(rec.state.entries.last().unwrap().index, 40);
    wal.write_batch(&[write(20, entries(2, 41, 45), Some(hard_state(2, None, 40)))])
        .unwrap();
    assert_eq!(wal.promise().unwrap().acked, LogId::new(2, 45));
    // Durable at once, not with a later group commit: until then a crash would find the log
    // below the promised index.
    assert!(!wal.promise_unflushed());
    drop(wal);
    fs.crash();
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_none(), "{report:?}");
    assert_eq!(
        rec.state.entries.last().unwrap().log_id(),
        LogId::new(2, 45)
    );
}

/// The core lets go of the promise it recovered to (keel-core's `node/repair.rs`: the peers that
/// lack the lost entries show no commit counted them): the record drops to the log's end and the
/// floor goes, flushed before the batch returns, so the next open finds nothing lost. A release
/// must be synced.
#[test]
fn a_released_promise_ends_the_floor_below_the_promised_index() {
    let fs = six_batches_the_last_two_lost();
    let (mut wal, _, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert_eq!(report.unwrap().recover_to(), Some(LogId::new(1, 60)));
    let release = |id, sync| keel_core::Write {
        release_promise: true,
        lower_promise_to: None,
        sync,
        ..write(id, Vec::new(), None)
    };
    assert!(matches!(
        wal.write_batch(&[release(20, false)]),
        Err(WalError::InvalidRequest(_))
    ));
    wal.write_batch(&[release(21, true)]).unwrap();
    assert_eq!(wal.promise().unwrap().acked, LogId::new(1, 40));
    assert!(!wal.promise_unflushed());
    drop(wal);
    fs.crash();
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_none(), "{report:?}");
    assert_eq!(rec.state.entries.last().unwrap().index, 40);
    assert!(Wal::open(fs.clone(), sim_dir(), small_config()).is_ok());
}

/// The core lowered the promise it recovers to, to an entry committed in the cluster that the
/// log does not hold (keel-core's `node/repair.rs`): the record names that entry, flushed before
/// the batch returns, and stays there as the floor until the log reaches it; a restart meanwhile
/// recovers to it. A lowering must be synced.
#[test]
fn a_promise_lowered_to_a_committed_entry_beyond_the_log_is_the_new_floor() {
    let fs = six_batches_the_last_two_lost();
    let (mut wal, _, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert_eq!(report.unwrap().recover_to(), Some(LogId::new(1, 60)));
    let point = LogId::new(1, 50);
    let lower = |id, sync| keel_core::Write {
        lower_promise_to: Some(point),
        sync,
        ..write(id, Vec::new(), None)
    };
    assert!(matches!(
        wal.write_batch(&[lower(20, false)]),
        Err(WalError::InvalidRequest(_))
    ));
    wal.write_batch(&[lower(21, true)]).unwrap();
    let promise = wal.promise().unwrap();
    assert_eq!(
        (promise.acked, promise.starts.as_slice()),
        (point, &[point][..])
    );
    assert!(!wal.promise_unflushed());
    drop(wal);
    fs.crash();
    let (mut wal, _, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    let report = report.expect("still below the lowered promise");
    assert_eq!(report.recover_to(), Some(point));
    assert_eq!(report.former_terms, vec![point]);
    // Reaching it ends the floor.
    wal.write_batch(&[write(
        22,
        entries(1, 41, 50),
        Some(hard_state(1, Some(1), 40)),
    )])
    .unwrap();
    assert_eq!(wal.promise().unwrap().acked, point);
    drop(wal);
    fs.crash();
    let (_, _, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_none(), "{report:?}");
}

/// The promise record keeps the first index of each of the log's last terms, and a lost tail's
/// report hands them on: keel-core's repair tells peers by them which of their entries are the
/// lost ones.
#[test]
fn the_promise_keeps_the_terms_of_the_log_and_a_lost_tail_reports_them() {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    for b in 0..6u64 {
        let (from, term) = (b * 10 + 1, b / 2 + 1);
        let hs = hard_state(term, Some(1), from - 1);
        wal.write_batch(&[write(b + 1, entries(term, from, from + 9), Some(hs))])
            .unwrap();
    }
    let terms = [LogId::new(1, 1), LogId::new(2, 21), LogId::new(3, 41)];
    let promise = wal.promise().unwrap();
    assert!(promise.starts.as_slice().ends_with(&terms), "{promise:?}");
    drop(wal);
    lose_the_last_two_frames(&fs);
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    let report = report.expect("a lost tail");
    assert_eq!(report.recover_to(), Some(LogId::new(3, 60)));
    assert_eq!(
        rec.state.entries.last().unwrap().log_id(),
        LogId::new(2, 40)
    );
    assert!(report.former_terms.ends_with(&terms), "{report:?}");
}

/// A lost tail that leaves the log ending below the newest snapshot: the repaired WAL continues
/// after the snapshot, as a clean open of such a log does (its reset was dropped with the
/// damage, so the WAL's last index stayed at the log's end and the next entries were refused;
/// simulator, storage faults).
#[test]
fn a_lost_tail_below_the_snapshot_continues_after_the_snapshot() {
    let fs = acknowledged(6);
    let (mut wal, _) = Wal::open(fs.clone(), sim_dir(), small_config()).unwrap();
    wal.save_snapshot(&snapshot_meta(LogId::new(1, 55), vec![]), b"state")
        .unwrap();
    drop(wal);
    lose_the_last_two_frames(&fs);
    let (mut wal, rec, report) =
        Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    let report = report.expect("the lost tail is reported");
    assert_eq!(report.damage[0].kind, DamageKind::LostTail, "{report}");
    assert_eq!(report.recover_to(), Some(LogId::new(1, 60)));
    assert_eq!(rec.state.snapshot, LogId::new(1, 55));
    assert!(rec.state.entries.is_empty(), "reset to the snapshot");
    assert_eq!(wal.last_index(), 55, "the log's end agrees with the state");
    assert_eq!(wal.promise().unwrap().acked, LogId::new(1, 60), "kept");
    wal.write_batch(&[write(
        30,
        entries(1, 56, 60),
        Some(hard_state(1, Some(1), 55)),
    )])
    .unwrap();
    drop(wal);
    fs.crash();
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_none(), "{report:?}");
    assert_eq!(
        rec.state.entries.last().unwrap().log_id(),
        LogId::new(1, 60)
    );
}

/// A flipped byte in an older segment: `open_repairing` sets that segment and every later one
/// aside (renamed, not deleted) and opens what remains as a log that lost its tail, keeping the
/// promise, the term and the vote.
#[test]
fn open_repairing_sets_a_corrupt_segment_and_the_later_ones_aside() {
    let fs = acknowledged(200);
    let first = frames(&fs.read_file(&segment(1)).unwrap());
    let (at, size) = first[3];
    fs.flip_bit(&segment(1), at + size as u64 / 2, 6).unwrap();
    let names = |fs: &SimFs| fs.list_dir(&sim_dir()).unwrap();
    let segments_before: Vec<String> = names(&fs)
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    assert!(segments_before.len() > 2);
    let (mut wal, rec, report) =
        Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    let report = report.expect("reported");
    let kinds: Vec<DamageKind> = report.damage.iter().map(|d| d.kind).collect();
    assert_eq!(kinds[0], DamageKind::CorruptLog, "{report}");
    assert!(
        kinds[1..].iter().all(|k| *k == DamageKind::LostTail) && kinds.len() > 1,
        "{report}"
    );
    // Every segment from the corrupt one on is set aside; nothing is deleted.
    let after = names(&fs);
    for name in &segments_before {
        assert!(
            after.contains(&format!("{name}.damaged")),
            "{name}: {after:?}"
        );
    }
    assert!(rec.state.entries.is_empty());
    assert_eq!(
        (rec.state.hard_state.term, rec.state.hard_state.vote),
        (1, Some(1))
    );
    assert_eq!(wal.promise().unwrap().acked, LogId::new(1, 2000));
    // The leader's entries make it whole.
    wal.write_batch(&[write(300, entries(1, 1, 2000), None)])
        .unwrap();
    drop(wal);
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    assert!(report.is_none(), "{report:?}");
    assert_eq!(rec.state.entries.len(), 2000);
}

#[test]
fn open_repairing_refuses_a_corrupt_promise_record() {
    let fs = acknowledged(3);
    let path = sim_dir().join(PROMISE_FILE_NAME);
    fs.flip_bit(&path, 20, 0).unwrap();
    fs.flip_bit(&path, PROMISE_SLOT_STRIDE_BYTES + 20, 0)
        .unwrap();
    let before = files(&fs);
    match Wal::open_repairing(fs.clone(), sim_dir(), small_config()) {
        Err(WalError::Damaged(report)) => {
            assert_eq!(report.damage[0].kind, DamageKind::CorruptPromise)
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    assert_eq!(files(&fs), before);
}

/// A new term or vote is in the promise record, durably, when the batch that records it returns:
/// a repair that sets the newest segments aside still knows it.
#[test]
fn a_vote_is_flushed_to_the_promise_before_the_batch_returns() {
    let config = keel_wal::WalConfig {
        promise_write_every_batches: 16,
        ..small_config()
    };
    let fs = acknowledged(2);
    let (mut wal, _) = Wal::open(fs.clone(), sim_dir(), config).unwrap();
    let syncs = fs.sync_count();
    wal.write_batch(&[write(5, Vec::new(), Some(hard_state(2, Some(3), 20)))])
        .unwrap();
    assert_eq!(
        fs.sync_count(),
        syncs + 2,
        "the log's fsync and the promise's"
    );
    assert!(!wal.promise_unflushed());
    fs.crash();
    let durable = read_promise(&fs, &sim_dir()).unwrap().promise().unwrap();
    assert_eq!((durable.term, durable.vote), (2, Some(3)));
}

/// The bootstrap snapshot (0/0) is never pruned: it alone holds the initial configuration. With
/// every newer snapshot damaged and set aside, `open_repairing` falls back to it, and a log that
/// starts at index 1 replays under the initial configuration, not an empty one (simulator seed
/// 21072088: the node replayed its whole log as a member of nothing and never campaigned again).
#[test]
fn every_newer_snapshot_damaged_falls_back_to_the_bootstrap_snapshot() {
    let fs = acknowledged(6);
    let (mut wal, _) = Wal::open(fs.clone(), sim_dir(), small_config()).unwrap();
    for index in [20, 40, 55] {
        wal.save_snapshot(&snapshot_meta(LogId::new(1, index), vec![]), b"state")
            .unwrap();
    }
    drop(wal);
    let snapshots = snapshot_files(&fs);
    let names: Vec<String> = snapshots
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            keel_wal::snapshot_file_name(LogId::ZERO),
            keel_wal::snapshot_file_name(LogId::new(1, 40)),
            keel_wal::snapshot_file_name(LogId::new(1, 55)),
        ],
        "the two newest kept, and the bootstrap one"
    );
    for newer in &snapshots[1..] {
        let len = fs.read_file(newer).unwrap().len() as u64;
        fs.flip_bit(newer, len - 1, 3).unwrap();
    }
    let (_, rec, report) = Wal::open_repairing(fs.clone(), sim_dir(), small_config()).unwrap();
    let report = report.expect("reported");
    let corrupt = report
        .damage
        .iter()
        .filter(|d| d.kind == DamageKind::CorruptSnapshot)
        .count();
    assert_eq!(corrupt, 2, "{report}");
    assert_eq!(rec.state.snapshot, LogId::ZERO);
    assert_eq!(
        rec.state.snapshot_membership,
        keel_core::Membership::new_voters([1, 2, 3]),
        "the initial configuration"
    );
    assert_eq!(rec.state.entries.len(), 60, "the whole log replays");
    assert_eq!(
        report.recover_to(),
        Some(LogId::new(1, 60)),
        "already reached: nothing acknowledged is missing"
    );
}

/// A log that saw more terms than the record holds keeps the last 16, oldest first.
#[test]
fn the_promise_keeps_the_last_sixteen_terms_of_a_long_log() {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    for term in 1..=20u64 {
        let from = term * 2 - 1;
        let hs = hard_state(term, Some(1), from - 1);
        wal.write_batch(&[write(term, entries(term, from, from + 1), Some(hs))])
            .unwrap();
    }
    let promise = wal.promise().unwrap();
    let expected: Vec<LogId> = (5..=20).map(|t| LogId::new(t, t * 2 - 1)).collect();
    assert_eq!(promise.starts.as_slice(), &expected[..]);
    assert_eq!(promise.acked, LogId::new(20, 40));
}
