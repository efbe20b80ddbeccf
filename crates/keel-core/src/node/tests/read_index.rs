//! Linearizable reads by ReadIndex (thesis section 6.4).

use super::*;
use crate::ReadError;

/// n1 led term 1 and committed x; n2 now leads term 2, but its no-op has reached nobody. A read
/// on n2 goes through a full quorum round. Returns the cluster and n2's read states so far.
fn read_before_term_commit(tweak: impl Fn(&mut Config)) -> (Cluster, Vec<ReadState>) {
    let mut c = Cluster::with_config(3, tweak);
    c.elect(1);
    c.propose_and_commit(1, "x");
    c.set_filter(|m| !(is_append(m) && m.from == 2));
    c.elect(2);
    c.node_mut(2).read_index(7).expect("leader");
    c.run_until_quiet();
    let confirmations = c
        .sent
        .iter()
        .filter(|m| {
            m.to == 2
                && matches!(m.body, MessageBody::HeartbeatResponse { read_round, .. } if read_round > 0)
        })
        .count();
    assert_eq!(confirmations, 2, "both followers confirmed the round");
    let reads = c.peer(2).read_states.clone();
    (c, reads)
}

#[test]
fn readindex_waits_for_term_commit_and_quorum_round() {
    let (mut c, reads) = read_before_term_commit(|_| {});
    assert_eq!(
        reads,
        [],
        "confirmed, but the term has committed nothing yet"
    );
    c.clear_filter();
    for _ in 0..ET {
        c.tick_all(1);
    }
    assert_eq!(c.node(2).commit_index(), 3);
    assert_eq!(c.peer(2).read_states, [ReadState { ctx: 7, index: 3 }]);

    // With its term committed, a read still needs a round after it arrived.
    c.isolate(2);
    c.node_mut(2).read_index(8).expect("leader");
    for _ in 0..2 * ET {
        c.tick(2);
        c.run_until_quiet();
    }
    assert_eq!(c.peer(2).read_states.len(), 1, "no quorum, no read");
    c.heal();
    c.tick(2);
    c.tick(2);
    c.run_until_quiet();
    assert_eq!(c.peer(2).read_states[1..], [ReadState { ctx: 8, index: 3 }]);
}

#[cfg(feature = "mutations")]
#[test]
fn mutation_read_without_term_commit_is_caught() {
    let (_, reads) = read_before_term_commit(|config| {
        config.mutation = Some(crate::Mutation::ReadWithoutTermCommit)
    });
    assert_eq!(reads.len(), 1, "served before the term committed anything");
    assert!(reads[0].index < 2, "and misses the committed x: {reads:?}");
}

#[test]
fn readindex_batches_many_reads_in_one_round() {
    let mut c = Cluster::new(3);
    c.elect(1);
    let mark = c.sent.len();
    for ctx in 0..100 {
        c.node_mut(1).read_index(ctx).expect("leader");
    }
    c.run_until_quiet();
    let rounds: Vec<(NodeId, u64)> = c.sent[mark..]
        .iter()
        .filter_map(|m| match m.body {
            MessageBody::Heartbeat { read_round, .. } => Some((m.to, read_round)),
            _ => None,
        })
        .collect();
    assert_eq!(rounds, [(2, 1), (3, 1)], "one round for all hundred");
    let reads = &c.peer(1).read_states;
    assert_eq!(reads.len(), 100);
    assert!(reads
        .iter()
        .enumerate()
        .all(|(i, r)| r.ctx == i as u64 && r.index == 1));
}

#[test]
fn readindex_refused_on_follower_with_leader_hint() {
    let mut c = Cluster::new(3);
    c.elect(1);
    assert_eq!(
        c.node_mut(2).read_index(1),
        Err(ReadError::NotLeader { leader: Some(1) })
    );
}

#[test]
fn readindex_pending_reads_fail_when_leader_steps_down() {
    let mut c = Cluster::new(3);
    c.elect(1);
    c.isolate(1);
    c.node_mut(1).read_index(5).expect("leader");
    c.run_until_quiet();
    c.node_mut(1)
        .step(msg(2, 1, 5, MessageBody::VoteResponse { granted: false }));
    c.process(1);
    assert_eq!(c.peer(1).failed_reads, [5]);
    assert!(c.peer(1).read_states.is_empty());
}

#[test]
fn readindex_single_voter_needs_no_messages() {
    let mut n = node_with(1, &[1], &[], hs(0, None, 0));
    make_leader(&mut n);
    n.read_index(9).expect("leader");
    let out = settle(&mut n);
    assert_eq!(out.read_states, [ReadState { ctx: 9, index: 1 }]);
    assert!(out.messages.is_empty());
}

#[test]
fn readindex_backpressure_bounds_pending_reads() {
    let config = Config {
        pending_reads_max: 2,
        ..test_config(1)
    };
    let mut n = node_with_config(config, &[1, 2, 3], &[1], hs(1, None, 1));
    make_leader(&mut n);
    n.read_index(1).expect("room");
    n.read_index(2).expect("room");
    assert_eq!(n.read_index(3), Err(ReadError::Backpressure));
}
