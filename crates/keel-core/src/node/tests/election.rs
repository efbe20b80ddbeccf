//! Terms, votes, elections, pre-vote, check-quorum and leases.

use std::collections::BTreeSet;

use super::*;

#[test]
fn fig2_rpc_terms_higher_term_makes_follower() {
    // A leader.
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    make_leader(&mut n);
    assert_eq!(n.term(), 2);
    n.step(msg(
        2,
        1,
        5,
        MessageBody::AppendResponse(AppendResult::Success { match_index: 1 }),
    ));
    assert_eq!((n.role(), n.term(), n.leader()), (Role::Follower, 5, None));
    assert_eq!(n.status().vote, None, "no vote yet in the new term");
    let out = settle(&mut n);
    assert_eq!(
        out.writes[0].hard_state,
        Some(hs(5, None, 1)),
        "new term persisted"
    );

    // A candidate.
    let mut c = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    make_candidate(&mut c);
    c.step(msg(3, 1, 4, MessageBody::VoteResponse { granted: false }));
    assert_eq!((c.role(), c.term()), (Role::Follower, 4));

    // A follower learns a newer term and its leader from an Append.
    let mut f = node_with(2, &[1, 2, 3], &[1], hs(1, Some(1), 1));
    f.step(append(3, 2, 3, LogId::new(1, 1), vec![], 1));
    assert_eq!((f.term(), f.leader(), f.status().vote), (3, Some(3), None));
}

#[test]
fn fig2_rpc_stale_term_is_rejected_with_current_term() {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1], hs(3, None, 0));
    f.step(append(1, 2, 2, LogId::new(1, 2), entries_from(3, &[2]), 2));
    let out = settle(&mut f);
    assert_eq!(f.log().last_index(), 2, "stale leader's entries refused");
    assert_eq!((f.term(), f.commit_index()), (3, 0));
    let [reply] = &out.messages[..] else {
        panic!("{:?}", out.messages)
    };
    assert!(
        reply.to == 1
            && reply.term == 3
            && matches!(
                reply.body,
                MessageBody::HeartbeatResponse { read_round: 0, .. }
            ),
        "the stale leader learns the newer term: {reply:?}"
    );
}

#[test]
fn fig2_request_vote_reject_stale_term() {
    let mut n = node_with(2, &[1, 2, 3], &[1], hs(3, None, 1));
    n.step(vote_request(3, 2, 2, LogId::new(1, 5)));
    let out = settle(&mut n);
    assert_eq!(
        out.messages,
        [msg(2, 3, 3, MessageBody::VoteResponse { granted: false })]
    );
    assert_eq!((n.term(), n.status().vote), (3, None));
}

#[test]
fn fig2_request_vote_grant_once_per_term() {
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    let request = |from| vote_request(from, 1, 2, LogId::new(1, 1));
    let reply = |to, granted| msg(1, to, 2, MessageBody::VoteResponse { granted });

    n.step(request(2));
    assert_eq!(settle(&mut n).messages, [reply(2, true)]);
    n.step(request(3));
    assert_eq!(
        settle(&mut n).messages,
        [reply(3, false)],
        "second candidate"
    );
    n.step(request(2));
    assert_eq!(settle(&mut n).messages, [reply(2, true)], "retransmission");

    // The vote survives a restart.
    let durable = n.status().durable_hard_state;
    assert_eq!((durable.term, durable.vote), (2, Some(2)));
    let mut restarted = node_with(1, &[1, 2, 3], &[1], durable);
    restarted.step(request(3));
    assert_eq!(settle(&mut restarted).messages, [reply(3, false)]);
}

#[test]
fn fig2_request_vote_reject_less_up_to_date_log() {
    // Voter's last entry is 2/3. Each request comes in a new term, so the vote is free.
    let mut n = node_with(1, &[1, 2, 3], &[1, 2, 2], hs(2, None, 0));
    let cases = [
        (3, LogId::new(1, 5), false), // lower last term, longer log
        (4, LogId::new(2, 2), false), // same last term, shorter log
        (5, LogId::new(2, 3), true),  // identical
        (6, LogId::new(3, 1), true),  // higher last term, shorter log
    ];
    for (term, last, granted) in cases {
        n.step(vote_request(2, 1, term, last));
        assert_eq!(
            settle(&mut n).messages,
            [msg(1, 2, term, MessageBody::VoteResponse { granted })],
            "candidate with last entry {last}"
        );
    }
    // Pre-votes apply the same comparison.
    n.step(msg(
        3,
        1,
        7,
        MessageBody::PreVote {
            last_log_id: LogId::new(1, 9),
        },
    ));
    assert_eq!(
        settle(&mut n).messages,
        [msg(
            1,
            3,
            6,
            MessageBody::PreVoteResponse { granted: false }
        )]
    );
}

#[test]
fn fig2_candidate_steps_down_on_append_from_leader() {
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    make_candidate(&mut n);
    assert_eq!(n.term(), 2);
    n.step(append(3, 1, 2, LogId::new(1, 1), entries_from(2, &[2]), 1));
    assert_eq!(
        (n.role(), n.term(), n.leader()),
        (Role::Follower, 2, Some(3))
    );
    assert_eq!(n.status().vote, Some(1), "its vote in term 2 stands");
    let out = settle(&mut n);
    assert!(out.messages.contains(&ack(1, 3, 2, 2)));

    // A pre-candidate, too, at its unchanged term.
    let mut p = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    settle(&mut p); // replay the committed entry first
    p.campaign();
    assert_eq!(p.role(), Role::PreCandidate);
    p.step(append(3, 1, 1, LogId::new(1, 1), vec![], 1));
    assert_eq!(
        (p.role(), p.term(), p.leader()),
        (Role::Follower, 1, Some(3))
    );
}

#[test]
fn sec5_2_election_timeout_randomized_and_campaign() {
    let ticks_until_campaign = |seed| {
        let config = Config {
            seed,
            ..test_config(1)
        };
        let mut n = node_with_config(config, &[1, 2, 3], &[1], hs(1, None, 1));
        settle(&mut n); // replay the committed entry first
        (1..=100)
            .find(|_| {
                n.tick();
                n.role() != Role::Follower
            })
            .expect("campaigns")
    };
    let timeouts: Vec<u32> = (1..=32).map(ticks_until_campaign).collect();
    assert!(
        timeouts.iter().all(|t| (ET..2 * ET).contains(t)),
        "{timeouts:?}"
    );
    assert!(
        timeouts.iter().collect::<BTreeSet<_>>().len() >= 3,
        "randomized"
    );
    assert_eq!(ticks_until_campaign(7), ticks_until_campaign(7), "seeded");

    // Hearing from a leader resets the timer.
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    for t in 0..10 * ET {
        if t % (ET - 1) == 0 {
            n.step(msg(
                2,
                1,
                1,
                MessageBody::Heartbeat {
                    commit: 1,
                    read_round: 0,
                    clock: Default::default(),
                },
            ));
        }
        n.tick();
        assert_eq!(n.role(), Role::Follower, "tick {t}");
    }

    // campaign() starts at once, with a pre-vote for the next term to every other voter.
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    settle(&mut n); // replay the committed entry first
    n.campaign();
    let pre_vote = |to| {
        msg(
            1,
            to,
            2,
            MessageBody::PreVote {
                last_log_id: LogId::new(1, 1),
            },
        )
    };
    assert_eq!(settle(&mut n).messages, [pre_vote(2), pre_vote(3)]);
}

/// Ticks until a candidate of term 2 (pre-vote off, a fixed seed) campaigns again; `refusal`
/// (at tick, in term) is node 2's vote refusal, which must leave it a follower in that term.
fn ticks_until_next_campaign(voters: &[NodeId], refusal: Option<(u32, Term)>) -> u32 {
    let config = Config {
        seed: 11,
        pre_vote: false,
        ..test_config(1)
    };
    let mut n = node_with_config(config, voters, &[1], hs(1, None, 1));
    settle(&mut n);
    n.campaign();
    settle(&mut n);
    assert_eq!((n.role(), n.term()), (Role::Candidate, 2));
    let mut ticks = 0;
    loop {
        if let Some((at, term)) = refusal.filter(|(at, _)| *at == ticks) {
            n.step(msg(
                2,
                1,
                term,
                MessageBody::VoteResponse { granted: false },
            ));
            assert_eq!(
                (n.role(), n.term()),
                (Role::Follower, term),
                "refused at {at}"
            );
        }
        n.tick();
        ticks += 1;
        if n.role() == Role::Candidate && n.term() > 2 {
            return ticks;
        }
        assert!(ticks < 10 * ET, "never campaigned again");
    }
}

/// A candidate refused by a node in a newer term adopts the term, but keeps its own election
/// timer: restarting it would let a stale member that keeps campaigning (and whose newer term
/// comes back in every refusal) always time out first (simulator seed 1029).
#[test]
fn a_refusal_in_a_newer_term_does_not_restart_the_candidate_s_timer() {
    let unrefused = ticks_until_next_campaign(&[1, 2, 3], None);
    assert!(unrefused > 2, "{unrefused}");
    assert_eq!(
        ticks_until_next_campaign(&[1, 2, 3], Some((2, 7))),
        unrefused
    );
}

/// A candidate that loses its election (a refusal in its own term where every vote counts) steps
/// down but keeps the timer its campaign started: restarting it would let a stale member that
/// campaigns as often as it, and takes its own vote in each term first, win every later race to
/// time out (simulator seed 21044417).
#[test]
fn a_lost_election_does_not_restart_the_candidate_s_timer() {
    let unrefused = ticks_until_next_campaign(&[1, 2], None);
    assert!(unrefused > 2, "{unrefused}");
    assert_eq!(ticks_until_next_campaign(&[1, 2], Some((2, 2))), unrefused);
}

#[test]
fn prevote_does_not_bump_terms() {
    // A partitioned node campaigns over and over: its pre-votes go nowhere, its term stays.
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    let mut pre_votes = 0;
    for _ in 0..20 * ET {
        n.tick();
        for m in settle(&mut n).messages {
            assert!(
                matches!(m.body, MessageBody::PreVote { .. }) && m.term == 2,
                "{m:?}"
            );
            pre_votes += 1;
        }
    }
    assert!(pre_votes >= 20);
    assert_eq!(n.term(), 1);
    assert_eq!(n.status().durable_hard_state, hs(1, None, 1));

    // A voter that grants a pre-vote changes nothing and writes nothing.
    let mut v = node_with(2, &[1, 2, 3], &[1], hs(1, None, 1));
    v.step(msg(
        1,
        2,
        2,
        MessageBody::PreVote {
            last_log_id: LogId::new(1, 1),
        },
    ));
    let out = settle(&mut v);
    assert_eq!(
        out.messages,
        [msg(2, 1, 2, MessageBody::PreVoteResponse { granted: true })]
    );
    assert!(out.writes.is_empty());
    assert_eq!((v.term(), v.status().vote), (1, None));

    // Only a won pre-vote leads to a real term.
    n.campaign();
    n.step(msg(2, 1, 2, MessageBody::PreVoteResponse { granted: true }));
    assert_eq!((n.role(), n.term()), (Role::Candidate, 2));
}

#[test]
fn prevote_lost_to_a_longer_log_keeps_the_term() {
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    let mut v = node_with(2, &[1, 2, 3], &[1, 1], hs(1, None, 2));
    settle(&mut n); // replay the committed entry first
    n.campaign();
    let to_v = settle(&mut n).messages.into_iter().find(|m| m.to == 2);
    v.step(to_v.expect("pre-vote"));
    let replies = settle(&mut v).messages;
    assert_eq!(
        replies,
        [msg(
            2,
            1,
            1,
            MessageBody::PreVoteResponse { granted: false }
        )]
    );
    n.step(replies[0].clone());
    assert_eq!(
        n.role(),
        Role::PreCandidate,
        "one of three refused: pending"
    );
    n.step(msg(
        3,
        1,
        1,
        MessageBody::PreVoteResponse { granted: false },
    ));
    assert_eq!((n.role(), n.term()), (Role::Follower, 1));
}

#[test]
fn check_quorum_leader_steps_down_when_isolated() {
    let mut c = Cluster::with_config(3, |config| config.check_quorum = true);
    let term = c.elect(1);
    c.tick_all(5 * ET);
    assert_eq!(c.node(1).role(), Role::Leader, "connected: stays");
    c.isolate(3);
    c.tick_all(5 * ET);
    assert_eq!(c.node(1).role(), Role::Leader, "a quorum still answers");

    c.isolate(1);
    for _ in 0..2 * ET {
        c.tick(1);
        c.run_until_quiet();
    }
    assert_eq!(c.node(1).role(), Role::Follower, "lost its quorum");
    assert_eq!(c.node(1).term(), term);

    // Without check-quorum, the same leader would carry on.
    let mut c = Cluster::new(3);
    c.elect(1);
    c.isolate(1);
    for _ in 0..5 * ET {
        c.tick(1);
        c.run_until_quiet();
    }
    assert_eq!(c.node(1).role(), Role::Leader);
}

/// Both followers' disks stall (no write completes) for several election timeouts while the
/// leader keeps replicating: their acknowledgements wait, but their heartbeat responses do not,
/// so check-quorum keeps the leader; once the disks answer, the entries commit. Before, the
/// responses waited behind the entries and a snapshot's writeback on a shared disk could depose
/// a healthy leader (`keel up` under load).
#[test]
fn check_quorum_keeps_a_leader_whose_followers_disks_stall() {
    let mut c = Cluster::with_config(3, |config| config.check_quorum = true);
    let term = c.elect(1);
    c.peer(2).hold_writes = true;
    c.peer(3).hold_writes = true;
    let index = c.propose(1, "during the stall").index;
    for _ in 0..5 * ET {
        c.tick_all(1);
    }
    assert_eq!((c.node(1).role(), c.node(1).term()), (Role::Leader, term));
    assert!(
        c.node(1).commit_index() < index,
        "nothing durable on a follower yet"
    );
    c.peer(2).hold_writes = false;
    c.peer(3).hold_writes = false;
    c.complete_writes(2);
    c.complete_writes(3);
    c.tick_all(ET);
    assert_eq!((c.node(1).role(), c.node(1).term()), (Role::Leader, term));
    assert!(c.node(1).commit_index() >= index);
}

#[test]
fn lease_ignores_disruptive_vote_request() {
    let mut c = Cluster::with_config(3, |config| config.check_quorum = true);
    let term = c.elect(1);
    let last = LogId::new(term, 100);
    let disrupt = |to, transfer| {
        msg(
            3,
            to,
            term + 3,
            MessageBody::RequestVote {
                last_log_id: last,
                transfer,
            },
        )
    };

    // A follower that just heard from its leader ignores it: no new term, no answer.
    c.node_mut(2).step(disrupt(2, false));
    assert_eq!((c.node(2).term(), c.node(2).leader()), (term, Some(1)));
    c.process(2);
    assert!(c.queue.iter().all(|m| m.from != 2));
    // So does the leader, and a pre-vote is refused.
    c.node_mut(1).step(disrupt(1, false));
    assert_eq!((c.node(1).role(), c.node(1).term()), (Role::Leader, term));
    c.node_mut(2).step(msg(
        3,
        2,
        term + 1,
        MessageBody::PreVote { last_log_id: last },
    ));
    c.process(2);
    assert!(c
        .queue
        .iter()
        .any(|m| m.from == 2 && m.body == MessageBody::PreVoteResponse { granted: false }));

    // A transfer election is honoured even within the lease.
    c.node_mut(2).step(disrupt(2, true));
    assert_eq!(
        (c.node(2).term(), c.node(2).status().vote),
        (term + 3, Some(3))
    );

    // Once the lease expired, an ordinary request is honoured as well.
    let mut c = Cluster::with_config(3, |config| config.check_quorum = true);
    c.elect(1);
    c.isolate(1);
    for _ in 0..ET {
        c.tick(2);
    }
    c.node_mut(2).step(disrupt(2, false));
    assert_eq!(
        (c.node(2).term(), c.node(2).status().vote),
        (term + 3, Some(3))
    );
}

#[test]
fn a_node_whose_campaigns_are_held_starts_no_election_but_votes() {
    let mut n = node_with(2, &[1, 2, 3], &[1], hs(1, None, 1));
    n.hold_campaigns(true);
    for _ in 0..10 * n.config.election_timeout_ticks {
        n.tick();
    }
    n.campaign();
    n.step(msg(1, 2, 1, MessageBody::TimeoutNow));
    assert_eq!((n.role(), n.term()), (Role::Follower, 1));
    assert!(
        !settle(&mut n).messages.iter().any(is_vote_traffic),
        "no pre-vote, no vote request"
    );
    // It still votes.
    n.step(vote_request(3, 2, 2, LogId::new(1, 1)));
    let out = settle(&mut n);
    assert!(out
        .messages
        .iter()
        .any(|m| m.body == MessageBody::VoteResponse { granted: true }));
    // Released, it campaigns at its next timeout.
    n.hold_campaigns(false);
    for _ in 0..2 * n.config.election_timeout_ticks {
        n.tick();
    }
    assert_ne!(n.role(), Role::Follower);
}

/// Issue 20: a node whose disk lost entries it had acknowledged (through index 5 of term 1) holds
/// only index 1. It must not help elect a leader that lacks them, nor lead itself, until it has
/// them again.
#[test]
fn a_recovering_node_votes_only_for_logs_reaching_its_promise_and_starts_no_election() {
    let promised = LogId::new(1, 5);
    let mut n = node_with(2, &[1, 2, 3], &[1], hs(1, None, 1));
    n.start_recovering(promised, &[]);
    assert_eq!(n.recovering(), Some(promised));
    assert_eq!(n.status().recovering_to, Some(promised));
    for _ in 0..10 * n.config.election_timeout_ticks {
        n.tick();
    }
    n.campaign();
    n.step(msg(1, 2, 1, MessageBody::TimeoutNow));
    assert_eq!((n.role(), n.term()), (Role::Follower, 1));
    assert!(!settle(&mut n).messages.iter().any(is_vote_traffic));
    // A candidate as up to date as this node's own log, but not as its promise: refused.
    n.step(vote_request(3, 2, 2, LogId::new(1, 4)));
    let out = settle(&mut n);
    assert!(out
        .messages
        .iter()
        .any(|m| m.body == MessageBody::VoteResponse { granted: false }));
    // One that reaches the promise (or is of a later term): granted.
    n.step(vote_request(1, 2, 3, LogId::new(1, 5)));
    let out = settle(&mut n);
    assert!(out
        .messages
        .iter()
        .any(|m| m.body == MessageBody::VoteResponse { granted: true }));
    // The leader sends what is missing; durable, the node is whole and acts as any other.
    let missing = (2..=5).map(|i| entry(1, i)).collect();
    n.step(append(1, 2, 3, LogId::new(1, 1), missing, 5));
    assert_eq!(n.recovering(), Some(promised), "not durable yet");
    settle(&mut n);
    assert_eq!(n.recovering(), None);
    for _ in 0..2 * n.config.election_timeout_ticks {
        n.tick();
    }
    assert_ne!(n.role(), Role::Follower, "campaigns again");
}

#[test]
fn a_node_whose_durable_log_already_reaches_its_promise_is_not_recovering() {
    let mut n = node_with(2, &[1, 2, 3], &[1, 1, 1], hs(1, None, 1));
    n.start_recovering(LogId::new(1, 3), &[]);
    assert_eq!(n.recovering(), None);
    // An entry of an older term at the promised index is not what was promised.
    let mut stale = node_with(2, &[1, 2, 3], &[1, 1, 1], hs(2, None, 1));
    stale.start_recovering(LogId::new(2, 3), &[]);
    assert_eq!(stale.recovering(), Some(LogId::new(2, 3)));
}
