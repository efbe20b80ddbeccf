//! Membership changes by joint consensus, learners, removal of the leader, and leadership
//! transfer (thesis chapter 4 and section 3.10).

use std::collections::BTreeSet;

use super::*;
use crate::{CommitStatus, Membership, MembershipChange, ProposeError};

fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
    ids.iter().copied().collect()
}

fn joint(voters: &[NodeId], outgoing: &[NodeId]) -> Membership {
    Membership {
        voters: set(voters),
        outgoing: set(outgoing),
        learners: BTreeSet::new(),
    }
}

fn configs_in_log(c: &Cluster, id: NodeId) -> Vec<(Index, Membership)> {
    let log = c.node(id).log();
    (log.first_index()..=log.last_index())
        .filter_map(|i| match &log.entry(i)?.payload {
            EntryPayload::Membership(m) => Some((i, (**m).clone())),
            _ => None,
        })
        .collect()
}

fn carries_config(m: &Message, pred: impl Fn(&Membership) -> bool) -> bool {
    matches!(&m.body, MessageBody::Append { entries, .. }
        if entries.iter().any(|e| matches!(&e.payload, EntryPayload::Membership(c) if pred(c))))
}

#[test]
fn membership_joint_consensus_enters_and_leaves_joint() {
    let mut c = cluster_with_joining(&[4]);
    let entered = c
        .node_mut(1)
        .propose_membership(MembershipChange::AddVoter(4))
        .expect("leader");
    let old_new = joint(&[1, 2, 3, 4], &[1, 2, 3]);
    assert_eq!(c.node(1).membership(), &old_new, "in effect once appended");
    c.run_until_quiet();
    c.tick_all(2);
    let new = Membership::new_voters([1, 2, 3, 4]);
    assert_eq!(
        configs_in_log(&c, 1),
        [(entered.index, old_new), (entered.index + 1, new.clone())]
    );
    // C(new) was appended only once C(old,new) had committed.
    for m in c
        .sent
        .iter()
        .filter(|m| carries_config(m, |c| !c.is_joint()))
    {
        let MessageBody::Append { commit, .. } = m.body else {
            unreachable!()
        };
        assert!(commit >= entered.index, "{m:?}");
    }
    for id in 1..=4 {
        assert_eq!(c.node(id).membership(), &new, "node {id}");
        assert_eq!(c.node(id).commit_index(), entered.index + 1, "node {id}");
    }
}

#[test]
fn membership_joint_commit_needs_both_majorities() {
    let mut c = cluster_with_joining(&[4]);
    // Only n2 answers: a majority of the old voters {1,2,3}, not of the new {1,2,3,4}.
    c.block_both(1, 3);
    c.block_both(1, 4);
    let entered = c
        .node_mut(1)
        .propose_membership(MembershipChange::AddVoter(4))
        .expect("leader");
    c.run_until_quiet();
    assert_eq!(c.node(1).commit_status(entered), CommitStatus::Pending);
    // With n4: three of the four new voters and two of the three old ones.
    c.heal();
    c.block_both(1, 3);
    for _ in 0..ET {
        c.tick(1);
        c.run_until_quiet();
    }
    assert_eq!(c.node(1).commit_index(), entered.index + 1);
    assert_eq!(
        c.node(1).membership(),
        &Membership::new_voters([1, 2, 3, 4])
    );
}

#[test]
fn membership_joint_election_needs_both_majorities() {
    let old_new = joint(&[1, 4, 5], &[1, 2, 3]);
    let mut storage = MemStorage::new_cluster([1, 2, 3]);
    let mut entries = entries_from(1, &[1]);
    entries.push(Entry {
        term: 1,
        index: 2,
        payload: EntryPayload::Membership(old_new.clone().into()),
    });
    let write = Write {
        id: 0,
        install: None,
        purge_to: None,
        entries,
        hard_state: Some(hs(1, None, 0)),
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    };
    storage.write(&write).expect("in memory");
    let mut n = RaftNode::new(test_config(1), storage.recover().expect("recover")).expect("ok");
    assert_eq!(n.membership(), &old_new);

    n.campaign();
    let asked: BTreeSet<NodeId> = settle(&mut n).messages.iter().map(|m| m.to).collect();
    assert_eq!(asked, set(&[2, 3, 4, 5]), "both halves are asked");
    for from in [4, 5] {
        n.step(msg(
            from,
            1,
            2,
            MessageBody::PreVoteResponse { granted: true },
        ));
    }
    assert_eq!(
        n.role(),
        Role::PreCandidate,
        "a new majority alone is not enough"
    );
    n.step(msg(2, 1, 2, MessageBody::PreVoteResponse { granted: true }));
    assert_eq!(n.role(), Role::Candidate);
    settle(&mut n);
    for from in [4, 5] {
        n.step(msg(from, 1, 2, MessageBody::VoteResponse { granted: true }));
    }
    assert_eq!(n.role(), Role::Candidate);
    n.step(msg(3, 1, 2, MessageBody::VoteResponse { granted: true }));
    assert_eq!(n.role(), Role::Leader);
}

#[test]
fn membership_learner_does_not_vote_or_count() {
    let mut c = cluster_with_joining(&[4]);
    let added = c
        .node_mut(1)
        .propose_membership(MembershipChange::AddLearner(4))
        .expect("leader");
    let with_learner = Membership {
        learners: set(&[4]),
        ..Membership::new_voters([1, 2, 3])
    };
    assert_eq!(
        c.node(1).membership(),
        &with_learner,
        "one entry, no joint step"
    );
    c.run_until_quiet();
    assert_eq!(c.node(1).commit_status(added), CommitStatus::Committed);
    assert_eq!(
        c.log_terms(4),
        c.log_terms(1),
        "the learner receives the log"
    );

    // Its acknowledgement does not count toward a quorum.
    c.isolate(2);
    c.isolate(3);
    let x = c.propose(1, "x");
    c.run_until_quiet();
    assert_eq!(c.node(4).log().last_log_id(), x);
    assert_eq!(c.node(1).commit_status(x), CommitStatus::Pending);

    // It never campaigns, even when it hears nothing, and nobody asks for its vote.
    for _ in 0..5 * ET {
        c.tick(4);
        c.run_until_quiet();
    }
    assert_eq!(c.node(4).role(), Role::Follower);
    c.heal();
    c.crash(1);
    c.elect(2);
    assert!(!c
        .sent
        .iter()
        .any(|m| is_vote_traffic(m) && (m.from == 4 || m.to == 4)));

    // Promotion goes through joint consensus.
    c.node_mut(2)
        .propose_membership(MembershipChange::AddVoter(4))
        .expect("leader");
    assert_eq!(c.node(2).membership(), &joint(&[1, 2, 3, 4], &[1, 2, 3]));
    c.run_until_quiet();
    assert_eq!(
        c.node(2).membership(),
        &Membership::new_voters([1, 2, 3, 4])
    );
}

#[test]
fn membership_remove_leader_steps_down_after_commit() {
    let mut c = Cluster::new(3);
    c.elect(1);
    let entered = c
        .node_mut(1)
        .propose_membership(MembershipChange::Remove(1))
        .expect("leader");
    assert_eq!(c.node(1).membership(), &joint(&[2, 3], &[1, 2, 3]));
    c.run_until_quiet();
    assert_eq!(c.node(1).role(), Role::Follower);
    assert_eq!(
        c.node(1).commit_index(),
        entered.index + 1,
        "after C(new) committed"
    );
    assert_eq!(c.node(1).membership(), &Membership::new_voters([2, 3]));

    // The others carry on among themselves; n1 never campaigns again.
    let mark = c.sent.len();
    c.tick_all(5 * ET);
    let leader = c.leader().expect("n2 or n3 leads");
    assert!(leader == 2 || leader == 3);
    c.propose_and_commit(leader, "after");
    assert!(!c.sent[mark..]
        .iter()
        .any(|m| is_vote_traffic(m) && m.from == 1));
}

/// Raft thesis section 4.2.2: a node left out of its latest configuration still campaigns while
/// that configuration is not known committed, since the voters that hold only C(old,new) may need
/// it. Here a two-voter cluster removes its leader n1: C(old,new) commits, n1 appends C(new)={2}
/// and crashes before n2 gets it. n2 needs both votes of {1,2} and n1's log is longer, so only n1
/// can win; it must campaign, commit C(new) through n2 and step down, and n2 then leads alone.
/// Found by the simulator (seed 268 of the first sweep with membership of every size).
#[test]
fn removed_leader_with_uncommitted_config_campaigns() {
    let mut c = Cluster::new(2);
    c.elect(1);
    c.propose_and_commit(1, "x");
    c.set_filter(|m| !carries_config(m, |c| !c.is_joint()));
    let entered = c
        .node_mut(1)
        .propose_membership(MembershipChange::Remove(1))
        .expect("leader");
    c.run_until_quiet();
    assert_eq!(c.node(2).membership(), &joint(&[2], &[1, 2]));
    assert_eq!(c.node(1).membership(), &Membership::new_voters([2]));
    assert!(c.node(1).commit_index() >= entered.index);
    c.crash(1);
    c.restart(1);
    c.clear_filter();

    c.tick_all(10 * ET);
    assert_eq!(c.leader(), Some(2), "no leader after the leader's removal");
    assert_eq!(c.node(2).membership(), &Membership::new_voters([2]));
    c.propose_and_commit(2, "after");
    // n1 committed C(new) itself as the leader that stepped down: it never campaigns again.
    assert!(c.node(1).commit_index() > entered.index);
    assert_eq!(c.node(1).role(), Role::Follower);
    let mark = c.sent.len();
    c.tick_all(5 * ET);
    assert!(!c.sent[mark..]
        .iter()
        .any(|m| is_vote_traffic(m) && m.from == 1));
}

#[test]
fn membership_only_one_change_in_flight() {
    let mut c = cluster_with_joining(&[4, 5]);
    let add = MembershipChange::AddVoter;
    assert_eq!(
        c.node_mut(2).propose_membership(add(4)),
        Err(ProposeError::NotLeader { leader: Some(1) })
    );
    assert_eq!(
        c.node_mut(1).propose_membership(add(2)),
        Err(ProposeError::NoChange)
    );
    c.node_mut(1)
        .propose_membership(add(4))
        .expect("first change");
    assert_eq!(
        c.node_mut(1).propose_membership(add(5)),
        Err(ProposeError::MembershipChangeInProgress),
        "joint entry uncommitted"
    );
    // The joint entry commits, but C(new) reaches nobody.
    c.set_filter(|m| !carries_config(m, |c| !c.is_joint()));
    c.run_until_quiet();
    assert!(!c.node(1).membership().is_joint());
    assert_eq!(
        c.node_mut(1).propose_membership(add(5)),
        Err(ProposeError::MembershipChangeInProgress),
        "final entry uncommitted"
    );
    c.clear_filter();
    for _ in 0..ET {
        c.tick(1);
        c.run_until_quiet();
    }
    c.node_mut(1)
        .propose_membership(add(5))
        .expect("previous change complete");

    let mut solo = Cluster::new(1);
    solo.elect(1);
    assert_eq!(
        solo.node_mut(1)
            .propose_membership(MembershipChange::Remove(1)),
        Err(ProposeError::InvalidTarget),
        "no voters left"
    );
}

/// Adding a member that is already in the configuration, in either role it may be added in,
/// changes nothing: adding a voter as a learner used to turn into a demotion (a joint
/// configuration without it), so re-adding every voter in turn left a single voter.
#[test]
fn membership_readding_members_never_demotes_or_changes_anything() {
    let mut c = cluster_with_joining(&[4]);
    c.node_mut(1)
        .propose_membership(MembershipChange::AddLearner(4))
        .expect("learner added");
    c.run_until_quiet();
    let before = c.node(1).membership().clone();
    let last = c.node(1).log().last_index();
    for voter in [1, 2, 3] {
        assert_eq!(
            c.node_mut(1)
                .propose_membership(MembershipChange::AddLearner(voter)),
            Err(ProposeError::AlreadyVoter(voter))
        );
        assert_eq!(
            c.node_mut(1)
                .propose_membership(MembershipChange::AddVoter(voter)),
            Err(ProposeError::NoChange)
        );
    }
    assert_eq!(
        c.node_mut(1)
            .propose_membership(MembershipChange::AddLearner(4)),
        Err(ProposeError::NoChange)
    );
    c.run_until_quiet();
    assert_eq!(c.node(1).membership(), &before);
    assert_eq!(c.node(1).log().last_index(), last, "nothing was appended");
}

#[test]
fn leadership_transfer_sends_timeout_now_after_catch_up() {
    // Check-quorum on: the target's election must get through the voters' leases.
    let mut c = Cluster::with_config(3, |config| config.check_quorum = true);
    c.elect(1);
    c.block(1, 3);
    let b = c.propose_and_commit(1, "b");
    assert_eq!(
        c.node_mut(1).transfer_leadership(1),
        Err(ProposeError::InvalidTarget)
    );
    assert_eq!(
        c.node_mut(2).transfer_leadership(3),
        Err(ProposeError::NotLeader { leader: Some(1) })
    );
    c.node_mut(1).transfer_leadership(3).expect("leader");
    assert_eq!(
        c.node_mut(1).propose(data("c")),
        Err(ProposeError::TransferInProgress)
    );
    c.run_until_quiet();
    let timeout_now = |m: &Message| m.body == MessageBody::TimeoutNow;
    assert!(!c.sent.iter().any(timeout_now), "n3 lags behind");

    c.heal();
    for _ in 0..ET {
        c.tick_all(1);
        if c.leader() == Some(3) {
            break;
        }
    }
    assert_eq!(c.leader(), Some(3));
    assert_eq!(c.node(1).role(), Role::Follower);
    assert_eq!(c.sent.iter().filter(|m| timeout_now(m)).count(), 1);
    let sent_at = c.sent.iter().position(timeout_now).expect("sent");
    let caught_up = c
        .sent
        .iter()
        .position(|m| {
            m.from == 3
                && m.body
                    == MessageBody::AppendResponse(AppendResult::Success {
                        match_index: b.index,
                    })
        })
        .expect("n3 caught up");
    assert!(caught_up < sent_at);
    c.propose_and_commit(3, "c");
    c.assert_committed_preserved();
}

#[test]
fn leadership_transfer_is_abandoned_after_an_election_timeout() {
    let mut c = Cluster::new(3);
    c.elect(1);
    c.isolate(3);
    c.node_mut(1).transfer_leadership(3).expect("leader");
    for _ in 0..ET {
        c.tick(1);
        c.run_until_quiet();
    }
    assert_eq!(c.node(1).role(), Role::Leader);
    c.propose_and_commit(1, "x");
}

#[test]
fn membership_new_leader_finishes_a_joint_change() {
    let mut c = cluster_with_joining(&[4]);
    // The joint entry reaches everyone but commits nowhere visible: n1 crashes at once.
    let entered = c
        .node_mut(1)
        .propose_membership(MembershipChange::AddVoter(4))
        .expect("leader");
    c.process(1);
    c.crash(1);
    c.run_until_quiet();
    assert_eq!(c.node(2).membership(), &joint(&[1, 2, 3, 4], &[1, 2, 3]));
    assert!(c.node(2).commit_index() < entered.index);

    // n2 needs both majorities to win, then leaves the joint configuration on its own.
    c.elect(2);
    c.run_until_quiet();
    let new = Membership::new_voters([1, 2, 3, 4]);
    assert_eq!(c.node(2).membership(), &new);
    let configs = configs_in_log(&c, 2);
    assert_eq!(
        configs.last().map(|(i, _)| *i),
        Some(c.node(2).commit_index())
    );
    c.restart(1);
    c.tick_all(4);
    c.assert_converged();
    assert!((1..=4).all(|id| c.node(id).membership() == &new));
}

/// `progress()` tells which followers are up now: one that stopped answering is reported
/// inactive within an election timeout and active again once it answers (what a membership
/// change checks before it could leave the cluster without a quorum).
#[test]
fn progress_reports_followers_that_stopped_answering() {
    let mut c = Cluster::new(3);
    c.elect(1);
    let active = |c: &Cluster, id: NodeId| {
        c.node(1)
            .progress()
            .iter()
            .find(|p| p.id == id)
            .expect("a follower")
            .recently_active
    };
    assert!(active(&c, 2) && active(&c, 3));
    c.isolate(3);
    for _ in 0..ET + 1 {
        c.tick(1);
        c.tick(2);
        c.run_until_quiet();
    }
    assert!(active(&c, 2), "node 2 answers every heartbeat");
    assert!(
        !active(&c, 3),
        "node 3 has not answered for an election timeout"
    );
    c.heal();
    c.tick(1);
    c.run_until_quiet();
    for _ in 0..2 {
        c.tick(1);
        c.run_until_quiet();
    }
    assert!(active(&c, 3), "node 3 answers again");
}
