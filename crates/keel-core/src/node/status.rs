//! What a node reports about itself without changing: [`Status`], the leader's
//! [`FollowerProgress`] per follower, an entry's [`CommitStatus`], and the accessors (`role`,
//! `term`, `commit_index`, ...). Apart from the inputs and outputs because nothing here moves the
//! protocol on: status displays, checkers and the runtime read it.

use std::sync::Arc;

use super::{RaftNode, Role};
use crate::log::RaftLog;
use crate::membership::Membership;
use crate::types::{HardState, Index, LogId, NodeId, Term};

/// A snapshot of a node's volatile and persistent state, for status displays and checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub id: NodeId,
    pub role: Role,
    pub term: Term,
    pub vote: Option<NodeId>,
    pub leader: Option<NodeId>,
    pub commit: Index,
    pub applied: Index,
    pub last_log_id: LogId,
    pub durable_index: Index,
    pub durable_hard_state: HardState,
    pub snapshot: LogId,
    /// Shared with the log (a status is taken often, by checkers after every step: cloning the
    /// configuration's sets each time was most of its cost).
    pub membership: Arc<Membership>,
    /// While the node recovers from damaged storage: what it had promised
    /// ([`RaftNode::start_recovering`]).
    pub recovering_to: Option<LogId>,
}

/// The leader's view of one follower, for status displays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerProgress {
    pub id: NodeId,
    /// Highest index known to be durably replicated there.
    pub match_index: Index,
    pub next_index: Index,
    /// Appends in flight (pipelining).
    pub inflight_messages: usize,
    /// Whether the leader knows where the follower's log matches (false while probing).
    pub replicating: bool,
    /// Whether the follower answered within the last election timeout: it is up and reachable.
    pub recently_active: bool,
}

/// The commit status of an (index, term) pair as far as this node can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitStatus {
    /// The entry is committed: it will be applied everywhere.
    Committed,
    /// The index is not committed yet; the entry may still commit.
    Pending,
    /// Another entry is committed at this index: this one never will be.
    Overwritten,
    /// This node has never heard of the index.
    Unknown,
}

impl RaftNode {
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Whether the node is still applying what it had committed before it restarted. Until that
    /// is done it does not campaign, and a runtime should not serve clients from it.
    pub fn is_replaying(&self) -> bool {
        self.applied < self.replay_to
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn term(&self) -> Term {
        self.term
    }

    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    pub fn commit_index(&self) -> Index {
        self.commit
    }

    /// The highest index the application reported applied ([`RaftNode::applied`]); the same as
    /// `status().applied`, without building a [`Status`] (which clones the membership).
    pub fn applied_index(&self) -> Index {
        self.applied
    }

    pub fn log(&self) -> &RaftLog {
        &self.log
    }

    pub fn membership(&self) -> &Membership {
        self.log.membership()
    }

    pub fn status(&self) -> Status {
        Status {
            id: self.id,
            role: self.role,
            term: self.term,
            vote: self.vote,
            leader: self.leader,
            commit: self.commit,
            applied: self.applied,
            last_log_id: self.log.last_log_id(),
            durable_index: self.durability.durable_index(),
            durable_hard_state: self.durability.durable_hard_state(),
            snapshot: self.snapshot.last,
            recovering_to: self.recovering(),
            membership: self.log.membership_shared().clone(),
        }
    }

    /// On the leader, its view of every other member; empty elsewhere.
    pub fn progress(&self) -> Vec<FollowerProgress> {
        let Some(state) = self.leader_state.as_ref() else {
            return Vec::new();
        };
        state
            .progress
            .iter()
            .map(|(id, pr)| FollowerProgress {
                id: *id,
                match_index: pr.match_index,
                next_index: pr.next_index,
                inflight_messages: pr.inflight.len(),
                replicating: pr.state == crate::progress::ReplicationState::Replicate,
                recently_active: pr.silent_ticks < self.config.election_timeout_ticks,
            })
            .collect()
    }

    /// Whether the entry `id` is committed, still pending, or was overwritten, exactly, for any
    /// index up to the last one this node holds, compacted or not (docs/DESIGN.md section 1.2).
    pub fn commit_status(&self, id: LogId) -> CommitStatus {
        // Terms never decrease along a log: after a committed entry of a higher term, no entry
        // of `id.term` can ever commit, whatever this node's log holds beyond its commit index.
        let committed_term = self.log.term_of_any(self.commit).unwrap_or(0);
        if id.index > self.commit && id.term < committed_term {
            return CommitStatus::Overwritten;
        }
        if id.index == 0 || id.index > self.log.last_index() {
            return CommitStatus::Unknown;
        }
        let term_here = self.log.term_of_any(id.index);
        if id.index <= self.commit {
            if term_here == Some(id.term) {
                CommitStatus::Committed
            } else {
                CommitStatus::Overwritten
            }
        } else {
            CommitStatus::Pending
        }
    }
}
