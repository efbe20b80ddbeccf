//! The persistence contract (docs/DESIGN.md section 3, thesis 10.2.1): votes and acknowledgements
//! leave only once durable; the leader replicates before its own write completes and counts
//! itself only after; nothing is applied before it is durable locally.

use super::*;

/// Messages a follower emits right after granting a vote, before its write completes.
fn vote_reply_before_persisted(config: Config) -> Vec<Message> {
    let mut n = node_with_config(config, &[1, 2, 3], &[1], hs(1, None, 1));
    n.step(vote_request(2, 1, 2, LogId::new(1, 1)));
    let rd = n.ready();
    let w = rd.write.expect("the vote is written");
    assert_eq!(w.hard_state, Some(hs(2, Some(2), 1)));
    assert!(w.sync, "a vote needs an fsync");
    rd.messages
}

/// Messages a follower emits right after accepting entries, before its write completes.
fn ack_before_persisted(config: Config) -> Vec<Message> {
    let mut f = node_with_config(config, &[1, 2, 3], &[1], hs(2, Some(1), 1));
    f.step(append(
        1,
        2,
        2,
        LogId::new(1, 1),
        entries_from(2, &[2, 2]),
        1,
    ));
    let rd = f.ready();
    let w = rd.write.expect("entries are written");
    assert_eq!(w.entries, entries_from(2, &[2, 2]));
    rd.messages
}

#[test]
fn vote_held_until_durable() {
    assert_eq!(vote_reply_before_persisted(test_config(1)), []);

    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    n.step(vote_request(2, 1, 2, LogId::new(1, 1)));
    let w = n.ready().write.expect("write");
    assert!(!n.has_ready(), "nothing to do until the disk answers");
    n.tick();
    assert!(n.ready().messages.is_empty());
    n.persisted(w.id);
    assert_eq!(
        n.ready().messages,
        [msg(1, 2, 2, MessageBody::VoteResponse { granted: true })]
    );
}

#[test]
fn vote_request_held_until_self_vote_durable_and_counted_only_then() {
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    settle(&mut n); // replay the committed entry first
    n.campaign();
    n.ready();
    n.step(msg(2, 1, 2, MessageBody::PreVoteResponse { granted: true }));
    assert_eq!((n.role(), n.term()), (Role::Candidate, 2));
    let rd = n.ready();
    assert!(rd.messages.iter().all(|m| !is_vote_traffic(m)), "{rd:?}");
    let w = rd.write.expect("self-vote written");
    assert_eq!(w.hard_state, Some(hs(2, Some(1), 1)));

    // A granted vote plus an un-durable self-vote is not a majority of three.
    n.step(msg(2, 1, 2, MessageBody::VoteResponse { granted: true }));
    assert_eq!(n.role(), Role::Candidate);
    n.persisted(w.id);
    assert_eq!(n.role(), Role::Leader);
    let sent = n.ready().messages;
    assert!(sent
        .iter()
        .any(|m| matches!(m.body, MessageBody::RequestVote { .. }) && m.to == 3));
}

#[test]
fn ack_held_until_durable() {
    assert_eq!(ack_before_persisted(test_config(2)), []);

    let mut f = node_with(2, &[1, 2, 3], &[1], hs(2, Some(1), 1));
    let request = append(1, 2, 2, LogId::new(1, 1), entries_from(2, &[2, 2]), 1);
    f.step(request.clone());
    let w = f.ready().write.expect("write");
    // The same request again (retransmission): nothing new to write, but the entries it
    // acknowledges are still not durable.
    f.step(request);
    let rd = f.ready();
    assert!(rd.write.is_none() && rd.messages.is_empty(), "{rd:?}");
    f.persisted(w.id);
    assert_eq!(f.ready().messages, [ack(2, 1, 2, 3), ack(2, 1, 2, 3)]);
}

#[cfg(feature = "mutations")]
#[test]
fn mutations_vote_and_ack_before_durable_are_caught() {
    let mutated = |id, mutation| Config {
        mutation: Some(mutation),
        ..test_config(id)
    };
    assert!(
        !vote_reply_before_persisted(mutated(1, crate::Mutation::VoteBeforeDurable)).is_empty()
    );
    assert!(!ack_before_persisted(mutated(2, crate::Mutation::AckBeforeDurable)).is_empty());
}

#[test]
fn leader_replicates_before_own_write_and_counts_itself_after() {
    let mut n = node_with(1, &[1, 2, 3], &[1], hs(1, None, 1));
    make_leader(&mut n);
    n.step(ack(2, 1, 2, 2));
    n.step(ack(3, 1, 2, 2));
    settle(&mut n);
    assert_eq!(n.commit_index(), 2, "no-op committed");

    let x = n.propose(data("x")).expect("leader");
    let rd = n.ready();
    let w = rd.write.expect("x is written");
    assert_eq!(log_ids(&w.entries), [x]);
    let appends: Vec<NodeId> = rd
        .messages
        .iter()
        .filter(
            |m| matches!(&m.body, MessageBody::Append { entries, .. } if entries[0].log_id() == x),
        )
        .map(|m| m.to)
        .collect();
    assert_eq!(appends, [2, 3], "replicated in the same Ready as the write");

    n.step(ack(2, 1, 2, 3));
    assert_eq!(
        n.commit_index(),
        2,
        "one follower and an un-durable leader: no quorum"
    );
    n.persisted(w.id);
    assert_eq!(n.commit_index(), 3, "the leader counts itself once durable");
    assert_eq!(log_ids(&n.ready().committed), [x]);

    // Two followers are a quorum without the leader, but the leader applies only what it holds.
    let y = n.propose(data("y")).expect("leader");
    let w = n.ready().write.expect("y is written");
    n.step(ack(2, 1, 2, 4));
    n.step(ack(3, 1, 2, 4));
    assert_eq!(n.commit_index(), 4);
    assert!(n.ready().committed.is_empty(), "not durable locally yet");
    n.persisted(w.id);
    assert_eq!(log_ids(&n.ready().committed), [y]);
}

/// Entries proposed while every follower's window of Appends is full wait for the next Append
/// before the leader writes them too: one write with it instead of one ahead of it.
#[test]
fn leader_writes_entries_with_their_append_while_every_window_is_full() {
    let config = Config {
        inflight_messages_max: 1,
        ..test_config(1)
    };
    let mut n = node_with_config(config, &[1, 2, 3], &[1], hs(1, None, 1));
    make_leader(&mut n);
    // Both followers still probing (their no-op Appends unanswered): nothing holds writes back.
    let x = n.propose(data("x")).expect("leader");
    let w = n.ready().write.expect("x is written at once");
    assert_eq!(log_ids(&w.entries), [x]);
    n.persisted(w.id);
    n.step(ack(2, 1, 2, 3));
    n.step(ack(3, 1, 2, 3));
    settle(&mut n);
    assert_eq!(n.commit_index(), 3);

    // Both followers replicating, one Append each in flight: full windows.
    let y = n.propose(data("y")).expect("leader");
    let rd = n.ready();
    assert_eq!(log_ids(&rd.write.expect("y is written").entries), [y]);
    let z1 = n.propose(data("z1")).expect("leader");
    let z2 = n.propose(data("z2")).expect("leader");
    let rd = n.ready();
    assert!(rd.messages.is_empty() && rd.write.is_none(), "{rd:?}");
    assert!(!n.has_ready(), "nothing to do until a follower answers");

    // An answer opens a window: z1 and z2 leave in one Append and one write.
    n.step(ack(3, 1, 2, 4));
    let rd = n.ready();
    let appended: Vec<(NodeId, Vec<LogId>)> = rd
        .messages
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::Append { entries, .. } => Some((m.to, log_ids(entries))),
            _ => None,
        })
        .collect();
    assert_eq!(appended, [(3, vec![z1, z2])]);
    assert_eq!(
        log_ids(&rd.write.expect("z1 and z2 written").entries),
        [z1, z2]
    );
}

/// Entries handed to storage stay handed when the write limit falls. A follower in Probe gets
/// no pipelined Appends, so while one is probing the leader writes its whole log; when it
/// replicates again, the limit falls back to what the followers were sent, below entries already
/// written. Taking those back (the next write starting below them) made the leader write them a
/// second time while still counting them durable: a crash during that write lost entries a
/// quorum had committed (simulator seed 631361).
#[test]
fn a_falling_write_limit_never_rewrites_what_the_leader_wrote() {
    let config = Config {
        inflight_messages_max: 1,
        entries_per_message_max: 1,
        ..test_config(1)
    };
    let mut n = node_with_config(config, &[1, 2, 3], &[1], hs(1, None, 1));
    let mut writes = make_leader(&mut n).writes;
    let noop = n.log().last_index();
    n.step(ack(2, 1, 2, noop));
    n.step(ack(3, 1, 2, noop));
    writes.extend(settle(&mut n).writes);
    assert_eq!(n.commit_index(), noop);

    // a leaves for both followers, one entry per Append; b and c wait for their windows.
    let a = n.propose(data("a")).expect("leader");
    let b = n.propose(data("b")).expect("leader");
    let c = n.propose(data("c")).expect("leader");
    writes.extend(settle(&mut n).writes);
    assert_eq!(
        n.status().durable_index,
        a.index,
        "b and c wait for an Append"
    );

    // Nobody answers: both followers stall into Probe, and the leader writes b and c (on the
    // heartbeat tick that finds the stall, so no commit-only write is due after it).
    for _ in 0..20 {
        n.tick();
        writes.extend(settle(&mut n).writes);
        if n.status().durable_index == c.index {
            break;
        }
    }
    assert_eq!(n.status().durable_index, c.index, "b and c written");

    // Both answer a and replicate again from b: the limit falls to b, below c. The commit index
    // a moved to is written on the next heartbeat tick.
    n.step(ack(3, 1, 2, a.index));
    writes.extend(settle(&mut n).writes);
    n.step(ack(2, 1, 2, a.index));
    writes.extend(settle(&mut n).writes);
    assert_eq!(n.commit_index(), a.index);
    let hard_state_writes =
        |writes: &[Write]| writes.iter().filter(|w| w.hard_state.is_some()).count();
    let before = hard_state_writes(&writes);
    for _ in 0..10 {
        n.tick();
        writes.extend(settle(&mut n).writes);
        if hard_state_writes(&writes) > before {
            break;
        }
    }
    assert!(hard_state_writes(&writes) > before, "commit index written");
    // n3 answers b and is sent c: nothing of it is written again.
    n.step(ack(3, 1, 2, b.index));
    writes.extend(settle(&mut n).writes);
    n.step(ack(3, 1, 2, c.index));
    writes.extend(settle(&mut n).writes);
    assert_eq!(n.commit_index(), c.index);

    let mut written_through = 0;
    for w in &writes {
        if let Some(first) = w.entries.first() {
            assert!(
                first.index > written_through,
                "a write from {} after {written_through} was written: {writes:#?}",
                first.index
            );
            written_through = w.entries.last().expect("non-empty").index;
        }
    }
    assert_eq!(written_through, c.index);
}

#[test]
fn single_voter_commits_only_after_local_write() {
    let mut n = node_with(1, &[1], &[], hs(0, None, 0));
    make_leader(&mut n);
    let e = n.propose(data("e")).expect("leader");
    let rd = n.ready();
    assert!(rd.committed.is_empty());
    assert_eq!(n.commit_index(), e.index - 1);
    n.persisted(rd.write.expect("write").id);
    assert_eq!(n.commit_index(), e.index);
    assert_eq!(log_ids(&n.ready().committed), [e]);
}

#[test]
fn truncation_makes_rewritten_suffix_not_durable() {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1, 1], hs(1, Some(1), 1));
    f.step(append(1, 2, 1, LogId::new(1, 3), entries_from(4, &[1]), 1));
    let w1 = f.ready().write.expect("1/4 written");
    // Before that write completes, a term-2 leader overwrites from index 2.
    f.step(append(3, 2, 2, LogId::new(1, 1), entries_from(2, &[2]), 1));
    assert_eq!(f.log().last_log_id(), LogId::new(2, 2));
    f.persisted(w1.id);
    assert_eq!(
        f.status().durable_index,
        1,
        "disk holds the old 1/2.., not the log"
    );
    let rd = f.ready();
    let w2 = rd.write.expect("2/2 written");
    assert_eq!(w2.entries, entries_from(2, &[2]));
    assert!(!rd.messages.iter().any(|m| m.to == 3), "ack waits for 2/2");
    f.persisted(w2.id);
    assert_eq!(f.status().durable_index, 2);
    assert_eq!(f.ready().messages, [ack(2, 3, 2, 2)]);
}

#[test]
fn commit_index_written_lazily_without_fsync() {
    let mut f = node_with(2, &[1, 2, 3], &[1], hs(2, Some(1), 1));
    f.step(append(1, 2, 2, LogId::new(1, 1), entries_from(2, &[2]), 1));
    settle(&mut f);
    f.step(msg(
        1,
        2,
        2,
        MessageBody::Heartbeat {
            commit: 2,
            read_round: 0,
            clock: Default::default(),
        },
    ));
    let rd = f.ready();
    assert!(
        rd.write.is_none(),
        "a moved commit alone waits for the next heartbeat tick"
    );
    assert_eq!(
        rd.committed,
        entries_from(2, &[2]),
        "but is applied at once"
    );
    f.applied(2);
    f.tick();
    f.tick();
    let w = f.ready().write.expect("commit flushed");
    assert_eq!(
        (w.entries.len(), w.hard_state, w.sync),
        (0, Some(hs(2, Some(1), 2)), false)
    );
}

/// A heartbeat response asserts only the term and vote: it leaves while entries are still being
/// written (so a slow disk does not cost the leader its quorum check), but not before a term the
/// heartbeat itself brought is durable.
#[test]
fn heartbeat_answered_while_entries_are_written_but_not_before_a_new_term_is() {
    let is_beat_reply = |m: &Message, round: u64| {
        m.to == 1
            && matches!(m.body, MessageBody::HeartbeatResponse { read_round, .. } if read_round == round)
    };
    let is_ack = |m: &Message| matches!(m.body, MessageBody::AppendResponse(_));
    let mut f = node_with(2, &[1, 2, 3], &[1], hs(2, Some(1), 1));
    f.step(append(
        1,
        2,
        2,
        LogId::new(1, 1),
        entries_from(2, &[2, 2]),
        1,
    ));
    let rd = f.ready();
    let w = rd.write.expect("entries are written");
    assert!(rd.messages.is_empty(), "the ack waits for the write");
    let beat = |round| MessageBody::Heartbeat {
        commit: 1,
        read_round: round,
        clock: Default::default(),
    };
    f.step(msg(1, 2, 2, beat(5)));
    let sent = f.ready().messages;
    assert!(sent.iter().any(|m| is_beat_reply(m, 5)), "{sent:?}");
    assert!(!sent.iter().any(is_ack), "the ack still waits: {sent:?}");
    f.persisted(w.id);
    assert!(f.ready().messages.iter().any(is_ack));

    f.step(msg(1, 2, 3, beat(6)));
    let rd = f.ready();
    let w = rd.write.expect("the new term is written");
    assert!(rd.messages.is_empty(), "{:?}", rd.messages);
    f.persisted(w.id);
    assert!(f.ready().messages.iter().any(|m| is_beat_reply(m, 6)));
}
