//! Simulated clients: each runs one operation at a time against the node it believes leads, with
//! retries on definite failures and a timeout after which the outcome is recorded as unknown.

use std::collections::HashMap;

use keel_core::{Entry, EntryPayload, Index, LogId, NodeId, ProposeError, ReadError};
use rand::Rng;

use crate::history::{History, OpKind, OpResult};
use crate::kv::{Command, CommandOp, CommandResult, Key, KvStateMachine, Value};
use crate::world::{Event, World};

#[derive(Clone, Copy, Debug)]
enum Attempt {
    /// Not submitted anywhere: waiting to (re)try.
    Idle,
    Proposal {
        node: NodeId,
        incarnation: u64,
        at: LogId,
    },
    Read {
        node: NodeId,
        ctx: u64,
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
    next_ctx: u64,
    /// Outstanding ReadIndex requests: ctx -> (client, the highest commit index any node had
    /// reached when the read started).
    reads: HashMap<u64, (usize, Index)>,
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
            next_ctx: 1,
            reads: HashMap::new(),
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
                Some(Attempt::Proposal { node: n, .. }) | Some(Attempt::Read { node: n, .. }) => {
                    n == node
                }
                _ => false,
            };
            if on_node {
                self.clients[c].leader_guess = node % self.node_count + 1;
                self.retry_soon(c);
            }
        }
    }

    /// A node applied `entry`; a client waiting on that position learns its fate.
    pub fn entry_applied(
        &mut self,
        node: NodeId,
        incarnation: u64,
        entry: &Entry,
        result: Option<CommandResult>,
        now: u64,
        history: &mut History,
    ) {
        for c in 0..self.clients.len() {
            let Some(op) = self.clients[c].op else {
                continue;
            };
            let Attempt::Proposal {
                node: n,
                incarnation: inc,
                at,
            } = op.attempt
            else {
                continue;
            };
            if n != node || inc != incarnation || at.index != entry.index {
                continue;
            }
            let ours = at.term == entry.term
                && matches!(&entry.payload, EntryPayload::Normal(d)
                    if Command::decode(d).is_some_and(|cmd| cmd.client == self.clients[c].id && cmd.seq == op.seq));
            if !ours {
                // Another entry was committed at our position: ours never will be. Retrying
                // with the same sequence number is safe: the state machine deduplicates.
                self.retry_soon(c);
                continue;
            }
            let result = match result.expect("normal entries produce results") {
                CommandResult::Written => OpResult::Written,
                CommandResult::CasSwapped => OpResult::CasSwapped,
                CommandResult::CasFailed => OpResult::CasFailed,
            };
            let new_value = match (op.kind, result) {
                (OpKind::Write(v), _) | (OpKind::Cas { new: v, .. }, OpResult::CasSwapped) => {
                    Some(v)
                }
                _ => None,
            };
            if let Some(v) = new_value {
                self.clients[c].seen.insert(op.key, Some(v));
            }
            self.finish(c, result, now, history);
        }
    }

    fn finish(&mut self, c: usize, result: OpResult, now: u64, history: &mut History) {
        let client = &mut self.clients[c];
        let op = client.op.take().expect("finishing a pending op");
        history.complete(op.history_index, result, now);
        client.generation += 1;
        self.wake.push((c, 1));
    }

    /// A node restored a snapshot at `index`: proposals waiting there for an entry at or below
    /// it will never see it applied. Retrying with the same sequence number is safe and learns
    /// the outcome: the deduplicating state machine remembers the result.
    pub fn restored(&mut self, node: NodeId, incarnation: u64, index: Index) {
        for c in 0..self.clients.len() {
            if let Some(CurrentOp {
                attempt:
                    Attempt::Proposal {
                        node: n,
                        incarnation: inc,
                        at,
                    },
                ..
            }) = self.clients[c].op
            {
                if n == node && inc == incarnation && at.index <= index {
                    self.retry_soon(c);
                }
            }
        }
    }

    pub fn read_floor(&self, ctx: u64) -> Index {
        self.reads.get(&ctx).map_or(0, |(_, floor)| *floor)
    }

    pub fn read_failed(&mut self, ctx: u64) {
        if let Some((c, _)) = self.reads.remove(&ctx) {
            if matches!(self.clients[c].op.map(|o| o.attempt), Some(Attempt::Read { ctx: x, .. }) if x == ctx)
            {
                self.retry_soon(c);
            }
        }
    }

    pub fn read_served(
        &mut self,
        node: NodeId,
        ctx: u64,
        sm: &KvStateMachine,
        now: u64,
        history: &mut History,
    ) {
        let Some((c, _)) = self.reads.remove(&ctx) else {
            return;
        };
        let Some(op) = self.clients[c].op else { return };
        if !matches!(op.attempt, Attempt::Read { node: n, ctx: x } if n == node && x == ctx) {
            return;
        }
        let value = sm.get(op.key);
        self.clients[c].seen.insert(op.key, value);
        self.finish(c, OpResult::Read(value), now, history);
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
        if let Attempt::Read { ctx, .. } = op.attempt {
            self.clients.reads.remove(&ctx);
        }
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
        let incarnation = self.nodes[idx].incarnation;
        let client_id = self.clients.clients[c].id;
        let Some(raft) = self.nodes[idx].raft.as_mut() else {
            self.clients.clients[c].leader_guess = target % node_count + 1;
            self.clients.retry_soon(c);
            return;
        };
        let outcome: Result<Attempt, Option<NodeId>> = match op.kind {
            OpKind::Read => {
                let ctx = self.clients.next_ctx;
                match raft.read_index(ctx) {
                    Ok(()) => {
                        self.clients.next_ctx += 1;
                        let floor = self.checker.max_committed();
                        self.clients.reads.insert(ctx, (c, floor));
                        Ok(Attempt::Read { node: target, ctx })
                    }
                    Err(ReadError::NotLeader { leader }) => Err(leader),
                    Err(ReadError::Backpressure) => Err(Some(target)),
                }
            }
            OpKind::Write(v) | OpKind::Cas { new: v, .. } => {
                let cmd_op = match op.kind {
                    OpKind::Cas { expected, new } => CommandOp::Cas { expected, new },
                    _ => CommandOp::Write(v),
                };
                let cmd = Command {
                    client: client_id,
                    seq: op.seq,
                    key: op.key,
                    op: cmd_op,
                };
                match raft.propose(cmd.encode()) {
                    Ok(at) => Ok(Attempt::Proposal {
                        node: target,
                        incarnation,
                        at,
                    }),
                    Err(ProposeError::NotLeader { leader }) => Err(leader),
                    Err(_) => Err(Some(target)),
                }
            }
        };
        match outcome {
            Ok(attempt) => {
                if let Some(cur) = self.clients.clients[c].op.as_mut() {
                    cur.attempt = attempt;
                }
                self.drive(target);
            }
            Err(hint) => {
                let guess = match hint {
                    Some(l) if l != target => l,
                    _ => self.rng.random_range(1..=node_count),
                };
                self.clients.clients[c].leader_guess = guess;
                self.clients.retry_soon(c);
            }
        }
    }
}
