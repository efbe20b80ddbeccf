//! Membership changes by joint consensus (Raft thesis section 4.3) behind a one-call API, learners,
//! leadership transfer, and what happens when a commit moves the configuration forward.
//!
//! Configurations take effect when appended. `propose_membership` turns a change of voters into
//! C(old,new); when that commits the leader appends C(new) by itself. One change at a time. A
//! leader not in C(new) steps down once C(new) commits. Learners receive the log and never count.
//! A node campaigns as a voter of its latest configuration, or of the latest one it knows
//! committed while a later one that leaves it out is not (`may_campaign` in `helpers.rs`, thesis
//! section 4.2.2): a removed leader that crashed before C(new) spread may be the only node the
//! remaining C(old,new) voters can elect, and it counts its own vote only where it is a voter.

use super::{ProposeError, RaftNode, Role, Transfer};
use crate::membership::{Membership, MembershipChange};
use crate::message::MessageBody;
use crate::types::{EntryPayload, LogId, NodeId};

impl RaftNode {
    /// Proposes a membership change. A change of voters goes through a joint configuration that
    /// the leader leaves by itself once it commits; a change of learners is a single entry. Only
    /// one change may be in flight.
    pub fn propose_membership(&mut self, change: MembershipChange) -> Result<LogId, ProposeError> {
        self.check_can_propose()?;
        let current = self.log.membership().clone();
        if current.is_joint() || self.log.membership_index() > self.commit {
            return Err(ProposeError::MembershipChangeInProgress);
        }
        if let MembershipChange::AddLearner(id) = change {
            if current.is_voter(id) {
                return Err(ProposeError::AlreadyVoter(id));
            }
        }
        let target = change.target(&current);
        if target == current {
            return Err(ProposeError::NoChange);
        }
        if target.voters.is_empty() {
            return Err(ProposeError::InvalidTarget);
        }
        let next = if target.voters == current.voters {
            target
        } else {
            Membership {
                voters: target.voters,
                outgoing: current.voters,
                learners: target.learners,
            }
        };
        Ok(self.append_entry(EntryPayload::Membership(next.into())))
    }

    /// Hands leadership to `to`: once it holds our whole log, it is told to campaign at once.
    /// Proposals are refused meanwhile; the attempt is abandoned after an election timeout.
    pub fn transfer_leadership(&mut self, to: NodeId) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        if to == self.id || !self.log.membership().is_voter(to) {
            return Err(ProposeError::InvalidTarget);
        }
        let state = self.leader_state.as_mut().expect("leader has leader state");
        state.transfer = Some(Transfer {
            target: to,
            elapsed_ticks: 0,
            timeout_now_sent: false,
        });
        let last_index = self.log.last_index();
        let caught_up = state
            .progress
            .iter()
            .any(|(p, pr)| *p == to && pr.match_index == last_index);
        if caught_up {
            state.transfer.as_mut().expect("just set").timeout_now_sent = true;
            self.send(to, MessageBody::TimeoutNow);
        } else {
            self.send_append(to);
        }
        Ok(())
    }

    /// Called on the leader whenever its commit index moved.
    pub(super) fn on_commit_advanced(&mut self) {
        let committed_config = self.log.membership_index() <= self.commit;
        if committed_config {
            let membership = self.log.membership().clone();
            if membership.is_joint() {
                // Leave the joint configuration: C(old,new) is committed, so C(new) may follow.
                let leave = Membership {
                    voters: membership.voters,
                    outgoing: Default::default(),
                    learners: membership.learners,
                };
                self.append_entry(EntryPayload::Membership(leave.into()));
            } else if !membership.is_voter(self.id) {
                // A leader removed from the configuration steps down once the configuration
                // without it is committed (thesis section 4.2.2).
                self.become_follower(self.term, None);
                return;
            }
        }
        self.advance_reads();
    }
}
