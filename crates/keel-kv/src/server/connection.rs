//! One client connection: decode, dispatch, and serve pipelined requests with overlap.
//!
//! Replies leave in request order. Requests are served in *runs*: consecutive writes are proposed
//! together in one batch (one step of the node, so they reach the log in request order and a
//! refused one is never overtaken by a later one), consecutive reads are queued together (their
//! ReadIndex rounds are shared). A run ends where the kind changes: a read waits for every earlier
//! write of the connection to be applied (so it sees them), and a write waits for every earlier
//! read to be served (so no earlier read sees it). Answers the protocol layer gives locally (PING,
//! ECHO, HELLO, ...) take their place in the order without waiting; INFO, admin commands and QUIT
//! wait for everything before them. An EXEC is one log entry holding its whole transaction: it
//! joins the write run like a write; a follower forwards it as the group `MULTI`, the queued
//! requests, `EXEC` (see `forward.rs`).
//!
//! Request ids: a write (or EXEC) is proposed under the connection's random dedup client id and
//! its next seq; refused as not the leader, it is forwarded under that same id. On another node's
//! forwarding connection, a write announced by `RAFT.FORWARD <client-id> <seq>` is proposed under
//! the id that node gave it instead (`command/forward.rs`).
//!
//! Bounds: at most [`PIPELINE_REQUESTS_MAX`] requests are in flight per connection; the input
//! buffer holds at most one partial request (bounded by the decoder) plus one read, its size
//! charged against the node's total (`buffers.rs`). Requests in flight are slices of the buffer
//! they were read into (no copy); they are all answered before the connection reads again.
//!
//! Output: replies are written as the socket takes them, without waiting; while some wait for
//! the socket the connection goes on reading (a client that sends a whole pipeline before it
//! reads a reply is not deadlocked) and serving. The replies the socket has not taken are
//! bounded by `client-output-buffer-limit-bytes`: a client that stops reading is closed once
//! the next reply would take them past it. A single reply larger than the bound is replaced by
//! an error. A connection idle (nothing read, nothing written) for `timeout` seconds is closed,
//! except a forwarding connection of another node.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use keel_runtime::{ClientError, DeadlineTimer, Pending};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::buffers::QueryBuffer;
use super::forward::{self, Forwarded};
use super::limits::ServerShared;
use super::{admin, random_client_id, wants_status, Fetched, ServerContext};
use super::{KvAdapter, FORWARD_CLIENT_NAME};
use crate::command::{self, QueuedCommand};
use crate::connection::{ClientConnection, Dispatch, NodeStatus};
use crate::forwarding::RequestId;
use crate::resp::{Decoder, Reply};
use crate::state_machine::{LogCommand, LoggedCommand};

/// Bound on the requests of one connection in flight at once (decoded, not yet answered).
pub(super) const PIPELINE_REQUESTS_MAX: usize = 256;

/// Output is written once this much is buffered, even in the middle of a pipeline.
const OUTPUT_FLUSH_BYTES: usize = 64 * 1024;

/// An output buffer that held more than this is freed once written, not kept for reuse.
const OUTPUT_KEEP_BYTES: usize = 2 * OUTPUT_FLUSH_BYTES;

/// How long a connection being closed with an error waits for the client to take it.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

// Connections being refused (maxclients, protected mode) that may wait `CLOSE_GRACE` at once;
// beyond, they are closed without waiting (a flood of them must not pile up tasks, nor hold
// descriptors).
use super::limits::REFUSING_MAX;

/// Whether a request changes state (so a failed forward leaves its outcome unknown).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Write,
    Read,
}

/// A request waiting for its reply, in request order.
enum Slot {
    /// Answered already.
    Ready(Reply),
    /// A write (or an EXEC: `queued` holds its queued requests, forwarded as a group) proposed
    /// under `id`: `pending` is `None` until its run is proposed, and `entry` is empty from then
    /// on.
    Write {
        entry: Bytes,
        id: RequestId,
        args: Vec<Bytes>,
        queued: Option<Vec<Vec<Bytes>>>,
        pending: Option<Pending<Bytes>>,
    },
    Read {
        args: Vec<Bytes>,
        pending: Pending<Reply>,
    },
}

/// One client connection's request state beyond the protocol layer's.
struct Session<'a> {
    ctx: &'a ServerContext,
    stream: TcpStream,
    connection: ClientConnection,
    client_id: u64,
    seq: u64,
    /// On another node's forwarding connection: the id its `RAFT.FORWARD` gave the next write.
    forwarded_id: Option<RequestId>,
    forward: forward::Forwarder,
    slots: VecDeque<Slot>,
    /// The kind of the run in flight (`None`: only ready replies, or nothing).
    run: Option<Kind>,
    /// Encoded replies the socket has not taken yet.
    output: BytesMut,
    /// The most `output` held since it was last empty.
    output_peak: usize,
    peer: SocketAddr,
    /// The deadlines of the requests awaited in `finish_all`, one timer for all.
    timer: DeadlineTimer,
}

/// What waiting on the socket ended with.
enum Io {
    /// Bytes were read into the input buffer.
    Read,
    /// The client closed its side.
    Closed,
    /// Nothing read or written for the idle timeout.
    Idle,
}

pub(super) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: &ServerContext,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let id = ctx.next_connection_id.fetch_add(1, Ordering::Relaxed);
    let mut session = Session {
        ctx,
        stream,
        connection: ClientConnection::new(id, peer.to_string(), ctx.limits)
            .with_requirepass(ctx.requirepass.clone())
            .with_config(Arc::clone(&ctx.config)),
        client_id: random_client_id(),
        seq: 0,
        forwarded_id: None,
        forward: forward::Forwarder::new(ctx.catch_up.timeout, ctx.requirepass.clone(), ctx.limits),
        slots: VecDeque::new(),
        run: None,
        output: BytesMut::new(),
        output_peak: 0,
        peer,
        timer: DeadlineTimer::new(),
    };
    let mut decoder = Decoder::new(ctx.limits);
    let mut input = QueryBuffer::new(
        &ctx.shared.query_buffers_bytes,
        ctx.client_limits.query_buffer_total_bytes,
        ctx.limits.request_bytes_max,
    );
    loop {
        if let Err(full) = input.prepare(decoder.awaited_len()) {
            tracing::info!(
                node = ctx.node_id,
                client = %peer,
                "closing a client connection: its request needs a query buffer of {} bytes, \
                 which would take all clients' past client-query-buffer-total-bytes ({})",
                full.wanted_bytes,
                full.total_max_bytes
            );
            let error = Reply::error(format!(
                "ERR client query buffers full: this request needs {} bytes of buffer, more than \
                 client-query-buffer-total-bytes ({}) leaves; closing the connection",
                full.wanted_bytes, full.total_max_bytes
            ));
            return session.close_with(&error).await;
        }
        match session.wait_io(&mut input.bytes).await? {
            Io::Read => {}
            Io::Closed => return session.flush_all(session.idle_timeout()).await,
            Io::Idle => {
                tracing::debug!(node = ctx.node_id, client = %peer, "closing an idle client");
                return Ok(());
            }
        }
        loop {
            let frame = match decoder.decode_split(&mut input.bytes) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    session.finish_all().await?;
                    return session.close_with(&error.to_reply()).await;
                }
            };
            if frame.is_empty() {
                continue;
            }
            if !session.request(frame.args).await? {
                return Ok(());
            }
        }
        session.finish_all().await?;
        session.flush_some()?;
    }
}

/// Answers a connection beyond `maxclients` with `error` and closes it, without serving it.
pub(super) fn refuse(stream: TcpStream, shared: &Arc<ServerShared>, error: &str) {
    let line = format!("-{error}\r\n");
    if shared.refusing.fetch_add(1, Ordering::AcqRel) >= REFUSING_MAX {
        shared.refusing.fetch_sub(1, Ordering::AcqRel);
        let _ = stream.try_write(line.as_bytes());
        return;
    }
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let mut stream = stream;
        close_gracefully(&mut stream, line.as_bytes()).await;
        shared.refusing.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Writes `last` (within [`CLOSE_GRACE`]), ends the write side, and reads and drops what the
/// client still sends until it closes (within [`CLOSE_GRACE`]): closing a socket with unread
/// input resets the connection, and the reset can destroy the reply before the client reads it.
async fn close_gracefully(stream: &mut TcpStream, last: &[u8]) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        stream.write_all(last).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

impl Session<'_> {
    /// Whether this connection is another node's forwarding connection.
    fn is_forwarding(&self) -> bool {
        self.connection
            .name()
            .is_some_and(|n| n.as_ref() == FORWARD_CLIENT_NAME.as_bytes())
    }

    /// A forwarding connection is the other node's to close: it stays open while idle.
    fn idle_timeout(&self) -> Option<Duration> {
        self.ctx
            .client_limits
            .idle_timeout
            .filter(|_| !self.is_forwarding())
    }

    /// Waits until the client sends more (read into `input`), writing pending output whenever
    /// the socket takes it meanwhile.
    async fn wait_io(&mut self, input: &mut BytesMut) -> std::io::Result<Io> {
        loop {
            let interest = if self.output.is_empty() {
                Interest::READABLE
            } else {
                Interest::READABLE | Interest::WRITABLE
            };
            let ready = match self.idle_timeout() {
                Some(idle) => match tokio::time::timeout(idle, self.stream.ready(interest)).await {
                    Ok(ready) => ready?,
                    Err(_) => return Ok(Io::Idle),
                },
                None => self.stream.ready(interest).await?,
            };
            if ready.is_writable() && !self.output.is_empty() {
                self.flush_some()?;
            }
            if ready.is_readable() || ready.is_read_closed() {
                match self.stream.try_read_buf(input) {
                    Ok(0) => return Ok(Io::Closed),
                    Ok(_) => return Ok(Io::Read),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Appends `reply` to the output, unless that would take the replies the client has not
    /// read past the output limit: then the connection must close (an error). A reply larger
    /// than the limit by itself is replaced by an error.
    fn push(&mut self, reply: &Reply) -> std::io::Result<()> {
        let limit = self.ctx.client_limits.output_buffer_bytes;
        let size = reply.encoded_len_max();
        if size > limit {
            let error = Reply::error(format!(
                "ERR reply too large: {size} bytes exceed client-output-buffer-limit-bytes \
                 ({limit}); the command was executed, only its reply is dropped"
            ));
            return self.push(&error);
        }
        if self.output.len() + size > limit {
            self.flush_some()?;
            if self.output.len() + size > limit {
                tracing::info!(
                    node = self.ctx.node_id,
                    client = %self.peer,
                    "closing a client connection that does not read its replies: {} bytes \
                     unread, client-output-buffer-limit-bytes is {limit}",
                    self.output.len()
                );
                return Err(std::io::Error::other("client output buffer limit reached"));
            }
        }
        self.connection.encode(reply, &mut self.output);
        self.output_peak = self.output_peak.max(self.output.len());
        if self.output.len() >= OUTPUT_FLUSH_BYTES {
            self.flush_some()?;
        }
        Ok(())
    }

    /// Writes as much output as the socket takes now, without waiting.
    fn flush_some(&mut self) -> std::io::Result<()> {
        while !self.output.is_empty() {
            match self.stream.try_write(&self.output) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.output.advance(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        // Written out: a buffer a burst of large replies grew is given back.
        if self.output_peak > OUTPUT_KEEP_BYTES {
            self.output = BytesMut::new();
        }
        self.output_peak = 0;
        Ok(())
    }

    /// Writes all output, waiting for the socket (at most `idle` without progress).
    async fn flush_all(&mut self, idle: Option<Duration>) -> std::io::Result<()> {
        loop {
            self.flush_some()?;
            if self.output.is_empty() {
                return Ok(());
            }
            let writable = self.stream.writable();
            match idle {
                Some(idle) => tokio::time::timeout(idle, writable)
                    .await
                    .map_err(|_| std::io::Error::from(ErrorKind::TimedOut))??,
                None => writable.await?,
            }
        }
    }

    /// Sends `error` after everything answered before it, and closes the connection.
    async fn close_with(&mut self, error: &Reply) -> std::io::Result<()> {
        self.push(error)?;
        let _ = tokio::time::timeout(CLOSE_GRACE, self.flush_all(None)).await;
        close_gracefully(&mut self.stream, &[]).await;
        Ok(())
    }

    /// The id another node gave the write `args` (see `command/forward.rs`): `Err` holds the
    /// answer to a `RAFT.FORWARD`, or to a request that may not follow one. Only on a forwarding
    /// connection; anywhere else `RAFT.FORWARD` goes on as an unknown command.
    fn take_forwarded_id(&mut self, args: &[Bytes]) -> Result<Option<RequestId>, Reply> {
        if let Some(id) = self.forwarded_id.take() {
            return command::may_follow_forward(args, self.connection.in_transaction())
                .map(|()| Some(id))
                .map_err(|e| e.to_reply());
        }
        if self.is_forwarding() && command::is_forward(args) {
            return Err(match command::parse_forward(args) {
                Ok(id) => {
                    self.forwarded_id = Some(id);
                    Reply::OK
                }
                Err(e) => e.to_reply(),
            });
        }
        Ok(None)
    }

    /// The id a write is proposed under: the one another node gave it, else this connection's
    /// next.
    fn request_id(&mut self, forwarded: Option<RequestId>) -> RequestId {
        forwarded.unwrap_or_else(|| {
            self.seq += 1;
            RequestId {
                client_id: self.client_id,
                seq: self.seq,
            }
        })
    }

    /// Serves (or queues) one request. False when the connection must close.
    async fn request(&mut self, args: Vec<Bytes>) -> std::io::Result<bool> {
        let forwarded_id = match self.take_forwarded_id(&args) {
            Ok(id) => id,
            Err(answer) => {
                self.slots.push_back(Slot::Ready(answer));
                return Ok(true);
            }
        };
        let status = if wants_status(&args) {
            // INFO reports the state after everything before it.
            self.finish_all().await?;
            self.ctx.node_status().await
        } else {
            NodeStatus::default()
        };
        match self.connection.dispatch(&args, &Fetched(status)) {
            Dispatch::Reply(reply) => self.slots.push_back(Slot::Ready(reply)),
            Dispatch::ReplyAndClose(reply) => {
                self.finish_all().await?;
                self.push(&reply)?;
                self.flush_all(self.idle_timeout()).await?;
                return Ok(false);
            }
            Dispatch::Write(command) if self.ctx.out_of_memory(command.may_grow_memory()).await => {
                self.slots.push_back(Slot::Ready(Reply::error(super::OOM)));
            }
            Dispatch::Exec(transaction)
                if self
                    .ctx
                    .out_of_memory(
                        transaction
                            .commands
                            .iter()
                            .any(|c| matches!(c, QueuedCommand::Write(w) if w.may_grow_memory())),
                    )
                    .await =>
            {
                // As Redis: the whole transaction is refused, nothing of it runs.
                self.slots.push_back(Slot::Ready(Reply::error(super::OOM)));
            }
            Dispatch::Write(command) => {
                if self.run == Some(Kind::Read) {
                    self.finish_all().await?;
                }
                self.run = Some(Kind::Write);
                let id = self.request_id(forwarded_id);
                let entry = LogCommand::new(id.client_id, id.seq, command).encode();
                self.slots.push_back(Slot::Write {
                    entry,
                    id,
                    args,
                    queued: None,
                    pending: None,
                });
            }
            // A transaction is one log entry: it joins the write run like a write.
            Dispatch::Exec(transaction) => {
                if self.run == Some(Kind::Read) {
                    self.finish_all().await?;
                }
                self.run = Some(Kind::Write);
                let id = self.request_id(forwarded_id);
                let command = LoggedCommand::Exec(transaction.commands);
                let entry = LogCommand::new(id.client_id, id.seq, command).encode();
                self.slots.push_back(Slot::Write {
                    entry,
                    id,
                    args,
                    queued: Some(transaction.requests),
                    pending: None,
                });
            }
            Dispatch::Read(command) => {
                if self.run == Some(Kind::Write) {
                    self.finish_all().await?;
                }
                self.run = Some(Kind::Read);
                let pending = self
                    .ctx
                    .handle
                    .start_read(move |sm: &KvAdapter| sm.state().read(&command))
                    .await;
                self.slots.push_back(Slot::Read { args, pending });
            }
            Dispatch::Admin(command) => {
                self.finish_all().await?;
                let result = admin(self.ctx, command).await;
                let reply = self.resolve(result, Relay::Once(&args, Kind::Write)).await;
                self.push(&reply)?;
            }
        }
        if self.slots.len() >= PIPELINE_REQUESTS_MAX {
            self.finish_all().await?;
        }
        Ok(true)
    }

    /// Proposes the writes not proposed yet (one batch, in order), then answers every slot in
    /// order.
    async fn finish_all(&mut self) -> std::io::Result<()> {
        // Moved out, not cloned: the slot needs only `args` once proposed, and a clone of an
        // entry fresh from `encode` would allocate (it promotes the buffer to a shared one).
        let unproposed: Vec<Bytes> = self
            .slots
            .iter_mut()
            .filter_map(|slot| match slot {
                Slot::Write {
                    entry,
                    pending: None,
                    ..
                } => Some(std::mem::take(entry)),
                _ => None,
            })
            .collect();
        if !unproposed.is_empty() {
            let mut pendings = self.ctx.handle.propose_batch(unproposed).await.into_iter();
            for slot in &mut self.slots {
                if let Slot::Write { pending, .. } = slot {
                    if pending.is_none() {
                        *pending = pendings.next();
                    }
                }
            }
        }
        while let Some(slot) = self.slots.pop_front() {
            let reply = match slot {
                Slot::Ready(reply) => reply,
                Slot::Write {
                    id,
                    args,
                    queued,
                    pending,
                    ..
                } => {
                    let pending = pending.expect("every write of the run was proposed");
                    let result = pending.wait_with(&mut self.timer).await;
                    let request = match &queued {
                        Some(queued) => Forwarded::Exec(queued),
                        None => Forwarded::Write(&args),
                    };
                    let result = result.map(|bytes| write_reply(&bytes));
                    self.resolve(result, Relay::WithId(id, request)).await
                }
                Slot::Read { args, pending } => {
                    let result = pending.wait_with(&mut self.timer).await;
                    self.resolve(result, Relay::Once(&args, Kind::Read)).await
                }
            };
            self.push(&reply)?;
        }
        self.run = None;
        Ok(())
    }

    /// The reply for a request's outcome: on `NotLeader` with a known leader, the request is
    /// forwarded there (unless it came from a forwarding node): a write under its id, retried
    /// until answered (`forward.rs`), anything else once.
    async fn resolve(&mut self, result: Result<Reply, ClientError>, request: Relay<'_>) -> Reply {
        let ctx = self.ctx;
        match result {
            Ok(reply) => reply,
            Err(ClientError::NotLeader {
                leader: Some(leader),
                ..
            }) if leader != ctx.node_id => {
                let forwarded = self.is_forwarding();
                match ctx.client_addr(leader) {
                    Some(addr) if !forwarded => match request {
                        Relay::WithId(id, request) => {
                            self.forward
                                .forward_write(ctx, leader, addr, id, request)
                                .await
                        }
                        Relay::Once(args, kind) => {
                            self.forward
                                .forward(leader, &addr, args, kind == Kind::Write)
                                .await
                        }
                    },
                    Some(addr) => forward::leader_elsewhere(leader, &addr),
                    None => forward::leader_address_unknown(leader),
                }
            }
            Err(e) => super::error_reply(&e),
        }
    }
}

/// How a request is forwarded if this node does not lead.
enum Relay<'a> {
    /// A write or transaction, under the id it was proposed with here.
    WithId(RequestId, Forwarded<'a>),
    /// A read or an admin command: once, as it is.
    Once(&'a [Bytes], Kind),
}

/// The reply of an applied write, from what the state machine answered.
pub(super) use crate::forwarding::write_reply;
