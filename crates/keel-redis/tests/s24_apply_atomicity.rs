//! S24 — apply progress saved non-atomically with the state it describes (etcd 3.5's data
//! inconsistency: the consistent index reached disk ahead of the effects of its entry, and the
//! entry was skipped on replay).
//!
//! keel's key-value state machine lives in memory; what survives a crash is the log (with the
//! persisted commit index) and snapshot files, each holding the whole state *and* the applied
//! index it describes in one checksummed file that is written to a temporary name, synced and
//! renamed. So "the applied index ran ahead of the state" cannot be written down. This test
//! crashes a snapshot save at every file-system operation, in every way the simulated disk can
//! fail, and checks that recovery finds the old snapshot or the new one — never a mix — whose
//! state is exactly the state every replica has at its index, and that replaying the log from
//! there to the persisted commit reaches the same digest as a node that never crashed.
//! (The simulator checks the same property across replicas after every step: its "state digest"
//! invariant, and a broken replay it must catch in `keel-sim/tests/simulator.rs`.)

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, HardState, Index, LogId, Membership, SnapshotMeta, Write};
use keel_redis::command::SetCondition;
use keel_redis::KvStateMachine;
use keel_redis::LogCommand;
use keel_redis::WriteCommand;
use keel_wal::{Crash, SimFs, Wal, WalConfig};

const ENTRIES: Index = 200;
const SNAPSHOT_AT: Index = 120;

fn dir() -> PathBuf {
    PathBuf::from("/s24")
}

fn config() -> WalConfig {
    WalConfig {
        segment_size_bytes: 16 << 10,
        frame_size_bytes_max: 4 << 10,
        entry_size_bytes_max: 8 << 10,
        ..WalConfig::default()
    }
}

/// Entry `index`: a SET of one of 30 keys (so later entries overwrite earlier ones).
fn entry(index: Index) -> Entry {
    let command = WriteCommand::Set {
        key: Bytes::from(format!("key-{}", index % 30)),
        value: Bytes::from(format!("value-{index}")),
        condition: SetCondition::Always,
    };
    Entry {
        term: 1,
        index,
        payload: EntryPayload::Normal(LogCommand::new(7, index, 0, command).encode()),
    }
}

fn apply(sm: &mut KvStateMachine, e: &Entry) {
    match &e.payload {
        EntryPayload::Normal(data) => {
            sm.apply(e.index, data).expect("entries apply in order");
        }
        _ => sm.advance_applied(e.index).expect("in order"),
    }
}

/// The digest a replica that never crashed has after each index (index 0: empty).
fn reference_digests() -> Vec<u64> {
    let mut sm = KvStateMachine::new();
    let mut digests = vec![sm.state_digest()];
    for index in 1..=ENTRIES {
        apply(&mut sm, &entry(index));
        digests.push(sm.state_digest());
    }
    digests
}

/// A node's disk: bootstrap snapshot, the whole log with its commit index; the state machine has
/// applied up to `SNAPSHOT_AT`. Returns the WAL and the state machine.
fn node_before_the_snapshot(fs: &SimFs) -> (Wal<SimFs>, KvStateMachine) {
    let (mut wal, _) = Wal::open(fs.clone(), dir(), config()).expect("open");
    wal.save_snapshot(&keel_wal::snapshot::bootstrap_meta([1, 2, 3]), &[])
        .expect("bootstrap snapshot");
    let write = Write {
        id: 1,
        install: None,
        entries: (1..=ENTRIES).map(entry).collect(),
        hard_state: Some(HardState {
            term: 1,
            vote: None,
            commit: ENTRIES,
        }),
        purge_to: None,
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    };
    wal.write_batch(&[write]).expect("log");
    let mut sm = KvStateMachine::new();
    for index in 1..=SNAPSHOT_AT {
        apply(&mut sm, &entry(index));
    }
    (wal, sm)
}

fn snapshot_meta() -> SnapshotMeta {
    SnapshotMeta {
        last: LogId::new(1, SNAPSHOT_AT),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1)],
    }
}

/// Restores what recovery finds and replays the log to the persisted commit, checking the
/// snapshot's state against the reference at its own index first.
fn recover_and_replay(fs: &SimFs, digests: &[u64], context: &str) -> Index {
    let (wal, recovered) =
        Wal::open(fs.clone(), dir(), config()).unwrap_or_else(|e| panic!("{context}: {e}"));
    let snapshot_index = recovered.state.snapshot.index;
    let mut sm = match wal.read_snapshot_data().expect("readable snapshot") {
        Some((file, data)) if file.meta.last.index > 0 => {
            KvStateMachine::from_snapshot(&data).unwrap_or_else(|e| panic!("{context}: {e}"))
        }
        _ => KvStateMachine::new(),
    };
    assert_eq!(
        sm.applied_index(),
        snapshot_index,
        "{context}: the snapshot's state describes another index than its file says"
    );
    assert_eq!(
        sm.state_digest(),
        digests[snapshot_index as usize],
        "{context}: the snapshot's state is not the state at its index"
    );
    let commit = recovered.state.hard_state.commit;
    assert_eq!(
        commit, ENTRIES,
        "{context}: the persisted commit was synced before"
    );
    for e in recovered.state.entries.iter() {
        if e.index > snapshot_index && e.index <= commit {
            apply(&mut sm, e);
        }
    }
    assert_eq!(
        sm.applied_index(),
        commit,
        "{context}: replay stopped short"
    );
    assert_eq!(
        sm.state_digest(),
        digests[commit as usize],
        "{context}: replay diverged from the replicas"
    );
    snapshot_index
}

#[test]
fn s24_a_crash_at_any_point_of_a_snapshot_save_never_splits_state_from_index() {
    let digests = reference_digests();
    // A save without faults, to count its file-system operations.
    let fs = SimFs::new();
    let (mut wal, sm) = node_before_the_snapshot(&fs);
    let before = fs.op_count();
    wal.save_snapshot(&snapshot_meta(), &sm.snapshot())
        .expect("save");
    let save_ops = fs.op_count() - before;
    assert!(save_ops >= 4, "a save is several operations: {save_ops}");
    drop(wal);
    assert_eq!(recover_and_replay(&fs, &digests, "no crash"), SNAPSHOT_AT);

    let mut outcomes = [0usize; 2];
    for crash_after in 0..=save_ops {
        for mode in [
            Crash::LoseUnsynced,
            Crash::KeepPrefix {
                ops: usize::MAX,
                torn_bytes: 0,
            },
            Crash::KeepPrefix {
                ops: 0,
                torn_bytes: 100,
            },
            Crash::Scramble { seed: crash_after },
        ] {
            let fs = SimFs::new();
            let (mut wal, sm) = node_before_the_snapshot(&fs);
            fs.kill_after_ops(crash_after);
            let _ = wal.save_snapshot(&snapshot_meta(), &sm.snapshot());
            drop(wal);
            fs.crash_with(mode);
            let context = format!("crash after {crash_after} of {save_ops} ops, {mode:?}");
            let found = recover_and_replay(&fs, &digests, &context);
            outcomes[usize::from(found == SNAPSHOT_AT)] += 1;
        }
    }
    // Both outcomes occur: crashes before the rename keep the old snapshot, after it the new.
    assert!(
        outcomes[0] > 0 && outcomes[1] > 0,
        "old/new snapshot: {outcomes:?}"
    );
}
