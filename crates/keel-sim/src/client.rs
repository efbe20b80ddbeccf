//! Simulated clients: each runs one operation at a time against the node it believes leads, with
//! retries on definite failures and a timeout after which the outcome is recorded as unknown.
//!
//! They speak keel-kv: a write is a `SET`, a compare-and-set a `CAS` (or `SET ... NX` when the
//! key is expected absent), each an encoded [`LogCommand`] under the client's id and sequence
//! number, proposed through the node's engine exactly as the server proposes it; a read is a
//! linearizable `GET` served by the engine's ReadIndex path and apply pipeline. A retry after an
//! unknown outcome reuses the sequence number: keel-kv's deduplication must make it apply once.

use std::collections::HashMap;

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;
use keel_kv::command::{SetCondition, WriteCommand};
use keel_kv::{KvStateMachine, LogCommand, Reply};
use rand::Rng;

use crate::history::{History, Key, OpKind, OpResult, Value};
use crate::host::{ProposalToken, ReadToken, SimShell};
use crate::world::{Event, World};

#[derive(Clone, Copy, Debug)]
enum Attempt {
    /// Not submitted anywhere: waiting to (re)try.
    Idle,
    Proposal {
        node: NodeId,
    },
    Read {
        node: NodeId,
    },
}

#[derive(Clone, Copy, Debug)]
struct CurrentOp {
    history_index: usize,
    key: Key,
    kind: OpKind,
    seq: u64,
    deadline: u64,
    attempt: Attempt,
}

struct SimClient {
    id: u64,
    seq: u64,
    /// Wake-ups scheduled with an older generation are stale.
    generation: u64,
    op: Option<CurrentOp>,
    leader_guess: NodeId,
    /// The last value this client saw per key (for plausible compare-and-set expectations).
    seen: HashMap<Key, Option<Value>>,
}

pub(crate) struct Clients {
    node_count: NodeId,
    clients: Vec<SimClient>,
    /// Clients to wake soon: (client, delay).
    pub wake: Vec<(usize, u64)>,
}

const RETRY_DELAY: u64 = 3;

impl Clients {
    pub fn new(count: usize, node_count: usize) -> Clients {
        Clients {
            node_count: node_count as NodeId,
            clients: (0..count)
                .map(|i| SimClient {
                    id: i as u64 + 1,
                    seq: 0,
                    generation: 0,
                    op: None,
                    leader_guess: 1,
                    seen: HashMap::new(),
                })
                .collect(),
            wake: Vec::new(),
        }
    }

    pub fn generation(&self, c: usize) -> u64 {
        self.clients[c].generation
    }

    pub fn pending_ops(&self) -> usize {
        self.clients.iter().filter(|c| c.op.is_some()).count()
    }

    fn retry_soon(&mut self, c: usize) {
        let client = &mut self.clients[c];
        if let Some(op) = client.op.as_mut() {
            op.attempt = Attempt::Idle;
            client.generation += 1;
            self.wake.push((c, RETRY_DELAY));
        }
    }

    /// A node crashed: every attempt on it is lost; retry elsewhere.
    pub fn node_lost(&mut self, node: NodeId) {
        for c in 0..self.clients.len() {
            let on_node = match self.clients[c].op.map(|o| o.attempt) {
                Some(Attempt::Proposal { node: n }) | Some(Attempt::Read { node: n }) => n == node,
                _ => false,
            };
            if on_node {
                self.clients[c].leader_guess = node % self.node_count + 1;
                self.retry_soon(c);
            }
        }
    }

    /// The client's current operation, if `history_index` names it and it waits on `node`.
    fn waiting_on(&self, node: NodeId, c: usize, history_index: usize) -> Option<CurrentOp> {
        let op = self.clients[c].op?;
        let on_node = match op.attempt {
            Attempt::Proposal { node: n } | Attempt::Read { node: n } => n == node,
            Attempt::Idle => false,
        };
        (op.history_index == history_index && on_node).then_some(op)
    }

    /// Client `c`'s write `history_index`, proposed on (or forwarded by) `node`, was answered
    /// `reply` — the server's reply to it. Returns a description of a reply no such command can
    /// produce.
    pub fn write_answered(
        &mut self,
        node: NodeId,
        c: usize,
        history_index: usize,
        reply: &Reply,
        now: u64,
        history: &mut History,
    ) -> Result<(), String> {
        let Some(op) = self.waiting_on(node, c, history_index) else {
            return Ok(());
        };
        let result = match (op.kind, reply) {
            (OpKind::Write(_), Reply::Simple(ok)) if ok == "OK" => OpResult::Written,
            (OpKind::Cas { expected: None, .. }, Reply::Simple(ok)) if ok == "OK" => {
                OpResult::CasSwapped
            }
            (
                OpKind::Cas {
                    expected: Some(_), ..
                },
                Reply::Integer(1),
            ) => OpResult::CasSwapped,
            (OpKind::Cas { expected: None, .. }, Reply::Null)
            | (
                OpKind::Cas {
                    expected: Some(_), ..
                },
                Reply::Integer(0),
            ) => OpResult::CasFailed,
            (kind, reply) => return Err(format!("client {c}: {kind:?} answered {reply:?}")),
        };
        let new_value = match (op.kind, result) {
            (OpKind::Write(v), _) | (OpKind::Cas { new: v, .. }, OpResult::CasSwapped) => Some(v),
            _ => None,
        };
        if let Some(v) = new_value {
            self.clients[c].seen.insert(op.key, Some(v));
        }
        self.finish(c, result, now, history);
        Ok(())
    }

    /// Client `c`'s write `history_index` (key, kind and sequence number), if it is the one the
    /// client waits for.
    pub fn write_of(&self, c: usize, history_index: usize) -> Option<(Key, OpKind, u64)> {
        let op = self.clients[c].op?;
        (op.history_index == history_index && op.kind != OpKind::Read)
            .then_some((op.key, op.kind, op.seq))
    }

    pub fn client_id(&self, c: usize) -> u64 {
        self.clients[c].id
    }

    fn finish(&mut self, c: usize, result: OpResult, now: u64, history: &mut History) {
        let client = &mut self.clients[c];
        let op = client.op.take().expect("finishing a pending op");
        history.complete(op.history_index, result, now);
        client.generation += 1;
        self.wake.push((c, 1));
    }

    /// A request of client `c` was refused (or its outcome is unknown): try again, at the
    /// leader the refusal names if it names one. A write is retried under the same sequence
    /// number, which is safe only because the state machine deduplicates.
    fn refused(&mut self, c: usize, history_index: usize, leader: Option<NodeId>) {
        let client = &mut self.clients[c];
        if client.op.is_none_or(|op| op.history_index != history_index) {
            return;
        }
        if let Some(leader) = leader {
            client.leader_guess = leader;
        }
        self.retry_soon(c);
    }
}

/// The leader a refusal points to, if any.
fn leader_hint(error: &ClientError) -> Option<NodeId> {
    match error {
        ClientError::NotLeader { leader, .. } => *leader,
        _ => None,
    }
}

fn register_key(key: Key) -> Bytes {
    Bytes::from(key.to_string())
}

fn register_value(value: Value) -> Bytes {
    Bytes::from(value.to_string())
}

/// A register's value as the clients write them (decimal); `Err` for anything else.
fn read_register(sm: &KvStateMachine, key: Key) -> Result<Option<Value>, String> {
    let Some(bytes) = sm.get(register_key(key).as_ref()) else {
        return Ok(None);
    };
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .map(Some)
        .ok_or_else(|| format!("key {key} holds {bytes:?}, which no client wrote"))
}

/// The keel-kv command a client's write or compare-and-set is.
pub(crate) fn write_command(key: Key, kind: OpKind) -> WriteCommand {
    let key = register_key(key);
    match kind {
        OpKind::Write(v) => WriteCommand::Set {
            key,
            value: register_value(v),
            condition: SetCondition::Always,
        },
        OpKind::Cas {
            expected: None,
            new,
        } => WriteCommand::Set {
            key,
            value: register_value(new),
            condition: SetCondition::IfAbsent,
        },
        OpKind::Cas {
            expected: Some(expected),
            new,
        } => WriteCommand::Cas {
            key,
            expected: register_value(expected),
            new: register_value(new),
        },
        OpKind::Read => unreachable!("reads are not logged"),
    }
}

impl World {
    pub(crate) fn client_wake(&mut self, c: usize, generation: u64) {
        if self.clients.clients[c].generation != generation {
            return;
        }
        let now = self.now;
        if self.clients.clients[c].op.is_none() {
            if self.healing {
                // Quiet down so the cluster can be seen to converge.
                return;
            }
            self.start_op(c);
        }
        let op = self.clients.clients[c].op.expect("started above");
        if matches!(op.attempt, Attempt::Idle) && now < op.deadline {
            self.submit(c, op);
        }
    }

    /// The operation `history_index` of client `c` ran out of time: its outcome is unknown (and a
    /// read's tells nothing).
    pub(crate) fn client_deadline(&mut self, c: usize, history_index: usize) {
        let Some(op) = self.clients.clients[c].op else {
            return;
        };
        if op.history_index != history_index {
            return;
        }
        let client = &mut self.clients.clients[c];
        client.op = None;
        client.generation += 1;
        self.history
            .complete(op.history_index, OpResult::Unknown, self.now);
        self.clients.wake.push((c, 1));
    }

    fn start_op(&mut self, c: usize) {
        let key = self.rng.random_range(0..self.params.keys);
        let roll = self.rng.random_range(0..10);
        let client = &mut self.clients.clients[c];
        client.seq += 1;
        let unique = client.id * 1_000_000 + client.seq;
        let kind = match roll {
            0..=3 => OpKind::Read,
            4..=7 => OpKind::Write(unique),
            _ => OpKind::Cas {
                expected: client.seen.get(&key).copied().flatten(),
                new: unique,
            },
        };
        let history_index = self.history.invoke(client.id, key, kind, self.now);
        let deadline = self.now + self.params.client_timeout;
        client.op = Some(CurrentOp {
            history_index,
            key,
            kind,
            seq: client.seq,
            deadline,
            attempt: Attempt::Idle,
        });
        self.schedule(
            self.params.client_timeout,
            Event::ClientDeadline {
                client: c,
                history_index,
            },
        );
    }

    fn submit(&mut self, c: usize, op: CurrentOp) {
        let node_count = self.params.node_count as NodeId;
        let target = self.clients.clients[c].leader_guess;
        let idx = (target - 1) as usize;
        let client_id = self.clients.clients[c].id;
        let floor = self.checker.max_committed();
        let node = &mut self.nodes[idx];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            self.clients.clients[c].leader_guess = target % node_count + 1;
            self.clients.retry_soon(c);
            return;
        };
        if !app.engine.serving() {
            // Still replaying: the runtime holds requests until it serves.
            self.clients.retry_soon(c);
            return;
        }
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        let attempt = match op.kind {
            OpKind::Read => {
                let token = ReadToken {
                    client: c,
                    history_index: op.history_index,
                    floor,
                };
                engine.read(raft, token, &mut shell);
                Attempt::Read { node: target }
            }
            kind => {
                let token = ProposalToken::Client {
                    client: c,
                    history_index: op.history_index,
                };
                let entry =
                    LogCommand::new(client_id, op.seq, write_command(op.key, kind)).encode();
                let _ = engine.propose(raft, entry, token, &mut shell);
                Attempt::Proposal { node: target }
            }
        };
        let effects = shell.effects;
        if let Some(cur) = self.clients.clients[c].op.as_mut() {
            cur.attempt = attempt;
        }
        self.trace_line(|| format!("client {c} {:?} on key {} at n{target}", op.kind, op.key));
        // A refusal comes back among the effects and sends the client elsewhere.
        self.carry_out(target, effects);
        self.drive(target);
    }

    /// Node `node`'s engine refused client `c`'s write, or answered "outcome unknown". A
    /// follower that knows the leader forwards it there instead, as the server does, in the seeds
    /// that draw forwarding.
    pub(crate) fn proposal_refused(
        &mut self,
        node: NodeId,
        c: usize,
        history_index: usize,
        error: &ClientError,
    ) {
        let knows_leader = matches!(
            error,
            ClientError::NotLeader {
                leader: Some(_),
                ..
            }
        );
        if self.params.forward_writes && knows_leader {
            return self.start_forward(node, c, history_index);
        }
        self.client_refused(c, history_index, error);
    }

    pub(crate) fn read_refused(&mut self, token: ReadToken, error: &ClientError) {
        self.client_refused(token.client, token.history_index, error);
    }

    pub(crate) fn client_refused(&mut self, c: usize, history_index: usize, error: &ClientError) {
        self.trace_line(|| format!("client {c} refused: {error}"));
        let node_count = self.params.node_count as NodeId;
        let hint = leader_hint(error).or_else(|| match error {
            // Busy, or the outcome is unknown: the same node may answer next time.
            ClientError::NotLeader { .. } => Some(self.rng.random_range(1..=node_count)),
            _ => None,
        });
        self.clients.refused(c, history_index, hint);
    }

    /// A read's turn came in node `id`'s apply pipeline: it sees the state applied there.
    pub(crate) fn read_served(&mut self, id: NodeId, token: ReadToken) {
        let c = token.client;
        let Some(op) = self.clients.waiting_on(id, c, token.history_index) else {
            return;
        };
        let app = self.nodes[(id - 1) as usize]
            .app
            .as_ref()
            .expect("a pipeline runs on a live node");
        let value = match read_register(app.applier.state().kv(), op.key) {
            Ok(value) => value,
            Err(detail) => return self.violate("client reply", detail),
        };
        self.clients.clients[c].seen.insert(op.key, value);
        self.clients
            .finish(c, OpResult::Read(value), self.now, &mut self.history);
    }
}
