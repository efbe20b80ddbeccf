//! A node's application side as the server runs it, hosted in the simulated world: keel-engine
//! routes the core's output and the clients' requests ([`NodeEngine`]), its ordered pipeline
//! applies entries and restores ([`ApplyQueue`], [`Applier`]), and the state machine is keel-redis's
//! ([`KvAdapter`]). What the shell does with the engine's effects — network, disk, clock — is the
//! simulated world's.
//!
//! The `SimShell` collects the engine's effects and the world carries them out: messages to the
//! simulated network, outcomes and refusals to the connection whose request it was, snapshot
//! transfers (`transfer.rs`). The pipeline applies at once, or slowly (a batch per event) when
//! the seed draws a slow state machine; with `--mutation dedup-off` the state machine's
//! deduplication is off. Snapshots are written as the runtime writes them (one at a time, the
//! bytes the state machine's view writes) and reach the disk after a disk latency. A node still
//! replaying neither ticks nor takes peer messages or client requests, as in the runtime. The
//! configuration agreement check lives here: a member of the newest configuration applied
//! anywhere that applied at least as far holds it.

use std::collections::BTreeMap;

use bytes::Bytes;
use keel_core::{EntryPayload, Index, LogId, Message, NodeId, SnapshotMeta, Term};
use keel_engine::{
    Applier, ApplyItem, ApplyQueue, ClientError, ClockPolicy, EngineLimits, NodeEngine, Shell,
    SnapshotPolicy, SnapshotWriter, SnapshotWriting, StateMachine, StorageCommand,
};
use rand::Rng;

use crate::disk::SnapshotAdoption;
use crate::mutation::Layers;
use crate::user::User;
use crate::world::{Event, World};

/// A proposal: answered by the entry it became, or refused. The write (or EXEC) in slot `slot` of
/// the pipeline of connection `connection` (a client's, or a forwarding node's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProposalToken {
    pub connection: u64,
    pub slot: u64,
}

/// A linearizable read, in slot `slot` of connection `connection`. `floor` is the highest commit
/// index any node had reached when it started: its read index may not be lower.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadToken {
    pub connection: u64,
    pub slot: u64,
    pub floor: Index,
}

pub(crate) type SimEngine = NodeEngine<ProposalToken, ReadToken>;
/// A restore reads the snapshot's bytes, looked up when it was queued (`None`: this node never
/// received that snapshot, a violation found when the restore runs).
type SimQueue = ApplyQueue<ProposalToken, ReadToken, Option<Bytes>>;
type SimItem = ApplyItem<ProposalToken, ReadToken, Option<Bytes>>;

/// The user's state machine, with the simulator's one test-only switch:
/// `RunConfig::break_replay` skips the first command a restarted node applies, as a state machine
/// whose applied index was saved ahead of its effects would (S24).
pub(crate) struct SimStateMachine<M> {
    machine: M,
    skip_next_command: bool,
}

impl<M> SimStateMachine<M> {
    pub fn new(machine: M, skip_next_command: bool) -> Self {
        SimStateMachine {
            machine,
            skip_next_command,
        }
    }

    pub fn machine(&self) -> &M {
        &self.machine
    }
}

impl<M: StateMachine> StateMachine for SimStateMachine<M> {
    fn apply(
        &mut self,
        at: keel_core::LogId,
        data: &Bytes,
    ) -> Result<Bytes, keel_engine::ApplyError> {
        if std::mem::take(&mut self.skip_next_command) {
            return Ok(Bytes::new());
        }
        self.machine.apply(at, data)
    }
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        self.machine.snapshot_view()
    }
    fn restore(
        &mut self,
        last: LogId,
        data: &mut dyn std::io::Read,
    ) -> Result<(), keel_engine::RestoreError> {
        self.machine.restore(last, data)
    }
}

/// What runs beside the core while a node is up (gone with a crash, rebuilt at restart).
pub(crate) struct App<U: User> {
    pub engine: SimEngine,
    pub applier: Applier<SimStateMachine<U::Machine>>,
    queue: SimQueue,
    apply_scheduled: bool,
    /// Snapshots taken here: one written at a time, the newest view waiting.
    snapshot_writing: SnapshotWriting<(SnapshotMeta, Box<dyn SnapshotWriter>)>,
    /// What the user keeps beside the engine (keel's key-value user: when this node, leading,
    /// proposes a tick entry, `time.rs`; an embedder's user keeps nothing).
    #[cfg_attr(not(feature = "kv"), expect(dead_code))]
    pub user: U::NodeApp,
}

/// Bounds on what a node holds for clients (the runtime's defaults are larger; these are never
/// reached by the simulated clients, a few requests each).
fn limits() -> EngineLimits {
    EngineLimits {
        pending_proposals_max: 1024,
        pending_reads_max: 1024,
        entry_bytes_max: crate::disk::entry_bytes_max(),
    }
}

impl<U: User> App<U> {
    /// The application of a node that starts with its state machine at `applied` and must replay
    /// to `replay_target`.
    pub fn new(
        id: NodeId,
        sm: SimStateMachine<U::Machine>,
        applied: Index,
        replay_target: Index,
        snapshot_every_entries: u64,
        clock: ClockPolicy,
        mutation: Option<crate::Mutation>,
    ) -> App<U> {
        let policy = SnapshotPolicy {
            entries_max: snapshot_every_entries,
            bytes_max: u64::MAX,
            bytes_min: u64::MAX,
            log_to_state_ratio: 0,
        };
        let mut engine = NodeEngine::new(id, limits(), clock, applied, replay_target);
        engine.clock().set_mutation(mutation.core());
        App {
            engine,
            applier: Applier::new(sm, applied, policy),
            queue: ApplyQueue::with_mutation(mutation.core()),
            apply_scheduled: false,
            snapshot_writing: SnapshotWriting::default(),
            user: U::node_app(),
        }
    }

    /// The digest of the state machine's state (`User::digest`).
    pub fn digest(&self) -> u64 {
        U::digest(self.applier.state().machine())
    }
}

/// A digest of what an apply answered: its bytes, or the state machine's refusal.
fn answer_digest(result: &Result<Bytes, Bytes>) -> u64 {
    let (tag, bytes) = match result {
        Ok(bytes) => (0u8, bytes),
        Err(reason) => (1u8, reason),
    };
    crate::embed::fnv1a(&[&[tag], bytes])
}

/// An effect of the engine, carried out by the world once the engine call returned.
pub(crate) enum Effect {
    Send(Message),
    Refused(ProposalToken, ClientError),
    ReadRefused(ReadToken, ClientError),
    ReadIndexed(ReadToken, Index),
    SendSnapshot(NodeId, Term, SnapshotMeta),
    NotLeading,
}

/// The simulated world's shell: the apply pipeline is the node's own queue; everything else is
/// collected and carried out in order by [`World::carry_out`].
pub(crate) struct SimShell<'a> {
    snapshots: &'a BTreeMap<Index, Bytes>,
    queue: &'a mut SimQueue,
    pub effects: Vec<Effect>,
}

impl<'a> SimShell<'a> {
    pub fn new<U: User>(
        app: &'a mut App<U>,
        snapshots: &'a BTreeMap<Index, Bytes>,
    ) -> (Self, &'a mut SimEngine) {
        (
            SimShell {
                snapshots,
                queue: &mut app.queue,
                effects: Vec::new(),
            },
            &mut app.engine,
        )
    }
}

impl Shell for SimShell<'_> {
    type Reply = ProposalToken;
    type Read = ReadToken;
    type Snapshot = Option<Bytes>;

    fn send(&mut self, msg: Message) {
        self.effects.push(Effect::Send(msg));
    }
    fn open_snapshot(&mut self, meta: &SnapshotMeta) -> Option<Bytes> {
        self.snapshots.get(&meta.last.index).cloned()
    }
    fn apply(&mut self, item: SimItem) {
        self.queue.push(item);
    }
    fn answer(&mut self, reply: ProposalToken, error: ClientError) {
        self.effects.push(Effect::Refused(reply, error));
    }
    fn refuse_read(&mut self, read: ReadToken, error: ClientError) {
        self.effects.push(Effect::ReadRefused(read, error));
    }
    fn read_indexed(&mut self, read: &ReadToken, index: Index) {
        self.effects.push(Effect::ReadIndexed(*read, index));
    }
    fn send_snapshot(&mut self, to: NodeId, term: Term, meta: SnapshotMeta) {
        self.effects.push(Effect::SendSnapshot(to, term, meta));
    }
    fn not_leading(&mut self) {
        self.effects.push(Effect::NotLeading);
    }
    fn leader_addr(&self, _node: NodeId) -> Option<std::net::SocketAddr> {
        None
    }
}

impl<U: User> World<U> {
    /// Carries out what an engine call of node `id` decided, in the order it decided it.
    pub(crate) fn carry_out(&mut self, id: NodeId, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Send(msg) => self.send(msg),
                Effect::Refused(token, error) => U::write_settled(self, token, Err(error)),
                Effect::ReadRefused(token, error) => U::read_refused(self, token, error),
                Effect::ReadIndexed(token, index) => {
                    if index < token.floor {
                        let detail = format!(
                            "node {id} served a read at index {index} below commit {} reached \
                             before it started",
                            token.floor
                        );
                        return self.violate("read index", detail);
                    }
                }
                Effect::SendSnapshot(to, term, meta) => self.start_transfer(id, to, term, meta),
                Effect::NotLeading => self.stop_sends(id),
            }
        }
    }

    /// Applies what the pipeline holds: all of it at once, or one item per `apply_delay` when
    /// the seed draws a slow state machine.
    pub(crate) fn pump_apply(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        let Some(app) = self.nodes[idx].app.as_mut() else {
            return;
        };
        if self.params.apply_delay == 0 || self.healing {
            let n = app.queue.len();
            self.apply_items(id, n);
        } else if !app.apply_scheduled && !app.queue.is_empty() {
            app.apply_scheduled = true;
            let incarnation = self.nodes[idx].incarnation;
            let delay = self.rng.random_range(1..=self.params.apply_delay);
            self.schedule(
                delay,
                Event::Apply {
                    node: id,
                    incarnation,
                },
            );
        }
    }

    /// The `Apply` event of a slow pipeline.
    pub(crate) fn apply_batch(&mut self, id: NodeId, incarnation: u64) {
        let idx = (id - 1) as usize;
        if self.nodes[idx].incarnation != incarnation {
            return;
        }
        let Some(app) = self.nodes[idx].app.as_mut() else {
            return;
        };
        app.apply_scheduled = false;
        self.apply_items(id, self.params.apply_batch);
        self.pump_apply(id);
        self.drive(id);
    }

    fn apply_items(&mut self, id: NodeId, count: usize) {
        let idx = (id - 1) as usize;
        for _ in 0..count {
            if self.violation.is_some() {
                return;
            }
            let Some(item) = self.nodes[idx].app.as_mut().and_then(|a| a.queue.pop()) else {
                break;
            };
            match item {
                ApplyItem::Entries(batch) => self.apply_entries(id, batch),
                ApplyItem::Restore { meta, snapshot } => self.restore(id, meta, snapshot),
                ApplyItem::Read(token) => U::read_served(self, id, token),
                ApplyItem::Snapshot => self.take_snapshot(id),
            }
        }
    }

    fn apply_entries(&mut self, id: NodeId, batch: Vec<(keel_core::Entry, Option<ProposalToken>)>) {
        let idx = (id - 1) as usize;
        let World {
            nodes,
            checker,
            membership,
            ..
        } = self;
        let node = &mut nodes[idx];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        let mut violation = None;
        let mut answers = Vec::new();
        let result = app
            .applier
            .apply_entries(batch, |entry, token, result, sm| {
                if violation.is_some() {
                    return;
                }
                if let Err(v) = checker.applied(id, entry) {
                    violation = Some(v);
                    return;
                }
                if let EntryPayload::Membership(m) = &entry.payload {
                    let leader = checker.leader_of(entry.term);
                    membership.applied(entry.index, m, leader);
                }
                if let Err(v) = checker.state_digest(id, entry.index, U::digest(sm.machine())) {
                    violation = Some(v);
                    return;
                }
                if let Err(v) = checker.apply_answer(id, entry.index, answer_digest(&result)) {
                    violation = Some(v);
                    return;
                }
                if let Some(token) = token {
                    answers.push((token, result));
                }
            });
        let applied = app.applier.applied();
        raft.applied(applied);
        let snapshot_due = app.applier.snapshot_due(0);
        if let Err(e) = result {
            return self.violate("apply order", format!("node {id}: {e}"));
        }
        if let Some(v) = violation {
            return self.fail(v);
        }
        self.check_configuration(id);
        for (token, result) in answers {
            U::write_settled(self, token, result.map_err(ClientError::Refused));
        }
        if snapshot_due {
            self.take_snapshot(id);
        }
    }

    /// Replaces the state machine by the snapshot at `meta.last` (received and durable).
    fn restore(&mut self, id: NodeId, meta: SnapshotMeta, snapshot: Option<Bytes>) {
        let idx = (id - 1) as usize;
        let index = meta.last.index;
        let Some(data) = snapshot else {
            let detail = format!("node {id} must restore snapshot {index} it never received");
            return self.violate("snapshot install", detail);
        };
        if let Err(v) = self.checker.restored(id, index) {
            return self.fail(v);
        }
        self.trace_line(|| format!("n{id} restores snapshot {}", meta.last));
        self.membership.restored(&meta);
        let node = &mut self.nodes[idx];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        if let Err(e) = app.applier.restore(&meta, &mut &data[..]) {
            return self.violate("apply order", format!("node {id}: {e}"));
        }
        raft.applied(index);
        let digest = app.digest();
        if let Err(v) = self.checker.state_digest(id, index, digest) {
            return self.fail(v);
        }
        self.check_configuration(id);
    }

    /// Configuration agreement: a member of the newest configuration known applied anywhere that
    /// applied at least as far holds that configuration at its applied index (its log, or the
    /// snapshot it stands on, says the same as the entry that set it). A node that lost the
    /// record of its configuration would otherwise run on as a member of nothing, never
    /// campaigning (seed 21072088, before the bootstrap snapshot was kept).
    fn check_configuration(&mut self, id: NodeId) {
        if self.unplanned_wipes {
            // A member wiped in place lost its configuration with everything else: the known
            // limit those runs exist to show (`wipe.rs`).
            return;
        }
        let Some(raft) = self.nodes[(id - 1) as usize].raft.as_ref() else {
            return;
        };
        let applied = raft.applied_index();
        let (index, committed) = self.membership.committed();
        let held = raft.log().membership_at(applied);
        // A node outside that configuration may be a joiner replicating the entries before the
        // one that adds it, a configuration no node has applied yet.
        if applied >= index && committed.contains(id) && held != committed {
            let detail = format!(
                "node {id} applied through {applied} holds {held:?}, but the configuration \
                 applied at {index} is {committed:?}"
            );
            self.violate("configuration agreement", detail);
        }
    }

    /// Captures a view of the state at the applied index and, unless one is being written,
    /// writes it (it reaches the disk after a disk latency: `SnapshotSaved`).
    fn take_snapshot(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        let node = &mut self.nodes[idx];
        let (Some(raft), Some(app)) = (node.raft.as_ref(), node.app.as_mut()) else {
            return;
        };
        let (index, view) = app.applier.take_snapshot();
        if index <= raft.snapshot().last.index {
            return;
        }
        let Some(meta) = raft.snapshot_meta(index) else {
            return; // overtaken by an install
        };
        if let Some((meta, view)) = app.snapshot_writing.offer((meta, view)) {
            self.write_snapshot(id, meta, view);
        }
    }

    fn write_snapshot(&mut self, id: NodeId, meta: SnapshotMeta, view: Box<dyn SnapshotWriter>) {
        let mut data = Vec::new();
        view.write_to(&mut data)
            .expect("writing to memory does not fail");
        self.check_round_trip(id, &meta, &data);
        let incarnation = self.nodes[(id - 1) as usize].incarnation;
        let delay = 1 + self.rng.random_range(0..=self.params.disk_latency_max);
        self.schedule(
            delay,
            Event::SnapshotSaved {
                node: id,
                incarnation,
                meta,
                data: Bytes::from(data),
            },
        );
    }

    /// A snapshot restored into a fresh state machine holds the state it was taken from: the
    /// digest every replica had at its index.
    fn check_round_trip(&mut self, id: NodeId, meta: &SnapshotMeta, data: &[u8]) {
        let index = meta.last.index;
        let mut fresh = self.user.machine(None, self.mutation);
        if let Err(e) = fresh.restore(meta.last, &mut &data[..]) {
            let detail = format!("node {id}: its snapshot at {index} does not restore: {e}");
            return self.violate("snapshot round trip", detail);
        }
        if let Err(v) = self.checker.round_trip(id, index, U::digest(&fresh)) {
            self.fail(v);
        }
    }

    /// A snapshot this node took is written out: its adoption goes to the storage worker, in
    /// order with the writes (as the runtime's snapshot thread hands it to the storage thread).
    pub(crate) fn snapshot_saved(
        &mut self,
        id: NodeId,
        incarnation: u64,
        meta: SnapshotMeta,
        data: Bytes,
    ) {
        let idx = (id - 1) as usize;
        if self.nodes[idx].incarnation != incarnation || self.nodes[idx].raft.is_none() {
            return;
        }
        let next = self.nodes[idx]
            .app
            .as_mut()
            .and_then(|app| app.snapshot_writing.finished());
        if let Some((next_meta, view)) = next {
            self.write_snapshot(id, next_meta, view);
        }
        let adoption = SnapshotAdoption {
            meta,
            data,
            from: None,
        };
        self.submit_storage(id, StorageCommand::Adopt(adoption));
    }

    /// A snapshot is this node's newest, durably. One taken here lets the core compact; one
    /// received is stepped into the core, which decides whether to install it.
    pub(crate) fn snapshot_adopted(&mut self, id: NodeId, adoption: SnapshotAdoption) {
        let idx = (id - 1) as usize;
        let SnapshotAdoption { meta, data, from } = adoption;
        let index = meta.last.index;
        let node = &mut self.nodes[idx];
        node.snapshot_data.insert(index, data);
        let raft = node.raft.as_mut().expect("a worker reports on a live node");
        match from {
            None => {
                raft.snapshot_saved(meta);
                self.trace_line(|| format!("n{id} saved snapshot at {index}"));
            }
            Some((leader, term)) => {
                let msg = keel_engine::install_message(id, leader, term, meta);
                self.trace_line(|| format!("snapshot {index} n{leader}->n{id} adopted"));
                // The transport may deliver its final message twice, the copy much later (a
                // retransmission): the install rules must make the late copy harmless (S03, S13).
                if !self.healing
                    && self
                        .rng
                        .random_bool(self.params.duplicate_probability.max(0.05))
                {
                    let delay = self.rng.random_range(1..=20 * self.params.net_delay_max);
                    let storage = self.nodes[(leader - 1) as usize].storage;
                    self.schedule(delay, Event::Deliver(msg.clone(), storage));
                }
                self.step_install(id, msg);
                return;
            }
        }
        self.prune_snapshot_data(id);
        self.drive(id);
    }

    /// Steps a received snapshot's `InstallSnapshot` into node `id`'s core, as the runtime does
    /// once the snapshot is durable; the receiver has then handled what it was handed.
    pub(crate) fn step_install(&mut self, id: NodeId, msg: keel_core::Message) {
        let idx = (id - 1) as usize;
        let raft = self.nodes[idx].raft.as_mut().expect("a live node");
        if let Err(e) = raft.validate(&msg) {
            let detail = format!("n{id} refused {msg:?}: {e}");
            return self.violate("peer message validation", detail);
        }
        raft.step(msg);
        self.nodes[idx].receiver.settled();
        self.prune_snapshot_data(id);
        self.drive(id);
    }

    /// Keeps the data of the core's snapshot (it may have to send it), of every one whose file
    /// storage keeps (a restart falls back to an older one when the newest is damaged), and
    /// anything newer (a transfer may have brought one that is not installed yet); older data
    /// is never needed again.
    fn prune_snapshot_data(&mut self, id: NodeId) {
        let node = &mut self.nodes[(id - 1) as usize];
        let raft = node.raft.as_ref().expect("a live node");
        let keep_from = node
            .disk
            .oldest_snapshot_index()
            .min(raft.snapshot().last.index);
        node.snapshot_data.retain(|i, _| *i >= keep_from);
    }
}
