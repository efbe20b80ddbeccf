//! Snapshot bookkeeping: writing one local snapshot at a time, and whether a received one is
//! worth adopting.

use keel_core::{InvalidMessage, Message, MessageBody, NodeId, RaftNode, SnapshotMeta, Term};

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
}

/// Whether a fully received snapshot is worth adopting: only one the core could install (above
/// its commit index), and never one no honest leader sends.
pub fn adoption(raft: &RaftNode, from: NodeId, term: Term, meta: &SnapshotMeta) -> Adoption {
    let install = install_message(raft.id(), from, term, meta.clone());
    if let Err(why) = raft.validate(&install) {
        return Adoption::Refused(why);
    }
    if meta.last.index <= raft.commit_index() || term < raft.term() {
        return Adoption::NotNeeded;
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
