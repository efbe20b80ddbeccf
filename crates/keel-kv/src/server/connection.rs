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
//! Bounds: at most [`PIPELINE_REQUESTS_MAX`] requests are in flight per connection; the input
//! buffer holds at most one partial request (bounded by the decoder) plus one read. Requests in
//! flight are slices of the buffers they were read into (no copy), so those stay allocated until
//! the requests are answered: a buffer is replaced only after at least three quarters of it was
//! read into, so that is at most about a third more than the requests' own bytes, plus one
//! buffer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use keel_runtime::{ClientError, DeadlineTimer, Pending};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{admin, forward, random_client_id, wants_status, Fetched, ServerContext};
use super::{KvAdapter, FORWARD_CLIENT_NAME};
use crate::connection::{ClientConnection, Dispatch, NodeStatus};
use crate::resp::{Decoder, Reply};
use crate::state_machine::{ApplyReply, LogCommand, LoggedCommand};

/// Bound on the requests of one connection in flight at once (decoded, not yet answered).
pub(super) const PIPELINE_REQUESTS_MAX: usize = 256;

/// Room made in the input buffer before a read (when less than a quarter of it is left).
const INPUT_READ_BYTES: usize = 16 * 1024;

/// Output is flushed once this much is buffered, even in the middle of a pipeline.
const OUTPUT_FLUSH_BYTES: usize = 64 * 1024;

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
    /// A write (or an EXEC: `queued` holds its queued requests, forwarded as a group): `pending`
    /// is `None` until its run is proposed, and `entry` is empty from then on.
    Write {
        entry: Bytes,
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
    forward: forward::Forwarder,
    slots: VecDeque<Slot>,
    /// The kind of the run in flight (`None`: only ready replies, or nothing).
    run: Option<Kind>,
    output: BytesMut,
    /// The deadlines of the requests awaited in `finish_all`, one timer for all.
    timer: DeadlineTimer,
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
        connection: ClientConnection::new(id, peer.to_string(), ctx.limits),
        client_id: random_client_id(),
        seq: 0,
        forward: forward::Forwarder::new(ctx.catch_up.timeout),
        slots: VecDeque::new(),
        run: None,
        output: BytesMut::new(),
        timer: DeadlineTimer::new(),
    };
    let mut decoder = Decoder::new(ctx.limits);
    let mut input = BytesMut::with_capacity(INPUT_READ_BYTES);
    loop {
        // Requests are split off the front of `input` (their arguments are slices of it), so
        // once their replies are sent it is whole again and `reserve` reuses it; until then it
        // allocates anew, at least `INPUT_READ_BYTES`.
        if input.capacity() - input.len() < INPUT_READ_BYTES / 4 {
            input.reserve(INPUT_READ_BYTES);
        }
        if session.stream.read_buf(&mut input).await? == 0 {
            return Ok(());
        }
        loop {
            let frame = match decoder.decode_split(&mut input) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    session.finish_all().await?;
                    let reply = error.to_reply();
                    session.connection.encode(&reply, &mut session.output);
                    session.stream.write_all(&session.output).await?;
                    return Ok(());
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
        session.flush().await?;
    }
}

impl Session<'_> {
    /// Serves (or queues) one request. False when the connection must close.
    async fn request(&mut self, args: Vec<Bytes>) -> std::io::Result<bool> {
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
                self.connection.encode(&reply, &mut self.output);
                self.flush().await?;
                return Ok(false);
            }
            Dispatch::Write(command) => {
                if self.run == Some(Kind::Read) {
                    self.finish_all().await?;
                }
                self.run = Some(Kind::Write);
                self.seq += 1;
                let entry = LogCommand::new(self.client_id, self.seq, command).encode();
                self.slots.push_back(Slot::Write {
                    entry,
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
                self.seq += 1;
                let command = LoggedCommand::Exec(transaction.commands);
                let entry = LogCommand::new(self.client_id, self.seq, command).encode();
                self.slots.push_back(Slot::Write {
                    entry,
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
                let reply = self.resolve(result, Kind::Write, &args, None).await;
                self.connection.encode(&reply, &mut self.output);
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
                    args,
                    queued,
                    pending,
                    ..
                } => {
                    let pending = pending.expect("every write of the run was proposed");
                    let result = pending.wait_with(&mut self.timer).await.map(|bytes| {
                        ApplyReply::decode(&bytes).map_or_else(
                            || Reply::error("ERR internal error: undecodable write result"),
                            ApplyReply::into_reply,
                        )
                    });
                    self.resolve(result, Kind::Write, &args, queued.as_deref())
                        .await
                }
                Slot::Read { args, pending } => {
                    let result = pending.wait_with(&mut self.timer).await;
                    self.resolve(result, Kind::Read, &args, None).await
                }
            };
            self.connection.encode(&reply, &mut self.output);
            if self.output.len() >= OUTPUT_FLUSH_BYTES {
                self.flush().await?;
            }
        }
        self.run = None;
        Ok(())
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.output.is_empty() {
            self.stream.write_all(&self.output).await?;
            self.output.clear();
        }
        Ok(())
    }

    /// The reply for a request's outcome: on `NotLeader` with a known leader, the request is
    /// forwarded there once (unless it came from a forwarding node); a transaction (`queued`:
    /// its queued requests) as `MULTI`, those, `EXEC`.
    async fn resolve(
        &mut self,
        result: Result<Reply, ClientError>,
        kind: Kind,
        args: &[Bytes],
        queued: Option<&[Vec<Bytes>]>,
    ) -> Reply {
        let ctx = self.ctx;
        match result {
            Ok(reply) => reply,
            Err(ClientError::NotLeader {
                leader: Some(leader),
                ..
            }) if leader != ctx.node_id => {
                let forwarded = self
                    .connection
                    .name()
                    .is_some_and(|n| n.as_ref() == FORWARD_CLIENT_NAME.as_bytes());
                match ctx.client_addr(leader) {
                    Some(addr) if !forwarded => match queued {
                        Some(queued) => {
                            self.forward
                                .forward_transaction(leader, &addr, queued, &ctx.limits)
                                .await
                        }
                        None => {
                            self.forward
                                .forward(leader, &addr, args, kind == Kind::Write, &ctx.limits)
                                .await
                        }
                    },
                    Some(addr) => {
                        Reply::error(format!("TRYAGAIN leader is node {leader} at {addr}"))
                    }
                    // Its peer address is of no use to a client: say what is known.
                    None => Reply::error(format!(
                        "TRYAGAIN leader is node {leader}; its client address is unknown"
                    )),
                }
            }
            Err(e) => super::error_reply(&e),
        }
    }
}
