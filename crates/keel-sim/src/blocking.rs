//! Blocking pops in the simulated world, as the server runs them (keel-server's
//! `connection/blocking.rs`) but without tokio: the connection joins its node's waiters
//! (keel-session's [`Waiters`], the registry the server wraps), proposes attempts
//! (`RAFT.BLOCKED deadline-ms woken <command>`) through its pipeline like any write (forwarded
//! from a follower), and between attempts waits for a wake, which comes from the node's own
//! apply: the state machine notes the keys each entry filled ([`FilledKeys`], the node's
//! `FilledKeysListener`), and after the event the first waiter of each is woken. Its timeout is
//! an event in simulated time, counted from the request's arrival; an attempt in flight when it
//! passes decides the reply. Attempt deadlines come from the same
//! [`attempt_deadline_ms`] as the server's, on the node's own wall clock.
//!
//! A connection closed while blocked (its client gave up, its node crashed) leaves the queues
//! and hands on a wake it held; a node's crash drops its whole registry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_core::NodeId;
use keel_redis::command::blocking::{attempt_args, BlockingPop};
use keel_redis::Command;
use keel_resp::Reply;
use keel_session::blocked::{attempt_deadline_ms, WaiterId, Waiters};
use keel_session::connection::pipeline::{Admission, Request};
use keel_session::Dispatch;

use crate::kv_user::{KvEvent, KvState};
use crate::world::{Event, World};

/// What a node's state machine tells of the keys its entries filled, picked up after each
/// event. Behind a lock only because the listener trait asks for `Sync`: one thread runs a world.
#[derive(Debug, Default)]
pub(crate) struct FilledKeys {
    waiting: AtomicBool,
    noted: AtomicBool,
    /// Keys filled since the last pick-up, and whether a snapshot replaced the state (bounded
    /// by the entries one event applies).
    keys: Mutex<(Vec<Bytes>, bool)>,
}

impl keel_redis::FilledKeysListener for FilledKeys {
    fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    fn filled(&self, keys: Vec<Bytes>) {
        self.keys.lock().expect("one thread").0.extend(keys);
        self.noted.store(true, Ordering::Relaxed);
    }

    fn restored(&self) {
        self.keys.lock().expect("one thread").1 = true;
        self.noted.store(true, Ordering::Relaxed);
    }
}

/// One node's blocked connections.
#[derive(Default)]
pub(crate) struct NodeWaiters {
    waiters: Waiters,
    /// The connection of each waiter.
    connections: Vec<(WaiterId, u64)>,
    pub listener: Arc<FilledKeys>,
}

impl NodeWaiters {
    fn sync_waiting(&self) {
        let waiting = !self.waiters.is_empty();
        self.listener.waiting.store(waiting, Ordering::Relaxed);
    }

    /// The node went down: nobody waits there any more.
    pub fn clear(&mut self) {
        self.waiters = Waiters::default();
        self.connections.clear();
        self.sync_waiting();
    }

    /// Connection `connection` (blocked as `id`) leaves; returns the connections to wake.
    pub fn leave(&mut self, id: WaiterId, served: bool) -> Vec<u64> {
        self.connections.retain(|(w, _)| *w != id);
        let woken = self.waiters.leave(id, served);
        self.sync_waiting();
        self.connections_of(&woken)
    }

    fn connections_of(&self, ids: &[WaiterId]) -> Vec<u64> {
        let of = |id: &WaiterId| self.connections.iter().find(|(w, _)| w == id).map(|c| c.1);
        ids.iter().filter_map(of).collect()
    }
}

/// A connection's blocking pop in progress.
#[derive(Debug)]
pub(crate) struct Blocked {
    pop: BlockingPop,
    args: Vec<Bytes>,
    pub waiter: WaiterId,
    /// When its timeout passes (simulated time); `None`: it waits for ever.
    deadline: Option<u64>,
    /// An attempt was proposed and not answered yet.
    attempting: bool,
    /// Its first attempt was made (later ones pass a key of another kind over).
    tried: bool,
    /// Its timeout passed while an attempt was in flight: that attempt's answer is the reply.
    timed_out: bool,
    /// An attempt of it took nothing: an element it gets now came after it waited.
    waited: bool,
}

impl World<KvState> {
    /// Node `node`'s waiters.
    fn node_waiters(&mut self, node: NodeId) -> &mut NodeWaiters {
        &mut self.user.waiters[(node - 1) as usize]
    }

    /// `connection` was sent a blocking pop (everything before it answered): it joins the
    /// queues of its keys and tries at once if it is first in line on one of them.
    pub(crate) fn block(&mut self, connection: u64, pop: BlockingPop, args: Vec<Bytes>) {
        let Some((node, db)) = self
            .user
            .clients
            .connections
            .get_mut(connection)
            .map(|c| (c.node, c.pipeline.db()))
        else {
            return;
        };
        let waiters = self.node_waiters(node);
        let joined = waiters
            .waiters
            .join(&pop.waiting_keys(db), pop.takes_nothing());
        waiters.connections.push((joined.id, connection));
        waiters.sync_waiting();
        let timeout_ms = pop.timeout_ms.unwrap_or(0);
        let deadline = (timeout_ms > 0).then(|| self.now + timeout_ms);
        if let Some(deadline) = deadline {
            let event = KvEvent::BlockTimeout {
                connection,
                waiter: joined.id,
            };
            self.schedule(deadline - self.now, Event::User(event));
        }
        let c = self
            .user
            .clients
            .connections
            .get_mut(connection)
            .expect("open");
        c.blocked = Some(Blocked {
            pop,
            args,
            waiter: joined.id,
            deadline,
            attempting: false,
            tried: false,
            timed_out: false,
            waited: false,
        });
        if joined.first_in_line {
            self.attempt(connection);
        }
    }

    /// Proposes an attempt of `connection`'s blocking pop through its pipeline.
    fn attempt(&mut self, connection: u64) {
        let Some(node) = self
            .user
            .clients
            .connections
            .get_mut(connection)
            .map(|c| c.node)
        else {
            return;
        };
        let wall_ms = self.wall_ms(node);
        let now = self.now;
        let connections = &mut self.user.clients.connections;
        let Some(c) = connections.get_mut(connection) else {
            return;
        };
        let Some(b) = c.blocked.as_mut() else {
            return;
        };
        let remaining = b.deadline.map(|d| d.saturating_sub(now));
        let args = attempt_args(attempt_deadline_ms(wall_ms, remaining), b.tried, &b.args);
        b.tried = true;
        b.attempting = true;
        let waiter = b.waiter;
        self.user.waiters[(node - 1) as usize]
            .waiters
            .attempting(waiter);
        let Ok(Command::Write(write)) = Command::parse(&args) else {
            return self.violate("blocking pop", "its attempt does not parse".into());
        };
        let request = Request {
            dispatch: Dispatch::Write(write),
            args,
            given_id: None,
        };
        let c = self
            .user
            .clients
            .connections
            .get_mut(connection)
            .expect("open");
        if !matches!(c.pipeline.admit(request), Admission::Queued) {
            return self.violate("blocking pop", "its attempt was not queued".into());
        }
        self.drain(connection);
        self.serve(connection);
    }

    /// The answer of `connection`'s attempt: null (nothing taken) keeps it waiting, unless its
    /// timeout passed; anything else is its reply.
    pub(crate) fn attempt_answered(&mut self, connection: u64, reply: Reply) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let (node, owner) = (c.node, c.owner);
        let b = c.blocked.as_mut().expect("an attempt's answer");
        b.attempting = false;
        if reply == Reply::Null && !b.timed_out {
            b.waited = true;
            let waiter = b.waiter;
            if self.node_waiters(node).waiters.is_woken(waiter) {
                // Woken while its attempt was in flight: the fill may be one it did not see.
                self.attempt(connection);
            }
            return;
        }
        let b = c.blocked.take().expect("checked");
        let reply = if reply == Reply::Null {
            b.pop.nothing_reply()
        } else {
            reply
        };
        let served = reply != b.pop.nothing_reply();
        if served && b.waited && !matches!(reply, Reply::Error(_)) {
            self.user.served_after_waiting += 1;
        }
        let woken = self.node_waiters(node).leave(b.waiter, served);
        self.wake_connections(woken);
        self.deliver(connection, owner, reply);
    }

    /// The timeout of `connection`'s blocking pop (as `waiter`) passed.
    pub(crate) fn block_timeout(&mut self, connection: u64, waiter: WaiterId) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let (node, owner) = (c.node, c.owner);
        let Some(b) = c.blocked.as_mut().filter(|b| b.waiter == waiter) else {
            return;
        };
        if b.attempting {
            b.timed_out = true;
            return;
        }
        let b = c.blocked.take().expect("checked");
        let woken = self.node_waiters(node).leave(b.waiter, false);
        self.wake_connections(woken);
        self.deliver(connection, owner, b.pop.nothing_reply());
        self.serve(connection);
    }

    /// After each event: wakes the first waiter of every key a node's apply filled.
    pub(crate) fn wake_filled(&mut self) {
        for at in 0..self.user.waiters.len() {
            let waiters = &mut self.user.waiters[at];
            if !waiters.listener.noted.swap(false, Ordering::Relaxed) {
                continue;
            }
            let (keys, restored) = std::mem::take(&mut *waiters.listener.keys.lock().expect("one"));
            let mut ids = waiters.waiters.wake_first(&keys);
            if restored {
                ids.extend(waiters.waiters.wake_all_first());
            }
            let woken = waiters.connections_of(&ids);
            self.wake_connections(woken);
        }
        let left = std::mem::take(&mut self.user.clients.connections.left_blocked);
        for (node, waiter) in left {
            let woken = self.node_waiters(node).leave(waiter, false);
            self.wake_connections(woken);
        }
    }

    /// Each of `connections`, woken, tries again unless an attempt of its is in flight (that
    /// one tries again when it answers null).
    fn wake_connections(&mut self, connections: Vec<u64>) {
        for connection in connections {
            let idle = self
                .user
                .clients
                .connections
                .get_mut(connection)
                .and_then(|c| c.blocked.as_ref())
                .is_some_and(|b| !b.attempting);
            if idle {
                self.attempt(connection);
            }
        }
    }
}
