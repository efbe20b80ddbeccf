//! Crash at every write and sync point of append, truncate, purge, snapshot save/install and
//! hard-state updates, with every kind of crash the simulated disk knows (lose unsynced data,
//! keep it, tear the last write at several bytes, write back sectors in any order). After each,
//! the WAL must open without error to a state that some prefix of the attempted operations
//! produced, containing every acknowledged one, and must keep working.
//!
//! The promise record is written in the same operations (after each synced batch's fsync, and
//! lowered before a truncation): the crashes land in its writes too, and opening without error
//! shows that no crash point makes a healthy log look damaged. Where the log only grows, the
//! promise found after the crash also covers every acknowledged entry.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{new_cluster, open_sim, sim_dir, small_config};
use keel_core::{Entry, EntryPayload, HardState, Index, LogId, Membership, RecoveredState};
use keel_core::{SnapshotMeta, Write};
use keel_wal::conformance::{check_invariants, hard_state, write};
use keel_wal::promise::read_promise;
use keel_wal::{recover, Crash, SimFs, Wal, WalError};

#[derive(Clone, Debug)]
enum Op {
    Write(Write),
    SaveSnapshot(SnapshotMeta),
    Purge(Index),
}

impl Op {
    /// Whether success means durable (a commit-only write may still be lost).
    fn durable_on_ack(&self) -> bool {
        !matches!(self, Op::Write(w) if !w.sync)
    }
}

fn apply(wal: &mut Wal<SimFs>, op: &Op) -> Result<(), WalError> {
    match op {
        Op::Write(w) => wal.write_batch(std::slice::from_ref(w)),
        Op::SaveSnapshot(meta) => wal.save_snapshot(meta, &snapshot_data(meta.last)),
        Op::Purge(index) => wal.purge_up_to(*index).map(|_| ()),
    }
}

fn snapshot_data(last: LogId) -> Vec<u8> {
    format!("state at {last}").repeat(40).into_bytes()
}

/// An entry with a payload big enough that a few of them fill a 16 KiB test segment.
fn big(term: u64, index: Index) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Normal(Bytes::from(format!("{term}/{index};").repeat(70))),
    }
}

fn bigs(term: u64, from: Index, to: Index) -> Vec<Entry> {
    (from..=to).map(|i| big(term, i)).collect()
}

fn meta(last: LogId) -> SnapshotMeta {
    SnapshotMeta {
        last,
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1)],
    }
}

/// The parts of a recovered state that must match.
#[derive(PartialEq)]
struct Summary(HardState, LogId, Vec<Entry>, Membership);

impl std::fmt::Debug for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let span = |e: Option<&Entry>| e.map(|e| e.log_id().to_string()).unwrap_or_default();
        write!(
            f,
            "{:?} snapshot {} entries {}..{} ({})",
            self.0,
            self.1,
            span(self.2.first()),
            span(self.2.last()),
            self.2.len()
        )
    }
}

fn summary(state: &RecoveredState) -> Summary {
    Summary(
        state.hard_state,
        state.snapshot,
        state.entries.clone(),
        state.snapshot_membership.clone(),
    )
}

fn fresh() -> (SimFs, Wal<SimFs>) {
    let fs = SimFs::new();
    let wal = new_cluster(fs.clone(), sim_dir(), small_config());
    (fs, wal)
}

/// Every crash the disk model allows at one point, given how many changes are unsynced.
fn crash_modes(unsynced: usize) -> Vec<Crash> {
    let mut modes = vec![
        Crash::LoseUnsynced,
        Crash::KeepPrefix {
            ops: usize::MAX,
            torn_bytes: 0,
        },
    ];
    if unsynced > 0 {
        for torn_bytes in [0, 1, 8, 16, 23, 24, 64, 200, 700, 1400, 3000] {
            modes.push(Crash::KeepPrefix {
                ops: unsynced - 1,
                torn_bytes,
            });
        }
        for seed in 1..=3 {
            modes.push(Crash::Scramble { seed });
        }
    }
    modes
}

/// What the crash runs covered.
#[derive(Debug, Default)]
struct Coverage {
    runs: usize,
    torn_tails: usize,
    /// Segments the reference run ended with.
    segments: usize,
}

/// Runs `ops` once without faults to learn the state after each, then again crashing after
/// every file-system operation, in every crash mode.
#[expect(clippy::too_many_lines)]
fn crash_everywhere(ops: &[Op]) -> Coverage {
    let (fs, mut wal) = fresh();
    let mut states = vec![summary(&recover(&fs, &sim_dir()).unwrap().state)];
    let first_op = fs.op_count();
    for op in ops {
        apply(&mut wal, op).unwrap_or_else(|e| panic!("reference run: {op:?}: {e}"));
        states.push(summary(&recover(&fs, &sim_dir()).unwrap().state));
    }
    let total_ops = fs.op_count() - first_op;
    let last_of = |s: &Summary| s.2.last().map_or(s.1.index, |e| e.index);
    // Without truncations or resets below the log's end, the promise only rises.
    let log_only_grows = states.windows(2).all(|w| last_of(&w[1]) >= last_of(&w[0]));
    let mut coverage = Coverage {
        segments: wal.segment_count(),
        ..Coverage::default()
    };
    for crash_after in 0..=total_ops {
        let mut mode_index = 0;
        loop {
            let (fs, mut wal) = fresh();
            fs.kill_after_ops(crash_after);
            let done = ops
                .iter()
                .take_while(|op| apply(&mut wal, op).is_ok())
                .count();
            drop(wal);
            let modes = crash_modes(fs.unsynced_ops());
            let Some(mode) = modes.get(mode_index).copied() else {
                break;
            };
            mode_index += 1;
            coverage.runs += 1;
            fs.crash_with(mode);
            let context = format!("crash after {crash_after} fs ops ({done} ops done), {mode:?}");
            let promise = read_promise(&fs, &sim_dir()).unwrap();
            let (wal, recovered) = Wal::open(fs.clone(), sim_dir(), small_config())
                .unwrap_or_else(|e| panic!("{context}: open failed: {e}"));
            check_invariants(&recovered.state);
            coverage.torn_tails += usize::from(recovered.stats.torn_tail.is_some());
            let got = summary(&recovered.state);
            // Acknowledged: everything up to the last operation that was durable on success.
            let acked = (0..=done)
                .rev()
                .find(|&j| j == 0 || ops[j - 1].durable_on_ack())
                .expect("0 qualifies");
            let attempted = (done + 1).min(ops.len());
            let promised = promise.promise().map_or(0, |p| p.acked.index);
            assert!(
                promised <= last_of(&got),
                "{context}: the promise {promise:?} is beyond the recovered log {got:?}"
            );
            if log_only_grows {
                // The promise trails by one group commit (it rides on the next log fsync): it
                // covers the log as it was before the last acknowledged write of entries. Entries
                // a saved snapshot covers need no promise: the snapshot file holds them.
                let acked_before = (0..acked)
                    .rev()
                    .find(|&j| matches!(&ops[j], Op::Write(w) if w.sync && !w.entries.is_empty()))
                    .unwrap_or(0);
                assert!(
                    promised.max(got.1.index) >= last_of(&states[acked_before]),
                    "{context}: the promise {promise:?} does not cover the acknowledged {:?}",
                    states[acked_before]
                );
            }
            assert!(
                (acked..=attempted).any(|j| states[j] == got),
                "{context}: recovered {got:?}\nnot among the states after ops {acked}..={attempted}: \
                 {:?}",
                &states[acked..=attempted]
            );
            still_works(wal, &recovered.state, &context);
        }
    }
    assert!(
        coverage.torn_tails > 0,
        "no crash left a torn tail: {coverage:?}"
    );
    coverage
}

/// The recovered WAL accepts a new entry, and a clean restart keeps it.
fn still_works(mut wal: Wal<SimFs>, state: &RecoveredState, context: &str) {
    let last = state.entries.last().map_or(state.snapshot, |e| e.log_id());
    let term = last.term.max(state.hard_state.term).max(1);
    let hs = HardState {
        term,
        ..state.hard_state
    };
    wal.write_batch(&[write(99, vec![big(term, last.index + 1)], Some(hs))])
        .unwrap_or_else(|e| panic!("{context}: write after recovery: {e}"));
    let fs = wal.fs().clone();
    drop(wal);
    let (_, again) = open_sim(&fs);
    let tail = again.state.entries.last().map(|e| e.log_id());
    assert_eq!(
        tail,
        Some(LogId::new(term, last.index + 1)),
        "{context}: lost the new entry"
    );
}

#[test]
fn crash_during_append_and_rotation() {
    let mut ops = Vec::new();
    for i in 0..12u64 {
        // Eight entries fit one 4 KiB frame: every write here is a single frame.
        let from = i * 8 + 1;
        let hs = (i % 3 == 2).then(|| hard_state(1, Some(1), from - 1));
        ops.push(Op::Write(write(i + 1, bigs(1, from, from + 7), hs)));
    }
    let coverage = crash_everywhere(&ops);
    assert!(coverage.segments >= 3, "the run must rotate: {coverage:?}");
}

#[test]
fn crash_during_truncate() {
    let mut ops: Vec<Op> = (0..6u64)
        .map(|i| Op::Write(write(i + 1, bigs(1, i * 8 + 1, i * 8 + 8), None)))
        .collect();
    ops.extend([
        Op::Write(write(7, Vec::new(), Some(hard_state(1, None, 30)))),
        // Rewrites entries held by the first segment from the second.
        Op::Write(write(8, bigs(2, 38, 39), Some(hard_state(2, Some(2), 30)))),
        Op::Write(write(9, bigs(3, 35, 35), Some(hard_state(3, None, 31)))),
        Op::Write(write(10, bigs(3, 36, 44), None)),
        Op::Write(write(11, bigs(4, 44, 45), Some(hard_state(4, None, 43)))),
    ]);
    let coverage = crash_everywhere(&ops);
    assert!(
        coverage.segments >= 2,
        "the rewrite must cross segments: {coverage:?}"
    );
}

#[test]
fn crash_during_purge() {
    let ops = vec![
        Op::Write(write(1, bigs(1, 1, 10), Some(hard_state(1, None, 10)))),
        Op::Write(write(2, bigs(1, 11, 20), Some(hard_state(1, None, 20)))),
        Op::Write(write(3, bigs(1, 21, 30), Some(hard_state(1, None, 30)))),
        Op::SaveSnapshot(meta(LogId::new(1, 25))),
        Op::Purge(25),
        Op::Write(write(4, bigs(1, 31, 34), Some(hard_state(1, None, 34)))),
        Op::SaveSnapshot(meta(LogId::new(1, 34))),
        Op::Purge(34),
    ];
    let coverage = crash_everywhere(&ops);
    assert!(
        coverage.segments <= 2,
        "purge must delete segments: {coverage:?}"
    );
}

#[test]
fn crash_during_snapshot_save_and_install() {
    let mut install = write(4, bigs(3, 41, 42), Some(hard_state(3, None, 40)));
    install.install = Some(meta(LogId::new(3, 40)));
    let ops = vec![
        Op::Write(write(1, bigs(1, 1, 6), Some(hard_state(1, None, 3)))),
        Op::SaveSnapshot(meta(LogId::new(1, 3))),
        Op::Write(write(2, bigs(2, 7, 9), Some(hard_state(2, None, 3)))),
        // A snapshot from the leader far beyond the local log.
        Op::SaveSnapshot(meta(LogId::new(3, 40))),
        Op::Write(install),
        Op::Write(write(5, bigs(3, 43, 44), Some(hard_state(3, None, 43)))),
    ];
    crash_everywhere(&ops);
}

#[test]
fn crash_during_hard_state_updates() {
    let commit_only = |id, hs: HardState| Op::Write(keel_wal::conformance::commit_write(id, hs));
    let ops = vec![
        Op::Write(write(1, Vec::new(), Some(hard_state(1, Some(1), 0)))),
        Op::Write(write(2, Vec::new(), Some(hard_state(2, None, 0)))),
        Op::Write(write(3, Vec::new(), Some(hard_state(2, Some(3), 0)))),
        Op::Write(write(4, bigs(2, 1, 4), None)),
        commit_only(5, hard_state(2, Some(3), 2)),
        commit_only(6, hard_state(2, Some(3), 3)),
        Op::Write(write(7, bigs(2, 5, 6), None)),
        commit_only(8, hard_state(2, Some(3), 6)),
        Op::Write(write(9, Vec::new(), Some(hard_state(3, Some(1), 6)))),
        Op::Write(write(10, bigs(3, 7, 16), None)),
        commit_only(11, hard_state(3, Some(1), 12)),
    ];
    crash_everywhere(&ops);
}

/// A batch larger than one frame is split into frames synced one after another: a crash in
/// between leaves a prefix of its entries, never a hole, and its hard state only with all of
/// them.
#[test]
fn crash_during_a_batch_split_into_frames() {
    let (fs, mut wal) = fresh();
    let base_ops = fs.op_count();
    let batch = write(1, bigs(1, 1, 20), Some(hard_state(1, None, 20)));
    wal.write_batch(std::slice::from_ref(&batch)).unwrap();
    let total = fs.op_count() - base_ops;
    for crash_after in 0..total {
        for mode in [
            Crash::LoseUnsynced,
            Crash::KeepPrefix {
                ops: 0,
                torn_bytes: 100,
            },
        ] {
            let (fs, mut wal) = fresh();
            fs.kill_after_ops(crash_after);
            assert!(wal.write_batch(std::slice::from_ref(&batch)).is_err());
            drop(wal);
            fs.crash_with(mode);
            let (_, rec) = open_sim(&fs);
            let n = rec.state.entries.len();
            assert_eq!(
                rec.state.entries,
                batch.entries[..n],
                "a prefix of the batch"
            );
            let hs = rec.state.hard_state;
            assert!(
                n == 20 || hs.commit == 0,
                "hard state only with the whole batch"
            );
        }
    }
}

/// An entry of `bytes` payload bytes.
fn sized(term: u64, index: Index, bytes: usize) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Normal(Bytes::from(vec![(index % 251) as u8; bytes])),
    }
}

/// Entries larger than a batch frame (4 KiB here, up to the 8 KiB entry bound) each get a frame of
/// their own, between ordinary ones; crashes anywhere, torn single-entry frames included,
/// recover to an acknowledged state. (Each write here is one frame: a write split into several
/// frames may also recover to a prefix of its entries, which this harness does not list.)
#[test]
fn crash_during_appends_of_entries_larger_than_a_frame() {
    let largest = small_config().entry_payload_bytes_max();
    assert!(largest > small_config().frame_size_bytes_max);
    let mut ops = Vec::new();
    let mut next = 1;
    for (i, sizes) in [
        vec![largest],
        vec![100, 200],
        vec![6000],
        vec![5000],
        vec![10],
        vec![largest],
        vec![largest],
    ]
    .into_iter()
    .enumerate()
    {
        let entries: Vec<Entry> = sizes
            .iter()
            .enumerate()
            .map(|(k, bytes)| sized(1, next + k as u64, *bytes))
            .collect();
        next += entries.len() as u64;
        let hs = hard_state(1, Some(1), next - 1);
        ops.push(Op::Write(write(i as u64 + 1, entries, Some(hs))));
    }
    let coverage = crash_everywhere(&ops);
    assert!(coverage.segments >= 3, "the run must rotate: {coverage:?}");
}

/// An entry above `entry_size_bytes_max` is refused as an invalid request, before anything is
/// written, and the log keeps working; the largest one is stored and survives a reopen.
#[test]
fn an_entry_above_the_bound_is_refused_and_the_largest_is_kept() {
    let (fs, mut wal) = fresh();
    let largest = small_config().entry_payload_bytes_max();
    let hs = hard_state(1, Some(1), 0);
    let refused = wal.write_batch(&[write(1, vec![sized(1, 1, largest + 1)], Some(hs))]);
    match refused {
        Err(WalError::InvalidRequest(why)) => {
            assert!(why.contains("entry_size_bytes_max"), "{why}")
        }
        other => panic!("an oversize entry answered {other:?}"),
    }
    wal.write_batch(&[write(2, vec![sized(1, 1, largest)], Some(hs))])
        .expect("the largest entry is stored");
    drop(wal);
    let (_, recovered) = open_sim(&fs);
    assert_eq!(recovered.state.entries, vec![sized(1, 1, largest)]);
}

/// A log reopened with larger segments (a changed configuration, or an upgrade whose defaults
/// grew) keeps filling the segment it finds only up to that segment's own size, so recovery,
/// which checks every segment against its header, still opens it; new segments take the new size.
#[test]
fn a_segment_found_on_disk_keeps_its_size_when_the_configured_size_changes() {
    let (fs, mut wal) = fresh();
    let small = small_config();
    let hs = hard_state(1, Some(1), 0);
    wal.write_batch(&[write(1, bigs(1, 1, 8), Some(hs))])
        .unwrap();
    drop(wal);
    let larger = keel_wal::WalConfig {
        segment_size_bytes: 4 * small.segment_size_bytes,
        entry_size_bytes_max: 2 * small.entry_size_bytes_max,
        ..small.clone()
    };
    let (mut wal, _) = Wal::open(fs.clone(), sim_dir(), larger.clone()).unwrap();
    // Fits the larger segment size, not what is left of the segment on disk.
    let payload = larger.entry_payload_bytes_max();
    assert!(payload as u64 > small.segment_size_bytes / 2);
    wal.write_batch(&[write(2, vec![sized(1, 9, payload)], Some(hs))])
        .unwrap();
    wal.write_batch(&[write(3, bigs(1, 10, 12), Some(hs))])
        .unwrap();
    drop(wal);
    let (_, recovered) = Wal::open(fs.clone(), sim_dir(), larger)
        .unwrap_or_else(|e| panic!("reopen after a frame in the next segment: {e}"));
    let last = recovered.state.entries.last().map(|e| e.log_id());
    assert_eq!(last, Some(LogId::new(1, 12)));
    assert_eq!(recovered.state.entries[8], sized(1, 9, payload));
}
