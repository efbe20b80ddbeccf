//! Snapshot bookkeeping: writing one local snapshot at a time, and whether a received one is
//! worth adopting.
//!
//! [`SnapshotWriting`]: one snapshot is written at a time; the newest view taken meanwhile waits
//! (older ones are dropped). [`adoption`]: a fully received snapshot is adopted only if the
//! validator accepts its `InstallSnapshot` and it is above the commit index (and of no older
//! term); if storage already holds a newer one (adopted, its install refused because the term
//! moved on meanwhile), that one is installed instead ([`Adoption::InstallSaved`]).

use keel_core::{
    Index, InvalidMessage, Message, MessageBody, NodeId, RaftNode, SnapshotMeta, Term,
};

/// One snapshot is written at a time; the newest view taken meanwhile waits (an older waiting
/// one is dropped: the newer covers it).
#[derive(Debug)]
pub struct SnapshotWriting<V> {
    writing: bool,
    next: Option<V>,
}

impl<V> Default for SnapshotWriting<V> {
    fn default() -> Self {
        SnapshotWriting {
            writing: false,
            next: None,
        }
    }
}

impl<V> SnapshotWriting<V> {
    /// A view to write: given back if no write is running (start it now), else kept as the one
    /// to write next.
    pub fn offer(&mut self, view: V) -> Option<V> {
        if self.writing {
            self.next = Some(view);
            return None;
        }
        self.writing = true;
        Some(view)
    }

    /// The running write finished: the view to write next, if one waits (the write is then
    /// running again).
    pub fn finished(&mut self) -> Option<V> {
        self.writing = false;
        let next = self.next.take()?;
        self.writing = true;
        Some(next)
    }
}

/// What to do with a snapshot received completely from `from` (leader of `term`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// No honest leader sends it: drop it, count and log the refusal.
    Refused(InvalidMessage),
    /// The core could not install it (at or below the commit index, or from an older term):
    /// drop it.
    NotNeeded,
    /// Make it this node's newest snapshot; once durable, step `InstallSnapshot` into the core,
    /// which makes the final decision.
    Adopt,
    /// Drop it, and step `InstallSnapshot` of the newer snapshot this node's storage already
    /// holds (from this leader, of this term) instead: a snapshot adopted whose install the core
    /// refused because the term moved on while it was being saved. Its content is committed
    /// state whichever leader sent it (a leader snapshots only what it applied), so installing
    /// it under the current leader is safe; without this, the storage would refuse every older
    /// snapshot the current leader sends (it keeps only newer ones), and the follower would
    /// wait until the leader's own snapshots overtake it.
    InstallSaved,
}

/// Whether a fully received snapshot is worth adopting: only one the core could install (above
/// its commit index), and never one no honest leader sends. `saved`: the index of the newest
/// snapshot the node's storage holds.
pub fn adoption(
    raft: &RaftNode,
    from: NodeId,
    term: Term,
    meta: &SnapshotMeta,
    saved: Index,
) -> Adoption {
    let install = install_message(raft.id(), from, term, meta.clone());
    if let Err(why) = raft.validate(&install) {
        return Adoption::Refused(why);
    }
    if meta.last.index <= raft.commit_index() || term < raft.term() {
        return Adoption::NotNeeded;
    }
    if saved > meta.last.index {
        return Adoption::InstallSaved;
    }
    Adoption::Adopt
}

/// The message that tells the core a snapshot from `from` is durable here.
pub fn install_message(to: NodeId, from: NodeId, term: Term, meta: SnapshotMeta) -> Message {
    Message {
        from,
        to,
        term,
        body: MessageBody::InstallSnapshot { meta },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_core::storage::{MemStorage, Storage};
    use keel_core::{Config, LogId, Membership};

    use super::*;

    fn meta(index: Index) -> SnapshotMeta {
        SnapshotMeta {
            last: LogId::new(1, index),
            membership: Arc::new(Membership::new_voters([1, 2, 3])),
            term_history: vec![LogId::new(1, 1)],
        }
    }

    #[test]
    fn a_received_snapshot_is_adopted_or_the_newer_one_saved_is_installed_instead() {
        let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
        let follower = RaftNode::new(Config::new(2), state).unwrap();
        assert_eq!(adoption(&follower, 1, 1, &meta(10), 0), Adoption::Adopt);
        assert_eq!(adoption(&follower, 1, 1, &meta(10), 10), Adoption::Adopt);
        // The storage holds a newer snapshot the core never installed: install that one.
        assert_eq!(
            adoption(&follower, 1, 1, &meta(10), 12),
            Adoption::InstallSaved
        );
        // A node cannot send itself a snapshot.
        assert!(matches!(
            adoption(&follower, 2, 1, &meta(10), 0),
            Adoption::Refused(_)
        ));
    }

    /// The scenario fix E is for, scripted: a follower adopts leader 1's snapshot at 200 while
    /// leader 3 of a later term takes over, so the core ignores the stale install and storage
    /// keeps 200 uninstalled; leader 3 then sends its own, older snapshot at 190, which storage
    /// would refuse. The follower installs the saved 200 under leader 3 instead and is caught up.
    #[test]
    fn a_follower_installs_the_newer_snapshot_its_storage_holds_under_the_current_leader() {
        let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
        let mut follower = RaftNode::new(Config::new(2), state).unwrap();
        let heartbeat = |from, term| Message {
            from,
            to: 2,
            term,
            body: MessageBody::Heartbeat {
                commit: 0,
                read_round: 0,
                clock: Default::default(),
            },
        };
        follower.step(heartbeat(1, 2));
        assert_eq!(adoption(&follower, 1, 2, &meta(200), 0), Adoption::Adopt);
        // Leader 3 takes over while storage saves 200; then the install of leader 1 arrives.
        follower.step(heartbeat(3, 3));
        follower.step(install_message(2, 1, 2, meta(200)));
        assert_eq!(
            follower.commit_index(),
            0,
            "a stale leader's install is ignored"
        );

        assert_eq!(
            adoption(&follower, 3, 3, &meta(190), 200),
            Adoption::InstallSaved
        );
        follower.step(install_message(2, 3, 3, meta(200)));
        assert_eq!(follower.commit_index(), 200);
        assert_eq!(follower.snapshot().last, LogId::new(1, 200));
    }
}
