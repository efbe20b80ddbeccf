//! The tokio side of blocking pops (`keel_redis::command::blocking` has the protocol): a client
//! in BLPOP, BLMOVE, BZPOPMIN, ..., XREAD or XREADGROUP with BLOCK waits on this node, and its
//! attempts go through the log.
//!
//! 1. The client joins the queues of its keys ([`crate::blocked::BlockedClients`]) before its
//!    first attempt, so that no fill after that attempt's place in the log goes unseen.
//! 2. An attempt is a write through the connection's pipeline (forwarded to the leader like any
//!    other, under its own request id): `RAFT.BLOCKED deadline-ms woken <the command>`. It pops what
//!    the command would, or answers null and takes nothing.
//! 3. Taking nothing, the client waits for a wake (the apply of an entry that filled one of its
//!    keys, seen by this node's state machine: a follower's clients are woken by its own apply,
//!    no polling), for its timeout, for CLIENT UNBLOCK, or for its connection to close; then
//!    tries again. An XREAD naming `$` rewrites its request with the IDs its first attempt
//!    answered (`BlockingPop::resolved_request`) before it waits.
//!
//! CLIENT UNBLOCK is seen only while the client waits, never while an attempt is in flight: an
//! attempt that took something answers the client (the unblock is dropped), one that took
//! nothing lets the unblock answer it (keel-session's `connection/unblock.rs`).
//!
//! The timeout is the client's own, on this node's clock, from when its command arrived. An
//! attempt in flight when it passes is waited for (its outcome decides the reply: an element it
//! took is the client's). Each attempt carries a deadline in the log's time: the client's
//! deadline, but at most [`ATTEMPT_WINDOW_MS`](keel_session::blocked::ATTEMPT_WINDOW_MS) away, plus
//! [`CLOCK_SLACK_MS`](keel_session::blocked::CLOCK_SLACK_MS) for the leader's
//! clock (which stamps the log) being ahead of this node's. An attempt whose outcome is lost (a
//! forward that gave up) and that commits later than that takes nothing: it cannot pop an element
//! long after its client stopped waiting for it.
//!
//! What is not Redis's: an element taken by an attempt whose reply is lost (the connection to the
//! leader broke after it applied) is gone, as for a Redis client that disconnects after its pop;
//! the client gets `-TRYAGAIN`. BLMOVE keeps the element in the destination list: the reliable
//! queue pattern holds. Clients of different nodes race in log order: a fill wakes the first
//! waiter of every node, and the attempt that reaches the log first wins.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Session;
use keel_redis::command::blocking::{attempt_args, BlockingPop};
use keel_redis::Command;
use keel_resp::Reply;
use keel_session::blocked::attempt_deadline_ms;
use keel_session::connection::pipeline::Request;
use keel_session::connection::unblock::{UnblockAs, UNBLOCKED_ERROR};
use keel_session::connection::Dispatch;

/// How the wait of a blocked client ended.
enum Wait {
    Woken,
    TimedOut,
    /// The connection closed, or CLIENT KILL named it.
    Gone,
    /// CLIENT UNBLOCK named it.
    Unblocked(UnblockAs),
}

fn client_left() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the blocked client left",
    )
}

impl Session<'_> {
    /// Answers a blocking pop (everything before it is answered): an element as soon as one of
    /// its keys serves it, or null once its timeout passed. `Err` when the client left.
    pub(super) async fn block(
        &mut self,
        pop: &BlockingPop,
        request: &[Bytes],
    ) -> std::io::Result<Reply> {
        let timeout_ms = pop.timeout_ms.unwrap_or(0);
        let deadline = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms));
        let keys = pop.waiting_keys(self.pipeline.db());
        let mut registration = self.ctx.blocked.register(&keys, pop.takes_nothing());
        // A client that takes counts as blocked from here; an XREAD only once its first attempt
        // resolved its `$` (below), so that whoever sees it blocked and adds an entry has it
        // served.
        if !pop.takes_nothing() {
            registration.waits(self.connection.record());
        }
        // What was answered before it reaches the client now: it may wait for long.
        self.flush_all(None).await?;
        let mut watch_socket = true;
        // A client that blocked earlier on the same keys here goes first: this one waits for its
        // turn (a wake handed on) before it tries.
        let mut wait_first = !registration.first_in_line();
        // Its first attempt answers WRONGTYPE for a key of another kind, as the command does; the
        // later ones pass such a key over.
        let mut woken = false;
        // An XREAD naming `$` makes first attempts until one answers what `$` stands for; its
        // later attempts name those IDs.
        let mut unresolved = pop.reads_after_last().is_some();
        let mut request = request.to_vec();
        loop {
            if wait_first {
                registration.waits(self.connection.record());
                match self
                    .wait_blocked(registration.waiter(), deadline, &mut watch_socket)
                    .await
                {
                    Wait::Woken => {}
                    Wait::TimedOut | Wait::Unblocked(UnblockAs::Timeout) => {
                        return Ok(pop.nothing_reply())
                    }
                    Wait::Unblocked(UnblockAs::Error) => return Ok(Reply::error(UNBLOCKED_ERROR)),
                    Wait::Gone => return Err(client_left()),
                }
            }
            wait_first = true;
            registration.attempting();
            let reply = self.attempt(deadline, woken, &request).await?;
            if unresolved {
                if let Some(resolved) = pop.resolved_request(&request, &reply) {
                    request = resolved;
                    unresolved = false;
                    woken = true;
                    continue;
                }
            }
            // Until its `$` is resolved (an attempt that came too late answers null), an XREAD
            // tries as a first attempt.
            woken = !unresolved;
            if reply != Reply::Null {
                // An element taken, or an error (a destination of another kind, no leader): in
                // either case the keys may still serve the next in line, who tries next.
                registration.served();
                return Ok(reply);
            }
        }
    }

    /// One attempt through the pipeline: the element's reply, null (nothing taken), or an error.
    async fn attempt(
        &mut self,
        deadline: Option<Instant>,
        woken: bool,
        request: &[Bytes],
    ) -> std::io::Result<Reply> {
        let remaining_ms =
            deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u64);
        let deadline_ms = attempt_deadline_ms(super::super::wall_clock_ms(), remaining_ms);
        let args = attempt_args(deadline_ms, woken, request);
        let write = match Command::parse(&args) {
            Ok(Command::Write(write)) => write,
            _ => {
                return Ok(Reply::error(
                    "ERR internal error: the attempt does not parse",
                ))
            }
        };
        let request = Request {
            dispatch: Dispatch::Write(write),
            args,
            given_id: None,
        };
        self.propose_alone(request, "the blocked client's attempt")
            .await
    }

    /// Waits for a wake, the deadline, or the client's leaving. `watch_socket` turns false once
    /// the client sent more (pipelined behind the pop: read after it); its leaving is then seen
    /// only when its next request is read.
    async fn wait_blocked(
        &self,
        waiter: &crate::blocked::Waiter,
        deadline: Option<Instant>,
        watch_socket: &mut bool,
    ) -> Wait {
        let record = std::sync::Arc::clone(self.connection.record());
        loop {
            let timeout = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            let mut probe = [0u8; 1];
            let peek = async {
                if *watch_socket {
                    self.stream.peek(&mut probe).await
                } else {
                    std::future::pending().await
                }
            };
            tokio::select! {
                biased;
                () = record.killed() => return Wait::Gone,
                how = record.blocked.requested() => return Wait::Unblocked(how),
                () = waiter.woken() => return Wait::Woken,
                () = timeout => return Wait::TimedOut,
                peeked = peek => match peeked {
                    Ok(0) | Err(_) => return Wait::Gone,
                    Ok(_) => *watch_socket = false,
                },
            }
        }
    }
}
