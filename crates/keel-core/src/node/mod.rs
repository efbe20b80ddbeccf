//! `RaftNode`: one Raft participant as a pure state machine.
//!
//! Inputs are method calls (`tick`, `step`, `propose`, `read_index`, completions such as
//! `persisted` and `applied`); outputs accumulate and are drained with [`RaftNode::ready`]. The
//! node never blocks, sleeps, reads a clock or draws randomness it was not seeded with.
//!
//! The handlers live beside this file, one per concern: `election.rs`, `replication.rs`,
//! `read_index.rs`, `membership_change.rs`, `snapshot.rs`, with what they share in `helpers.rs`;
//! the outputs are drained in `ready.rs`, and `status.rs` answers what the node reports. This
//! file holds the state and the inputs.
//!
//! ```text
//! inputs                              outputs (Ready)
//!   tick()                              messages      send these
//!   step(Message)                       write         persist, then call persisted(write.id)
//!   propose(Bytes) -> LogId             committed     apply in order, then call applied(index)
//!   propose_membership(change)          read_states   serve once applied >= index
//!   read_index(ctx)                     failed_reads  retry elsewhere
//!   transfer_leadership(to)
//!   persisted(write_id), applied(index) queries: status(), commit_status(LogId), log()
//! ```
//!
//! A peer's message should pass [`RaftNode::validate`] (`validate.rs`) before it is stepped.

mod election;
mod former;
mod helpers;
mod membership_change;
mod read_index;
mod ready;
mod repair;
mod replication;
mod snapshot;
mod status;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use crate::config::Config;
use crate::durability::Durability;
use crate::log::RaftLog;
use crate::membership::Membership;
use crate::message::{Message, MessageBody};
use crate::progress::Progress;
use crate::rng::SplitMix64;
use crate::types::{Entry, EntryPayload, HardState, Index, LogId, NodeId, SnapshotMeta, Term};
use crate::Error;

pub use read_index::{ReadError, ReadState};
pub use ready::Ready;
pub use status::{CommitStatus, FollowerProgress, Status};

/// A node's part in its current term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Follows the leader it knows, if any; every node starts as one.
    Follower,
    /// Asks the voters whether it could win an election in the next term (pre-vote), without
    /// having raised its own term yet.
    PreCandidate,
    /// Campaigns in its current term, having voted for itself.
    Candidate,
    /// Leads its current term.
    Leader,
}

/// What a node recovered from storage (or, for a brand-new cluster, its bootstrap state).
#[derive(Clone, Debug, Default)]
pub struct RecoveredState {
    /// The durable term, vote and commit index. The commit index is clamped into the log on
    /// start; a term below the log's last entry's is raised to it, without a vote.
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

/// Why a proposal was refused. Nothing was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Only the leader appends.
    #[error("not the leader (leader hint: {leader:?})")]
    NotLeader {
        /// The leader this node knows of in its term, if any: where to retry.
        leader: Option<NodeId>,
    },
    /// The leader is handing leadership over ([`RaftNode::transfer_leadership`]): for at most an
    /// election timeout, it accepts no proposal.
    #[error("leadership transfer in progress")]
    TransferInProgress,
    /// At least `uncommitted_entries_max` entries of the leader's log are not committed yet.
    #[error("too many uncommitted entries")]
    Backpressure,
    /// The configuration is joint, or its latest configuration entry is not committed yet: one
    /// change at a time.
    #[error("a membership change is already in progress")]
    MembershipChangeInProgress,
    /// The change leads to the configuration already in effect.
    #[error("the membership change would not change anything")]
    NoChange,
    /// `AddLearner` of a voter: a learner is added, never made of a voter (removing the voter
    /// first is the explicit way, and the one that says what it costs the quorum).
    #[error("node {0} is already a voter")]
    AlreadyVoter(NodeId),
    /// A leadership transfer to this node itself or to a node that is not a voter, or a
    /// membership change that would leave no voter.
    #[error("the target is not a voter of the current configuration")]
    InvalidTarget,
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

/// One Raft participant, as a state machine without I/O: inputs are method calls, outputs are
/// drained with [`RaftNode::ready`], and storage and the application report their progress back
/// as completions ([`RaftNode::persisted`], [`RaftNode::applied`]).
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
    /// Entries after this index are kept whatever the snapshots: the application's own durable
    /// state reflects the log up to here only ([`RaftNode::keep_log_after`]). `None`: no floor.
    compaction_floor: Option<Index>,
    /// Set while this node's disk has lost or damaged entries it had acknowledged (keel-wal's
    /// promise record): it starts no election and votes only for a candidate whose log reaches
    /// them, until its own durable log does ([`RaftNode::start_recovering`], `repair.rs`).
    recovery: Option<repair::Recovery>,
    /// A promise let go of while recovering, until the runtime takes it (to say so).
    released_promise: Option<LogId>,
    /// The promise it lowered while recovering, and to what (`repair.rs`), until taken.
    lowered_promise: Option<(LogId, LogId)>,
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
    /// A node that starts from `recovered` as a follower, with no leader known. Fails on a
    /// configuration [`Config::validate`] refuses ([`Error::InvalidConfig`]) or a recovered state
    /// that contradicts itself ([`Error::Corrupt`]). Recovered entries the snapshot covers are
    /// skipped, and a log that does not continue the snapshot (an install interrupted by a
    /// crash) is dropped, storage told so by the first write. Until the application has applied
    /// up to the recovered commit index, the node replays ([`RaftNode::is_replaying`]).
    #[expect(clippy::too_many_lines)]
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
        // durable), so it resumes in that term without a vote. That term is not durable as a
        // hard state, though (storage still holds the older one): the next write must carry it
        // and be synced, as any term change is (simulator seed 21041481: an interrupted install
        // of a snapshot of a later term; storage refused the unsynced write that first named it).
        let stored_hard_state = hard_state;
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
            ..stored_hard_state
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
            compaction_floor: None,
            recovery: None,
            released_promise: None,
            lowered_promise: None,
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
                MessageBody::RepairRequest {
                    promised,
                    last,
                    terms,
                    holds_last,
                } => self.on_repair_request(msg.from, promised, last, terms, holds_last),
                MessageBody::RepairResponse(answer) => {
                    self.on_repair_response(msg.from, msg.term, answer)
                }
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

    /// Whether campaigns are held ([`RaftNode::hold_campaigns`]).
    pub fn campaigns_held(&self) -> bool {
        self.campaigns_held
    }

    /// This node's storage lost or damaged entries it had acknowledged, up to `promised` (it
    /// restarted from the intact prefix, keel-wal's promise record naming what it had promised):
    /// until its durable log reaches `promised.index`, fetched from the leader like any lagging
    /// follower's, it starts no election (not even for a leadership transfer) and grants a vote
    /// only to a candidate whose log is at least as up to date as `promised`, so that no leader
    /// can be elected with its help that lacks what it acknowledged. Its acknowledgements count as
    /// usual: they name only entries it holds. Ends by itself ([`RaftNode::recovering`]): when
    /// its durable log reaches `promised`, from the leader or, while it hears none, from any peer
    /// that holds the entries; or when the peers lacking them show that no commit can have
    /// counted its acknowledgement ([`RaftNode::take_released_promise`]; `repair.rs`).
    pub fn start_recovering(&mut self, promised: LogId, former_terms: &[LogId]) {
        // The log is known to be a prefix of the one that held `promised` through the commit
        // index, and through its own last entry of that log (`former.rs`).
        let former = former::FormerTerms::new(promised, former_terms);
        let commit = LogId::new(self.log.term_of_any(self.commit).unwrap_or(0), self.commit);
        let former_end = former
            .held_by(&self.log)
            .filter(|own| own.index > commit.index)
            .unwrap_or(commit);
        self.recovery = Some(repair::Recovery::new(former, former_end));
        self.check_recovered();
    }

    /// What this node is recovering to, while it is ([`RaftNode::start_recovering`]).
    pub fn recovering(&self) -> Option<LogId> {
        self.recovery.as_ref().map(repair::Recovery::promised)
    }

    fn check_recovered(&mut self) {
        if let Some(promised) = self.recovering() {
            // Durable and at least as up to date as the promise: a stale entry of an older term
            // at the promised index does not count. A snapshot installed counts once durable
            // (durability moves to its index then).
            let durable = self.durability.durable_index();
            let durable_last = LogId::new(self.log.term_of_any(durable).unwrap_or(0), durable);
            let released = self.recovery.as_ref().is_some_and(|r| r.released)
                && self.durability.promise_release_durable();
            if released {
                self.released_promise = Some(promised);
            }
            let whole = durable_last >= promised || released;
            if whole && !self.mutated(crate::Mutation::RecoveryNeverEnds) {
                self.recovery = None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
