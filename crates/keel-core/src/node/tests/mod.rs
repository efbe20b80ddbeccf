//! Per-rule tests of `RaftNode`, named after the rule they check: `fig2_*` for Figure 2 of the
//! Raft paper, `sec5_2_*` for its section 5.2, the rest after the thesis feature (pre-vote,
//! check-quorum, leases, ReadIndex, joint consensus, leadership transfer) or the persistence
//! contract of docs/DESIGN.md section 3. Each asserts an outcome that breaks if the rule is broken.
//!
//! Single-node tests feed crafted messages to one node and read its `Ready`; multi-node ones use
//! the cluster harness shared with `tests/scenarios.rs`.

use bytes::Bytes;

use crate::message::{AppendResult, Message, MessageBody};
use crate::storage::{MemStorage, Storage};
use crate::types::{Entry, EntryPayload, HardState, Index, LogId, NodeId, Term};
use crate::{Config, RaftNode, ReadState, Role, Write};

#[path = "../../../tests/common/mod.rs"]
mod common;

mod durability;
mod election;
mod hostile;
mod membership;
mod proptest_step;
mod read_index;
mod repair;
mod repair_holds;
mod repair_terms;
mod replication;
mod restart;
mod snapshot;
mod validate;

use common::{entries_from, storage_with, test_config, Cluster};

const ET: u32 = 10; // test_config's election timeout

/// Everything a node produced while it was drained.
#[derive(Debug, Default)]
struct Out {
    messages: Vec<Message>,
    writes: Vec<Write>,
    committed: Vec<Entry>,
    read_states: Vec<ReadState>,
    failed_reads: Vec<u64>,
}

fn hs(term: Term, vote: Option<NodeId>, commit: Index) -> HardState {
    HardState { term, vote, commit }
}

/// A node restarted from a crafted durable state: a log with `terms` from index 1.
fn node_with(id: NodeId, voters: &[NodeId], terms: &[Term], hard_state: HardState) -> RaftNode {
    node_with_config(test_config(id), voters, terms, hard_state)
}

fn node_with_config(
    config: Config,
    voters: &[NodeId],
    terms: &[Term],
    hard_state: HardState,
) -> RaftNode {
    let storage = storage_with(voters, terms, hard_state);
    RaftNode::new(config, storage.recover().expect("recover")).expect("valid state")
}

/// Drains the node with a fast disk (every write completes at once) until it has nothing left.
fn settle(n: &mut RaftNode) -> Out {
    let mut out = Out::default();
    for _ in 0..100 {
        if !n.has_ready() {
            return out;
        }
        let rd = n.ready();
        if let Some(w) = rd.write {
            n.persisted(w.id);
            out.writes.push(w);
        }
        if let Some(last) = rd.committed.last() {
            n.applied(last.index);
        }
        out.messages.extend(rd.messages);
        out.committed.extend(rd.committed);
        out.read_states.extend(rd.read_states);
        out.failed_reads.extend(rd.failed_reads);
    }
    panic!("node never runs out of Ready");
}

fn msg(from: NodeId, to: NodeId, term: Term, body: MessageBody) -> Message {
    Message {
        from,
        to,
        term,
        body,
    }
}

fn append(
    from: NodeId,
    to: NodeId,
    term: Term,
    prev: LogId,
    entries: Vec<Entry>,
    commit: Index,
) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::Append {
            prev,
            entries,
            commit,
        },
    )
}

fn ack(from: NodeId, to: NodeId, term: Term, match_index: Index) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::AppendResponse(AppendResult::Success { match_index }),
    )
}

fn vote_request(from: NodeId, to: NodeId, term: Term, last: LogId) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::RequestVote {
            last_log_id: last,
            transfer: false,
        },
    )
}

fn is_append(m: &Message) -> bool {
    matches!(m.body, MessageBody::Append { .. })
}

fn is_vote_traffic(m: &Message) -> bool {
    matches!(
        m.body,
        MessageBody::PreVote { .. } | MessageBody::RequestVote { .. }
    )
}

fn log_ids(entries: &[Entry]) -> Vec<LogId> {
    entries.iter().map(Entry::log_id).collect()
}

/// Log positions from `(term, index)` pairs.
pub(super) fn positions(pairs: &[(Term, Index)]) -> Vec<LogId> {
    pairs.iter().map(|(t, i)| LogId::new(*t, *i)).collect()
}

fn data(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Makes `n` a candidate of the next term: it wins its pre-vote and persists its vote.
fn make_candidate(n: &mut RaftNode) {
    // A restarted node replays what it had committed before it may campaign.
    settle(n);
    n.campaign();
    settle(n);
    let (id, term) = (n.id(), n.term());
    let other = n.membership().voters.iter().copied().find(|v| *v != id);
    if let Some(other) = other {
        n.step(msg(
            other,
            id,
            term + 1,
            MessageBody::PreVoteResponse { granted: true },
        ));
    }
    settle(n);
    assert_eq!(n.role(), Role::Candidate);
}

/// Makes `n` the leader of the next term with every other voter's vote; drains its first
/// `Ready` (no-op appended and durable, probes out).
fn make_leader(n: &mut RaftNode) -> Out {
    // A restarted node replays what it had committed before it may campaign.
    settle(n);
    n.campaign();
    settle(n);
    if n.role() == Role::PreCandidate {
        let (id, term) = (n.id(), n.term());
        let others: Vec<NodeId> = n.membership().voters.iter().copied().collect();
        for v in others.into_iter().filter(|v| *v != id) {
            n.step(msg(
                v,
                id,
                term + 1,
                MessageBody::PreVoteResponse { granted: true },
            ));
        }
        settle(n);
    }
    let (id, term) = (n.id(), n.term());
    let others: Vec<NodeId> = n.membership().voters.iter().copied().collect();
    for v in others.into_iter().filter(|v| *v != id) {
        if n.role() == Role::Candidate {
            n.step(msg(
                v,
                id,
                term,
                MessageBody::VoteResponse { granted: true },
            ));
        }
    }
    assert_eq!(n.role(), Role::Leader);
    settle(n)
}

/// An empty heartbeat from `from` to `to` in `term` (hostile and validation tests).
fn heartbeat(from: NodeId, to: NodeId, term: Term) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: Default::default(),
        },
    )
}

/// A no-op entry at (term, index).
fn entry(term: Term, index: Index) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Noop,
    }
}

/// Voters n1..n3 with n1 elected, plus `joining` nodes with empty storage that are not members
/// yet (they learn the configuration from the leader once added).
fn cluster_with_joining(joining: &[NodeId]) -> Cluster {
    let mut nodes: Vec<(Config, MemStorage)> = (1..=3)
        .map(|id| (test_config(id), MemStorage::new_cluster([1, 2, 3])))
        .collect();
    for &id in joining {
        nodes.push((test_config(id), MemStorage::new_joining()));
    }
    let mut c = Cluster::from_storages(nodes);
    c.elect(1);
    c
}

#[test]
fn harness_election_timeout_matches_config() {
    assert_eq!(test_config(1).election_timeout_ticks, ET);
}
