//! Restart from storage (docs/DESIGN.md section 1.3 and 3) and exact commit status (section 1.2).

use super::*;
use crate::{CommitStatus, Membership, MembershipChange};

#[test]
fn restart_replays_to_persisted_commit() {
    let mut c = Cluster::new(3);
    c.elect(1);
    for i in 0..5 {
        c.propose_and_commit(1, &format!("{i}"));
    }
    c.tick_all(4); // followers learn the commit index and write it lazily
    let commit = c.node(2).commit_index();
    assert_eq!(commit, 6);
    assert_eq!(c.peer(2).storage.hard_state().commit, commit);
    let before = c.peer(2).applied.clone();

    c.crash(2);
    c.isolate(2); // no leader can tell it anything
    c.restart(2);
    assert_eq!(c.node(2).commit_index(), commit);
    c.process_all();
    assert_eq!(
        c.peer(2).applied,
        before,
        "replayed before hearing from anyone"
    );
}

#[test]
fn restart_applies_nothing_beyond_persisted_commit() {
    let mut n = node_with(1, &[1, 2, 3], &[1, 1, 1, 1], hs(1, None, 2));
    let applied: Vec<Index> = settle(&mut n).committed.iter().map(|e| e.index).collect();
    assert_eq!(applied, [1, 2]);

    // A commit index beyond the log (never written that way, but be safe) is clamped.
    let n = node_with(1, &[1, 2, 3], &[1, 1, 1], hs(1, None, 10));
    assert_eq!(n.commit_index(), 3);

    // An applied index the state machine made durable counts as committed (S16).
    let mut recovered = storage_with(&[1, 2, 3], &[1, 1, 1, 1], hs(1, None, 1))
        .recover()
        .expect("recover");
    recovered.applied = 3;
    let mut n = RaftNode::new(test_config(1), recovered).expect("ok");
    assert_eq!(n.commit_index(), 3);
    assert!(settle(&mut n).committed.is_empty(), "nothing applied twice");
}

#[test]
fn restart_restores_membership_from_the_log() {
    let mut c = cluster_with_joining(&[4]);
    c.node_mut(1)
        .propose_membership(MembershipChange::AddVoter(4))
        .expect("leader");
    c.run_until_quiet();
    c.crash(2);
    c.isolate(2);
    c.restart(2);
    assert_eq!(
        c.node(2).membership(),
        &Membership::new_voters([1, 2, 3, 4])
    );
}

#[test]
fn restart_after_torn_write_keeps_the_written_prefix() {
    let mut c = Cluster::new(3);
    c.elect(1);
    c.peer(3).hold_writes = true;
    for i in 0..3 {
        c.propose(1, &format!("{i}"));
    }
    c.run_until_quiet();
    assert_eq!(c.peer(3).pending_writes[0].entries.len(), 3);
    let before = c.peer(3).storage.last_index();
    c.crash_torn(3, 1);
    c.peer(3).hold_writes = false;
    c.restart(3);
    assert_eq!(c.node(3).log().last_index(), before + 1);
    c.tick_all(ET);
    c.assert_converged();
    c.assert_committed_preserved();
}

#[test]
fn recovered_state_rejects_inconsistent_storage() {
    let base = || {
        storage_with(&[1, 2, 3], &[1, 2], hs(2, None, 2))
            .recover()
            .expect("recover")
    };
    let mut gap = base();
    gap.entries.remove(0);
    let mut applied_beyond_log = base();
    applied_beyond_log.applied = 3;
    for (what, recovered) in [("gap", gap), ("applied", applied_beyond_log)] {
        assert!(
            matches!(
                RaftNode::new(test_config(1), recovered),
                Err(crate::Error::Corrupt(_))
            ),
            "{what}"
        );
    }
}

#[test]
fn commit_status_committed_pending_overwritten() {
    let mut c = Cluster::new(3);
    c.elect(1);
    let a = c.propose_and_commit(1, "a");
    assert_eq!(c.node(1).commit_status(a), CommitStatus::Committed);

    // n1, cut off, accepts x; it can only be pending there.
    c.isolate(1);
    let x = c.propose(1, "x");
    c.run_until_quiet();
    assert_eq!(c.node(1).commit_status(x), CommitStatus::Pending);
    let beyond = LogId::new(x.term, x.index + 5);
    assert_eq!(c.node(1).commit_status(beyond), CommitStatus::Unknown);

    // n2 leads term 2 and commits its own entries at x's index and after.
    c.elect(2);
    let y = c.propose_and_commit(2, "y");
    c.heal();
    c.tick_all(4);
    assert_eq!(c.node(1).role(), Role::Follower);
    assert_eq!(c.node(1).commit_status(x), CommitStatus::Overwritten);
    assert_eq!(c.node(1).commit_status(y), CommitStatus::Committed);
    assert_eq!(c.node(1).commit_status(a), CommitStatus::Committed);
    c.assert_committed_preserved();
}

#[test]
fn restart_after_torn_write_adopts_the_log_term_without_a_vote() {
    // A batch of term-3 entries reached the disk, its hard state (term 3) did not.
    let mut recovered = storage_with(&[1, 2, 3], &[1, 3], hs(2, Some(2), 1))
        .recover()
        .expect("recover");
    assert_eq!(recovered.hard_state.term, 2);
    recovered.hard_state.vote = Some(2);
    let mut n = RaftNode::new(test_config(1), recovered).expect("a torn tail is not corruption");
    assert_eq!((n.term(), n.status().vote), (3, None));
    // Storage still holds term 2: the adopted term is written, synced, before anything else
    // (storage refuses an unsynced term change; simulator seed 21041481).
    assert_eq!(n.status().durable_hard_state.term, 2);
    let writes = settle(&mut n).writes;
    let first = writes.first().expect("the adopted term is written");
    assert_eq!(
        (first.hard_state.map(|h| (h.term, h.vote)), first.sync),
        (Some((3, None)), true)
    );
    n.step(vote_request(3, 1, 3, LogId::new(3, 2)));
    assert!(settle(&mut n).messages.contains(&msg(
        1,
        3,
        3,
        MessageBody::VoteResponse { granted: true }
    )));
}

/// docs/DESIGN.md 1.2: "the commit status of any (index, term) is exact at any time" and "a client
/// handle always resolves". Terms never decrease along a log, so once the commit index holds a
/// term above `t`, no entry of term `t` after it can ever commit: it is overwritten, even where
/// this node's log is shorter or holds another entry.
#[test]
fn commit_status_resolves_a_deposed_leaders_truncated_proposals() {
    let mut c = Cluster::new(3);
    c.elect(1);
    c.isolate(1);
    let x = c.propose(1, "x"); // 1/2
    let y = c.propose(1, "y"); // 1/3
    c.run_until_quiet();
    c.elect(2); // term 2, no-op 2/2 committed with n3
    c.heal();
    c.tick_all(4);
    assert_eq!(c.node(1).log().last_log_id(), LogId::new(2, 2));
    assert_eq!(c.node(1).commit_status(x), CommitStatus::Overwritten);
    // The cluster is idle: index 3 may never be written again, yet y must resolve.
    assert_eq!(c.node(1).commit_status(y), CommitStatus::Overwritten);
    // Same where index 3 holds an uncommitted entry of term 2.
    c.isolate(2);
    c.propose(2, "z");
    c.run_until_quiet();
    assert_eq!(c.node(2).log().last_log_id(), LogId::new(2, 3));
    assert_eq!(c.node(2).commit_status(y), CommitStatus::Overwritten);
}

#[test]
fn restart_does_not_campaign_before_replaying_its_commit() {
    // Single voter, five committed entries on disk: nothing is applied yet after the restart.
    let mut n = node_with(1, &[1], &[1; 5], hs(1, None, 5));
    assert!(n.is_replaying());
    for _ in 0..5 * ET {
        n.tick();
    }
    let rd = n.ready();
    assert_eq!(n.role(), Role::Follower, "no election while replaying");
    assert_eq!(rd.committed.len(), 5, "the replay is handed out");
    n.applied(5);
    assert!(!n.is_replaying());
    for _ in 0..5 * ET {
        n.tick();
    }
    let _ = settle(&mut n);
    assert_eq!(n.role(), Role::Leader);
}
