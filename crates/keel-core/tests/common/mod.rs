//! A tiny deterministic cluster harness: one FIFO message queue delivered by function call, a
//! `MemStorage` disk per node that can be slow (writes held back), crashes that lose un-completed
//! writes (optionally tearing the first), partitions and drop filters. On every `Ready` it checks
//! the persistence contract of outgoing messages, S23 (nothing applied before it is on disk),
//! State Machine Safety and Election Safety.
//!
//! Shared by `tests/scenarios.rs` and `src/node/tests/` (via `#[path]`); it names core items as
//! `crate::...`, which both crate roots provide.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::storage::{MemStorage, Storage};
use crate::{
    AppendResult, Config, Entry, EntryPayload, HardState, Index, LogId, Message, MessageBody,
    NodeId, RaftNode, ReadState, Role, Term, Write,
};

/// Decides whether a message is delivered (true) or dropped.
pub type Filter = Box<dyn FnMut(&Message) -> bool>;

/// Bound on delivery steps in one `run_until_quiet`, so a livelock fails fast.
const STEPS_MAX: usize = 100_000;

/// The test default: pre-vote on, check-quorum off, so `elect(n)` wins whenever n's log allows,
/// without first waiting out the followers' leases. Tests of leases turn it back on.
pub fn test_config(id: NodeId) -> Config {
    Config {
        check_quorum: false,
        ..Config::new(id)
    }
}

/// Entries with the given terms at indexes `first, first+1, ...`, each carrying "term/index".
pub fn entries_from(first: Index, terms: &[Term]) -> Vec<Entry> {
    terms
        .iter()
        .enumerate()
        .map(|(i, &term)| {
            let index = first + i as Index;
            Entry {
                term,
                index,
                payload: EntryPayload::Normal(Bytes::from(format!("{term}/{index}"))),
            }
        })
        .collect()
}

/// Storage of a voter in a cluster of `voters` that already holds a log with these terms (from
/// index 1) and this hard state: how scenario tests construct a precise history.
pub fn storage_with(voters: &[NodeId], terms: &[Term], hard_state: HardState) -> MemStorage {
    MemStorage::with_log(voters.iter().copied(), entries_from(1, terms), hard_state)
}

pub struct Peer {
    pub config: Config,
    pub storage: MemStorage,
    /// `None` while crashed.
    pub node: Option<RaftNode>,
    /// Writes handed out but not completed (lost in a crash).
    pub pending_writes: VecDeque<Write>,
    /// Slow disk: writes wait for `complete_writes`.
    pub hold_writes: bool,
    /// Entries applied by this node's state machine in its present lifetime.
    pub applied: Vec<Entry>,
    pub read_states: Vec<ReadState>,
    pub failed_reads: Vec<u64>,
}

pub struct Cluster {
    pub peers: BTreeMap<NodeId, Peer>,
    pub queue: VecDeque<Message>,
    /// Directed links that drop everything.
    blocked: BTreeSet<(NodeId, NodeId)>,
    /// Extra drop rule: a message is delivered only if this returns true.
    filter: Option<Filter>,
    /// Every message any node emitted, in order (for assertions about traffic).
    pub sent: Vec<Message>,
    /// Every entry ever handed to any state machine, by index (State Machine Safety).
    pub committed: BTreeMap<Index, Term>,
    /// The leader of every term ever observed (Election Safety).
    pub leaders: BTreeMap<Term, NodeId>,
}

impl Cluster {
    /// A brand-new cluster of voters `1..=n` with `test_config`.
    pub fn new(n: u64) -> Self {
        Self::with_config(n, |_| {})
    }

    pub fn with_config(n: u64, tweak: impl Fn(&mut Config)) -> Self {
        let voters: Vec<NodeId> = (1..=n).collect();
        Self::from_storages(
            voters
                .iter()
                .map(|&id| {
                    let mut config = test_config(id);
                    tweak(&mut config);
                    (config, MemStorage::new_cluster(voters.iter().copied()))
                })
                .collect(),
        )
    }

    /// Nodes restarted from the given storage (crafted histories).
    pub fn from_storages(nodes: Vec<(Config, MemStorage)>) -> Self {
        let mut peers = BTreeMap::new();
        for (config, storage) in nodes {
            let node = RaftNode::new(config.clone(), storage.recover().expect("recover"))
                .expect("valid recovered state");
            let peer = Peer {
                config,
                storage,
                node: Some(node),
                pending_writes: VecDeque::new(),
                hold_writes: false,
                applied: Vec::new(),
                read_states: Vec::new(),
                failed_reads: Vec::new(),
            };
            peers.insert(peer.config.id, peer);
        }
        Cluster {
            peers,
            queue: VecDeque::new(),
            blocked: BTreeSet::new(),
            filter: None,
            sent: Vec::new(),
            committed: BTreeMap::new(),
            leaders: BTreeMap::new(),
        }
    }

    // ----- access -----

    pub fn peer(&mut self, id: NodeId) -> &mut Peer {
        self.peers.get_mut(&id).expect("no such node")
    }

    pub fn node(&self, id: NodeId) -> &RaftNode {
        self.peers[&id].node.as_ref().expect("node is down")
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut RaftNode {
        self.peer(id).node.as_mut().expect("node is down")
    }

    fn up_ids(&self) -> Vec<NodeId> {
        let up = self.peers.iter().filter(|(_, p)| p.node.is_some());
        up.map(|(id, _)| *id).collect()
    }

    /// The live leader with the highest term, if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.up_ids()
            .into_iter()
            .filter(|id| self.node(*id).role() == Role::Leader)
            .max_by_key(|id| self.node(*id).term())
    }

    /// Terms of `id`'s in-memory log, from index 1.
    pub fn log_terms(&self, id: NodeId) -> Vec<Term> {
        let log = self.node(id).log();
        (log.first_index()..=log.last_index())
            .map(|i| log.term_at(i).expect("held"))
            .collect()
    }

    // ----- network -----

    pub fn block(&mut self, from: NodeId, to: NodeId) {
        self.blocked.insert((from, to));
    }

    pub fn unblock(&mut self, from: NodeId, to: NodeId) {
        self.blocked.remove(&(from, to));
    }

    pub fn block_both(&mut self, a: NodeId, b: NodeId) {
        self.block(a, b);
        self.block(b, a);
    }

    /// Cuts every link between `side` and the rest.
    pub fn partition(&mut self, side: &[NodeId]) {
        let rest: Vec<NodeId> = self
            .peers
            .keys()
            .filter(|id| !side.contains(id))
            .copied()
            .collect();
        for &a in side {
            for &b in &rest {
                self.block_both(a, b);
            }
        }
    }

    pub fn isolate(&mut self, id: NodeId) {
        self.partition(&[id]);
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
        self.filter = None;
    }

    /// Delivers a message only if `f` says so (on top of the blocked links).
    pub fn set_filter(&mut self, f: impl FnMut(&Message) -> bool + 'static) {
        self.filter = Some(Box::new(f));
    }

    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    fn deliverable(&mut self, m: &Message) -> bool {
        self.peers[&m.to].node.is_some()
            && !self.blocked.contains(&(m.from, m.to))
            && self.filter.as_mut().is_none_or(|f| f(m))
    }

    // ----- driving -----

    /// Drains one `Ready` of `id`: checks it, queues its messages, applies its committed entries
    /// and hands its write to the disk (completing it unless the disk is held).
    pub fn process(&mut self, id: NodeId) {
        let peer = self.peers.get_mut(&id).expect("no such node");
        let Some(node) = peer.node.as_mut() else {
            return;
        };
        let rd = node.ready();
        // Everything in this Ready must already hold on the disk, before its own write.
        for m in &rd.messages {
            check_message_is_durable(&peer.storage, m);
        }
        for e in &rd.committed {
            let on_disk = peer.storage.entries().iter().find(|d| d.index == e.index);
            assert_eq!(
                on_disk.map(|d| d.term),
                Some(e.term),
                "S23: node {id} applies {} before it is on its disk",
                e.log_id()
            );
        }
        if let Some(last) = rd.committed.last() {
            node.applied(last.index);
        }
        if node.role() == Role::Leader {
            let term = node.term();
            let previous = *self.leaders.entry(term).or_insert(id);
            assert_eq!(previous, id, "election safety: two leaders in term {term}");
        }
        peer.applied.extend(rd.committed.iter().cloned());
        peer.read_states.extend(rd.read_states);
        peer.failed_reads.extend(rd.failed_reads);
        peer.pending_writes.extend(rd.write);
        let hold = peer.hold_writes;
        for e in &rd.committed {
            let known = *self.committed.entry(e.index).or_insert(e.term);
            assert_eq!(
                known,
                e.term,
                "state machine safety: node {id} applies {} but {known}/{} was applied before",
                e.log_id(),
                e.index
            );
        }
        self.sent.extend(rd.messages.iter().cloned());
        self.queue.extend(rd.messages);
        if !hold {
            self.complete_writes(id);
        }
    }

    /// The disk of `id` finishes every write handed to it so far.
    pub fn complete_writes(&mut self, id: NodeId) {
        let peer = self.peer(id);
        let mut last = None;
        while let Some(w) = peer.pending_writes.pop_front() {
            peer.storage.write(&w).expect("MemStorage does not fail");
            last = Some(w.id);
        }
        if let (Some(last), Some(node)) = (last, peer.node.as_mut()) {
            node.persisted(last);
        }
    }

    /// The disk of `id` finishes only the oldest write handed to it.
    pub fn complete_next_write(&mut self, id: NodeId) {
        let peer = self.peer(id);
        let w = peer.pending_writes.pop_front().expect("no pending write");
        peer.storage.write(&w).expect("MemStorage does not fail");
        peer.node.as_mut().expect("node is down").persisted(w.id);
    }

    /// Drains every node's outputs until none has any.
    pub fn process_all(&mut self) {
        for id in self.up_ids() {
            let mut rounds = 0;
            while self.node(id).has_ready() {
                self.process(id);
                rounds += 1;
                assert!(rounds < 1000, "node {id} never runs out of Ready");
            }
        }
    }

    /// Delivers the next queued message (dropping it if its link is cut). False if none.
    fn deliver_one(&mut self) -> bool {
        let Some(m) = self.queue.pop_front() else {
            return false;
        };
        if self.deliverable(&m) {
            let to = m.to;
            self.node_mut(to).step(m);
        }
        true
    }

    /// Delivers messages and drains outputs until nothing moves.
    pub fn run_until_quiet(&mut self) {
        for _ in 0..STEPS_MAX {
            self.process_all();
            if !self.deliver_one() {
                return;
            }
        }
        panic!("cluster did not quiesce within {STEPS_MAX} steps");
    }

    pub fn drop_queue(&mut self) {
        self.queue.clear();
    }

    pub fn tick(&mut self, id: NodeId) {
        self.node_mut(id).tick();
    }

    /// `ticks` rounds of: tick every live node, then run until quiet.
    pub fn tick_all(&mut self, ticks: u32) {
        for _ in 0..ticks {
            for id in self.up_ids() {
                self.tick(id);
            }
            self.run_until_quiet();
        }
    }

    /// Makes `id` campaign (again, if a rejection taught it a newer term) until it wins;
    /// asserts it does. Returns its term.
    pub fn elect(&mut self, id: NodeId) -> Term {
        for _ in 0..5 {
            self.node_mut(id).campaign();
            self.run_until_quiet();
            if self.node(id).role() == Role::Leader {
                return self.node(id).term();
            }
        }
        panic!("node {id} cannot win an election");
    }

    pub fn propose(&mut self, id: NodeId, data: &str) -> LogId {
        self.node_mut(id)
            .propose(Bytes::copy_from_slice(data.as_bytes()))
            .expect("leader accepts proposals")
    }

    /// Proposes on leader `id`, runs, and asserts the entry committed there.
    pub fn propose_and_commit(&mut self, id: NodeId, data: &str) -> LogId {
        let lid = self.propose(id, data);
        self.run_until_quiet();
        assert_eq!(
            self.node(id).commit_status(lid),
            crate::CommitStatus::Committed,
            "{lid} did not commit"
        );
        lid
    }

    // ----- faults -----

    /// Crash: writes not completed are lost, the state machine (volatile here) is gone.
    pub fn crash(&mut self, id: NodeId) {
        let peer = self.peer(id);
        peer.node = None;
        peer.pending_writes.clear();
        peer.applied.clear();
        peer.read_states.clear();
        peer.failed_reads.clear();
    }

    /// Crash in the middle of the first un-completed write: only its first `keep_entries`
    /// entries reach the disk, and not its hard state.
    pub fn crash_torn(&mut self, id: NodeId, keep_entries: usize) {
        let peer = self.peer(id);
        if let Some(w) = peer.pending_writes.pop_front() {
            peer.storage.write_torn(&w, keep_entries, false);
        }
        self.crash(id);
    }

    pub fn restart(&mut self, id: NodeId) {
        let peer = self.peer(id);
        assert!(peer.node.is_none(), "restart of a running node");
        let recovered = peer.storage.recover().expect("recover");
        peer.node = Some(RaftNode::new(peer.config.clone(), recovered).expect("restart"));
    }

    // ----- checks -----

    /// Leader Completeness / State Machine Safety at this instant: every entry any state machine
    /// applied is still at its index, with its term, in the log of every live node whose commit
    /// index covers it, and in the log of every live leader.
    pub fn assert_committed_preserved(&self) {
        for id in self.up_ids() {
            let node = self.node(id);
            let limit = if node.role() == Role::Leader {
                Index::MAX
            } else {
                node.commit_index()
            };
            for (&index, &term) in self.committed.range(..=limit) {
                assert_eq!(
                    node.log().term_of_any(index),
                    Some(term),
                    "committed {term}/{index} missing on node {id}"
                );
            }
        }
    }

    /// Every live node holds the same log and has committed all of it.
    pub fn assert_converged(&self) {
        let ids = self.up_ids();
        let first = self.log_terms(ids[0]);
        for &id in &ids {
            assert_eq!(self.log_terms(id), first, "log of node {id} differs");
            let commit = self.node(id).commit_index();
            assert_eq!(commit, first.len() as Index, "node {id} commit");
        }
    }
}

/// The persistence contract (docs/DESIGN.md section 3) seen from the wire: what a message claims must
/// already be on the sender's disk when the message leaves.
fn check_message_is_durable(disk: &MemStorage, m: &Message) {
    let hs = disk.hard_state();
    // A torn write can leave entries of a term its hard state did not reach; a restart adopts
    // that term from the log, so it counts as durable.
    let term = hs.term.max(disk.entries().last().map_or(0, |e| e.term));
    match &m.body {
        // A later term on disk means the vote was durable before (writes complete in order).
        MessageBody::VoteResponse { granted: true } => assert!(
            hs.term > m.term || (hs.term == m.term && hs.vote == Some(m.to)),
            "vote for {} in term {} sent before it is durable (disk: {hs:?})",
            m.to,
            m.term
        ),
        MessageBody::RequestVote { .. } => assert!(
            hs.term > m.term || (hs.term == m.term && hs.vote == Some(m.from)),
            "vote request in term {} sent before the self-vote is durable (disk: {hs:?})",
            m.term
        ),
        MessageBody::AppendResponse(AppendResult::Success { match_index }) => {
            assert!(term >= m.term, "ack sent before its term is durable");
            // An ack of an older term may leave after a newer write rewrote the log: its entries
            // were durable before that write (writes complete in order), as if the network had
            // delayed it.
            assert!(
                term > m.term || disk.last_index() >= *match_index,
                "ack of {match_index} sent while the disk ends at {}",
                disk.last_index()
            );
        }
        MessageBody::Append { .. } | MessageBody::Heartbeat { .. } => assert!(
            term >= m.term,
            "leader traffic in term {} before the term is durable (disk: {hs:?})",
            m.term
        ),
        _ => {}
    }
}
