//! The node's outputs: [`Ready`], what accumulated since the last call to [`RaftNode::ready`]
//! (messages, the write for storage, committed entries, read states, snapshots to install or
//! send), and how it is drained, held messages released once their write is durable. Apart from
//! the inputs in `mod.rs` because it is the one place that decides what leaves the node and when.

use super::ReadState;
use super::{RaftNode, Role};
use crate::durability::Write;
use crate::message::Message;
use crate::types::{Entry, NodeId, SnapshotMeta};

/// The outputs accumulated since the last call to [`RaftNode::ready`].
#[derive(Debug, Default)]
pub struct Ready {
    /// Send these. Every message here already satisfies the persistence contract.
    pub messages: Vec<Message>,
    /// Hand this to storage and report its completion with [`RaftNode::persisted`].
    pub write: Option<Write>,
    /// Apply these in order, then report with [`RaftNode::applied`]. All are committed and durable
    /// locally.
    pub committed: Vec<Entry>,
    /// ReadIndex requests that may be served once the state machine has applied `index`.
    pub read_states: Vec<ReadState>,
    /// ReadIndex requests that cannot complete on this node (leadership lost); retry elsewhere.
    pub failed_reads: Vec<u64>,
    /// After applying `committed`: replace the state machine by the snapshot at `last` (its data
    /// is durable on this node), then report `applied(last.index)`.
    pub install_snapshot: Option<SnapshotMeta>,
    /// Stream this node's snapshot to these followers; report a failed transfer with
    /// [`RaftNode::snapshot_send_failed`].
    pub send_snapshots: Vec<(NodeId, SnapshotMeta)>,
}

impl Ready {
    /// Whether there is nothing to do: no field holds anything.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
            && self.write.is_none()
            && self.committed.is_empty()
            && self.read_states.is_empty()
            && self.failed_reads.is_empty()
            && self.install_snapshot.is_none()
            && self.send_snapshots.is_empty()
    }
}

impl RaftNode {
    /// Whether [`RaftNode::ready`] would return something to do: the cheap check a runtime makes
    /// after each input before draining. It may say true for a leader whose pending replication
    /// turns out to send nothing.
    pub fn has_ready(&self) -> bool {
        // The cheap tests first, the write test last.
        !self.messages.is_empty()
            || self
                .held
                .front()
                .is_some_and(|(w, _)| *w <= self.durability.completed_write_id())
            || self.apply_requested < self.apply_limit()
            || !self.read_states.is_empty()
            || !self.failed_reads.is_empty()
            || self.pending_install.is_some()
            || !self.snapshot_sends.is_empty()
            || self
                .leader_state
                .as_ref()
                .is_some_and(|l| l.replicate_pending || l.reads.round_requested())
            || self.is_write_due(self.commit_flush_due)
    }

    /// Whether storage has a write to do: `durability.is_dirty` at the write limit. On a leader
    /// the limit (a quorum over its progress) is only computed when the whole log would be a
    /// write: the limit is at most the last index, and `is_dirty` only turns false as its index
    /// drops.
    pub(super) fn is_write_due(&self, include_commit: bool) -> bool {
        let hard_state = self.hard_state();
        self.durability
            .is_dirty(self.log.last_index(), hard_state, include_commit)
            && self
                .durability
                .is_dirty(self.write_limit(), hard_state, include_commit)
    }

    /// Drains everything produced since the last call.
    pub fn ready(&mut self) -> Ready {
        if self.role == Role::Leader {
            self.flush_leader_sends();
        }
        let hard_state = self.hard_state();
        let last_index = self.write_limit();
        let write = if self
            .durability
            .is_dirty(last_index, hard_state, self.commit_flush_due)
        {
            self.commit_flush_due = false;
            let log = &self.log;
            Some(self.durability.issue(last_index, hard_state, |from, to| {
                log.slice(from, to, usize::MAX, usize::MAX)
            }))
        } else {
            None
        };
        let completed = self.durability.completed_write_id();
        while self.held.front().is_some_and(|(w, _)| *w <= completed) {
            let (_, msg) = self.held.pop_front().expect("checked non-empty");
            self.messages.push(msg);
        }
        let apply_to = self.apply_limit();
        let committed = if self.apply_requested < apply_to {
            let batch = self.log.slice(
                self.apply_requested + 1,
                apply_to,
                self.config.apply_entries_max,
                usize::MAX,
            );
            if let Some(last) = batch.last() {
                self.apply_requested = last.index;
            }
            batch
        } else {
            Vec::new()
        };
        Ready {
            messages: std::mem::take(&mut self.messages),
            write,
            committed,
            read_states: std::mem::take(&mut self.read_states),
            failed_reads: std::mem::take(&mut self.failed_reads),
            install_snapshot: self.pending_install.take(),
            send_snapshots: std::mem::take(&mut self.snapshot_sends),
        }
    }
}
