//! The storage conformance suite: one set of checks of the log storage contract (docs/DESIGN.md
//! section 3, [`keel_core::storage::Storage`]) that any storage must pass — the in-memory one,
//! this WAL, or an embedder's own, which a downstream crate checks in one call:
//!
//! ```ignore
//! keel_wal::conformance::run_all(|| MyStorage::open_empty(), Some(&mut |s| s.reopen()));
//! ```
//!
//! `make` returns an empty storage, never written to (a new directory, a new table). `reopen`,
//! when given, drops a storage (a clean process restart: every completed write is durable) and
//! opens it again from the same place; without it, the restart checks are skipped. Each check
//! first records the bootstrap snapshot of a new cluster whose voters are {1, 2, 3}, as a node
//! does on an empty storage. Every check panics with a description on failure.

use std::sync::Arc;

use bytes::Bytes;
use keel_core::storage::Storage;
use keel_core::{Entry, EntryPayload, HardState, Index, LogId, Membership, RecoveredState};
use keel_core::{SnapshotMeta, Term, Write};

use crate::codec::membership_payload;

/// Reopens a storage from its durable state (a clean restart).
pub type Reopen<'a, S> = Option<&'a mut dyn FnMut(S) -> S>;

/// An entry with `Normal` data derived from its position.
pub fn entry(term: Term, index: Index) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Normal(Bytes::from(format!("{term}/{index}"))),
    }
}

/// Entries `from..=to` of one term.
pub fn entries(term: Term, from: Index, to: Index) -> Vec<Entry> {
    (from..=to).map(|i| entry(term, i)).collect()
}

/// A synced write of entries and an optional hard state.
pub fn write(id: u64, entries: Vec<Entry>, hard_state: Option<HardState>) -> Write {
    Write {
        id,
        install: None,
        entries,
        hard_state,
        purge_to: None,
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    }
}

/// A commit-only write (not synced).
pub fn commit_write(id: u64, hard_state: HardState) -> Write {
    Write {
        sync: false,
        ..write(id, Vec::new(), Some(hard_state))
    }
}

/// Shorthand for a [`HardState`] literal.
pub fn hard_state(term: Term, vote: Option<u64>, commit: Index) -> HardState {
    HardState { term, vote, commit }
}

/// The snapshot metadata the suite uses: voters {1, 2, 3} and learner 9.
pub fn snapshot_meta(last: LogId, term_history: Vec<LogId>) -> SnapshotMeta {
    SnapshotMeta {
        last,
        membership: Arc::new(Membership {
            learners: [9].into(),
            ..Membership::new_voters([1, 2, 3])
        }),
        term_history,
    }
}

/// Entries after the snapshot (storage may also return trailing entries the snapshot covers).
pub fn log_after_snapshot(state: &RecoveredState) -> Vec<Entry> {
    let after: Vec<Entry> = state
        .entries
        .iter()
        .filter(|e| e.index > state.snapshot.index)
        .cloned()
        .collect();
    for pair in after.windows(2) {
        assert_eq!(pair[1].index, pair[0].index + 1, "recovered log has a gap");
    }
    if let Some(first) = after.first() {
        assert_eq!(
            first.index,
            state.snapshot.index + 1,
            "gap after the snapshot"
        );
    }
    after
}

/// Invariants every recovered state satisfies.
pub fn check_invariants(state: &RecoveredState) {
    let after = log_after_snapshot(state);
    let last = after.last().map_or(state.snapshot.index, |e| e.index);
    let commit = state.hard_state.commit;
    assert!(
        commit <= last,
        "commit {commit} beyond the last index {last}"
    );
    assert!(
        state.applied >= state.snapshot.index,
        "applied below the snapshot"
    );
}

/// A new storage from `make`, checked empty, with the bootstrap snapshot of voters {1, 2, 3}
/// recorded (as a node starting a new cluster records it).
fn bootstrapped<S: Storage>(make: &mut impl FnMut() -> S) -> S {
    let mut s = make();
    let empty = recovered(&s);
    assert!(
        empty.entries.is_empty() && empty.hard_state == HardState::default(),
        "a new storage is not empty"
    );
    assert_eq!(empty.snapshot, LogId::ZERO, "a new storage has a snapshot");
    s.record_snapshot(&crate::snapshot::bootstrap_meta([1, 2, 3]))
        .unwrap_or_else(|e| panic!("recording the bootstrap snapshot failed: {e}"));
    s
}

fn recovered<S: Storage>(s: &S) -> RecoveredState {
    let state = s
        .recover()
        .unwrap_or_else(|e| panic!("recover failed: {e}"));
    check_invariants(&state);
    state
}

fn put<S: Storage>(s: &mut S, w: Write) {
    s.write(&w)
        .unwrap_or_else(|e| panic!("write {} failed: {e}", w.id));
}

/// Recovers now and, with `reopen`, again after a restart; both must equal `expected`.
fn expect_log<S: Storage>(
    s: S,
    reopen: &mut Reopen<'_, S>,
    expected: &[Entry],
    hs: HardState,
) -> S {
    let check = |s: &S, when: &str| {
        let state = recovered(s);
        assert_eq!(log_after_snapshot(&state), expected, "log {when}");
        assert_eq!(state.hard_state, hs, "hard state {when}");
    };
    check(&s, "before restart");
    match reopen {
        Some(reopen) => {
            let s = reopen(s);
            check(&s, "after restart");
            s
        }
        None => s,
    }
}

/// Runs every check of the write/recover contract.
pub fn run_all<S: Storage>(mut make: impl FnMut() -> S, mut reopen: Reopen<'_, S>) {
    new_storage_is_empty(&mut make);
    appends_in_order(&mut make, &mut reopen);
    write_drops_conflicting_suffix(&mut make, &mut reopen);
    hard_state_is_stored_after_entries(&mut make, &mut reopen);
    commit_only_write_survives_clean_restart(&mut make, &mut reopen);
    payload_kinds_round_trip(&mut make, &mut reopen);
    matches_a_model_over_many_writes(&mut make, &mut reopen);
    batch_equals_its_writes(&mut make, &mut reopen);
    snapshot_checks(&mut make, &mut reopen);
    recorded_snapshot_survives_and_keeps_the_log(&mut make, &mut reopen);
}

fn record<S: Storage>(s: &mut S, meta: &SnapshotMeta) {
    s.record_snapshot(meta)
        .unwrap_or_else(|e| panic!("record_snapshot {} failed: {e}", meta.last));
}

/// `write_batch` is the writes one after the other, whatever the implementation does to sync
/// them once.
fn batch_equals_its_writes<S: Storage>(make: &mut impl FnMut() -> S, reopen: &mut Reopen<'_, S>) {
    let mut s = bootstrapped(make);
    let batch = [
        write(1, entries(1, 1, 6), Some(hard_state(1, Some(2), 0))),
        write(2, entries(2, 4, 8), Some(hard_state(2, None, 3))),
        commit_write(3, hard_state(2, None, 7)),
        write(4, entries(2, 9, 9), None),
    ];
    s.write_batch(&batch)
        .unwrap_or_else(|e| panic!("write_batch failed: {e}"));
    expect_log(
        s,
        reopen,
        &[entries(1, 1, 3), entries(2, 4, 9)].concat(),
        hard_state(2, None, 7),
    );
}

/// A recorded snapshot is recovered (also after a restart) with its configuration and term
/// history, the entries after it stay, and an older one recorded later changes nothing.
fn recorded_snapshot_survives_and_keeps_the_log<S: Storage>(
    make: &mut impl FnMut() -> S,
    reopen: &mut Reopen<'_, S>,
) {
    let mut s = bootstrapped(make);
    put(
        &mut s,
        write(1, entries(1, 1, 9), Some(hard_state(1, None, 9))),
    );
    let meta = snapshot_meta(LogId::new(1, 6), vec![LogId::new(1, 1)]);
    record(&mut s, &meta);
    record(
        &mut s,
        &snapshot_meta(LogId::new(1, 4), vec![LogId::new(1, 1)]),
    );
    let s = expect_log(s, reopen, &entries(1, 7, 9), hard_state(1, None, 9));
    let state = recovered(&s);
    assert_eq!(state.snapshot, meta.last, "the newest recorded snapshot");
    assert_eq!(state.snapshot_membership, *meta.membership);
    assert_eq!(state.snapshot_term_history, meta.term_history);
    assert!(
        state.applied >= meta.last.index,
        "applied below the snapshot"
    );
}

fn new_storage_is_empty<S: Storage>(make: &mut impl FnMut() -> S) {
    let s = bootstrapped(make);
    let state = recovered(&s);
    assert_eq!(state.hard_state, HardState::default());
    assert_eq!(state.snapshot, LogId::ZERO);
    assert_eq!(state.snapshot_membership, Membership::new_voters([1, 2, 3]));
    assert!(state.entries.is_empty());
    assert_eq!(state.applied, 0);
    assert_eq!(
        recovered(&s).entries,
        state.entries,
        "recover is repeatable"
    );
}

fn appends_in_order<S: Storage>(make: &mut impl FnMut() -> S, reopen: &mut Reopen<'_, S>) {
    let mut s = bootstrapped(make);
    put(
        &mut s,
        write(1, entries(1, 1, 3), Some(hard_state(1, Some(1), 0))),
    );
    put(&mut s, write(2, entries(1, 4, 4), None));
    put(
        &mut s,
        write(3, entries(2, 5, 9), Some(hard_state(2, None, 4))),
    );
    let s = expect_log(
        s,
        reopen,
        &[entries(1, 1, 4), entries(2, 5, 9)].concat(),
        hard_state(2, None, 4),
    );
    let mut s = s;
    put(&mut s, write(4, entries(2, 10, 10), None));
    expect_log(
        s,
        reopen,
        &[entries(1, 1, 4), entries(2, 5, 10)].concat(),
        hard_state(2, None, 4),
    );
}

fn write_drops_conflicting_suffix<S: Storage>(
    make: &mut impl FnMut() -> S,
    reopen: &mut Reopen<'_, S>,
) {
    let mut s = bootstrapped(make);
    put(
        &mut s,
        write(1, entries(1, 1, 5), Some(hard_state(1, None, 1))),
    );
    // Rewrite from the middle: 3 and 4 replaced, 5 gone.
    put(
        &mut s,
        write(2, entries(2, 3, 4), Some(hard_state(2, None, 2))),
    );
    let expected = [entries(1, 1, 2), entries(2, 3, 4)].concat();
    let mut s = expect_log(s, reopen, &expected, hard_state(2, None, 2));
    // Rewrite exactly the last entry, then append after it.
    put(
        &mut s,
        write(3, entries(3, 4, 4), Some(hard_state(3, Some(2), 2))),
    );
    put(&mut s, write(4, entries(3, 5, 6), None));
    let expected = [entries(1, 1, 2), entries(2, 3, 3), entries(3, 4, 6)].concat();
    expect_log(s, reopen, &expected, hard_state(3, Some(2), 2));
}

fn hard_state_is_stored_after_entries<S: Storage>(
    make: &mut impl FnMut() -> S,
    reopen: &mut Reopen<'_, S>,
) {
    let mut s = bootstrapped(make);
    // A vote alone (a follower granting a vote).
    put(
        &mut s,
        write(1, Vec::new(), Some(hard_state(5, Some(3), 0))),
    );
    let mut s = expect_log(s, reopen, &[], hard_state(5, Some(3), 0));
    // Entries without a hard state keep the stored one.
    put(&mut s, write(2, entries(5, 1, 2), None));
    let mut s = expect_log(s, reopen, &entries(5, 1, 2), hard_state(5, Some(3), 0));
    // The commit index travels in the same write as the entries it covers.
    put(
        &mut s,
        write(3, entries(5, 3, 3), Some(hard_state(5, Some(3), 3))),
    );
    expect_log(s, reopen, &entries(5, 1, 3), hard_state(5, Some(3), 3));
}

fn commit_only_write_survives_clean_restart<S: Storage>(
    make: &mut impl FnMut() -> S,
    reopen: &mut Reopen<'_, S>,
) {
    let mut s = bootstrapped(make);
    put(
        &mut s,
        write(1, entries(1, 1, 4), Some(hard_state(1, None, 1))),
    );
    put(&mut s, commit_write(2, hard_state(1, None, 3)));
    let mut s = expect_log(s, reopen, &entries(1, 1, 4), hard_state(1, None, 3));
    // A later synced write carries the commit along even if it does not mention it.
    put(&mut s, commit_write(3, hard_state(1, None, 4)));
    put(&mut s, write(4, entries(1, 5, 5), None));
    expect_log(s, reopen, &entries(1, 1, 5), hard_state(1, None, 4));
}

fn payload_kinds_round_trip<S: Storage>(make: &mut impl FnMut() -> S, reopen: &mut Reopen<'_, S>) {
    let mut s = bootstrapped(make);
    let payloads = vec![
        EntryPayload::Noop,
        EntryPayload::Normal(Bytes::new()),
        EntryPayload::Normal(Bytes::from_static(b"x")),
        EntryPayload::Normal(Bytes::from(vec![0xA5; 3000])),
        membership_payload(Membership {
            voters: [1, 2, 4].into(),
            outgoing: [1, 2, 3].into(),
            learners: [7].into(),
        }),
    ];
    let log: Vec<Entry> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, payload)| Entry {
            term: 1,
            index: i as Index + 1,
            payload,
        })
        .collect();
    put(&mut s, write(1, log.clone(), None));
    expect_log(s, reopen, &log, HardState::default());
}

/// A deterministic mix of appends, conflicting rewrites, votes and commits, checked against a
/// plain vector after every step.
fn matches_a_model_over_many_writes<S: Storage>(
    make: &mut impl FnMut() -> S,
    reopen: &mut Reopen<'_, S>,
) {
    let mut s = bootstrapped(make);
    let mut model: Vec<Entry> = Vec::new();
    let mut hs = HardState::default();
    let mut rng = 0x5EED_u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        rng >> 33
    };
    for id in 1..=120 {
        let last = model.len() as Index;
        let uncommitted = last - hs.commit;
        let from = if uncommitted > 0 && next() % 4 == 0 {
            hs.term += 1;
            last + 1 - (1 + next() % uncommitted)
        } else {
            last + 1
        };
        let count = 1 + next() % 8;
        let term = hs.term.max(1);
        let new = entries(term, from, from + count - 1);
        model.truncate(from as usize - 1);
        model.extend(new.iter().cloned());
        hs.term = term;
        hs.commit = (hs.commit + next() % 4).min(model.len() as Index);
        put(&mut s, write(id, new, Some(hs)));
        if id % 40 == 0 {
            s = expect_log(s, reopen, &model, hs);
        }
    }
    expect_log(s, reopen, &model, hs);
}

/// Checks of `record_snapshot`, `install` and `purge_to`.
fn snapshot_checks<S: Storage>(make: &mut impl FnMut() -> S, reopen: &mut Reopen<'_, S>) {
    // Install over a short, divergent log: the log restarts after the snapshot.
    let mut s = bootstrapped(make);
    put(
        &mut s,
        write(1, entries(1, 1, 5), Some(hard_state(1, None, 2))),
    );
    let meta = snapshot_meta(LogId::new(3, 10), vec![LogId::new(1, 1), LogId::new(3, 8)]);
    record(&mut s, &meta);
    let mut w = write(2, entries(3, 11, 12), Some(hard_state(3, None, 10)));
    w.install = Some(meta.clone());
    put(&mut s, w);
    let s = expect_log(s, reopen, &entries(3, 11, 12), hard_state(3, None, 10));
    let state = recovered(&s);
    assert_eq!(state.snapshot, meta.last);
    assert_eq!(state.snapshot_membership, *meta.membership);
    assert_eq!(state.snapshot_term_history, meta.term_history);
    assert_eq!(state.applied, 10);

    // Purge below a local snapshot: entries after it stay.
    let mut s = bootstrapped(make);
    put(
        &mut s,
        write(1, entries(2, 1, 30), Some(hard_state(2, None, 30))),
    );
    let meta = snapshot_meta(LogId::new(2, 20), vec![LogId::new(2, 1)]);
    record(&mut s, &meta);
    let mut w = write(2, entries(2, 31, 31), None);
    w.purge_to = Some(20);
    put(&mut s, w);
    let s = expect_log(s, reopen, &entries(2, 21, 31), hard_state(2, None, 30));
    assert_eq!(recovered(&s).snapshot, meta.last);
}
