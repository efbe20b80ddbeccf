//! The runtime's metrics, through the `metrics` facade: every name, its description and the
//! recording helpers the node task and the storage thread call (one line at each point).
//!
//! Nothing is exported from here: the application installs a recorder (the `keel` binary a
//! Prometheus exporter) before it starts nodes. Without one every call is a no-op. Handles are
//! registered when a node starts, so a recorder installed later sees nothing of that node.
//!
//! Every metric carries a `node` label (the node id): `keel up` runs three nodes in one process
//! with one global recorder. Units are the last part of each name.
//!
//! [`describe()`] registers every name, unit and description; [`HISTOGRAMS`] lists the bucket
//! bounds an exporter should give each histogram ([`LATENCY_BUCKETS_SECONDS`],
//! [`BATCH_BUCKETS`]). Leader changes and snapshots are also logged from here.

use std::collections::VecDeque;
use std::time::Instant;

use keel_core::{Index, LogId, NodeId, RaftNode, Role, Term, Write};
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Unit,
};

/// Proposals this node (as leader) appended to its log.
pub const PROPOSALS: &str = "keel_proposals_total";
/// From a proposal appended on the leader to its entry committed there and handed to the apply
/// thread (the result follows once the state machine applied it).
pub const COMMIT_LATENCY: &str = "keel_commit_latency_seconds";
/// One group commit that syncs: the batch's single write and its fdatasync.
pub const FSYNC_LATENCY: &str = "keel_fsync_latency_seconds";
/// Writes (from `ready()`) per group commit.
pub const STORAGE_BATCH_WRITES: &str = "keel_storage_batch_writes";
/// Log entries per group commit.
pub const STORAGE_BATCH_ENTRIES: &str = "keel_storage_batch_entries";
/// Leaders this node saw elected (a new leader, or the same one in a new term).
pub const LEADER_CHANGES: &str = "keel_leader_changes_total";
/// Snapshots this node took of its own state.
pub const SNAPSHOTS_TAKEN: &str = "keel_snapshots_taken_total";
/// The bytes of the snapshot files this node took.
pub const SNAPSHOTS_TAKEN_BYTES: &str = "keel_snapshots_taken_bytes_total";
/// Snapshots this node (as leader) sent to followers that lagged behind its log.
pub const SNAPSHOTS_SENT: &str = "keel_snapshots_sent_total";
/// The bytes of the snapshots sent to followers.
pub const SNAPSHOTS_SENT_BYTES: &str = "keel_snapshots_sent_bytes_total";
/// Snapshots received from a leader and installed here.
pub const SNAPSHOTS_INSTALLED: &str = "keel_snapshots_installed_total";
/// The bytes of the snapshots installed here.
pub const SNAPSHOTS_INSTALLED_BYTES: &str = "keel_snapshots_installed_bytes_total";
/// This node's current term (a gauge).
pub const TERM: &str = "keel_term";
/// The highest log index this node knows to be committed (a gauge).
pub const COMMIT_INDEX: &str = "keel_commit_index";
/// The highest log index applied to this node's state machine (a gauge).
pub const APPLIED_INDEX: &str = "keel_applied_index";
/// Committed entries not yet applied here (commit − applied).
pub const APPLY_LAG: &str = "keel_apply_lag_entries";
/// 1 while this node is the leader.
pub const IS_LEADER: &str = "keel_is_leader";
/// Peer messages dropped before the core saw them because no honest peer sends them
/// (`keel_core::RaftNode::validate`; a `reason` label names the rule, `InvalidMessage::kind`) or
/// because they belong to another Raft group (`reason` `other_group`).
pub const PEER_MESSAGES_REFUSED: &str = "keel_peer_messages_refused_total";
/// Node messages queued for a peer (one per message and peer; `crate::node_messages`).
pub const NODE_MESSAGES_SENT: &str = "keel_node_messages_sent_total";
/// Node messages received from peers, by `outcome`: `delivered` to the application's channel, or
/// `dropped` (the channel full or not taken); and messages a send dropped at once (`outcome`
/// `send_dropped`: a peer's budget spent, the peer unknown).
pub const NODE_MESSAGES: &str = "keel_node_messages_total";

/// Bucket bounds for the latency histograms (seconds): 50 µs to 10 s.
pub const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];
/// Bucket bounds for the batch-size histograms (count).
pub const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];
/// Every histogram with the buckets an exporter should give it.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (COMMIT_LATENCY, LATENCY_BUCKETS_SECONDS),
    (FSYNC_LATENCY, LATENCY_BUCKETS_SECONDS),
    (STORAGE_BATCH_WRITES, BATCH_BUCKETS),
    (STORAGE_BATCH_ENTRIES, BATCH_BUCKETS),
];

/// Events logged from here belong to the node task.
const LOG_TARGET: &str = "keel_runtime::node";

/// Proposals timed for [`COMMIT_LATENCY`] at once; beyond that new ones go untimed.
const TIMED_PROPOSALS_MAX: usize = 65_536;

/// Describes every metric to the installed recorder (names, units, help text).
#[expect(clippy::too_many_lines)]
pub fn describe() {
    describe_counter!(
        PROPOSALS,
        Unit::Count,
        "Proposals this node appended as leader."
    );
    describe_histogram!(
        COMMIT_LATENCY,
        Unit::Seconds,
        "Proposal appended on the leader to its entry committed there."
    );
    describe_histogram!(
        FSYNC_LATENCY,
        Unit::Seconds,
        "One synced group commit: the batch's write and its fdatasync."
    );
    describe_histogram!(
        STORAGE_BATCH_WRITES,
        Unit::Count,
        "Writes per group commit."
    );
    describe_histogram!(
        STORAGE_BATCH_ENTRIES,
        Unit::Count,
        "Log entries per group commit."
    );
    describe_counter!(
        LEADER_CHANGES,
        Unit::Count,
        "Leader elections this node saw."
    );
    describe_counter!(
        SNAPSHOTS_TAKEN,
        Unit::Count,
        "Snapshots taken here and made durable."
    );
    describe_counter!(
        SNAPSHOTS_TAKEN_BYTES,
        Unit::Bytes,
        "Bytes of snapshots taken here."
    );
    describe_counter!(
        SNAPSHOTS_SENT,
        Unit::Count,
        "Snapshot transfers to followers completed."
    );
    describe_counter!(
        SNAPSHOTS_SENT_BYTES,
        Unit::Bytes,
        "Bytes of snapshots sent."
    );
    describe_counter!(
        SNAPSHOTS_INSTALLED,
        Unit::Count,
        "Snapshots from a leader installed."
    );
    describe_counter!(
        SNAPSHOTS_INSTALLED_BYTES,
        Unit::Bytes,
        "Bytes of snapshots installed."
    );
    describe_gauge!(TERM, Unit::Count, "Current term.");
    describe_gauge!(COMMIT_INDEX, Unit::Count, "Commit index.");
    describe_gauge!(APPLIED_INDEX, Unit::Count, "Applied index.");
    describe_gauge!(
        APPLY_LAG,
        Unit::Count,
        "Committed entries not yet applied here."
    );
    describe_gauge!(IS_LEADER, Unit::Count, "1 while this node is the leader.");
    describe_counter!(
        PEER_MESSAGES_REFUSED,
        Unit::Count,
        "Peer messages dropped: no honest peer sends them, or another group's (reason)."
    );
    describe_counter!(
        NODE_MESSAGES_SENT,
        Unit::Count,
        "Node messages queued for a peer (one per peer)."
    );
    describe_counter!(
        NODE_MESSAGES,
        Unit::Count,
        "Node messages received (outcome delivered or dropped) or dropped when sent."
    );
}

/// A node message send: queued for `queued` peers, dropped for `dropped`.
pub(crate) fn node_messages_sent(node: NodeId, queued: u64, dropped: u64) {
    counter!(NODE_MESSAGES_SENT, "node" => node.to_string()).increment(queued);
    if dropped > 0 {
        let outcome = "send_dropped";
        counter!(NODE_MESSAGES, "node" => node.to_string(), "outcome" => outcome)
            .increment(dropped);
    }
}

/// A node message received: handed to the application (`taken`) or dropped.
pub(crate) fn node_message_received(node: NodeId, taken: bool) {
    let outcome = if taken { "delivered" } else { "dropped" };
    counter!(NODE_MESSAGES, "node" => node.to_string(), "outcome" => outcome).increment(1);
}

/// A peer message refused by the validator, under the rule `reason` (a fixed set of names).
pub(crate) fn peer_message_refused(node: NodeId, reason: &'static str) {
    counter!(PEER_MESSAGES_REFUSED, "node" => node.to_string(), "reason" => reason).increment(1);
}

fn node_label(node: NodeId) -> [(&'static str, String); 1] {
    [("node", node.to_string())]
}

/// What the node task records: state gauges, leader changes, proposals, snapshots.
pub(crate) struct NodeMetrics {
    node: NodeId,
    proposals: Counter,
    commit_latency: Histogram,
    leader_changes: Counter,
    snapshots_taken: Counter,
    snapshots_taken_bytes: Counter,
    snapshots_sent: Counter,
    snapshots_sent_bytes: Counter,
    snapshots_installed: Counter,
    snapshots_installed_bytes: Counter,
    term: Gauge,
    commit: Gauge,
    applied: Gauge,
    apply_lag: Gauge,
    is_leader: Gauge,
    /// Last values seen, so the loop only touches what changed.
    last_term: Term,
    last_commit: Index,
    last_applied: Index,
    /// The leader last seen, with its term (`None` before the first).
    last_leader: Option<(NodeId, Term)>,
    leading: bool,
    /// The role and term last logged (at debug level: every step of every election).
    last_role: Option<(Role, Term)>,
    /// Appended proposals not committed yet, in index order (one term at a time).
    timed: VecDeque<(Index, Instant)>,
}

impl NodeMetrics {
    pub(crate) fn new(node: NodeId) -> Self {
        describe();
        let l = node_label(node);
        NodeMetrics {
            node,
            proposals: counter!(PROPOSALS, &l),
            commit_latency: histogram!(COMMIT_LATENCY, &l),
            leader_changes: counter!(LEADER_CHANGES, &l),
            snapshots_taken: counter!(SNAPSHOTS_TAKEN, &l),
            snapshots_taken_bytes: counter!(SNAPSHOTS_TAKEN_BYTES, &l),
            snapshots_sent: counter!(SNAPSHOTS_SENT, &l),
            snapshots_sent_bytes: counter!(SNAPSHOTS_SENT_BYTES, &l),
            snapshots_installed: counter!(SNAPSHOTS_INSTALLED, &l),
            snapshots_installed_bytes: counter!(SNAPSHOTS_INSTALLED_BYTES, &l),
            term: gauge!(TERM, &l),
            commit: gauge!(COMMIT_INDEX, &l),
            applied: gauge!(APPLIED_INDEX, &l),
            apply_lag: gauge!(APPLY_LAG, &l),
            is_leader: gauge!(IS_LEADER, &l),
            last_term: 0,
            last_commit: 0,
            last_applied: 0,
            last_leader: None,
            leading: false,
            last_role: None,
            timed: VecDeque::new(),
        }
    }

    /// After every round of the node loop: gauges, leader changes (logged), commit latency.
    pub(crate) fn observe(&mut self, raft: &RaftNode) {
        let (term, commit) = (raft.term(), raft.commit_index());
        if term != self.last_term {
            self.last_term = term;
            self.term.set(term as f64);
            // Proposals of an older term commit or not under a new leader: not timed.
            self.timed.clear();
        }
        let node = self.node;
        let role = raft.role();
        if self.last_role != Some((role, term)) {
            self.last_role = Some((role, term));
            tracing::debug!(
                target: LOG_TARGET,
                node,
                term,
                ?role,
                leader = ?raft.leader(),
                last_log = %raft.log().last_log_id(),
                commit = raft.commit_index(),
                campaigns_held = raft.campaigns_held(),
                "role or term changed"
            );
        }
        if let Some(leader) = raft.leader() {
            if self.last_leader != Some((leader, term)) {
                self.last_leader = Some((leader, term));
                self.leader_changes.increment(1);
                if leader == node {
                    tracing::info!(target: LOG_TARGET, node, term, "this node is now the leader");
                } else {
                    tracing::info!(target: LOG_TARGET, node, term, leader, "leader elected");
                }
            }
        }
        let leading = raft.role() == Role::Leader;
        if leading != self.leading {
            self.leading = leading;
            self.is_leader.set(if leading { 1.0 } else { 0.0 });
            if !leading {
                tracing::info!(target: LOG_TARGET, node, term, "no longer the leader");
            }
        }
        if commit != self.last_commit {
            self.last_commit = commit;
            self.commit.set(commit as f64);
            self.apply_lag
                .set(commit.saturating_sub(self.last_applied) as f64);
            while let Some(&(index, at)) = self.timed.front() {
                if index > commit {
                    break;
                }
                self.timed.pop_front();
                self.commit_latency.record(at.elapsed().as_secs_f64());
            }
        }
    }

    /// A client proposal was appended at `index`.
    pub(crate) fn proposed(&mut self, index: Index) {
        self.proposals.increment(1);
        if self.timed.len() < TIMED_PROPOSALS_MAX
            && self.timed.back().is_none_or(|&(last, _)| last < index)
        {
            self.timed.push_back((index, Instant::now()));
        }
    }

    /// The apply thread reported `index` applied.
    pub(crate) fn applied(&mut self, index: Index) {
        self.last_applied = index;
        self.applied.set(index as f64);
        self.apply_lag
            .set(self.last_commit.saturating_sub(index) as f64);
    }

    /// A snapshot was made durable here: taken locally (`from` = `None`) or received from the
    /// leader (counted as installed once the core installs it: [`Self::installed`]).
    pub(crate) fn snapshot_saved(
        &self,
        last: LogId,
        size_bytes: u64,
        from: Option<(NodeId, Term)>,
    ) {
        let node = self.node;
        match from {
            None => {
                self.snapshots_taken.increment(1);
                self.snapshots_taken_bytes.increment(size_bytes);
                tracing::info!(target: LOG_TARGET, node, %last, size_bytes, "snapshot taken");
            }
            Some((leader, _)) => {
                tracing::info!(
                    target: LOG_TARGET,
                    node,
                    %last,
                    size_bytes,
                    leader,
                    "snapshot received"
                );
            }
        }
    }

    /// The application is restoring a snapshot installed from the leader.
    pub(crate) fn installed(&self, last: LogId, size_bytes: u64) {
        self.snapshots_installed.increment(1);
        self.snapshots_installed_bytes.increment(size_bytes);
        let node = self.node;
        tracing::info!(target: LOG_TARGET, node, %last, size_bytes, "snapshot installed");
    }

    /// For a snapshot transfer about to start: call [`SnapshotSent::done`] when it succeeded.
    pub(crate) fn snapshot_send(&self, to: NodeId, size_bytes: u64) -> SnapshotSent {
        SnapshotSent {
            node: self.node,
            to,
            size_bytes,
            count: self.snapshots_sent.clone(),
            bytes: self.snapshots_sent_bytes.clone(),
        }
    }
}

/// One snapshot transfer's metrics, carried into the task that runs it.
pub(crate) struct SnapshotSent {
    node: NodeId,
    to: NodeId,
    size_bytes: u64,
    count: Counter,
    bytes: Counter,
}

impl SnapshotSent {
    pub(crate) fn done(self) {
        self.count.increment(1);
        self.bytes.increment(self.size_bytes);
        tracing::info!(
            target: LOG_TARGET,
            node = self.node,
            to = self.to,
            size_bytes = self.size_bytes,
            "snapshot sent"
        );
    }
}

/// What the storage thread records.
pub(crate) struct StorageMetrics {
    fsync_latency: Histogram,
    batch_writes: Histogram,
    batch_entries: Histogram,
}

impl StorageMetrics {
    pub(crate) fn new(node: NodeId) -> Self {
        let l = node_label(node);
        StorageMetrics {
            fsync_latency: histogram!(FSYNC_LATENCY, &l),
            batch_writes: histogram!(STORAGE_BATCH_WRITES, &l),
            batch_entries: histogram!(STORAGE_BATCH_ENTRIES, &l),
        }
    }

    /// Records the batch's sizes; returns the timer to stop once it is durable.
    pub(crate) fn group_commit(&self, writes: &[Write]) -> GroupCommitTimer<'_> {
        self.batch_writes.record(writes.len() as f64);
        let entries: usize = writes.iter().map(|w| w.entries.len()).sum();
        self.batch_entries.record(entries as f64);
        GroupCommitTimer {
            metrics: self,
            started: Instant::now(),
            synced: writes.iter().any(|w| w.sync),
        }
    }
}

pub(crate) struct GroupCommitTimer<'a> {
    metrics: &'a StorageMetrics,
    started: Instant,
    synced: bool,
}

impl GroupCommitTimer<'_> {
    pub(crate) fn done(self) {
        // A commit-only batch is written without an fsync: not an fsync latency.
        if self.synced {
            self.metrics
                .fsync_latency
                .record(self.started.elapsed().as_secs_f64());
        }
    }
}
