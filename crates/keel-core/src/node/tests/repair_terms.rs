//! Repair that knows the former log's terms (`node/former.rs`): entries of older terms fetched
//! from a peer, exact reports of what a peer lacks, and a promise lowered to an entry a compacted
//! peer reports committed.

use super::repair::answer;
use super::*;
use crate::message::RepairAnswer;
use crate::Membership;

/// Ticks `n` until its election timer runs out and returns the repair requests it sent.
fn ask(n: &mut RaftNode) -> Vec<(NodeId, LogId, Vec<LogId>)> {
    for _ in 0..2 * ET {
        n.tick();
    }
    settle(n)
        .messages
        .into_iter()
        .filter_map(|m| match m.body {
            MessageBody::RepairRequest { last, terms, .. } => Some((m.to, last, terms)),
            _ => None,
        })
        .collect()
}

fn request(to: NodeId, promised: LogId, last: LogId, terms: Vec<LogId>) -> Message {
    msg(
        2,
        to,
        3,
        MessageBody::RepairRequest {
            promised,
            last,
            terms,
            holds_last: true,
        },
    )
}

fn respond(n: &mut RaftNode, from: NodeId, (term, answer): (Term, RepairAnswer)) -> Out {
    n.step(msg(from, 2, term, MessageBody::RepairResponse(answer)));
    settle(n)
}

/// Storage faults seed 5169's shape: the node (promise 3/6, log through its commit index 2)
/// lost entries of terms 2 and 3; a peer holds those of term 2, whose place in the former log
/// the promise record kept. Knowing only the promised entry, the peer could not tell its term-2
/// entries from the lost ones; knowing the terms, it sends them, and then lacks the rest exactly.
#[test]
fn entries_of_an_older_term_of_the_former_log_come_from_a_peer_that_holds_them() {
    let promised = LogId::new(3, 6);
    let record = positions(&[(1, 1), (2, 3), (3, 5)]);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1], hs(3, Some(2), 2));
    n.start_recovering(promised, &record);
    let asked = ask(&mut n);
    let from_commit = LogId::new(1, 2);
    assert_eq!(
        asked,
        [1, 3].map(|to| (to, from_commit, positions(&[(2, 3), (3, 5)])))
    );

    let peer = |id| node_with(id, &[1, 2, 3], &[1, 1, 2, 2], hs(3, None, 2));
    // Without the record's terms (format version 1), its term-2 entries are ambiguous.
    assert_eq!(
        answer(
            &mut peer(3),
            request(3, promised, from_commit, vec![promised])
        ),
        (3, RepairAnswer::Unknown)
    );
    let got = answer(
        &mut peer(3),
        request(3, promised, from_commit, asked[1].2.clone()),
    );
    let RepairAnswer::Entries { prev, entries } = &got.1 else {
        panic!("entries expected, got {got:?}");
    };
    assert_eq!(
        (*prev, log_ids(entries)),
        (from_commit, positions(&[(2, 3), (2, 4)]))
    );
    respond(&mut n, 3, got);
    assert_eq!(n.log.last_log_id(), LogId::new(2, 4));

    // It asks from there; both peers end at 4, lacking every term-3 entry, and say so from
    // term 4: it lets go of the promise and campaigns on the log it now holds.
    let asked = ask(&mut n);
    assert!(
        asked
            .iter()
            .all(|(_, last, terms)| (*last, terms.clone())
                == (LogId::new(2, 4), positions(&[(3, 5)])))
    );
    for from in [1, 3] {
        let said = answer(
            &mut peer(from),
            request(from, promised, LogId::new(2, 4), positions(&[(3, 5)])),
        );
        assert_eq!(
            said,
            (
                4,
                RepairAnswer::Lacks {
                    after: LogId::new(2, 4)
                }
            )
        );
        respond(&mut n, from, said);
    }
    assert_eq!(n.recovering(), None);
    assert_eq!(n.take_released_promise(), Some(promised));
    for _ in 0..2 * ET {
        n.tick();
    }
    assert_ne!(n.role(), Role::Follower, "campaigns again");
}

/// The former log's term at an index tells a peer exactly whether its entry there is the lost
/// one: an entry of an older term in range is not, once the term there is known.
#[test]
fn a_peer_lacks_the_lost_entries_exactly_where_the_former_terms_are_known() {
    let promised = LogId::new(3, 6);
    let last = LogId::new(2, 4);
    let peer = || node_with(3, &[1, 2, 3], &[1, 1, 2, 2, 2], hs(3, None, 2));
    // Term 3 from index 5 in the former log: the peer's term 2 there is another entry.
    assert_eq!(
        answer(
            &mut peer(),
            request(3, promised, last, positions(&[(3, 5)]))
        ),
        (4, RepairAnswer::Lacks { after: last })
    );
    // Only the promised entry known: term 2 at index 5 may be a lost entry of term 2.
    assert_eq!(
        answer(&mut peer(), request(3, promised, last, vec![promised])).1,
        RepairAnswer::Unknown
    );
}

/// A peer that compacted a part of the former log (committed) into its snapshot, holding it as
/// entries no longer.
pub(super) fn compacted_peer(id: NodeId, terms: &[Term], compact_to: Index) -> RaftNode {
    let mut cfg = test_config(id);
    cfg.snapshot_trailing_entries = 0;
    let mut peer = node_with_config(cfg, &[1, 2, 3], terms, hs(3, None, compact_to));
    settle(&mut peer);
    let meta = peer.snapshot_meta(compact_to).expect("applied");
    peer.snapshot_saved(meta);
    assert_eq!(peer.log().purged().index, compact_to);
    peer
}

/// Sweep 54, seed 21022969's shape: the entries the node lost after its commit index include
/// committed ones that every peer holding them compacted into a snapshot, so no peer can send
/// them. A peer reports its commit point instead; once the peers lack every former entry after
/// it, the node lowers its promise to that committed entry (durably), votes for the logs that
/// reach it, and a leader brings it there.
#[test]
#[expect(clippy::too_many_lines)]
fn a_promise_is_lowered_to_an_entry_compacted_peers_report_committed() {
    let promised = LogId::new(3, 6);
    let record = positions(&[(1, 1), (3, 5)]);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1], hs(3, Some(2), 2));
    n.start_recovering(promised, &record);
    let asked = ask(&mut n);
    let from_commit = LogId::new(1, 2);
    assert!(asked.iter().all(|(_, last, _)| *last == from_commit));

    // Peers committed through 4 (term 1: the former log's too) and compacted it.
    let got = answer(
        &mut compacted_peer(3, &[1, 1, 1, 1, 1], 4),
        request(3, promised, from_commit, asked[1].2.clone()),
    );
    assert_eq!(
        got,
        (
            3,
            RepairAnswer::Committed {
                through: LogId::new(1, 4),
                config: Membership::new_voters([1, 2, 3]),
            }
        )
    );
    respond(&mut n, 3, got);
    assert_eq!(n.recovering(), Some(promised), "nothing let go yet");

    let committed = LogId::new(1, 4);
    let asked = ask(&mut n);
    assert!(asked
        .iter()
        .all(|(_, last, terms)| (*last, terms.clone()) == (committed, positions(&[(3, 5)]))));
    let mut writes = Vec::new();
    for from in [1, 3] {
        let mut peer = compacted_peer(from, &[1, 1, 1, 1, 1], 4);
        let said = answer(
            &mut peer,
            request(from, promised, committed, positions(&[(3, 5)])),
        );
        assert_eq!(said, (4, RepairAnswer::Lacks { after: committed }));
        writes.extend(respond(&mut n, from, said).writes);
    }
    assert!(
        writes
            .iter()
            .any(|w| w.lower_promise_to == Some(committed) && w.sync),
        "{writes:?}"
    );
    assert!(writes.iter().all(|w| !w.release_promise));
    assert_eq!(n.recovering(), Some(committed));
    assert_eq!(n.take_lowered_promise(), Some((promised, committed)));

    // It votes for a log reaching the committed entry, not for one short of it, and still
    // starts no election itself.
    n.step(vote_request(3, 2, 5, LogId::new(1, 3)));
    n.step(vote_request(1, 2, 6, LogId::new(1, 5)));
    let votes: Vec<_> = settle(&mut n)
        .messages
        .into_iter()
        .filter(|m| matches!(m.body, MessageBody::VoteResponse { .. }))
        .map(|m| (m.to, m.body))
        .collect();
    assert_eq!(
        votes,
        vec![
            (3, MessageBody::VoteResponse { granted: false }),
            (1, MessageBody::VoteResponse { granted: true })
        ]
    );
    // The leader's entries bring it to the lowered promise: whole.
    n.step(append(
        1,
        2,
        6,
        from_commit,
        vec![entry(1, 3), entry(1, 4)],
        4,
    ));
    settle(&mut n);
    assert_eq!(n.recovering(), None);
}

/// A committed entry the former log cannot hold at its index (another term than the one known
/// there) shows that no former entry from there on was ever committed: the node lowers its
/// promise to it at once, without waiting for reports.
#[test]
fn a_committed_entry_of_another_term_than_the_former_one_lowers_the_promise_at_once() {
    let promised = LogId::new(3, 6);
    let mut n = node_with(2, &[1, 2, 3], &[1, 1], hs(3, Some(2), 2));
    n.start_recovering(promised, &positions(&[(1, 1), (3, 5)]));
    ask(&mut n);
    let committed = LogId::new(2, 4);
    let out = respond(
        &mut n,
        1,
        (
            4,
            RepairAnswer::Committed {
                through: committed,
                config: Membership::new_voters([1, 2, 3]),
            },
        ),
    );
    assert!(out
        .writes
        .iter()
        .any(|w| w.lower_promise_to == Some(committed)));
    assert_eq!(n.recovering(), Some(committed));
    // One that can be the former entry changes nothing by itself.
    let mut m = node_with(2, &[1, 2, 3], &[1, 1], hs(3, Some(2), 2));
    m.start_recovering(promised, &positions(&[(1, 1), (3, 5)]));
    ask(&mut m);
    let out = respond(
        &mut m,
        1,
        (
            4,
            RepairAnswer::Committed {
                through: LogId::new(1, 4),
                config: Membership::new_voters([1, 2, 3]),
            },
        ),
    );
    assert!(out.writes.iter().all(|w| w.lower_promise_to.is_none()));
    assert_eq!(m.recovering(), Some(promised));
}

/// The quorums that can have counted the lost entries are those of the configuration in effect
/// where the node asks from, not its log's latest: a stale tail that came back with the damage
/// may hold a configuration the lost log never had (here five voters, in which the two lacking
/// peers would block nothing).
#[test]
fn the_configuration_at_the_point_asked_from_decides_not_a_stale_tail_s() {
    let mut storage = MemStorage::new_cluster([1, 2, 3]);
    let mut entries = entries_from(1, &[1, 1]);
    entries.push(Entry {
        term: 1,
        index: 3,
        payload: EntryPayload::Membership(std::sync::Arc::new(Membership::new_voters([
            1, 2, 3, 4, 5,
        ]))),
    });
    let write = Write {
        id: 0,
        install: None,
        purge_to: None,
        entries,
        hard_state: Some(hs(3, Some(2), 2)),
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    };
    storage.write(&write).expect("in memory");
    let mut n = RaftNode::new(test_config(2), storage.recover().expect("recover")).expect("ok");
    let promised = LogId::new(2, 6);
    n.start_recovering(promised, &[]);
    let asked = ask(&mut n);
    let from_commit = LogId::new(1, 2);
    assert!(
        asked.iter().all(|(_, last, _)| *last == from_commit),
        "{asked:?}"
    );
    for from in [1, 3] {
        let said = (4, RepairAnswer::Lacks { after: from_commit });
        respond(&mut n, from, said);
    }
    assert_eq!(n.take_released_promise(), Some(promised));
    assert_eq!(n.recovering(), None);
}
