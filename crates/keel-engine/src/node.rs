//! What a node does with the core's output and its clients' requests.
//!
//! [`NodeEngine`] owns everything a node tracks beside the core: proposals waiting for their
//! entry to apply, reads waiting for their ReadIndex round and then for the apply pipeline,
//! how far the pipeline was handed entries, and the startup replay. Every effect goes through a
//! [`Shell`]: the runtime's moves bytes over tokio channels, threads and sockets, the simulator's
//! through its simulated world.
//!
//! A `Ready` is routed in two phases, because the runtime awaits room in the storage queue in
//! between:
//!
//! 1. [`NodeEngine::start_ready`]: messages are sent first — a leader's Appends leave before its
//!    own write is durable, so its fsync overlaps replication (the core counts itself only once
//!    persisted) — and the write is returned, to be handed to storage next.
//! 2. [`NodeEngine::finish_ready`]: committed entries go to the apply pipeline (each with its
//!    proposer's answer if this node proposed it), then a snapshot restore behind them (one
//!    ordered pipeline: the restore waits for every entry handed out before it), then reads whose
//!    index was handed out, then snapshot transfers.
//!
//! Answers: a committed entry at a proposal's index that is not that proposal (another term)
//! answers it "not the leader"; proposals a restore covers are answered "outcome unknown", or
//! "not the leader" if their entry was overwritten.
//!
//! The [`Shell`]'s effects: send a message, open a snapshot for a restore, hand an item to the
//! apply pipeline, answer a proposer, refuse a read, stream a snapshot to a follower, drop
//! transfers when no longer leading.
//!
//! The requests: [`NodeEngine::propose`] (bounded by the pending proposals and by the largest
//! entry the log stores), [`NodeEngine::propose_batch`] (in order, refused whole from the first
//! refusal on), `propose_membership`, `read` (ReadIndex, with a bound on reads in flight),
//! `transfer_leadership`; [`NodeEngine::proposal_refusal`] is the answer every proposal gets now
//! (`NotLeader` on a serving follower of a known leader), which a shell may give without queueing
//! the proposal. Startup replay: [`NodeEngine::check_replay_done`], serving only once applied up
//! to the persisted commit. [`NodeEngine::stop`] answers what is pending.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use keel_core::{
    CommitStatus, Entry, Index, LogId, MembershipChange, Message, NodeId, ProposeError, RaftNode,
    ReadError, Ready, Role, SnapshotMeta, Term, Write,
};

use crate::apply::ApplyItem;
use crate::clock::{ClockPolicy, ClockWatch};
use crate::error::ClientError;

/// The effects of the engine's decisions. `Reply` answers a proposer, `Read` is a read waiting
/// for the state, `Snapshot` is what a restore reads the snapshot from.
pub trait Shell {
    /// How a proposer is answered: travels with its entry through the apply pipeline, or is
    /// handed back with a [`ClientError`].
    type Reply;
    /// A read waiting for the state: queued in the apply pipeline behind its index, or refused.
    type Read;
    /// What a restore reads the snapshot from (an open file in the runtime).
    type Snapshot;

    /// Sends `msg` to the peer `msg.to`. Delivery is not guaranteed: the protocol tolerates loss.
    fn send(&mut self, msg: Message);
    /// The snapshot at `meta.last`, which the core says is durable here, opened for a restore
    /// (in order with its adoption, so nothing can prune it before the restore reads it).
    fn open_snapshot(&mut self, meta: &SnapshotMeta) -> Self::Snapshot;
    /// Hands an item to the apply pipeline, behind everything handed before.
    fn apply(&mut self, item: ApplyItem<Self::Reply, Self::Read, Self::Snapshot>);
    /// The proposal will not produce a result.
    fn answer(&mut self, reply: Self::Reply, error: ClientError);
    /// The read will not be served here.
    fn refuse_read(&mut self, read: Self::Read, error: ClientError);
    /// A read's ReadIndex round completed at `index` (it is served once that index is applied).
    fn read_indexed(&mut self, _read: &Self::Read, _index: Index) {}
    /// Stream this node's snapshot `meta` to follower `to`, as leader of `term`.
    fn send_snapshot(&mut self, to: NodeId, term: Term, meta: SnapshotMeta);
    /// This node does not lead (any more): snapshot transfers it runs are of no use.
    fn not_leading(&mut self) {}
    /// The address a "not the leader" answer gives for the leader `node`, if known.
    fn leader_addr(&self, node: NodeId) -> Option<SocketAddr>;
}

/// Bounds on what a node holds for its clients.
#[derive(Clone, Copy, Debug)]
pub struct EngineLimits {
    /// Proposals awaiting their result.
    pub pending_proposals_max: usize,
    /// Reads in flight (waiting for their round or for the apply pipeline).
    pub pending_reads_max: usize,
    /// The largest entry payload the log stores: a larger proposal is refused before it reaches
    /// the core (the WAL could only stop on it, on every node).
    pub entry_bytes_max: usize,
}

/// What a node tracks beside its [`RaftNode`] for its clients, and the routing of its
/// `Ready`s (see the module documentation). `P` is the shell's [`Shell::Reply`], `R` its
/// [`Shell::Read`].
pub struct NodeEngine<P, R> {
    id: NodeId,
    limits: EngineLimits,
    /// Proposals by index, with the term they were appended in.
    pending_proposals: BTreeMap<Index, (Term, P)>,
    /// Reads waiting for their ReadIndex round, by context.
    pending_reads: BTreeMap<u64, R>,
    /// Reads whose round completed, waiting for their index to be handed to the apply pipeline.
    waiting_reads: Vec<(Index, R)>,
    next_read_ctx: u64,
    /// Highest index handed to the apply pipeline.
    apply_sent: Index,
    /// Startup replay: the persisted commit index to apply before serving, and the entries
    /// handed out before that.
    replay_target: Index,
    replay_entries: u64,
    serving: bool,
    clock: ClockWatch,
}

impl<P, R> NodeEngine<P, R> {
    /// A node whose state machine holds the log up to `applied` and that must replay up to
    /// `replay_target` (its persisted commit index) before it serves.
    pub fn new(
        id: NodeId,
        limits: EngineLimits,
        clock: ClockPolicy,
        applied: Index,
        replay_target: Index,
    ) -> Self {
        NodeEngine {
            id,
            limits,
            pending_proposals: BTreeMap::new(),
            pending_reads: BTreeMap::new(),
            waiting_reads: Vec::new(),
            next_read_ctx: 1,
            apply_sent: applied,
            replay_target,
            replay_entries: 0,
            serving: false,
            clock: ClockWatch::new(clock),
        }
    }

    /// Whether startup replay is done (the node ticks, reads peers and serves clients only then).
    pub fn serving(&self) -> bool {
        self.serving
    }

    /// Entries replayed before serving, and the index replay had to reach.
    pub fn replay(&self) -> (u64, Index) {
        (self.replay_entries, self.replay_target)
    }

    /// The highest index handed to the apply pipeline (an item queued now is applied after it).
    pub fn handed_out(&self) -> Index {
        self.apply_sent
    }

    /// Proposals appended and waiting for their entry to apply (or be overwritten).
    pub fn pending_proposals(&self) -> usize {
        self.pending_proposals.len()
    }

    /// Reads in flight: waiting for their ReadIndex round, or for their index to be handed to the
    /// apply pipeline. Reads already in the pipeline are not counted.
    pub fn pending_reads(&self) -> usize {
        self.pending_reads.len() + self.waiting_reads.len()
    }

    /// Marks the node serving once the application applied up to the replay target. Returns
    /// whether it just started serving.
    pub fn check_replay_done(&mut self, raft: &RaftNode) -> bool {
        if self.serving || raft.applied_index() < self.replay_target {
            return false;
        }
        self.serving = true;
        true
    }

    /// Phase 1 of a `Ready`: sends its messages, with this node's clock `now_ms` written into
    /// heartbeats and their responses, and returns its write, for storage.
    pub fn start_ready<T>(&mut self, ready: &mut Ready, now_ms: u64, shell: &mut T) -> Option<Write>
    where
        T: Shell<Reply = P, Read = R>,
    {
        for mut msg in ready.messages.drain(..) {
            self.clock.stamp(&mut msg, now_ms);
            shell.send(msg);
        }
        ready.write.take()
    }

    /// This node's clock measurements and campaign hold: the shell hands it the readings of
    /// stepped messages (`ClockWatch::heard`) and its clock at every tick (`ClockWatch::tick`).
    pub fn clock(&mut self) -> &mut ClockWatch {
        &mut self.clock
    }

    /// Phase 2 of a `Ready` (after [`Self::start_ready`] and the write handed to storage).
    pub fn finish_ready<T>(&mut self, raft: &RaftNode, ready: Ready, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        let Ready {
            messages,
            write,
            committed,
            read_states,
            failed_reads,
            install_snapshot,
            send_snapshots,
        } = ready;
        debug_assert!(messages.is_empty() && write.is_none(), "start_ready first");
        if !committed.is_empty() {
            self.hand_out(raft, committed, shell);
        }
        if let Some(meta) = install_snapshot {
            self.restore(raft, meta, shell);
        }
        for rs in read_states {
            if let Some(read) = self.pending_reads.remove(&rs.ctx) {
                shell.read_indexed(&read, rs.index);
                self.waiting_reads.push((rs.index, read));
            }
        }
        for ctx in failed_reads {
            if let Some(read) = self.pending_reads.remove(&ctx) {
                shell.refuse_read(read, self.not_leader(raft, shell));
            }
        }
        self.release_reads(shell);
        for (to, meta) in send_snapshots {
            shell.send_snapshot(to, raft.term(), meta);
        }
        if raft.role() != Role::Leader {
            shell.not_leading();
        }
    }

    /// Hands committed entries to the apply pipeline, each with its proposer's answer if that
    /// proposal is the entry that committed.
    fn hand_out<T>(&mut self, raft: &RaftNode, committed: Vec<Entry>, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        let mut batch = Vec::with_capacity(committed.len());
        for entry in committed {
            let reply = match self.pending_proposals.remove(&entry.index) {
                Some((term, reply)) if term == entry.term => Some(reply),
                Some((_, reply)) => {
                    // Another entry committed at this index: ours never will.
                    shell.answer(reply, self.not_leader(raft, shell));
                    None
                }
                None => None,
            };
            if !self.serving {
                self.replay_entries += 1;
            }
            debug_assert!(
                entry.index > self.apply_sent,
                "committed entries move forward"
            );
            self.apply_sent = entry.index;
            batch.push((entry, reply));
        }
        shell.apply(ApplyItem::Entries(batch));
    }

    /// Queues the restore of the snapshot at `meta.last` behind the entries handed out before.
    fn restore<T>(&mut self, raft: &RaftNode, meta: SnapshotMeta, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        // Proposals the snapshot covers committed or not, but their results are not known here.
        let covered: Vec<Index> = self
            .pending_proposals
            .range(..=meta.last.index)
            .map(|(i, _)| *i)
            .collect();
        for index in covered {
            let (term, reply) = self.pending_proposals.remove(&index).expect("listed");
            let outcome = match raft.commit_status(LogId::new(term, index)) {
                CommitStatus::Overwritten => self.not_leader(raft, shell),
                _ => ClientError::Unknown,
            };
            shell.answer(reply, outcome);
        }
        self.apply_sent = meta.last.index;
        let snapshot = shell.open_snapshot(&meta);
        shell.apply(ApplyItem::Restore { meta, snapshot });
    }

    /// Hands the apply pipeline the reads whose index it has been handed, behind those entries.
    fn release_reads<T>(&mut self, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        if self.waiting_reads.is_empty() {
            return;
        }
        let sent = self.apply_sent;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting_reads)
            .into_iter()
            .partition(|(index, _)| *index <= sent);
        self.waiting_reads = waiting;
        for (_, read) in ready {
            shell.apply(ApplyItem::Read(read));
        }
    }

    /// What a client is told by a node that does not lead.
    pub fn not_leader<T: Shell>(&self, raft: &RaftNode, shell: &T) -> ClientError {
        let leader = raft.leader().filter(|l| *l != self.id);
        ClientError::NotLeader {
            leader,
            leader_addr: leader.and_then(|l| shell.leader_addr(l)),
        }
    }

    /// The answer every proposal gets here now, whatever it holds, if there is one: `NotLeader`
    /// while this node serves and follows a known leader (a proposal reaching [`Self::propose`]
    /// then is refused the same way by the core). A shell may publish it after each step and
    /// refuse proposals with it before they are queued for the node (the runtime's handles do:
    /// a follower's writes are forwarded without a round trip through its node task). Anything
    /// else (a candidate, no known leader, replay) answers `None`: the node decides.
    pub fn proposal_refusal<T: Shell>(&self, raft: &RaftNode, shell: &T) -> Option<ClientError> {
        let follows = raft.role() == Role::Follower && raft.leader().is_some_and(|l| l != self.id);
        (self.serving && follows).then(|| self.not_leader(raft, shell))
    }

    fn propose_error<T: Shell>(&self, raft: &RaftNode, shell: &T, e: ProposeError) -> ClientError {
        match e {
            ProposeError::NotLeader { .. } => self.not_leader(raft, shell),
            ProposeError::Backpressure => ClientError::Busy("too many uncommitted entries"),
            ProposeError::TransferInProgress => ClientError::Busy("leadership transfer"),
            other => ClientError::Rejected(other.to_string()),
        }
    }

    fn track<T>(&mut self, id: LogId, reply: P, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        if let Some((_, old)) = self.pending_proposals.insert(id.index, (id.term, reply)) {
            // An older proposal at this index was cut from our log; it may still commit
            // elsewhere (a later leader may hold it).
            shell.answer(old, ClientError::Unknown);
        }
    }

    /// Proposes one client entry. A refusal is sent to `reply` and returned.
    pub fn propose<T>(
        &mut self,
        raft: &mut RaftNode,
        data: Bytes,
        reply: P,
        shell: &mut T,
    ) -> Result<LogId, ClientError>
    where
        T: Shell<Reply = P, Read = R>,
    {
        let entry_bytes_max = self.limits.entry_bytes_max;
        let result = if self.pending_proposals.len() >= self.limits.pending_proposals_max {
            Err(ClientError::Busy("too many pending proposals"))
        } else if data.len() > entry_bytes_max {
            Err(ClientError::Rejected(format!(
                "entry of {} bytes exceeds the largest the log stores ({entry_bytes_max} bytes)",
                data.len()
            )))
        } else {
            raft.propose(data)
                .map_err(|e| self.propose_error(raft, shell, e))
        };
        self.settle(result, reply, shell)
    }

    /// Proposes a client's pipeline in order: after a refusal the rest is refused too, so no
    /// entry of it is applied ahead of an earlier one that was not. Returns where the accepted
    /// ones were appended.
    pub fn propose_batch<T>(
        &mut self,
        raft: &mut RaftNode,
        batch: Vec<(Bytes, P)>,
        shell: &mut T,
    ) -> Vec<LogId>
    where
        T: Shell<Reply = P, Read = R>,
    {
        let mut appended = Vec::with_capacity(batch.len());
        let mut refused: Option<ClientError> = None;
        for (data, reply) in batch {
            match &refused {
                Some(error) => shell.answer(reply, error.clone()),
                None => match self.propose(raft, data, reply, shell) {
                    Ok(id) => appended.push(id),
                    Err(error) => refused = Some(error),
                },
            }
        }
        appended
    }

    /// Proposes a membership change; its answer comes when the entry applies.
    pub fn propose_membership<T>(
        &mut self,
        raft: &mut RaftNode,
        change: MembershipChange,
        reply: P,
        shell: &mut T,
    ) -> Result<LogId, ClientError>
    where
        T: Shell<Reply = P, Read = R>,
    {
        let result = raft
            .propose_membership(change)
            .map_err(|e| self.propose_error(raft, shell, e));
        self.settle(result, reply, shell)
    }

    /// Tracks an appended proposal until its entry applies, or answers its refusal at once.
    fn settle<T>(
        &mut self,
        result: Result<LogId, ClientError>,
        reply: P,
        shell: &mut T,
    ) -> Result<LogId, ClientError>
    where
        T: Shell<Reply = P, Read = R>,
    {
        match result {
            Ok(id) => {
                self.track(id, reply, shell);
                Ok(id)
            }
            Err(error) => {
                shell.answer(reply, error.clone());
                Err(error)
            }
        }
    }

    /// Starts a linearizable read: served once a ReadIndex round confirmed this node leads and
    /// the state machine applied up to the round's index.
    pub fn read<T>(&mut self, raft: &mut RaftNode, read: R, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        if self.pending_reads() >= self.limits.pending_reads_max {
            shell.refuse_read(read, ClientError::Busy("too many pending reads"));
            return;
        }
        let ctx = self.next_read_ctx;
        self.next_read_ctx += 1;
        match raft.read_index(ctx) {
            Ok(()) => {
                self.pending_reads.insert(ctx, read);
            }
            Err(ReadError::NotLeader { .. }) => {
                let error = self.not_leader(raft, shell);
                shell.refuse_read(read, error);
            }
            Err(ReadError::Backpressure) => shell.refuse_read(read, ClientError::Busy("reads")),
        }
    }

    /// Leadership transfer, with the client's view of a refusal.
    pub fn transfer_leadership<T: Shell>(
        &self,
        raft: &mut RaftNode,
        to: NodeId,
        shell: &T,
    ) -> Result<(), ClientError> {
        raft.transfer_leadership(to)
            .map_err(|e| self.propose_error(raft, shell, e))
    }

    /// The node stops: every proposal still waiting is answered "outcome unknown" (appended, it
    /// may still commit, after a restart or on another leader).
    pub fn stop<T>(&mut self, shell: &mut T)
    where
        T: Shell<Reply = P, Read = R>,
    {
        for (_, (_, reply)) in std::mem::take(&mut self.pending_proposals) {
            shell.answer(reply, ClientError::Unknown);
        }
    }
}

#[cfg(test)]
mod tests;
