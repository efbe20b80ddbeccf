//! Cluster configurations and the quorum arithmetic over them, including joint consensus
//! (Raft thesis section 4.3): while a configuration is joint, every decision needs a majority of
//! the incoming voters *and* a majority of the outgoing voters.
//!
//! [`Membership`] holds the voters, the outgoing voters while a configuration is joint, and the
//! learners (who receive the log and never count); it answers quorum and vote counting
//! ([`VoteResult`]). [`MembershipChange`] is one requested change (add a voter, add a learner,
//! remove), which the node turns into the joint configuration (`node/membership_change.rs`).

use std::collections::BTreeSet;

use crate::types::{Index, NodeId};

/// A cluster configuration. `outgoing` is non-empty only while a joint change is in progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Membership {
    /// The voters: while joint, those of the incoming configuration C(new).
    pub voters: BTreeSet<NodeId>,
    /// While joint, the voters of the outgoing configuration C(old); empty otherwise.
    pub outgoing: BTreeSet<NodeId>,
    /// Members that receive the log but never count in a quorum or vote. A node listed here and
    /// as a voter counts as a voter ([`Membership::is_learner`]).
    pub learners: BTreeSet<NodeId>,
}

/// The result of counting votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteResult {
    /// A majority granted (of both halves, while joint).
    Won,
    /// A majority can no longer be reached (in either half), whatever the missing votes say.
    Lost,
    /// Neither yet: the missing votes decide.
    Pending,
}

impl Membership {
    /// A configuration of these voters alone: not joint, no learners.
    pub fn new_voters(voters: impl IntoIterator<Item = NodeId>) -> Self {
        Membership {
            voters: voters.into_iter().collect(),
            ..Default::default()
        }
    }

    /// No voter and no learner: what a node knows of the configuration before any reaches it
    /// (a node that joined from entries has none below its own AddVoter's entry).
    pub fn is_unknown(&self) -> bool {
        self.voters.is_empty() && self.outgoing.is_empty() && self.learners.is_empty()
    }

    /// Whether a joint change is in progress (`outgoing` is non-empty): every quorum then needs
    /// a majority of both halves.
    pub fn is_joint(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// Whether `id` counts in any quorum of this configuration.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.outgoing.contains(&id)
    }

    /// Whether `id` is a learner and not also a voter of either half.
    pub fn is_learner(&self, id: NodeId) -> bool {
        self.learners.contains(&id) && !self.is_voter(id)
    }

    /// Whether `id` is a member at all: a voter of either half or a learner.
    pub fn contains(&self, id: NodeId) -> bool {
        self.is_voter(id) || self.learners.contains(&id)
    }

    /// Every node that receives replication: voters of both halves and learners, sorted, unique.
    pub fn members(&self) -> BTreeSet<NodeId> {
        let mut all = self.voters.clone();
        all.extend(self.outgoing.iter().copied());
        all.extend(self.learners.iter().copied());
        all
    }

    /// Bytes this configuration counts for in flow control: 8 per id in each set (a node in two
    /// sets counts twice).
    pub fn size_bytes(&self) -> usize {
        8 * (self.voters.len() + self.outgoing.len() + self.learners.len())
    }

    /// The highest index acknowledged by a quorum, where `acked(id)` is what `id` has
    /// acknowledged. Joint configurations take the minimum of both halves.
    pub fn quorum_index(&self, acked: impl Fn(NodeId) -> Index) -> Index {
        let incoming = majority_index(&self.voters, &acked);
        if self.outgoing.is_empty() {
            incoming
        } else {
            incoming.min(majority_index(&self.outgoing, &acked))
        }
    }

    /// Counts votes: `vote(id)` is `Some(granted)` for nodes that answered.
    pub fn vote_result(&self, vote: impl Fn(NodeId) -> Option<bool>) -> VoteResult {
        let incoming = majority_vote(&self.voters, &vote);
        if self.outgoing.is_empty() {
            return incoming;
        }
        match (incoming, majority_vote(&self.outgoing, &vote)) {
            (VoteResult::Won, VoteResult::Won) => VoteResult::Won,
            (VoteResult::Lost, _) | (_, VoteResult::Lost) => VoteResult::Lost,
            _ => VoteResult::Pending,
        }
    }

    /// Whether the nodes for which `active(id)` holds form a quorum.
    pub fn is_quorum(&self, active: impl Fn(NodeId) -> bool) -> bool {
        self.vote_result(|id| Some(active(id))) == VoteResult::Won
    }
}

/// The largest index that a majority of `voters` has acknowledged. An empty voter set imposes no
/// constraint (it is the outgoing half of a non-joint configuration), so it yields `Index::MAX`.
fn majority_index(voters: &BTreeSet<NodeId>, acked: &impl Fn(NodeId) -> Index) -> Index {
    if voters.is_empty() {
        return Index::MAX;
    }
    // Small clusters are the common case: sort on the stack.
    let mut buf = [0 as Index; 16];
    let mut heap;
    let indexes: &mut [Index] = if voters.len() <= buf.len() {
        for (slot, id) in buf.iter_mut().zip(voters.iter()) {
            *slot = acked(*id);
        }
        &mut buf[..voters.len()]
    } else {
        heap = voters.iter().map(|id| acked(*id)).collect::<Vec<_>>();
        &mut heap
    };
    indexes.sort_unstable_by(|a, b| b.cmp(a));
    indexes[voters.len() / 2]
}

fn majority_vote(voters: &BTreeSet<NodeId>, vote: &impl Fn(NodeId) -> Option<bool>) -> VoteResult {
    if voters.is_empty() {
        return VoteResult::Won;
    }
    let (mut granted, mut missing) = (0, 0);
    for id in voters {
        match vote(*id) {
            Some(true) => granted += 1,
            Some(false) => {}
            None => missing += 1,
        }
    }
    let majority = voters.len() / 2 + 1;
    if granted >= majority {
        VoteResult::Won
    } else if granted + missing >= majority {
        VoteResult::Pending
    } else {
        VoteResult::Lost
    }
}

/// A change requested through the one-call API. The leader turns a change of voters into the two
/// steps of joint consensus itself; a change of learners only needs one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// Add a voter (or promote a learner).
    AddVoter(NodeId),
    /// Add a non-voting member that receives the log. Refused for a voter
    /// (`ProposeError::AlreadyVoter`): it never demotes one.
    AddLearner(NodeId),
    /// Remove a voter or learner. Removing the leader is allowed: it steps down once the new
    /// configuration is committed.
    Remove(NodeId),
}

impl MembershipChange {
    /// The configuration this change leads to from `current` (which must not be joint).
    pub fn target(&self, current: &Membership) -> Membership {
        let mut next = Membership {
            voters: current.voters.clone(),
            outgoing: BTreeSet::new(),
            learners: current.learners.clone(),
        };
        match *self {
            MembershipChange::AddVoter(id) => {
                next.learners.remove(&id);
                next.voters.insert(id);
            }
            MembershipChange::AddLearner(id) => {
                next.voters.remove(&id);
                next.learners.insert(id);
            }
            MembershipChange::Remove(id) => {
                next.voters.remove(&id);
                next.learners.remove(&id);
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn quorum_index_is_the_median_of_a_simple_majority() {
        let m = Membership::new_voters([1, 2, 3]);
        let acked = |id| [0, 10, 7, 3][id as usize];
        assert_eq!(m.quorum_index(acked), 7);
        let m5 = Membership::new_voters([1, 2, 3, 4, 5]);
        let acked5 = |id| [0, 9, 1, 8, 2, 5][id as usize];
        assert_eq!(m5.quorum_index(acked5), 5);
    }

    #[test]
    fn joint_quorum_needs_both_halves() {
        let m = Membership {
            voters: set(&[1, 2, 3]),
            outgoing: set(&[3, 4, 5]),
            learners: BTreeSet::new(),
        };
        // Incoming majority at 9 (1,2), outgoing majority only at 2 (3 and 4 or 5).
        let acked = |id| [0, 9, 9, 2, 0, 1][id as usize];
        assert_eq!(m.quorum_index(acked), 1);
        assert_eq!(
            m.vote_result(|id| Some(id <= 3)),
            VoteResult::Lost,
            "outgoing half has only node 3"
        );
        assert_eq!(m.vote_result(|id| Some(id != 2)), VoteResult::Won);
        assert_eq!(
            m.vote_result(|id| (id == 1).then_some(true)),
            VoteResult::Pending
        );
    }

    #[test]
    fn learners_never_count() {
        let m = Membership {
            voters: set(&[1]),
            outgoing: BTreeSet::new(),
            learners: set(&[2, 3]),
        };
        assert!(m.is_quorum(|id| id == 1));
        assert!(!m.is_quorum(|id| id != 1));
        assert!(m.is_learner(2) && !m.is_voter(2));
    }

    #[test]
    fn change_targets() {
        let m = Membership::new_voters([1, 2, 3]);
        assert_eq!(
            MembershipChange::AddVoter(4).target(&m).voters,
            set(&[1, 2, 3, 4])
        );
        let l = MembershipChange::AddLearner(4).target(&m);
        assert_eq!(l.learners, set(&[4]));
        assert_eq!(MembershipChange::AddVoter(4).target(&l).learners, set(&[]));
        assert_eq!(MembershipChange::Remove(1).target(&m).voters, set(&[2, 3]));
    }
}
