//! Simulated clients: each is a user of the Redis server's client port that sends a small pipeline of
//! requests at once (1 to [`PIPELINE_OPS_MAX`] operations, mostly 1, drawn from the seed) on its
//! connection to the node it believes leads, reads the replies in order, retries what was refused,
//! and records every operation in the history for the linearizability check. The node serves the
//! connection with the server's own code (`connection.rs`).
//!
//! The operations, all on one key each so that the per-key checker can check them:
//!
//! | operation                  | requests                             | history            |
//! |----------------------------|--------------------------------------|--------------------|
//! | read                       | `GET k`                              | read               |
//! | write                      | `SET k v`, or `SET k v PX 1000000000` | write             |
//! | compare-and-set            | `CAS k old v`, or `SET k v NX`       | cas                |
//! | read-and-write transaction | `MULTI`, `GET k`, `SET k v`, `EXEC`  | swap (returns old) |
//! | write transaction          | `MULTI`, `SET k v`, `EXEC`           | write              |
//! | read transaction           | `MULTI`, `GET k`, `EXEC`             | read               |
//! | watched transaction        | `WATCH k`, `GET k`; then `MULTI`, `SET k v`, `EXEC` | cas (expects the value read) |
//! | scripted read              | `EVAL_RO` of a script that `GET`s k  | read               |
//! | scripted write             | `EVAL` of a script that `SET`s k     | write              |
//! | scripted swap              | `EVAL`: `GET k`, then `SET k v`      | swap               |
//! | scripted compare-and-set   | `EVAL`: `GET k` (or `EXISTS k`), `SET k v` if it matched | cas    |
//!
//! A script is run by its node as the server runs it (`crate::scripts`): its keys copied by a
//! read, the script run on the copy, its writes proposed as a transaction that watches them and
//! run again if one changed. Its request carries no id of the client's, so a script whose
//! attempt was lost with its connection is never sent again: its outcome is unknown. With the
//! `script-unwatched` mutation the writes are proposed unwatched, which the checker must catch.
//!
//! Queues, blocking pops and streams are a workload of their own, with their own clients and
//! checker (`queues/`).
//!
//! A watched transaction is an optimistic update as applications write it: watch the key, read
//! it, and once both are answered send the transaction that replaces it. Its `EXEC` succeeds
//! only if nothing changed the key since the watch, so the value read must still be there when
//! the transaction applies: the history records a compare-and-set expecting it, invoked when the
//! `EXEC` leaves. An aborted one (null reply) had no effect and is recorded as a read that tells
//! nothing; a refused `WATCH`, read or `EXEC` starts the transaction over, and an `EXEC` whose
//! outcome is unknown (or whose connection was lost) ends it with an unknown outcome, never
//! retried: a retry would watch again and expect another value.
//!
//! A refusal (`-TRYAGAIN ...`, including "outcome unknown") sends the operation into the next
//! attempt, at the leader the refusal names if it names one, once the connection answered the whole
//! attempt (backing off while every attempt is refused). With the `watch-ignored` mutation the
//! state machine runs a watched transaction whatever changed, which the checker must catch. A write
//! (or EXEC) is retried under the request id of its first attempt: the state machine's
//! deduplication must make it apply once (a transaction retried after it applied answers that its
//! replies are not kept: applied, its old value unknown). An operation still unanswered when its
//! pipeline's time is up is recorded with an unknown outcome.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use keel_core::NodeId;
use keel_redis::ApplyReply;
use keel_redis::RequestId;
use keel_resp::Reply;
use rand::Rng;

use crate::connection::{Connections, Frame, Owner};

mod scripted;
mod watched;
use crate::history::{History, Key, OpKind, OpResult, Value};
use crate::kv_user::KvState;
use crate::world::{Event, World};
use scripted::script_requests;
use watched::{watched_requests, Watch};

/// Most operations a client sends in one pipeline.
pub(crate) const PIPELINE_OPS_MAX: usize = 4;

/// The sizes a pipeline is drawn from, equally likely.
const PIPELINE_SIZES: [usize; 8] = [1, 1, 1, 1, 1, 1, 2, PIPELINE_OPS_MAX];

/// The pause before a client tries again, doubled after each attempt in a row that got nothing
/// but refusals, at most [`RETRY_DOUBLINGS_MAX`] times: while there is no leader, clients that
/// retried at full speed would spend the run being refused.
const RETRY_DELAY: u64 = 3;
const RETRY_DOUBLINGS_MAX: u32 = 2;

/// How an operation is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// One request.
    Plain,
    /// `MULTI`, its requests, `EXEC`: one log entry.
    Transaction,
    /// `WATCH k`, `GET k`, then `MULTI`, `SET k v`, `EXEC` (see the module documentation).
    Watched,
    /// `EVAL` (`EVAL_RO` for a read) of a script that does the operation (`script_requests`).
    Script,
}

#[derive(Clone, Debug)]
struct ClientOp {
    history_index: usize,
    key: Key,
    kind: OpKind,
    form: Form,
    /// The id its write (or EXEC) is proposed under, in every attempt.
    id: Option<RequestId>,
    done: bool,
    /// The key, the value written and the value a compare-and-set expects, as sent (made once,
    /// shared by every attempt).
    key_arg: Bytes,
    value_arg: Option<Bytes>,
    expected_arg: Option<Bytes>,
    /// A watched transaction's state; a script's is `Sent` once it left (`Idle` for every other form).
    watch: Watch,
}

/// A reply the client waits for, in request order.
#[derive(Clone, Copy, Debug)]
enum Awaited {
    /// `+OK` to MULTI.
    Multi,
    /// `+QUEUED` to a request inside a transaction.
    Queued,
    /// `+OK` to the `WATCH` of the watched transaction at this position.
    Watch(usize),
    /// The value the watched transaction at this position reads under its watch.
    WatchedRead(usize),
    /// The answer of the operation at this position of the pipeline.
    Answer(usize),
}

/// The operations a client sent together, until each is answered or their time is up.
struct Pipeline {
    /// The first operation's history index: names the pipeline in its deadline event.
    first: usize,
    deadline: u64,
    ops: Vec<ClientOp>,
    /// The replies the attempt in flight still owes (empty: no attempt in flight).
    awaited: VecDeque<Awaited>,
    /// The next attempt continues a watched transaction whose watch and read this connection
    /// just answered (any other attempt starts it over).
    watch_continues: bool,
    /// The connection may hold a watch no `EXEC` cleared: closed once the attempt is over, so
    /// that no later transaction on it is aborted by a key this client no longer watches.
    close_after: bool,
}

struct SimClient {
    id: u64,
    /// Numbers the client's operations: their values and request ids.
    seq: u64,
    /// Wake-ups scheduled with an older generation are stale.
    generation: u64,
    /// Attempts in a row that got nothing but refusals.
    refused_attempts: u32,
    pipeline: Option<Pipeline>,
    leader_guess: NodeId,
    /// The client's open connections, by node: kept while the node is up, so that going back
    /// to a node reuses its connection.
    connections: Vec<(NodeId, u64)>,
    /// The connection of the attempt in flight, or of the last one.
    current: Option<u64>,
    /// The last value this client saw per key (for plausible compare-and-set expectations).
    seen: HashMap<Key, Option<Value>>,
}

pub(crate) struct Clients {
    node_count: NodeId,
    clients: Vec<SimClient>,
    /// Clients to wake soon: (client, delay).
    pub wake: Vec<(usize, u64)>,
    /// Every connection the nodes serve: the clients', and forwarding nodes' at the leader.
    pub connections: Connections,
}

impl Clients {
    pub fn new(count: usize, node_count: usize) -> Clients {
        Clients {
            node_count: node_count as NodeId,
            clients: (0..count)
                .map(|i| SimClient {
                    id: i as u64 + 1,
                    seq: 0,
                    generation: 0,
                    refused_attempts: 0,
                    pipeline: None,
                    leader_guess: 1,
                    connections: Vec::new(),
                    current: None,
                    seen: HashMap::new(),
                })
                .collect(),
            wake: Vec::new(),
            connections: Connections::default(),
        }
    }

    pub fn generation(&self, c: usize) -> u64 {
        self.clients[c].generation
    }

    /// Clients with operations outstanding.
    pub fn pending_ops(&self) -> usize {
        self.clients.iter().filter(|c| c.pipeline.is_some()).count()
    }

    fn retry_soon(&mut self, c: usize) {
        let client = &mut self.clients[c];
        client.generation += 1;
        let delay = RETRY_DELAY << client.refused_attempts.min(RETRY_DOUBLINGS_MAX);
        client.refused_attempts += 1;
        self.wake.push((c, delay));
    }

    /// A node crashed: its connections are closed, and an attempt on one is lost; its operations
    /// are tried again elsewhere.
    pub fn node_lost(&mut self, node: NodeId) {
        for (connection, owner) in self.connections.close_on(node) {
            let Owner::Client(c) = owner else {
                continue; // a queue client's (`queues/`) or a forward's
            };
            let client = &mut self.clients[c];
            client.connections.retain(|(_, n)| *n != connection);
            if client.current != Some(connection) {
                continue;
            }
            client.current = None;
            let Some(p) = client.pipeline.as_mut() else {
                continue;
            };
            // The connection it would have closed is gone: left set, it would close the next
            // attempt's connection, and with it a watch that attempt's transaction needs.
            p.close_after = false;
            if !p.awaited.is_empty() {
                p.awaited.clear();
                client.leader_guess = node % self.node_count + 1;
                self.retry_soon(c);
            }
        }
    }

    /// Records operation `at` of client `c`'s pipeline as answered with `result`.
    fn finish(&mut self, c: usize, at: usize, result: OpResult, now: u64, history: &mut History) {
        let client = &mut self.clients[c];
        let Some(p) = client.pipeline.as_mut() else {
            return;
        };
        let op = &mut p.ops[at];
        op.done = true;
        client.refused_attempts = 0;
        history.complete(op.history_index, result, now);
        let seen = match (op.kind, result) {
            (_, OpResult::Read(v)) => Some(v),
            (OpKind::Write(v) | OpKind::Swap(v), _) => Some(Some(v)),
            (OpKind::Cas { new, .. }, OpResult::CasSwapped) => Some(Some(new)),
            _ => None,
        };
        if let Some(v) = seen {
            client.seen.insert(op.key, v);
        }
    }
}

/// Before an attempt: an operation whose last attempt was lost with its connection after its
/// `EXEC` (or script) left may have applied, and a retry would expect another value (or apply
/// twice): it ends with an unknown outcome. A watched read carries over only to the connection
/// that answered it (`continues`).
fn end_lost_attempts(ops: &mut [ClientOp], continues: bool, history: &mut History, now: u64) {
    for op in ops.iter_mut().filter(|op| !op.done) {
        match op.watch {
            Watch::Sent => {
                op.done = true;
                history.complete(op.history_index, OpResult::Unknown, now);
            }
            Watch::Read(_) if continues => {}
            _ => op.watch = Watch::Idle,
        }
    }
}

fn decimal(n: u64) -> Bytes {
    Bytes::from(n.to_string())
}

/// A register's value as the clients write them (decimal); `Err` for anything else.
fn register_value(key: Key, reply: &Reply) -> Result<Option<Value>, String> {
    match reply {
        Reply::Null | Reply::NullArray => Ok(None),
        Reply::Bulk(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("key {key} holds {bytes:?}, which no client wrote")),
        other => Err(format!("a GET of key {key} answered {other:?}")),
    }
}

/// A TTL no simulated run reaches (11.5 days of simulated ms).
const FAR_DEADLINE_MS: &str = "1000000000";

/// The requests of an operation (ids on its write or EXEC), and the replies they get.
fn requests(
    op: &ClientOp,
    frames: &mut VecDeque<Frame>,
    awaited: &mut VecDeque<Awaited>,
    at: usize,
) {
    match op.form {
        Form::Watched => return watched_requests(op, frames, awaited, at),
        Form::Script => return script_requests(op, frames, awaited, at),
        Form::Plain | Form::Transaction => {}
    }
    let word = |w: &'static str| Bytes::from_static(w.as_bytes());
    let key = || op.key_arg.clone();
    let value = || op.value_arg.clone().expect("a write has a value");
    let write = match op.kind {
        OpKind::Read => None,
        // A quarter of the writes give the key a deadline, far beyond any run: the deadline is
        // replicated state (digest, snapshots) and makes the leader tick (`time.rs`), while the
        // register the checker models never expires.
        OpKind::Write(unique) if unique % 4 == 0 => Some(vec![
            word("SET"),
            key(),
            value(),
            word("PX"),
            word(FAR_DEADLINE_MS),
        ]),
        OpKind::Write(_) | OpKind::Swap(_) => Some(vec![word("SET"), key(), value()]),
        OpKind::Cas { expected: None, .. } => Some(vec![word("SET"), key(), value(), word("NX")]),
        OpKind::Cas { .. } => {
            let expected = op.expected_arg.clone().expect("a CAS expects a value");
            Some(vec![word("CAS"), key(), expected, value()])
        }
    };
    let read = matches!(op.kind, OpKind::Read | OpKind::Swap(_)).then(|| vec![word("GET"), key()]);
    match op.form {
        Form::Plain => {
            let args = write.or(read).expect("an operation reads or writes");
            frames.push_back(Frame {
                args,
                given_id: op.id,
            });
        }
        Form::Watched | Form::Script => unreachable!("sent by their own functions"),
        Form::Transaction => {
            frames.push_back(Frame::new(vec![Bytes::from_static(b"MULTI")]));
            awaited.push_back(Awaited::Multi);
            for args in read.into_iter().chain(write) {
                frames.push_back(Frame::new(args));
                awaited.push_back(Awaited::Queued);
            }
            frames.push_back(Frame {
                args: vec![Bytes::from_static(b"EXEC")],
                given_id: op.id,
            });
        }
    }
    awaited.push_back(Awaited::Answer(at));
}

/// What an answer is checked against.
#[derive(Clone, Copy)]
struct Answered {
    key: Key,
    kind: OpKind,
    form: Form,
}

impl Answered {
    fn of(op: &ClientOp) -> Answered {
        Answered {
            key: op.key,
            kind: op.kind,
            form: op.form,
        }
    }
}

/// What an operation's answer says, if it is one it can get (a refusal is not an answer).
fn result_of(op: &Answered, reply: &Reply) -> Result<OpResult, String> {
    let ok = |r: &Reply| *r == Reply::OK;
    let result = match (op.form, op.kind, reply) {
        (Form::Plain, OpKind::Read, value) => Some(OpResult::Read(register_value(op.key, value)?)),
        (Form::Plain, OpKind::Write(_), r) if ok(r) => Some(OpResult::Written),
        (Form::Plain, OpKind::Cas { expected: None, .. }, r) if ok(r) => Some(OpResult::CasSwapped),
        (Form::Plain, OpKind::Cas { expected: None, .. }, Reply::Null) => Some(OpResult::CasFailed),
        (Form::Plain, OpKind::Cas { .. }, Reply::Integer(1)) => Some(OpResult::CasSwapped),
        (Form::Plain, OpKind::Cas { .. }, Reply::Integer(0)) => Some(OpResult::CasFailed),
        (Form::Watched, OpKind::Cas { .. }, Reply::Array(replies))
            if replies[..] == [Reply::OK] =>
        {
            Some(OpResult::CasSwapped)
        }
        (Form::Script, OpKind::Read, value) => Some(OpResult::Read(register_value(op.key, value)?)),
        (Form::Script, OpKind::Write(_), r) if ok(r) => Some(OpResult::Written),
        (Form::Script, OpKind::Swap(_), old) => {
            Some(OpResult::Swapped(register_value(op.key, old)?))
        }
        (Form::Script, OpKind::Cas { .. }, Reply::Integer(1)) => Some(OpResult::CasSwapped),
        (Form::Script, OpKind::Cas { .. }, Reply::Integer(0)) => Some(OpResult::CasFailed),
        (Form::Transaction, kind, Reply::Array(replies)) => match (kind, &replies[..]) {
            (OpKind::Read, [value]) => Some(OpResult::Read(register_value(op.key, value)?)),
            (OpKind::Write(_), [r]) if ok(r) => Some(OpResult::Written),
            (OpKind::Swap(_), [old, r]) if ok(r) => {
                Some(OpResult::Swapped(register_value(op.key, old)?))
            }
            _ => None,
        },
        _ => None,
    };
    result.ok_or_else(|| format!("{:?} {:?} answered {reply:?}", op.form, op.kind))
}

/// The leader a refusal names (`-TRYAGAIN leader is node N ...`), or `Err` if it names none
/// because there is none known ("no leader").
pub(crate) fn leader_named(error: &str) -> Result<Option<NodeId>, ()> {
    if let Some(rest) = error.strip_prefix("TRYAGAIN leader is node ") {
        let digits = rest.split(|ch: char| !ch.is_ascii_digit()).next();
        return Ok(digits.and_then(|d| d.parse().ok()));
    }
    if error.starts_with("TRYAGAIN no leader") {
        return Err(());
    }
    Ok(None)
}

impl World<KvState> {
    pub(crate) fn client_wake(&mut self, c: usize, generation: u64) {
        if self.user.clients.clients[c].generation != generation {
            return;
        }
        if self.user.clients.clients[c].pipeline.is_none() {
            if self.healing {
                // Quiet down so the cluster can be seen to converge.
                return;
            }
            self.start_pipeline(c);
        }
        let p = self.user.clients.clients[c]
            .pipeline
            .as_ref()
            .expect("started");
        if p.awaited.is_empty() && self.now < p.deadline {
            self.submit(c);
        }
    }

    /// The pipeline whose first operation is `history_index`, of client `c`, ran out of time:
    /// the outcome of every operation not answered is unknown (and a read's tells nothing).
    pub(crate) fn client_deadline(&mut self, c: usize, history_index: usize) {
        let client = &mut self.user.clients.clients[c];
        if client.pipeline.as_ref().map(|p| p.first) != Some(history_index) {
            return;
        }
        let p = client.pipeline.take().expect("checked");
        let (unanswered, in_flight) = (p.ops.iter().filter(|op| !op.done).count(), p.awaited.len());
        self.trace_line(|| {
            format!("client {c} timed out: {unanswered} unanswered, {in_flight} replies owed")
        });
        for op in p.ops.iter().filter(|op| !op.done) {
            if op.form == Form::Watched && op.watch != Watch::Sent {
                // Its EXEC never left: it changed nothing.
                self.user
                    .history
                    .reinvoke(op.history_index, OpKind::Read, self.now);
            }
            self.user
                .history
                .complete(op.history_index, OpResult::Unknown, self.now);
        }
        let watched = p.ops.iter().any(|op| op.form == Form::Watched);
        if !p.awaited.is_empty() || watched {
            // Replies still owed would be taken for the next pipeline's, and a watch no EXEC
            // cleared would abort its transactions: a new connection.
            let client = &mut self.user.clients.clients[c];
            if let Some(connection) = client.current.take() {
                client.connections.retain(|(_, n)| *n != connection);
                self.user.clients.connections.close(connection);
            }
        }
        self.user.clients.clients[c].generation += 1;
        self.user.clients.wake.push((c, 1));
    }

    /// Draws client `c`'s next pipeline of operations.
    #[expect(clippy::too_many_lines)]
    fn start_pipeline(&mut self, c: usize) {
        // Mostly short: a client's pipeline loads the log as much as that many clients would.
        let count = PIPELINE_SIZES[self.rng.random_range(0..PIPELINE_SIZES.len())];
        // A watched transaction waits for its watch before its EXEC: alone in its pipeline.
        let may_watch = count == 1;
        let mut ops = Vec::with_capacity(count);
        for _ in 0..count {
            let key = self.rng.random_range(0..self.params.keys);
            let roll = self.rng.random_range(0..21);
            let client = &mut self.user.clients.clients[c];
            client.seq += 1;
            let unique = client.id * 1_000_000 + client.seq;
            let (kind, form) = match roll {
                0..=6 => (OpKind::Read, Form::Plain),
                7..=12 => (OpKind::Write(unique), Form::Plain),
                13..=15 => (
                    OpKind::Cas {
                        expected: client.seen.get(&key).copied().flatten(),
                        new: unique,
                    },
                    Form::Plain,
                ),
                16..=17 => (OpKind::Swap(unique), Form::Transaction),
                18 => (OpKind::Write(unique), Form::Transaction),
                19 => (OpKind::Read, Form::Transaction),
                // A script waits for everything before it in its pipeline, and everything after
                // it waits for its answer, as on the server.
                _ if self.user.scripts && (!may_watch || self.rng.random_bool(0.5)) => {
                    let kind = match self.rng.random_range(0..4) {
                        0 => OpKind::Read,
                        1 => OpKind::Write(unique),
                        2 => OpKind::Swap(unique),
                        _ => OpKind::Cas {
                            expected: client.seen.get(&key).copied().flatten(),
                            new: unique,
                        },
                    };
                    (kind, Form::Script)
                }
                // Its expected value is the one read under the watch (`Watch::Read`).
                _ if may_watch => (
                    OpKind::Cas {
                        expected: None,
                        new: unique,
                    },
                    Form::Watched,
                ),
                _ => (OpKind::Read, Form::Plain),
            };
            // Everything that goes through the log is proposed under an id.
            // (A script's writes are proposed by its node, under an id of the node's choosing.)
            let logged =
                form != Form::Script && (kind != OpKind::Read || form == Form::Transaction);
            let id = logged.then_some(RequestId {
                client_id: client.id,
                seq: client.seq,
            });
            let (value_arg, expected_arg) = match kind {
                OpKind::Read => (None, None),
                OpKind::Write(v) | OpKind::Swap(v) => (Some(decimal(v)), None),
                OpKind::Cas { expected, new } => (Some(decimal(new)), expected.map(decimal)),
            };
            let history_index = self.user.history.invoke(client.id, key, kind, self.now);
            ops.push(ClientOp {
                history_index,
                key,
                kind,
                form,
                id,
                done: false,
                key_arg: decimal(key),
                value_arg,
                expected_arg,
                watch: Watch::Idle,
            });
        }
        let first = ops[0].history_index;
        self.user.clients.clients[c].pipeline = Some(Pipeline {
            first,
            deadline: self.now + self.params.client_timeout,
            ops,
            awaited: VecDeque::new(),
            watch_continues: false,
            close_after: false,
        });
        self.schedule(
            self.params.client_timeout,
            Event::ClientDeadline {
                client: c,
                history_index: first,
            },
        );
    }

    /// Sends the operations of client `c` not answered yet, together, on its connection to the
    /// node it believes leads.
    fn submit(&mut self, c: usize) {
        let node_count = self.params.node_count as NodeId;
        let target = self.user.clients.clients[c].leader_guess;
        if self.nodes[(target - 1) as usize].raft.is_none() {
            self.user.clients.clients[c].leader_guess = target % node_count + 1;
            return self.user.clients.retry_soon(c);
        }
        if !self.serving(target) {
            // Still replaying: the runtime holds requests until it serves.
            return self.user.clients.retry_soon(c);
        }
        let Clients {
            clients,
            connections,
            ..
        } = &mut self.user.clients;
        let history = &mut self.user.history;
        let client = &mut clients[c];
        let open = client.connections.iter().find(|(node, _)| *node == target);
        let reused = open.is_some();
        let connection = match open {
            Some((_, connection)) => *connection,
            None => {
                let connection = connections.open(target, Owner::Client(c), client.id);
                client.connections.push((target, connection));
                connection
            }
        };
        client.current = Some(connection);
        let p = client.pipeline.as_mut().expect("submitting a pipeline");
        let input = connections.input(connection).expect("open");
        // A watch lives on the connection that answered it: a transaction sent on another one
        // would run unwatched, so the watch starts over there.
        let continues = std::mem::take(&mut p.watch_continues) && reused;
        end_lost_attempts(&mut p.ops, continues, history, self.now);
        if p.ops.iter().all(|op| op.done) {
            client.pipeline = None;
            client.generation += 1;
            self.user.clients.wake.push((c, 1));
            return;
        }
        for (at, op) in p.ops.iter_mut().enumerate().filter(|(_, op)| !op.done) {
            requests(op, input, &mut p.awaited, at);
            if op.form == Form::Script {
                // Without an id of the client's: once sent, it is never sent again (a lost
                // attempt may have applied), unless refused before anything was proposed.
                op.watch = Watch::Sent;
            }
            if let Watch::Read(expected) = op.watch {
                // The compare-and-set starts now, expecting what the watch's read saw.
                let OpKind::Cas { new, .. } = op.kind else {
                    unreachable!("a watched transaction is a compare-and-set")
                };
                op.kind = OpKind::Cas { expected, new };
                op.watch = Watch::Sent;
                history.reinvoke(op.history_index, op.kind, self.now);
            }
        }
        // Copied, so that nothing is formatted unless tracing.
        let mut sent = [None; PIPELINE_OPS_MAX];
        for (slot, op) in sent.iter_mut().zip(p.ops.iter().filter(|op| !op.done)) {
            *slot = Some((op.form, op.kind, op.key));
        }
        self.trace_line(|| {
            let ops: Vec<String> = (sent.iter().flatten())
                .map(|(form, kind, key)| format!("{form:?} {kind:?} k{key}"))
                .collect();
            format!("client {c} at n{target}: {}", ops.join(", "))
        });
        self.serve(connection);
    }

    /// A reply to client `c` on `connection`, in request order.
    pub(crate) fn client_reply(&mut self, c: usize, connection: u64, reply: Reply) {
        let client = &mut self.user.clients.clients[c];
        if client.current != Some(connection) {
            return;
        }
        let Some(p) = client.pipeline.as_mut() else {
            return;
        };
        let Some(awaited) = p.awaited.pop_front() else {
            return self.violate("client reply", format!("client {c}: unexpected {reply:?}"));
        };
        let last = p.awaited.is_empty();
        let fits = match awaited {
            Awaited::Multi => reply == Reply::OK,
            Awaited::Queued => reply == Reply::Simple("QUEUED".into()),
            Awaited::Watch(at) | Awaited::WatchedRead(at) => {
                self.watch_answered(c, at, awaited, reply.clone())
            }
            Awaited::Answer(at) => {
                self.operation_answered(c, at, reply.clone());
                true
            }
        };
        if !fits {
            let detail = format!("client {c}: {awaited:?} answered {reply:?}");
            return self.violate("client reply", detail);
        }
        if !last || self.violation.is_some() {
            return;
        }
        // The attempt is over: done, or what was refused goes again.
        let client = &mut self.user.clients.clients[c];
        let Some(p) = client.pipeline.as_mut() else {
            return;
        };
        if std::mem::take(&mut p.close_after) {
            if let Some(connection) = client.current.take() {
                client.connections.retain(|(_, n)| *n != connection);
                self.user.clients.connections.close(connection);
            }
        }
        let client = &mut self.user.clients.clients[c];
        let p = client.pipeline.as_ref().expect("checked");
        if p.ops.iter().all(|op| op.done) {
            client.pipeline = None;
            client.generation += 1;
            self.user.clients.wake.push((c, 1));
        } else if p.ops.iter().any(|op| matches!(op.watch, Watch::Read(_))) {
            // A watched read answered: its transaction goes at once, on the same connection.
            client.pipeline.as_mut().expect("checked").watch_continues = true;
            self.submit(c);
        } else {
            self.user.clients.retry_soon(c);
        }
    }

    /// A refusal's hint: the leader it names, or, if it knows none, any node.
    fn refused(&mut self, c: usize, error: &str) {
        self.trace_line(|| format!("client {c} refused: {error}"));
        let node_count = self.params.node_count as NodeId;
        let hint = match leader_named(error) {
            Ok(named) => named,
            // No leader known there: any node may know better.
            Err(()) => Some(self.rng.random_range(1..=node_count)),
        };
        if let Some(leader) = hint.filter(|l| (1..=node_count).contains(l)) {
            self.user.clients.clients[c].leader_guess = leader;
        }
    }

    /// The answer of operation `at` of client `c`'s pipeline.
    fn operation_answered(&mut self, c: usize, at: usize, reply: Reply) {
        let op = match self.user.clients.clients[c].pipeline.as_ref() {
            Some(p) => Answered::of(&p.ops[at]),
            None => return,
        };
        if let Reply::Error(error) = &reply {
            if op.form == Form::Transaction && reply == ApplyReply::AppliedBefore.into_reply() {
                // A retry of a transaction that applied: it applied once, its replies are lost.
                let result = match op.kind {
                    OpKind::Read => OpResult::Unknown,
                    _ => OpResult::Written,
                };
                return self
                    .user
                    .clients
                    .finish(c, at, result, self.now, &mut self.user.history);
            }
            if op.form == Form::Watched {
                return self.watched_exec_refused(c, at, error.to_string());
            }
            if op.form == Form::Script {
                return self.script_refused(c, at, error.to_string());
            }
            return self.refused(c, error);
        }
        if op.form == Form::Watched && reply == Reply::NullArray {
            // Aborted: nothing changed, and nothing was observed.
            let history_index = self.user.clients.clients[c]
                .pipeline
                .as_ref()
                .expect("checked")
                .ops[at]
                .history_index;
            self.user
                .history
                .reinvoke(history_index, OpKind::Read, self.now);
            self.user.watched_aborted += 1;
            return self.user.clients.finish(
                c,
                at,
                OpResult::Unknown,
                self.now,
                &mut self.user.history,
            );
        }
        if op.form == Form::Watched {
            self.user.watched_swapped += 1;
        }
        match result_of(&op, &reply) {
            Ok(result) => self
                .user
                .clients
                .finish(c, at, result, self.now, &mut self.user.history),
            Err(detail) => self.violate("client reply", format!("client {c}: {detail}")),
        }
    }
}
