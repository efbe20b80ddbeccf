//! Forwarding as the server does it, in the simulated world, in two thirds of the seeds
//! (`Params::forward_writes`). A follower's connection whose write (or EXEC) the node refused as
//! not the leader forwards it to the leader under the request id it was proposed with, and retries
//! under that id after a lost link, a reply that does not come in time or a "not applied" answer —
//! each decision made by keel-session's [`ForwardedWrite`] (the server's code), on the simulated clock
//! with a retry policy scaled to simulated time. A refused read is forwarded once, as it is. The
//! requests and replies travel the simulated network (lost, delayed, cut by partitions).
//!
//! At the leader each attempt arrives on a forwarding connection of its own
//! (`connection.rs`): `CLIENT SETNAME keel-forward`, then the group the server sends
//! ([`wire_parts`]: `RAFT.FORWARD <id>` and the write, or `MULTI`, the queued requests,
//! `RAFT.FORWARD <id>`, `EXEC`), dispatched and pipelined by the server's code and proposed
//! through the leader's engine under the forwarded id. A retry of a write that did apply is
//! answered by keel-redis's deduplication, not applied again. The server's own `send_group` follows
//! [`wire_parts`] too. With `--mutation forward-retry-new-id` a retry gets a new id and applies
//! twice, which the checker must catch.

use crate::mutation::Layers;
use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;
use keel_redis::command::client_error_reply;
use keel_redis::command::{forward_request, FORWARD_CLIENT_NAME};
use keel_redis::RequestId;
use keel_resp::Reply;
use keel_session::connection::pipeline::{Relay, WriteRequest};
use keel_session::forwarding::{
    wire_parts, Abandoned, ForwardedWrite, Next, RetryPolicy, WirePart,
};
use rand::Rng;

use crate::connection::{ForwardLeg, Frame, Owner};
use crate::kv_user::KvState;
use crate::world::World;

/// One forwarded request, from the follower's first attempt to the answer it gives its client.
pub(crate) struct SimForward {
    origin: NodeId,
    origin_incarnation: u64,
    /// The connection, and its refused request (slot), that this forward answers.
    connection: u64,
    slot: u64,
    /// The leader the refusal named (where a read goes).
    leader: NodeId,
    how: How,
    /// The attempt in flight or last made: replies and timers of earlier attempts are stale.
    attempt: u32,
    awaiting_reply: bool,
    /// The reply of the last attempt that got one: what the client is told if no attempt applied
    /// the write.
    answer: Reply,
}

enum How {
    /// A write or transaction, under its id, retried as keel-session decides.
    Retried {
        write: ForwardedWrite,
        request: WriteRequest,
    },
    /// A read, sent once.
    Once { args: Vec<Bytes> },
}

/// What travels between the follower and the leader.
pub(crate) enum ForwardEvent {
    /// An attempt's request reaches `to` (a write's under `id`).
    Arrive {
        forward: u64,
        attempt: u32,
        to: NodeId,
        id: Option<RequestId>,
    },
    /// An attempt's reply reaches the follower; `id_refused`: the leader refused the id it
    /// was announced under.
    Reply {
        forward: u64,
        attempt: u32,
        reply: Reply,
        id_refused: bool,
    },
    /// The pause before the next attempt is over.
    Wake { forward: u64, attempt: u32 },
    /// The attempt's reply did not come in time.
    ReplyBy { forward: u64, attempt: u32 },
}

impl World<KvState> {
    /// The retry policy in simulated time: a deadline as long as a client waits, a first reply
    /// wait of a few round trips, short backoffs.
    fn forward_policy(&self) -> RetryPolicy {
        let round_trip = 2 * self.params.net_delay_max + self.params.disk_latency_max;
        RetryPolicy {
            deadline_ms: self.params.client_timeout,
            reply_wait_first_ms: 4 * round_trip,
            backoff_first_ms: 2,
            backoff_max_ms: 4 * round_trip,
            attempts_max: 16,
            mutation: self.mutation.redis(),
        }
    }

    /// Follower `origin` refused the request in slot `slot` of `connection` as not the leader,
    /// naming `leader`: forward it instead of sending the client away, as the server does.
    pub(crate) fn start_forward(
        &mut self,
        connection: u64,
        slot: u64,
        origin: NodeId,
        leader: NodeId,
        relay: Relay,
    ) {
        let forward = self.user.next_forward;
        self.user.next_forward += 1;
        let (how, next) = match relay {
            Relay::WithId(id, request) => {
                let (write, next) = ForwardedWrite::start(id, self.now, self.forward_policy());
                (How::Retried { write, request }, Some(next))
            }
            Relay::Once(args) => (How::Once { args }, None),
        };
        self.trace_line(|| {
            format!("n{origin} forwards conn {connection} slot {slot} as f{forward}")
        });
        let origin_incarnation = self.nodes[(origin - 1) as usize].incarnation;
        self.user.forwards.insert(
            forward,
            SimForward {
                origin,
                origin_incarnation,
                connection,
                slot,
                leader,
                how,
                attempt: 0,
                awaiting_reply: false,
                answer: Reply::error("TRYAGAIN no leader"),
            },
        );
        match next {
            Some(next) => self.forward_next(forward, next),
            None => self.forward_once(forward),
        }
    }

    /// Sends a read to the leader its refusal named, once; the reply, or its absence by the
    /// deadline, is the client's answer.
    fn forward_once(&mut self, forward: u64) {
        let deadline = self.params.client_timeout;
        let Some(f) = self.user.forwards.get_mut(&forward) else {
            return;
        };
        f.attempt = 1;
        f.awaiting_reply = true;
        let (origin, to) = (f.origin, f.leader);
        self.schedule(
            deadline,
            forward_user_event(ForwardEvent::ReplyBy {
                forward,
                attempt: 1,
            }),
        );
        self.send_attempt(forward, 1, origin, to, None);
    }

    /// Carries out what the forwarding decision says next.
    fn forward_next(&mut self, forward: u64, next: Next) {
        let Some(f) = self.user.forwards.get_mut(&forward) else {
            return;
        };
        match next {
            Next::Send { id, reply_by_ms } => {
                f.attempt += 1;
                f.awaiting_reply = true;
                let (origin, attempt) = (f.origin, f.attempt);
                let delay = reply_by_ms.saturating_sub(self.now).max(1);
                self.schedule(
                    delay,
                    forward_user_event(ForwardEvent::ReplyBy { forward, attempt }),
                );
                let node = &self.nodes[(origin - 1) as usize];
                let target = match node.raft.as_ref() {
                    Some(raft) if raft.role() == keel_core::Role::Leader => Some(origin),
                    Some(raft) => raft.leader().filter(|l| *l != origin),
                    None => None,
                };
                match target {
                    Some(to) => self.send_attempt(forward, attempt, origin, to, Some(id)),
                    None => {
                        let next = self.user.forwards.get_mut(&forward).and_then(|f| {
                            f.awaiting_reply = false;
                            match &mut f.how {
                                How::Retried { write, .. } => Some(write.on_not_sent(self.now)),
                                How::Once { .. } => None,
                            }
                        });
                        if let Some(next) = next {
                            self.forward_next(forward, next);
                        }
                    }
                }
            }
            Next::Wait { until_ms } => {
                let attempt = f.attempt;
                let delay = until_ms.saturating_sub(self.now).max(1);
                self.schedule(
                    delay,
                    forward_user_event(ForwardEvent::Wake { forward, attempt }),
                );
            }
            Next::Relay => unreachable!("a relay follows a reply, handled there"),
            Next::GiveUp(outcome) => {
                let f = self.user.forwards.remove(&forward).expect("checked");
                self.trace_line(|| format!("f{forward} given up: {outcome:?}"));
                let reply = match outcome {
                    Abandoned::Unknown => client_error_reply(&ClientError::Unknown),
                    Abandoned::NotApplied => f.answer,
                };
                self.connection_answered(f.connection, f.slot, reply);
            }
        }
    }

    /// An attempt leaves `origin` for `to` (at once if `origin` leads itself by now).
    fn send_attempt(
        &mut self,
        forward: u64,
        attempt: u32,
        origin: NodeId,
        to: NodeId,
        id: Option<RequestId>,
    ) {
        if to == origin {
            return self.forward_arrive(forward, attempt, to, id);
        }
        if let Some(delay) = self.link_delay(origin, to) {
            let arrive = ForwardEvent::Arrive {
                forward,
                attempt,
                to,
                id,
            };
            self.schedule(delay, forward_user_event(arrive));
        }
    }

    pub(crate) fn forward_event(&mut self, event: ForwardEvent) {
        match event {
            ForwardEvent::Arrive {
                forward,
                attempt,
                to,
                id,
            } => self.forward_arrive(forward, attempt, to, id),
            ForwardEvent::Reply {
                forward,
                attempt,
                reply,
                id_refused,
            } => self.forward_reply(forward, attempt, reply, id_refused),
            ForwardEvent::ReplyBy { forward, attempt } => {
                let now = self.now;
                let Some(f) = self.live_forward(forward, attempt) else {
                    return;
                };
                f.awaiting_reply = false;
                match &mut f.how {
                    How::Retried { write, .. } => {
                        let next = write.on_lost_link(now);
                        self.forward_next(forward, next);
                    }
                    How::Once { .. } => {
                        let f = self.user.forwards.remove(&forward).expect("live");
                        let reply = Reply::error(format!(
                            "TRYAGAIN forwarding to leader {} failed: no reply in time",
                            f.leader
                        ));
                        self.connection_answered(f.connection, f.slot, reply);
                    }
                }
            }
            ForwardEvent::Wake { forward, attempt } => {
                let now = self.now;
                let Some(f) = self.user.forwards.get_mut(&forward) else {
                    return;
                };
                if f.attempt != attempt || f.awaiting_reply {
                    return;
                }
                if let How::Retried { write, .. } = &mut f.how {
                    let next = write.on_wake(now);
                    self.forward_next(forward, next);
                }
            }
        }
    }

    /// An attempt's reply reached the follower.
    fn forward_reply(&mut self, forward: u64, attempt: u32, reply: Reply, id_refused: bool) {
        let now = self.now;
        let Some(f) = self.live_forward(forward, attempt) else {
            return;
        };
        f.awaiting_reply = false;
        let next = match &mut f.how {
            How::Retried { write, .. } => {
                if id_refused {
                    write.on_id_refused();
                }
                let next = write.on_reply(now, &reply);
                f.answer = reply.clone();
                next
            }
            How::Once { .. } => Next::Relay,
        };
        match next {
            Next::Relay => {
                let f = self.user.forwards.remove(&forward).expect("live");
                self.trace_line(|| format!("f{forward} answered {reply:?}"));
                self.connection_answered(f.connection, f.slot, reply);
            }
            next => self.forward_next(forward, next),
        }
    }

    /// The forward `forward` if `attempt` is the one it awaits a reply for and its follower is
    /// still up (a crash loses the follower's forwards with its client connections).
    fn live_forward(&mut self, forward: u64, attempt: u32) -> Option<&mut SimForward> {
        let f = self.user.forwards.get(&forward)?;
        let origin = &self.nodes[(f.origin - 1) as usize];
        if origin.incarnation != f.origin_incarnation || origin.raft.is_none() {
            self.user.forwards.remove(&forward);
            return None;
        }
        let f = self.user.forwards.get_mut(&forward)?;
        (f.attempt == attempt && f.awaiting_reply).then_some(f)
    }

    /// An attempt reaches node `to`: it opens a forwarding connection there and sends the
    /// group the server sends, which the node serves as any connection.
    fn forward_arrive(&mut self, forward: u64, attempt: u32, to: NodeId, id: Option<RequestId>) {
        let Some(f) = self.user.forwards.get(&forward) else {
            return;
        };
        let setname =
            ["CLIENT", "SETNAME", FORWARD_CLIENT_NAME].map(|w| Bytes::from_static(w.as_bytes()));
        let mut frames = vec![Frame::new(setname.to_vec())];
        let mut until_id = None;
        match (&f.how, id) {
            (How::Retried { request, .. }, Some(id)) => {
                for part in wire_parts(id, request.forwarded()) {
                    let args = match part {
                        WirePart::Announce(id) => {
                            // Its reply is the one after as many as there are frames before it
                            // (SETNAME's first).
                            until_id = Some(frames.len());
                            forward_request(id).to_vec()
                        }
                        WirePart::Request(args) => args.to_vec(),
                    };
                    frames.push(Frame::new(args));
                }
            }
            (How::Once { args }, _) => frames.push(Frame::new(args.clone())),
            (How::Retried { .. }, None) => unreachable!("a write is sent under its id"),
        }
        let node = &self.nodes[(to - 1) as usize];
        let Some(app) = node.app.as_ref() else {
            return; // down: the attempt is lost with it
        };
        if !app.engine.serving() {
            // Still replaying: the runtime answers that it is busy.
            let reply = client_error_reply(&ClientError::Busy("replaying"));
            return self.forward_answered(to, forward, attempt, reply, false);
        }
        let leg = ForwardLeg {
            forward,
            attempt,
            replies_left: frames.len(),
            until_id,
            id_refused: false,
        };
        let connection = self
            .user
            .clients
            .connections
            .open(to, Owner::Forward(leg), 0);
        self.user.clients.connections.send(connection, frames);
        self.serve(connection);
    }

    /// A reply on a forwarding connection at the leader: the one to `RAFT.FORWARD` says whether
    /// the id was taken; the last is the forwarded request's, sent back to the follower.
    pub(crate) fn forward_leg_reply(&mut self, connection: u64, reply: Reply) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let at = c.node;
        let Owner::Forward(leg) = &mut c.owner else {
            return;
        };
        leg.replies_left -= 1;
        match leg.until_id {
            Some(0) => {
                leg.id_refused = reply != Reply::OK;
                leg.until_id = None;
            }
            Some(n) => leg.until_id = Some(n - 1),
            None => {}
        }
        if leg.replies_left > 0 {
            return;
        }
        let leg = *leg;
        self.user.clients.connections.close(connection);
        self.forward_answered(at, leg.forward, leg.attempt, reply, leg.id_refused);
    }

    /// Node `at` has the answer to an attempt: it travels back to the follower.
    fn forward_answered(
        &mut self,
        at: NodeId,
        forward: u64,
        attempt: u32,
        reply: Reply,
        id_refused: bool,
    ) {
        let Some(origin) = self.user.forwards.get(&forward).map(|f| f.origin) else {
            return;
        };
        let event = ForwardEvent::Reply {
            forward,
            attempt,
            reply,
            id_refused,
        };
        if at == origin {
            return self.forward_event(event);
        }
        if let Some(delay) = self.link_delay(at, origin) {
            self.schedule(delay, forward_user_event(event));
        }
    }

    /// The delay of a message on the link `from` -> `to` under the seed's faults; `None` when
    /// the link drops it.
    fn link_delay(&mut self, from: NodeId, to: NodeId) -> Option<u64> {
        if self.blocked.contains(&(from, to)) {
            return None;
        }
        let loss = if self.healing {
            0.0
        } else {
            self.params.loss_probability
        };
        if self.rng.random_bool(loss) {
            return None;
        }
        Some(
            self.rng
                .random_range(self.params.net_delay_min..=self.params.net_delay_max),
        )
    }
}

/// A forward's event as one of the world's.
fn forward_user_event(event: ForwardEvent) -> crate::world::Event<KvState> {
    crate::world::Event::User(crate::kv_user::KvEvent::Forward(event))
}
