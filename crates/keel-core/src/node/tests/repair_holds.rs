//! Repair when the node asks from a committed entry it does not hold (peers compacted the lost
//! range into snapshots): peers say how far they hold the former log, and the node lowers its
//! promise to the furthest former entry that can have been committed (`node/repair.rs`).

use super::repair::answer;
use super::repair_terms::compacted_peer;
use super::*;
use crate::message::RepairAnswer;
use crate::Membership;

/// Rounds of asking: `n`'s election timer runs out, each request is stepped into its peer (if
/// in `peers`), and each peer's answer back into `n`.
fn exchange(n: &mut RaftNode, peers: &mut [RaftNode], rounds: usize) -> Vec<Write> {
    let mut writes = Vec::new();
    for _ in 0..rounds {
        for _ in 0..2 * ET {
            n.tick();
        }
        let out = settle(n);
        writes.extend(out.writes);
        let requests = out
            .messages
            .into_iter()
            .filter(|m| matches!(m.body, MessageBody::RepairRequest { .. }));
        for request in requests {
            // A request to a peer not in `peers` is lost.
            let Some(peer) = peers.iter_mut().find(|p| p.id() == request.to) else {
                continue;
            };
            peer.step(request);
            let answers = settle(peer).messages;
            for reply in answers {
                n.step(reply);
                writes.extend(settle(n).writes);
            }
        }
    }
    writes
}

/// Whether `n` grants its vote to `from`, a candidate of `term` whose log ends at `last`.
fn grants(n: &mut RaftNode, from: NodeId, term: Term, last: LogId) -> bool {
    n.step(vote_request(from, n.id(), term, last));
    settle(n)
        .messages
        .iter()
        .any(|m| m.to == from && matches!(m.body, MessageBody::VoteResponse { granted: true }))
}

/// The recovering node of seeds 22974257, 23274161 and 23318452, in small: node 2 led term 3
/// and acknowledged through 3/8 (its log: term 1 through 6, term 3 from 7); its disk kept only
/// 1..2. Both peers committed through 5 and compacted it, so they report 1/5 committed, which
/// node 2 does not hold: no peer can send it entries (it cannot append after an entry it lacks,
/// and only a leader sends snapshots). Node 1's log ends at 5; node 3's is `node_3_terms`.
fn seed_22974257_shape(config: Config, node_3_terms: &[Term]) -> (RaftNode, Vec<RaftNode>, LogId) {
    let promised = LogId::new(3, 8);
    let mut n = node_with_config(config, &[1, 2, 3], &[1, 1], hs(3, Some(2), 2));
    n.start_recovering(promised, &positions(&[(1, 1), (3, 7)]));
    let peers = vec![
        compacted_peer(1, &[1, 1, 1, 1, 1], 5),
        compacted_peer(3, node_3_terms, 5),
    ];
    (n, peers, promised)
}

/// Node 3 holds the former entry 1/6, then entries of its own term 2. {2, 3} may have
/// committed 6, nothing after it (nodes 1 and 3 lack 7): the node lowers its promise to 1/6
/// and votes for node 3, whose log (2/8) reaches it. Before, it waited for a log reaching 3/8,
/// which no voter holds: no leader, ever.
#[test]
fn a_promise_is_lowered_to_the_furthest_former_entry_a_quorum_can_hold() {
    let (mut n, mut peers, promised) =
        seed_22974257_shape(test_config(2), &[1, 1, 1, 1, 1, 1, 2, 2]);
    let writes = exchange(&mut n, &mut peers, 3);
    let to = LogId::new(1, 6);
    assert_eq!(n.recovering(), Some(to), "{writes:?}");
    assert!(writes
        .iter()
        .any(|w| w.lower_promise_to == Some(to) && w.sync));
    assert_eq!(n.take_lowered_promise(), Some((promised, to)));
    assert!(!grants(&mut n, 1, 5, LogId::new(1, 5)), "short of 1/6");
    assert!(grants(&mut n, 3, 6, LogId::new(2, 8)));
}

/// Node 3 holds the former log through 3/7: {2, 3} may have committed 7, so the promise goes
/// no lower than 3/7 (lowering one entry too far, to 1/6, would let node 2 vote for a log
/// without 3/7).
#[test]
fn a_promise_is_not_lowered_below_a_former_entry_a_quorum_may_hold() {
    let (mut n, mut peers, promised) = seed_22974257_shape(test_config(2), &[1, 1, 1, 1, 1, 1, 3]);
    exchange(&mut n, &mut peers, 3);
    let to = LogId::new(3, 7);
    assert_eq!(n.take_lowered_promise(), Some((promised, to)));
    assert_eq!(n.recovering(), Some(to));
    assert!(!grants(&mut n, 1, 5, LogId::new(1, 6)), "a log without 3/7");
    assert!(grants(&mut n, 3, 6, LogId::new(3, 7)));
}

/// The test above catches the broken variant that lowers one entry too far: it would vote for
/// a log without 3/7.
#[cfg(feature = "mutations")]
#[test]
fn mutation_lower_promise_too_far_is_caught() {
    let mut config = test_config(2);
    config.mutation = Some(crate::Mutation::LowerPromiseTooFar);
    let (mut n, mut peers, _) = seed_22974257_shape(config, &[1, 1, 1, 1, 1, 1, 3]);
    exchange(&mut n, &mut peers, 3);
    assert_eq!(n.recovering(), Some(LogId::new(1, 6)));
    assert!(grants(&mut n, 1, 5, LogId::new(1, 6)), "a log without 3/7");
}

/// The quorums that count are those of the configuration in effect at the entry a peer holds
/// through, which it reports: with five voters there, nodes 1 and 3 holding no further block
/// nothing ({2, 4, 5} may have committed what follows).
#[test]
fn the_configuration_where_a_peer_holds_through_decides() {
    let (mut n, mut peers, promised) =
        seed_22974257_shape(test_config(2), &[1, 1, 1, 1, 1, 1, 2, 2]);
    exchange(&mut n, &mut peers[..1], 2);
    let (after, through) = (LogId::new(1, 5), LogId::new(1, 6));
    let holds = |config: Membership| {
        msg(
            3,
            2,
            4,
            MessageBody::RepairResponse(RepairAnswer::Holds {
                after,
                through,
                config,
            }),
        )
    };
    n.step(holds(Membership::new_voters([1, 2, 3, 4, 5])));
    settle(&mut n);
    assert_eq!(n.recovering(), Some(promised), "nothing lowered");
    // Joint, its incoming half may commit alone once the joint configuration is committed.
    let joint = Membership {
        voters: [1, 2, 3, 4, 5].into(),
        outgoing: [1, 2, 3].into(),
        learners: Default::default(),
    };
    let (mut m, mut peers, promised) =
        seed_22974257_shape(test_config(2), &[1, 1, 1, 1, 1, 1, 2, 2]);
    exchange(&mut m, &mut peers[..1], 2);
    m.step(holds(joint));
    settle(&mut m);
    assert_eq!(m.recovering(), Some(promised), "nothing lowered");
    // Three voters there: lowered.
    let (mut k, mut peers, _) = seed_22974257_shape(test_config(2), &[1, 1, 1, 1, 1, 1, 2, 2]);
    exchange(&mut k, &mut peers[..1], 2);
    k.step(holds(Membership::new_voters([1, 2, 3])));
    settle(&mut k);
    assert_eq!(k.recovering(), Some(through));
}

/// A peer sends entries after the point asked from only to a node that holds that point; to
/// one that asks from a committed entry it lacks, it says how far it holds the former log, and
/// promises, from the term after the promised one, to acknowledge no further.
#[test]
fn a_peer_says_how_far_it_holds_to_a_node_that_cannot_append() {
    let promised = LogId::new(3, 8);
    let terms = positions(&[(1, 6), (3, 7)]);
    let last = LogId::new(1, 5);
    let ask = |holds_last| {
        msg(
            2,
            3,
            3,
            MessageBody::RepairRequest {
                promised,
                last,
                terms: terms.clone(),
                holds_last,
            },
        )
    };
    let peer = || compacted_peer(3, &[1, 1, 1, 1, 1, 1, 2, 2], 5);
    let (_, got) = answer(&mut peer(), ask(true));
    assert!(matches!(got, RepairAnswer::Entries { prev, .. } if prev == last));
    let mut p = peer();
    assert_eq!(
        answer(&mut p, ask(false)),
        (
            4,
            RepairAnswer::Holds {
                after: last,
                through: LogId::new(1, 6),
                config: Membership::new_voters([1, 2, 3]),
            }
        )
    );
    assert_eq!(p.term(), 4);
}
