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
    /// The node's id.
    pub id: NodeId,
    /// Its role in `term`.
    pub role: Role,
    /// Its current term (possibly not durable yet: see `durable_hard_state`).
    pub term: Term,
    /// Whom it voted for in `term`, if anyone.
    pub vote: Option<NodeId>,
    /// The leader it knows of in `term` (itself when leading), if any.
    pub leader: Option<NodeId>,
    /// Its commit index.
    pub commit: Index,
    /// The highest index the application reported applied.
    pub applied: Index,
    /// The last entry of its in-memory log, durable or not.
    pub last_log_id: LogId,
    /// Every entry at or below this index is durable and equal to the in-memory log.
    pub durable_index: Index,
    /// The term, vote and commit index as storage last reported durable.
    pub durable_hard_state: HardState,
    /// The last entry of the newest snapshot durable on the node (0/0 for none).
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
    /// The follower (a voter of either half, or a learner).
    pub id: NodeId,
    /// Highest index known to be durably replicated there.
    pub match_index: Index,
    /// The next index the leader sends it.
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
    /// This node's id, from its [`Config`](crate::Config).
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Whether the node is still applying what it had committed before it restarted. Until that
    /// is done it does not campaign, and a runtime should not serve clients from it.
    pub fn is_replaying(&self) -> bool {
        self.applied < self.replay_to
    }

    /// Its role in its current term.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The current term, which may not be durable yet.
    pub fn term(&self) -> Term {
        self.term
    }

    /// The leader of the current term as far as this node knows (itself when leading); `None`
    /// until it hears from one, and while it campaigns.
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    /// The highest index this node knows committed. Entries up to it are handed to the
    /// application only once also durable here.
    pub fn commit_index(&self) -> Index {
        self.commit
    }

    /// The highest index the application reported applied ([`RaftNode::applied`]); the same as
    /// `status().applied`, without building a [`Status`] (which clones the membership).
    pub fn applied_index(&self) -> Index {
        self.applied
    }

    /// The in-memory log, including entries not durable yet.
    pub fn log(&self) -> &RaftLog {
        &self.log
    }

    /// The configuration in effect: the latest in the log, committed or not (a configuration
    /// takes effect when appended).
    pub fn membership(&self) -> &Membership {
        self.log.membership()
    }

    /// Everything [`Status`] holds, taken now.
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
