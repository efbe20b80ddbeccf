//! Forwarding as the server does it, in the simulated world: a follower asked for a write it
//! cannot propose forwards it to the leader under the client's request id, and retries under that
//! id after a lost link, a reply that does not come in time or a "not the leader" answer — each
//! decision made by keel-kv's [`ForwardedWrite`] (the server's code), on the simulated clock. The
//! requests and replies travel the simulated network (lost, delayed, cut by partitions), and the
//! leader proposes through its engine under the forwarded id, so a retry of a write that did
//! apply is answered by keel-kv's deduplication, not applied again.

use keel_core::NodeId;
use keel_engine::ClientError;
use keel_kv::forwarding::{
    error_reply, write_reply, ForwardedWrite, Next, Outcome, RequestId, RetryPolicy,
};
use keel_kv::{LogCommand, Reply};
use rand::Rng;

use crate::history::{Key, OpKind};
use crate::host::{ProposalToken, SimShell};
use crate::world::{Event, World};

/// One forwarded write, from the follower's first attempt to the answer it relays.
pub(crate) struct SimForward {
    origin: NodeId,
    origin_incarnation: u64,
    client: usize,
    history_index: usize,
    key: Key,
    kind: OpKind,
    write: ForwardedWrite,
    /// The attempt in flight or last made: replies and timers of earlier attempts are stale.
    attempt: u32,
    awaiting_reply: bool,
}

/// What travels between the follower and the leader.
pub(crate) enum ForwardEvent {
    /// An attempt's request reaches `to`.
    Arrive {
        forward: u64,
        attempt: u32,
        to: NodeId,
        id: RequestId,
    },
    /// An attempt's reply reaches the follower.
    Reply {
        forward: u64,
        attempt: u32,
        reply: Reply,
    },
    /// The pause before the next attempt is over.
    Wake { forward: u64, attempt: u32 },
    /// The attempt's reply did not come in time.
    ReplyBy { forward: u64, attempt: u32 },
}

impl World {
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
            mutation: self.mutation,
        }
    }

    /// Follower `origin` refused client `c`'s write as not the leader: forward it instead of
    /// sending the client away, as the server does.
    pub(crate) fn start_forward(&mut self, origin: NodeId, c: usize, history_index: usize) {
        let Some((key, kind, seq)) = self.clients.write_of(c, history_index) else {
            return;
        };
        let id = RequestId {
            client_id: self.clients.client_id(c),
            seq,
        };
        let (write, next) = ForwardedWrite::start(id, self.now, self.forward_policy());
        let forward = self.next_forward;
        self.next_forward += 1;
        self.trace_line(|| format!("n{origin} forwards client {c}'s write as f{forward}"));
        let origin_incarnation = self.nodes[(origin - 1) as usize].incarnation;
        self.forwards.insert(
            forward,
            SimForward {
                origin,
                origin_incarnation,
                client: c,
                history_index,
                key,
                kind,
                write,
                attempt: 0,
                awaiting_reply: false,
            },
        );
        self.forward_next(forward, next);
    }

    /// Carries out what the forwarding decision says next.
    fn forward_next(&mut self, forward: u64, next: Next) {
        let Some(f) = self.forwards.get_mut(&forward) else {
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
                    Event::Forward(ForwardEvent::ReplyBy { forward, attempt }),
                );
                let node = &self.nodes[(origin - 1) as usize];
                let target = match node.raft.as_ref() {
                    Some(raft) if raft.role() == keel_core::Role::Leader => Some(origin),
                    Some(raft) => raft.leader().filter(|l| *l != origin),
                    None => None,
                };
                match target {
                    Some(to) if to == origin => self.forward_arrive(forward, attempt, to, id),
                    Some(to) => {
                        if let Some(delay) = self.link_delay(origin, to) {
                            let arrive = ForwardEvent::Arrive {
                                forward,
                                attempt,
                                to,
                                id,
                            };
                            self.schedule(delay, Event::Forward(arrive));
                        }
                    }
                    None => {
                        let next = self.forwards.get_mut(&forward).map(|f| {
                            f.awaiting_reply = false;
                            f.write.on_not_sent(self.now)
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
                    Event::Forward(ForwardEvent::Wake { forward, attempt }),
                );
            }
            Next::Relay => unreachable!("a relay follows a reply, handled there"),
            Next::GiveUp(outcome) => {
                let f = self.forwards.remove(&forward).expect("checked");
                self.trace_line(|| format!("f{forward} given up: {outcome:?}"));
                // The client is answered `-TRYAGAIN ...` and tries again under the same id.
                let error = match outcome {
                    Outcome::Unknown => ClientError::Unknown,
                    Outcome::NotApplied => ClientError::Busy("forwarding gave up"),
                };
                self.client_refused(f.client, f.history_index, &error);
            }
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
            } => {
                let now = self.now;
                let Some(f) = self.live_forward(forward, attempt) else {
                    return;
                };
                f.awaiting_reply = false;
                match f.write.on_reply(now, &reply) {
                    Next::Relay => {
                        let f = self.forwards.remove(&forward).expect("live");
                        self.trace_line(|| format!("f{forward} answered {reply:?}"));
                        if let Err(detail) = self.clients.write_answered(
                            f.origin,
                            f.client,
                            f.history_index,
                            &reply,
                            now,
                            &mut self.history,
                        ) {
                            self.violate("client reply", detail);
                        }
                    }
                    next => self.forward_next(forward, next),
                }
            }
            ForwardEvent::ReplyBy { forward, attempt } => {
                let now = self.now;
                let Some(f) = self.live_forward(forward, attempt) else {
                    return;
                };
                f.awaiting_reply = false;
                let next = f.write.on_lost_link(now);
                self.forward_next(forward, next);
            }
            ForwardEvent::Wake { forward, attempt } => {
                let now = self.now;
                let Some(f) = self.forwards.get_mut(&forward) else {
                    return;
                };
                if f.attempt != attempt || f.awaiting_reply {
                    return;
                }
                let next = f.write.on_wake(now);
                self.forward_next(forward, next);
            }
        }
    }

    /// The forward `forward` if `attempt` is the one it awaits a reply for and its follower is
    /// still up (a crash loses the follower's forwards with its client connections).
    fn live_forward(&mut self, forward: u64, attempt: u32) -> Option<&mut SimForward> {
        let f = self.forwards.get(&forward)?;
        let origin = &self.nodes[(f.origin - 1) as usize];
        if origin.incarnation != f.origin_incarnation || origin.raft.is_none() {
            self.forwards.remove(&forward);
            return None;
        }
        let f = self.forwards.get_mut(&forward)?;
        (f.attempt == attempt && f.awaiting_reply).then_some(f)
    }

    /// An attempt reaches node `to`, which proposes the write under the attempt's id.
    fn forward_arrive(&mut self, forward: u64, attempt: u32, to: NodeId, id: RequestId) {
        let Some(f) = self.forwards.get(&forward) else {
            return;
        };
        let command = crate::client::write_command(f.key, f.kind);
        let entry = LogCommand::new(id.client_id, id.seq, command).encode();
        let node = &mut self.nodes[(to - 1) as usize];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return; // down: the attempt is lost with it
        };
        if !app.engine.serving() {
            let reply = error_reply(&ClientError::Busy("replaying"));
            return self.forward_answered(to, forward, attempt, reply);
        }
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        let token = ProposalToken::Forwarded { forward, attempt };
        let _ = engine.propose(raft, entry, token, &mut shell);
        let effects = shell.effects;
        self.carry_out(to, effects);
        self.drive(to);
    }

    /// Node `at` has the answer to an attempt: it travels back to the follower.
    pub(crate) fn forward_answered(
        &mut self,
        at: NodeId,
        forward: u64,
        attempt: u32,
        reply: Reply,
    ) {
        let Some(origin) = self.forwards.get(&forward).map(|f| f.origin) else {
            return;
        };
        let event = ForwardEvent::Reply {
            forward,
            attempt,
            reply,
        };
        if at == origin {
            return self.forward_event(event);
        }
        if let Some(delay) = self.link_delay(at, origin) {
            self.schedule(delay, Event::Forward(event));
        }
    }

    /// The reply of the leader `at` to an attempt whose entry applied with `result`.
    pub(crate) fn forward_applied(
        &mut self,
        at: NodeId,
        forward: u64,
        attempt: u32,
        result: &bytes::Bytes,
    ) {
        self.forward_answered(at, forward, attempt, write_reply(result));
    }

    /// The leader `at` refused an attempt (or its outcome is unknown there).
    pub(crate) fn forward_refused(
        &mut self,
        at: NodeId,
        forward: u64,
        attempt: u32,
        error: &ClientError,
    ) {
        self.forward_answered(at, forward, attempt, error_reply(error));
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
