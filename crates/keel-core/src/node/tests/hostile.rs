//! Messages no honest peer sends, stepped straight into the core (no validator in front): each is
//! ignored, and the node stays correct and keeps working (issue #17: nothing a peer sends may
//! take a node down).

use std::sync::Arc;

use super::*;
use crate::membership::Membership;
use crate::types::SnapshotMeta;

/// A follower of n1 in term 1 holding entries 1..=2 of term 1.
fn follower() -> RaftNode {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1], hs(1, None, 0));
    f.step(heartbeat(1, 2, 1));
    settle(&mut f);
    f
}

#[test]
fn append_with_an_index_gap_is_ignored() {
    let mut f = follower();
    f.step(append(
        1,
        2,
        1,
        LogId::new(1, 2),
        vec![entry(1, 3), entry(1, 5)],
        0,
    ));
    let out = settle(&mut f);
    assert_eq!(out.messages, [], "nothing acknowledged");
    assert_eq!(f.log().last_log_id(), LogId::new(1, 2), "log untouched");
    // The honest Append after it is taken as usual.
    f.step(append(
        1,
        2,
        1,
        LogId::new(1, 2),
        entries_from(3, &[1, 1]),
        4,
    ));
    let out = settle(&mut f);
    assert_eq!(out.messages, [ack(2, 1, 1, 4)]);
    assert_eq!(f.commit_index(), 4);
}

#[test]
fn append_with_falling_or_future_entry_terms_is_ignored() {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1], hs(2, None, 0));
    f.step(heartbeat(1, 2, 2));
    settle(&mut f);
    let falling = vec![entry(2, 3), entry(1, 4)];
    f.step(append(1, 2, 2, LogId::new(1, 2), falling, 0));
    let above_leader = vec![entry(3, 3)];
    f.step(append(1, 2, 2, LogId::new(1, 2), above_leader, 0));
    let below_prev = vec![entry(1, 3)];
    f.step(append(1, 2, 2, LogId::new(2, 2), below_prev, 0));
    assert_eq!(settle(&mut f).messages, []);
    assert_eq!(f.log().last_log_id(), LogId::new(1, 2));
    assert_eq!(f.term(), 2);
}

#[test]
fn leader_messages_in_the_leaders_own_term_are_ignored() {
    let mut n = node_with(1, &[1, 2, 3], &[], hs(0, None, 0));
    make_leader(&mut n);
    let term = n.term();
    let last = n.log().last_log_id();
    let meta = SnapshotMeta {
        last: LogId::new(term, 50),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(term, 1)],
    };
    for body in [
        MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: Default::default(),
        },
        MessageBody::Append {
            prev: last,
            entries: vec![entry(term, last.index + 1)],
            commit: last.index + 1,
        },
        MessageBody::InstallSnapshot { meta: meta.clone() },
        MessageBody::TimeoutNow,
    ] {
        n.step(msg(2, 1, term, body));
        assert_eq!(n.role(), Role::Leader);
        assert_eq!(n.term(), term);
        assert_eq!(n.log().last_log_id(), last);
    }
    // Still a working leader: it commits what a quorum acknowledges.
    n.step(ack(2, 1, term, last.index));
    settle(&mut n);
    assert_eq!(n.commit_index(), last.index);
}

#[test]
fn terms_at_the_limit_are_never_adopted() {
    let mut f = follower();
    f.step(heartbeat(3, 2, Term::MAX));
    f.step(vote_request(3, 2, Term::MAX, LogId::new(Term::MAX - 1, 9)));
    f.step(msg(3, 2, crate::TERM_LIMIT, MessageBody::TimeoutNow));
    settle(&mut f);
    assert_eq!(f.term(), 1);
    assert_eq!(f.leader(), Some(1));
    // Its election timer still works and it can campaign in the next term.
    for _ in 0..2 * ET {
        f.tick();
    }
    settle(&mut f);
    f.step(msg(1, 2, 2, MessageBody::PreVoteResponse { granted: true }));
    settle(&mut f);
    assert_eq!(f.role(), Role::Candidate);
    assert_eq!(f.term(), 2);
}

#[test]
fn a_rejection_of_a_position_the_leader_never_sent_is_ignored() {
    let mut n = node_with(1, &[1, 2, 3], &[], hs(0, None, 0));
    make_leader(&mut n);
    let term = n.term();
    for rejected in [Index::MAX, 1000] {
        n.step(msg(
            2,
            1,
            term,
            MessageBody::AppendResponse(AppendResult::Conflict {
                rejected,
                hint_term: None,
                hint_index: rejected,
            }),
        ));
        let rd = n.ready();
        assert_eq!(rd.send_snapshots, [], "no snapshot for a log it has");
        assert!(rd.messages.is_empty());
    }
    n.step(ack(2, 1, term, 1));
    settle(&mut n);
    assert_eq!(n.commit_index(), 1);
}

#[test]
fn a_read_round_not_yet_broadcast_confirms_nothing() {
    let mut n = node_with(1, &[1, 2, 3], &[], hs(0, None, 0));
    make_leader(&mut n);
    let term = n.term();
    n.step(ack(2, 1, term, 1));
    settle(&mut n);
    assert_eq!(n.commit_index(), 1);
    n.read_index(7).expect("leader");
    settle(&mut n);
    let future = MessageBody::HeartbeatResponse {
        read_round: 1000,
        lagging: false,
        clock: Default::default(),
    };
    n.step(msg(2, 1, term, future));
    n.read_index(8).expect("leader");
    let out = settle(&mut n);
    assert_eq!(
        out.read_states,
        [],
        "neither read is confirmed by a round n2 never saw"
    );
    let confirm = |round| {
        msg(
            2,
            1,
            term,
            MessageBody::HeartbeatResponse {
                read_round: round,
                lagging: false,
                clock: Default::default(),
            },
        )
    };
    n.step(confirm(1));
    n.step(confirm(2));
    let out = settle(&mut n);
    assert_eq!(
        out.read_states,
        [
            ReadState { ctx: 7, index: 1 },
            ReadState { ctx: 8, index: 1 }
        ]
    );
}

#[test]
fn a_snapshot_ending_at_the_largest_index_is_ignored() {
    let mut f = follower();
    let meta = SnapshotMeta {
        last: LogId::new(1, Index::MAX),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1)],
    };
    f.step(msg(1, 2, 1, MessageBody::InstallSnapshot { meta }));
    assert_eq!(settle(&mut f).messages, []);
    assert_eq!(f.log().last_log_id(), LogId::new(1, 2));
    assert_eq!(f.commit_index(), 0);
}
