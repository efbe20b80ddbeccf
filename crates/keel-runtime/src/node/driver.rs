//! The node task's loop: inputs into the core, `ready()` out to storage, transport and apply.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel_core::{
    CommitStatus, Entry, Index, LogId, Message, MessageBody, NodeId, ProposeError, RaftNode,
    ReadError, Ready, SnapshotMeta, Term,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{interval, MissedTickBehavior};

use super::{NodeConfig, SnapshotData};
use crate::apply::{ApplyItem, ApplyQueue, ProposalReply, ReadFn, SnapshotWriter, StateMachine};
use crate::handle::{ClientError, NodeStatus, ReplayStats, Request};
use crate::storage::{fatal, StorageCommand};
use crate::transport::{Inbound, Transport};

/// Completions from the storage thread, the apply pipeline and snapshot transfers.
#[derive(Debug)]
pub enum Event {
    Persisted(u64),
    Applied(Index),
    /// The apply thread captured a view of the state at `index`.
    SnapshotTaken {
        index: Index,
        view: Box<dyn SnapshotWriter>,
    },
    /// A snapshot thread finished writing a view to a file (and queued its adoption).
    SnapshotWritten,
    SnapshotSaved {
        meta: SnapshotMeta,
        /// The snapshot file, under its final name.
        path: PathBuf,
        /// The leader (and its term) for a received snapshot; `None` for one taken here.
        from: Option<(NodeId, Term)>,
    },
    SnapshotSendFailed(NodeId),
}

/// Bound on the messages (or client requests) taken in one go before the core's `ready()` is
/// drained. Taking everything already queued turns many proposals into one Append and one write
/// (and many Appends into one acknowledgement), which is where throughput under load comes from;
/// the bound keeps one source from starving the others and the ticker.
const INPUTS_PER_READY_MAX: usize = 256;

pub(super) struct Driver<S> {
    pub raft: RaftNode,
    /// The configuration last seen, to forget the storage incarnation of members that leave it.
    pub membership: keel_core::Membership,
    pub transport: Transport,
    pub storage: mpsc::Sender<StorageCommand>,
    /// Unbounded, yet bounded in effect: it holds only committed entries the core handed out,
    /// which the core keeps in memory anyway until they are applied and snapshotted.
    pub apply: ApplyQueue<S>,
    pub events_tx: mpsc::UnboundedSender<Event>,
    /// Highest index handed to the apply pipeline.
    pub apply_sent: Index,
    /// Proposals by index, with the term they were appended in.
    pub pending_proposals: BTreeMap<Index, (Term, ProposalReply)>,
    /// Reads waiting for their ReadIndex round, by context.
    pub pending_reads: BTreeMap<u64, ReadFn<S>>,
    /// Reads whose round completed, waiting for their index to be handed to the apply pipeline.
    pub waiting_reads: Vec<(Index, ReadFn<S>)>,
    pub next_read_ctx: u64,
    pub snapshot_data: SnapshotData,
    /// The newest snapshot file's size, for the apply pipeline's snapshot policy.
    pub last_snapshot_bytes: Arc<AtomicU64>,
    /// Snapshot transfers in flight, per follower, with the snapshot each streams.
    pub snapshot_sends: HashMap<NodeId, (LogId, tokio::task::JoinHandle<()>)>,
    /// A snapshot thread is writing a view; the newest view taken meanwhile waits here.
    pub snapshot_writing: bool,
    pub snapshot_next_view: Option<(SnapshotMeta, Box<dyn SnapshotWriter>)>,
    pub snapshot_waiters: Vec<oneshot::Sender<Result<Index, ClientError>>>,
    pub replay: ReplayStats,
    pub serving: bool,
    /// Set by `Request::Shutdown`: the loop ends once the current step is handed out.
    pub stopping: bool,
    pub metrics: crate::metrics::NodeMetrics,
    pub refused: super::refused::RefusedMessages,
    pub started: Instant,
    pub config: NodeConfig,
}

impl<S: StateMachine> Driver<S> {
    pub async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut inbound: mpsc::Receiver<Inbound>,
        mut requests: mpsc::Receiver<Request<S>>,
    ) {
        let mut ticker = interval(std::time::Duration::from_millis(self.config.tick_ms));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            while self.raft.has_ready() {
                let ready = self.raft.ready();
                self.handle_ready(ready).await;
            }
            self.check_replay_done();
            self.metrics.observe(&self.raft);
            self.note_membership();
            if self.stopping {
                // Appended, so they may still commit (after a restart, or on another leader).
                for (_, (_, reply)) in std::mem::take(&mut self.pending_proposals) {
                    let _ = reply.send(Err(ClientError::Unknown));
                }
                tracing::info!(node = self.config.id, "node task stopped");
                return;
            }
            tokio::select! {
                // Completions first: they unblock everything else.
                biased;
                Some(event) = events.recv() => {
                    self.on_event(event).await;
                    for _ in 1..INPUTS_PER_READY_MAX {
                        let Ok(event) = events.try_recv() else { break };
                        self.on_event(event).await;
                    }
                }
                _ = ticker.tick(), if self.serving => self.raft.tick(),
                Some(msg) = inbound.recv(), if self.serving => {
                    self.on_inbound(msg).await;
                    for _ in 1..INPUTS_PER_READY_MAX {
                        let Ok(msg) = inbound.try_recv() else { break };
                        self.on_inbound(msg).await;
                    }
                }
                request = requests.recv(), if self.serving => match request {
                    Some(request) => {
                        self.on_request(request).await;
                        for _ in 1..INPUTS_PER_READY_MAX {
                            let Ok(request) = requests.try_recv() else { break };
                            self.on_request(request).await;
                        }
                    }
                    None => return, // every handle is gone
                },
            }
        }
    }

    /// A member that left the configuration may be added back later with new storage: its old
    /// incarnation must not keep it out then (S37).
    fn note_membership(&mut self) {
        if *self.raft.membership() == self.membership {
            return;
        }
        let now = self.raft.membership().clone();
        let members = now.members();
        for id in self.membership.members().difference(&members) {
            self.transport.forget_incarnation(*id);
        }
        self.membership = now;
    }

    fn check_replay_done(&mut self) {
        if self.serving || self.raft.status().applied < self.replay.target_index {
            return;
        }
        self.serving = true;
        self.replay.duration = self.started.elapsed();
        tracing::info!(
            node = self.config.id,
            "replayed {} entries to the persisted commit index {} in {:?}; serving",
            self.replay.entries,
            self.replay.target_index,
            self.replay.duration
        );
    }

    async fn handle_ready(&mut self, ready: Ready) {
        let Ready {
            messages,
            write,
            committed,
            read_states,
            failed_reads,
            install_snapshot,
            send_snapshots,
        } = ready;
        // Messages first: the leader's Appends leave before its own write is durable, so the
        // fsync here overlaps with replication (the core only counts itself once persisted).
        for msg in messages {
            self.transport.send(msg);
        }
        if let Some(write) = write {
            if self
                .storage
                .send(StorageCommand::Write(write))
                .await
                .is_err()
            {
                fatal("storage thread", &"stopped");
            }
        }
        if !committed.is_empty() {
            self.hand_out(committed);
        }
        if let Some(meta) = install_snapshot {
            self.restore(meta);
        }
        for rs in read_states {
            if let Some(read) = self.pending_reads.remove(&rs.ctx) {
                self.waiting_reads.push((rs.index, read));
            }
        }
        for ctx in failed_reads {
            if let Some(read) = self.pending_reads.remove(&ctx) {
                read(Err(self.not_leader()));
            }
        }
        self.release_reads();
        for (to, meta) in send_snapshots {
            self.send_snapshot(to, meta);
        }
        self.transport.set_snapshot_floor(self.raft.commit_index());
        if !self.snapshot_sends.is_empty() && self.raft.role() != keel_core::Role::Leader {
            // A transfer of a deposed leader would be refused by the follower's core anyway.
            for (_, (_, task)) in self.snapshot_sends.drain() {
                task.abort();
            }
        }
    }

    /// Hands committed entries to the apply pipeline, each with its proposer's reply channel if
    /// that proposal is the entry that committed.
    fn hand_out(&mut self, committed: Vec<Entry>) {
        let mut batch = Vec::with_capacity(committed.len());
        for entry in committed {
            let reply = match self.pending_proposals.remove(&entry.index) {
                Some((term, reply)) if term == entry.term => Some(reply),
                Some((_, reply)) => {
                    // Another entry committed at this index: ours never will.
                    let _ = reply.send(Err(self.not_leader()));
                    None
                }
                None => None,
            };
            if !self.serving {
                self.replay.entries += 1;
            }
            self.apply_sent = entry.index;
            batch.push((entry, reply));
        }
        self.apply.submit(ApplyItem::Entries(batch));
    }

    fn restore(&mut self, meta: SnapshotMeta) {
        let path = match &self.snapshot_data {
            Some((id, path)) if *id == meta.last => path.clone(),
            _ => panic!("install of {} without its file", meta.last),
        };
        // Opened here, in order with the adoption, so that pruning by a newer snapshot cannot
        // take it from the apply thread.
        let file = match keel_wal::Fs::open(&keel_wal::StdFs, &path) {
            Ok(file) => file,
            Err(e) => fatal("open the snapshot to restore", &e),
        };
        let size_bytes = keel_wal::FileHandle::len_bytes(&file).unwrap_or(0);
        self.metrics.installed(meta.last, size_bytes);
        // Proposals the snapshot covers committed or not, but their results are not known here.
        let covered: Vec<Index> = self
            .pending_proposals
            .range(..=meta.last.index)
            .map(|(i, _)| *i)
            .collect();
        for index in covered {
            let (term, reply) = self.pending_proposals.remove(&index).expect("listed");
            let outcome = match self.raft.commit_status(LogId::new(term, index)) {
                CommitStatus::Overwritten => self.not_leader(),
                _ => ClientError::Unknown,
            };
            let _ = reply.send(Err(outcome));
        }
        self.apply_sent = meta.last.index;
        self.apply.submit(ApplyItem::Restore { meta, path, file });
    }

    /// Hands the apply pipeline the reads whose index it has been handed, behind those entries.
    fn release_reads(&mut self) {
        let sent = self.apply_sent;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting_reads)
            .into_iter()
            .partition(|(index, _)| *index <= sent);
        self.waiting_reads = waiting;
        for (_, read) in ready {
            self.apply.submit(ApplyItem::Read(read));
        }
    }

    fn send_snapshot(&mut self, to: NodeId, meta: SnapshotMeta) {
        let path = match &self.snapshot_data {
            Some((id, path)) if *id == meta.last => path.clone(),
            _ => {
                tracing::warn!("no file for snapshot {} to send to {to}", meta.last);
                self.raft.snapshot_send_failed(to);
                return;
            }
        };
        // The core asks again after its own timeout; a transfer of the same snapshot still
        // running (resuming after dropped connections) is left alone.
        if let Some((last, task)) = self.snapshot_sends.get(&to) {
            if *last == meta.last && !task.is_finished() {
                return;
            }
            task.abort();
        }
        let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        let sent = self.metrics.snapshot_send(to, size_bytes);
        let last = meta.last;
        let transfer = self
            .transport
            .send_snapshot(to, self.raft.term(), meta, path);
        let events = self.events_tx.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = transfer.await {
                tracing::info!("snapshot transfer to {to} failed: {e}");
                let _ = events.send(Event::SnapshotSendFailed(to));
            } else {
                sent.done();
            }
        });
        self.snapshot_sends.insert(to, (last, task));
    }

    /// Serializes a state view into a snapshot file on a blocking thread (apply goes on), then
    /// queues its adoption with the storage thread.
    fn write_snapshot(&mut self, meta: SnapshotMeta, view: Box<dyn SnapshotWriter>) {
        if self.snapshot_writing {
            self.snapshot_next_view = Some((meta, view));
            return;
        }
        self.snapshot_writing = true;
        let dir = self.config.data_dir.clone();
        let storage = self.storage.clone();
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let written = tokio::task::spawn_blocking(move || -> Result<PathBuf, String> {
                let mut file = keel_wal::create_snapshot_file(&keel_wal::StdFs, &dir, &meta)
                    .map_err(|e| e.to_string())?;
                view.write_to(&mut file).map_err(|e| e.to_string())?;
                file.finish().map_err(|e| e.to_string())
            })
            .await;
            match written {
                Ok(Ok(temp)) => {
                    let cmd = StorageCommand::AdoptSnapshot { temp, from: None };
                    if storage.send(cmd).await.is_err() {
                        return; // the node is stopping
                    }
                }
                Ok(Err(e)) => fatal("write a snapshot", &e),
                Err(e) => fatal("write a snapshot", &e),
            }
            let _ = events.send(Event::SnapshotWritten);
        });
    }

    async fn on_event(&mut self, event: Event) {
        match event {
            Event::Persisted(id) => self.raft.persisted(id),
            Event::Applied(index) => {
                self.metrics.applied(index);
                self.raft.applied(index)
            }
            Event::SnapshotTaken { index, view } => {
                if index <= self.raft.snapshot().last.index {
                    self.resolve_snapshot_waiters(Ok(self.raft.snapshot().last.index));
                    return;
                }
                let Some(meta) = self.raft.snapshot_meta(index) else {
                    return; // overtaken by an install
                };
                self.write_snapshot(meta, view);
            }
            Event::SnapshotWritten => {
                self.snapshot_writing = false;
                if let Some((meta, view)) = self.snapshot_next_view.take() {
                    self.write_snapshot(meta, view);
                }
            }
            Event::SnapshotSaved { meta, path, from } => {
                let last = meta.last;
                let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                self.metrics.snapshot_saved(last, size_bytes, from);
                if last.index > self.snapshot_data.as_ref().map_or(0, |(id, _)| id.index) {
                    self.snapshot_data = Some((last, path));
                    self.last_snapshot_bytes
                        .store(size_bytes, std::sync::atomic::Ordering::Relaxed);
                }
                match from {
                    None => {
                        self.raft.snapshot_saved(meta);
                        self.resolve_snapshot_waiters(Ok(last.index));
                    }
                    Some((leader, term)) => self.step_peer(Message {
                        from: leader,
                        to: self.config.id,
                        term,
                        body: MessageBody::InstallSnapshot { meta },
                    }),
                }
            }
            Event::SnapshotSendFailed(to) => self.raft.snapshot_send_failed(to),
        }
    }

    fn resolve_snapshot_waiters(&mut self, result: Result<Index, ClientError>) {
        for w in self.snapshot_waiters.drain(..) {
            let _ = w.send(result.clone());
        }
    }

    /// Steps a peer's message into the core, unless no honest peer could have sent it: then it
    /// is dropped, counted and logged (rate limited). Everything a peer says comes through here.
    fn step_peer(&mut self, msg: Message) {
        match self.raft.validate(&msg) {
            Ok(()) => self.raft.step(msg),
            Err(why) => self.refused.refused(&msg, why, Instant::now()),
        }
    }

    async fn on_inbound(&mut self, inbound: Inbound) {
        match inbound {
            Inbound::Message(msg) => self.step_peer(msg),
            Inbound::PeerAddress { from, addr } => {
                // Addresses this node was given (initial cluster, RAFT.MEMBER ADD here) win; an
                // announced one fills a gap, so every member can answer a member added elsewhere.
                if from != self.config.id && self.transport.peer_addr(from).is_none() {
                    tracing::info!(node = self.config.id, peer = from, %addr, "learned a peer address from its handshake");
                    self.transport.set_peer(from, addr);
                }
            }
            Inbound::Snapshot {
                from,
                term,
                meta,
                path,
            } => {
                // Only worth adopting if the core could install it (above its commit index);
                // the core makes the final decision once it is durable. A snapshot no honest
                // leader sends is never adopted as this node's newest.
                let install = Message {
                    from,
                    to: self.config.id,
                    term,
                    body: MessageBody::InstallSnapshot { meta: meta.clone() },
                };
                if let Err(why) = self.raft.validate(&install) {
                    self.refused.refused(&install, why, Instant::now());
                    let _ = std::fs::remove_file(&path);
                    return;
                }
                if meta.last.index <= self.raft.commit_index() || term < self.raft.term() {
                    let _ = std::fs::remove_file(&path);
                    return;
                }
                let cmd = StorageCommand::AdoptSnapshot {
                    temp: path,
                    from: Some((from, term)),
                };
                if self.storage.send(cmd).await.is_err() {
                    fatal("storage thread", &"stopped");
                }
            }
        }
    }

    fn not_leader(&self) -> ClientError {
        let leader = self.raft.leader().filter(|l| *l != self.config.id);
        ClientError::NotLeader {
            leader,
            leader_addr: leader.and_then(|l| self.transport.peer_addr(l)),
        }
    }

    fn propose_error(&self, e: ProposeError) -> ClientError {
        match e {
            ProposeError::NotLeader { .. } => self.not_leader(),
            ProposeError::Backpressure => ClientError::Busy("too many uncommitted entries"),
            ProposeError::TransferInProgress => ClientError::Busy("leadership transfer"),
            other => ClientError::Rejected(other.to_string()),
        }
    }

    fn track(&mut self, id: Result<LogId, ProposeError>, reply: ProposalReply) {
        match id {
            Ok(id) => {
                self.metrics.proposed(id.index);
                if let Some((_, old)) = self.pending_proposals.insert(id.index, (id.term, reply)) {
                    // An older proposal at this index was cut from our log; it may still
                    // commit elsewhere (a later leader may hold it).
                    let _ = old.send(Err(ClientError::Unknown));
                }
            }
            Err(e) => {
                let _ = reply.send(Err(self.propose_error(e)));
            }
        }
    }

    /// Proposes one client entry; a refusal is sent to `reply` and returned.
    fn propose(&mut self, data: Bytes, reply: ProposalReply) -> Result<(), ClientError> {
        let entry_bytes_max = self.config.wal.entry_payload_bytes_max();
        let result = if self.pending_proposals.len() >= self.config.pending_proposals_max {
            Err(ClientError::Busy("too many pending proposals"))
        } else if data.len() > entry_bytes_max {
            // Refused before it reaches the log: a write the WAL cannot store would stop every
            // node that tried to (leader and followers alike).
            Err(ClientError::Rejected(format!(
                "entry of {} bytes exceeds the largest the log stores ({entry_bytes_max} bytes)",
                data.len()
            )))
        } else {
            self.raft.propose(data).map_err(|e| self.propose_error(e))
        };
        match result {
            Ok(id) => {
                self.track(Ok(id), reply);
                Ok(())
            }
            Err(error) => {
                let _ = reply.send(Err(error.clone()));
                Err(error)
            }
        }
    }

    async fn on_request(&mut self, request: Request<S>) {
        match request {
            Request::Propose { data, reply } => {
                let _ = self.propose(data, reply);
            }
            Request::ProposeBatch(batch) => {
                // After a refusal the rest of the batch is refused too, so no entry of a client's
                // pipeline is applied ahead of an earlier one that was not.
                let mut refused = None;
                for (data, reply) in batch {
                    match &refused {
                        Some(error) => {
                            let _ = reply.send(Err(Clone::clone(error)));
                        }
                        None => refused = self.propose(data, reply).err(),
                    }
                }
            }
            Request::Membership {
                change,
                addr,
                reply,
            } => {
                let learner = match change {
                    keel_core::MembershipChange::AddLearner(id) => Some(id),
                    _ => None,
                };
                let id = self.raft.propose_membership(change);
                // Only a learner really added is (re)addressed: a refused attempt, e.g. adding a
                // voter, must not point the connection to a member at another address.
                if let (Ok(_), Some(learner), Some(addr)) = (&id, learner, addr) {
                    self.transport.set_peer(learner, addr);
                }
                self.track(id, reply);
            }
            Request::Read(read) => {
                if self.pending_reads.len() + self.waiting_reads.len()
                    >= self.config.pending_reads_max
                {
                    read(Err(ClientError::Busy("too many pending reads")));
                    return;
                }
                let ctx = self.next_read_ctx;
                self.next_read_ctx += 1;
                match self.raft.read_index(ctx) {
                    Ok(()) => {
                        self.pending_reads.insert(ctx, read);
                    }
                    Err(ReadError::NotLeader { .. }) => read(Err(self.not_leader())),
                    Err(ReadError::Backpressure) => read(Err(ClientError::Busy("reads"))),
                }
            }
            Request::Status(reply) => {
                let _ = reply.send(NodeStatus {
                    raft: self.raft.status(),
                    progress: self.raft.progress(),
                    serving: self.serving,
                    replay: self.replay,
                    dropped_messages: self.transport.dropped_messages(),
                    refused_messages: self.refused.total(),
                });
            }
            Request::Transfer { to, reply } => {
                let result = self
                    .raft
                    .transfer_leadership(to)
                    .map_err(|e| self.propose_error(e));
                let _ = reply.send(result);
            }
            Request::SnapshotNow(reply) => {
                self.snapshot_waiters.push(reply);
                self.apply.submit(ApplyItem::Snapshot);
            }
            Request::Shutdown => self.stopping = true,
            Request::DebugPanic(_unanswered) => panic!(
                "node {}: panic requested (Handle::debug_panic)",
                self.config.id
            ),
        }
    }
}
