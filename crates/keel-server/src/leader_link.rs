//! Forwarding a client's request to the leader's client port and relaying the reply.
//!
//! One lazily opened connection per client connection (so the leader sees the requests of one
//! client in order), named [`super::FORWARD_CLIENT_NAME`] so that the leader never forwards them
//! again.
//!
//! A write (or a transaction) goes under the request id this node gave it, its client
//! connection's dedup session and the write's seq, announced by `RAFT.FORWARD` just before it
//! (keel-redis's `command/raft_forward.rs`); the leader proposes it under that id.
//! `keel_session::forwarding` (`ForwardedWrite`, time as an input) decides whether and when it
//! is sent again, always under that id: after a lost link, no reply in time, or an answer that
//! it was not applied; when it gives up, the client is answered `-TRYAGAIN outcome unknown`. A
//! retry finds the leader as the first forward did: this node proposes the write again (under
//! the same id, so if it leads by now the write is simply applied here), and forwards it to the
//! leader its refusal names. This shell only moves bytes, waits and proposes; what a retry finds
//! and what it answers is the decision module's. The state machine's deduplication makes the
//! write apply once while its session is in the dedup window. With the `forward-retry-new-id`
//! mutation a retry gets a new id.
//!
//! A pipelining client's refused writes, up to `FORWARD_GROUP_MAX` (64, half the dedup window,
//! so a retry never falls below it), go in one exchange (`send_group`, following
//! `forwarding::wire_parts`): their first attempts written at once, replies read in order; any
//! that needs a retry is retried on its own, in order.
//!
//! Reads and admin commands are forwarded once, as they are: a failure before anything was sent
//! is definitely not applied; after sending, an admin command's outcome is unknown and a read has
//! just failed.
//!
//! A transaction (EXEC refused with NotLeader) is forwarded as its whole group: `MULTI`, each
//! queued request, `RAFT.FORWARD`, `EXEC`, written at once; only EXEC's reply is relayed (the
//! leader validates and queues the commands again, so a command it rejects turns EXEC into its
//! `-EXECABORT`). A transaction retried after its first copy applied is not run again, and
//! answers the state machine's error saying that its replies are not kept.
//!
//! The link speaks its client's protocol: before a request of a RESP3 client goes, the link says
//! `HELLO 3` (and `HELLO 2` when the client switches back), so that the leader builds the reply
//! in that protocol and the reply relayed is the leader's, byte for byte. Parsing a reply and
//! encoding it again in another protocol would not do: RESP2 flattens maps, sets, doubles and
//! member-score pairs, and RESP3's pairs arrive as nested arrays a RESP2 client must not see.
//! Likewise the link says `SELECT n` before requests of another database than its own
//! (`Pipeline::resolving_db`), so that the leader runs them where the client selected.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use keel::ClientError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::{ServerContext, FORWARD_CLIENT_NAME};
use keel_redis::command::encode_forward_request;
use keel_redis::state_machine::{LogCommand, LoggedCommand};
use keel_redis::RequestId;
use keel_resp::{encode_request, parse_reply, Limits, ProtocolVersion, Reply};
use keel_session::connection::{ClientConnection, Dispatch, NodeReport};
use keel_session::forwarding::{Abandoned, ForwardedWrite, Next, RetryPolicy, FORWARD_GROUP_MAX};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Requests of one exchange are encoded and written this many bytes at a time, at most (plus
/// one request).
const EXCHANGE_WRITE_BYTES: usize = 64 * 1024;

pub(super) use keel_session::forwarding::Forwarded;
use keel_session::forwarding::{wire_parts, WirePart, EXEC, MULTI};

/// What forwarding needs of this node.
pub(super) trait Node {
    fn id(&self) -> u64;
    /// Where `id`'s clients reach it, as far as this node knows.
    fn client_addr(&self, id: u64) -> Option<String>;
    /// Proposes a log entry here: its result once applied, or why not.
    async fn propose(&self, entry: Bytes) -> Result<Bytes, ClientError>;
}

impl Node for ServerContext {
    fn id(&self) -> u64 {
        self.node_id
    }

    fn client_addr(&self, id: u64) -> Option<String> {
        ServerContext::client_addr(self, id)
    }

    async fn propose(&self, entry: Bytes) -> Result<Bytes, ClientError> {
        self.handle.propose(entry).await
    }
}

pub(super) struct Forwarder {
    link: Option<Link>,
    /// How much longer than the forwarding deadline a `RAFT.MEMBER` reply may take: the leader
    /// waits up to the catch-up timeout for a new member before it answers.
    membership_wait: Duration,
    /// The node's `requirepass`: the link to the leader authenticates with it (every node of a
    /// cluster is given the same one), whatever the forwarded client authenticated with here.
    password: Option<Bytes>,
    /// The node's request limits: what the leader, with the same, answers is parsed with them.
    limits: Limits,
    policy: RetryPolicy,
    /// The protocol of the client connection, which the link speaks before it sends.
    protocol: ProtocolVersion,
    /// The database of the writes forwarded next (their client's SELECT), which the link selects
    /// on the leader before it sends.
    db: u32,
}

struct Link {
    leader: u64,
    stream: TcpStream,
    input: BytesMut,
    /// Requests encoded and not written yet, kept between exchanges (a buffer a large group grew
    /// is given back once written).
    output: BytesMut,
    limits: Limits,
    /// The protocol the leader answers this link in (RESP2 until a `HELLO 3`).
    protocol: ProtocolVersion,
    /// The database the link's connection on the leader is in (0 until a `SELECT`).
    db: u32,
}

/// How one attempt at a write ended.
enum Attempt {
    /// The reply to the write (or an answer of this node's own: a retry is proposed here first).
    Answered(Reply),
    /// Nothing was sent; the refusal says why.
    NotSent(Reply),
    /// Sent, and no reply came in time.
    Lost,
}

pub(super) use keel_session::forwarding::{leader_address_unknown, leader_elsewhere};

/// Milliseconds since the first attempt of a forward, the time its decisions run on.
struct Clock {
    start: Instant,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }
}

/// What `write` does after `attempt`; `answer` keeps the last reply or refusal it got.
fn settle(write: &mut ForwardedWrite, attempt: Attempt, answer: &mut Reply, now_ms: u64) -> Next {
    match attempt {
        Attempt::Answered(reply) => {
            let next = write.on_reply(now_ms, &reply);
            *answer = reply;
            next
        }
        Attempt::NotSent(refusal) => {
            *answer = refusal;
            write.on_not_sent(now_ms)
        }
        Attempt::Lost => write.on_lost_link(now_ms),
    }
}

fn leader_unreachable(leader: u64, addr: &str, why: &str) -> Reply {
    Reply::error(format!(
        "TRYAGAIN leader is node {leader} at {addr}, not reachable: {why}"
    ))
}

impl Forwarder {
    pub(super) fn new(membership_wait: Duration, password: Option<Bytes>, limits: Limits) -> Self {
        Forwarder {
            link: None,
            membership_wait,
            password,
            limits,
            policy: RetryPolicy::default(),
            protocol: ProtocolVersion::Resp2,
            db: 0,
        }
    }

    /// Makes the link run the next requests in database `db`: the database of the writes it
    /// forwards next (`Pipeline::db_of`), or of the client's connection for anything else.
    pub(super) fn in_db(&mut self, db: u32) {
        self.db = db;
    }

    /// Makes the link answer in `protocol` from the next request on: the client's, as it is
    /// when its request is forwarded.
    pub(super) fn speak(&mut self, protocol: ProtocolVersion) {
        self.protocol = protocol;
    }

    fn deadline(&self) -> Duration {
        Duration::from_millis(self.policy.deadline_ms)
    }

    /// Forwards a read or an admin command once, or a group of requests whose last reply is
    /// the answer (a transaction that queued a script: `MULTI` ... `EXEC`) (`may_change`:
    /// whether it may change state, so that a failure after sending leaves its outcome
    /// unknown).
    pub(super) async fn forward(
        &mut self,
        leader: u64,
        addr: &str,
        group: &[&[Bytes]],
        may_change: bool,
    ) -> Reply {
        let mut wait = self.deadline();
        if group[0][0].eq_ignore_ascii_case(b"raft.member") {
            wait += self.membership_wait;
        }
        let deadline = Instant::now() + wait;
        let link = match self.link_to(leader, addr, deadline).await {
            Ok(link) => link,
            Err(why) => return leader_unreachable(leader, addr, &why),
        };
        match link.exchange(group, deadline, |_, _| {}).await {
            Ok(reply) => reply,
            Err(why) => {
                self.link = None;
                if may_change {
                    Reply::error("TRYAGAIN outcome unknown")
                } else {
                    Reply::error(format!(
                        "TRYAGAIN forwarding to leader {leader} failed: {why}"
                    ))
                }
            }
        }
    }

    /// Forwards writes (or transactions) that `node` proposed, each under its id, and `leader`
    /// refused: their first attempts together, in one exchange on the link (a pipelining client
    /// costs one round trip per group, not per write; the leader proposes them in order, as one
    /// batch), then each one that needs it retried on its own, in order, as [`RetryPolicy`]
    /// allows. Their answers, in order, or why there is none. At most [`FORWARD_GROUP_MAX`].
    pub(super) async fn forward_writes(
        &mut self,
        node: &impl Node,
        leader: u64,
        addr: String,
        writes: &[(RequestId, Forwarded<'_>)],
    ) -> Vec<Reply> {
        debug_assert!(writes.len() <= FORWARD_GROUP_MAX);
        let clock = Clock::start();
        let mut started: Vec<(ForwardedWrite, Next)> = writes
            .iter()
            .map(|(id, _)| ForwardedWrite::start(*id, clock.now_ms(), self.policy))
            .collect();
        // The first attempts: every write whose first step is to send (all of them, unless a
        // policy allows no attempt), in one exchange.
        let sending: Vec<(usize, RequestId, u64)> = started
            .iter()
            .enumerate()
            .filter_map(|(at, (_, next))| match *next {
                Next::Send { id, reply_by_ms } => Some((at, id, reply_by_ms)),
                _ => None,
            })
            .collect();
        let reply_by = sending.iter().map(|&(_, _, ms)| clock.at(ms)).min();
        let mut answers: Vec<Reply> = vec![Reply::error("TRYAGAIN no leader"); writes.len()];
        if let Some(reply_by) = reply_by {
            let group: Vec<(RequestId, Forwarded<'_>)> = sending
                .iter()
                .map(|&(at, id, _)| (id, writes[at].1))
                .collect();
            let mut refused_ids = vec![false; group.len()];
            let attempts = self
                .send_group(leader, &addr, &group, &mut refused_ids, reply_by)
                .await;
            for ((&(at, _, _), attempt), refused) in sending.iter().zip(attempts).zip(refused_ids) {
                let (write, next) = &mut started[at];
                if refused {
                    write.on_id_refused();
                }
                *next = settle(write, attempt, &mut answers[at], clock.now_ms());
            }
        }
        let mut replies = Vec::with_capacity(writes.len());
        for (((write, next), answer), (_, request)) in started.into_iter().zip(answers).zip(writes)
        {
            replies.push(
                self.finish_write(node, write, next, answer, *request, &clock)
                    .await,
            );
        }
        replies
    }

    /// [`Self::forward_writes`] of one write.
    pub(super) async fn forward_write(
        &mut self,
        node: &impl Node,
        leader: u64,
        addr: String,
        id: RequestId,
        request: Forwarded<'_>,
    ) -> Reply {
        self.forward_writes(node, leader, addr, &[(id, request)])
            .await
            .pop()
            .expect("one reply per write")
    }

    /// Takes a forwarded write from `next` to its answer (`answer`: the last attempt's, relayed
    /// when the decision is to relay it, or the refusal if no attempt applied it).
    async fn finish_write(
        &mut self,
        node: &impl Node,
        mut write: ForwardedWrite,
        mut next: Next,
        mut answer: Reply,
        request: Forwarded<'_>,
        clock: &Clock,
    ) -> Reply {
        loop {
            next = match next {
                Next::Send { id, reply_by_ms } => {
                    let attempt = self
                        .retry(node, &mut write, id, request, clock.at(reply_by_ms))
                        .await;
                    settle(&mut write, attempt, &mut answer, clock.now_ms())
                }
                Next::Wait { until_ms } => {
                    tokio::time::sleep_until(clock.at(until_ms)).await;
                    write.on_wake(clock.now_ms())
                }
                Next::GiveUp(Abandoned::Unknown) => {
                    return Reply::error("TRYAGAIN outcome unknown")
                }
                Next::Relay | Next::GiveUp(Abandoned::NotApplied) => return answer,
            };
        }
    }

    /// A retry: proposed here again under `id`, and forwarded to the leader this node's refusal
    /// names, as the first attempt was.
    async fn retry(
        &mut self,
        node: &impl Node,
        write: &mut ForwardedWrite,
        id: RequestId,
        request: Forwarded<'_>,
        reply_by: Instant,
    ) -> Attempt {
        let Some((entry, local_replies)) =
            log_entry(id, request, &self.limits, super::wall_clock_ms(), self.db)
        else {
            return Attempt::Answered(Reply::error(
                "ERR internal error: a forwarded request no longer parses",
            ));
        };
        match timeout_at(reply_by, node.propose(entry)).await {
            Err(_) => Attempt::Lost,
            Ok(Ok(result)) => Attempt::Answered(keel_session::connection::splice(
                super::connection::write_reply(&result),
                &local_replies,
            )),
            Ok(Err(ClientError::NotLeader {
                leader: Some(leader),
                ..
            })) if leader != node.id() => match node.client_addr(leader) {
                Some(addr) => {
                    self.send_with_id(write, leader, &addr, id, request, reply_by)
                        .await
                }
                None => Attempt::NotSent(leader_address_unknown(leader)),
            },
            Ok(Err(error)) => Attempt::Answered(keel_redis::command::client_error_reply(&error)),
        }
    }

    /// Sends `request` under `id` to `leader` and reads its reply until `reply_by`.
    async fn send_with_id(
        &mut self,
        write: &mut ForwardedWrite,
        leader: u64,
        addr: &str,
        id: RequestId,
        request: Forwarded<'_>,
        reply_by: Instant,
    ) -> Attempt {
        let mut refused = [false];
        let attempt = self
            .send_group(leader, addr, &[(id, request)], &mut refused, reply_by)
            .await
            .pop()
            .expect("one attempt per write");
        if refused[0] {
            write.on_id_refused();
        }
        attempt
    }

    /// Sends every write of `group` under its id to `leader`, all at once, and reads their
    /// replies until `reply_by`: each write's attempt, in order. `id_refused[i]`: the leader
    /// answered write `i`'s `RAFT.FORWARD` with an error (it ignores request ids).
    async fn send_group(
        &mut self,
        leader: u64,
        addr: &str,
        group: &[(RequestId, Forwarded<'_>)],
        id_refused: &mut [bool],
        reply_by: Instant,
    ) -> Vec<Attempt> {
        let link = match self.link_to(leader, addr, reply_by).await {
            Ok(link) => link,
            Err(why) => {
                let refusal = leader_unreachable(leader, addr, &why);
                return group
                    .iter()
                    .map(|_| Attempt::NotSent(refusal.clone()))
                    .collect();
            }
        };
        // One reply per request sent, in order: a write's is the reply to its last request, its
        // announcement's says whether the leader took the id.
        let mut attempts: Vec<Attempt> = group.iter().map(|_| Attempt::Lost).collect();
        let exchanged = async {
            let mut pieces = link.pieces(reply_by);
            for &(id, request) in group {
                for part in wire_parts(id, request) {
                    match part {
                        WirePart::Announce(id) => encode_forward_request(id, pieces.buffer()),
                        WirePart::Request(args) => pieces.push(args).await?,
                    }
                }
            }
            pieces.finish().await?;
            for (at, &(id, request)) in group.iter().enumerate() {
                let mut parts = wire_parts(id, request).peekable();
                while let Some(part) = parts.next() {
                    let reply = link.read_reply(reply_by).await?;
                    match part {
                        WirePart::Announce(_) if reply != Reply::OK => id_refused[at] = true,
                        WirePart::Request(_) if parts.peek().is_none() => {
                            attempts[at] = Attempt::Answered(reply)
                        }
                        _ => {}
                    }
                }
            }
            Ok::<(), String>(())
        }
        .await;
        if exchanged.is_err() {
            self.link = None;
        }
        // A write whose reply came before the link failed has its answer; the others were sent
        // (or may have been) and got none.
        attempts
    }

    /// The link to `leader`, opened (authenticated and named) if it is not open yet, speaking
    /// the client's protocol.
    async fn link_to(
        &mut self,
        leader: u64,
        addr: &str,
        deadline: Instant,
    ) -> Result<&mut Link, String> {
        let mut link = match self.link.take() {
            Some(link) if link.leader == leader => link,
            _ => self.open(leader, addr, deadline).await?,
        };
        if link.protocol != self.protocol {
            let hello = [
                Bytes::from_static(b"HELLO"),
                Bytes::from(self.protocol.number().to_string()),
            ];
            let reply = link.exchange(&[&hello], deadline, |_, _| {}).await?;
            if reply.is_error() {
                return Err(format!("the leader refused {:?}: {reply:?}", self.protocol));
            }
            link.protocol = self.protocol;
        }
        if link.db != self.db {
            let select = [
                Bytes::from_static(b"SELECT"),
                Bytes::from(self.db.to_string()),
            ];
            let reply = link.exchange(&[&select], deadline, |_, _| {}).await?;
            if reply.is_error() {
                return Err(format!("the leader refused SELECT {}: {reply:?}", self.db));
            }
            link.db = self.db;
        }
        Ok(self.link.insert(link))
    }

    async fn open(&self, leader: u64, addr: &str, deadline: Instant) -> Result<Link, String> {
        let connect_by = deadline.min(Instant::now() + CONNECT_TIMEOUT);
        let stream = timeout_at(connect_by, TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let mut link = Link {
            leader,
            stream,
            input: BytesMut::new(),
            output: BytesMut::new(),
            limits: self.limits,
            protocol: ProtocolVersion::Resp2,
            db: 0,
        };
        if let Some(password) = &self.password {
            let auth = [
                Bytes::from_static(b"AUTH"),
                Bytes::from_static(b"default"),
                password.clone(),
            ];
            let reply = link.exchange(&[&auth], deadline, |_, _| {}).await?;
            if reply.is_error() {
                return Err(format!(
                    "the leader refused this node's password: {reply:?}"
                ));
            }
        }
        let setname = [
            Bytes::from_static(b"CLIENT"),
            Bytes::from_static(b"SETNAME"),
            Bytes::from_static(FORWARD_CLIENT_NAME.as_bytes()),
        ];
        let reply = link.exchange(&[&setname], deadline, |_, _| {}).await?;
        if reply.is_error() {
            return Err(format!("{reply:?}"));
        }
        Ok(link)
    }
}

/// The log entry of `request` under `id`, made as the client connection made it: its requests
/// dispatched again through a fresh protocol state (with the same limits, they parse and queue
/// as they did), stamped `now_ms` (this node's wall clock as it proposes it again). `None` if
/// they no longer make a write. With it, the replies a transaction's local commands got here, to
/// splice into the applied array (`keel_session::connection::splice`).
fn log_entry(
    id: RequestId,
    request: Forwarded<'_>,
    limits: &Limits,
    now_ms: u64,
    db: u32,
) -> Option<(Bytes, Vec<(usize, Reply)>)> {
    let mut protocol = ClientConnection::new(0, "", *limits);
    let node = super::Fetched(NodeReport::default(), false);
    let command = match request {
        Forwarded::Write(args) => match protocol.dispatch(args, &node) {
            Dispatch::Write(command) => (LoggedCommand::Write(command), Vec::new()),
            _ => return None,
        },
        Forwarded::Exec(queued) => {
            protocol.dispatch(&MULTI, &node);
            for args in queued {
                protocol.dispatch(args, &node);
            }
            match protocol.dispatch(&EXEC, &node) {
                // Proposed again here, where its messages cannot be published after the
                // first attempt's fate is unknown: answered as published to no one.
                Dispatch::Exec(transaction) => {
                    let mut replies = transaction.local_replies.clone();
                    replies.extend(transaction.publishes.unpublished());
                    replies.sort_by_key(|(position, _)| *position);
                    (transaction.logged(), replies)
                }
                _ => return None,
            }
        }
    };
    let (command, local_replies) = command;
    Some((
        LogCommand::new(id.client_id, id.seq, now_ms, command)
            .in_db(db)
            .encode(),
        local_replies,
    ))
}

impl Link {
    /// Writes every request of `group`, then reads one reply each until `deadline`, showing
    /// each to `each` with its position; returns the last.
    async fn exchange(
        &mut self,
        group: &[&[Bytes]],
        deadline: Instant,
        mut each: impl FnMut(usize, &Reply),
    ) -> Result<Reply, String> {
        let mut pieces = self.pieces(deadline);
        for args in group {
            pieces.push(args).await?;
        }
        pieces.finish().await?;
        let mut last = None;
        for at in 0..group.len() {
            let reply = self.read_reply(deadline).await?;
            each(at, &reply);
            last = Some(reply);
        }
        last.ok_or_else(|| "nothing to send".to_string())
    }

    /// A writer of requests to the leader, in pieces of about `EXCHANGE_WRITE_BYTES`: a group
    /// of large writes is not copied whole (one small group is still one write).
    fn pieces(&mut self, deadline: Instant) -> Pieces<'_> {
        // Nothing of an exchange that did not finish (its future dropped) goes with this one.
        self.output.clear();
        Pieces {
            link: self,
            deadline,
        }
    }

    async fn read_reply(&mut self, deadline: Instant) -> Result<Reply, String> {
        timeout_at(deadline, async {
            loop {
                if let Some((reply, used)) =
                    parse_reply(&self.input, &self.limits).map_err(|e| e.to_string())?
                {
                    self.input.advance(used);
                    return Ok(reply);
                }
                if self
                    .stream
                    .read_buf(&mut self.input)
                    .await
                    .map_err(|e| e.to_string())?
                    == 0
                {
                    return Err("the leader closed the connection".to_string());
                }
            }
        })
        .await
        .map_err(|_| "no reply in time".to_string())?
    }
}

/// See [`Link::pieces`]. Requests are encoded into the link's output buffer and written once it
/// holds `EXCHANGE_WRITE_BYTES`, and at [`Pieces::finish`].
struct Pieces<'a> {
    link: &'a mut Link,
    deadline: Instant,
}

impl Pieces<'_> {
    /// Where a request may be encoded directly (a `RAFT.FORWARD` prefix); it goes with the next
    /// [`Pieces::push`].
    fn buffer(&mut self) -> &mut BytesMut {
        &mut self.link.output
    }

    /// Encodes the request `args`, and writes what is buffered if it is enough.
    async fn push(&mut self, args: &[Bytes]) -> Result<(), String> {
        encode_request(args, &mut self.link.output);
        if self.link.output.len() >= EXCHANGE_WRITE_BYTES {
            self.write().await?;
        }
        Ok(())
    }

    /// Writes whatever is buffered.
    async fn finish(mut self) -> Result<(), String> {
        self.write().await
    }

    async fn write(&mut self) -> Result<(), String> {
        let link = &mut *self.link;
        if link.output.is_empty() {
            return Ok(());
        }
        let written = timeout_at(self.deadline, link.stream.write_all(&link.output))
            .await
            .map_err(|_| "the leader took nothing in time".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        if link.output.capacity() > 2 * EXCHANGE_WRITE_BYTES {
            link.output = BytesMut::new();
        } else {
            link.output.clear();
        }
        written
    }
}

#[cfg(test)]
mod tests;
