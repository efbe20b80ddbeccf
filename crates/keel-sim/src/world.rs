//! The simulated world: nodes over simulated disks, a simulated network, a clock and clients, all
//! driven by one event queue in simulated time. Everything random comes from one seeded RNG, so a
//! seed replays exactly.

use crate::mutation::Layers;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use bytes::Bytes;
use keel_core::{
    Config, Index, Membership, Message, MessageBody, NodeId, RaftNode, Role, SnapshotMeta,
};
use keel_engine::handshake::{DepartedMembers, HandshakeGate};
use keel_engine::transfer::SnapshotReceiver;
use keel_engine::{Completion, StorageCommand};
use keel_wal::SimFs;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::coverage::MembershipTracker;
use crate::disk::{SimDisk, SnapshotAdoption};
use crate::host::{App, SimShell};
use crate::invariants::{Checker, Violation};
use crate::params::{Params, TICK_INTERVAL};
use crate::user::User;

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seed: u64,
    /// Events processed under faults before the cluster is healed.
    pub fault_steps: u64,
    pub trace: bool,
    pub mutation: Option<crate::Mutation>,
    /// Test-only: a restarted node skips the first command it replays, as a state machine whose
    /// applied index was saved ahead of its effects would (S24). The simulator must catch it.
    pub break_replay: bool,
    /// Draw only the three- and five-voter shapes (`Params::draw_classic`): replays a seed
    /// recorded before membership of every size existed.
    pub classic_shapes: bool,
    /// Forward a connection's refused writes one at a time (`Params::single_forwards`): replays
    /// a seed recorded before a follower forwarded them together.
    pub single_forwards: bool,
    /// How the seeds that draw disk replacements carry them out (`wipe.rs`).
    pub disk_replacements: DiskReplacements,
    /// Which seeds draw storage faults (`storage_faults.rs`).
    pub storage_faults: crate::StorageFaults,
    /// keel's key-value simulation runs the queue workload beside the register clients
    /// (`queues/`: lists as queues, blocking pops, a stream's consumer group). Off, a seed runs
    /// as it did before the workload existed (the runs `tests/simulator.rs` pins).
    pub queues: bool,
    /// keel's key-value simulation's register clients also do their operations with scripts
    /// (`EVAL`, run as the server runs them: `scripts.rs`). Off, a seed runs as it did before
    /// (the runs `tests/simulator.rs` pins).
    pub scripts: bool,
}

impl RunConfig {
    /// Seed `seed` as the sweeps run it: 20,000 events under faults, no trace, no mutation,
    /// storage faults in a quarter of the seeds over the WAL, the queue workload.
    pub fn new(seed: u64) -> RunConfig {
        RunConfig {
            seed,
            fault_steps: 20_000,
            trace: false,
            mutation: None,
            break_replay: false,
            classic_shapes: false,
            single_forwards: false,
            disk_replacements: DiskReplacements::Off,
            storage_faults: crate::StorageFaults::Share,
            queues: true,
            scripts: true,
        }
    }
}

/// Disk replacements under the same node id (`wipe.rs`): off unless asked for, then drawn in a
/// quarter of the seeds. Both modes show limits of a same-id rebuild (docs/sweeps.md); the
/// supported way to replace a disk is a new node id, which is an ordinary membership change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DiskReplacements {
    #[default]
    Off,
    /// Removed first, then wiped and added back.
    Planned,
    /// Wiped while still a member, then removed and added back.
    Unplanned,
}

pub(crate) enum Event<U: User> {
    Tick(NodeId),
    /// A peer message arrives, sent under this storage incarnation of its sender (whose disk
    /// may be wiped while it travels).
    Deliver(Message, u64),
    /// The node's storage worker runs its next unit of work (a group commit or an adoption).
    DiskWork {
        node: NodeId,
        incarnation: u64,
    },
    Crash(NodeId),
    Restart(NodeId),
    ClientWake {
        client: usize,
        generation: u64,
    },
    ClientDeadline {
        client: usize,
        history_index: usize,
    },
    Nemesis,
    HealPartition {
        generation: u64,
    },
    /// Run the next batch of a slow apply pipeline.
    Apply {
        node: NodeId,
        incarnation: u64,
    },
    /// A snapshot the node took reached its disk.
    SnapshotSaved {
        node: NodeId,
        incarnation: u64,
        meta: SnapshotMeta,
        data: Bytes,
    },
    /// A snapshot transfer's frame arrives, or its sender reconnects.
    Transfer(crate::transfer::TransferEvent),
    /// One of the user's own (keel's key-value user: a forwarded write's request, reply or
    /// timer; an embedder's user has none).
    #[cfg_attr(not(feature = "kv"), expect(dead_code))]
    User(U::Event),
}

/// A queue entry: the event itself waits in `World::events`, so the heap moves 24 bytes.
struct Scheduled {
    time: u64,
    seq: u64,
    slot: u32,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

pub(crate) struct SimNode<U: User> {
    pub id: NodeId,
    pub raft: Option<RaftNode>,
    /// The engine, apply pipeline and state machine beside the core (`None` while down).
    pub app: Option<App<U>>,
    pub disk: SimDisk,
    /// Counts the node's starts (events of an earlier life are ignored).
    pub incarnation: u64,
    /// The storage incarnation it announces to peers: new when its disk is wiped.
    pub storage: u64,
    /// The handshake decisions about its peers (keel-engine's), remembered on its disk.
    pub gate: HandshakeGate<SimFs>,
    /// Which members left its configuration, to forget their storage (`None` while down).
    pub departed: Option<DepartedMembers>,
    /// Durable snapshot data by index (the metadata lives in `disk`); survives crashes.
    pub snapshot_data: BTreeMap<Index, Bytes>,
    /// The receiving side of snapshot transfers; its partial file is on the node's disk, its
    /// memory is lost in a crash.
    pub receiver: SnapshotReceiver<SimFs>,
    /// Role and commit index after the last step, to notice elections and commits.
    pub last_role: Role,
    pub last_commit: Index,
    /// Shut down for good after its removal from the cluster (see `World::retire_removed`).
    pub retired: bool,
    /// While down, the latest configuration its log held when it went down (durable or not, so
    /// perhaps newer than what it restarts with): a configuration that matters to how many
    /// nodes the storage faults may damage (`storage_faults.rs`).
    pub membership_when_down: Option<Membership>,
}

impl<U: User> SimNode<U> {
    /// The applied index and state digest of a live node.
    pub fn applied_state(&self) -> Option<(Index, u64)> {
        let app = self.app.as_ref()?;
        Some((app.applier.applied(), app.digest()))
    }
}

pub(crate) struct World<U: User> {
    pub rng: ChaCha8Rng,
    pub params: Params,
    pub now: u64,
    pub steps: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    /// The queued events, by slot; `free_slots` lists the empty ones.
    events: Vec<Option<Event<U>>>,
    free_slots: Vec<u32>,
    pub nodes: Vec<SimNode<U>>,
    /// Directed links that drop everything: (from, to).
    pub blocked: BTreeSet<(NodeId, NodeId)>,
    pub partition_generation: u64,
    pub healing: bool,
    /// Times a node held its campaigns because of its clock, and a leader found its own clock
    /// the outlier (`clock_watch.rs`).
    pub clock_holds: u64,
    pub clock_outliers: u64,
    /// The user of the simulation: its clients, their history and its counters
    /// (`kv_user.rs`: keel's own key-value clients).
    pub user: U,
    pub checker: Checker,
    pub membership: MembershipTracker,
    pub violation: Option<Violation>,
    /// Snapshot transfers under way: sends and their connections.
    pub transfers: crate::transfer::Transfers,
    /// A member whose disk is being replaced, until it is back (`wipe.rs`).
    pub wiped: Option<crate::wipe::Wiped>,
    /// Nodes whose disks storage faults damaged, until whole (`storage_faults.rs`).
    pub storage: crate::storage_faults::Damage,
    pub unplanned_wipes: bool,
    pub mutation: Option<crate::Mutation>,
    pub(crate) break_replay: bool,
    trace_on: bool,
    pub trace: Vec<String>,
    trace_digest: u64,
}

impl<U: User> World<U> {
    /// The world of one seed, with the user `make_user` builds for the seed's parameters.
    pub fn with_user(cfg: &RunConfig, make_user: impl FnOnce(&Params) -> U) -> World<U> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut params = if cfg.classic_shapes {
            let mut p = Params::draw_classic(&mut rng);
            p.draw_clocks(cfg.seed);
            p
        } else {
            Params::draw(cfg.seed, &mut rng)
        };
        if cfg.disk_replacements == DiskReplacements::Off {
            params.wipe_weight = 0;
        }
        params.single_forwards = cfg.single_forwards;
        params.storage_fault_weight = cfg.storage_faults.weight(cfg.seed, params.use_wal);
        let nodes = new_nodes(&params, cfg.mutation);
        let initial_voters = params.initial_voters;
        let user = make_user(&params);
        let mut world = World {
            rng,
            params,
            now: 0,
            steps: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            free_slots: Vec::new(),
            nodes,
            blocked: BTreeSet::new(),
            partition_generation: 0,
            healing: false,
            clock_holds: 0,
            clock_outliers: 0,
            user,
            checker: Checker::default(),
            membership: MembershipTracker::new(initial_voters),
            violation: None,
            transfers: Default::default(),
            wiped: None,
            storage: Default::default(),
            unplanned_wipes: cfg.disk_replacements == DiskReplacements::Unplanned,
            mutation: cfg.mutation,
            break_replay: cfg.break_replay,
            trace_on: cfg.trace,
            trace: Vec::new(),
            trace_digest: 0xcbf2_9ce4_8422_2325,
        };
        let params = world.params.clone();
        world.trace_line(|| format!("params {}", params.trace_text()));
        for id in 1..=world.params.node_count as NodeId {
            world.start_node(id);
            let offset = world.rng.random_range(0..TICK_INTERVAL);
            world.schedule(offset, Event::Tick(id));
        }
        for c in 0..world.params.clients {
            let delay = world.rng.random_range(0..50);
            world.schedule(
                delay,
                Event::ClientWake {
                    client: c,
                    generation: 0,
                },
            );
        }
        let first = world.params.nemesis_interval;
        world.schedule(first, Event::Nemesis);
        world
    }

    pub fn pop(&mut self) -> Option<(u64, Event<U>)> {
        let Reverse(s) = self.queue.pop()?;
        let event = self.events[s.slot as usize]
            .take()
            .expect("a queued slot holds its event");
        self.free_slots.push(s.slot);
        Some((s.time, event))
    }

    pub fn trace_digest(&self) -> u64 {
        self.trace_digest
    }

    /// What node `id`'s wall clock reads now (`clock.rs`), in ms since the Unix epoch.
    pub fn wall_ms(&self, id: NodeId) -> u64 {
        self.params.clocks[(id - 1) as usize].wall_ms(self.now)
    }

    pub fn schedule(&mut self, delay: u64, event: Event<U>) {
        self.seq += 1;
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.events[slot as usize] = Some(event);
                slot
            }
            None => {
                self.events.push(Some(event));
                (self.events.len() - 1) as u32
            }
        };
        self.queue.push(Reverse(Scheduled {
            time: self.now + delay,
            seq: self.seq,
            slot,
        }));
    }

    /// Records a trace line, formatted only when tracing.
    pub fn trace_line(&mut self, line: impl FnOnce() -> String) {
        if self.trace_on {
            let text = format!("t={} {}", self.now, line());
            if std::env::var_os("KEEL_SIM_TRACE_LIVE").is_some() {
                // Survives a panic, which discards the collected trace.
                eprintln!("{text}");
            }
            self.trace.push(text);
        }
    }

    /// Folds the numbers that identify an event into the run's digest (cheap enough for every
    /// step; two runs of one seed must produce the same digest).
    pub fn digest_event(&mut self, words: [u64; 4]) {
        for w in [self.now, words[0], words[1], words[2], words[3]] {
            self.trace_digest ^= w;
            self.trace_digest = self.trace_digest.wrapping_mul(0x100_0000_01b3);
        }
    }

    pub(crate) fn node_config(&self, id: NodeId, incarnation: u64) -> Config {
        let mut c = Config::new(id);
        c.seed = self.rng_seed_for(id, incarnation);
        c.election_timeout_ticks = self.params.election_timeout_ticks;
        c.heartbeat_interval_ticks = self.params.heartbeat_interval_ticks;
        c.pre_vote = self.params.pre_vote;
        c.check_quorum = self.params.check_quorum;
        c.entries_per_message_max = self.params.entries_per_message_max;
        c.inflight_messages_max = self.params.inflight_messages_max;
        c.hold_partial_appends = self.params.hold_partial_appends;
        c.apply_entries_max = 64;
        c.snapshot_trailing_entries = self.params.snapshot_trailing;
        c.mutation = self.mutation.core();
        c
    }

    fn rng_seed_for(&self, id: NodeId, incarnation: u64) -> u64 {
        // Derived, not drawn, so that adding a node does not shift every other random choice.
        (self.params.node_count as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(id.wrapping_mul(0xbf58_476d_1ce4_e5b9))
            .wrapping_add(incarnation.wrapping_mul(0x94d0_49bb_1331_11eb))
    }

    /// Hands a write or an adoption to node `id`'s storage worker; the disk gets to it after a
    /// latency, in order with what was handed before.
    pub(crate) fn submit_storage(&mut self, id: NodeId, command: StorageCommand<SnapshotAdoption>) {
        let mut latency = 1 + self.rng.random_range(0..=self.params.disk_latency_max);
        if !self.healing && self.rng.random_bool(self.params.slow_disk_probability) {
            latency += self.params.slow_disk_latency;
        }
        let idx = (id - 1) as usize;
        let node = &mut self.nodes[idx];
        let done = (self.now + latency).max(node.disk.last_completion);
        node.disk.last_completion = done;
        let incarnation = node.incarnation;
        node.disk.submit(command);
        let delay = done - self.now;
        self.schedule(
            delay,
            Event::DiskWork {
                node: id,
                incarnation,
            },
        );
    }

    /// The storage worker of node `id` runs its next unit of work and reports it.
    pub(crate) fn disk_work(&mut self, id: NodeId, incarnation: u64) {
        let idx = (id - 1) as usize;
        if self.nodes[idx].incarnation != incarnation || self.nodes[idx].raft.is_none() {
            return;
        }
        let Some(done) = self.nodes[idx].disk.run_next() else {
            return; // a group commit before took this one along
        };
        match done {
            Err(e) => self.violate("storage", format!("node {id}: {e}")),
            Ok(Completion::Persisted(write_id)) => {
                self.digest_event([3, id, write_id, 0]);
                let raft = self.nodes[idx].raft.as_mut().expect("checked");
                raft.persisted(write_id);
                if let Some(promised) = raft.take_released_promise() {
                    self.storage.released += 1;
                    self.trace_line(|| format!("n{id} let go of its promise {promised}"));
                }
                self.note_whole(id);
                self.drive(id);
            }
            Ok(Completion::Adopted(adoption)) => self.snapshot_adopted(id, adoption),
            Ok(Completion::NotAdopted) => {
                self.nodes[idx].receiver.settled();
                self.trace_line(|| format!("n{id} drops a snapshot: storage has a newer one"));
            }
        }
    }

    pub fn send(&mut self, msg: Message) {
        if let MessageBody::VoteResponse { granted: true } = msg.body {
            let voter = (msg.from, self.nodes[(msg.from - 1) as usize].storage);
            if let Err(v) = self.checker.vote_granted(voter, msg.term, msg.to) {
                self.fail(v);
            }
        }
        // Adversarial crash points: right after a node promised something (a vote, an
        // acknowledgement), crash it before its disk can catch up.
        let promise = matches!(
            msg.body,
            MessageBody::VoteResponse { granted: true }
                | MessageBody::AppendResponse(keel_core::AppendResult::Success { .. })
        );
        if promise
            && !self.healing
            && self
                .rng
                .random_bool(self.params.crash_after_promise_probability)
        {
            let delay = self.rng.random_range(0..=self.params.disk_latency_max);
            self.schedule(delay, Event::Crash(msg.from));
        }
        if self.blocked.contains(&(msg.from, msg.to)) {
            return;
        }
        let (loss, dup) = if self.healing {
            (0.0, 0.0)
        } else {
            (
                self.params.loss_probability,
                self.params.duplicate_probability,
            )
        };
        if self.rng.random_bool(loss) {
            return;
        }
        let copies = if self.rng.random_bool(dup) { 2 } else { 1 };
        let storage = self.nodes[(msg.from - 1) as usize].storage;
        for _ in 0..copies {
            let delay = self
                .rng
                .random_range(self.params.net_delay_min..=self.params.net_delay_max);
            self.schedule(delay, Event::Deliver(msg.clone(), storage));
        }
    }

    /// Node `id`'s configuration changed: its gate forgets the storage of members that left, so
    /// that one added back with a wiped disk is heard again, and learns who the members are (as
    /// the runtime's driver does).
    fn forget_departed(&mut self, id: NodeId) {
        let node = &mut self.nodes[(id - 1) as usize];
        let (Some(raft), Some(departed)) = (node.raft.as_ref(), node.departed.as_mut()) else {
            return;
        };
        if let Some(change) = departed.observe(raft.log()) {
            node.gate.configuration_changed(&change);
            if !change.departed.is_empty() || change.history_skipped {
                self.trace_line(|| format!("n{id} forgets the storage of {change:?}"));
            }
            let node = &mut self.nodes[(id - 1) as usize];
            if let Some(e) = node.gate.incarnations().take_persist_error() {
                let detail = format!("node {id} cannot record peer incarnations: {e}");
                self.violate("storage", detail);
            }
        }
    }

    /// Drains a node's outputs until it has nothing more to say.
    #[expect(clippy::too_many_lines)]
    pub fn drive(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        loop {
            if self.violation.is_some() {
                return;
            }
            let Some(raft) = self.nodes[idx].raft.as_mut() else {
                return;
            };
            if !raft.has_ready() {
                break;
            }
            self.handle_ready(id);
        }
        let lowered = self.nodes[idx]
            .raft
            .as_mut()
            .and_then(|raft| raft.take_lowered_promise());
        if let Some((from, to)) = lowered {
            self.storage.lowered += 1;
            self.trace_line(|| format!("n{id} lowered its promise from {from} to {to}"));
        }
        self.forget_departed(id);
        let node = &mut self.nodes[idx];
        let (Some(raft), Some(app)) = (node.raft.as_ref(), node.app.as_mut()) else {
            return;
        };
        if app.engine.check_replay_done(raft) {
            self.trace_line(|| format!("n{id} replayed; serving"));
        }
        let raft = self.nodes[idx].raft.as_ref().expect("checked above");
        if let Err(v) = self.checker.check_node(raft) {
            self.fail(v);
            return;
        }
        if let Some((hs, last)) = self.nodes[idx].disk.durable_state() {
            if hs.commit > last {
                let detail = format!(
                    "node {id} persisted commit {} beyond its durable log {last}",
                    hs.commit
                );
                return self.violate("persisted commit", detail);
            }
        }
        let raft = self.nodes[idx].raft.as_ref().expect("checked above");
        let role = raft.role();
        let commit = raft.commit_index();
        let became_leader = role == Role::Leader && self.nodes[idx].last_role != Role::Leader;
        let leader_committed = role == Role::Leader && commit > self.nodes[idx].last_commit;
        self.nodes[idx].last_role = role;
        self.nodes[idx].last_commit = commit;
        if self.healing {
            return;
        }
        // Adversarial crash points: a new leader before its first entries spread (how divergent
        // suffixes of many terms arise, Raft Figure 8), and a leader that just committed, before
        // its followers learn of it.
        if became_leader
            && self
                .rng
                .random_bool(self.params.crash_new_leader_probability)
        {
            if self.rng.random_bool(0.5) {
                // Isolating drops what the new leader already sent; a crash would not.
                self.trace_line(|| format!("isolate new leader n{id}"));
                self.partition_shape(1);
            } else {
                let delay = self.rng.random_range(0..=3 * self.params.net_delay_max);
                self.schedule(delay, Event::Crash(id));
            }
        } else if leader_committed
            && self
                .rng
                .random_bool(self.params.crash_after_commit_probability)
        {
            if self.rng.random_bool(0.5) {
                self.trace_line(|| format!("isolate n{id} after commit {commit}"));
                self.partition_shape(1);
            } else {
                let delay = self.rng.random_range(0..=self.params.net_delay_min);
                self.schedule(delay, Event::Crash(id));
            }
        }
    }

    /// One `Ready` of node `id`, routed by its engine as the runtime routes it: messages out and
    /// the write to the disk first, then committed entries, restores, reads and snapshot sends.
    fn handle_ready(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        let now_ms = self.wall_ms(id);
        let node = &mut self.nodes[idx];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        let mut ready = raft.ready();
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        let write = engine.start_ready(&mut ready, now_ms, &mut shell);
        let sent = std::mem::take(&mut shell.effects);
        engine.finish_ready(raft, ready, &mut shell);
        let effects = shell.effects;
        self.carry_out(id, sent);
        if let Some(w) = write {
            self.submit_storage(id, StorageCommand::Write(w));
        }
        self.carry_out(id, effects);
        self.pump_apply(id);
    }

    /// Whether node `id` is up and done replaying its log.
    pub fn serving(&self, id: NodeId) -> bool {
        self.nodes[(id - 1) as usize]
            .app
            .as_ref()
            .is_some_and(|app| app.engine.serving())
    }

    /// Records a broken invariant (see [`World::fail`]).
    pub fn violate(&mut self, invariant: &'static str, detail: String) {
        self.fail(Violation { invariant, detail });
    }

    /// Records the first violation; the run stops after the current step.
    pub fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            let step = self.steps;
            self.trace_line(|| format!("VIOLATION at step {step}: {v}"));
            self.violation = Some(v);
        }
    }
}

/// The nodes of a new world, none started yet: the initial voters' disks hold the first
/// configuration.
fn new_nodes<U: User>(params: &Params, mutation: Option<crate::Mutation>) -> Vec<SimNode<U>> {
    let voters: Vec<NodeId> = (1..=params.initial_voters as NodeId).collect();
    (1..=params.node_count as NodeId)
        .map(|id| {
            let initial: &[NodeId] = if voters.contains(&id) { &voters } else { &[] };
            let disk = SimDisk::new(params.use_wal, initial, mutation);
            let receiver = new_receiver(&disk, mutation);
            let gate = new_gate(&disk, id, mutation).expect("a new disk's gate");
            SimNode {
                id,
                raft: None,
                app: None,
                receiver,
                disk,
                incarnation: 0,
                storage: 1,
                gate,
                departed: None,
                snapshot_data: BTreeMap::new(),
                last_role: Role::Follower,
                last_commit: 0,
                retired: false,
                membership_when_down: None,
            }
        })
        .collect()
}

/// The handshake gate of a node, with the peer incarnations its disk remembers.
pub(crate) fn new_gate(
    disk: &SimDisk,
    id: NodeId,
    mutation: Option<crate::Mutation>,
) -> std::io::Result<HandshakeGate<SimFs>> {
    let dir = Some(SimDisk::transfer_dir());
    let mut gate = HandshakeGate::load(crate::params::CLUSTER_ID, id, disk.transfer_fs(), dir)?;
    gate.set_mutation(mutation.core());
    Ok(gate)
}

/// A node's snapshot receiver as it starts: nothing in memory, its partial file (if any) on disk.
pub(crate) fn new_receiver(
    disk: &SimDisk,
    mutation: Option<crate::Mutation>,
) -> SnapshotReceiver<SimFs> {
    let mut receiver = SnapshotReceiver::new(disk.transfer_fs(), SimDisk::transfer_dir());
    receiver.set_mutation(mutation.core());
    receiver
}
