//! The queue workload (on unless `RunConfig::queues` is off): a few clients that use lists as
//! queues and a stream with a consumer group, through the same server code as the register
//! clients (`client/`): keel-session's dispatch and pipeline, forwarding from followers, and for
//! the blocking pops the sans-IO waiters with wakes from the node's apply (`blocking.rs`).
//!
//! | operation            | request                                   | taken from / records        |
//! |----------------------|-------------------------------------------|-----------------------------|
//! | push                 | `RPUSH q e` or `LPUSH q e` (`e` unique)   | pushed                      |
//! | pop                  | `LPOP q` or `RPOP q`                      | queue                       |
//! | blocking pop         | `BLPOP q t` or `BRPOP q t` (t: 0.01-0.15 s) | queue; a null's wait      |
//! | move                 | `LMOVE q p RIGHT LEFT`                    | queue, onto processing      |
//! | blocking move        | `BLMOVE q p RIGHT LEFT t`                 | queue, onto processing      |
//! | done                 | `RPOP p`                                  | processing                  |
//! | add                  | `XADD s * e <e>`                          | stream entry added          |
//! | read new             | `XREADGROUP GROUP g c<i> COUNT 2 [BLOCK t] STREAMS s >` (`XGROUP CREATE s g 0 MKSTREAM` first) | entries delivered |
//! | acknowledge          | `XACK s g <ids read>`                     |                             |
//!
//! Each client sends one operation at a time, mostly to the node it believes leads and a quarter
//! of the time to any node (a follower forwards, in the seeds that draw forwarding). An error
//! reply, a lost connection or the client's own deadline (the client timeout plus the pop's)
//! leaves the operation's outcome unknown: it is never retried, and the checker counts it as one
//! that may have taken an element. What the clients saw is checked at the end of the run against
//! the converged state (`check.rs`).

pub(crate) mod check;

use bytes::Bytes;
use keel_core::NodeId;
use keel_resp::Reply;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::connection::{Frame, Owner};
use crate::kv_user::{KvEvent, KvState};
use crate::world::{Event, World};
use check::{Element, List, QueueHistory};

/// The keys of the workload: its register clients use decimal keys, never these.
const QUEUE: &[u8] = b"q";
const PROCESSING: &[u8] = b"p";
const STREAM: &[u8] = b"s";
const GROUP: &[u8] = b"g";

/// Queue clients are numbered from here: their elements are `number * 1,000,000 + seq`, and their
/// connections' dedup sessions are numbered on from `SESSION_BASE` (the register clients' are
/// their ids, 1 to 6).
const SESSION_BASE: u64 = 10_000;

/// A queue client's pause between operations (simulated ms): the few queue clients load the
/// cluster less than the register clients, so that a seed's runs cost little more than before.
const PAUSE_MS: std::ops::RangeInclusive<u64> = 10..=80;

#[derive(Clone, Debug)]
enum QueueOp {
    Push(Element, bool),
    Pop(List, bool),
    BlockingPop {
        left: bool,
        timeout_ms: u64,
    },
    Move,
    BlockingMove {
        timeout_ms: u64,
    },
    Add(Element),
    CreateGroup,
    /// With BLOCK, in ms, when it waits (served through the same waiters as the pops).
    ReadGroup(Option<u64>),
    Ack(Vec<Bytes>),
}

impl QueueOp {
    /// The list it may take an element from.
    fn takes_from(&self) -> Option<List> {
        match self {
            QueueOp::Pop(list, _) => Some(*list),
            QueueOp::BlockingPop { .. } | QueueOp::Move | QueueOp::BlockingMove { .. } => {
                Some(List::Queue)
            }
            _ => None,
        }
    }

    fn timeout_ms(&self) -> u64 {
        match self {
            QueueOp::BlockingPop { timeout_ms, .. }
            | QueueOp::BlockingMove { timeout_ms }
            | QueueOp::ReadGroup(Some(timeout_ms)) => *timeout_ms,
            _ => 0,
        }
    }

    fn request(&self, consumer: u64) -> Vec<Bytes> {
        let word = |w: &'static [u8]| Bytes::from_static(w);
        let seconds = |ms: u64| Bytes::from(format!("{:.3}", ms as f64 / 1000.0));
        let end = |left: bool| word(if left { b"LEFT" } else { b"RIGHT" });
        let key = |list: List| {
            word(match list {
                List::Queue => QUEUE,
                List::Processing => PROCESSING,
            })
        };
        match self {
            QueueOp::Push(e, left) => {
                let verb = word(if *left { b"LPUSH" } else { b"RPUSH" });
                vec![verb, word(QUEUE), decimal(*e)]
            }
            QueueOp::Pop(list, left) => {
                vec![word(if *left { b"LPOP" } else { b"RPOP" }), key(*list)]
            }
            QueueOp::BlockingPop { left, timeout_ms } => {
                let verb = word(if *left { b"BLPOP" } else { b"BRPOP" });
                vec![verb, word(QUEUE), seconds(*timeout_ms)]
            }
            QueueOp::Move => vec![
                word(b"LMOVE"),
                word(QUEUE),
                word(PROCESSING),
                end(false),
                end(true),
            ],
            QueueOp::BlockingMove { timeout_ms } => vec![
                word(b"BLMOVE"),
                word(QUEUE),
                word(PROCESSING),
                end(false),
                end(true),
                seconds(*timeout_ms),
            ],
            QueueOp::Add(e) => vec![
                word(b"XADD"),
                word(STREAM),
                word(b"*"),
                word(b"e"),
                decimal(*e),
            ],
            QueueOp::CreateGroup => vec![
                word(b"XGROUP"),
                word(b"CREATE"),
                word(STREAM),
                word(GROUP),
                word(b"0"),
                word(b"MKSTREAM"),
            ],
            QueueOp::ReadGroup(block_ms) => read_group(consumer, *block_ms),
            QueueOp::Ack(ids) => {
                let mut args = vec![word(b"XACK"), word(STREAM), word(GROUP)];
                args.extend(ids.iter().cloned());
                args
            }
        }
    }
}

/// `XREADGROUP GROUP g c<consumer> COUNT 2 [BLOCK ms] STREAMS s >`.
fn read_group(consumer: u64, block_ms: Option<u64>) -> Vec<Bytes> {
    let word = |w: &'static [u8]| Bytes::from_static(w);
    let mut args = vec![
        word(b"XREADGROUP"),
        word(b"GROUP"),
        word(GROUP),
        Bytes::from(format!("c{consumer}")),
        word(b"COUNT"),
        word(b"2"),
    ];
    if let Some(ms) = block_ms {
        args.extend([word(b"BLOCK"), decimal(ms)]);
    }
    args.extend([word(b"STREAMS"), word(STREAM), word(b">")]);
    args
}

fn decimal(n: u64) -> Bytes {
    Bytes::from(n.to_string())
}

struct QueueClient {
    /// Its number: names its elements and its consumer.
    number: u64,
    seq: u64,
    /// Events scheduled with an older generation are stale.
    generation: u64,
    node_guess: NodeId,
    /// Its connection, and to which node.
    connection: Option<(NodeId, u64)>,
    /// The operation in flight, and when it was sent.
    op: Option<(QueueOp, u64)>,
    group_made: bool,
    /// Stream entries it read and has not acknowledged (at most a few: it acknowledges them
    /// next).
    to_ack: Vec<Bytes>,
}

/// The queue clients and what they saw.
pub(crate) struct QueueClients {
    clients: Vec<QueueClient>,
    pub history: QueueHistory,
    /// Operations answered, for the report.
    pub answered: u64,
    /// The dedup session of the next connection a client opens: one of its own for each, as
    /// the server's client ids, since a connection's pipeline numbers its writes from 1.
    next_session: u64,
}

impl QueueClients {
    /// 2 to 4 clients, drawn from a generator of the seed's own (nothing else of the run moves).
    pub fn new(seed: u64) -> QueueClients {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7175_6575_6573_5f71);
        let count = rng.random_range(2..=4u64);
        QueueClients {
            clients: (0..count)
                .map(|i| QueueClient {
                    number: SESSION_BASE + i,
                    seq: 0,
                    generation: 0,
                    node_guess: 1,
                    connection: None,
                    op: None,
                    group_made: false,
                    to_ack: Vec::new(),
                })
                .collect(),
            history: QueueHistory::default(),
            answered: 0,
            next_session: SESSION_BASE + count,
        }
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Operations still in flight (a converged cluster has none).
    pub fn pending(&self) -> usize {
        self.clients.iter().filter(|c| c.op.is_some()).count()
    }

    /// Records operation `op` of an unknown outcome.
    fn unknown(&mut self, op: &QueueOp) {
        let history = &mut self.history;
        match op {
            QueueOp::Push(e, _) => history.maybe_pushed.push(*e),
            QueueOp::Add(e) => history.stream_maybe.push(*e),
            _ => {}
        }
        if let Some(list) = op.takes_from() {
            history.unknown_takes[list.index()] += 1;
        }
    }
}

impl World<KvState> {
    fn queues(&mut self) -> &mut QueueClients {
        self.user.queues.as_mut().expect("the queue workload is on")
    }

    /// Queue client `q`'s timer: it sends its next operation unless one is in flight.
    pub(crate) fn queue_wake(&mut self, q: usize, generation: u64) {
        let client = &self.queues().clients[q];
        if client.generation != generation || client.op.is_some() || self.healing {
            return;
        }
        let op = self.draw_queue_op(q);
        self.send_queue_op(q, op);
    }

    fn draw_queue_op(&mut self, q: usize) -> QueueOp {
        let roll = self.rng.random_range(0..20);
        let timeout_ms = self.rng.random_range(10..=150);
        let left = self.rng.random_bool(0.5);
        let client = &mut self.queues().clients[q];
        client.seq += 1;
        let element = client.number * 1_000_000 + client.seq;
        match roll {
            0..=5 => QueueOp::Push(element, roll < 2),
            6..=7 => QueueOp::Pop(List::Queue, left),
            8..=9 => QueueOp::BlockingPop { left, timeout_ms },
            10 => QueueOp::Move,
            11 => QueueOp::BlockingMove { timeout_ms },
            12..=13 => QueueOp::Pop(List::Processing, false),
            14..=15 => QueueOp::Add(element),
            _ if !client.group_made => QueueOp::CreateGroup,
            // Half of the reads block (drawn from what is drawn anyway: a seed's draws stay).
            16..=17 => QueueOp::ReadGroup(left.then_some(timeout_ms)),
            _ if client.to_ack.is_empty() => QueueOp::ReadGroup(None),
            _ => QueueOp::Ack(std::mem::take(&mut client.to_ack)),
        }
    }

    fn send_queue_op(&mut self, q: usize, op: QueueOp) {
        let node_count = self.params.node_count as NodeId;
        let any = self.rng.random_bool(0.25);
        let any_node = self.rng.random_range(1..=node_count);
        let client = &mut self.queues().clients[q];
        let target = if any { any_node } else { client.node_guess };
        if self.nodes[(target - 1) as usize].raft.is_none() || !self.serving(target) {
            let client = &mut self.queues().clients[q];
            client.node_guess = target % node_count + 1;
            return self.queue_pause(q);
        }
        let deadline = self.params.client_timeout + op.timeout_ms();
        let queues = self.queues();
        let session = queues.next_session;
        let client = &mut queues.clients[q];
        let args = op.request(client.number - SESSION_BASE);
        let old = client.connection.filter(|(node, _)| *node != target);
        if let Some((_, connection)) = old {
            client.connection = None;
            self.user.clients.connections.close(connection);
        }
        let queues = self.user.queues.as_mut().expect("on");
        let connection = match queues.clients[q].connection {
            Some((_, connection)) => connection,
            None => {
                queues.next_session += 1;
                let connections = &mut self.user.clients.connections;
                let connection = connections.open(target, Owner::Queue(q), session);
                queues.clients[q].connection = Some((target, connection));
                connection
            }
        };
        let client = &mut queues.clients[q];
        client.op = Some((op, self.now));
        client.generation += 1;
        let generation = client.generation;
        self.trace_line(|| format!("queue client {q} at n{target}: {args:?}"));
        self.user
            .clients
            .connections
            .send(connection, [Frame::new(args)]);
        let event = KvEvent::QueueDeadline {
            client: q,
            generation,
        };
        self.schedule(deadline, Event::User(event));
        self.serve(connection);
    }

    /// Client `q` pauses before its next operation.
    fn queue_pause(&mut self, q: usize) {
        let delay = self.rng.random_range(PAUSE_MS);
        let client = &mut self.queues().clients[q];
        client.generation += 1;
        let event = KvEvent::QueueWake {
            client: q,
            generation: client.generation,
        };
        self.schedule(delay, Event::User(event));
    }

    /// Client `q`'s operation sent under `generation` ran out of time: its outcome is unknown,
    /// and its connection is closed (a reply still owed would be taken for the next one's).
    pub(crate) fn queue_deadline(&mut self, q: usize, generation: u64) {
        let client = &mut self.queues().clients[q];
        if client.generation != generation {
            return;
        }
        let Some((op, _)) = client.op.take() else {
            return;
        };
        if let Some((_, connection)) = client.connection.take() {
            self.user.clients.connections.close(connection);
        }
        self.trace_line(|| format!("queue client {q} timed out: {op:?}"));
        self.queues().unknown(&op);
        self.queue_pause(q);
    }

    /// Node `node` went down: an operation on a connection to it has an unknown outcome.
    pub(crate) fn queue_node_lost(&mut self, node: NodeId) {
        let Some(queues) = self.user.queues.as_mut() else {
            return;
        };
        let mut lost = Vec::new();
        for (q, client) in queues.clients.iter_mut().enumerate() {
            if client.connection.is_some_and(|(n, _)| n == node) {
                client.connection = None;
                client.node_guess = node % self.params.node_count as NodeId + 1;
                if let Some((op, _)) = client.op.take() {
                    lost.push((q, op));
                }
            }
        }
        for (q, op) in lost {
            self.queues().unknown(&op);
            self.queue_pause(q);
        }
    }

    /// The reply to queue client `q`'s operation on `connection`.
    pub(crate) fn queue_reply(&mut self, q: usize, connection: u64, reply: Reply) {
        let client = &mut self.queues().clients[q];
        if client.connection.map(|(_, c)| c) != Some(connection) {
            return;
        }
        let Some((op, sent_at)) = client.op.take() else {
            return self.violate(
                "queue reply",
                format!("queue client {q}: unexpected {reply:?}"),
            );
        };
        if let Err(detail) = self.queue_answered(q, &op, sent_at, reply) {
            return self.violate("queue reply", format!("queue client {q}: {detail}"));
        }
        self.queues().answered += 1;
        self.queue_pause(q);
    }

    fn queue_answered(
        &mut self,
        q: usize,
        op: &QueueOp,
        sent_at: u64,
        reply: Reply,
    ) -> Result<(), String> {
        let now = self.now;
        if let Reply::Error(error) = &reply {
            return self.queue_refused(q, op, error);
        }
        let queues = self.queues();
        let history = &mut queues.history;
        let unexpected = || format!("{op:?} answered {reply:?}");
        match (op, &reply) {
            (QueueOp::Push(e, _), Reply::Integer(_)) => history.acked.push(*e),
            (QueueOp::Pop(..) | QueueOp::Move, Reply::Null) => {}
            (QueueOp::Pop(list, _), Reply::Bulk(e)) => {
                history.delivered.push((element(e)?, *list, false));
            }
            (QueueOp::Move | QueueOp::BlockingMove { .. }, Reply::Bulk(e)) => {
                history.delivered.push((element(e)?, List::Queue, true));
            }
            (QueueOp::BlockingPop { .. }, Reply::Array(pair)) => match &pair[..] {
                [Reply::Bulk(_), Reply::Bulk(e)] => {
                    history.delivered.push((element(e)?, List::Queue, false));
                }
                _ => return Err(unexpected()),
            },
            (QueueOp::BlockingPop { timeout_ms, .. }, Reply::NullArray)
            | (QueueOp::BlockingMove { timeout_ms }, Reply::Null) => {
                history.null_waits.push((sent_at, now, *timeout_ms));
            }
            (QueueOp::Add(e), Reply::Bulk(id)) => {
                let id = String::from_utf8_lossy(id).into_owned();
                history.stream_acked.push((id, *e));
            }
            (QueueOp::CreateGroup, r) if *r == Reply::OK => queues.clients[q].group_made = true,
            (QueueOp::ReadGroup(_), Reply::Null | Reply::NullArray) => {}
            (QueueOp::ReadGroup(_), Reply::Keyed(streams)) => {
                for (id, e) in stream_entries(streams).ok_or_else(unexpected)? {
                    history.stream_delivered.push((id.clone(), e));
                    queues.clients[q].to_ack.push(Bytes::from(id));
                }
            }
            (QueueOp::Ack(_), Reply::Integer(_)) => {}
            _ => return Err(unexpected()),
        }
        Ok(())
    }

    /// An error answered `op`: its outcome is unknown (a group that exists, or is missing, is
    /// noted), and a leader it names is tried next.
    fn queue_refused(&mut self, q: usize, op: &QueueOp, error: &str) -> Result<(), String> {
        let node_count = self.params.node_count as NodeId;
        let client = &mut self.queues().clients[q];
        if error.starts_with("BUSYGROUP") {
            client.group_made = true;
            return Ok(());
        }
        if error.starts_with("NOGROUP") {
            client.group_made = false;
        }
        if let Ok(Some(leader)) = crate::client::leader_named(error) {
            if (1..=node_count).contains(&leader) {
                client.node_guess = leader;
            }
        }
        self.queues().unknown(op);
        Ok(())
    }
}

/// An element as the clients write them (decimal).
fn element(bytes: &[u8]) -> Result<Element, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("{bytes:?} is no element a client pushed"))
}

/// The entries of an `XREADGROUP` or `XRANGE` reply: (id, element).
fn entries(entries: &[Reply]) -> Option<Vec<(String, Element)>> {
    entries
        .iter()
        .map(|entry| match entry {
            Reply::Array(parts) => match &parts[..] {
                [Reply::Bulk(id), Reply::Array(fields)] => match &fields[..] {
                    [Reply::Bulk(_), Reply::Bulk(e)] => {
                        let id = String::from_utf8_lossy(id).into_owned();
                        Some((id, element(e).ok()?))
                    }
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The entries of `XREADGROUP`'s reply: each stream's name and entries.
fn stream_entries(streams: &[(Reply, Reply)]) -> Option<Vec<(String, Element)>> {
    let mut all = Vec::new();
    for (_, list) in streams {
        let Reply::Array(list) = list else {
            return None;
        };
        all.extend(entries(list)?);
    }
    Some(all)
}

/// The state of the lists and the stream a node's state machine holds.
pub(crate) fn final_queues(
    state: &keel_redis::KvStateMachine,
) -> Result<check::FinalQueues, String> {
    let read = |args: &[&[u8]]| {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        match keel_redis::Command::parse(&args) {
            Ok(keel_redis::Command::Read(command)) => Ok(state.read(&command)),
            other => Err(format!("{args:?} is no read: {other:?}")),
        }
    };
    let list = |key: &[u8]| -> Result<Vec<Element>, String> {
        match read(&[b"LRANGE", key, b"0", b"-1"])? {
            Reply::Array(items) => items
                .iter()
                .map(|item| match item {
                    Reply::Bulk(e) => element(e),
                    other => Err(format!("a list holds {other:?}")),
                })
                .collect(),
            other => Err(format!("LRANGE answered {other:?}")),
        }
    };
    let stream = match read(&[b"XRANGE", STREAM, b"-", b"+"])? {
        Reply::Array(items) => entries(&items).ok_or("XRANGE answered entries no client added")?,
        other => return Err(format!("XRANGE answered {other:?}")),
    };
    Ok(check::FinalQueues {
        lists: [list(QUEUE)?, list(PROCESSING)?],
        stream,
    })
}

impl World<KvState> {
    /// Schedules each queue client's first operation, if the run has the workload.
    pub(crate) fn start_queue_clients(&mut self) {
        let count = self.user.queues.as_ref().map_or(0, QueueClients::len);
        for q in 0..count {
            self.queue_pause(q);
        }
    }

    /// The end of a converged run: what the queue clients saw against what a node that applied
    /// everything holds ([`check::check`]).
    pub(crate) fn check_queues(&self) -> Result<(), crate::invariants::Violation> {
        let Some(queues) = &self.user.queues else {
            return Ok(());
        };
        let newest = self
            .nodes
            .iter()
            .filter_map(|n| n.app.as_ref())
            .map(|app| app.applier.state().machine().state())
            .max_by_key(|state| state.applied_index());
        let Some(state) = newest else {
            return Ok(());
        };
        let violation = |detail| crate::invariants::Violation {
            invariant: "queue delivery",
            detail,
        };
        let end = final_queues(state).map_err(violation)?;
        check::check(&queues.history, &end).map_err(violation)
    }
}
