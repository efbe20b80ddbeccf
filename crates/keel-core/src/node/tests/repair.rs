//! Repair of a recovering node without a leader (`node/repair.rs`): entries fetched from any peer
//! that holds them, and a promise let go of once the peers that lack its entries block every
//! quorum.

use super::*;
use crate::message::RepairAnswer;

/// Ticks `n` until its election timer runs out and returns what it sent.
fn time_out(n: &mut RaftNode) -> Vec<Message> {
    for _ in 0..2 * ET {
        n.tick();
    }
    settle(n).messages
}

fn repair_requests(messages: &[Message]) -> Vec<(NodeId, LogId, LogId)> {
    messages
        .iter()
        .filter_map(|m| match m.body {
            MessageBody::RepairRequest { promised, last, .. } => Some((m.to, promised, last)),
            _ => None,
        })
        .collect()
}

/// Steps `request` into `peer` and returns its answer, with the term it was sent in.
pub(super) fn answer(peer: &mut RaftNode, request: Message) -> (Term, RepairAnswer) {
    peer.step(request);
    let out = settle(peer);
    let answers: Vec<_> = out
        .messages
        .into_iter()
        .filter_map(|m| match m.body {
            MessageBody::RepairResponse(a) => Some((m.term, a)),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len(), 1, "one answer: {answers:?}");
    answers.into_iter().next().expect("checked")
}

/// A request from a node whose promise record kept no term starts (format version 1): all it
/// knows of its former log after `last` is the promised entry.
fn request(from: NodeId, to: NodeId, term: Term, promised: LogId, last: LogId) -> Message {
    request_knowing(from, to, term, promised, last, vec![promised])
}

fn request_knowing(
    from: NodeId,
    to: NodeId,
    term: Term,
    promised: LogId,
    last: LogId,
    terms: Vec<LogId>,
) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::RepairRequest {
            promised,
            last,
            terms,
            holds_last: true,
        },
    )
}

fn lacks(from: NodeId, to: NodeId, term: Term, after: LogId) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::RepairResponse(RepairAnswer::Lacks { after }),
    )
}

/// Sweep 50, seed 21014950's shape: the only log reaching the promise is a learner's, which may
/// not campaign. The recovering node asks every member when it would have campaigned, fetches
/// the entries from that log, and is whole once they are durable.
#[test]
fn a_leaderless_recovering_node_fetches_its_promise_from_a_peer_that_holds_it() {
    let promised = LogId::new(2, 5);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1], hs(2, None, 2));
    n.start_recovering(promised, &[]);
    let sent = time_out(&mut n);
    let asked = repair_requests(&sent);
    let last = LogId::new(1, 2);
    assert_eq!(asked, vec![(1, promised, last), (3, promised, last)]);
    assert!(
        !sent.iter().any(is_vote_traffic),
        "it still never campaigns"
    );

    let mut peer = node_with(3, &[1, 2, 3], &[1, 1, 2, 2, 2], hs(2, None, 2));
    let (term, got) = answer(&mut peer, request(2, 3, 2, promised, last));
    let RepairAnswer::Entries { prev, entries } = got.clone() else {
        panic!("entries expected, got {got:?}");
    };
    assert_eq!(
        (prev, log_ids(&entries)),
        (last, (3..=5).map(|i| LogId::new(2, i)).collect())
    );

    n.step(msg(3, 2, term, MessageBody::RepairResponse(got)));
    assert_eq!(n.recovering(), Some(promised), "not durable yet");
    let out = settle(&mut n);
    assert!(out.writes.iter().any(|w| !w.entries.is_empty() && w.sync));
    assert_eq!((n.recovering(), n.log.last_log_id()), (None, promised));
    assert_eq!(n.commit_index(), 2, "repair commits nothing");
    assert_ne!(time_out(&mut n).len(), 0);
    assert_ne!(n.role(), Role::Follower, "campaigns again");
}

/// Entries of older terms than the promise's could come from any branch: a peer sends only what
/// it holds of the promised term, or what it knows committed, and says nothing when its log
/// holds older terms where the lost entries were.
#[test]
fn a_peer_sends_only_entries_of_the_promised_term_or_committed_ones() {
    let (promised, last) = (LogId::new(2, 5), LogId::new(1, 2));
    let mut peer = node_with(3, &[1, 2, 3], &[1, 1, 1, 1], hs(2, None, 2));
    assert_eq!(
        answer(&mut peer, request(2, 3, 2, promised, last)),
        (2, RepairAnswer::Unknown)
    );
    assert_eq!(peer.term(), 2, "no term moved for an unknown answer");

    let mut committed = node_with(3, &[1, 2, 3], &[1, 1, 1, 1], hs(2, None, 3));
    let (_, got) = answer(&mut committed, request(2, 3, 2, promised, last));
    let RepairAnswer::Entries { entries, .. } = got else {
        panic!("committed entries expected, got {got:?}");
    };
    assert_eq!(log_ids(&entries), vec![LogId::new(1, 3)]);
}

/// A recovering peer answers neither way, even when it holds the entries: its own log may have
/// lost more than its promise shows, and two damaged nodes of three must wait for the third.
#[test]
fn a_recovering_peer_neither_sends_entries_nor_says_it_lacks_them() {
    let (promised, last) = (LogId::new(2, 5), LogId::new(1, 2));
    let mut peer = node_with(3, &[1, 2, 3], &[1, 1, 2, 2, 2], hs(2, None, 2));
    peer.start_recovering(LogId::new(2, 7), &[]);
    assert_eq!(
        answer(&mut peer, request(2, 3, 2, promised, last)),
        (2, RepairAnswer::Unknown)
    );
    let mut short = node_with(3, &[1, 2, 3], &[1, 1], hs(2, None, 2));
    short.start_recovering(LogId::new(2, 7), &[]);
    assert_eq!(
        answer(&mut short, request(2, 3, 2, promised, last)),
        (2, RepairAnswer::Unknown)
    );
    assert_eq!(short.term(), 2);
}

/// A peer that lacks the entries says so only from a term above the promised one: without a
/// leader it moves there first, durably; with one it leaves the repair to that leader.
#[test]
fn a_leaderless_peer_that_lacks_the_entries_moves_past_the_promised_term_to_say_so() {
    let (promised, last) = (LogId::new(2, 5), LogId::new(1, 2));
    let mut peer = node_with(3, &[1, 2, 3], &[1, 1], hs(2, None, 2));
    peer.step(request(2, 3, 2, promised, last));
    let rd = peer.ready();
    let write = rd.write.expect("the new term is written");
    assert_eq!(
        (write.hard_state.map(|h| h.term), write.sync),
        (Some(3), true)
    );
    assert!(
        rd.messages.is_empty(),
        "the answer waits for the term to be durable"
    );
    peer.persisted(write.id);
    let out = settle(&mut peer);
    assert_eq!(
        out.messages
            .iter()
            .map(|m| (m.term, m.body.clone()))
            .collect::<Vec<_>>(),
        vec![(
            3,
            MessageBody::RepairResponse(RepairAnswer::Lacks { after: last })
        )]
    );

    let mut led = node_with(3, &[1, 2, 3], &[1, 1], hs(2, None, 2));
    led.step(heartbeat(1, 3, 2));
    settle(&mut led);
    assert_eq!(
        answer(&mut led, request(2, 3, 2, promised, last)),
        (2, RepairAnswer::Unknown)
    );
    assert_eq!(led.term(), 2);
}

/// Sweep 50, seed 21022969's shape: the node led term 2 and lost its own tail before any follower
/// stored it. Once both other voters, in term 3, lack every entry after its commit index, no
/// commit can have counted it: it lets go of the promise, durably, and campaigns on what it has.
#[test]
fn the_promise_is_let_go_of_once_the_peers_lacking_it_block_every_quorum() {
    let promised = LogId::new(2, 5);
    let last = LogId::new(1, 2);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1], hs(2, Some(2), 2));
    n.start_recovering(promised, &[]);
    time_out(&mut n);
    // A report from the promised term itself does not count: that term's leader may still
    // collect acknowledgements.
    n.step(lacks(1, 2, 2, last));
    n.step(lacks(3, 2, 2, last));
    assert!(!n.has_ready() || settle(&mut n).writes.iter().all(|w| !w.release_promise));
    assert_eq!(n.recovering(), Some(promised));
    // One lacking voter of three blocks nothing.
    n.step(lacks(1, 2, 3, last));
    assert!(settle(&mut n).writes.iter().all(|w| !w.release_promise));
    assert_eq!(n.recovering(), Some(promised));
    // A report about another prefix does not count either.
    n.step(lacks(3, 2, 3, LogId::new(1, 1)));
    assert!(settle(&mut n).writes.iter().all(|w| !w.release_promise));
    n.step(lacks(3, 2, 3, last));
    let rd = n.ready();
    let write = rd.write.expect("the release is written");
    assert!(write.release_promise && write.sync);
    assert_eq!(
        n.recovering(),
        Some(promised),
        "recovering until storage lowered it"
    );
    n.persisted(write.id);
    assert_eq!(n.recovering(), None);
    assert_eq!(n.take_released_promise(), Some(promised));
    assert_eq!(n.take_released_promise(), None, "said once");
    time_out(&mut n);
    assert_ne!(n.role(), Role::Follower, "campaigns again");
}

#[test]
fn no_release_while_the_members_that_may_hold_the_entries_form_a_quorum() {
    let (promised, last) = (LogId::new(2, 5), LogId::new(1, 2));
    let mut n = node_with(2, &[1, 2, 3, 4, 5], &[1, 1], hs(2, Some(2), 2));
    n.start_recovering(promised, &[]);
    time_out(&mut n);
    for from in [1, 3] {
        n.step(lacks(from, 2, 3, last));
    }
    // 2 (itself), 4 and 5 may hold them: a quorum of five.
    assert!(settle(&mut n).writes.iter().all(|w| !w.release_promise));
    assert_eq!(n.recovering(), Some(promised));
    n.step(lacks(4, 2, 3, last));
    let out = settle(&mut n);
    assert!(out.writes.iter().any(|w| w.release_promise));
    assert_eq!(n.recovering(), None);
}

/// A disk that lost writes can bring back a stale tail a leader had replaced, so only the log
/// through the commit index is known to be the promised one's prefix. The node asks from there,
/// and a repair replaces the stale tail. (The simulator found this, storage faults seeds 4173 and
/// 4295, in a version that asked from the end of the log: a node let go of its promise because
/// its peers lacked what followed its stale tail, and led without a committed entry it had held.
/// With the release made durable first those seeds no longer reach it, so this test is the
/// regression.)
#[test]
fn a_stale_tail_beyond_the_commit_index_is_replaced_by_the_repair() {
    let promised = LogId::new(2, 4);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1, 1, 1], hs(2, None, 2));
    n.start_recovering(promised, &[]);
    let asked = repair_requests(&time_out(&mut n));
    assert!(asked.iter().all(|(_, _, last)| *last == LogId::new(1, 2)));

    let mut peer = node_with(3, &[1, 2, 3], &[1, 1, 2, 2], hs(2, None, 2));
    let (term, got) = answer(&mut peer, request(2, 3, 2, promised, LogId::new(1, 2)));
    n.step(msg(3, 2, term, MessageBody::RepairResponse(got)));
    settle(&mut n);
    assert_eq!((n.recovering(), n.log.last_log_id()), (None, promised));

    // A peer that holds the stale tail but not the promised term proves nothing about it.
    let mut stale_peer = node_with(3, &[1, 2, 3], &[1, 1, 1, 1], hs(3, None, 2));
    assert_eq!(
        answer(
            &mut stale_peer,
            request(2, 3, 2, promised, LogId::new(1, 2))
        )
        .1,
        RepairAnswer::Unknown
    );
}

/// Sweep 54, seed 21079861: the node led term 63 and lost its tail (promise 63/110) but still
/// holds 63/90, while its commit index is far back in term 10. Its own entries of the promised
/// term are the former log's too, so it asks from there: peers whose logs hold older terms after
/// index 54 (which could be former entries, of terms 10 to 63) lack everything after 90.
#[test]
fn its_own_entries_of_the_promised_term_extend_what_is_known_of_the_former_log() {
    let promised = LogId::new(3, 6);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1, 3, 3], hs(3, Some(2), 2));
    n.start_recovering(promised, &[]);
    let asked = repair_requests(&time_out(&mut n));
    assert!(
        asked.iter().all(|(_, _, last)| *last == LogId::new(3, 4)),
        "{asked:?}"
    );
    // A peer with term 2 at index 5 lacks the former entries after 4 (all of term 3).
    let mut peer = node_with(3, &[1, 2, 3], &[1, 1, 2, 2, 2], hs(3, None, 2));
    assert_eq!(
        answer(&mut peer, request(2, 3, 3, promised, LogId::new(3, 4))),
        (
            4,
            RepairAnswer::Lacks {
                after: LogId::new(3, 4)
            }
        )
    );
    // Asked from the commit index instead, the same peer could not tell (term 2 at index 3 may
    // be a former entry).
    let mut same = node_with(3, &[1, 2, 3], &[1, 1, 2, 2, 2], hs(3, None, 2));
    assert_eq!(
        answer(&mut same, request(2, 3, 3, promised, LogId::new(1, 2))).1,
        RepairAnswer::Unknown
    );
}

/// Once it acknowledged a leader, that leader repairs it, and what it acknowledged must stay: it
/// no longer asks peers nor takes their entries.
#[test]
fn a_recovering_node_that_acknowledged_a_leader_stops_asking_peers() {
    let promised = LogId::new(2, 5);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1], hs(2, None, 2));
    n.start_recovering(promised, &[]);
    n.step(append(1, 2, 3, LogId::new(1, 2), vec![entry(3, 3)], 2));
    settle(&mut n);
    assert!(repair_requests(&time_out(&mut n)).is_empty());
    let entries = vec![entry(2, 3), entry(2, 4), entry(2, 5)];
    n.step(msg(
        3,
        2,
        3,
        MessageBody::RepairResponse(RepairAnswer::Entries {
            prev: LogId::new(1, 2),
            entries,
        }),
    ));
    settle(&mut n);
    assert_eq!(
        n.log.last_log_id(),
        LogId::new(3, 3),
        "the leader's entry stays"
    );
}
