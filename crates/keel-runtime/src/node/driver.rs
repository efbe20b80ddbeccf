//! The node task's loop: inputs into the core, `ready()` out to storage, transport and apply.
//!
//! Taking a snapshot (docs/DESIGN.md section 4): the apply thread captures
//! `StateMachine::snapshot_view()` (a copy of the in-memory state or a copy-on-write view, the
//! only pause apply sees) and goes on; a blocking task here serializes the view
//! (`SnapshotWriter::write_to`) straight into a `snapshot-….snap.tmp` file
//! (`keel_wal::create_snapshot_file`: buffered, checksummed, header patched at the end,
//! fsynced); the storage thread then adopts it (`Wal::adopt_snapshot`) in order with the writes,
//! and the core compacts. One write at a time (keel-engine's `SnapshotWriting`); the newest view
//! taken meanwhile waits. The node tells the apply thread each new snapshot's size, which the
//! snapshot policy scales with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use keel_core::{GroupId, Index, LogId, Message, NodeId, RaftNode, SnapshotMeta, Term};
use keel_engine::handshake::{adopts_peer_addr, DepartedMembers};
use keel_engine::{Adoption, ClockEvent, ClockWatch, NodeEngine, Shell, SnapshotWriting};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{interval, MissedTickBehavior};

use super::{NodeConfig, SnapshotData};
use crate::apply::{ApplyItem, ApplyWorker, SnapshotFile, SnapshotWriter, StateMachine};
use crate::event::Event;
use crate::failure::FailureCell;
use crate::handle::{
    ClientError, NodeStatus, NodeView, ProposalReply, ReadFn, RefusalPublisher, ReplayStats,
    Request,
};
use crate::storage::{storage_failure, SnapshotAdoption, StorageCommand};
use keel_transport::{AbortOnDrop, Inbound, PeerTransport};

/// The node as [`crate::Handle::watch`] shows it.
pub(super) fn view_of(group: GroupId, raft: &RaftNode, serving: bool) -> NodeView {
    NodeView {
        group,
        role: raft.role(),
        term: raft.term(),
        leader: raft.leader(),
        membership: Arc::clone(raft.log().membership_shared()),
        serving,
    }
}

/// What the handles watch without asking the node task.
pub(super) struct Watched {
    /// [`crate::Handle::watch`]: role, term, leader, membership, serving.
    pub view: tokio::sync::watch::Sender<NodeView>,
    /// [`crate::Handle::wait_applied`]: the state machine's applied index.
    pub applied: tokio::sync::watch::Sender<Index>,
}

/// Bound on the messages (or client requests) taken in one go before the core's `ready()` is
/// drained. Taking everything already queued turns many proposals into one Append and one write
/// (and many Appends into one acknowledgement), which is where throughput under load comes from;
/// the bound keeps one source from starving the others and the ticker.
const INPUTS_PER_READY_MAX: usize = 256;

/// The node task: the core, the engine's decisions around it, and the shell that carries them
/// out over tokio.
pub(super) struct Driver<S> {
    pub raft: RaftNode,
    pub engine: NodeEngine<ProposalReply, ReadFn<S>>,
    pub io: Io<S>,
    /// Which members left the configuration, to forget their storage incarnations.
    pub departed: DepartedMembers,
    pub storage: mpsc::Sender<StorageCommand>,
    /// A snapshot thread is writing a view; the newest view taken meanwhile waits.
    pub snapshot_writing: SnapshotWriting<(SnapshotMeta, Box<dyn SnapshotWriter>)>,
    /// `RAFT.SNAPSHOT` requests, each with the lowest snapshot index that answers it: the
    /// highest index handed to the apply pipeline when it was asked (its view is taken behind
    /// those entries). An older snapshot still being written when it was asked does not answer it.
    pub snapshot_waiters: Vec<(Index, oneshot::Sender<Result<Index, ClientError>>)>,
    pub replay_duration: std::time::Duration,
    /// Set by `Request::Shutdown`: the loop ends once the current step is handed out.
    pub stopping: bool,
    pub refused: super::refused::RefusedMessages,
    pub started: Instant,
    /// Tells the handles the answer every proposal gets now.
    pub proposal_refusal: RefusalPublisher,
    /// What the handles watch: published when it changes.
    pub watched: Watched,
    pub config: NodeConfig,
}

/// The effects of the engine's decisions, over tokio: the transport, the apply pipeline, snapshot
/// transfer tasks.
pub(super) struct Io<S> {
    /// The Raft group every message and snapshot sent names.
    pub group: GroupId,
    pub transport: Arc<dyn PeerTransport>,
    /// Unbounded, yet bounded in effect: it holds only committed entries the core handed out,
    /// which the core keeps in memory anyway until they are applied and snapshotted.
    pub apply: ApplyWorker<S>,
    pub events_tx: mpsc::UnboundedSender<Event>,
    pub snapshot_data: SnapshotData,
    /// The newest snapshot file's size, for the apply pipeline's snapshot policy.
    pub last_snapshot_bytes: Arc<AtomicU64>,
    /// Snapshot transfers in flight, per follower, with the snapshot each streams; aborted when
    /// replaced or when the driver is dropped (a stopped node streams nothing).
    pub snapshot_sends: HashMap<NodeId, (LogId, AbortOnDrop<()>)>,
    pub metrics: crate::metrics::NodeMetrics,
    /// Where a part of the node that cannot go on records why (`failure.rs`).
    pub failure: Arc<FailureCell>,
    /// Where node messages from peers go (the application's bounded channel).
    pub node_messages: crate::node_messages::NodeMessageInbox,
}

impl<S: StateMachine> Shell for Io<S> {
    type Reply = ProposalReply;
    type Read = ReadFn<S>;
    type Snapshot = SnapshotFile;

    fn send(&mut self, msg: Message) {
        self.transport.send(self.group, msg);
    }

    fn open_snapshot(&mut self, meta: &SnapshotMeta) -> SnapshotFile {
        let path = match &self.snapshot_data {
            Some((id, path)) if *id == meta.last => path.clone(),
            _ => panic!("install of {} without its file", meta.last),
        };
        let file = match keel_wal::Fs::open(&keel_wal::StdFs, &path) {
            Ok(file) => file,
            Err(e) => self
                .failure
                .halt(storage_failure("open the snapshot to restore", &e)),
        };
        let size_bytes = keel_wal::FileHandle::len_bytes(&file).unwrap_or(0);
        self.metrics.installed(meta.last, size_bytes);
        (path, file)
    }

    fn apply(&mut self, item: ApplyItem<S>) {
        self.apply.submit(item);
    }

    fn answer(&mut self, reply: ProposalReply, error: ClientError) {
        let _ = reply.send(Err(error));
    }

    fn refuse_read(&mut self, read: ReadFn<S>, error: ClientError) {
        read(Err(error));
    }

    fn send_snapshot(&mut self, to: NodeId, term: Term, meta: SnapshotMeta) {
        let path = match &self.snapshot_data {
            Some((id, path)) if *id == meta.last => path.clone(),
            _ => {
                tracing::warn!("no file for snapshot {} to send to {to}", meta.last);
                let _ = self.events_tx.send(Event::SnapshotSendFailed(to));
                return;
            }
        };
        let running = self
            .snapshot_sends
            .get(&to)
            .filter(|(_, task)| !task.0.is_finished())
            .map(|(last, _)| *last);
        if !keel_engine::transfer::starts_transfer(running, meta.last) {
            return;
        }
        let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        let sent = self.metrics.snapshot_send(to, size_bytes);
        let last = meta.last;
        let transfer = self
            .transport
            .send_snapshot(self.group, to, term, meta, path);
        let events = self.events_tx.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = transfer.await {
                tracing::info!("snapshot transfer to {to} failed: {e}");
                let _ = events.send(Event::SnapshotSendFailed(to));
            } else {
                sent.done();
            }
        });
        // Replacing an older transfer drops (aborts) it.
        self.snapshot_sends.insert(to, (last, AbortOnDrop(task)));
    }

    fn not_leading(&mut self) {
        // A transfer of a deposed leader would be refused by the follower's core anyway.
        self.snapshot_sends.clear();
    }

    fn leader_addr(&self, node: NodeId) -> Option<std::net::SocketAddr> {
        self.transport.peer_addr(node)
    }
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
        let mut failed = self.io.failure.subscribe();
        // A failure recorded before this task first ran (a thread that failed at once) is no
        // change to the receiver: look at it once here.
        if *failed.borrow_and_update() {
            return;
        }
        loop {
            while self.raft.has_ready() {
                self.handle_ready().await;
            }
            self.check_replay_done();
            self.io.metrics.observe(&self.raft);
            self.publish_proposal_refusal();
            self.publish_view();
            self.note_membership();
            if self.stopping {
                self.engine.stop(&mut self.io);
                tracing::info!(node = self.config.id, "node task stopped");
                return;
            }
            let serving = self.engine.serving();
            tokio::select! {
                biased;
                // A part of the node failed (`failure.rs`): not another word to anyone.
                _ = failed.changed() => return,
                // Completions first: they unblock everything else.
                Some(event) = events.recv() => {
                    self.on_event(event).await;
                    for _ in 1..INPUTS_PER_READY_MAX {
                        let Ok(event) = events.try_recv() else { break };
                        self.on_event(event).await;
                    }
                }
                _ = ticker.tick(), if serving => {
                    self.raft.tick();
                    let events = self.engine.clock().tick(&mut self.raft, wall_clock_ms());
                    log_clock_events(self.config.id, events);
                }
                Some(msg) = inbound.recv(), if serving => {
                    self.on_inbound(msg).await;
                    for _ in 1..INPUTS_PER_READY_MAX {
                        let Ok(msg) = inbound.try_recv() else { break };
                        self.on_inbound(msg).await;
                    }
                }
                request = requests.recv(), if serving => match request {
                    Some(request) => {
                        self.on_request(request);
                        for _ in 1..INPUTS_PER_READY_MAX {
                            let Ok(request) = requests.try_recv() else { break };
                            self.on_request(request);
                        }
                    }
                    None => return, // every handle is gone
                },
            }
        }
    }

    /// The storage thread ended while the node runs: it failed (and recorded why first), or
    /// something killed it. Either way the node cannot persist anything more: it stops.
    fn storage_gone(&self) -> ! {
        self.io.failure.halt(storage_failure(
            "storage thread",
            &"the storage thread stopped",
        ))
    }

    /// Publishes the node's applied index and view to their watchers if they changed. The view is
    /// compared field by field under the channel's read lock (the membership by pointer: the log
    /// replaces it whenever it changes), so the common pass, nothing changed, costs an
    /// uncontended read lock and a few comparisons.
    fn publish_view(&mut self) {
        let applied = self.raft.applied_index();
        self.watched.applied.send_if_modified(|published| {
            let moved = *published != applied;
            *published = applied;
            moved
        });
        let serving = self.engine.serving();
        let unchanged = {
            let view = self.watched.view.borrow();
            view.role == self.raft.role()
                && view.term == self.raft.term()
                && view.leader == self.raft.leader()
                && view.serving == serving
                && Arc::ptr_eq(&view.membership, self.raft.log().membership_shared())
        };
        if !unchanged {
            self.watched
                .view
                .send_replace(view_of(self.config.group, &self.raft, serving));
        }
    }

    /// Tells the handles the answer every proposal gets now, if it changed.
    fn publish_proposal_refusal(&mut self) {
        let refusal = self.engine.proposal_refusal(&self.raft, &self.io);
        self.proposal_refusal.publish(refusal);
    }

    /// A member that left the configuration may be added back later with new storage: its old
    /// incarnation must not keep it out then (S37).
    fn note_membership(&mut self) {
        if let Some(change) = self.departed.observe(self.raft.log()) {
            self.io.transport.configuration_changed(&change);
        }
    }

    fn check_replay_done(&mut self) {
        if !self.engine.check_replay_done(&self.raft) {
            return;
        }
        self.replay_duration = self.started.elapsed();
        let (entries, target) = self.engine.replay();
        tracing::info!(
            node = self.config.id,
            "replayed {entries} entries to the persisted commit index {target} in {:?}; serving",
            self.replay_duration
        );
    }

    fn replay_stats(&self) -> ReplayStats {
        let (entries, target_index) = self.engine.replay();
        ReplayStats {
            target_index,
            entries,
            duration: self.replay_duration,
        }
    }

    /// One `Ready`, routed by the engine: messages out, the write to the storage thread (awaiting
    /// room: the bounded queue throttles the node to its disk), then everything else.
    async fn handle_ready(&mut self) {
        let mut ready = self.raft.ready();
        if let Some(write) = self
            .engine
            .start_ready(&mut ready, wall_clock_ms(), &mut self.io)
        {
            if self
                .storage
                .send(StorageCommand::Write(write))
                .await
                .is_err()
            {
                self.storage_gone();
            }
        }
        self.engine.finish_ready(&self.raft, ready, &mut self.io);
        self.io
            .transport
            .set_snapshot_floor(self.raft.commit_index());
    }

    /// Where snapshot files are written, received and kept: the data directory on the WAL,
    /// `snapshots/` under it on an embedder's storage (`open.rs`).
    fn snapshot_dir(&self) -> &std::path::Path {
        self.config
            .transport
            .snapshot_dir
            .as_deref()
            .unwrap_or(&self.config.data_dir)
    }

    /// Serializes a state view into a snapshot file on a blocking thread (apply goes on), then
    /// queues its adoption with the storage thread. One at a time (`snapshot_writing`).
    fn spawn_snapshot_write(&mut self, meta: SnapshotMeta, view: Box<dyn SnapshotWriter>) {
        let dir = self.snapshot_dir().to_owned();
        let storage = self.storage.clone();
        let events = self.io.events_tx.clone();
        let failure = Arc::clone(&self.io.failure);
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
                    let cmd = StorageCommand::Adopt(SnapshotAdoption { temp, from: None });
                    if storage.send(cmd).await.is_err() {
                        return; // the node is stopping
                    }
                }
                Ok(Err(e)) => failure.halt(storage_failure("write a snapshot", &e)),
                Err(e) => failure.halt(storage_failure("write a snapshot", &e)),
            }
            let _ = events.send(Event::SnapshotWritten);
        });
    }

    #[expect(clippy::too_many_lines)]
    async fn on_event(&mut self, event: Event) {
        match event {
            Event::Persisted(id) => {
                let recovering = self.raft.recovering();
                self.raft.persisted(id);
                if let Some((from, to)) = self.raft.take_lowered_promise() {
                    tracing::warn!(
                        "lowered the promise from {from} to {to}, committed in the cluster: the \
                         members that lack what followed it show that no commit counted this \
                         node's acknowledgement of it; it recovers to {to} from the leader"
                    );
                }
                if let Some(promised) = self.raft.take_released_promise() {
                    tracing::warn!(
                        "whole again: let go of the promise through {} (the members that lack \
                         those entries show that no commit counted this node's acknowledgement \
                         of them); it campaigns and votes as usual on the log it holds",
                        promised
                    );
                } else if let (Some(promised), None) = (recovering, self.raft.recovering()) {
                    tracing::warn!(
                        "whole again: the log holds {} and beyond, every entry this node had \
                         acknowledged before its disk lost them; it campaigns and votes as usual",
                        promised
                    );
                }
            }
            Event::Applied { index, durable } => {
                self.io.metrics.applied(index);
                self.raft.applied(index);
                if durable.is_some() {
                    self.raft.keep_log_after(durable);
                }
            }
            Event::SnapshotTaken { index, view } => {
                if index <= self.raft.snapshot().last.index {
                    self.resolve_snapshot_waiters(self.raft.snapshot().last.index);
                    return;
                }
                let Some(meta) = self.raft.snapshot_meta(index) else {
                    return; // overtaken by an install
                };
                if let Some((meta, view)) = self.snapshot_writing.offer((meta, view)) {
                    self.spawn_snapshot_write(meta, view);
                }
            }
            Event::SnapshotWritten => {
                if let Some((meta, view)) = self.snapshot_writing.finished() {
                    self.spawn_snapshot_write(meta, view);
                }
            }
            Event::SnapshotSaved { meta, path, from } => {
                let last = meta.last;
                let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                self.io.metrics.snapshot_saved(last, size_bytes, from);
                if last.index > self.io.snapshot_data.as_ref().map_or(0, |(id, _)| id.index) {
                    self.io.snapshot_data = Some((last, path));
                    self.io
                        .last_snapshot_bytes
                        .store(size_bytes, std::sync::atomic::Ordering::Relaxed);
                }
                match from {
                    None => {
                        self.raft.snapshot_saved(meta);
                        self.resolve_snapshot_waiters(last.index);
                    }
                    Some((leader, term)) => {
                        self.step_peer(keel_engine::install_message(
                            self.config.id,
                            leader,
                            term,
                            meta,
                        ));
                        self.io.transport.snapshot_settled();
                    }
                }
            }
            Event::SnapshotNotAdopted => self.io.transport.snapshot_settled(),
            Event::SnapshotSendFailed(to) => self.raft.snapshot_send_failed(to),
        }
    }

    /// A snapshot at `index` is durable: it answers every request it covers.
    fn resolve_snapshot_waiters(&mut self, index: Index) {
        let (answered, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.snapshot_waiters)
            .into_iter()
            .partition(|(needed, _)| *needed <= index);
        self.snapshot_waiters = waiting;
        for (_, w) in answered {
            let _ = w.send(Ok(index));
        }
    }

    /// Steps a peer's message into the core, unless no honest peer could have sent it: then it
    /// is dropped, counted and logged (rate limited). Everything a peer says comes through here.
    fn step_peer(&mut self, msg: Message) {
        match self.raft.validate(&msg) {
            Ok(()) => {
                let reading = ClockWatch::reading(&msg);
                let (from, term) = (msg.from, msg.term);
                self.raft.step(msg);
                if let Some(reading) = reading {
                    let now_ms = wall_clock_ms();
                    let events =
                        self.engine
                            .clock()
                            .heard(&mut self.raft, from, term, reading, now_ms);
                    log_clock_events(self.config.id, events);
                }
            }
            Err(why) => self.refused.refused(&msg, why, Instant::now()),
        }
    }

    async fn on_inbound(&mut self, inbound: Inbound) {
        match inbound {
            Inbound::Message { group, message } if group != self.config.group => {
                let mine = self.config.group;
                self.refused
                    .other_group(&message, group, mine, Instant::now());
            }
            Inbound::Message { message, .. } => self.step_peer(message),
            Inbound::NodeMessage { from, message } => self.io.node_messages.deliver(from, message),
            Inbound::PeerAddress { from, addr } => {
                // Addresses this node was given (initial cluster, RAFT.MEMBER ADD here) win; an
                // announced one fills a gap, so every member can answer a member added elsewhere.
                let known = self.io.transport.peer_addr(from);
                if adopts_peer_addr(self.config.id, from, known) {
                    tracing::info!(node = self.config.id, peer = from, %addr, "learned a peer address from its handshake");
                    self.io.transport.set_peer(from, addr);
                }
            }
            Inbound::Snapshot { group, path, .. } if group != self.config.group => {
                tracing::warn!(
                    node = self.config.id,
                    "dropped a snapshot of Raft group {group}: this node is a member of group {} only",
                    self.config.group
                );
                self.io.transport.snapshot_settled();
                let _ = std::fs::remove_file(&path);
            }
            Inbound::Snapshot {
                from,
                term,
                meta,
                path,
                ..
            } => {
                let saved = self.io.snapshot_data.as_ref().map_or(0, |(id, _)| id.index);
                self.on_snapshot_received(from, term, meta, path, saved)
                    .await
            }
            // What a newer transport hands over and this build does not know.
            other => tracing::debug!(
                node = self.config.id,
                "ignored from the transport: {other:?}"
            ),
        }
    }

    /// A snapshot arrived whole from `from` (leader of `term`), durable at `path`.
    async fn on_snapshot_received(
        &mut self,
        from: NodeId,
        term: Term,
        meta: SnapshotMeta,
        path: PathBuf,
        saved: Index,
    ) {
        match keel_engine::adoption(&self.raft, from, term, &meta, saved) {
            Adoption::Refused(why) => {
                self.io.transport.snapshot_settled();
                let install = keel_engine::install_message(self.config.id, from, term, meta);
                self.refused.refused(&install, why, Instant::now());
                let _ = std::fs::remove_file(&path);
            }
            Adoption::NotNeeded => {
                self.io.transport.snapshot_settled();
                let _ = std::fs::remove_file(&path);
            }
            Adoption::Adopt => {
                let cmd = StorageCommand::Adopt(SnapshotAdoption {
                    temp: path,
                    from: Some((from, term)),
                });
                if self.storage.send(cmd).await.is_err() {
                    self.storage_gone();
                }
            }
            Adoption::InstallSaved => {
                let _ = std::fs::remove_file(&path);
                self.io.transport.snapshot_settled();
                let Some((_, saved_path)) = self.io.snapshot_data.clone() else {
                    return;
                };
                let header = keel_wal::Fs::open(&keel_wal::StdFs, &saved_path)
                    .map_err(|e| e.to_string())
                    .and_then(|f| keel_wal::snapshot::verify_snapshot_header(&f, &saved_path));
                match header {
                    Ok(file) => {
                        tracing::info!(
                                "installing the snapshot {} saved here instead of the older {} from {from}",
                                file.meta.last,
                                meta.last
                            );
                        self.step_peer(keel_engine::install_message(
                            self.config.id,
                            from,
                            term,
                            file.meta,
                        ));
                    }
                    Err(e) => tracing::warn!("the snapshot saved here does not verify: {e}"),
                }
            }
        }
    }

    /// One proposal, unless its caller gave up on it: proposing it then would act behind its
    /// back (`ClientError::NotProposed`).
    fn on_propose(
        &mut self,
        data: bytes::Bytes,
        reply: ProposalReply,
        deadline: tokio::time::Instant,
        tracked: Option<(oneshot::Sender<LogId>, Arc<crate::handle::Claim>)>,
    ) {
        let (appended, taken) = match tracked {
            Some((appended, claim)) => (Some(appended), claim.take()),
            None => (None, true),
        };
        if !taken || tokio::time::Instant::now() >= deadline {
            let _ = reply.send(Err(ClientError::NotProposed));
            return;
        }
        let (raft, io) = (&mut self.raft, &mut self.io);
        if let Ok(id) = self.engine.propose(raft, data, reply, io) {
            io.metrics.proposed(id.index);
            if let Some(appended) = appended {
                let _ = appended.send(id);
            }
        }
    }

    fn on_request(&mut self, request: Request<S>) {
        let (raft, io) = (&mut self.raft, &mut self.io);
        match request {
            Request::Propose {
                data,
                reply,
                deadline,
                tracked,
            } => self.on_propose(data, reply, deadline, tracked),
            Request::ProposeBatch(batch, deadline) => {
                if tokio::time::Instant::now() >= deadline {
                    for (_, reply) in batch {
                        let _ = reply.send(Err(ClientError::NotProposed));
                    }
                    return;
                }
                for id in self.engine.propose_batch(raft, batch, io) {
                    io.metrics.proposed(id.index);
                }
            }
            Request::CommitStatus(log_id, reply) => {
                let _ = reply.send(raft.commit_status(log_id));
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
                let Ok(id) = self.engine.propose_membership(raft, change, reply, io) else {
                    return;
                };
                io.metrics.proposed(id.index);
                // Only a learner really added is (re)addressed: a refused attempt, e.g. adding a
                // voter, must not point the connection to a member at another address.
                if let (Some(learner), Some(addr)) = (learner, addr) {
                    io.transport.set_peer(learner, addr);
                }
            }
            Request::Read(read) => self.engine.read(raft, read, io),
            Request::Status(reply) => {
                let _ = reply.send(NodeStatus {
                    raft: self.raft.status(),
                    progress: self.raft.progress(),
                    serving: self.engine.serving(),
                    replay: self.replay_stats(),
                    dropped_messages: self.io.transport.dropped_messages(),
                    refused_messages: self.refused.total(),
                    clock: self.engine.clock().status(wall_clock_ms()),
                });
            }
            Request::Transfer { to, reply } => {
                let _ = reply.send(self.engine.transfer_leadership(raft, to, io));
            }
            Request::SnapshotNow(reply) => {
                self.snapshot_waiters
                    .push((self.engine.handed_out(), reply));
                io.apply.submit(ApplyItem::Snapshot);
            }
            Request::Shutdown => self.stopping = true,
            #[cfg(feature = "debug-hooks")]
            Request::DebugPanic(_unanswered) => panic!(
                "node {}: panic requested (Handle::debug_panic)",
                self.config.id
            ),
        }
    }
}

/// This machine's wall clock, in ms since the Unix epoch: what heartbeats carry, and what
/// keel-redis stamps entries with and runs its time keeper on (one clock for both).
pub fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One log line per change of the clock hold or the leader's outlier state.
fn log_clock_events(node: NodeId, events: Vec<ClockEvent>) {
    let ms_max = "max-clock-offset-ms";
    for event in events {
        match event {
            ClockEvent::Held { leader, offset_ms } => tracing::warn!(
                node, leader, offset_ms,
                "this node's clock is further from the leader's than {ms_max} allows: it will not campaign until that changes"
            ),
            ClockEvent::Released { offset_ms } => tracing::info!(
                node, ?offset_ms,
                "this node's clock offset is within {ms_max} again (or no longer measured): it may campaign"
            ),
            ClockEvent::Outlier { disagreeing, voters } => tracing::warn!(
                node, disagreeing, voters,
                "this leader's clock is further than {ms_max} from a majority of the voters' clocks: expiry follows this leader's clock; fix its time"
            ),
            ClockEvent::NoLongerOutlier => tracing::info!(
                node,
                "this node's clock agrees with a majority of the voters' again (or it no longer leads)"
            ),
        }
    }
}
