//! Snapshot scenarios from docs/SCENARIOS.md (S02, S06, S10, S22, S35), run against the core
//! with no runtime. The harness in `common/` drops `Ready::send_snapshots` and
//! `Ready::install_snapshot`, so the cluster tests here drive the nodes with `Sim`, a small driver
//! on top of the harness's `Cluster` that plays the snapshot transport (a requested send becomes an
//! `InstallSnapshot` message, or is held for the test to deliver) and a model application whose
//! state machine is the list of log ids it applied (a restore replaces it by the committed prefix).
//! Single-node tests drive one `RaftNode` and its `MemStorage` by hand (`Solo`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

// The harness names core items through `crate::`: this import provides them at this crate's root.
use keel_core::{
    storage, AppendResult, CommitStatus, Config, Entry, EntryPayload, HardState, Index, LogId,
    Membership, Message, MessageBody, NodeId, RaftNode, ReadState, Ready, Role, SnapshotMeta, Term,
    Write,
};

use common::{entries_from, storage_with, test_config, Cluster};
use storage::{MemStorage, Storage};

const VOTERS: [NodeId; 3] = [1, 2, 3];

fn hs(term: Term, commit: Index) -> HardState {
    HardState {
        term,
        vote: None,
        commit,
    }
}

fn meta(last: LogId, term_history: Vec<LogId>) -> SnapshotMeta {
    SnapshotMeta {
        last,
        membership: Arc::new(Membership::new_voters(VOTERS)),
        term_history,
    }
}

/// The log of `node` never goes down in term along its indexes, and its term history is strictly
/// increasing in both term and index.
fn assert_log_monotonic(node: &RaftNode) {
    let log = node.log();
    let mut prev = log.purged().term;
    for i in log.first_index()..=log.last_index() {
        let t = log.term_at(i).expect("held");
        assert!(
            t >= prev,
            "log term goes down at index {i}: {prev} then {t}"
        );
        prev = t;
    }
    for w in log.term_history().windows(2) {
        assert!(
            w[0].term < w[1].term && w[0].index <= w[1].index,
            "term history not monotonic: {:?}",
            log.term_history()
        );
    }
    assert!(
        log.last_log_id().term <= node.term(),
        "log holds term {} beyond the node's term {}",
        log.last_log_id().term,
        node.term()
    );
}

// The drivers `Solo` (one node by hand) and `Sim` (a cluster with a snapshot transport and a
// model application) live beside the harness; included, not a module, so they share this file's
// imports and helpers.
include!("common/snapshot_drivers.rs");

// ----- S02 -----

/// S02 — a slow application has been handed committed entries it has not applied yet when a
/// snapshot above the commit index arrives. Nothing at or below the snapshot is handed out after
/// the install; the application finishes what it was handed, restores, and the next entry it
/// sees is snapshot.index + 1. The log is never read below its first index.
#[test]
#[expect(clippy::too_many_lines)]
fn s02_install_over_a_slow_apply_loop_resumes_at_snapshot_plus_one() {
    let mut cfg = test_config(2);
    cfg.apply_entries_max = 16;
    let mut s = Solo::new(cfg, &[1; 100], hs(1, 0));
    // Leader 1 (term 1) commits the whole log in one go.
    s.step(
        1,
        1,
        MessageBody::Append {
            prev: LogId::new(1, 100),
            entries: vec![],
            commit: 100,
        },
    );
    assert_eq!(s.node.commit_index(), 100);
    // The apply loop takes two batches (1..=32) and reports only 1..=10 done.
    let rd = s.ready();
    assert_eq!(rd.committed.len(), 16);
    s.node.applied(10);
    let rd = s.ready();
    assert_eq!(rd.committed.last().map(|e| e.index), Some(32));
    assert_eq!(s.node.status().applied, 10);

    // Node 3 won term 2 and compacted past everything: a snapshot at 2/150.
    let snap = meta(
        LogId::new(2, 150),
        vec![LogId::new(1, 1), LogId::new(2, 101)],
    );
    s.step(3, 2, MessageBody::InstallSnapshot { meta: snap.clone() });
    let rd = s.ready();
    assert!(
        rd.committed.is_empty(),
        "entries the snapshot covers are not handed out"
    );
    assert_eq!(
        rd.install_snapshot.as_ref().map(|m| m.last),
        Some(snap.last)
    );
    assert!(
        s.writes.iter().any(|w| w.install.is_some()),
        "install persisted"
    );
    // The log cannot be read below the snapshot any more.
    assert_eq!(s.node.log().first_index(), 151);
    assert!(s.node.log().entry(33).is_none() && s.node.log().entry(150).is_none());
    // The application finishes what it was handed, then restores and reports the snapshot.
    s.node.applied(32);
    s.node.applied(150);
    assert_eq!(s.node.status().applied, 150);
    assert_eq!(s.node.commit_index(), 150);
    for _ in 0..3 {
        let rd = s.ready();
        assert!(rd.committed.is_empty(), "nothing more below the snapshot");
    }
    assert!(s
        .replies()
        .contains(&AppendResult::Success { match_index: 150 }));

    // The leader continues after the snapshot.
    s.step(
        3,
        2,
        MessageBody::Append {
            prev: LogId::new(2, 150),
            entries: entries_from(151, &[2; 20]),
            commit: 170,
        },
    );
    while s.node.has_ready() {
        let rd = s.ready();
        if let Some(e) = rd.committed.last() {
            s.node.applied(e.index);
        }
    }
    let before: Vec<Index> = s.handed[..s.installs[0].0]
        .iter()
        .map(|e| e.index)
        .collect();
    let after: Vec<Index> = s.handed[s.installs[0].0..]
        .iter()
        .map(|e| e.index)
        .collect();
    assert_eq!(before, (1..=32).collect::<Vec<_>>());
    assert_eq!(
        after,
        (151..=170).collect::<Vec<_>>(),
        "the loop resumes at snapshot + 1, contiguously"
    );
    assert_eq!(s.node.status().applied, 170);
    assert_eq!(s.installs.len(), 1);
}

/// S02 with the install and the resumed apply in one cluster: the follower's application is slow
/// (it reports nothing), the leader compacts past it and sends its snapshot.
#[test]
fn s02_cluster_follower_with_unapplied_entries_installs_and_resumes_after_the_snapshot() {
    let mut s = Sim::new(3, |cfg| {
        cfg.snapshot_trailing_entries = 0;
        cfg.apply_entries_max = 4;
    });
    s.elect(1);
    // Node 3's application is slow: it is handed entries but reports nothing.
    s.slow_apply.insert(3);
    for i in 0..10 {
        s.propose_and_commit(1, &format!("a{i}"));
    }
    s.tick_all(2);
    let commit3 = s.node(3).commit_index();
    assert!(commit3 >= 10);
    assert_eq!(s.node(3).status().applied, 0, "committed but not applied");
    // Node 3 falls behind; the leader writes and compacts past it.
    s.isolate(3);
    for i in 0..30 {
        s.propose_and_commit(1, &format!("b{i}"));
    }
    let snap = s.snapshot(1);
    assert_eq!(s.node(1).log().purged().index, snap.last.index);
    assert!(commit3 < snap.last.index);
    s.heal();
    s.tick_all(12);
    let app3 = &s.apps[&3];
    assert_eq!(
        app3.restores,
        vec![snap.last],
        "node 3 restored the snapshot"
    );
    assert_eq!(s.node(3).status().applied, snap.last.index);
    let handed_after: Vec<Index> = app3.sm.iter().map(|l| l.index).collect();
    assert_eq!(handed_after, (1..=snap.last.index).collect::<Vec<_>>());
    s.slow_apply.clear();
    for i in 0..6 {
        s.propose_and_commit(1, &format!("c{i}"));
    }
    s.tick_all(2);
    assert_eq!(s.node(3).status().applied, s.node(1).commit_index());
    // Everything after the restore came from the log, contiguously, above the snapshot.
    assert!(s.node(3).log().first_index() > snap.last.index);
    s.assert_same_state_machines();
}

// ----- S06 -----

/// S06 — an old leader's uncommitted write W is overwritten by a new leader that then compacts
/// past it; the old leader learns through a snapshot. W resolves as Overwritten (never Pending
/// for ever), nothing panics, and the old leader applies the new leader's entries afterwards.
#[test]
fn s06_old_leader_uncommitted_write_resolves_overwritten_after_snapshot() {
    let mut s = Sim::new(3, |cfg| cfg.snapshot_trailing_entries = 0);
    let t1 = s.elect(1);
    while s.node(1).log().last_index() < 9 {
        s.propose_and_commit(1, "pre");
    }
    s.tick_all(2);
    s.isolate(1);
    let w = s.propose(1, "W");
    s.run();
    assert_eq!(w, LogId::new(t1, 10));
    assert_eq!(s.node(1).commit_status(w), CommitStatus::Pending);

    let t2 = s.elect(2);
    assert!(t2 > t1);
    for i in 0..50 {
        s.propose_and_commit(2, &format!("n{i}"));
    }
    let snap = s.snapshot(2);
    assert!(snap.last.index >= 60);
    assert_eq!(s.node(2).log().purged().index, snap.last.index);
    assert_eq!(s.node(2).commit_status(w), CommitStatus::Overwritten);

    s.heal();
    let mut resolved_at = None;
    for tick in 0..10 {
        s.tick_all(1);
        let st = s.node(1).commit_status(w);
        match st {
            CommitStatus::Overwritten => {
                resolved_at.get_or_insert(tick);
            }
            CommitStatus::Pending => assert!(resolved_at.is_none(), "W back to Pending"),
            other => panic!("W is {other:?} on the old leader"),
        }
    }
    assert!(resolved_at.is_some(), "W never resolved on the old leader");
    assert_eq!(s.node(1).role(), Role::Follower);
    assert_eq!(s.apps[&1].restores, vec![snap.last]);
    assert!(!s.apps[&1].sm.contains(&w), "W was never applied");
    assert!(s.node(1).log().first_index() > w.index, "W's index purged");

    for i in 0..5 {
        s.propose_and_commit(2, &format!("m{i}"));
    }
    s.tick_all(2);
    let last = s.node(2).log().last_log_id();
    assert_eq!(s.apps[&1].sm.last(), Some(&last), "old leader applies 51+");
    assert_eq!(s.node(1).commit_status(w), CommitStatus::Overwritten);
    s.assert_same_state_machines();
    s.c.assert_committed_preserved();
}

// ----- S10 -----

/// S10 — snapshots at an index not strictly above the commit index are ignored, whatever their
/// term: one at the committed index with another term, one below it with another term, and the
/// empty position. The log, commit index and snapshot stay as they were.
#[test]
fn s10_snapshot_not_strictly_above_the_commit_index_is_ignored() {
    for last in [LogId::new(3, 3), LogId::new(3, 1), LogId::new(3, 0)] {
        let mut s = Solo::new(test_config(2), &[1, 1, 1], hs(1, 3));
        while s.node.has_ready() {
            let rd = s.ready();
            if let Some(e) = rd.committed.last() {
                s.node.applied(e.index);
            }
        }
        s.step(
            1,
            3,
            MessageBody::InstallSnapshot {
                meta: meta(last, vec![LogId::new(3, last.index.max(1))]),
            },
        );
        while s.node.has_ready() {
            let rd = s.ready();
            assert!(rd.install_snapshot.is_none(), "{last}: installed");
            assert!(rd.committed.is_empty(), "{last}: applied again");
        }
        assert!(s.writes.iter().all(|w| w.install.is_none()), "{last}");
        assert_eq!(s.node.log().last_log_id(), LogId::new(1, 3), "{last}");
        assert_eq!(s.node.log().purged(), LogId::new(0, 0), "{last}");
        assert_eq!(s.node.commit_index(), 3, "{last}");
        assert_eq!(s.node.snapshot().last, LogId::new(0, 0), "{last}");
        assert_eq!(
            s.node.commit_status(LogId::new(1, 1)),
            CommitStatus::Committed
        );
        assert_eq!(
            s.replies(),
            vec![AppendResult::Success { match_index: 3 }],
            "{last}: the leader is told to continue after the commit index"
        );
        assert_eq!(s.disk.snapshot(), LogId::new(0, 0));
        // Restart: the store is as before.
        let n = RaftNode::new(test_config(2), s.disk.recover().unwrap()).unwrap();
        assert_eq!(n.log().last_log_id(), LogId::new(1, 3));
        assert_eq!(n.commit_index(), 3);
    }
}

/// S10 — a snapshot whose last term exceeds the term of the leader that sends it cannot come
/// from that leader (a leader of term T holds no entry of a later term): a previous incarnation
/// or a corrupt transfer. It must be rejected, not installed: installing leaves the node with a
/// log of a term beyond its own, and acknowledging it lets the leader count an index it never
/// replicated.
#[test]
fn s10_snapshot_with_a_term_above_the_leader_term_is_rejected() {
    let mut s = Solo::new(test_config(2), &[1, 1, 1], hs(1, 3));
    while s.node.has_ready() {
        let rd = s.ready();
        if let Some(e) = rd.committed.last() {
            s.node.applied(e.index);
        }
    }
    let bogus = meta(LogId::new(5, 10), vec![LogId::new(1, 1), LogId::new(5, 4)]);
    s.step(1, 3, MessageBody::InstallSnapshot { meta: bogus });
    while s.node.has_ready() {
        let rd = s.ready();
        assert!(rd.install_snapshot.is_none(), "bogus snapshot installed");
    }
    assert!(s.writes.iter().all(|w| w.install.is_none()));
    assert_eq!(s.node.log().last_log_id(), LogId::new(1, 3));
    assert_eq!(s.node.commit_index(), 3);
    assert!(
        !s.replies()
            .iter()
            .any(|r| matches!(r, AppendResult::Success { match_index } if *match_index >= 10)),
        "acknowledged a snapshot the leader cannot have"
    );
    assert_log_monotonic(&s.node);
}

// ----- S22 -----

/// S22 — a large commit jump handed out in many small batches, with more commits and a stale
/// (lower) heartbeat commit arriving in the middle and an application that reports late: commit
/// never lowers (in memory or in any write), every entry is handed out exactly once in order,
/// and applied reaches commit.
#[test]
#[expect(clippy::too_many_lines)]
fn s22_paginated_apply_never_lowers_commit_and_hands_out_each_entry_once() {
    let mut cfg = test_config(2);
    cfg.apply_entries_max = 7;
    let mut s = Solo::new(cfg, &[1; 200], hs(1, 0));
    s.step(
        1,
        1,
        MessageBody::Append {
            prev: LogId::new(1, 200),
            entries: vec![],
            commit: 200,
        },
    );
    let mut batches = 0;
    let mut unreported = None;
    while s.node.has_ready() {
        let rd = s.ready();
        assert!(rd.committed.len() <= 7);
        batches += 1;
        // The application reports every other batch only.
        if let Some(e) = rd.committed.last() {
            if batches % 2 == 0 {
                s.node.applied(e.index);
                unreported = None;
            } else {
                unreported = Some(e.index);
            }
        }
        if batches == 5 {
            // More entries and a further commit arrive mid-way...
            s.step(
                1,
                1,
                MessageBody::Append {
                    prev: LogId::new(1, 200),
                    entries: entries_from(201, &[1; 60]),
                    commit: 260,
                },
            );
            // ... then a heartbeat carrying an older commit.
            s.step(
                1,
                1,
                MessageBody::Heartbeat {
                    commit: 150,
                    read_round: 0,
                    clock: Default::default(),
                },
            );
            assert_eq!(s.node.commit_index(), 260);
        }
        if batches % 3 == 0 {
            // Heartbeat ticks flush the commit index to disk.
            for _ in 0..5 {
                s.node.tick();
            }
        }
        assert!(batches < 200);
    }
    if let Some(i) = unreported {
        s.node.applied(i);
    }
    assert!(batches >= 260 / 7, "paginated: {batches} batches");
    let handed: Vec<Index> = s.handed.iter().map(|e| e.index).collect();
    assert_eq!(
        handed,
        (1..=260).collect::<Vec<_>>(),
        "each entry once, in order"
    );
    assert_eq!(s.node.commit_index(), 260);
    assert_eq!(s.node.status().applied, 260);
    let written: Vec<Index> = s
        .writes
        .iter()
        .filter_map(|w| w.hard_state.map(|h| h.commit))
        .collect();
    assert!(!written.is_empty());
    assert!(
        written.windows(2).all(|w| w[0] <= w[1]),
        "written commit regressed: {written:?}"
    );
    assert!(s.disk.hard_state().commit <= 260);
}

/// S22 in a cluster: a follower cut off while 80 entries commit catches up through Appends with
/// `apply_entries_max = 3`; its state machine is contiguous and its commit never goes back.
#[test]
fn s22_cluster_catch_up_in_small_apply_batches() {
    let mut s = Sim::new(3, |cfg| {
        cfg.apply_entries_max = 3;
        cfg.entries_per_message_max = 16;
    });
    s.elect(1);
    s.isolate(3);
    for i in 0..80 {
        s.propose(1, &format!("v{i}"));
        if i % 10 == 9 {
            s.run();
        }
    }
    s.run();
    assert!(s.node(1).commit_index() >= 80);
    assert!(s.node(3).commit_index() < 5);
    s.heal();
    s.tick_all(12);
    assert_eq!(s.node(3).commit_index(), s.node(1).commit_index());
    assert_eq!(s.apps[&3].applied(), s.node(1).commit_index());
    s.assert_same_state_machines();
}

// ----- S35 -----

fn s35_setup() -> (Sim, Term, SnapshotMeta, SnapshotMeta) {
    let mut s = Sim::new(3, |cfg| cfg.snapshot_trailing_entries = 0);
    let t1 = s.elect(1);
    for i in 0..5 {
        s.propose_and_commit(1, &format!("a{i}"));
    }
    s.tick_all(2);
    s.isolate(3);
    for i in 0..20 {
        s.propose_and_commit(1, &format!("b{i}"));
    }
    s.tick_all(2);
    let snap1 = s.snapshot(1);
    let snap2 = s.snapshot(2);
    assert_eq!(snap1.last, snap2.last);
    // n3 comes back and n1 starts streaming its snapshot, which the transport holds.
    s.auto_snapshots = false;
    s.heal();
    s.tick_all(12);
    assert_eq!(s.held_snapshots.len(), 1, "n1 streams its snapshot to n3");
    assert_eq!(s.held_snapshots[0].to, 3);
    assert_eq!(s.held_snapshots[0].term, t1);
    (s, t1, snap1, snap2)
}

fn s35_finish(mut s: Sim, t1: Term, t2: Term, snap2: &SnapshotMeta) {
    // The old leader's transfer completes after the new leader exists: stale term, ignored.
    let stale = s.held_snapshots.remove(0);
    assert_eq!(stale.from, 1);
    let before = (s.node(3).log().last_log_id(), s.node(3).commit_index());
    let sent_before = s.c.sent.len();
    // Stepped directly: n1 is still cut off, the transfer itself was already under way.
    s.c.node_mut(3).step(stale);
    s.observe(3);
    assert_eq!(s.node(3).term(), t2);
    s.run();
    assert!(s.apps[&3].restores.is_empty(), "stale snapshot installed");
    assert_eq!(s.node(3).snapshot().last, LogId::new(0, 0));
    assert_eq!(
        (s.node(3).log().last_log_id(), s.node(3).commit_index()),
        before
    );
    assert!(
        !s.c.sent[sent_before..]
            .iter()
            .any(|m| m.to == 1 && matches!(m.body, MessageBody::AppendResponse(_))),
        "stale install acknowledged"
    );
    assert!(t1 < t2);
    // The new leader's snapshot (held too) is installed.
    let fresh: Vec<Message> = s.held_snapshots.drain(..).collect();
    assert!(fresh
        .iter()
        .all(|m| m.from == 2 && m.term == t2 && m.to == 3));
    assert!(!fresh.is_empty(), "n2 streams a snapshot to n3");
    s.auto_snapshots = true;
    for m in fresh {
        s.deliver(m);
    }
    s.run();
    assert_eq!(s.apps[&3].restores, vec![snap2.last]);
    s.heal();
    for i in 0..5 {
        s.propose_and_commit(2, &format!("c{i}"));
    }
    s.tick_all(3);
    assert_eq!(s.leader(), Some(2));
    for id in 1..=3 {
        assert_eq!(s.node(id).commit_index(), s.node(2).log().last_index());
    }
    s.assert_same_state_machines();
    s.c.assert_committed_preserved();
}

impl Sim {
    fn leader(&self) -> Option<NodeId> {
        self.c.leader()
    }
}

/// S35 — n3 is receiving n1's snapshot when leadership moves to n2 (higher term). The old
/// leader's InstallSnapshot then arrives with a stale term and is ignored; n2's snapshot is
/// installed; all state machines end equal.
#[test]
fn s35_stale_leader_snapshot_ignored_new_leader_snapshot_installed() {
    let (mut s, t1, _snap1, snap2) = s35_setup();
    // Leadership moves to n2 (n1 cut off); n2 needs the snapshot for n3 too.
    s.isolate(1);
    let t2 = s.elect(2);
    assert!(t2 > t1);
    s35_finish(s, t1, t2, &snap2);
}

/// S35 with n3 restarting between the leader change and the arrival of the stale snapshot.
#[test]
fn s35_stale_leader_snapshot_ignored_after_restart() {
    let (mut s, t1, _snap1, snap2) = s35_setup();
    s.isolate(1);
    let t2 = s.elect(2);
    s.crash(3);
    s.restart(3);
    assert_eq!(s.node(3).term(), t2, "the vote's term is durable");
    // n2's first transfer was lost with the crash; the transport reports it and n2 retries.
    let before = s.held_snapshots.len();
    s.held_snapshots.retain(|m| m.from != 2);
    assert_eq!(
        s.held_snapshots.len(),
        before - 1,
        "n2 had started a transfer"
    );
    s.c.node_mut(2).snapshot_send_failed(3);
    s.tick_all(2);
    assert!(s.held_snapshots.iter().any(|m| m.from == 2), "n2 retries");
    s35_finish(s, t1, t2, &snap2);
}
