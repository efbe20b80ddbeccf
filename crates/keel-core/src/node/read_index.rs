//! Linearizable reads by ReadIndex (Raft thesis section 6.4): the leader records its commit index
//! when a read arrives, confirms it is still leader with a quorum round, and the read may be served
//! once the state machine has applied up to the recorded index. One round serves every read that
//! arrived before it started.
//!
//! The commit index is recorded only once the leader has committed an entry of its own term, and
//! the quorum round is a heartbeat round that started after the read arrived: every read
//! registered before a round is broadcast shares it.

use std::collections::VecDeque;

use super::{RaftNode, Role};
use crate::message::{LeaderClock, MessageBody};
use crate::types::{Index, NodeId};

/// A read that may be served once the state machine has applied `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadState {
    /// The caller's id for the read, as given to [`RaftNode::read_index`].
    pub ctx: u64,
    /// The index to apply before serving: the leader's commit index when the read arrived, or,
    /// if the leader had not committed an entry of its term by then, its commit index once it had.
    pub index: Index,
}

/// Why a read could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Only the leader serves ReadIndex.
    #[error("not the leader (leader hint: {leader:?})")]
    NotLeader {
        /// The leader this node knows of in its term, if any: where to retry.
        leader: Option<NodeId>,
    },
    /// `pending_reads_max` reads are already waiting for their confirmation round.
    #[error("too many pending reads")]
    Backpressure,
}

#[derive(Clone, Copy, Debug)]
struct PendingRead {
    ctx: u64,
    /// The commit index when the read was registered; `None` while the leader has not yet
    /// committed an entry of its term (its commit index may be stale until then).
    index: Option<Index>,
    /// The confirmation round that covers this read.
    round: u64,
}

#[derive(Debug, Default)]
pub(super) struct ReadQueue {
    pending: VecDeque<PendingRead>,
    /// The last round broadcast.
    round: u64,
    /// A read is waiting for round `round + 1` to be broadcast.
    round_requested: bool,
}

impl ReadQueue {
    pub fn round_requested(&self) -> bool {
        self.round_requested
    }

    pub fn current_round(&self) -> u64 {
        self.round
    }

    pub fn drain_all(self) -> impl Iterator<Item = u64> {
        self.pending.into_iter().map(|r| r.ctx)
    }
}

impl RaftNode {
    /// Starts a linearizable read identified by `ctx`. Its [`ReadState`] (or its failure) comes out
    /// of a later [`RaftNode::ready`].
    pub fn read_index(&mut self, ctx: u64) -> Result<(), ReadError> {
        if self.role != Role::Leader {
            return Err(ReadError::NotLeader {
                leader: self.leader,
            });
        }
        let committed_in_term = self.committed_in_current_term()
            || self.mutated(crate::Mutation::ReadWithoutTermCommit);
        let commit = self.commit;
        let pending_max = self.config.pending_reads_max;
        let state = self.leader_state.as_mut().expect("leader has leader state");
        if state.reads.pending.len() >= pending_max {
            return Err(ReadError::Backpressure);
        }
        state.reads.pending.push_back(PendingRead {
            ctx,
            index: committed_in_term.then_some(commit),
            round: state.reads.round + 1,
        });
        state.reads.round_requested = true;
        self.advance_reads();
        Ok(())
    }

    pub(super) fn committed_in_current_term(&self) -> bool {
        self.log.term_at(self.commit) == Some(self.term)
    }

    /// Broadcasts the requested confirmation round, if any.
    pub(super) fn flush_read_round(&mut self) {
        let commit = self.commit;
        let state = self.leader_state.as_mut().expect("leader has leader state");
        if !std::mem::take(&mut state.reads.round_requested) {
            return;
        }
        state.reads.round += 1;
        let round = state.reads.round;
        let beats: Vec<(NodeId, MessageBody)> = state
            .progress
            .iter()
            .map(|(id, pr)| {
                (
                    *id,
                    MessageBody::Heartbeat {
                        commit: commit.min(pr.match_index),
                        read_round: round,
                        clock: LeaderClock::default(),
                    },
                )
            })
            .collect();
        for (id, body) in beats {
            self.send(id, body);
        }
        self.advance_reads();
    }

    /// Releases every read whose round a quorum confirmed and whose index is known.
    pub(super) fn advance_reads(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let committed_in_term = self.committed_in_current_term();
        let commit = self.commit;
        let id = self.id;
        let membership = self.log.membership();
        let state = self.leader_state.as_mut().expect("leader has leader state");
        if committed_in_term {
            for r in state.reads.pending.iter_mut().filter(|r| r.index.is_none()) {
                r.index = Some(commit);
            }
        }
        let broadcast = state.reads.round;
        while let Some(front) = state.reads.pending.front().copied() {
            if front.round > broadcast {
                break;
            }
            let Some(index) = front.index else { break };
            let progress = &state.progress;
            let confirmed = membership.is_quorum(|p| {
                p == id
                    || progress
                        .iter()
                        .any(|(q, pr)| *q == p && pr.read_round_acked >= front.round)
            });
            if !confirmed {
                break;
            }
            state.reads.pending.pop_front();
            self.read_states.push(ReadState {
                ctx: front.ctx,
                index,
            });
        }
    }
}
