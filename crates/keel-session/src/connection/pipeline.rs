//! One connection's pipelined requests, sans-IO: the order in which the server serves them and
//! releases their replies. The tokio session (keel-server's `connection.rs`) and the deterministic
//! simulator (keel-sim's clients) both drive this code; they only propose, read, wait and write.
//!
//! Requests are served in *runs*:
//!
//! - Consecutive writes (an EXEC counts as one: its whole transaction is one log entry) form a
//!   write run. Their entries are proposed together, in request order, as one batch
//!   ([`Pipeline::take_batch`]) when the run ends: one step of the node, so they reach the log in
//!   request order and a refused one is never overtaken by a later one (the engine refuses the
//!   rest of a batch after a refusal). The entries are encoded only then, each stamped with the
//!   wall-clock time the shell passes to `take_batch` (the proposer's clock, an explicit input:
//!   the server's system clock, the simulator's per-node clock; see keel-redis's
//!   `state_machine/log_command.rs`).
//! - Consecutive reads form a read run. Each is started as it is admitted (their ReadIndex rounds
//!   are shared), in request order.
//! - A run ends where the kind changes ([`Admission::AfterAll`]): a read waits until every earlier
//!   write of the connection is answered (so it sees them), and a write waits until every earlier
//!   read is answered (so no earlier read sees it).
//! - Answers the protocol layer gives locally (PING, ECHO, HELLO, MULTI's `+OK`, `+QUEUED`, ...)
//!   take their place in the order without waiting. QUIT and admin commands wait for everything
//!   before them, and so does a request that reports the node's state (INFO: see
//!   [`needs_node_status`]); a connection whose pipeline is full ([`Pipeline::is_full`]:
//!   [`PIPELINE_REQUESTS_MAX`], 256 requests) waits too.
//! - Every request behind a WATCH waits for its watch point (a read started beside it could be
//!   served from an older state).
//!
//! Replies leave in request order ([`Pipeline::release`]): a request's outcome may come early (a
//! read served before the write ahead of it was answered), but its reply waits for every reply
//! before it. Released replies are counted in [`ServerStats`] when the shell gives the pipeline
//! one. A refused request is resolved by [`redirect`] (forwarded to the leader, answered that
//! the leader is elsewhere on another node's forwarding connection, or its refusal answered)
//! only once it is at the front, everything before it answered; the refused writes right behind
//! it may be resolved with it ([`Pipeline::behind`]): a follower forwards them to the leader
//! together, in request order, at most
//! [`FORWARD_GROUP_MAX`](crate::forwarding::FORWARD_GROUP_MAX) (64).
//!
//! Request ids: a write (or EXEC) is proposed under the connection's dedup session and its next
//! seq, unless it was given one. A forwarding connection of another node gives the id of the
//! write after it with `RAFT.FORWARD <client-id> <seq>` ([`Pipeline::intake`]); the simulator's
//! clients give theirs to retry a write under its first id.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel_engine::ClientError;

use super::{ClientConnection, Dispatch, LocalStats, Publishes, ServerStats};
use crate::forwarding::{write_reply, Forwarded};
use keel_redis::command::blocking::ATTEMPT;
use keel_redis::command::{self, AdminCommand, QueuedCommand, ReadCommand};
use keel_redis::state_machine::{LogCommand, LoggedCommand};
use keel_redis::RequestId;
use keel_resp::Reply;

/// Bound on the requests of one connection in flight at once (decoded, not yet answered).
pub const PIPELINE_REQUESTS_MAX: usize = 256;

/// The kind of the run in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Write,
    Read,
}

/// A write as the client sent it: what a node that does not lead forwards to the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteRequest {
    /// One write's arguments.
    Write(Vec<Bytes>),
    /// A transaction: each queued request's arguments (forwarded as `MULTI`, these, `EXEC`).
    Exec(Vec<Vec<Bytes>>),
}

impl WriteRequest {
    /// The request as the forwarding code takes it.
    pub fn forwarded(&self) -> Forwarded<'_> {
        match self {
            WriteRequest::Write(args) => Forwarded::Write(args),
            WriteRequest::Exec(queued) => Forwarded::Exec(queued),
        }
    }
}

/// A dispatched request on its way into the pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub dispatch: Dispatch,
    /// The request's arguments as received.
    pub args: Vec<Bytes>,
    /// The id a write (or EXEC) must be proposed under, if it was given one.
    pub given_id: Option<RequestId>,
}

/// What [`Pipeline::intake`] made of a request before it is dispatched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intake {
    /// Answered here (a `RAFT.FORWARD`, or a request that may not follow one): its answer took its
    /// place in the pipeline; do not dispatch it.
    Answered,
    /// Dispatch it; a write (or EXEC) it turns out to be is proposed under this id if given.
    Dispatch(Option<RequestId>),
}

/// What to do with a request [`Pipeline::admit`] was given.
#[derive(Debug)]
pub enum Admission {
    /// Queued in its place (a local answer, or a write joining the write run): nothing to do
    /// now.
    Queued,
    /// A read joined the read run as slot `slot`: start it now (reads are served in the order
    /// they start) and attach its handle with [`Pipeline::read_started`].
    StartRead { slot: u64, command: ReadCommand },
    /// Not queued: everything before it must be answered first. Propose the batch, release every
    /// reply, then admit it again.
    AfterAll(Request),
    /// QUIT (everything before it is answered): send this reply, then close.
    Close(Reply),
    /// An admin command (everything before it is answered): run it and send its reply.
    Admin(AdminCommand, Vec<Bytes>),
    /// A script command (everything before it is answered): run it (`keel_redis::script`) and send
    /// its reply.
    Script(keel_redis::command::ScriptCommand, Vec<Bytes>),
    /// A blocking pop, run by the connection once everything before it is answered; the
    /// request's arguments with it.
    Block(keel_redis::command::blocking::BlockingPop, Vec<Bytes>),
}

/// The handle of a proposal or a read, whose outcome the shell awaits.
#[derive(Debug)]
pub enum InFlight<W, R> {
    Write(W),
    Read(R),
}

/// How a refused request may be sent to the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relay {
    /// A write or transaction, under the id it was proposed with here, retried until answered.
    WithId(RequestId, WriteRequest),
    /// A read: once, as it is.
    Once(Vec<Bytes>),
}

/// The next thing to do to release replies, from [`Pipeline::release`].
#[derive(Debug)]
pub enum Release<W, R> {
    /// Nothing in flight.
    Idle,
    /// The front request's reply: send it.
    Send(Reply),
    /// WATCH's read came back (`point`: the watch point, or an error): record it with
    /// `ClientConnection::watch_point(keys, point)` and send what that answers.
    Watched { keys: Vec<Bytes>, point: Reply },
    /// The front request waits for its outcome. Its handle is handed out once (`Some`), for the
    /// shell to wait on; report the outcome with [`Pipeline::settle_write`] /
    /// [`Pipeline::settle`]. `None`: it was handed out before (or the write's batch was not
    /// proposed yet, see [`Pipeline::take_batch`]).
    Await(u64, Option<InFlight<W, R>>),
    /// The front request (slot `slot`) was refused with `error`, and every request before it is
    /// answered: decide with [`redirect`] whether to forward it (`relay`) or answer the refusal,
    /// and give its reply with [`Pipeline::answer`].
    Resolve {
        slot: u64,
        error: ClientError,
        relay: Relay,
    },
}

/// The request right behind one being resolved, from [`Pipeline::behind`]: what it takes to
/// resolve refused writes together (a follower forwards them to the leader in one exchange).
#[derive(Debug)]
pub enum Behind<W> {
    /// A write that waits for its outcome (handed out once): wait on it, settle it with
    /// [`Pipeline::settle_write`], and ask again.
    Await(u64, W),
    /// A write refused with `error`, now being resolved like the one before it: give its reply
    /// with [`Pipeline::answer`].
    Refused {
        slot: u64,
        error: ClientError,
        id: RequestId,
        request: WriteRequest,
    },
    /// Anything else (a read, a local answer, a write that has its reply, nothing yet).
    Stop,
}

/// Where a request a node refused goes, from [`redirect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// Forward it to the leader `leader` (if its client address is known).
    Forward(u64),
    /// It came from another node's forwarding connection: answer that `leader` leads, never
    /// forward again (no loops while leadership moves).
    LeaderElsewhere(u64),
    /// Answer the refusal ([`keel_redis::command::client_error_reply`]).
    Answer,
}

/// Whether a request refused with `error` by node `node_id` goes to the leader: only when the
/// node knows another node leads, and the request did not come forwarded.
pub fn redirect(error: &ClientError, node_id: u64, forwarding_connection: bool) -> Redirect {
    match error {
        ClientError::NotLeader {
            leader: Some(leader),
            ..
        } if *leader != node_id => {
            if forwarding_connection {
                Redirect::LeaderElsewhere(*leader)
            } else {
                Redirect::Forward(*leader)
            }
        }
        _ => Redirect::Answer,
    }
}

/// Whether the request reports the node's state (INFO, RAFT.STATUS): it waits for everything
/// before it, so that it reports the state after them.
pub fn needs_node_status(args: &[Bytes]) -> bool {
    let name = &args[0];
    name.eq_ignore_ascii_case(b"info") || name.eq_ignore_ascii_case(b"raft.status")
}

/// Whether the dispatched request is a write that may make the data take more memory (refused
/// past `maxmemory`); a transaction is if any of its writes is. As Redis: a refused transaction
/// runs none of its commands.
pub fn may_grow_memory(dispatch: &Dispatch) -> bool {
    match dispatch {
        Dispatch::Write(command) => command.may_grow_memory(),
        Dispatch::Block(pop) => pop.may_grow_memory(),
        Dispatch::Exec(transaction) => transaction
            .commands
            .iter()
            .any(|c| matches!(c, QueuedCommand::Write(w) if w.may_grow_memory())),
        _ => false,
    }
}

/// What a slot is for, beyond its outcome.
#[derive(Debug)]
enum Origin {
    /// Answered by the protocol layer, or a refused request whose forwarding data was handed
    /// out with [`Release::Resolve`].
    Local,
    Write {
        id: RequestId,
        request: WriteRequest,
        /// An EXEC's replies answered by this node, spliced into the applied array.
        local_replies: Vec<(usize, Reply)>,
        /// An EXEC's messages, published here once it applied (taken then: at most once).
        publishes: Publishes,
        /// The database it runs in (what forwarding it selects on the leader).
        db: u32,
    },
    Read {
        args: Vec<Bytes>,
        /// The database it reads (what forwarding it selects on the leader).
        db: u32,
    },
}

/// Where a request is on its way to its reply.
#[derive(Debug)]
enum Progress<W, R> {
    /// A write whose entry (encoded on arrival) waits for its run's batch to be stamped.
    Unproposed(Vec<u8>),
    /// A write in the batch [`Pipeline::take_batch`] handed out, its handle not attached yet.
    Proposing,
    /// Proposed or started; the handle until the shell takes it (`None` before it is attached,
    /// and after it was handed out).
    Waiting(Option<InFlight<W, R>>),
    /// Refused; resolved once it is at the front.
    Refused(ClientError),
    /// Its refusal is being resolved (a forward in flight).
    Resolving,
    Answered(Reply),
}

#[derive(Debug)]
struct Slot<W, R> {
    origin: Origin,
    progress: Progress<W, R>,
    /// Where its reply is counted, and when it was admitted (only when counting).
    meter: Option<Meter>,
}

/// What [`ServerStats::record`] needs of a request.
#[derive(Clone, Copy, Debug)]
struct Meter {
    command: Option<usize>,
    admitted: Instant,
}

/// One connection's requests in flight, in request order. `W` and `R` are the shell's handles of
/// a proposal and of a read (what it waits on; the simulator's are `()`).
#[derive(Debug)]
pub struct Pipeline<W, R> {
    slots: VecDeque<Slot<W, R>>,
    /// The number of `slots[0]`: slots are numbered from 0 in request order, so a number names
    /// one request for the connection's whole life.
    front: u64,
    /// The kind of the run in flight (`None`: only local answers, or nothing).
    run: Option<RunKind>,
    /// How many of the slots are WATCHes (what a request behind one waits for), kept so that
    /// admitting a request does not look through the whole pipeline.
    watches: usize,
    /// The connection's dedup session and the seq of its last write.
    client_id: u64,
    seq: u64,
    /// The database the writes admitted from now on run in (the connection's `SELECT`, which
    /// the server hands over with [`Pipeline::set_db`]).
    db: u32,
    /// [`Pipeline::resolving_db`].
    resolving_db: u32,
    /// On another node's forwarding connection: the id its `RAFT.FORWARD` gave the next write.
    announced_id: Option<RequestId>,
    /// Where each admitted request's reply is counted (INFO's stats), if anywhere, and the counts
    /// not added there yet ([`Pipeline::flush_stats`]).
    stats: Option<Arc<ServerStats>>,
    local_stats: LocalStats,
    /// The time the meters read, once per burst of admissions or of replies released: nothing
    /// waits within a burst, and a clock read per request and per reply was a measurable share
    /// of a pipelined request's cost. Forgotten whenever the shell is told to wait.
    meter_clock: Option<Instant>,
    /// Where an EXEC's PUBLISHes go once it applied (none: answered 0, published nowhere).
    pub(super) pubsub: Option<Arc<crate::pubsub::PubSub>>,
}

impl<W, R> Pipeline<W, R> {
    /// A connection whose writes are proposed under the dedup session `client_id`.
    pub fn new(client_id: u64) -> Self {
        Pipeline {
            slots: VecDeque::new(),
            front: 0,
            run: None,
            watches: 0,
            client_id,
            seq: 0,
            db: 0,
            resolving_db: 0,
            announced_id: None,
            pubsub: None,
            stats: None,
            local_stats: LocalStats::default(),
            meter_clock: None,
        }
    }

    /// The database of the refused writes handed out last ([`Release::Resolve`] and the
    /// [`Behind::Refused`] after it, all of one database): where forwarding selects them on the
    /// leader.
    pub fn resolving_db(&self) -> u32 {
        self.resolving_db
    }

    /// The database the writes admitted from now on run in.
    pub fn db(&self) -> u32 {
        self.db
    }

    /// The database the writes admitted from now on run in (`ClientConnection::db`).
    pub fn set_db(&mut self, db: u32) {
        self.db = db;
    }

    /// Counts every admitted request's reply in `stats` when it is released (in part kept here
    /// until [`Pipeline::flush_stats`]).
    pub fn count_in(&mut self, stats: Arc<ServerStats>) {
        self.stats = Some(stats);
    }

    /// Adds the counts kept here, and `net` (the connection's bytes), to the shared stats.
    pub fn flush_stats(&mut self, net: &mut LocalStats) {
        if let Some(stats) = &self.stats {
            stats.flush(&mut self.local_stats);
            stats.flush(net);
        }
    }

    /// Requests in flight (decoded, not yet answered).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether the pipeline holds as many requests as it may: answer everything in flight before
    /// the next.
    pub fn is_full(&self) -> bool {
        self.slots.len() >= PIPELINE_REQUESTS_MAX
    }

    /// The kind of the run in flight.
    pub fn run(&self) -> Option<RunKind> {
        self.run
    }

    /// Takes a request before it is dispatched: on a forwarding connection, a `RAFT.FORWARD`
    /// announces the id of the write after it (see `command/raft_forward.rs`); anywhere else it
    /// goes on as an unknown command.
    pub fn intake(&mut self, args: &[Bytes], connection: &ClientConnection) -> Intake {
        if let Some(id) = self.announced_id.take() {
            return match command::may_follow_forward(args, connection.in_transaction()) {
                Ok(()) => Intake::Dispatch(Some(id)),
                Err(error) => self.answered(error.to_reply()),
            };
        }
        if is_forwarding(connection) && command::is_forward(args) {
            let answer = match command::parse_forward(args) {
                Ok(id) => {
                    self.announced_id = Some(id);
                    Reply::OK
                }
                Err(error) => error.to_reply(),
            };
            return self.answered(answer);
        }
        Intake::Dispatch(None)
    }

    fn answered(&mut self, reply: Reply) -> Intake {
        self.push_local(reply);
        Intake::Answered
    }

    /// Queues a reply given without waiting (a local answer, or a refusal such as `-OOM`).
    pub fn push_local(&mut self, reply: Reply) {
        self.push_answer(reply, None);
    }

    fn push_answer(&mut self, reply: Reply, meter: Option<Meter>) {
        self.slots.push_back(Slot {
            origin: Origin::Local,
            progress: Progress::Answered(reply),
            meter,
        });
    }

    /// Queues a dispatched request, or says what must happen first.
    pub fn admit(&mut self, request: Request) -> Admission {
        let waits = match &request.dispatch {
            Dispatch::Reply(_) => false,
            Dispatch::Write(_) | Dispatch::Exec(_) => self.run == Some(RunKind::Read),
            Dispatch::Read(_) => self.run == Some(RunKind::Write),
            Dispatch::ReplyAndClose(_)
            | Dispatch::Admin(_)
            | Dispatch::Script(_)
            | Dispatch::Block(_) => !self.slots.is_empty(),
        };
        // A request behind a WATCH waits for the watch point: a read started beside it could be
        // served from an older state than the point (on a follower the leader reads the point,
        // the follower the read), and a value read under a watch must be at or after it.
        let behind_watch = !matches!(request.dispatch, Dispatch::Reply(_)) && self.watches > 0;
        debug_assert_eq!(
            self.watches,
            self.slots
                .iter()
                .filter(|s| matches!(&s.origin, Origin::Read { args, .. } if is_watch(args)))
                .count()
        );
        if waits || behind_watch {
            return Admission::AfterAll(request);
        }
        let Request {
            dispatch,
            args,
            given_id,
        } = request;
        // A blocked client's attempt is not the client's command: that is counted once, with
        // the reply it gets (Redis counts a blocked command once, when it is answered).
        let attempt = args
            .first()
            .is_some_and(|name| name.eq_ignore_ascii_case(ATTEMPT.as_bytes()));
        let meter = match self.stats {
            Some(_) if !attempt => Some(Meter {
                command: ServerStats::command_index(&args),
                admitted: *self.meter_clock.get_or_insert_with(Instant::now),
            }),
            _ => None,
        };
        match dispatch {
            Dispatch::Reply(reply) => self.push_answer(reply, meter),
            Dispatch::ReplyAndClose(reply) => return Admission::Close(reply),
            Dispatch::Admin(command) => return Admission::Admin(command, args),
            Dispatch::Script(command) => return Admission::Script(command, args),
            Dispatch::Block(pop) => return Admission::Block(pop, args),
            Dispatch::Write(command) => self.push_write(
                LoggedCommand::Write(command),
                WriteRequest::Write(args),
                (Vec::new(), Publishes::default()),
                given_id,
                meter,
            ),
            Dispatch::Exec(transaction) => self.push_write(
                transaction.logged(),
                WriteRequest::Exec(transaction.forwarded_requests()),
                (transaction.local_replies, transaction.publishes),
                given_id,
                meter,
            ),
            Dispatch::Read(command) => {
                self.run = Some(RunKind::Read);
                self.watches += usize::from(is_watch(&args));
                let slot = self.next_slot();
                self.slots.push_back(Slot {
                    origin: Origin::Read { args, db: self.db },
                    progress: Progress::Waiting(None),
                    meter,
                });
                return Admission::StartRead { slot, command };
            }
        }
        Admission::Queued
    }

    /// The number the next queued request gets.
    fn next_slot(&self) -> u64 {
        self.front + self.slots.len() as u64
    }

    /// A write joins the write run under its given id, else the connection's next.
    fn push_write(
        &mut self,
        command: LoggedCommand,
        request: WriteRequest,
        (local_replies, publishes): (Vec<(usize, Reply)>, Publishes),
        given_id: Option<RequestId>,
        meter: Option<Meter>,
    ) {
        self.run = Some(RunKind::Write);
        let id = given_id.unwrap_or_else(|| {
            self.seq += 1;
            RequestId {
                client_id: self.client_id,
                seq: self.seq,
            }
        });
        // Encoded now, so that the key and value are copied out and the client's input buffer
        // is free again; stamped when the batch is taken.
        let entry = LogCommand {
            client_id: id.client_id,
            request_seq: id.seq,
            stamp_ms: 0,
            db: self.db,
            command,
        }
        .encode_to_vec();
        self.slots.push_back(Slot {
            origin: Origin::Write {
                id,
                request,
                local_replies,
                publishes,
                db: self.db,
            },
            progress: Progress::Unproposed(entry),
            meter,
        });
    }

    /// The entries of the writes not proposed yet, in request order with their slot numbers,
    /// each encoded now and stamped `now_ms` (the proposer's wall clock, ms since the Unix epoch:
    /// the time its leader proposes it, see `state_machine/log_command.rs`): propose them as one
    /// batch, then attach their handles with [`Pipeline::proposed`].
    pub fn take_batch(&mut self, now_ms: u64) -> Vec<(u64, Bytes)> {
        let front = self.front;
        let mut batch = Vec::with_capacity(self.slots.len());
        for (at, slot) in self.slots.iter_mut().enumerate() {
            if !matches!(slot.progress, Progress::Unproposed(_)) {
                continue;
            }
            let Progress::Unproposed(mut entry) =
                std::mem::replace(&mut slot.progress, Progress::Proposing)
            else {
                unreachable!("matched above")
            };
            LogCommand::restamp(&mut entry, now_ms);
            batch.push((front + at as u64, Bytes::from(entry)));
        }
        batch
    }

    /// Attaches the handles of the batch [`Pipeline::take_batch`] returned last, in its order.
    pub fn proposed(&mut self, handles: impl IntoIterator<Item = W>) {
        let mut handles = handles.into_iter();
        for slot in &mut self.slots {
            if matches!(slot.progress, Progress::Proposing) {
                match handles.next() {
                    Some(h) => slot.progress = Progress::Waiting(Some(InFlight::Write(h))),
                    None => return,
                }
            }
        }
    }

    /// Attaches the handle of the read [`Admission::StartRead`] named.
    pub fn read_started(&mut self, slot: u64, handle: R) {
        if let Some(s) = self.slot_mut(slot) {
            if let Progress::Waiting(none @ None) = &mut s.progress {
                *none = Some(InFlight::Read(handle));
            }
        }
    }

    fn slot_mut(&mut self, slot: u64) -> Option<&mut Slot<W, R>> {
        let at = usize::try_from(slot.checked_sub(self.front)?).ok()?;
        self.slots.get_mut(at)
    }

    /// The outcome of write `slot`: its entry applied with `Ok(result)`, or the node refused it.
    /// Outcomes of requests no longer waiting are ignored (and publish nothing: at most once).
    pub fn settle_write(&mut self, slot: u64, outcome: Result<Bytes, ClientError>) {
        let pubsub = self.pubsub.clone();
        let Some(Slot {
            origin:
                Origin::Write {
                    local_replies,
                    publishes,
                    ..
                },
            progress,
            ..
        }) = self.slot_mut(slot)
        else {
            return self.settle(slot, outcome.map(|result| write_reply(&result)));
        };
        let waiting = matches!(progress, Progress::Waiting(_) | Progress::Proposing);
        let publishes = match outcome.is_ok() && waiting {
            true => std::mem::take(publishes),
            false => Publishes::default(),
        };
        let outcome = outcome
            .map(|result| publishes.splice(pubsub.as_deref(), write_reply(&result), local_replies));
        self.settle(slot, outcome);
    }

    /// The outcome of request `slot` (a read's, or one whose handle was lost): its reply, or the
    /// node refused it.
    pub fn settle(&mut self, slot: u64, outcome: Result<Reply, ClientError>) {
        let Some(s) = self.slot_mut(slot) else {
            return;
        };
        if matches!(s.progress, Progress::Waiting(_) | Progress::Proposing) {
            s.progress = match outcome {
                Ok(reply) => Progress::Answered(reply),
                Err(error) => Progress::Refused(error),
            };
        }
    }

    /// The reply of the refused request `slot` ([`Release::Resolve`]), resolved.
    pub fn answer(&mut self, slot: u64, reply: Reply) {
        if let Some(s) = self.slot_mut(slot) {
            if matches!(s.progress, Progress::Resolving) {
                s.progress = Progress::Answered(reply);
            }
        }
    }

    /// The write right behind `slot` (a request being resolved), when it is one that was refused
    /// or may be: its handle to wait on, or its refusal to resolve with `slot`'s. Every refusal
    /// handed out must be answered before [`Pipeline::release`] gets to it.
    pub fn behind(&mut self, slot: u64) -> Behind<W> {
        let Some(next) = slot.checked_add(1) else {
            return Behind::Stop;
        };
        let resolving_db = self.resolving_db;
        let Some(s) = self.slot_mut(next) else {
            return Behind::Stop;
        };
        // Writes of one database only: the group is forwarded over one SELECT.
        if !matches!(s.origin, Origin::Write { db, .. } if db == resolving_db) {
            return Behind::Stop;
        }
        match &mut s.progress {
            Progress::Waiting(handle @ Some(InFlight::Write(_))) => match handle.take() {
                Some(InFlight::Write(pending)) => Behind::Await(next, pending),
                _ => unreachable!("matched above"),
            },
            Progress::Refused(_) => {
                let Progress::Refused(error) =
                    std::mem::replace(&mut s.progress, Progress::Resolving)
                else {
                    unreachable!("matched above")
                };
                let Origin::Write { id, request, .. } =
                    std::mem::replace(&mut s.origin, Origin::Local)
                else {
                    unreachable!("matched above")
                };
                Behind::Refused {
                    slot: next,
                    error,
                    id,
                    request,
                }
            }
            _ => Behind::Stop,
        }
    }

    /// What the front request needs for its reply to leave. Call until it says
    /// [`Release::Await`] or [`Release::Idle`].
    pub fn release(&mut self) -> Release<W, R> {
        let release = self.release_front();
        if !matches!(release, Release::Send(_) | Release::Watched { .. }) {
            self.meter_clock = None; // the shell waits now
        }
        release
    }

    fn release_front(&mut self) -> Release<W, R> {
        let Some(front) = self.slots.front_mut() else {
            self.run = None;
            return Release::Idle;
        };
        let slot = self.front;
        match &mut front.progress {
            Progress::Answered(_) => {
                let popped = self.slots.pop_front().expect("front checked");
                self.front += 1;
                if self.slots.is_empty() {
                    self.run = None;
                }
                let Progress::Answered(reply) = popped.progress else {
                    unreachable!("matched above")
                };
                if let (Some(stats), Some(meter)) = (&self.stats, popped.meter) {
                    let now = *self.meter_clock.get_or_insert_with(Instant::now);
                    stats.record_local(
                        &mut self.local_stats,
                        meter.command,
                        &reply,
                        now.saturating_duration_since(meter.admitted),
                    );
                }
                match popped.origin {
                    Origin::Read { mut args, .. } if is_watch(&args) => {
                        self.watches -= 1;
                        args.remove(0);
                        Release::Watched {
                            keys: args,
                            point: reply,
                        }
                    }
                    _ => Release::Send(reply),
                }
            }
            Progress::Unproposed(_) | Progress::Proposing | Progress::Resolving => {
                Release::Await(slot, None)
            }
            Progress::Waiting(handle) => Release::Await(slot, handle.take()),
            Progress::Refused(_) => {
                let Progress::Refused(error) =
                    std::mem::replace(&mut front.progress, Progress::Resolving)
                else {
                    unreachable!("matched above")
                };
                if matches!(&front.origin, Origin::Read { args, .. } if is_watch(args)) {
                    // The leader reads the watch point; this node records the keys when it
                    // comes back (the slot keeps its WATCH).
                    let relay = Relay::Once(vec![Bytes::from_static(b"RAFT.WATCHPOINT")]);
                    return Release::Resolve { slot, error, relay };
                }
                // Moved out, not cloned: resolved, the request needs only its reply.
                let relay = match std::mem::replace(&mut front.origin, Origin::Local) {
                    Origin::Write {
                        id, request, db, ..
                    } => {
                        self.resolving_db = db;
                        Relay::WithId(id, request)
                    }
                    Origin::Read { args, db } => {
                        self.resolving_db = db;
                        Relay::Once(args)
                    }
                    Origin::Local => unreachable!("a local answer is never refused"),
                };
                Release::Resolve { slot, error, relay }
            }
        }
    }
}

/// Whether a read's arguments are a WATCH's (whose reply is the watch point).
fn is_watch(args: &[Bytes]) -> bool {
    args.first()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"watch"))
}

/// Whether `connection` is another node's forwarding connection (it named itself so).
pub fn is_forwarding(connection: &ClientConnection) -> bool {
    connection
        .name()
        .is_some_and(|n| n.as_ref() == command::FORWARD_CLIENT_NAME.as_bytes())
}

#[cfg(test)]
mod tests;
