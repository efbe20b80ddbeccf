//! `RaftNode::validate`, one test per rule: the message it refuses, and its honest neighbours
//! (stale, duplicated, reordered, empty) that must pass.

use std::sync::Arc;

use super::*;
use crate::membership::Membership;
use crate::types::SnapshotMeta;
use crate::InvalidMessage;

/// n2, following n1 in term 3, holding entries 1..=4 of terms 1, 1, 2, 3.
fn follower() -> RaftNode {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1, 2, 3], hs(3, None, 0));
    f.step(heartbeat(1, 2, 3));
    settle(&mut f);
    assert_eq!(f.leader(), Some(1));
    f
}

fn meta(last: LogId, history: Vec<LogId>) -> SnapshotMeta {
    SnapshotMeta {
        last,
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: history,
    }
}

fn install(from: NodeId, to: NodeId, term: Term, meta: SnapshotMeta) -> Message {
    msg(from, to, term, MessageBody::InstallSnapshot { meta })
}

#[test]
fn addressed_to_this_node_and_not_from_it() {
    let f = follower();
    assert_eq!(
        f.validate(&heartbeat(1, 3, 3)),
        Err(InvalidMessage::WrongRecipient { to: 3 })
    );
    assert_eq!(
        f.validate(&heartbeat(2, 2, 3)),
        Err(InvalidMessage::FromSelf)
    );
    assert_eq!(
        f.validate(&heartbeat(0, 2, 3)),
        Err(InvalidMessage::ReservedNodeId)
    );
    assert_eq!(f.validate(&heartbeat(1, 2, 3)), Ok(()));
    // A node the configuration does not know yet may talk to us (a joining learner answers).
    assert_eq!(f.validate(&ack(9, 2, 3, 0)), Ok(()));
}

#[test]
fn terms_and_indexes_stay_below_the_limits() {
    let f = follower();
    let (term, index) = (crate::TERM_LIMIT, crate::INDEX_LIMIT);
    for m in [
        heartbeat(1, 2, Term::MAX),
        heartbeat(1, 2, term),
        vote_request(3, 2, term, LogId::new(1, 1)),
        vote_request(3, 2, 4, LogId::new(1, index)),
        append(1, 2, 3, LogId::new(3, 4), vec![entry(3, 5)], index),
        append(1, 2, 3, LogId::new(3, index - 1), vec![entry(3, index)], 0),
        msg(
            1,
            2,
            3,
            MessageBody::Heartbeat {
                commit: Index::MAX,
                read_round: 0,
                clock: Default::default(),
            },
        ),
        ack(3, 2, 3, index),
        install(1, 2, 3, meta(LogId::new(3, Index::MAX), vec![])),
    ] {
        assert_eq!(f.validate(&m), Err(InvalidMessage::OutOfRange), "{m:?}");
    }
    // A term far ahead, but below the limit, is a peer's right (a long partition without
    // pre-vote); so is a log that long.
    assert_eq!(f.validate(&heartbeat(3, 2, term - 1)), Ok(()));
    assert_eq!(
        f.validate(&vote_request(
            3,
            2,
            term - 1,
            LogId::new(term - 1, index - 1)
        )),
        Ok(())
    );
}

#[test]
fn term_zero_only_refuses_a_pre_vote() {
    let f = follower();
    assert_eq!(
        f.validate(&heartbeat(1, 2, 0)),
        Err(InvalidMessage::ZeroTerm)
    );
    let refusal = msg(3, 2, 0, MessageBody::PreVoteResponse { granted: false });
    assert_eq!(f.validate(&refusal), Ok(()), "a node that never had a term");
    let grant = msg(3, 2, 0, MessageBody::PreVoteResponse { granted: true });
    assert_eq!(f.validate(&grant), Err(InvalidMessage::ZeroTerm));
}

#[test]
fn log_positions_exist() {
    let f = follower();
    let no_term = LogId::new(0, 4);
    assert_eq!(
        f.validate(&vote_request(3, 2, 4, no_term)),
        Err(InvalidMessage::ImpossiblePosition(no_term))
    );
    assert_eq!(
        f.validate(&append(1, 2, 3, LogId::new(3, 0), vec![], 0)),
        Err(InvalidMessage::ImpossiblePosition(LogId::new(3, 0)))
    );
    // The sentinel before the first entry is a position: an empty log's vote, a probe at 0.
    assert_eq!(f.validate(&vote_request(3, 2, 4, LogId::ZERO)), Ok(()));
    assert_eq!(
        f.validate(&append(1, 2, 3, LogId::ZERO, entries_from(1, &[1, 1]), 0)),
        Ok(())
    );
}

#[test]
fn append_entries_are_contiguous_after_prev() {
    let f = follower();
    let prev = LogId::new(3, 4);
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, vec![entry(3, 6)], 0)),
        Err(InvalidMessage::EntryGap { after: 4, index: 6 })
    );
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, vec![entry(3, 5), entry(3, 5)], 0)),
        Err(InvalidMessage::EntryGap { after: 5, index: 5 })
    );
    // Already held (a duplicated or reordered Append), overlapping, or empty: all fine.
    assert_eq!(
        f.validate(&append(
            1,
            2,
            3,
            LogId::new(1, 1),
            entries_from(2, &[1, 2]),
            4
        )),
        Ok(())
    );
    assert_eq!(f.validate(&append(1, 2, 3, prev, vec![], 4)), Ok(()));
}

#[test]
fn append_entry_terms_never_fall_and_never_pass_the_leader() {
    let f = follower();
    let prev = LogId::new(2, 3);
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, vec![entry(3, 4), entry(2, 5)], 0)),
        Err(InvalidMessage::EntryTermFalls {
            before: 3,
            entry: LogId::new(2, 5)
        })
    );
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, vec![entry(1, 4)], 0)),
        Err(InvalidMessage::EntryTermFalls {
            before: 2,
            entry: LogId::new(1, 4)
        })
    );
    assert!(matches!(
        f.validate(&append(1, 2, 3, prev, vec![entry(4, 4)], 0)),
        Err(InvalidMessage::TermAboveMessage { term: 4, .. })
    ));
    assert!(matches!(
        f.validate(&append(1, 2, 3, LogId::new(4, 4), vec![], 0)),
        Err(InvalidMessage::TermAboveMessage { term: 4, .. })
    ));
    // Entries of older terms, re-sent by a newer leader, are ordinary.
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, entries_from(4, &[2, 3, 3]), 0)),
        Ok(())
    );
}

#[test]
fn configuration_entries_have_voters_and_no_node_zero() {
    let f = follower();
    let config = |m: Membership| Entry {
        term: 3,
        index: 5,
        payload: EntryPayload::Membership(Arc::new(m)),
    };
    let prev = LogId::new(3, 4);
    let learners_only = Membership {
        learners: [1, 2].into(),
        ..Default::default()
    };
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, vec![config(learners_only)], 0)),
        Err(InvalidMessage::BadConfiguration)
    );
    assert_eq!(
        f.validate(&append(
            1,
            2,
            3,
            prev,
            vec![config(Membership::new_voters([0, 1]))],
            0
        )),
        Err(InvalidMessage::BadConfiguration)
    );
    let joint = Membership {
        voters: [1, 2].into(),
        outgoing: [1, 2, 3].into(),
        learners: [4].into(),
    };
    assert_eq!(
        f.validate(&append(1, 2, 3, prev, vec![config(joint)], 0)),
        Ok(())
    );
}

#[test]
fn snapshot_term_history_rises_and_ends_at_its_last_entry() {
    let f = follower();
    let last = LogId::new(3, 9);
    let ok = meta(last, vec![LogId::new(1, 1), LogId::new(3, 6)]);
    assert_eq!(f.validate(&install(1, 2, 3, ok)), Ok(()));
    for history in [
        vec![LogId::new(3, 1), LogId::new(1, 6)],
        vec![LogId::new(1, 6), LogId::new(3, 1)],
        vec![LogId::new(1, 1), LogId::new(3, 10)],
    ] {
        assert_eq!(
            f.validate(&install(1, 2, 3, meta(last, history))),
            Err(InvalidMessage::BadTermHistory)
        );
    }
    assert!(matches!(
        f.validate(&install(1, 2, 3, meta(LogId::new(4, 9), vec![]))),
        Err(InvalidMessage::TermAboveMessage { term: 4, .. })
    ));
    // A late copy of a snapshot from an earlier leader is stale, not invalid.
    let old = meta(LogId::new(2, 3), vec![LogId::new(1, 1), LogId::new(2, 3)]);
    assert_eq!(f.validate(&install(3, 2, 2, old)), Ok(()));
}

#[test]
fn a_vote_request_log_is_no_newer_than_its_term() {
    let f = follower();
    let pre_vote = |term, last| msg(3, 2, term, MessageBody::PreVote { last_log_id: last });
    assert!(matches!(
        f.validate(&vote_request(3, 2, 4, LogId::new(5, 9))),
        Err(InvalidMessage::TermAboveMessage { term: 5, .. })
    ));
    assert!(matches!(
        f.validate(&pre_vote(4, LogId::new(4, 9))),
        Err(InvalidMessage::TermAboveMessage { term: 4, .. })
    ));
    assert_eq!(f.validate(&vote_request(3, 2, 4, LogId::new(4, 9))), Ok(()));
    assert_eq!(f.validate(&pre_vote(4, LogId::new(3, 9))), Ok(()));
}

#[test]
fn no_second_leader_in_a_term() {
    let f = follower();
    for body in [
        MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: Default::default(),
        },
        MessageBody::TimeoutNow,
        MessageBody::Append {
            prev: LogId::new(1, 2),
            entries: vec![],
            commit: 0,
        },
    ] {
        assert_eq!(
            f.validate(&msg(3, 2, 3, body.clone())),
            Err(InvalidMessage::SecondLeader { term: 3, leader: 1 })
        );
        // The known leader, an older term's leader (stale) and a newer term's (legitimate).
        assert_eq!(f.validate(&msg(1, 2, 3, body.clone())), Ok(()));
        assert_eq!(f.validate(&msg(3, 2, 2, body.clone())), Ok(()));
        assert_eq!(f.validate(&msg(3, 2, 4, body)), Ok(()));
    }
    let mut n = node_with(1, &[1, 2, 3], &[], hs(2, None, 0));
    make_leader(&mut n);
    let term = n.term();
    assert_eq!(
        n.validate(&heartbeat(2, 1, term)),
        Err(InvalidMessage::SecondLeader { term, leader: 1 })
    );
    let stale = install(
        2,
        1,
        term - 1,
        meta(LogId::new(1, 1), vec![LogId::new(1, 1)]),
    );
    assert_eq!(n.validate(&stale), Ok(()));
    // A candidate has no leader in its term: the winner's first Append makes it step back.
    let mut c = node_with(1, &[1, 2, 3], &[], hs(0, None, 0));
    make_candidate(&mut c);
    let term = c.term();
    assert_eq!(c.validate(&heartbeat(2, 1, term)), Ok(()));
}

#[test]
fn no_answers_from_a_term_this_node_never_reached() {
    let mut n = node_with(1, &[1, 2, 3], &[], hs(2, None, 0));
    make_leader(&mut n);
    let term = n.term();
    let future = |body| msg(2, 1, term + 1, body);
    let impossible = [
        future(MessageBody::AppendResponse(AppendResult::Success {
            match_index: 1,
        })),
        future(MessageBody::VoteResponse { granted: true }),
        future(MessageBody::HeartbeatResponse {
            read_round: 3,
            lagging: false,
            clock: Default::default(),
        }),
        future(MessageBody::HeartbeatResponse {
            read_round: 0,
            lagging: true,
            clock: Default::default(),
        }),
    ];
    for m in impossible {
        assert!(
            matches!(
                n.validate(&m),
                Err(InvalidMessage::AnswerFromFutureTerm { .. })
            ),
            "{m:?}"
        );
    }
    // What a node in a later term tells a stale leader or candidate, and current answers.
    let fine = [
        future(MessageBody::HeartbeatResponse {
            read_round: 0,
            lagging: false,
            clock: Default::default(),
        }),
        future(MessageBody::VoteResponse { granted: false }),
        future(MessageBody::PreVoteResponse { granted: false }),
        // A pre-vote can leave before the term it was sent from is durable, and a crash lose
        // that term: its granted answer may come from any later term.
        msg(
            2,
            1,
            term + 2,
            MessageBody::PreVoteResponse { granted: true },
        ),
        ack(2, 1, term, 1),
        ack(2, 1, term - 1, 1),
        msg(2, 1, term, MessageBody::VoteResponse { granted: true }),
    ];
    for m in fine {
        assert_eq!(n.validate(&m), Ok(()), "{m:?}");
    }
}

/// A repair request's term starts must describe a log from its last entry to its promise (a
/// peer reasons from them about which of its entries are the lost ones), and a committed answer
/// names a real configuration in a term the sender reached.
#[test]
#[expect(clippy::too_many_lines)]
fn repair_term_starts_and_committed_answers_describe_real_logs() {
    use crate::message::RepairAnswer;
    let f = follower();
    let request = |terms: Vec<(Term, Index)>| {
        msg(
            3,
            2,
            3,
            MessageBody::RepairRequest {
                promised: LogId::new(3, 9),
                last: LogId::new(1, 4),
                terms: terms.into_iter().map(|(t, i)| LogId::new(t, i)).collect(),
                holds_last: true,
            },
        )
    };
    assert_eq!(f.validate(&request(vec![(1, 5), (2, 6), (3, 8)])), Ok(()));
    for bad in [
        vec![],
        vec![(2, 6)],
        vec![(2, 6), (2, 7), (3, 8)],
        vec![(2, 7), (1, 8), (3, 9)],
        vec![(3, 4)],
        vec![(3, 10)],
        vec![(0, 5), (3, 6)],
        (1..=33).map(|i| (i, i + 4)).collect(),
    ] {
        assert_eq!(
            f.validate(&request(bad.clone())),
            Err(InvalidMessage::BadRepairTerms),
            "{bad:?}"
        );
    }
    let committed = |through: LogId, voters: &[NodeId]| {
        msg(
            3,
            2,
            3,
            MessageBody::RepairResponse(RepairAnswer::Committed {
                through,
                config: crate::Membership::new_voters(voters.iter().copied()),
            }),
        )
    };
    assert_eq!(f.validate(&committed(LogId::new(3, 7), &[1, 2, 3])), Ok(()));
    assert_eq!(
        f.validate(&committed(LogId::new(3, 7), &[])),
        Err(InvalidMessage::BadConfiguration)
    );
    assert_eq!(
        f.validate(&committed(LogId::new(3, 7), &[0, 1])),
        Err(InvalidMessage::BadConfiguration)
    );
    assert!(matches!(
        f.validate(&committed(LogId::new(4, 7), &[1, 2, 3])),
        Err(InvalidMessage::TermAboveMessage { .. })
    ));
    let holds = |after: LogId, through: LogId, voters: &[NodeId]| {
        msg(
            3,
            2,
            3,
            MessageBody::RepairResponse(RepairAnswer::Holds {
                after,
                through,
                config: crate::Membership::new_voters(voters.iter().copied()),
            }),
        )
    };
    let after = LogId::new(2, 5);
    assert_eq!(
        f.validate(&holds(after, LogId::new(3, 7), &[1, 2, 3])),
        Ok(())
    );
    for through in [after, LogId::new(3, 5), LogId::new(3, 4), LogId::new(1, 6)] {
        assert_eq!(
            f.validate(&holds(after, through, &[1, 2, 3])),
            Err(InvalidMessage::HeldNotAfter { after, through }),
            "{through}"
        );
    }
    assert_eq!(
        f.validate(&holds(after, LogId::new(3, 7), &[0, 1])),
        Err(InvalidMessage::BadConfiguration)
    );
    assert!(matches!(
        f.validate(&holds(after, LogId::new(4, 7), &[1, 2, 3])),
        Err(InvalidMessage::TermAboveMessage { .. })
    ));
}
