//! Snapshots: compaction after the application saved one, streaming one to a follower that needs
//! purged entries, and the follower's install rules (Raft Figure 13 with the fixes of docs/DESIGN.md
//! section 4: never install at or below the *commit* index; keep a matching suffix).
//!
//! **Compaction.** The application snapshots its state machine at an applied index
//! (`snapshot_meta(index)` gives the metadata to record: last entry, configuration, term history;
//! none where the node knows no configuration, as a node that joined from entries does below its
//! own AddVoter, since the bootstrap configuration lives only in the bootstrap snapshot) and
//! reports it durable with `snapshot_saved(meta)`; the node then purges its log up to
//! `snapshot_trailing_entries` below it (`Write::purge_to`). The term history survives
//! compaction, so `commit_status` stays exact.
//!
//! **Sending.** A leader whose follower needs purged entries switches it to the Snapshot state and
//! asks the transport to stream the snapshot (`Ready::send_snapshots`); no Appends go to it
//! meanwhile. A failed transfer (`snapshot_send_failed`) or a timeout sends it back to probing,
//! from just after the snapshot that was on its way (`Progress::pending_snapshot`, as
//! etcd-raft): a follower that already holds it (the receiver refused it as not needed) accepts
//! the probe, one that does not rejects it and is sent a snapshot again (probing from the match
//! index would ask a follower the leader never heard from for purged entries: the snapshot
//! again, forever). After a failed transfer the probe leaves at once, before a "lagging"
//! heartbeat answer can send the leader back to the match index.
//!
//! **Installing.** The transport makes the data durable on the receiver, then steps
//! `InstallSnapshot { meta }` into the core, which applies the install rules: at or below the
//! commit index, ignored, the leader told to continue after the commit index (S01, S13); the log
//! holds the snapshot's last entry, keep the suffix and move the commit (S03); otherwise the log
//! is replaced (`Write::install`), configuration and term history come from the snapshot (S32),
//! and `Ready::install_snapshot` tells the application to restore, after applying what it was
//! already handed (one ordered pipeline). On restart, entries the snapshot covers are skipped; a
//! log that holds the snapshot's index with another term is an interrupted install and its old
//! suffix is dropped.

use super::{RaftNode, Role};
use crate::message::{AppendResult, MessageBody};
use crate::types::{Index, LogId, NodeId, SnapshotMeta};

impl RaftNode {
    /// What a snapshot of the state machine at `index` must record: the entry's term, the
    /// configuration there and the term history up to it. `None` unless `index` is applied and
    /// still in the log (or is the latest snapshot's own position), and `None` where this node
    /// knows no configuration: a node that joined from entries (the leader's log still began at
    /// the bootstrap snapshot) never received the bootstrap configuration, and a snapshot below
    /// its first configuration entry would record an empty one, for itself after a restart and
    /// for every node it later sends the snapshot to (sweep 69's seed 22848696).
    pub fn snapshot_meta(&self, index: Index) -> Option<SnapshotMeta> {
        if index > self.applied {
            return None;
        }
        if index == self.snapshot.last.index {
            return Some(self.snapshot.clone());
        }
        if self.log.membership_at(index).is_unknown() {
            return None;
        }
        let term = self.log.term_at(index)?;
        let mut term_history: Vec<LogId> = self
            .log
            .term_history()
            .iter()
            .copied()
            .filter(|t| t.index <= index)
            .collect();
        term_history.dedup_by_key(|t| t.term);
        Some(SnapshotMeta {
            last: LogId::new(term, index),
            membership: std::sync::Arc::new(self.log.membership_at(index).clone()),
            term_history,
        })
    }

    /// The newest snapshot durable on this node.
    pub fn snapshot(&self) -> &SnapshotMeta {
        &self.snapshot
    }

    /// Keeps every entry after `index` in the log, whatever the snapshots: an application that
    /// keeps its state durably itself, and has made it durable up to `index` only, replays the
    /// entries after it at a restart (keel-engine's `StateMachine::durable`). A later call moves
    /// the floor; `None` removes it. Entries already compacted stay compacted (a restart then
    /// restores the snapshot first).
    pub fn keep_log_after(&mut self, index: Option<Index>) {
        self.compaction_floor = index;
    }

    /// The application made a snapshot at `meta.last` durable. The log is purged up to
    /// `snapshot_trailing_entries` below it, never beyond what is durable nor past the floor
    /// of [`RaftNode::keep_log_after`].
    pub fn snapshot_saved(&mut self, meta: SnapshotMeta) {
        if meta.last.index <= self.snapshot.last.index {
            return;
        }
        assert!(
            meta.last.index <= self.applied,
            "snapshot {} beyond the applied index {}",
            meta.last,
            self.applied
        );
        assert_eq!(
            self.log.term_of_any(meta.last.index),
            Some(meta.last.term),
            "snapshot {} does not match the log",
            meta.last
        );
        let purge_to = meta
            .last
            .index
            .saturating_sub(self.config.snapshot_trailing_entries)
            .min(self.durability.durable_index())
            .min(self.compaction_floor.unwrap_or(Index::MAX));
        self.snapshot = meta;
        if purge_to > self.log.purged().index {
            self.log.compact_to(purge_to);
            self.durability.purge(purge_to);
        }
        self.check_invariants();
    }

    /// The transport gave up streaming the snapshot to `to`: probe it again (which sends the
    /// snapshot again if it still needs one).
    pub fn snapshot_send_failed(&mut self, to: NodeId) {
        let Some(state) = self.leader_state.as_mut() else {
            return;
        };
        let Some(pr) = state.progress(to) else {
            return;
        };
        if pr.state == crate::progress::ReplicationState::Snapshot {
            pr.probe_after_snapshot();
            // At once: a follower that refused the snapshot as not needed answers this probe
            // before its next "lagging" heartbeat answer sends the leader back to its match
            // index, which asks for the snapshot again.
            self.send_append(to);
        }
    }

    pub(super) fn start_snapshot_send(&mut self, to: NodeId) {
        let meta = self.snapshot.clone();
        let state = self.leader_state.as_mut().expect("leader has leader state");
        let Some(pr) = state.progress(to) else {
            return;
        };
        debug_assert!(meta.last.index >= self.log.purged().index);
        pr.become_snapshot(meta.last.index);
        self.snapshot_sends.push((to, meta));
    }

    /// A complete snapshot from the leader (its data already durable here).
    pub(super) fn on_install_snapshot(&mut self, leader: NodeId, meta: SnapshotMeta) {
        debug_assert_eq!(self.role, Role::Follower);
        let Some(result) = self.install_snapshot(meta) else {
            return;
        };
        self.note_acknowledged_leader();
        let reply = self.message(leader, MessageBody::AppendResponse(result));
        self.send_after_persist(reply);
    }

    /// Applies the install rules; `None` drops the snapshot without an answer.
    fn install_snapshot(&mut self, meta: SnapshotMeta) -> Option<AppendResult> {
        let last = meta.last;
        // Everything at or below the commit index is already here, committed and about to be
        // applied from the log: installing would lose the effects of entries committed but not
        // yet applied (scenario S01) or rewind what readers saw (S13).
        let below_commit_bug = self.mutated(crate::Mutation::InstallBelowCommit);
        let floor = if below_commit_bug {
            self.applied
        } else {
            self.commit
        };
        if last.index <= floor {
            return Some(AppendResult::Success {
                match_index: self.commit,
            });
        }
        // A leader of this term cannot hold an entry of a later term, and a term history must
        // rise in both term and index up to the snapshot's last entry: such a snapshot comes from
        // another cluster incarnation or is corrupt. Drop it without an answer (scenario S10).
        // Nor does any honest log reach the index limit.
        let history_ok = crate::validate::term_history_fits(&meta);
        if meta.last.term > self.term || !history_ok || meta.last.index >= crate::types::INDEX_LIMIT
        {
            return None;
        }

        if self.log.matches(last) && !below_commit_bug {
            // Our log already holds the snapshot's last entry: keep the suffix after it, which
            // the leader may already count (scenario S03); only the commit index moves.
            self.commit = self.commit.max(last.index);
            self.leader_match = self.leader_match.max(last.index);
            return Some(AppendResult::Success {
                match_index: last.index,
            });
        }
        // Our log diverges from the snapshot: discard it whole, configuration included (S32).
        let kept = if self.mutated(crate::Mutation::KeepConflictingSuffix) {
            self.log.slice(
                last.index + 1,
                self.log.last_index(),
                usize::MAX,
                usize::MAX,
            )
        } else {
            Vec::new()
        };
        self.log
            .reset_to(last, meta.membership.clone(), meta.term_history.clone());
        for e in kept {
            self.log.append(e);
        }
        self.durability.installed(meta.clone());
        // Above the commit index (the mutation aside, which is how NuRaft lost entries).
        self.commit = last.index;
        self.leader_match = last.index;
        // Entries at or below the snapshot that were not handed out yet never will be: the
        // restore replaces them (those already handed out are applied before the restore).
        self.apply_requested = last.index;
        self.snapshot = meta.clone();
        self.pending_install = Some(meta);
        Some(AppendResult::Success {
            match_index: last.index,
        })
    }
}
