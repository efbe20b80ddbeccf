//! Scripted scenarios from docs/SCENARIOS.md, run against the core with the harness in
//! `common/`. Each test follows the scenario's "Expected" text step by step; the harness checks
//! the persistence contract, S23 (nothing applied before it is durable), State Machine Safety and
//! Election Safety on every `Ready` along the way.

mod common;

// The harness names core items through `crate::` (so the unit tests can include it too): this
// import provides them at this crate's root.
use keel_core::{
    storage, AppendResult, CommitStatus, Config, Entry, EntryPayload, HardState, Index, LogId,
    Message, MessageBody, NodeId, RaftNode, ReadState, Role, Term, Write,
};

use common::{storage_with, test_config, Cluster};

fn hs(term: Term, commit: Index) -> HardState {
    HardState {
        term,
        vote: None,
        commit,
    }
}

fn is_append(m: &Message) -> bool {
    matches!(m.body, MessageBody::Append { .. })
}

fn applied_ids(c: &mut Cluster, id: NodeId) -> Vec<LogId> {
    c.peer(id).applied.iter().map(Entry::log_id).collect()
}

/// S15 — a follower must not commit stale entries beyond the prefix an Append proved to match.
#[test]
fn s15_empty_append_commits_only_the_matched_prefix() {
    let voters = [1, 2, 3];
    // n2 holds 1/6..1/8 from a deposed term-1 leader; they never reached n1 or n3.
    let mut c = Cluster::from_storages(vec![
        (test_config(1), storage_with(&voters, &[1; 5], hs(1, 5))),
        (test_config(2), storage_with(&voters, &[1; 8], hs(1, 5))),
        (test_config(3), storage_with(&voters, &[1; 5], hs(1, 5))),
    ]);
    c.isolate(2);
    assert_eq!(c.elect(1), 2);
    c.propose_and_commit(1, "x");
    c.propose_and_commit(1, "y");
    assert_eq!(c.log_terms(1), [1, 1, 1, 1, 1, 2, 2, 2]);
    assert_eq!(c.node(1).commit_index(), 8);
    assert_eq!(c.node(2).commit_index(), 5);

    // n1's AE { prev = 1/5, entries = [], leaderCommit = 8 } reaches n2.
    c.heal();
    c.drop_queue();
    c.node_mut(2).step(Message {
        from: 1,
        to: 2,
        term: 2,
        body: MessageBody::Append {
            prev: LogId::new(1, 5),
            entries: vec![],
            commit: 8,
        },
    });
    c.process(2);
    c.complete_writes(2);
    c.process(2);
    assert_eq!(
        c.node(2).commit_index(),
        5,
        "commit = min(leaderCommit, prev + len(entries))"
    );
    assert!(applied_ids(&mut c, 2).iter().all(|id| id.index <= 5));
    let ack = c.queue.iter().find(|m| m.from == 2 && m.to == 1);
    assert_eq!(
        ack.map(|m| &m.body),
        Some(&MessageBody::AppendResponse(AppendResult::Success {
            match_index: 5
        }))
    );

    // The leader continues from 6 and the stale entries are overwritten, then committed.
    c.run_until_quiet();
    assert_eq!(c.log_terms(2), [1, 1, 1, 1, 1, 2, 2, 2]);
    assert_eq!(c.node(2).commit_index(), 8);
    let applied = applied_ids(&mut c, 2);
    assert_eq!(
        &applied[5..],
        &[LogId::new(2, 6), LogId::new(2, 7), LogId::new(2, 8)]
    );
    // Until n2 acknowledged more, no heartbeat carried a commit index beyond 5 to it.
    let acked_8 = c
        .sent
        .iter()
        .position(|m| {
            m.from == 2
                && m.body == MessageBody::AppendResponse(AppendResult::Success { match_index: 8 })
        })
        .expect("n2 acknowledged 8");
    for m in c.sent[..acked_8].iter().filter(|m| m.to == 2) {
        if let MessageBody::Heartbeat { commit, .. } = m.body {
            assert!(commit <= 5, "{m:?}");
        }
    }
    c.assert_committed_preserved();
}

/// S23 — with one voter, an entry is reported committed only after the local write completes.
#[test]
fn s23_single_voter_reports_committed_only_after_local_write() {
    let mut c = Cluster::new(1);
    c.elect(1);
    let noop = c.node(1).commit_index();
    c.peer(1).hold_writes = true;

    let e = c.propose(1, "E");
    c.process(1);
    let pending: Vec<LogId> = c.peer(1).pending_writes[0]
        .entries
        .iter()
        .map(Entry::log_id)
        .collect();
    assert_eq!(pending, [e], "E goes to storage ...");
    assert!(
        applied_ids(&mut c, 1).iter().all(|id| id.index < e.index),
        "... and not to the state machine"
    );
    assert_eq!(c.node(1).commit_index(), noop);
    assert_eq!(c.node(1).commit_status(e), CommitStatus::Pending);
    assert!(!c.node(1).has_ready());

    // Crash before the write completes: E is gone everywhere, state machine included.
    c.crash(1);
    c.restart(1);
    c.peer(1).hold_writes = false;
    c.process_all();
    assert_eq!(c.node(1).log().last_index(), noop);
    assert!(!c.committed.contains_key(&e.index));

    // Again with two batches in flight: each is reported once its own write completes.
    c.elect(1);
    c.peer(1).hold_writes = true;
    let e1 = c.propose(1, "E1");
    c.process(1);
    let e2 = c.propose(1, "E2");
    c.process(1);
    assert_eq!(c.peer(1).pending_writes.len(), 2);
    c.complete_next_write(1);
    c.process(1);
    let applied = applied_ids(&mut c, 1);
    assert_eq!(applied.last(), Some(&e1));
    assert_eq!(c.node(1).commit_status(e2), CommitStatus::Pending);
    c.complete_writes(1);
    c.process(1);
    assert_eq!(applied_ids(&mut c, 1).last(), Some(&e2));
}

/// S25 (Raft Figure 8). Returns the cluster after step (c), where the term-4 leader n1 must
/// not have committed `2/2` although it is on a majority and n1 knows it.
///
/// Differences from the paper's drawing: every new leader's first entry is its no-op, so `2/2`,
/// `3/2` and `4/3` are no-ops; and in (c) n1's first Append to n2 carries `4/3`, so n2 holds it
/// and in (d) n5 wins with the votes of n3 and n4 (not n2, n3 and n4).
fn figure8_until_c(tweak: impl Fn(&mut Config)) -> Cluster {
    let voters = [1, 2, 3, 4, 5];
    let nodes = voters
        .iter()
        .map(|&id| {
            let mut config = test_config(id);
            // One entry per Append, so `2/2` can reach n3 without `4/3`.
            config.entries_per_message_max = 1;
            tweak(&mut config);
            (config, storage_with(&voters, &[1], hs(1, 1)))
        })
        .collect();
    let mut c = Cluster::from_storages(nodes);

    // (a) n1 leads term 2 and writes 2/2 (its no-op) to n1 and n2 only; crashes.
    c.set_filter(|m| !(is_append(m) && m.from == 1 && m.to >= 3));
    assert_eq!(c.elect(1), 2);
    assert_eq!(c.log_terms(2), [1, 2]);
    assert_eq!(c.node(1).commit_index(), 1);
    c.crash(1);

    // (b) n5 leads term 3 with votes of n3, n4, n5 and writes 3/2 locally only; crashes.
    c.isolate(2);
    c.set_filter(|m| !(is_append(m) && m.from == 5));
    assert_eq!(c.elect(5), 3);
    assert_eq!(c.log_terms(5), [1, 3]);
    c.crash(5);
    c.heal();

    // (c) n1 restarts and leads term 4 (no-op 4/3). 2/2 reaches n3 (now on n1, n2, n3); 4/3
    // reaches only n2, so it is on two nodes.
    c.restart(1);
    let mut term4_to_n3 = 0;
    c.set_filter(move |m| {
        if !is_append(m) || m.from != 1 {
            return true;
        }
        let MessageBody::Append { entries, .. } = &m.body else {
            unreachable!()
        };
        match m.to {
            4 => false,
            // The first such Append is rejected (n3 lacks index 2): it makes n1 back up.
            3 if entries.iter().any(|e| e.term == 4) => {
                term4_to_n3 += 1;
                term4_to_n3 == 1
            }
            _ => true,
        }
    });
    assert_eq!(c.elect(1), 4);
    assert_eq!(c.log_terms(1), [1, 2, 4]);
    assert_eq!(c.log_terms(2), [1, 2, 4]);
    assert_eq!(c.log_terms(3), [1, 2]);
    assert_eq!(c.log_terms(4), [1]);
    c
}

#[test]
fn s25_figure8_previous_term_entry_is_not_committed_by_counting_replicas() {
    let mut c = figure8_until_c(|_| {});
    assert_eq!(
        c.node(1).commit_index(),
        1,
        "figure 8: term-4 leader committed 2/2 by counting its replicas"
    );
    assert_eq!(
        c.node(1).commit_status(LogId::new(2, 2)),
        CommitStatus::Pending
    );
    assert!(!c.committed.contains_key(&2));

    // (d) n1 crashes; n5 restarts and wins with votes of n3 and n4 (their last terms 2 and 1
    // are behind its 3; n2's 4/3 is not), then overwrites index 2 with 3/2 and commits it.
    c.crash(1);
    c.clear_filter();
    c.isolate(2);
    c.restart(5);
    let term = c.elect(5);
    assert!(term >= 5);
    c.run_until_quiet();
    assert_eq!(c.log_terms(3)[..2], [1, 3]);
    assert_eq!(c.committed.get(&2), Some(&3), "3/2 is committed");

    // Everyone converges on n5's log; no entry ever reported committed is lost.
    c.heal();
    c.restart(1);
    c.tick_all(4);
    c.assert_converged();
    c.assert_committed_preserved();
    assert_eq!(c.log_terms(1)[..2], [1, 3]);
}

/// (e) of Figure 8: once the term-4 leader's own entry reaches a majority, 2/2 commits with it
/// and n5 can no longer win.
#[test]
fn s25_figure8_previous_term_entry_commits_indirectly_through_current_term() {
    let mut c = figure8_until_c(|_| {});
    c.clear_filter();
    c.tick_all(6); // retransmission after the dropped Appends
    assert!(c.node(1).commit_index() >= 3);
    assert_eq!(
        c.node(1).commit_status(LogId::new(2, 2)),
        CommitStatus::Committed
    );
    c.crash(1);
    c.restart(5);
    c.node_mut(5).campaign();
    c.run_until_quiet();
    c.node_mut(5).campaign();
    c.run_until_quiet();
    assert_ne!(c.node(5).role(), Role::Leader, "n5 lacks committed 2/2");
    c.assert_committed_preserved();
}

/// The deliberately broken variant commits 2/2 in step (c): the scenario above must catch it.
#[cfg(feature = "mutations")]
#[test]
#[should_panic(expected = "figure 8: term-4 leader committed 2/2")]
fn s25_mutation_commit_old_term_is_caught() {
    let c = figure8_until_c(|config| config.mutation = Some(keel_core::Mutation::CommitOldTerm));
    assert_eq!(
        c.node(1).commit_index(),
        1,
        "figure 8: term-4 leader committed 2/2 by counting its replicas"
    );
}

/// ... and if nothing stopped it there, 2/2 would be applied and later lost.
#[cfg(feature = "mutations")]
#[test]
#[should_panic(expected = "state machine safety")]
fn s25_mutation_commit_old_term_loses_a_committed_entry() {
    let mut c =
        figure8_until_c(|config| config.mutation = Some(keel_core::Mutation::CommitOldTerm));
    assert_eq!(c.committed.get(&2), Some(&2), "the mutant applied 2/2");
    c.crash(1);
    c.clear_filter();
    c.isolate(2);
    c.restart(5);
    c.elect(5);
    c.run_until_quiet();
}

/// Ticks `leader` until it heartbeats `to`; returns that heartbeat and drops everything else
/// that was queued.
fn next_heartbeat(c: &mut Cluster, leader: NodeId, to: NodeId) -> Message {
    for _ in 0..test_config(leader).heartbeat_interval_ticks {
        c.tick(leader);
        c.process(leader);
        let beat = c
            .queue
            .iter()
            .find(|m| m.to == to && matches!(m.body, MessageBody::Heartbeat { .. }));
        if let Some(beat) = beat.cloned() {
            c.drop_queue();
            return beat;
        }
    }
    panic!("no heartbeat from {leader} to {to}");
}

/// Runs a 3-node cluster to `n` committed entries with n1 leading.
fn three_nodes_with_entries(n: u64) -> Cluster {
    let mut c = Cluster::with_config(3, |config| config.entries_per_message_max = 3);
    c.elect(1);
    while c.node(1).commit_index() < n {
        c.propose_and_commit(1, "x");
    }
    c.tick_all(2); // followers learn the commit index and write it
    c
}

/// S29 — a follower that lost acknowledged entries gets a heartbeat with a commit index beyond
/// its log: it clamps without panicking; the leader learns where its log ends, resets its
/// progress and re-replicates; nothing committed is lost and each entry is applied once.
#[test]
fn s29_heartbeat_commit_beyond_amnesiac_follower_is_clamped() {
    let mut c = three_nodes_with_entries(3);
    let disk_at_3 = c.peer(3).storage.clone();
    while c.node(1).commit_index() < 8 {
        c.propose_and_commit(1, "y");
    }
    c.tick_all(2);
    assert_eq!(c.node(3).commit_index(), 8);
    assert_eq!(c.peer(3).storage.last_index(), 8);

    // n3 comes back with a disk that lost 4..8 (un-fsynced writes it had acknowledged).
    c.crash(3);
    c.peer(3).storage = disk_at_3;
    c.restart(3);
    assert_eq!(c.node(3).log().last_index(), 3);

    // The leader still believes match(n3) = 8 and heartbeats commit 8.
    let beat = next_heartbeat(&mut c, 1, 3);
    assert!(matches!(
        beat.body,
        MessageBody::Heartbeat { commit: 8, .. }
    ));
    c.node_mut(3).step(beat);
    c.process(3);
    assert!(c.node(3).commit_index() <= 3, "clamped to the last index");
    assert!(applied_ids(&mut c, 3).iter().all(|id| id.index <= 3));

    // The leader learns that n3 ends at 3 (at the latest when its next Append goes unanswered
    // and it probes again), resets n3's progress and continues from 4.
    let mark = c.sent.len();
    c.run_until_quiet();
    c.propose_and_commit(1, "z");
    c.tick_all(10);
    let resent = c.sent[mark..].iter().find(|m| {
        m.from == 1
            && m.to == 3
            && matches!(m.body, MessageBody::Append { prev, .. } if prev.index == 3)
    });
    assert!(resent.is_some(), "leader re-replicates from 4");
    c.tick_all(2);
    c.assert_converged();
    c.assert_committed_preserved();
    let applied: Vec<Index> = c.peer(3).applied.iter().map(|e| e.index).collect();
    assert_eq!(applied, (1..=9).collect::<Vec<_>>(), "each applied once");
}

/// S29 variant: the data directory is wiped; the node comes back empty with the same id and is
/// rebuilt once the leader has something to send.
#[test]
fn s29_wiped_follower_is_rebuilt_without_panic() {
    let mut c = three_nodes_with_entries(8);
    c.crash(3);
    c.peer(3).storage = storage::MemStorage::new_cluster([1, 2, 3]);
    c.restart(3);
    let beat = next_heartbeat(&mut c, 1, 3);
    assert!(matches!(
        beat.body,
        MessageBody::Heartbeat { commit: 8, .. }
    ));
    c.node_mut(3).step(beat);
    c.process(3);
    assert_eq!(c.node(3).commit_index(), 0, "clamped to the empty log");
    c.run_until_quiet();
    c.propose_and_commit(1, "z");
    c.tick_all(10);
    c.assert_converged();
    c.assert_committed_preserved();
}

/// S29 "Expected": the follower's reply lets the leader reset its progress, so a wiped follower
/// is rebuilt even while no client writes.
#[test]
fn s29_wiped_follower_is_rebuilt_while_the_cluster_is_idle() {
    let mut c = three_nodes_with_entries(8);
    c.crash(3);
    c.peer(3).storage = storage::MemStorage::new_cluster([1, 2, 3]);
    c.restart(3);
    c.tick_all(10 * test_config(1).election_timeout_ticks);
    assert_eq!(c.node(3).log().last_index(), 8, "n3 never rebuilt");
    c.assert_converged();
}

/// S29 with a disk that lost acknowledged writes *and* kept stale entries underneath them: n3
/// comes back with 1/4..1/6 of a deposed leader, which the term-2 leader had overwritten with
/// 2/4..2/6 (committed, acknowledged by n3). A heartbeat's commit, clamped to n3's last index,
/// must not commit the stale entries.
#[test]
fn s29_amnesiac_follower_does_not_commit_its_stale_suffix() {
    let voters = [1, 2, 3];
    let stale_disk = storage_with(&voters, &[1; 6], hs(1, 3));
    let mut c = Cluster::from_storages(vec![
        (test_config(1), storage_with(&voters, &[1; 3], hs(1, 3))),
        (test_config(2), storage_with(&voters, &[1; 3], hs(1, 3))),
        (test_config(3), stale_disk.clone()),
    ]);
    c.elect(1);
    c.propose_and_commit(1, "5");
    c.propose_and_commit(1, "6");
    c.tick_all(2);
    assert_eq!(c.log_terms(3), [1, 1, 1, 2, 2, 2]);
    assert_eq!(c.node(3).commit_index(), 6);

    c.crash(3);
    c.peer(3).storage = stale_disk;
    c.restart(3);
    c.tick_all(2); // heartbeat { commit: min(match 6, 6) } reaches n3
    assert!(
        applied_ids(&mut c, 3)
            .iter()
            .all(|id| (id.term == 1 && id.index <= 3) || id.term == 2),
        "n3 applied a stale entry"
    );
    c.propose_and_commit(1, "7");
    c.tick_all(10);
    c.assert_converged();
    c.assert_committed_preserved();
}

/// S29, leader side: when an amnesiac follower rejects a probe at the point the leader believed
/// it matched, the leader must stop counting it for any index it has not re-acknowledged. Here
/// n3 acknowledged 2/5 and 2/6, lost them (its disk came back with stale 1/4..1/6), and rejects
/// the probe at 2/6. If the leader then assumed n3 still matches up to 5, one more replica (n2)
/// would let it commit 2/5, held by n1 and n2 only: a minority that n3, n4, n5 can outvote.
#[test]
fn s29_leader_stops_counting_an_amnesiac_follower() {
    use std::cell::Cell;
    use std::rc::Rc;

    let voters = [1, 2, 3, 4, 5];
    let config = |id| Config {
        entries_per_message_max: 1,
        ..test_config(id)
    };
    let stale_disk = storage_with(&voters, &[1; 6], hs(1, 3));
    let mut c = Cluster::from_storages(
        voters
            .iter()
            .map(|&id| {
                let disk = if id == 3 {
                    stale_disk.clone()
                } else {
                    storage_with(&voters, &[1; 3], hs(1, 3))
                };
                (config(id), disk)
            })
            .collect(),
    );
    c.elect(1);
    assert_eq!(c.log_terms(3), [1, 1, 1, 2]);
    // Only n3 receives 2/5 and 2/6: match(n3) = 6, commit stays 4.
    for to in [2, 4, 5] {
        c.block(1, to);
    }
    c.propose(1, "5");
    c.propose(1, "6");
    c.run_until_quiet();
    assert_eq!(c.log_terms(3), [1, 1, 1, 2, 2, 2]);
    assert_eq!(c.node(1).commit_index(), 4);

    // n3's disk comes back with its old content.
    c.crash(3);
    c.peer(3).storage = stale_disk;
    c.restart(3);
    // The next Append to n3 is rejected; after a stall the leader probes at 2/6, n3 rejects
    // that too; then the link between them fails (heartbeats to n3 are dropped throughout).
    let conflicts = Rc::new(Cell::new(0));
    let seen = conflicts.clone();
    c.set_filter(move |m| {
        let conflict = matches!(
            m.body,
            MessageBody::AppendResponse(AppendResult::Conflict { .. })
        );
        if m.from == 3 && conflict {
            seen.set(seen.get() + 1);
            return seen.get() <= 2;
        }
        let heartbeat = matches!(m.body, MessageBody::Heartbeat { .. });
        !(m.to == 3 && (heartbeat || seen.get() >= 2))
    });
    c.propose(1, "7");
    for _ in 0..20 {
        c.tick(1);
        c.run_until_quiet();
    }
    assert_eq!(conflicts.get(), 2, "the probe at 2/6 was rejected");

    // n2 comes back and acknowledges 2/5. Only n1 and n2 hold it.
    c.unblock(1, 2);
    for _ in 0..20 {
        c.tick(1);
        c.run_until_quiet();
    }
    assert_eq!(c.log_terms(2), [1, 1, 1, 2, 2, 2, 2]);
    assert_eq!(
        c.node(1).commit_index(),
        4,
        "n3 counted although it holds 1/5"
    );
    assert_eq!(
        c.node(1).commit_status(LogId::new(2, 5)),
        CommitStatus::Pending,
        "2/5 is on two of five nodes"
    );
}

/// S30 — a deposed leader on the minority side cannot serve a linearizable read, and a new
/// leader serves reads only after committing an entry of its term.
#[test]
fn s30_deposed_leader_cannot_confirm_a_read() {
    let mut c = Cluster::new(5);
    c.elect(1);
    c.propose_and_commit(1, "x=1");
    c.partition(&[1, 2]); // | {3, 4, 5}

    // n3 wins term 2, but its no-op does not reach anyone yet: a read must wait for it even
    // though n4 and n5 confirm the round.
    c.set_filter(|m| !(is_append(m) && m.from == 3));
    c.elect(3);
    c.node_mut(3).read_index(200).expect("leader");
    c.run_until_quiet();
    assert!(
        c.sent
            .iter()
            .any(|m| m.from == 4 && matches!(m.body, MessageBody::HeartbeatResponse { read_round, .. } if read_round > 0)),
        "the round was confirmed"
    );
    assert!(
        c.peer(3).read_states.is_empty(),
        "no read before the no-op commits"
    );

    c.clear_filter();
    c.tick_all(6);
    let noop_index = 3;
    assert!(c.node(3).commit_index() >= noop_index);
    let reads = c.peer(3).read_states.clone();
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].ctx, 200);
    assert!(reads[0].index >= noop_index);
    let x2 = c.propose_and_commit(3, "x=2");

    // n1 still believes it leads term 1. Its read cannot gather a quorum, however long it
    // tries, while the majority has committed x=2.
    assert_eq!(c.node(1).role(), Role::Leader);
    c.node_mut(1).read_index(100).expect("n1 thinks it leads");
    c.tick_all(30);
    assert_eq!(c.node(1).role(), Role::Leader);
    assert!(c.peer(1).read_states.is_empty(), "stale read served");
    assert!(c.node(1).commit_index() < x2.index);

    // Healing deposes n1; the read fails (to be retried elsewhere) rather than hanging.
    c.heal();
    c.tick_all(2);
    assert_eq!(c.node(1).role(), Role::Follower);
    assert_eq!(c.peer(1).failed_reads, [100]);
    assert!(c.peer(1).read_states.is_empty());
    c.tick_all(2);
    c.assert_converged();
    c.assert_committed_preserved();
}

/// S30 with check-quorum: the isolated leader steps down by itself within an election timeout
/// or two, failing its pending read.
#[test]
fn s30_check_quorum_deposes_minority_leader_and_fails_its_reads() {
    let mut c = Cluster::with_config(5, |config| config.check_quorum = true);
    c.elect(1);
    c.propose_and_commit(1, "x=1");
    c.partition(&[1, 2]); // | {3, 4, 5}
    c.node_mut(1).read_index(100).expect("leader");
    let election_timeout_ticks = test_config(1).election_timeout_ticks;
    c.tick_all(2 * election_timeout_ticks);
    assert_ne!(c.node(1).role(), Role::Leader);
    assert_eq!(c.peer(1).failed_reads, [100]);
    assert!(c.peer(1).read_states.is_empty());
    // Meanwhile the majority elected a leader of its own and makes progress.
    let leader = c.leader().expect("majority elects");
    assert!([3, 4, 5].contains(&leader));
    c.propose_and_commit(leader, "x=2");
    c.heal();
    c.tick_all(4);
    c.assert_converged();
    c.assert_committed_preserved();
}

/// S09 in the shape of the original report: a snapshot threshold of 32, bootstrap entries, then
/// writes whose commit and compaction land in the same step, and a caller that polls the commit
/// status of each of its writes only much later. Every write must resolve as committed, on every
/// node, although the entries are long gone from every log.
#[test]
fn s09_slow_poller_sees_every_compacted_write_committed() {
    const THRESHOLD: u64 = 32;
    let mut c = Cluster::with_config(3, |cfg| cfg.snapshot_trailing_entries = 0);
    let leader = 1;
    c.elect(leader);
    for i in 0..10 {
        c.propose_and_commit(leader, &format!("bootstrap-{i}"));
    }
    let mut written = Vec::new();
    let mut last_snapshot = [0; 4];
    for i in 0..100 {
        written.push(c.propose(leader, &format!("w{i}")));
        c.run_until_quiet();
        // Each node snapshots as soon as it applied THRESHOLD entries since its last one, in
        // the same step that committed them.
        for id in 1..=3 {
            let applied = c.node(id).status().applied;
            if applied >= last_snapshot[id as usize] + THRESHOLD {
                let meta = c
                    .node(id)
                    .snapshot_meta(applied)
                    .expect("applied is in the log");
                c.peer(id).storage.save_snapshot(&meta);
                c.node_mut(id).snapshot_saved(meta);
                last_snapshot[id as usize] = applied;
            }
        }
    }
    // The caller polls slowly: by then heartbeats have told the followers the last commit.
    c.tick_all(4);
    c.run_until_quiet();
    for id in 1..=3 {
        let purged = c.node(id).log().purged().index;
        assert!(purged >= 96, "node {id} compacted only to {purged}");
        for w in &written {
            assert_eq!(
                c.node(id).commit_status(*w),
                CommitStatus::Committed,
                "node {id}: write {w} must resolve as committed"
            );
        }
        // A term that never existed at a compacted index is not committed there.
        let w = written[0];
        assert_eq!(
            c.node(id).commit_status(LogId::new(w.term + 1, w.index)),
            CommitStatus::Overwritten
        );
    }
}

/// An application whose state is durable only up to some index keeps the entries after it: a
/// snapshot compacts the log no further than `keep_log_after` says, and no further than the
/// snapshot once the floor is gone.
#[test]
fn the_log_is_kept_after_the_applications_durable_index() {
    let mut c = Cluster::with_config(3, |cfg| cfg.snapshot_trailing_entries = 0);
    let leader = 1;
    c.elect(leader);
    for i in 0..20 {
        c.propose_and_commit(leader, &format!("w{i}"));
    }
    c.run_until_quiet();
    let applied = c.node(leader).status().applied;
    c.node_mut(leader).keep_log_after(Some(applied - 8));
    let meta = c.node(leader).snapshot_meta(applied).expect("in the log");
    c.peer(leader).storage.save_snapshot(&meta);
    c.node_mut(leader).snapshot_saved(meta);
    assert_eq!(c.node(leader).log().purged().index, applied - 8);
    for i in 0..5 {
        c.propose_and_commit(leader, &format!("v{i}"));
    }
    c.run_until_quiet();
    c.node_mut(leader).keep_log_after(None);
    let applied = c.node(leader).status().applied;
    let meta = c.node(leader).snapshot_meta(applied).expect("in the log");
    c.peer(leader).storage.save_snapshot(&meta);
    c.node_mut(leader).snapshot_saved(meta);
    assert_eq!(c.node(leader).log().purged().index, applied);
}
