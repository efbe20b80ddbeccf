//! The wipe fault (scenario S37): a member's disk is replaced, and the node comes back under
//! its id with empty storage and a new storage incarnation. Off unless asked for
//! (`--disk-replacements`, `--unplanned-wipes`): a same-id rebuild is not safe in general, and
//! the documented procedure (docs/operating.md, "Replacing a member's disk") brings a rebuilt
//! disk back under a new node id, which is an ordinary membership change. These modes show what
//! the handshake gate (keel-engine's, which the runtime's transport runs too) does and does not
//! catch.
//!
//! Planned (`--disk-replacements`, a quarter of the seeds): the member is removed first; once the
//! removal is committed and no configuration lists it, its disk is wiped and it restarts empty
//! (without an initial cluster); then it is added back, as a learner and then a voter if it was
//! one. A peer that has not yet seen the removal refuses the new storage's answers; each peer
//! forgets the old one when the removal reaches its log (`DepartedMembers`). Liveness held
//! after the gate's fixes; safety failed twice in 30,000 seeds (docs/sweeps.md, sweep 33): a peer
//! that caught up from a snapshot older than the removal counted the new storage's vote in the
//! old configuration, and a rebuilt node received an old snapshot in whose configuration it
//! alone was a quorum.
//!
//! Unplanned (`--unplanned-wipes`): the disk is wiped while the node is still a member. A peer
//! that never heard the old storage (one itself rebuilt, say) cannot tell it from a new member
//! and counts its vote: committed entries are lost in a few percent of the seeds.
//!
//! A wipe needs headroom: every node up, and every configuration of three voters or more and
//! not joint, so that the others keep a majority throughout; one member at a time, and while
//! one is on its way back the nemesis never shrinks the voters below three.

use keel_core::{Membership, MembershipChange, NodeId};
use rand::Rng;

use crate::disk::SimDisk;
use crate::user::User;
use crate::world::{new_gate, new_receiver, World};

/// A member whose disk is being replaced.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wiped {
    pub id: NodeId,
    /// Added back as a voter (else as a learner).
    pub was_voter: bool,
    /// Its disk was wiped (at once in the unplanned mode, else once its removal committed).
    pub wiped: bool,
    /// Its removal committed: peers forget its old storage as they see it.
    pub removed: bool,
}

fn has_headroom(m: &Membership) -> bool {
    !m.is_joint() && m.voters.len() >= 3
}

impl<U: User> World<U> {
    /// Starts replacing a random member's disk, if the cluster has the headroom.
    pub(crate) fn wipe(&mut self) {
        // Not beside a damaged disk still repairing itself (`storage_faults.rs`).
        if self.wiped.is_some()
            || self.storage.count() > 0
            || self.nodes.iter().any(|n| n.raft.is_none() && !n.retired)
        {
            return;
        }
        let committed = self.membership.committed().1.clone();
        if !has_headroom(&committed) {
            return;
        }
        let members: Vec<NodeId> = committed.members().into_iter().collect();
        let headroom_everywhere = self
            .nodes
            .iter()
            .filter(|n| members.contains(&n.id))
            .filter_map(|n| n.raft.as_ref())
            .all(|r| has_headroom(r.membership()));
        if !headroom_everywhere {
            return;
        }
        let id = members[self.rng.random_range(0..members.len())];
        self.wiped = Some(Wiped {
            id,
            was_voter: committed.voters.contains(&id),
            wiped: false,
            removed: false,
        });
        self.trace_line(|| format!("replace the disk of n{id}"));
        if self.unplanned_wipes {
            self.wipe_disk(id);
        } else {
            self.repair_wiped();
        }
    }

    /// Whether node `by`'s latest configuration lists `id`.
    fn listed_by(&self, by: NodeId, id: NodeId) -> bool {
        self.nodes[(by - 1) as usize]
            .raft
            .as_ref()
            .is_some_and(|r| r.membership().contains(id))
    }

    /// The node loses its disk whole and restarts empty, waiting to be added.
    fn wipe_disk(&mut self, id: NodeId) {
        self.trace_line(|| format!("wipe n{id}"));
        self.crash(id);
        if self.violation.is_some() {
            return;
        }
        let node = &mut self.nodes[(id - 1) as usize];
        node.disk = SimDisk::new(self.params.use_wal, &[], self.mutation);
        node.snapshot_data.clear();
        node.storage += 1;
        node.receiver = new_receiver(&node.disk, self.mutation);
        node.gate = new_gate(&node.disk, id, self.mutation).expect("a new disk's gate");
        if let Some(w) = self.wiped.as_mut() {
            w.wiped = true;
        }
    }

    /// Takes the replacement one step further through the leader: removed, wiped, added back
    /// as a learner, promoted if it was a voter. A change the leader refuses (another one
    /// pending) is asked again at the next call. Called at every nemesis step and while healing.
    pub(crate) fn repair_wiped(&mut self) {
        let Some(mut w) = self.wiped else {
            return;
        };
        let id = w.id;
        if self.nodes[(id - 1) as usize].retired {
            self.wiped = None; // removed and shut down for good (see `retire_removed`)
            return;
        }
        if !w.removed && !self.membership.committed().1.contains(id) {
            w.removed = true;
            self.wiped = Some(w);
        }
        if w.removed && !w.wiped {
            // The operator wipes a node no configuration lists any more (its removal may still
            // be reaching a lagging node: that one refuses the new disk until it learns of it).
            // Down between the removal and the wipe, it restarts empty all the same (`crash`
            // schedules the restart).
            if self.leader().is_some_and(|l| self.listed_by(l, id)) {
                return;
            }
            self.wipe_disk(id);
        }
        let committed = self.membership.committed().1;
        let back = if w.was_voter {
            committed.voters.contains(&id) && !committed.is_joint()
        } else {
            committed.learners.contains(&id)
        };
        if back && w.removed {
            self.trace_line(|| format!("n{id} is back with its new disk"));
            self.wiped = None;
            return;
        }
        let Some(leader) = self.leader() else { return };
        let latest = self.nodes[(leader - 1) as usize]
            .raft
            .as_ref()
            .expect("leader is up")
            .membership()
            .clone();
        let change = if !w.removed {
            if !latest.contains(id) {
                return; // removal proposed, not committed yet
            }
            MembershipChange::Remove(id)
        } else if !latest.contains(id) {
            MembershipChange::AddLearner(id)
        } else if w.was_voter && latest.learners.contains(&id) {
            MembershipChange::AddVoter(id)
        } else {
            return; // the change is under way
        };
        self.propose_membership(leader, change);
    }
}
