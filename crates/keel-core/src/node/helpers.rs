//! The helpers every handler shares: the hard state, who may campaign, how far entries may be
//! applied, building and queueing messages (at once, after the next write, or once the term is
//! durable), stepping down, appending as leader, the proposal checks and the node's invariants.
//! Apart from `mod.rs` so that the inputs there read as the protocol's entry points, and each
//! concern's handler (`election.rs`, `replication.rs`, ...) finds its common ground in one place.

use super::{ProposeError, RaftNode, Role};
use crate::message::{Message, MessageBody};
use crate::types::{Entry, EntryPayload, HardState, Index, LogId, NodeId, Term};

impl RaftNode {
    pub(super) fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.commit,
        }
    }

    pub(super) fn is_voter(&self) -> bool {
        self.log.membership().is_voter(self.id)
    }

    /// Whether this node may start an election: as a voter of its latest configuration, or
    /// (Raft thesis section 4.2.2) as a voter of the latest configuration it knows committed,
    /// while a later one that leaves it out is not known committed. Without the second case a
    /// removed leader that crashed after appending C(new), and before any voter of C(new) got
    /// it, never campaigns (it is not in C(new)), while the voters that still hold C(old,new)
    /// need its vote and cannot get it (its log is longer): no leader ever again (a 2-voter
    /// cluster removing its leader, `removed_leader_with_uncommitted_config_campaigns`). Its own
    /// vote counts only where it is a voter: `vote_result` counts the latest configuration's
    /// voters. Once it knows C(new) committed — at the latest when, elected, it commits C(new)
    /// itself and steps down — it stops.
    pub(super) fn may_campaign(&self) -> bool {
        self.is_voter() || self.log.membership_at(self.commit).is_voter(self.id)
    }

    /// A voter that has replayed its log and whose campaigns are not held.
    pub(super) fn may_start_election(&self) -> bool {
        self.may_campaign()
            && !self.is_replaying()
            && !self.campaigns_held
            && self.recovery.is_none()
    }

    pub(super) fn committed_and_durable(&self) -> Index {
        self.commit.min(self.durability.durable_index())
    }

    /// How far entries may be handed to the application now: committed, locally durable, and
    /// within `unapplied_entries_max` of what it reported applied.
    pub(super) fn apply_limit(&self) -> Index {
        self.committed_and_durable().min(
            self.applied
                .saturating_add(self.config.unapplied_entries_max),
        )
    }

    pub(super) fn mutated(&self, _m: crate::Mutation) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.config.mutation == Some(_m)
        }
        #[cfg(not(feature = "mutations"))]
        {
            false
        }
    }

    pub(super) fn message(&self, to: NodeId, body: MessageBody) -> Message {
        Message {
            from: self.id,
            to,
            term: self.term,
            body,
        }
    }

    /// Queues a message that needs nothing durable beyond what already is (leader traffic: its
    /// term was durable before it could win).
    pub(super) fn send(&mut self, to: NodeId, body: MessageBody) {
        let msg = self.message(to, body);
        self.messages.push(msg);
    }

    /// Queues a message that may leave only once everything decided so far is durable: votes,
    /// acknowledgements, and anything carrying a term this node just adopted.
    pub(super) fn send_after_persist(&mut self, msg: Message) {
        let dirty = self.is_write_due(false);
        let barrier = self.durability.barrier(dirty);
        if barrier <= self.durability.completed_write_id() && self.held.is_empty() {
            self.messages.push(msg);
        } else {
            self.held.push_back((barrier, msg));
        }
    }

    /// Queues a message that asserts only this node's term and vote (a heartbeat response, which
    /// also acknowledges a read round): it leaves at once if those are durable, even while
    /// entries are still being written, else like [`Self::send_after_persist`]. Held behind the
    /// entries, it would let one slow fsync on every follower (a large snapshot's writeback on
    /// the same disk, say) cost a leader its quorum check although the followers are alive and
    /// follow it.
    pub(super) fn send_after_term_persisted(&mut self, msg: Message) {
        let durable = self.durability.durable_hard_state();
        if durable.term == self.term && durable.vote == self.vote {
            self.messages.push(msg);
        } else {
            self.send_after_persist(msg);
        }
    }

    pub(super) fn reset_election_timer(&mut self) {
        self.election_elapsed_ticks = 0;
        let et = self.config.election_timeout_ticks;
        self.randomized_election_timeout_ticks = self.rng.range(et, 2 * et);
    }

    pub(super) fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        assert!(term >= self.term, "terms never go backwards");
        if term > self.term {
            self.term = term;
            self.vote = None;
        }
        self.role = Role::Follower;
        self.leader = leader;
        self.leader_match = 0;
        self.votes.clear();
        if let Some(state) = self.leader_state.take() {
            self.failed_reads.extend(state.reads.drain_all());
        }
        self.reset_election_timer();
    }

    /// As [`RaftNode::become_follower`], but the election timer runs on as it was: for the
    /// step-downs that must not hand the next race to time out to someone else (`election.rs`).
    pub(super) fn become_follower_keeping_timer(&mut self, term: Term, leader: Option<NodeId>) {
        let timer = (
            self.election_elapsed_ticks,
            self.randomized_election_timeout_ticks,
        );
        self.become_follower(term, leader);
        (
            self.election_elapsed_ticks,
            self.randomized_election_timeout_ticks,
        ) = timer;
    }

    /// Appends one entry as leader and returns its position.
    pub(super) fn append_entry(&mut self, payload: EntryPayload) -> LogId {
        debug_assert_eq!(self.role, Role::Leader);
        let is_membership = matches!(payload, EntryPayload::Membership(_));
        let entry = Entry {
            term: self.term,
            index: self.log.last_index() + 1,
            payload,
        };
        let id = entry.log_id();
        self.log.append(entry);
        if is_membership {
            self.sync_progress_with_membership();
        }
        let state = self.leader_state.as_mut().expect("leader has leader state");
        state.replicate_pending = true;
        id
    }

    pub(super) fn check_can_propose(&self) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        let state = self.leader_state.as_ref().expect("leader has leader state");
        if state.transfer.is_some() {
            return Err(ProposeError::TransferInProgress);
        }
        let uncommitted = self.log.last_index() - self.commit;
        if uncommitted >= self.config.uncommitted_entries_max as u64 {
            return Err(ProposeError::Backpressure);
        }
        Ok(())
    }

    /// Assertions of the node's own invariants after every input. Cheap ones always run where a
    /// violation would spread to disk or peers; the rest in debug builds.
    pub(super) fn check_invariants(&self) {
        assert!(
            self.commit <= self.log.last_index(),
            "commit {} beyond last index {}",
            self.commit,
            self.log.last_index()
        );
        debug_assert!(self.applied <= self.apply_requested);
        debug_assert!(self.apply_requested <= self.commit);
        debug_assert!(self.durability.durable_index() <= self.log.last_index());
        debug_assert!(self.log.purged().index <= self.apply_requested);
        debug_assert!(self.log.purged().index <= self.snapshot.last.index);
        debug_assert!(self.role != Role::Leader || self.leader == Some(self.id));
        debug_assert!(self.role != Role::Leader || self.vote == Some(self.id));
        debug_assert_eq!(self.role == Role::Leader, self.leader_state.is_some());
    }
}
