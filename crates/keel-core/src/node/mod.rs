//! `RaftNode`: one Raft participant as a pure state machine.
//!
//! Inputs are method calls (`tick`, `step`, `propose`, `read_index`, completions such as
//! `persisted` and `applied`); outputs accumulate and are drained with [`RaftNode::ready`]. The
//! node never blocks, sleeps, reads a clock or draws randomness it was not seeded with.
//!
//! The handlers live beside this file, one per concern: `election.rs`, `replication.rs`,
//! `read_index.rs`, `membership_change.rs`.

mod election;
mod membership_change;
mod read_index;
mod replication;
mod snapshot;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use crate::config::Config;
use crate::durability::{Durability, Write};
use crate::log::RaftLog;
use crate::membership::Membership;
use crate::message::{Message, MessageBody};
use crate::progress::Progress;
use crate::rng::SplitMix64;
use crate::types::{Entry, EntryPayload, HardState, Index, LogId, NodeId, SnapshotMeta, Term};
use crate::Error;

pub use read_index::{ReadError, ReadState};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

/// What a node recovered from storage (or, for a brand-new cluster, its bootstrap state).
#[derive(Clone, Debug, Default)]
pub struct RecoveredState {
    pub hard_state: HardState,
    /// The position the snapshot covers (0/0 without one).
    pub snapshot: LogId,
    /// The configuration at `snapshot`. For a new cluster: the initial members. For a node that
    /// is to be added to an existing cluster: empty (it learns the configuration from the leader).
    pub snapshot_membership: Membership,
    /// First index of every term up to the snapshot.
    pub snapshot_term_history: Vec<LogId>,
    /// The durable entries after the snapshot.
    pub entries: Vec<Entry>,
    /// What the application's state machine already reflects (at least the snapshot index).
    pub applied: Index,
}

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

/// A snapshot of a node's volatile and persistent state, for status displays and checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub id: NodeId,
    pub role: Role,
    pub term: Term,
    pub vote: Option<NodeId>,
    pub leader: Option<NodeId>,
    pub commit: Index,
    pub applied: Index,
    pub last_log_id: LogId,
    pub durable_index: Index,
    pub durable_hard_state: HardState,
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
    pub id: NodeId,
    /// Highest index known to be durably replicated there.
    pub match_index: Index,
    pub next_index: Index,
    /// Appends in flight (pipelining).
    pub inflight_messages: usize,
    /// Whether the leader knows where the follower's log matches (false while probing).
    pub replicating: bool,
    /// Whether the follower answered within the last election timeout: it is up and reachable.
    pub recently_active: bool,
}

/// Why a proposal was refused. Nothing was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader (leader hint: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    #[error("leadership transfer in progress")]
    TransferInProgress,
    #[error("too many uncommitted entries")]
    Backpressure,
    #[error("a membership change is already in progress")]
    MembershipChangeInProgress,
    #[error("the membership change would not change anything")]
    NoChange,
    /// `AddLearner` of a voter: a learner is added, never made of a voter (removing the voter
    /// first is the explicit way, and the one that says what it costs the quorum).
    #[error("node {0} is already a voter")]
    AlreadyVoter(NodeId),
    #[error("the target is not a voter of the current configuration")]
    InvalidTarget,
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

struct Transfer {
    target: NodeId,
    elapsed_ticks: u32,
    timeout_now_sent: bool,
}

struct LeaderState {
    /// Progress of every other member, sorted by id.
    progress: Vec<(NodeId, Progress)>,
    transfer: Option<Transfer>,
    reads: read_index::ReadQueue,
    /// New entries appended since the last `ready`: replicate them there, batched.
    replicate_pending: bool,
}

impl LeaderState {
    fn progress(&mut self, id: NodeId) -> Option<&mut Progress> {
        self.progress
            .iter_mut()
            .find(|(p, _)| *p == id)
            .map(|(_, pr)| pr)
    }
}

pub struct RaftNode {
    config: Config,
    id: NodeId,
    rng: SplitMix64,

    term: Term,
    vote: Option<NodeId>,
    log: RaftLog,
    commit: Index,

    role: Role,
    leader: Option<NodeId>,
    /// The end of the prefix this node has proven, by an accepted Append in the current term,
    /// to match the current leader's log. Volatile: a restart or a new term forgets it.
    leader_match: Index,
    /// Reported by the application.
    applied: Index,
    /// Handed to the application in a `Ready` (>= applied).
    apply_requested: Index,
    /// The commit index recovered at start: until the application has applied it, the node
    /// replays and neither campaigns nor should serve clients (docs/DESIGN.md section 1.3).
    replay_to: Index,
    /// Set by the runtime while this node must not start elections (its clock is too far from
    /// the leader's: keel-engine's `clock` module). It still votes.
    campaigns_held: bool,
    /// Set while this node's disk has lost or damaged entries it had acknowledged, up to this
    /// one (keel-wal's promise record): it starts no election and votes only for a candidate
    /// whose log reaches it, until its own durable log does ([`RaftNode::start_recovering`]).
    recovering_to: Option<LogId>,
    durability: Durability,

    election_elapsed_ticks: u32,
    heartbeat_elapsed_ticks: u32,
    randomized_election_timeout_ticks: u32,
    /// Commit index changes are written lazily, on the next heartbeat tick.
    commit_flush_due: bool,
    /// Votes received in the current (pre-)election.
    votes: Vec<(NodeId, bool)>,
    leader_state: Option<Box<LeaderState>>,

    messages: Vec<Message>,
    /// Messages that may leave only once write `.0` is durable.
    held: VecDeque<(u64, Message)>,
    read_states: Vec<ReadState>,
    failed_reads: Vec<u64>,

    /// The newest snapshot durable on this node (taken locally or installed).
    snapshot: SnapshotMeta,
    /// A snapshot installed in the log that the application must restore.
    pending_install: Option<SnapshotMeta>,
    /// Snapshots the transport must stream to followers.
    snapshot_sends: Vec<(NodeId, SnapshotMeta)>,
}

impl std::fmt::Debug for RaftNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl RaftNode {
    pub fn new(config: Config, recovered: RecoveredState) -> Result<Self, Error> {
        config.validate()?;
        let RecoveredState {
            hard_state,
            snapshot,
            snapshot_membership,
            snapshot_term_history,
            entries,
            applied,
        } = recovered;
        let snapshot_meta = SnapshotMeta {
            last: snapshot,
            membership: Arc::new(snapshot_membership),
            term_history: snapshot_term_history,
        };
        let mut log = RaftLog::new(
            snapshot,
            snapshot_meta.membership.clone(),
            snapshot_meta.term_history.clone(),
        );
        // Storage may keep entries the snapshot covers (trailing entries for slow followers).
        // Unless the log holds the snapshot's last entry or starts right after it, the log does
        // not continue the snapshot: an install was interrupted before the old log was dropped,
        // or the log ended before a snapshot that was received whole. Either way the log
        // restarts after the snapshot, and storage is told so by the first write.
        let holds_snapshot_entry = entries
            .iter()
            .any(|e| e.index == snapshot.index && e.term == snapshot.term);
        let starts_after_snapshot = entries
            .first()
            .is_some_and(|e| e.index == snapshot.index + 1);
        let interrupted_install =
            snapshot.index > 0 && !holds_snapshot_entry && !starts_after_snapshot;
        for entry in entries {
            if entry.index <= snapshot.index {
                continue;
            }
            if interrupted_install {
                break;
            }
            if entry.index != log.last_index() + 1 || entry.term < log.last_log_id().term {
                return Err(Error::Corrupt(format!(
                    "recovered log is not contiguous at index {} (after {})",
                    entry.index,
                    log.last_log_id()
                )));
            }
            log.append(entry);
        }
        if applied < snapshot.index {
            return Err(Error::Corrupt(format!(
                "applied index {applied} is below the snapshot index {}",
                snapshot.index
            )));
        }
        // A crash can tear a batch after its entries but before its hard state, leaving entries
        // of a term the stored hard state has not reached. The node had adopted that term (it
        // accepted the entries) but no vote in it was ever released (votes leave only once
        // durable), so it resumes in that term without a vote.
        let mut hard_state = hard_state;
        if hard_state.term < log.last_log_id().term {
            hard_state.term = log.last_log_id().term;
            hard_state.vote = None;
        }
        // An applied entry is committed by definition; a persisted commit can never exceed the
        // durable log (scenario S16, S17).
        let commit = hard_state
            .commit
            .max(applied)
            .max(snapshot.index)
            .min(log.last_index().max(applied));
        if applied > log.last_index() {
            return Err(Error::Corrupt(format!(
                "applied index {applied} is beyond the last log index {}",
                log.last_index()
            )));
        }
        let durable_hs = HardState {
            commit,
            ..hard_state
        };
        let mut rng = SplitMix64::new(config.seed);
        let timeout = rng.range(
            config.election_timeout_ticks,
            2 * config.election_timeout_ticks,
        );
        let mut durability = Durability::new(log.last_index(), durable_hs);
        if interrupted_install {
            durability.installed(snapshot_meta.clone());
        }
        let node = RaftNode {
            snapshot: snapshot_meta,
            pending_install: None,
            snapshot_sends: Vec::new(),
            id: config.id,
            rng,
            term: hard_state.term,
            vote: hard_state.vote,
            durability,
            log,
            commit,
            role: Role::Follower,
            leader: None,
            leader_match: 0,
            applied,
            apply_requested: applied,
            replay_to: commit,
            campaigns_held: false,
            recovering_to: None,
            election_elapsed_ticks: 0,
            heartbeat_elapsed_ticks: 0,
            randomized_election_timeout_ticks: timeout,
            commit_flush_due: false,
            votes: Vec::new(),
            leader_state: None,
            messages: Vec::new(),
            held: VecDeque::new(),
            read_states: Vec::new(),
            failed_reads: Vec::new(),
            config,
        };
        node.check_invariants();
        Ok(node)
    }

    // ----- inputs -----

    /// Advances logical time by one tick.
    pub fn tick(&mut self) {
        self.heartbeat_elapsed_ticks += 1;
        if self.heartbeat_elapsed_ticks >= self.config.heartbeat_interval_ticks {
            self.heartbeat_elapsed_ticks = 0;
            self.commit_flush_due = true;
            if self.role == Role::Leader {
                self.on_heartbeat_tick();
            }
        }
        if self.role == Role::Leader {
            self.tick_leader();
        } else {
            self.tick_election();
        }
        self.check_invariants();
    }

    /// Handles a message from a peer. Messages for another node or in unexpected states are
    /// ignored, as the network may deliver anything. A runtime should first drop what
    /// [`RaftNode::validate`] refuses (and say so); the handlers also ignore, rather than trip
    /// over, every message that check refuses and that could harm this node.
    pub fn step(&mut self, msg: Message) {
        // Adopting a term at the limit could leave this node no term to campaign in.
        if msg.to != self.id || msg.from == self.id || msg.term >= crate::types::TERM_LIMIT {
            return;
        }
        if self.step_term(&msg) {
            match msg.body {
                MessageBody::PreVote { .. } | MessageBody::RequestVote { .. } => {
                    self.on_vote_request(msg)
                }
                MessageBody::PreVoteResponse { granted }
                | MessageBody::VoteResponse { granted } => {
                    self.on_vote_response(msg.from, msg.term, &msg.body, granted)
                }
                MessageBody::Append { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::InstallSnapshot { .. } => self.on_append_or_heartbeat(msg),
                MessageBody::AppendResponse(result) => self.on_append_response(msg.from, result),
                MessageBody::HeartbeatResponse {
                    read_round,
                    lagging,
                    ..
                } => self.on_heartbeat_response(msg.from, read_round, lagging),
                MessageBody::TimeoutNow => self.on_timeout_now(),
            }
        }
        self.check_invariants();
    }

    /// Appends `data` if this node is the leader. The returned position resolves through
    /// [`RaftNode::commit_status`] or by watching applied entries.
    pub fn propose(&mut self, data: Bytes) -> Result<LogId, ProposeError> {
        self.check_can_propose()?;
        let id = self.append_entry(EntryPayload::Normal(data));
        Ok(id)
    }

    /// Storage completed every write up to `write_id`.
    pub fn persisted(&mut self, write_id: u64) {
        if self.durability.completed(write_id) && self.role == Role::Leader {
            self.maybe_commit();
        }
        self.check_recovered();
        if self.role == Role::Candidate {
            self.tally_votes();
        }
        self.check_invariants();
    }

    /// The application applied every entry up to `index`.
    pub fn applied(&mut self, index: Index) {
        assert!(
            index <= self.apply_requested,
            "applied an entry never handed out"
        );
        assert!(index >= self.applied, "applied index went backwards");
        self.applied = index;
    }

    /// Starts an election at once (used to bootstrap a cluster quickly; normally timeouts do it).
    pub fn campaign(&mut self) {
        if self.role != Role::Leader && self.may_start_election() {
            self.start_election(false);
        }
    }

    /// Holds (or releases) this node's campaigns: while held it starts no election, not even
    /// for a leadership transfer, and still votes and replicates as a follower. A leader keeps
    /// leading. The runtime holds campaigns while the node's clock is too far from the leader's.
    pub fn hold_campaigns(&mut self, held: bool) {
        self.campaigns_held = held;
    }

    pub fn campaigns_held(&self) -> bool {
        self.campaigns_held
    }

    /// This node's storage lost or damaged entries it had acknowledged, up to `promised` (it
    /// restarted from the intact prefix, keel-wal's promise record naming what it had promised):
    /// until its durable log reaches `promised.index`, fetched from the leader like any lagging
    /// follower's, it starts no election (not even for a leadership transfer) and grants a vote
    /// only to a candidate whose log is at least as up to date as `promised`, so that no leader
    /// can be elected with its help that lacks what it acknowledged. Its acknowledgements count as
    /// usual: they name only entries it holds. Ends by itself ([`RaftNode::recovering`]).
    pub fn start_recovering(&mut self, promised: LogId) {
        self.recovering_to = Some(promised);
        self.check_recovered();
    }

    /// What this node is recovering to, while it is ([`RaftNode::start_recovering`]).
    pub fn recovering(&self) -> Option<LogId> {
        self.recovering_to
    }

    fn check_recovered(&mut self) {
        if let Some(promised) = self.recovering_to {
            // Durable and at least as up to date as the promise: a stale entry of an older term
            // at the promised index does not count. A snapshot installed counts once durable
            // (durability moves to its index then).
            let durable = self.durability.durable_index();
            let durable_last = LogId::new(self.log.term_of_any(durable).unwrap_or(0), durable);
            if durable_last >= promised {
                self.recovering_to = None;
            }
        }
    }

    // ----- outputs -----

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
    fn is_write_due(&self, include_commit: bool) -> bool {
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
                self.config.max_apply_entries,
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

    // ----- queries -----

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Whether the node is still applying what it had committed before it restarted. Until that
    /// is done it does not campaign, and a runtime should not serve clients from it.
    pub fn is_replaying(&self) -> bool {
        self.applied < self.replay_to
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn term(&self) -> Term {
        self.term
    }

    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    pub fn commit_index(&self) -> Index {
        self.commit
    }

    /// The highest index the application reported applied ([`RaftNode::applied`]); the same as
    /// `status().applied`, without building a [`Status`] (which clones the membership).
    pub fn applied_index(&self) -> Index {
        self.applied
    }

    pub fn log(&self) -> &RaftLog {
        &self.log
    }

    pub fn membership(&self) -> &Membership {
        self.log.membership()
    }

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
            recovering_to: self.recovering_to,
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

    // ----- shared helpers for the handlers -----

    fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.commit,
        }
    }

    fn is_voter(&self) -> bool {
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
    fn may_campaign(&self) -> bool {
        self.is_voter() || self.log.membership_at(self.commit).is_voter(self.id)
    }

    /// A voter that has replayed its log and whose campaigns are not held.
    pub(super) fn may_start_election(&self) -> bool {
        self.may_campaign()
            && !self.is_replaying()
            && !self.campaigns_held
            && self.recovering_to.is_none()
    }

    fn committed_and_durable(&self) -> Index {
        self.commit.min(self.durability.durable_index())
    }

    /// How far entries may be handed to the application now: committed, locally durable, and
    /// within `max_unapplied_entries` of what it reported applied.
    fn apply_limit(&self) -> Index {
        self.committed_and_durable().min(
            self.applied
                .saturating_add(self.config.max_unapplied_entries),
        )
    }

    fn mutated(&self, _m: crate::Mutation) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.config.mutation == Some(_m)
        }
        #[cfg(not(feature = "mutations"))]
        {
            false
        }
    }

    fn message(&self, to: NodeId, body: MessageBody) -> Message {
        Message {
            from: self.id,
            to,
            term: self.term,
            body,
        }
    }

    /// Queues a message that needs nothing durable beyond what already is (leader traffic: its
    /// term was durable before it could win).
    fn send(&mut self, to: NodeId, body: MessageBody) {
        let msg = self.message(to, body);
        self.messages.push(msg);
    }

    /// Queues a message that may leave only once everything decided so far is durable: votes,
    /// acknowledgements, and anything carrying a term this node just adopted.
    fn send_after_persist(&mut self, msg: Message) {
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
    fn send_after_term_persisted(&mut self, msg: Message) {
        let durable = self.durability.durable_hard_state();
        if durable.term == self.term && durable.vote == self.vote {
            self.messages.push(msg);
        } else {
            self.send_after_persist(msg);
        }
    }

    fn reset_election_timer(&mut self) {
        self.election_elapsed_ticks = 0;
        let et = self.config.election_timeout_ticks;
        self.randomized_election_timeout_ticks = self.rng.range(et, 2 * et);
    }

    fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
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

    /// Appends one entry as leader and returns its position.
    fn append_entry(&mut self, payload: EntryPayload) -> LogId {
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

    fn check_can_propose(&self) -> Result<(), ProposeError> {
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
        if uncommitted >= self.config.max_uncommitted_entries as u64 {
            return Err(ProposeError::Backpressure);
        }
        Ok(())
    }

    /// Assertions of the node's own invariants after every input. Cheap ones always run where a
    /// violation would spread to disk or peers; the rest in debug builds.
    fn check_invariants(&self) {
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

#[cfg(test)]
mod tests;
