//! `raft_step`: node 1 of {1, 2, 3} (a follower, a candidate, a leader or just restarted, drawn
//! from the first byte) driven the way the runtime's node task drives it. Every peer message
//! passes `RaftNode::validate` before `step` (`Driver::step_peer`); between messages the input
//! picks ticks, `ready()`, completions of writes in order (applied to a `MemStorage`, which
//! checks the storage contract), applies in order, proposals, reads, membership changes,
//! leadership transfers, snapshots taken and saved, failed snapshot sends, and crashes that
//! restart the node from what storage made durable (optionally tearing the oldest write in
//! flight). Messages are built from the input in a compact form (terms and indexes near the
//! node's own, so the fuzzer reaches deep states) or decoded from raw bytes by the peer wire
//! decoder; either way they travel through the wire encoder and decoder before they are stepped,
//! and everything the node sends is round-tripped through the wire format too.
//!
//! Nothing may panic: not the core (its assertions and `check_invariants` included, with debug
//! assertions on), not the storage contract, not the wire codec, and a restart from durable
//! state must always succeed.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use keel_core::storage::{MemStorage, Storage};
use keel_core::{
    AppendResult, Config, Entry, EntryPayload, HardState, Index, LogId, Membership,
    MembershipChange, Message, MessageBody, NodeId, RaftNode, RepairAnswer, Role, SnapshotMeta,
    Term, Write, TERM_LIMIT,
};
use keel_transport::wire::{decode_message_fields, encode_message_fields, ReadWire, Reader};

use crate::Input;

/// Actions taken from one input at most (keeps every execution short).
const ACTIONS_MAX: usize = 512;
/// Messages the node sent that a later action may answer.
const OUTBOX_KEPT: usize = 16;
/// `ready()` calls without other input in which a node must run out of output.
const DRAIN_ROUNDS_MAX: usize = 1000;

const ID: NodeId = 1;

pub fn raft_step(data: &[u8]) {
    let mut input = Input::new(data);
    let mut h = Harness::new(&mut input);
    let mut actions = 0;
    while !input.is_empty() && actions < ACTIONS_MAX {
        h.act(&mut input);
        actions += 1;
    }
    h.settle();
}

struct Harness {
    config: Config,
    node: RaftNode,
    /// What completed writes made durable.
    storage: MemStorage,
    /// Issued by `ready()`, not completed yet, oldest first.
    writes: VecDeque<Write>,
    /// Indexes handed to the application (entries or a snapshot to restore), in order.
    to_apply: VecDeque<Index>,
    /// A snapshot taken (`snapshot_meta`) and not yet reported saved.
    snapshot_taken: Option<SnapshotMeta>,
    /// Recent messages the node sent, for answers.
    outbox: VecDeque<Message>,
    /// Followers the node asked to stream a snapshot to.
    snapshot_sends: Vec<NodeId>,
}

impl Harness {
    fn new(input: &mut Input) -> Self {
        let setup = input.u8();
        let mut config = Config::new(ID);
        config.pre_vote = setup & 0x04 != 0;
        config.check_quorum = setup & 0x08 != 0;
        if setup & 0x20 != 0 {
            // Small limits: partial Appends, pipelining limits and compaction are reached quickly.
            config.entries_per_message_max = 2;
            config.bytes_per_message_max = 64;
            config.inflight_messages_max = 2;
            config.apply_entries_max = 2;
            config.unapplied_entries_max = 4;
            config.uncommitted_entries_max = 8;
            config.pending_reads_max = 4;
            config.snapshot_trailing_entries = 0;
            config.snapshot_timeout_ticks = 20;
        }
        let storage = initial_storage(setup, input);
        let node = RaftNode::new(config.clone(), storage.recover().expect("infallible"))
            .expect("a valid initial state");
        let mut h = Harness {
            config,
            node,
            storage,
            writes: VecDeque::new(),
            to_apply: VecDeque::new(),
            snapshot_taken: None,
            outbox: VecDeque::new(),
            snapshot_sends: Vec::new(),
        };
        match setup & 0x03 {
            0 => {
                h.settle();
                let term = h.node.term().max(1);
                h.step_peer(heartbeat(2, term));
                h.settle();
            }
            1 => {
                h.settle();
                h.node.campaign();
                h.settle();
                if h.node.role() == Role::PreCandidate {
                    let term = h.node.term() + 1;
                    h.step_peer(msg(2, term, MessageBody::PreVoteResponse { granted: true }));
                    h.settle();
                }
            }
            2 => {
                h.settle();
                h.node.campaign();
                h.settle();
                for v in [2, 3] {
                    if h.node.role() == Role::PreCandidate {
                        let term = h.node.term() + 1;
                        h.step_peer(msg(v, term, MessageBody::PreVoteResponse { granted: true }));
                        h.settle();
                    }
                }
                for v in [2, 3] {
                    if h.node.role() == Role::Candidate {
                        let term = h.node.term();
                        h.step_peer(msg(v, term, MessageBody::VoteResponse { granted: true }));
                        h.settle();
                    }
                }
            }
            // Just restarted: possibly still replaying.
            _ => {}
        }
        h
    }

    fn act(&mut self, input: &mut Input) {
        match input.below(24) {
            0..=5 => {
                let m = self.compact_message(input);
                self.step_peer(m);
            }
            6 => {
                let len = usize::from(input.u8());
                let raw = Bytes::copy_from_slice(input.bytes(len));
                if let Ok(m) = decode_message_fields(&mut Reader::new(raw)) {
                    self.step_peer(m);
                }
            }
            7..=9 => self.answer(input),
            10 => {
                for _ in 0..=input.below(16) {
                    self.node.tick();
                }
            }
            11 | 12 => self.ready(),
            13 => self.complete_writes(usize::from(input.below(4)) + 1),
            14 => self.apply(usize::from(input.below(4)) + 1),
            15 => {
                let len = usize::from(input.below(8));
                let data = Bytes::copy_from_slice(input.bytes(len));
                let _ = self.node.propose(data);
            }
            16 => {
                let _ = self.node.read_index(u64::from(input.u8()));
            }
            17 => {
                let to = peer(input);
                let _ = self.node.transfer_leadership(to);
            }
            18 => {
                let id = u64::from(input.below(5)) + 1;
                let change = match input.below(3) {
                    0 => MembershipChange::AddVoter(id),
                    1 => MembershipChange::AddLearner(id),
                    _ => MembershipChange::Remove(id),
                };
                let _ = self.node.propose_membership(change);
            }
            19 => {
                // The apply thread snapshots at what it applied (or a little below).
                let applied = self.node.status().applied;
                let index = applied.saturating_sub(u64::from(input.below(4)));
                if let Some(meta) = self.node.snapshot_meta(index) {
                    self.snapshot_taken = Some(meta);
                }
            }
            20 => {
                if let Some(meta) = self.snapshot_taken.take() {
                    // Written and made durable, then reported (the runtime's SnapshotSaved).
                    self.storage.save_snapshot(&meta);
                    self.node.snapshot_saved(meta);
                }
            }
            21 => {
                if !self.snapshot_sends.is_empty() {
                    let i = usize::from(input.u8()) % self.snapshot_sends.len();
                    let to = self.snapshot_sends.swap_remove(i);
                    self.node.snapshot_send_failed(to);
                }
            }
            22 => self.node.campaign(),
            _ => self.crash(input),
        }
    }

    /// `Driver::step_peer`: what the validator refuses is dropped. The message first travels
    /// through the wire codec, as every peer message does.
    fn step_peer(&mut self, m: Message) {
        let Some(m) = through_wire(&m) else {
            return; // the transport refuses what does not decode
        };
        if self.node.validate(&m).is_ok() {
            self.node.step(m);
        }
    }

    fn ready(&mut self) {
        let rd = self.node.ready();
        for m in &rd.messages {
            assert_eq!(m.from, ID, "a message sent in another node's name");
            assert!(
                through_wire(m).is_some(),
                "a sent message does not decode: {m:?}"
            );
        }
        for m in rd.messages {
            if self.outbox.len() == OUTBOX_KEPT {
                self.outbox.pop_front();
            }
            self.outbox.push_back(m);
        }
        if let Some(w) = rd.write {
            self.writes.push_back(w);
        }
        if let Some(last) = rd.committed.last() {
            self.to_apply.push_back(last.index);
        }
        if let Some(meta) = rd.install_snapshot {
            self.to_apply.push_back(meta.last.index);
        }
        for (to, _) in rd.send_snapshots {
            if !self.snapshot_sends.contains(&to) {
                self.snapshot_sends.push(to);
            }
        }
    }

    /// Storage completes the oldest `n` writes, in order.
    fn complete_writes(&mut self, n: usize) {
        let mut last = None;
        for _ in 0..n {
            let Some(w) = self.writes.pop_front() else {
                break;
            };
            self.storage.write(&w).expect("infallible");
            last = Some(w.id);
        }
        if let Some(id) = last {
            self.node.persisted(id);
        }
    }

    /// The application applies the oldest `n` batches (or restores), in order.
    fn apply(&mut self, n: usize) {
        let mut last = None;
        for _ in 0..n {
            match self.to_apply.pop_front() {
                Some(index) => last = Some(index),
                None => break,
            }
        }
        if let Some(index) = last {
            self.node.applied(index);
        }
    }

    /// The process dies: writes in flight are lost (the oldest maybe torn), then the node
    /// restarts from what storage holds, as the runtime does after recovery.
    fn crash(&mut self, input: &mut Input) {
        if input.bool() {
            if let Some(w) = self.writes.front() {
                // A torn write keeps a prefix of its entries, and its hard state only if all.
                let keep = usize::from(input.u8()) % (w.entries.len() + 1);
                let keep_hard_state = input.bool();
                if w.sync {
                    self.storage.write_torn(w, keep, keep_hard_state);
                }
            }
        }
        self.writes.clear();
        self.to_apply.clear();
        self.snapshot_taken = None;
        self.outbox.clear();
        self.snapshot_sends.clear();
        let recovered = self.storage.recover().expect("infallible");
        self.node = RaftNode::new(self.config.clone(), recovered)
            .expect("a node restarts from whatever storage made durable");
    }

    /// Drains the node with a fast disk and application until it has nothing left to say. The
    /// node hands out committed entries a few at a time (`unapplied_entries_max`), so a long
    /// committed log takes many rounds: only rounds in which nothing more was applied count
    /// against the bound.
    fn settle(&mut self) {
        let mut idle_rounds = 0;
        let mut applied = self.node.status().applied;
        while idle_rounds < DRAIN_ROUNDS_MAX {
            if !self.node.has_ready() && self.writes.is_empty() && self.to_apply.is_empty() {
                return;
            }
            self.ready();
            self.complete_writes(usize::MAX);
            self.apply(usize::MAX);
            let now = self.node.status().applied;
            idle_rounds = if now > applied { 0 } else { idle_rounds + 1 };
            applied = now;
        }
        panic!(
            "the node never runs out of output: {:?}",
            self.node.status()
        );
    }

    /// An answer from the peer a recent message went to, honest-looking but shaped by the input.
    fn answer(&mut self, input: &mut Input) {
        if self.outbox.is_empty() {
            return;
        }
        let sent = self.outbox[usize::from(input.u8()) % self.outbox.len()].clone();
        let granted = input.u8() < 224;
        let body = match &sent.body {
            MessageBody::PreVote { .. } => MessageBody::PreVoteResponse { granted },
            MessageBody::RequestVote { .. } => MessageBody::VoteResponse { granted },
            MessageBody::Append { prev, entries, .. } => {
                let matched = prev.index + entries.len() as u64;
                if granted {
                    MessageBody::AppendResponse(AppendResult::Success {
                        match_index: matched,
                    })
                } else {
                    let hint_index = prev.index.saturating_sub(u64::from(input.below(3)));
                    MessageBody::AppendResponse(AppendResult::Conflict {
                        rejected: prev.index,
                        hint_term: input.bool().then(|| prev.term.saturating_sub(1)),
                        hint_index,
                    })
                }
            }
            MessageBody::Heartbeat { read_round, .. } => MessageBody::HeartbeatResponse {
                read_round: *read_round,
                lagging: !granted,
                clock: Default::default(),
            },
            MessageBody::TimeoutNow => return,
            _ => return,
        };
        self.step_peer(msg(sent.to, sent.term, body));
    }

    #[expect(clippy::too_many_lines)]
    fn compact_message(&self, input: &mut Input) -> Message {
        let from = peer(input);
        let to = match input.below(16) {
            0 => 0,
            1 => 2,
            2 => NodeId::MAX,
            _ => ID,
        };
        let term = self.term(input);
        let body = match input.below(12) {
            0 => MessageBody::PreVote {
                last_log_id: self.log_id(input),
            },
            1 => MessageBody::PreVoteResponse {
                granted: input.bool(),
            },
            2 => MessageBody::RequestVote {
                last_log_id: self.log_id(input),
                transfer: input.bool(),
            },
            3 => MessageBody::VoteResponse {
                granted: input.bool(),
            },
            4 => {
                let prev = self.log_id(input);
                let entries = self.entries(input, prev, term);
                MessageBody::Append {
                    prev,
                    entries,
                    commit: self.index(input),
                }
            }
            5 => MessageBody::AppendResponse(if input.bool() {
                AppendResult::Success {
                    match_index: self.index(input),
                }
            } else {
                AppendResult::Conflict {
                    rejected: self.index(input),
                    hint_term: input.bool().then(|| self.term(input)),
                    hint_index: self.index(input),
                }
            }),
            6 => MessageBody::Heartbeat {
                commit: self.index(input),
                read_round: number(input, 0),
                clock: Default::default(),
            },
            7 => MessageBody::HeartbeatResponse {
                read_round: number(input, 0),
                lagging: input.bool(),
                clock: Default::default(),
            },
            8 => MessageBody::TimeoutNow,
            9 => MessageBody::RepairRequest {
                promised: self.log_id(input),
                last: self.log_id(input),
                terms: (0..input.below(4)).map(|_| self.log_id(input)).collect(),
                holds_last: input.bool(),
            },
            10 => MessageBody::RepairResponse(match input.below(5) {
                0 => {
                    let prev = self.log_id(input);
                    let entries = self.entries(input, prev, term);
                    RepairAnswer::Entries { prev, entries }
                }
                1 => RepairAnswer::Lacks {
                    after: self.log_id(input),
                },
                2 => RepairAnswer::Committed {
                    through: self.log_id(input),
                    config: membership(input),
                },
                3 => RepairAnswer::Holds {
                    after: self.log_id(input),
                    through: self.log_id(input),
                    config: membership(input),
                },
                _ => RepairAnswer::Unknown,
            }),
            _ => MessageBody::InstallSnapshot {
                meta: SnapshotMeta {
                    last: self.log_id(input),
                    membership: Arc::new(membership(input)),
                    term_history: (0..input.below(4)).map(|_| self.log_id(input)).collect(),
                },
            },
        };
        Message {
            from,
            to,
            term,
            body,
        }
    }

    /// A term near the node's own, or one of the edges.
    fn term(&self, input: &mut Input) -> Term {
        number(input, self.node.term())
    }

    /// An index near the node's last (or its commit index), or one of the edges.
    fn index(&self, input: &mut Input) -> Index {
        let base = if input.bool() {
            self.node.log().last_index()
        } else {
            self.node.commit_index()
        };
        number(input, base)
    }

    /// A position: mostly one the node's log holds, with its term, or a term near the node's.
    fn log_id(&self, input: &mut Input) -> LogId {
        let index = self.index(input);
        let term = match self.node.log().term_of_any(index) {
            Some(t) if input.u8() < 192 => t,
            _ => self.term(input),
        };
        LogId::new(term, index)
    }

    /// Entries after `prev`: contiguous with rising terms up to `term` (a plausible Append) or
    /// any shape at all.
    fn entries(&self, input: &mut Input, prev: LogId, term: Term) -> Vec<Entry> {
        let n = input.below(5);
        let plausible = input.u8() < 200;
        let mut t = prev.term;
        (0..n)
            .map(|i| {
                let (entry_term, index) = if plausible {
                    if input.bool() {
                        t = t.saturating_add(1).min(term.max(prev.term));
                    }
                    (t, prev.index.saturating_add(u64::from(i) + 1))
                } else {
                    (self.term(input), self.index(input))
                };
                let payload = match input.below(8) {
                    0 => EntryPayload::Noop,
                    1 => EntryPayload::Membership(Arc::new(membership(input))),
                    _ => {
                        let len = usize::from(input.below(4));
                        EntryPayload::Normal(Bytes::copy_from_slice(input.bytes(len)))
                    }
                };
                Entry {
                    term: entry_term,
                    index,
                    payload,
                }
            })
            .collect()
    }
}

/// Mostly a peer of the configuration; also a stranger, this node itself, and the reserved ids.
fn peer(input: &mut Input) -> NodeId {
    match input.below(16) {
        0..=6 => 2,
        7..=12 => 3,
        13 => 4,
        14 => ID,
        _ => [0, NodeId::MAX][usize::from(input.below(2))],
    }
}

/// A value near `base` (most of the time), or one where arithmetic breaks.
fn number(input: &mut Input, base: u64) -> u64 {
    let b = input.u8();
    match b % 16 {
        0..=9 => base.saturating_add(u64::from(b % 16)).saturating_sub(4),
        10 => 0,
        11 => u64::MAX,
        12 => TERM_LIMIT,
        13 => TERM_LIMIT - 1,
        14 => input.u64(),
        _ => u64::from(b >> 4),
    }
}

fn membership(input: &mut Input) -> Membership {
    let set = |bits: u8| -> BTreeSet<NodeId> {
        (0..5u64)
            .filter(|i| bits & (1 << i) != 0)
            .map(|i| i + 1)
            .collect()
    };
    Membership {
        voters: set(input.u8()),
        outgoing: if input.u8() < 192 {
            BTreeSet::new()
        } else {
            set(input.u8())
        },
        learners: if input.u8() < 192 {
            BTreeSet::new()
        } else {
            set(input.u8())
        },
    }
}

fn msg(from: NodeId, term: Term, body: MessageBody) -> Message {
    Message {
        from,
        to: ID,
        term,
        body,
    }
}

fn heartbeat(from: NodeId, term: Term) -> Message {
    msg(
        from,
        term,
        MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: Default::default(),
        },
    )
}

/// Encodes `m` as the transport does and decodes it as the receiving transport does: `None` if
/// the decoder refuses it (node id 0), else the same message must come back.
fn through_wire(m: &Message) -> Option<Message> {
    let mut buf = Vec::new();
    encode_message_fields(m, &mut buf);
    let mut r = Reader::new(Bytes::from(buf));
    let decoded = decode_message_fields(&mut r).ok()?;
    r.finish().expect("nothing after an encoded message");
    assert_eq!(&decoded, m, "the wire format changed a message");
    Some(decoded)
}

/// The durable state the node starts from: a new cluster {1, 2, 3}, or one with a log (terms
/// rising from 1, a hard state, maybe a learner 4) drawn from the input.
fn initial_storage(setup: u8, input: &mut Input) -> MemStorage {
    if setup & 0x10 == 0 {
        return MemStorage::new_cluster([1, 2, 3]);
    }
    let n = u64::from(input.below(8));
    let mut term = 1;
    let mut entries = Vec::new();
    for index in 1..=n {
        if input.bool() {
            term += 1;
        }
        let payload = if index == 1 && setup & 0x40 != 0 {
            let mut m = Membership::new_voters([1, 2, 3]);
            m.learners.insert(4);
            EntryPayload::Membership(Arc::new(m))
        } else {
            EntryPayload::Normal(Bytes::from_static(b"x"))
        };
        entries.push(Entry {
            term,
            index,
            payload,
        });
    }
    let commit = u64::from(input.u8()) % (n + 1);
    let hs_term = term + u64::from(input.below(2));
    let vote = [None, Some(1), Some(2)][usize::from(input.below(3))];
    MemStorage::with_log(
        [1, 2, 3],
        entries,
        HardState {
            term: hs_term,
            vote,
            commit,
        },
    )
}
