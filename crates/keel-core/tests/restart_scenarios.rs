//! Restart scenarios from docs/SCENARIOS.md that need only the core and `MemStorage`:
//! what a node recovers from a snapshot, a log and a persisted commit index.

use std::sync::Arc;

use bytes::Bytes;
use keel_core::storage::{MemStorage, Storage};
use keel_core::{
    Config, Entry, EntryPayload, HardState, Index, LogId, Membership, RaftNode, SnapshotMeta, Write,
};

fn normal(term: u64, index: Index) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Normal(Bytes::from(format!("e{index}"))),
    }
}

/// Storage holding a snapshot at `snapshot` (configuration `voters`) followed by `entries`.
fn storage_after_snapshot(
    snapshot: LogId,
    voters: &[u64],
    entries: Vec<Entry>,
    commit: Index,
) -> MemStorage {
    let meta = SnapshotMeta {
        last: snapshot,
        membership: Arc::new(Membership::new_voters(voters.iter().copied())),
        term_history: vec![LogId::new(snapshot.term, 1)],
    };
    let mut storage = MemStorage::new_cluster(voters.iter().copied());
    storage
        .write(&Write {
            id: 0,
            install: Some(meta),
            entries,
            hard_state: Some(HardState {
                term: snapshot.term,
                vote: None,
                commit,
            }),
            purge_to: None,
            sync: true,
            release_promise: false,
            lower_promise_to: None,
        })
        .unwrap();
    storage
}

/// A member of a three-voter cluster restarted with `last` entries of term 1, `commit` of them
/// committed.
fn restarted_with_log(config: Config, last: Index, commit: Index) -> RaftNode {
    let entries: Vec<Entry> = (1..=last).map(|i| normal(1, i)).collect();
    let hard_state = HardState {
        term: 1,
        vote: None,
        commit,
    };
    let storage = MemStorage::with_log([1, 2, 3], entries, hard_state);
    RaftNode::new(config, storage.recover().unwrap()).unwrap()
}

/// S18: the persisted commit covers a configuration change made after the snapshot; after a
/// restart the node's configuration includes it, and the replay hands the change out in order.
#[test]
fn s18_restart_restores_membership_changes_after_the_snapshot() {
    let mut entries: Vec<Entry> = (101..=150).map(|i| normal(1, i)).collect();
    entries[19] = Entry {
        term: 1,
        index: 120,
        payload: EntryPayload::Membership(Arc::new(Membership::new_voters([1, 2, 3, 4]))),
    };
    let storage = storage_after_snapshot(LogId::new(1, 100), &[1, 2, 3], entries, 150);
    let mut node = RaftNode::new(Config::new(1), storage.recover().unwrap()).unwrap();
    assert_eq!(
        node.membership().voters.iter().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4],
        "the configuration entry at 120 is in force after the restart"
    );
    assert_eq!(node.commit_index(), 150);
    let mut replayed = Vec::new();
    while node.is_replaying() {
        let rd = node.ready();
        let last = rd
            .committed
            .last()
            .expect("the replay makes progress")
            .index;
        replayed.extend(rd.committed.iter().map(|e| e.index));
        node.applied(last);
    }
    assert_eq!(replayed, (101..=150).collect::<Vec<_>>());
}

/// S19: a replay far larger than any internal batch completes, in order, in bounded batches,
/// and nothing beyond the persisted commit is handed out.
#[test]
fn s19_replay_larger_than_any_batch_completes() {
    const COMMITTED: Index = 10_000;
    let mut config = Config::new(1);
    config.apply_entries_max = 64;
    let mut node = restarted_with_log(config, COMMITTED + 50, COMMITTED);
    let mut next = 1;
    let mut batches = 0;
    while node.is_replaying() {
        let rd = node.ready();
        assert!(rd.committed.len() <= 64, "batches are bounded");
        for e in &rd.committed {
            assert_eq!(e.index, next, "in order, each once");
            next += 1;
        }
        node.applied(next - 1);
        batches += 1;
        assert!(batches <= COMMITTED, "the replay must finish");
    }
    assert_eq!(next - 1, COMMITTED, "nothing beyond the persisted commit");
    assert!(node.ready().committed.is_empty());
}

/// S19, memory: however long the replay, the node hands out at most `unapplied_entries_max`
/// ahead of what the application reported applied, so the apply pipeline stays bounded while a
/// slow state machine works through millions of entries.
#[test]
fn s19_replay_never_runs_ahead_of_the_application_by_more_than_the_bound() {
    const COMMITTED: Index = 20_000;
    let mut config = Config::new(1);
    config.apply_entries_max = 100;
    config.unapplied_entries_max = 1_000;
    let mut node = restarted_with_log(config, COMMITTED, COMMITTED);
    let mut handed_out = 0;
    let mut applied = 0;
    while node.is_replaying() {
        // Drain everything the node offers without applying anything...
        while node.has_ready() {
            let rd = node.ready();
            if let Some(last) = rd.committed.last() {
                handed_out = last.index;
            }
            assert!(
                handed_out - applied <= 1_000,
                "handed out {handed_out} with only {applied} applied"
            );
        }
        assert!(
            handed_out == COMMITTED || handed_out - applied == 1_000,
            "the window is used in full"
        );
        // ...then apply half of it, as a slow state machine would.
        applied += 500;
        node.applied(applied);
    }
    assert_eq!(applied, COMMITTED);
}
