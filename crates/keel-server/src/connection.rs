//! One client connection: decode, dispatch, and serve pipelined requests with overlap.
//!
//! Which requests are proposed together, what waits for what and the order replies leave in are
//! decided by [`Pipeline`] (keel-session's `connection/pipeline.rs`, sans-IO, the code the
//! simulator runs too): replies leave in request order; consecutive writes are proposed as one
//! batch (`Handle::propose_batch`, so they reach the log in order and a refused write is never
//! overtaken), consecutive reads queued together (they share ReadIndex rounds); a read waits for
//! the connection's earlier writes, a write for its earlier reads; local answers take their place
//! without waiting. This session owns the socket, the buffers and the timers, and does the
//! waiting: it proposes, starts reads, awaits their outcomes in order and forwards what the node
//! refused (`leader_link.rs`; an EXEC as the group `MULTI`, the queued requests, `EXEC`).
//!
//! Past `--maxmemory` the leader answers a write that may grow the data (or an EXEC holding
//! one) `-OOM ...` instead of proposing it; a follower forwards it as any write.
//!
//! Request ids: a write (or EXEC) is proposed under the connection's random dedup client id and
//! its next seq; refused as not the leader, it is forwarded under that same id. On another node's
//! forwarding connection, a write announced by `RAFT.FORWARD <client-id> <seq>` is proposed under
//! the id that node gave it instead (keel-redis's `command/raft_forward.rs`). A write is proposed
//! again only when forwarded, under its id.
//!
//! Bounds: at most
//! [`PIPELINE_REQUESTS_MAX`](keel_session::connection::pipeline::PIPELINE_REQUESTS_MAX)
//! requests are in flight per connection; the input buffer holds at most one partial request
//! (bounded by the decoder) plus one read, its size charged against the node's total
//! (`buffers.rs`). Requests in flight are slices of the buffer they were read into (no copy);
//! they are all answered before the connection reads again.
//!
//! Output: replies are written as the socket takes them, without waiting; while some wait for
//! the socket the connection goes on reading (a client that sends a whole pipeline before it
//! reads a reply is not deadlocked) and serving. The replies the socket has not taken are
//! bounded by `client-output-buffer-limit-bytes`: a client that stops reading is closed once
//! the next reply would take them past it. A single reply larger than the bound is replaced by
//! an error. A connection idle (nothing read, nothing written) for `timeout` seconds is closed,
//! except a forwarding connection of another node.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use keel::{ClientError, DeadlineTimer, Pending};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::buffers::QueryBuffer;
use super::leader_link::{self, Forwarded};
use super::limits::ServerShared;
use super::socket::read_available;
use super::{admin, random_client_id, Fetched, KvAdapter, ServerContext};
use keel_redis::command::ReplyMode;
use keel_redis::RequestId;
use keel_resp::{Decoder, Reply};
use keel_session::connection::monitor::MonitorEvent;
use keel_session::connection::pipeline::{
    is_forwarding, may_grow_memory, needs_node_status, redirect, Admission, Behind, InFlight,
    Intake, Pipeline, Redirect, Relay, Release, Request, WriteRequest,
};
use keel_session::connection::{ClientConnection, ClientRecord, Dispatch, LocalStats, NodeReport};
use keel_session::forwarding::FORWARD_GROUP_MAX;
use keel_session::pubsub::PubSubEvent;

/// Output is written once this much is buffered, even in the middle of a pipeline.
const OUTPUT_FLUSH_BYTES: usize = 64 * 1024;

/// An output buffer that held more than this is freed once written, not kept for reuse.
const OUTPUT_KEEP_BYTES: usize = 2 * OUTPUT_FLUSH_BYTES;

/// How long a connection being closed with an error waits for the client to take it.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How often a CLIENT KILL looks whether the connections it killed have closed.
const KILLED_POLL: Duration = Duration::from_millis(1);

// Connections being refused (maxclients, protected mode) that may wait `CLOSE_GRACE` at once;
// beyond, they are closed without waiting (a flood of them must not pile up tasks, nor hold
// descriptors).
use super::limits::REFUSING_MAX;

/// One client connection's request state beyond the protocol layer's.
struct Session<'a> {
    ctx: &'a ServerContext,
    stream: TcpStream,
    connection: ClientConnection,
    /// The requests in flight, and the connection's request ids.
    pipeline: Pipeline<Pending<Bytes>, Pending<Reply>>,
    forward: leader_link::Forwarder,
    /// Encoded replies the socket has not taken yet.
    output: BytesMut,
    /// The most `output` held since it was last empty.
    output_peak: usize,
    /// Which replies CLIENT REPLY keeps from the client.
    silence: Silence,
    peer: SocketAddr,
    /// The deadlines of the requests awaited in `finish_all`, one timer for all.
    timer: DeadlineTimer,
    /// The bytes read and written, not yet added to the node's stats (see `connection/stats.rs`).
    net: LocalStats,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.pipeline.flush_stats(&mut self.net);
        self.ctx.pubsub.forget(self.connection.record());
    }
}

/// Replies not sent, after CLIENT REPLY OFF or SKIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Silence {
    None,
    /// Every reply (OFF).
    All,
    /// The next this many (SKIP: its own and the next request's).
    Next(u8),
}

/// What waiting on the socket ended with.
enum Io {
    /// Bytes were read into the input buffer.
    Read,
    /// The client closed its side.
    Closed,
    /// Nothing read or written for the idle timeout.
    Idle,
    /// CLIENT KILL named this connection: what it was answered is sent, then it closes.
    Killed,
    /// A monitor that fell behind its queue's bound (`connection/monitor.rs`): closed.
    MonitorOverflowed,
    /// A subscriber that fell behind its queue's bound (keel-session's `pubsub.rs`): closed.
    PubSubOverflowed,
}

#[expect(clippy::too_many_lines)]
pub(super) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: &ServerContext,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let id = ctx.next_connection_id.fetch_add(1, Ordering::Relaxed);
    let laddr = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let record = Arc::new(ClientRecord::new(
        id,
        peer.to_string(),
        laddr,
        stream.as_raw_fd().into(),
    ));
    // Listed in CLIENT LIST until this function returns.
    let _registration = ctx.client_registry.register(Arc::clone(&record));
    let mut session = Session {
        ctx,
        stream,
        connection: ClientConnection::new(id, peer.to_string(), ctx.limits)
            .with_requirepass(ctx.requirepass.clone())
            .with_config(Arc::clone(&ctx.config))
            .with_registry(record, Arc::clone(&ctx.client_registry))
            .with_monitor_limit(ctx.client_limits.output_buffer_bytes)
            .with_pubsub(Arc::clone(&ctx.pubsub))
            .with_stats(Arc::clone(&ctx.server_stats)),
        pipeline: {
            let mut pipeline = Pipeline::new(random_client_id());
            pipeline.set_pubsub(Arc::clone(&ctx.pubsub));
            pipeline
        },
        forward: leader_link::Forwarder::new(
            ctx.catch_up.timeout,
            ctx.requirepass.clone(),
            ctx.limits,
        ),
        output: BytesMut::new(),
        output_peak: 0,
        silence: Silence::None,
        peer,
        timer: DeadlineTimer::new(),
        net: LocalStats::default(),
    };
    session.pipeline.count_in(Arc::clone(&ctx.server_stats));
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
            Io::Killed => return session.close_killed().await,
            Io::MonitorOverflowed => {
                tracing::info!(
                    node = ctx.node_id,
                    client = %peer,
                    "closing a MONITOR connection that does not keep up: its queue passed \
                     client-output-buffer-limit-bytes ({})",
                    ctx.client_limits.output_buffer_bytes
                );
                return Ok(());
            }
            Io::PubSubOverflowed => {
                tracing::info!(
                    node = ctx.node_id,
                    client = %peer,
                    "closing a pub/sub subscriber that does not keep up: its messages passed \
                     client-output-buffer-limit-bytes ({})",
                    ctx.client_limits.output_buffer_bytes
                );
                return Ok(());
            }
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
            if session.connection.record().is_killed() {
                // CLIENT KILL named this connection (its own request, or another's): nothing
                // after it is served, as in Redis, which closes it after the current reply.
                session.finish_all().await?;
                return session.close_killed().await;
            }
        }
        session.finish_all().await?;
        session.flush_some()?;
        session.pipeline.flush_stats(&mut session.net);
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
        is_forwarding(&self.connection)
    }

    /// A forwarding connection is the other node's to close: it stays open while idle.
    fn idle_timeout(&self) -> Option<Duration> {
        // CONFIG SET timeout may have changed it since the last wait.
        let seconds = self.ctx.config.timeout_seconds();
        (seconds > 0 && !self.is_forwarding()).then(|| Duration::from_secs(seconds))
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
            let record = Arc::clone(self.connection.record());
            let idle = self.idle_timeout();
            let readiness = async {
                match idle {
                    Some(idle) => tokio::time::timeout(idle, self.stream.ready(interest))
                        .await
                        .ok(),
                    None => Some(self.stream.ready(interest).await),
                }
            };
            let ready = tokio::select! {
                // Polled first: a request that arrives after the kill is never served, whatever
                // the timing (the client may send it as soon as it has the reply to its own
                // CLIENT KILL, before this task runs again).
                biased;
                // CLIENT KILL from any connection of the node (this one's included).
                () = record.killed() => return Ok(Io::Killed),
                // After MONITOR: the node's commands (never ready before it).
                event = record.monitor.next() => match event {
                    MonitorEvent::Lines(lines) => {
                        if self.silence != Silence::All {
                            self.push_bytes(&lines)?;
                        }
                        continue;
                    }
                    MonitorEvent::Overflowed => return Ok(Io::MonitorOverflowed),
                },
                // After SUBSCRIBE: the messages published on its channels.
                event = record.pubsub.next() => match event {
                    PubSubEvent::Messages(messages) => {
                        // Messages reach a client whatever CLIENT REPLY says, in RESP2 as in
                        // RESP3 (Redis 7.0 sends them as pushes it never silences).
                        self.push_bytes(&messages)?;
                        continue;
                    }
                    PubSubEvent::Overflowed => return Ok(Io::PubSubOverflowed),
                },
                ready = readiness => match ready {
                    Some(ready) => ready?,
                    None => return Ok(Io::Idle),
                },
            };
            if ready.is_writable() && !self.output.is_empty() {
                self.flush_some()?;
            }
            if ready.is_readable() || ready.is_read_closed() {
                match read_available(&self.stream, input) {
                    Ok(0) => return Ok(Io::Closed),
                    Ok(n) => {
                        self.net.input(n);
                        return Ok(Io::Read);
                    }
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
        let pushed = matches!(reply, Reply::Push(_) | Reply::Several(_));
        match self.silence {
            // Pub/sub confirmations are not replies CLIENT REPLY silences (Redis 7.0 sends them
            // as pushes, in RESP2 too).
            _ if pushed => {}
            Silence::None => {}
            Silence::All => return Ok(()),
            Silence::Next(n) => {
                self.silence = if n > 1 {
                    Silence::Next(n - 1)
                } else {
                    Silence::None
                };
                return Ok(());
            }
        }
        let limit = self.ctx.client_limits.output_buffer_bytes;
        let size = reply.encoded_len_max();
        if size > limit {
            let error = Reply::error(format!(
                "ERR reply too large: {size} bytes exceed client-output-buffer-limit-bytes \
                 ({limit}); the command was executed, only its reply is dropped"
            ));
            return self.push(&error);
        }
        self.make_room(size)?;
        self.connection.encode(reply, &mut self.output);
        self.output_written()
    }

    /// Appends bytes already encoded (a monitor's lines), under the output limit as [`Self::push`].
    fn push_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.make_room(bytes.len())?;
        self.output.extend_from_slice(bytes);
        self.output_written()
    }

    /// Makes room for `size` more bytes of output: an error (the connection must close) if the
    /// replies the client has not read would pass the output limit.
    fn make_room(&mut self, size: usize) -> std::io::Result<()> {
        let limit = self.ctx.client_limits.output_buffer_bytes;
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
        Ok(())
    }

    /// Notes what was appended to the output, and writes it once there is enough.
    fn output_written(&mut self) -> std::io::Result<()> {
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
                Ok(n) => {
                    self.net.output(n);
                    self.output.advance(n);
                }
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

    /// Closes a connection CLIENT KILL named: what it was answered is sent if the client takes
    /// it within [`CLOSE_GRACE`] (a killed client that does not read is not waited for).
    async fn close_killed(&mut self) -> std::io::Result<()> {
        match tokio::time::timeout(CLOSE_GRACE, self.flush_all(None)).await {
            Ok(flushed) => flushed,
            Err(_) => Ok(()),
        }
    }

    /// After a CLIENT KILL that named other connections: waits until they have closed, at most
    /// [`CLOSE_GRACE`] (one busy with a request closes once it is answered), before its reply
    /// is released, so that what this client asks next (`INFO clients`, CLIENT LIST) no longer
    /// counts them, as in Redis, where CLIENT KILL frees them before it replies. A connection
    /// leaves the registry as its task ends.
    async fn await_killed(&mut self) {
        let killed = self.connection.take_killed();
        if killed.is_empty() {
            return;
        }
        let registry = &self.ctx.client_registry;
        let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
        while killed.iter().any(|id| registry.contains(*id))
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(KILLED_POLL).await;
        }
    }

    /// Sends `error` after everything answered before it, and closes the connection.
    async fn close_with(&mut self, error: &Reply) -> std::io::Result<()> {
        self.push(error)?;
        let _ = tokio::time::timeout(CLOSE_GRACE, self.flush_all(None)).await;
        close_gracefully(&mut self.stream, &[]).await;
        Ok(())
    }

    /// Serves (or queues) one request. False when the connection must close.
    #[expect(clippy::too_many_lines)]
    async fn request(&mut self, args: Vec<Bytes>) -> std::io::Result<bool> {
        let given_id = match self.pipeline.intake(&args, &self.connection) {
            Intake::Answered => return Ok(true),
            Intake::Dispatch(id) => id,
        };
        let status = if needs_node_status(&args) {
            // INFO reports the state after everything before it.
            self.finish_all().await?;
            self.ctx.node_status().await
        } else {
            NodeReport::default()
        };
        let busy = self.ctx.script_busy();
        // The database the request runs in: the connection's before it (an EXEC that selects
        // another leaves the connection there, but starts where it was).
        let db = self.connection.db();
        self.pipeline.set_db(db);
        let mut dispatch = self.connection.dispatch(&args, &Fetched(status, busy));
        self.await_killed().await;
        if let Some(mode) = self.connection.take_reply_mode() {
            // Every earlier reply is sent (or not) under the mode before; this one's is not
            // pushed yet.
            self.finish_all().await?;
            self.silence = match mode {
                ReplyMode::On => Silence::None,
                ReplyMode::Off => Silence::All,
                ReplyMode::Skip => Silence::Next(2),
            };
        }
        let out_of_memory = self.ctx.out_of_memory(may_grow_memory(&dispatch)).await;
        if out_of_memory {
            // As Redis: the write (or the whole transaction) is refused, nothing of it runs.
            dispatch = Dispatch::Reply(Reply::error(super::OOM));
        }
        // MONITOR shows what runs (not what was refused), as soon as it is accepted.
        self.connection.show_to_monitors(!out_of_memory);
        let mut request = Request {
            dispatch,
            args,
            given_id,
        };
        loop {
            match self.pipeline.admit(request) {
                Admission::Queued => break,
                Admission::AfterAll(waiting) => {
                    self.finish_all().await?;
                    request = waiting;
                }
                Admission::StartRead { slot, command } => {
                    let pending = self
                        .ctx
                        .handle
                        .start_read(move |sm: &KvAdapter| sm.state().read_in(db, &command))
                        .await;
                    self.pipeline.read_started(slot, pending);
                    break;
                }
                Admission::Close(reply) => {
                    // Only QUIT closes this way.
                    let quit = [Bytes::from_static(b"quit")];
                    self.count(&quit, &reply, std::time::Instant::now());
                    self.push(&reply)?;
                    self.flush_all(self.idle_timeout()).await?;
                    return Ok(false);
                }
                Admission::Script(command, args) => {
                    let admitted = std::time::Instant::now();
                    let reply = self.script(command, &args).await;
                    self.count(&args, &reply, admitted);
                    self.push(&reply)?;
                    break;
                }
                Admission::Block(pop, args) => {
                    let admitted = std::time::Instant::now();
                    let reply = self.block(&pop, &args).await?;
                    self.count(&args, &reply, admitted);
                    self.push(&reply)?;
                    break;
                }
                Admission::Admin(command, args) => {
                    let admitted = std::time::Instant::now();
                    let result = admin(self.ctx, command).await;
                    let reply = self.resolve(result, Forwarding::Once(&args, true)).await;
                    self.count(&args, &reply, admitted);
                    self.push(&reply)?;
                    break;
                }
            }
        }
        if self.pipeline.is_full() {
            self.finish_all().await?;
        }
        Ok(true)
    }

    /// Counts a reply the pipeline does not release (QUIT's, an admin command's) in INFO's
    /// stats, as the pipeline counts the others.
    fn count(&self, args: &[Bytes], reply: &Reply, admitted: std::time::Instant) {
        let command = keel_session::connection::ServerStats::command_index(args);
        self.ctx
            .server_stats
            .record(command, reply, admitted.elapsed());
    }

    /// Proposes the writes not proposed yet (one batch, in order), then answers every request in
    /// order.
    async fn finish_all(&mut self) -> std::io::Result<()> {
        self.finish(None).await
    }

    /// [`Self::finish_all`], keeping the last reply released in `captured` instead of sending
    /// it when given (a script's transaction, whose reply is the script's business).
    async fn finish(&mut self, mut captured: Option<&mut Option<Reply>>) -> std::io::Result<()> {
        let batch = self.pipeline.take_batch(super::wall_clock_ms());
        if !batch.is_empty() {
            let entries = batch.into_iter().map(|(_, entry)| entry).collect();
            let pendings = self.ctx.handle.propose_batch(entries).await;
            self.pipeline.proposed(pendings);
        }
        loop {
            match self.pipeline.release() {
                Release::Idle => {
                    // Everything read is answered: counted before the replies leave.
                    self.pipeline.flush_stats(&mut self.net);
                    return Ok(());
                }
                Release::Send(reply) => match captured.as_deref_mut() {
                    Some(slot) => *slot = Some(reply),
                    None => self.push(&reply)?,
                },
                Release::Watched { keys, point } => {
                    let reply = self.connection.watch_point(&keys, &point);
                    self.push(&reply)?
                }
                Release::Await(slot, Some(InFlight::Write(pending))) => {
                    let outcome = pending.wait_with(&mut self.timer).await;
                    self.pipeline.settle_write(slot, outcome);
                }
                Release::Await(slot, Some(InFlight::Read(pending))) => {
                    let outcome = pending.wait_with(&mut self.timer).await;
                    self.pipeline.settle(slot, outcome);
                }
                Release::Await(slot, None) => {
                    // Every handle is attached before replies are released; were one missing,
                    // its outcome could not be known.
                    debug_assert!(false, "request {slot} released without its handle");
                    self.pipeline.settle(slot, Err(ClientError::Unknown));
                }
                Release::Resolve {
                    slot,
                    error,
                    relay: Relay::WithId(id, request),
                } => self.resolve_writes(slot, error, id, request).await,
                Release::Resolve {
                    slot,
                    error,
                    relay: Relay::Once(args),
                } => {
                    let reply = self
                        .resolve(Err(error), Forwarding::PipelinedRead(&args))
                        .await;
                    self.pipeline.answer(slot, reply);
                }
            }
        }
    }

    /// Proposes one write or transaction of the connection's own (a script's effects, a
    /// blocked client's attempt) through the pipeline, which is empty (everything before was
    /// answered), and returns its reply instead of sending it. `what` names it in the error for
    /// a pipeline that was not empty.
    async fn propose_alone(&mut self, request: Request, what: &str) -> std::io::Result<Reply> {
        if !matches!(self.pipeline.admit(request), Admission::Queued) {
            return Ok(Reply::error(format!(
                "ERR internal error: {what} was not queued"
            )));
        }
        let mut captured = None;
        self.finish(Some(&mut captured)).await?;
        Ok(captured.unwrap_or(Reply::error("TRYAGAIN outcome unknown")))
    }

    /// Resolves the refused write `slot` together with the refused writes right behind it (at
    /// most [`FORWARD_GROUP_MAX`] in all): each run of them bound for the same leader goes there
    /// in one exchange ([`leader_link::Forwarder::forward_writes`]), so a pipelining client of a
    /// follower waits one round trip to the leader per group instead of one per write. Every
    /// write taken is answered here.
    async fn resolve_writes(
        &mut self,
        slot: u64,
        error: ClientError,
        id: RequestId,
        request: WriteRequest,
    ) {
        let mut refused = vec![(slot, error, id, request)];
        while refused.len() < FORWARD_GROUP_MAX {
            let last = refused.last().expect("one at least").0;
            match self.pipeline.behind(last) {
                Behind::Await(at, pending) => {
                    let outcome = pending.wait_with(&mut self.timer).await;
                    self.pipeline.settle_write(at, outcome);
                }
                Behind::Refused {
                    slot,
                    error,
                    id,
                    request,
                } => refused.push((slot, error, id, request)),
                Behind::Stop => break,
            }
        }
        let ctx = self.ctx;
        let forwarding = self.is_forwarding();
        let target = |error: &ClientError| match redirect(error, ctx.node_id, forwarding) {
            Redirect::Forward(leader) => ctx.client_addr(leader).map(|addr| (leader, addr)),
            _ => None,
        };
        let mut rest = refused.into_iter().peekable();
        while let Some((slot, error, id, request)) = rest.next() {
            let Some((leader, addr)) = target(&error) else {
                let forwarding = Forwarding::WithId(id, request.forwarded());
                let reply = self.resolve(Err(error), forwarding).await;
                self.pipeline.answer(slot, reply);
                continue;
            };
            let mut run = vec![(slot, id, request)];
            while let Some((slot, id, request)) = rest
                .next_if(|next| target(&next.1).is_some_and(|t| t.0 == leader))
                .map(|(slot, _, id, request)| (slot, id, request))
            {
                run.push((slot, id, request));
            }
            let writes: Vec<(RequestId, Forwarded<'_>)> = run
                .iter()
                .map(|(_, id, request)| (*id, request.forwarded()))
                .collect();
            self.forward.speak(self.connection.protocol());
            self.forward.in_db(self.pipeline.resolving_db());
            let replies = self
                .forward
                .forward_writes(ctx, leader, addr, &writes)
                .await;
            for ((slot, _, _), reply) in run.iter().zip(replies) {
                self.pipeline.answer(*slot, reply);
            }
        }
    }

    /// The reply for a request's outcome: on `NotLeader` with a known leader, the request is
    /// forwarded there (unless it came from a forwarding node, see [`redirect`]): a write under
    /// its id, retried until answered (`leader_link.rs`), anything else once.
    async fn resolve(
        &mut self,
        result: Result<Reply, ClientError>,
        request: Forwarding<'_>,
    ) -> Reply {
        let ctx = self.ctx;
        let error = match result {
            Ok(reply) => return reply,
            Err(error) => error,
        };
        self.forward.speak(self.connection.protocol());
        self.forward.in_db(match request {
            // A refused request of the pipeline: its own database.
            Forwarding::WithId(..) | Forwarding::PipelinedRead(_) => self.pipeline.resolving_db(),
            _ => self.connection.db(),
        });
        match redirect(&error, ctx.node_id, self.is_forwarding()) {
            Redirect::Forward(leader) => match ctx.client_addr(leader) {
                Some(addr) => match request {
                    Forwarding::WithId(id, request) => {
                        self.forward
                            .forward_write(ctx, leader, addr, id, request)
                            .await
                    }
                    Forwarding::PipelinedRead(args) => {
                        self.forward.forward(leader, &addr, &[args], false).await
                    }
                    Forwarding::Once(args, may_change) => {
                        self.forward
                            .forward(leader, &addr, &[args], may_change)
                            .await
                    }
                    Forwarding::Group(group) => {
                        self.forward.forward(leader, &addr, group, true).await
                    }
                },
                None => leader_link::leader_address_unknown(leader),
            },
            Redirect::LeaderElsewhere(leader) => match ctx.client_addr(leader) {
                Some(addr) => leader_link::leader_elsewhere(leader, &addr),
                None => leader_link::leader_address_unknown(leader),
            },
            Redirect::Answer => keel_redis::command::client_error_reply(&error),
        }
    }
}

/// How a request is forwarded if this node does not lead.
enum Forwarding<'a> {
    /// A write or transaction, under the id it was proposed with here.
    WithId(RequestId, Forwarded<'a>),
    /// A read or an admin command: once, as it is (`true`: it may change state, so a failed
    /// forward leaves its outcome unknown).
    Once(&'a [Bytes], bool),
    /// A read of the pipeline, refused: once, as it is, in the database it was dispatched in
    /// (`Pipeline::resolving_db`), which the connection may have left since.
    PipelinedRead(&'a [Bytes]),
    /// A transaction that queued a script (`script_exec.rs`): its requests, `MULTI` to `EXEC`,
    /// once; the answer is EXEC's, and a failed forward leaves the outcome unknown.
    Group(&'a [&'a [Bytes]]),
}

mod blocking;
mod script_exec;
mod script_runner;

/// The reply of an applied write, from what the state machine answered.
pub(super) use keel_session::forwarding::write_reply;
