//! Snapshot install rules (docs/DESIGN.md section 4, Raft Figure 13 with the fixes of S01, S03, S13,
//! S32) and the leader's switch to sending a snapshot (S11).

use std::sync::Arc;

use super::*;
use crate::membership::Membership;
use crate::types::SnapshotMeta;

/// A snapshot at `term/index` of a log whose entries before the snapshot's term were of term 1.
fn meta(term: Term, index: Index, voters: &[NodeId]) -> SnapshotMeta {
    let mut term_history = vec![LogId::new(1, 1)];
    if term > 1 {
        term_history.push(LogId::new(term, index));
    }
    SnapshotMeta {
        last: LogId::new(term, index),
        membership: Arc::new(Membership::new_voters(voters.iter().copied())),
        term_history,
    }
}

fn install(n: &mut RaftNode, from: NodeId, term: Term, m: SnapshotMeta) {
    n.step(Message {
        from,
        to: n.id(),
        term,
        body: MessageBody::InstallSnapshot { meta: m },
    });
}

fn append_reply(out: &Out) -> AppendResult {
    out.messages
        .iter()
        .find_map(|m| match m.body {
            MessageBody::AppendResponse(r) => Some(r),
            _ => None,
        })
        .expect("an append response")
}

/// The `prev` of the Append `rd` sends to `to`, if it sends one.
fn probe_to(rd: &crate::Ready, to: NodeId) -> Option<LogId> {
    rd.messages.iter().find_map(|m| match &m.body {
        MessageBody::Append { prev, .. } if m.to == to => Some(*prev),
        _ => None,
    })
}

/// A follower with an empty log rejecting the Append after `prev`.
fn reject(prev: LogId) -> AppendResult {
    AppendResult::Conflict {
        rejected: prev.index,
        hint_term: None,
        hint_index: 1,
    }
}

/// Steps follower `from`'s answer to an Append into the leader `n`.
fn answer(n: &mut RaftNode, from: NodeId, term: Term, result: AppendResult) {
    let to = n.id();
    n.step(Message {
        from,
        to,
        term,
        body: MessageBody::AppendResponse(result),
    });
}

#[test]
fn s01_snapshot_at_or_below_commit_is_not_installed_and_entries_apply_once() {
    // Follower: log 1..=10, commit 8, nothing applied yet (its apply loop lags).
    let mut n = node_with(3, &[1, 2, 3], &[1; 10], hs(1, None, 8));
    install(&mut n, 1, 1, meta(1, 6, &[1, 2, 3]));
    let out = settle(&mut n);
    assert_eq!(append_reply(&out), AppendResult::Success { match_index: 8 });
    assert!(
        out.writes.iter().all(|w| w.install.is_none()),
        "must not install"
    );
    assert_eq!(n.log().last_index(), 10, "log intact");
    let applied: Vec<Index> = out.committed.iter().map(|e| e.index).collect();
    assert_eq!(
        applied,
        (1..=8).collect::<Vec<_>>(),
        "each committed entry applied once"
    );
}

#[test]
fn s01_variant_snapshot_above_commit_installs_and_drops_pending_applies() {
    let mut n = node_with(3, &[1, 2, 3], &[1; 10], hs(1, None, 8));
    install(&mut n, 1, 2, meta(2, 12, &[1, 2, 3]));
    let rd = n.ready();
    assert!(
        rd.committed.is_empty(),
        "entries covered by the snapshot are never applied"
    );
    assert_eq!(
        rd.install_snapshot.as_ref().map(|m| m.last),
        Some(LogId::new(2, 12))
    );
    let w = rd.write.expect("the install is persisted");
    assert_eq!(w.install.as_ref().map(|m| m.last), Some(LogId::new(2, 12)));
    // The acknowledgement waits for the install to be durable.
    assert!(rd
        .messages
        .iter()
        .all(|m| !matches!(m.body, MessageBody::AppendResponse(_))));
    n.persisted(w.id);
    n.applied(12);
    let out = settle(&mut n);
    assert_eq!(
        append_reply(&out),
        AppendResult::Success { match_index: 12 }
    );
    assert_eq!(n.log().last_log_id(), LogId::new(2, 12));
    assert_eq!(n.commit_index(), 12);
    assert_eq!(n.status().applied, 12);
}

#[test]
fn s03_snapshot_matching_the_log_keeps_the_suffix() {
    // n2: 80 entries of term 3 matching the leader, commit only 40.
    let mut n = node_with(2, &[1, 2, 3], &[3; 80], hs(3, None, 40));
    install(&mut n, 1, 3, meta(3, 50, &[1, 2, 3]));
    let out = settle(&mut n);
    assert_eq!(
        append_reply(&out),
        AppendResult::Success { match_index: 50 }
    );
    assert_eq!(n.log().last_index(), 80, "51..=80 kept");
    assert_eq!(n.commit_index(), 50);
    assert!(out.writes.iter().all(|w| w.install.is_none()));
}

#[test]
fn s13_stale_snapshot_never_rewinds_the_state_machine() {
    let mut n = node_with(2, &[1, 2, 3], &[1; 90], hs(1, None, 90));
    settle(&mut n);
    assert_eq!(n.status().applied, 90);
    install(&mut n, 1, 1, meta(1, 70, &[1, 2, 3]));
    let out = settle(&mut n);
    assert!(out.writes.iter().all(|w| w.install.is_none()));
    assert_eq!(n.status().applied, 90);
    assert_eq!(n.commit_index(), 90);
}

#[test]
fn s32_install_replaces_a_stale_uncommitted_membership() {
    // Node 2 holds an uncommitted configuration entry at index 6 naming itself a voter; the
    // snapshot at 8 (another history) makes it a learner.
    let mut entries = entries_from(1, &[1; 5]);
    entries.push(Entry {
        term: 2,
        index: 6,
        payload: EntryPayload::Membership(Arc::new(Membership::new_voters([1, 2, 3]))),
    });
    let mut storage = MemStorage::new_cluster([1, 2, 3]);
    storage
        .write(&Write {
            id: 0,
            install: None,
            entries,
            hard_state: Some(hs(2, None, 5)),
            purge_to: None,
            sync: true,
            release_promise: false,
            lower_promise_to: None,
        })
        .unwrap();
    let mut n = RaftNode::new(test_config(2), storage.recover().unwrap()).unwrap();
    let mut m = meta(3, 8, &[1, 3]);
    Arc::make_mut(&mut m.membership).learners.insert(2);
    install(&mut n, 1, 3, m);
    settle(&mut n);
    assert!(!n.membership().is_voter(2), "a learner never campaigns");
    for _ in 0..10 * ET {
        n.tick();
    }
    assert_eq!(n.role(), Role::Follower);
}

#[test]
fn s11_leader_with_a_purged_log_sends_a_snapshot_when_it_loses_track_of_a_follower() {
    let mut c = Cluster::with_config(3, |cfg| cfg.snapshot_trailing_entries = 0);
    let leader = 1;
    let term = c.elect(leader);
    for i in 0..5 {
        c.propose_and_commit(leader, &format!("v{i}"));
    }
    c.run_until_quiet();
    let applied = c.node(leader).status().applied;
    let m = c
        .node(leader)
        .snapshot_meta(applied)
        .expect("applied index is in the log");
    c.node_mut(leader).snapshot_saved(m.clone());
    assert_eq!(
        c.node(leader).log().purged().index,
        applied,
        "the whole log is purged"
    );
    // Node 3 says it lost everything: first its heartbeat reply asks for a probe ...
    let n = c.node_mut(leader);
    n.step(Message {
        from: 3,
        to: leader,
        term,
        body: MessageBody::HeartbeatResponse {
            read_round: 0,
            lagging: true,
            clock: Default::default(),
        },
    });
    let prev = probe_to(&n.ready(), 3).expect("a probe to node 3");
    // ... and it rejects the probe: its log is empty.
    answer(n, 3, term, reject(prev));
    let rd = n.ready();
    assert_eq!(
        rd.send_snapshots
            .iter()
            .map(|(to, m)| (*to, m.last))
            .collect::<Vec<_>>(),
        vec![(3, m.last)],
        "the empty probe range must lead to a snapshot, not to silence"
    );
    assert!(probe_to(&rd, 3).is_none());
    // A failed transfer goes back to probing from just after the snapshot; node 3 rejects the
    // probe (it still holds nothing) and is sent the snapshot again.
    n.snapshot_send_failed(3);
    // At once, not at the next heartbeat: a "lagging" heartbeat answer in between would send
    // the leader back to the match index (seed 6044978).
    let prev = probe_to(&n.ready(), 3).expect("a probe right after the failed transfer");
    assert_eq!(prev, m.last, "the probe starts after the snapshot");
    answer(n, 3, term, reject(prev));
    assert_eq!(
        n.ready().send_snapshots.len(),
        1,
        "retried after the failure"
    );
    // This time the follower already holds the snapshot (the receiver refused it as not
    // needed): it accepts the probe after the failure, and replication goes on from there.
    n.snapshot_send_failed(3);
    let prev = probe_to(&n.ready(), 3).expect("a probe right after the failed transfer");
    assert_eq!(prev, m.last);
    answer(
        n,
        3,
        term,
        AppendResult::Success {
            match_index: m.last.index,
        },
    );
    assert!(n.ready().send_snapshots.is_empty());
    let progress = n.progress();
    let p3 = progress.iter().find(|p| p.id == 3).expect("node 3");
    assert_eq!(
        p3.match_index, m.last.index,
        "replication goes on after the snapshot"
    );
}

#[test]
fn s09_commit_status_stays_exact_after_compaction() {
    use crate::CommitStatus::*;
    // Terms 1,1,2,2,3,3 all committed and applied, then compacted away entirely.
    let mut cfg = test_config(1);
    cfg.snapshot_trailing_entries = 0;
    let mut n = node_with_config(cfg, &[1], &[1, 1, 2, 2, 3, 3], hs(3, None, 6));
    settle(&mut n);
    let m = n.snapshot_meta(6).expect("applied");
    n.snapshot_saved(m);
    assert_eq!(n.log().purged().index, 6, "everything compacted");
    // Case 1: an entry that committed and was compacted before anyone looked.
    assert_eq!(n.commit_status(LogId::new(3, 5)), Committed);
    assert_eq!(n.commit_status(LogId::new(2, 4)), Committed);
    assert_eq!(n.commit_status(LogId::new(1, 1)), Committed);
    // Another term at a committed index: overwritten, never "pending".
    assert_eq!(n.commit_status(LogId::new(2, 5)), Overwritten);
    // A term above the snapshot's at an index below it.
    assert_eq!(n.commit_status(LogId::new(4, 5)), Overwritten);
    // Beyond anything this node heard of.
    assert_eq!(n.commit_status(LogId::new(3, 7)), Unknown);
}

#[test]
fn s09_old_leader_installs_a_snapshot_over_its_overwritten_entry() {
    use crate::CommitStatus::*;
    // Case 2: the old leader holds 2/40 (uncommitted); the new leader overwrote index 40 in
    // term 3 and snapshotted at 40.
    let mut terms = vec![1; 39];
    terms.push(2);
    let mut n = node_with(1, &[1, 2, 3], &terms, hs(2, None, 39));
    install(&mut n, 2, 3, meta(3, 40, &[1, 2, 3]));
    let rd = n.ready();
    assert!(rd.install_snapshot.is_some());
    assert_eq!(n.commit_status(LogId::new(2, 40)), Overwritten);
    assert_eq!(n.commit_status(LogId::new(3, 40)), Committed);
    // Case 3: the new leader kept 2/40 (it was on a majority) and snapshotted at 45 in term 3.
    let mut n = node_with(1, &[1, 2, 3], &terms, hs(2, None, 39));
    let kept = SnapshotMeta {
        last: LogId::new(3, 45),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1), LogId::new(2, 40), LogId::new(3, 41)],
    };
    install(&mut n, 2, 3, kept);
    let _ = n.ready();
    assert_eq!(n.commit_status(LogId::new(2, 40)), Committed);
}

mod commit_status_model {
    use proptest::prelude::*;

    use super::*;
    use crate::CommitStatus;

    /// A log as runs of terms: (term increment, run length).
    fn terms_strategy() -> impl Strategy<Value = Vec<Term>> {
        prop::collection::vec((0u64..3, 1usize..5), 1..8).prop_map(|runs| {
            let mut term = 1;
            let mut out = Vec::new();
            for (inc, len) in runs {
                term += inc;
                out.extend(std::iter::repeat_n(term, len));
            }
            out
        })
    }

    proptest! {
        #[test]
        fn commit_status_matches_the_model_across_compaction(
            terms in terms_strategy(),
            commit_frac in 0.0f64..=1.0,
            purge_frac in 0.0f64..=1.0,
            queries in prop::collection::vec((1u64..40, 1u64..12), 1..40),
        ) {
            let last = terms.len() as Index;
            let commit = ((last as f64) * commit_frac) as Index;
            let purge = ((commit as f64) * purge_frac) as Index;
            let hard_term = *terms.last().unwrap();
            let mut cfg = test_config(1);
            cfg.snapshot_trailing_entries = 0;
            let mut n = node_with_config(cfg, &[1], &terms, hs(hard_term, None, commit));
            // Apply what is committed, then compact.
            let rd = n.ready();
            if let Some(w) = rd.write { n.persisted(w.id); }
            if let Some(e) = rd.committed.last() { n.applied(e.index); }
            if purge > 0 {
                let m = n.snapshot_meta(purge).expect("purge point is applied");
                n.snapshot_saved(m);
                prop_assert_eq!(n.log().purged().index, purge);
            }
            let term_at = |i: Index| terms[(i - 1) as usize];
            let committed_term = if commit == 0 { 0 } else { term_at(commit) };
            for (i, t) in queries {
                let expected = if i <= commit {
                    if term_at(i) == t { CommitStatus::Committed } else { CommitStatus::Overwritten }
                } else if t < committed_term {
                    CommitStatus::Overwritten
                } else if i > last {
                    CommitStatus::Unknown
                } else {
                    CommitStatus::Pending
                };
                prop_assert_eq!(n.commit_status(LogId::new(t, i)), expected, "query {}/{}", t, i);
            }
        }
    }
}

#[test]
fn a_node_that_knows_no_configuration_takes_no_snapshot() {
    // A node that joined from entries (the leader's log still began at the bootstrap snapshot)
    // never received the bootstrap configuration, and none of these entries carries one: a
    // snapshot here would record an empty configuration for every node it reaches (sweep 69's
    // seed 22848696).
    let mut joined = node_with(4, &[], &[1, 1, 2, 2], hs(2, None, 4));
    settle(&mut joined);
    assert_eq!(joined.snapshot_meta(4), None);
    assert_eq!(joined.snapshot_meta(2), None);
    // The same log under a known configuration.
    let mut member = node_with(4, &[1, 2, 3, 4], &[1, 1, 2, 2], hs(2, None, 4));
    settle(&mut member);
    let meta = member
        .snapshot_meta(4)
        .expect("applied, configuration known");
    assert_eq!(*meta.membership, Membership::new_voters([1, 2, 3, 4]));
}
