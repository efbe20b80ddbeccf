//! The storage scenarios of docs/SCENARIOS.md as deterministic tests, named by their numbers. Where the
//! scenario is about what a restarted node does, the recovered state is handed to the core's
//! `RaftNode::new`, which must accept it.

mod common;

use std::sync::Arc;

use common::{
    first_damage, frames, item_payload, new_cluster, open_sim, segment, sim_dir, small_config,
};
use keel_core::{Config, HardState, LogId, Membership, RaftNode, RecoveredState, SnapshotMeta};
use keel_wal::conformance::{commit_write, entries, hard_state, write};
use keel_wal::segment::ITEM_HARD_STATE;
use keel_wal::{Crash, DamageKind, SimFs, Wal, WalError};

fn start_node(state: RecoveredState) -> RaftNode {
    RaftNode::new(Config::new(1), state).expect("the core accepts the recovered state")
}

fn meta(last: LogId) -> SnapshotMeta {
    SnapshotMeta {
        last,
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1), LogId::new(last.term, 90)],
    }
}

/// A node with a short log (1..=5, commit 3) whose WAL has been opened fresh.
fn short_log() -> (SimFs, Wal<SimFs>) {
    let fs = SimFs::new();
    let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
    wal.write_batch(&[write(1, entries(1, 1, 5), Some(hard_state(1, None, 3)))])
        .unwrap();
    (fs, wal)
}

/// S05: a snapshot install (snapshot data and metadata; log reset; hard state with commit N) with
/// a crash between every pair of persistence steps — every file-system operation — must always
/// restart: never a commit outside the log, never a gap between snapshot and log.
#[test]
fn s05_crash_at_every_step_of_a_snapshot_install_always_restarts() {
    let snap = LogId::new(4, 100);
    // Two shapes: reset and hard state in one write (what the core issues), or separately.
    let installs: [&[(bool, Option<HardState>)]; 2] = [
        &[(true, Some(hard_state(4, None, 100)))],
        &[(true, None), (false, Some(hard_state(4, None, 100)))],
    ];
    let (mut installed, mut not_installed) = (0, 0);
    for steps in installs {
        let run = |wal: &mut Wal<SimFs>| -> Result<(), WalError> {
            wal.save_snapshot(&meta(snap), b"the state machine at 100")?;
            for (i, (install, hs)) in steps.iter().enumerate() {
                let mut w = write(10 + i as u64, Vec::new(), *hs);
                w.install = install.then(|| meta(snap));
                wal.write_batch(&[w])?;
            }
            Ok(())
        };
        let (fs, mut wal) = short_log();
        let base = fs.op_count();
        run(&mut wal).unwrap();
        let total = fs.op_count() - base;
        for crash_after in 0..=total {
            for mode in [
                Crash::LoseUnsynced,
                Crash::KeepPrefix {
                    ops: usize::MAX,
                    torn_bytes: 0,
                },
                Crash::KeepPrefix {
                    ops: 0,
                    torn_bytes: 30,
                },
                Crash::Scramble { seed: crash_after },
            ] {
                let (fs, mut wal) = short_log();
                fs.kill_after_ops(crash_after);
                let _ = run(&mut wal);
                drop(wal);
                fs.crash_with(mode);
                let (mut wal, rec) = Wal::open(fs.clone(), sim_dir(), small_config())
                    .unwrap_or_else(|e| panic!("crash after {crash_after}, {mode:?}: {e}"));
                let state = rec.state;
                if state.snapshot == snap {
                    // F = L + 1 = S + 1, commit clamped into [S, L].
                    assert!(state.entries.is_empty());
                    assert_eq!(state.hard_state.commit, 100);
                    installed += 1;
                } else {
                    not_installed += 1;
                    assert_eq!(state.snapshot, LogId::ZERO);
                    assert_eq!(state.entries, entries(1, 1, 5));
                    assert_eq!(state.hard_state, hard_state(1, None, 3));
                }
                let node = start_node(state.clone());
                let status = node.status();
                assert!(status.snapshot.index <= status.commit);
                assert!(status.commit <= status.last_log_id.index);
                // And the log continues where the core expects it.
                let next = status.last_log_id.index + 1;
                let hs = HardState {
                    term: 4,
                    ..state.hard_state
                };
                wal.write_batch(&[write(20, entries(4, next, next), Some(hs))])
                    .unwrap();
            }
        }
    }
    assert!(
        installed > 0 && not_installed > 0,
        "{installed} {not_installed}"
    );
}

/// S05 (canonical/raft #199 shape): the log on disk ends far before the snapshot. It is fully
/// covered, not an error.
#[test]
fn s05_a_log_ending_before_the_snapshot_is_fully_covered() {
    let (fs, mut wal) = short_log();
    let snap = LogId::new(7, 345_408);
    wal.save_snapshot(&meta(snap), b"image").unwrap();
    drop(wal); // crash before the log reset
    fs.crash();
    let (mut wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.snapshot, snap);
    assert!(rec.state.entries.is_empty());
    assert_eq!(rec.state.hard_state.commit, snap.index);
    let node = start_node(rec.state);
    assert_eq!(node.status().last_log_id, snap);
    wal.write_batch(&[write(2, entries(7, 345_409, 345_410), None)])
        .unwrap();
    fs.crash();
    let (_, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries, entries(7, 345_409, 345_410));
}

/// S05 (RedisRaft #43 shape): a log that starts after `snapshot + 1` is a typed error.
#[test]
fn s05_a_gap_between_snapshot_and_log_is_a_typed_error() {
    let (fs, mut wal) = short_log();
    let mut next = 6;
    while wal.segment_count() < 3 {
        wal.write_batch(&[write(next, entries(1, next, next + 49), None)])
            .unwrap();
        next += 50;
    }
    wal.save_snapshot(&meta(LogId::new(1, next - 10)), b"image")
        .unwrap();
    assert!(wal.purge_up_to(next - 10).unwrap() > 0);
    drop(wal);
    // The snapshot that justified the purge is lost; only the bootstrap one remains.
    use keel_wal::Fs;
    let path = sim_dir().join(keel_wal::snapshot::snapshot_file_name(LogId::new(
        1,
        next - 10,
    )));
    fs.remove_file(&path).unwrap();
    let err = Wal::open(fs.clone(), sim_dir(), small_config())
        .map(|_| ())
        .unwrap_err();
    assert!(err.is_corruption());
    let d = first_damage(Err::<(), _>(err));
    assert_eq!(d.kind, DamageKind::CorruptSnapshot, "{d}");
    assert!(d.detail.contains("the log starts at index"), "{d}");
}

/// S16: the commit-only change 37 -> 38 was not fsynced and is lost; the application had applied
/// (and durably stored) 38. Restart must not panic: commit becomes max(persisted, applied).
#[test]
fn s16_a_lost_commit_only_write_is_clamped_up_to_the_applied_index() {
    for (crash, commit) in [
        (Crash::LoseUnsynced, 37),
        (
            Crash::KeepPrefix {
                ops: usize::MAX,
                torn_bytes: 0,
            },
            38,
        ),
    ] {
        let fs = SimFs::new();
        let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
        wal.write_batch(&[write(1, entries(1, 1, 38), Some(hard_state(1, None, 37)))])
            .unwrap();
        wal.write_batch(&[commit_write(2, hard_state(1, None, 38))])
            .unwrap();
        drop(wal);
        fs.crash_with(crash);
        let (_, rec) = open_sim(&fs);
        assert_eq!(rec.state.hard_state.commit, commit);
        let node = start_node(RecoveredState {
            applied: 38,
            ..rec.state
        });
        assert_eq!(node.status().commit, 38);
        assert_eq!(node.status().applied, 38);
    }
}

/// S17: the commit index is written in the same fsync as the batch it covers. A crash at any
/// point of that write leaves either neither or both; the restarted node replays to the persisted
/// commit, never beyond an entry that was not committed.
#[test]
fn s17_commit_travels_in_the_same_sync_as_the_batch() {
    let prepare = || {
        let fs = SimFs::new();
        let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
        wal.write_batch(&[write(1, entries(1, 1, 100), Some(hard_state(1, None, 100)))])
            .unwrap();
        (fs, wal)
    };
    let batch = write(2, entries(1, 101, 200), Some(hard_state(1, None, 199)));
    let (fs, mut wal) = prepare();
    let base = fs.op_count();
    wal.write_batch(std::slice::from_ref(&batch)).unwrap();
    let total = fs.op_count() - base;
    for crash_after in 0..total {
        for torn_bytes in [0, 16, 100, 1000, 2000, 3000, 4000] {
            let (fs, mut wal) = prepare();
            fs.kill_after_ops(crash_after);
            assert!(wal.write_batch(std::slice::from_ref(&batch)).is_err());
            drop(wal);
            fs.crash_with(Crash::KeepPrefix { ops: 0, torn_bytes });
            let (_, rec) = open_sim(&fs);
            let last = rec.state.entries.last().unwrap().index;
            let commit = rec.state.hard_state.commit;
            assert!(commit <= last, "commit {commit} beyond the log ({last})");
            assert!(
                commit == 100 || (commit == 199 && last == 200),
                "{commit} {last}"
            );
            let node = start_node(rec.state);
            assert!(node.status().commit <= node.status().last_log_id.index);
        }
    }
    // A commit beyond the log is refused before anything is written.
    let (fs, mut wal) = prepare();
    let ops = fs.op_count();
    let err = wal
        .write_batch(&[write(
            3,
            entries(1, 101, 101),
            Some(hard_state(1, None, 150)),
        )])
        .unwrap_err();
    assert!(matches!(err, WalError::InvalidRequest(_)), "{err}");
    assert_eq!(fs.op_count(), ops);
}

/// S36: a committed entry (2/5) found corrupt on restart is an error, not a truncation to 4 — a
/// node that silently advertised L = 4 could elect a leader without the entry.
#[test]
fn s36_a_corrupt_acknowledged_entry_is_an_error_not_a_truncation() {
    for entry_is_last in [false, true] {
        let fs = SimFs::new();
        let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
        wal.write_batch(&[write(1, entries(1, 1, 4), Some(hard_state(1, None, 4)))])
            .unwrap();
        wal.write_batch(&[write(2, entries(2, 5, 5), Some(hard_state(2, None, 5)))])
            .unwrap();
        if !entry_is_last {
            wal.write_batch(&[write(3, Vec::new(), Some(hard_state(3, Some(2), 5)))])
                .unwrap();
        }
        drop(wal);
        let bytes = fs.read_file(&segment(1)).unwrap();
        let (offset, _) = frames(&bytes)[2];
        fs.flip_bit(&segment(1), offset + 40, 4).unwrap();
        let before = fs.read_file(&segment(1)).unwrap();
        let d = first_damage(Wal::open(fs.clone(), sim_dir(), small_config()));
        assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
        let (path, o, intact) = (d.path.clone(), d.offset, d.intact_through);
        assert_eq!(
            (path, o, intact),
            (Some(segment(1)), Some(offset), 4),
            "{d}"
        );
        let read_only = keel_wal::recover(&fs, &sim_dir()).map(|_| ()).unwrap_err();
        assert!(read_only.is_corruption());
        assert_eq!(
            fs.read_file(&segment(1)).unwrap(),
            before,
            "nothing truncated"
        );
    }
}

/// S38: (1) a torn final batch is dropped and the node proceeds; (2) a flipped bit in an old
/// committed record is a typed corruption; (3) a flipped bit in the hard state refuses to start;
/// (4) a failed fsync of a vote is fatal, the vote is never acknowledged, and the WAL is unusable.
#[test]
fn s38_torn_tail_vs_bit_flip_vs_hard_state_flip_vs_failed_vote_fsync() {
    let base = || {
        let fs = SimFs::new();
        let mut wal = new_cluster(fs.clone(), sim_dir(), small_config());
        wal.write_batch(&[write(1, entries(1, 1, 10), Some(hard_state(1, None, 8)))])
            .unwrap();
        wal.write_batch(&[write(2, Vec::new(), Some(hard_state(2, Some(3), 8)))])
            .unwrap();
        (fs, wal)
    };

    // (1) Crash in the middle of appending a batch.
    let (fs, mut wal) = base();
    fs.kill_after_ops(1);
    assert!(wal
        .write_batch(&[write(3, entries(2, 11, 60), None)])
        .is_err());
    drop(wal);
    // The batch's write is the last change issued (the promise of the batch before goes first).
    fs.crash_with(Crash::KeepPrefix {
        ops: fs.unsynced_ops() - 1,
        torn_bytes: 500,
    });
    let (mut wal, rec) = open_sim(&fs);
    assert_eq!(rec.state.entries.len(), 10);
    assert_eq!(rec.state.hard_state, hard_state(2, Some(3), 8));
    assert!(rec.stats.torn_tail.is_some());
    wal.write_batch(&[write(4, entries(2, 11, 12), None)])
        .unwrap();
    drop(wal);

    // (2) A bit flip inside the old, committed first batch.
    let (fs, wal) = base();
    drop(wal);
    let offset = frames(&fs.read_file(&segment(1)).unwrap())[1].0;
    fs.flip_bit(&segment(1), offset + 100, 0).unwrap();
    let d = first_damage(Wal::open(fs.clone(), sim_dir(), small_config()));
    assert_eq!(
        (d.kind, d.intact_through),
        (DamageKind::CorruptLog, 0),
        "{d}"
    );

    // (3) A bit flip in the term of the stored vote: refuse, never fall back to term 1.
    let (fs, wal) = base();
    drop(wal);
    let bytes = fs.read_file(&segment(1)).unwrap();
    let vote_frame = frames(&bytes)[2].0;
    fs.flip_bit(
        &segment(1),
        item_payload(&bytes, vote_frame, ITEM_HARD_STATE),
        1,
    )
    .unwrap();
    let d = first_damage(Wal::open(fs.clone(), sim_dir(), small_config()));
    assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");

    // (4) The fsync of a new vote fails.
    let (fs, mut wal) = base();
    fs.fail_next_sync();
    let err = wal
        .write_batch(&[write(3, Vec::new(), Some(hard_state(3, Some(2), 8)))])
        .unwrap_err();
    assert!(err.is_fatal(), "{err}");
    assert!(matches!(
        wal.write_batch(&[write(4, Vec::new(), Some(hard_state(3, Some(1), 8)))]),
        Err(WalError::Poisoned)
    ));
    drop(wal);
    fs.crash();
    let (_, rec) = open_sim(&fs);
    // The page cache may or may not have kept it; the vote was never sent either way.
    assert!([hard_state(2, Some(3), 8), hard_state(3, Some(2), 8)].contains(&rec.state.hard_state));
}
