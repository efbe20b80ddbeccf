//! The server's side of a client connection, hosted in the simulated world: keel-session's protocol
//! layer ([`ClientConnection::dispatch`], MULTI ... EXEC) and its pipeline
//! ([`keel_session::connection::pipeline`]: runs, what waits for what, the order replies leave in) —
//! the code the server's tokio session runs — over the node's engine: a write run is proposed as
//! one batch with `NodeEngine::propose_batch`, its entries stamped with the node's wall clock
//! (`clock.rs`), a read goes through the engine's ReadIndex path and apply pipeline. A request the
//! node refused is resolved as the server resolves it (`redirect`): forwarded to the leader
//! (`forward.rs`, in the seeds that draw forwarding) with the refused writes right behind it,
//! each a forward of its own under way at once (any order the server's grouped exchange can
//! give), or its refusal answered.
//!
//! A connection belongs to a simulated client (`client.rs`), or on a leader to one attempt of a
//! forward: what a follower forwards arrives on a forwarding connection of its own (named
//! `keel-forward`, its write's id announced by `RAFT.FORWARD`), as in the server. Replies go back
//! to the owner in request order, at once (the client sits beside the node). A node's crash
//! closes its connections.
//!
//! As the server does, a connection admits the requests it was sent until one must wait for
//! everything before it (or none is left), then proposes the write run's batch and releases
//! replies until the pipeline is empty, and only then admits more.

use std::collections::VecDeque;

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;
use keel_redis::command::client_error_reply;
use keel_redis::command::ReadCommand;
use keel_redis::RequestId;
use keel_resp::Limits;
use keel_resp::Reply;
use keel_session::connection::pipeline::{
    is_forwarding, redirect, Admission, Behind, Intake, Pipeline, Redirect, Relay, Release, Request,
};
use keel_session::connection::{NodeInfo, NodeReport};
use keel_session::forwarding::{leader_address_unknown, FORWARD_GROUP_MAX};
use keel_session::ClientConnection;

use crate::host::{ProposalToken, ReadToken, SimShell};
use crate::kv_user::KvState;
use crate::world::World;

/// Who gets a connection's replies.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Owner {
    /// The simulated client with this index.
    Client(usize),
    /// The queue client with this index (`queues/`).
    Queue(usize),
    /// Attempt `attempt` of forward `forward`, arriving at the leader.
    Forward(ForwardLeg),
}

/// The leader's side of one forwarding attempt: which of its replies matter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ForwardLeg {
    pub forward: u64,
    pub attempt: u32,
    /// Replies still to come; the last is the forwarded request's.
    pub replies_left: usize,
    /// Replies to come before the one to `RAFT.FORWARD` (`None`: none is sent).
    pub until_id: Option<usize>,
    /// Whether the leader refused the announced id (`ForwardedWrite::on_id_refused`).
    pub id_refused: bool,
}

/// One request as the client sent it.
#[derive(Clone, Debug)]
pub(crate) struct Frame {
    pub args: Vec<Bytes>,
    /// The id a write (or EXEC) is proposed under: a simulated client retries a write under the
    /// id of its first attempt, the way a follower's retries of a forwarded write keep theirs.
    pub given_id: Option<RequestId>,
}

impl Frame {
    pub fn new(args: Vec<Bytes>) -> Frame {
        Frame {
            args,
            given_id: None,
        }
    }
}

/// A connection a node serves.
pub(crate) struct SimConnection {
    pub node: NodeId,
    pub owner: Owner,
    protocol: ClientConnection,
    /// The simulator's handles are unit: outcomes come back as events naming the slot.
    pub pipeline: Pipeline<(), ()>,
    /// The blocking pop it serves, while it waits (`blocking.rs`).
    pub blocked: Option<crate::blocking::Blocked>,
    /// The script it runs, until answered (`scripts.rs`): nothing more is admitted meanwhile.
    pub script: Option<crate::scripts::RunningScript>,
    /// The last request number its scripts' transactions were proposed under (`scripts.rs`).
    pub script_seq: u64,
    /// Requests sent and not admitted yet, in order.
    input: VecDeque<Frame>,
    /// A request admitted only after everything before it is answered.
    held: Option<Request>,
    /// Releasing replies until the pipeline is empty: nothing more is admitted meanwhile.
    draining: bool,
    /// The reads in flight, by slot, with what each reads.
    reads: Vec<(u64, ReadCommand)>,
    /// Set while [`World::serve`] runs for this connection: an outcome that comes back from an
    /// engine call it makes is picked up by that loop, not by a nested one.
    serving: bool,
    /// The node has work from this connection's requests (proposals, ReadIndex rounds): it is
    /// driven once [`World::serve`] is done, as the runtime's node task handles what its
    /// connections queued before it takes its next `Ready`.
    pub(crate) node_has_work: bool,
}

/// Every connection the nodes serve, by number: numbers count from 1 and are never reused, so a
/// late outcome of a closed one finds nothing. Looked up on every step of every request, so
/// indexed by number (a run opens a few thousand at most).
#[derive(Default)]
pub(crate) struct Connections {
    /// Slot `n - 1` holds connection `n` while it is open.
    by_number: Vec<Option<Box<SimConnection>>>,
    /// Blocked connections closed since the last event: (node, waiter), to leave its waiters.
    pub left_blocked: Vec<(NodeId, keel_session::blocked::WaiterId)>,
    /// The run's mutation of the server's code, for every connection's protocol state.
    pub mutation: Option<keel_redis::Mutation>,
}

impl Connections {
    /// Opens a connection to `node` whose writes belong to the dedup session `session` unless
    /// given an id.
    pub fn open(&mut self, node: NodeId, owner: Owner, session: u64) -> u64 {
        let number = self.by_number.len() as u64 + 1;
        let mut protocol = ClientConnection::new(number, "", Limits::default());
        protocol.set_mutation(self.mutation);
        let connection = SimConnection {
            node,
            owner,
            protocol,
            blocked: None,
            script: None,
            script_seq: 0,
            pipeline: Pipeline::new(session),
            input: VecDeque::new(),
            held: None,
            draining: false,
            reads: Vec::new(),
            serving: false,
            node_has_work: false,
        };
        self.by_number.push(Some(Box::new(connection)));
        number
    }

    fn slot(&mut self, connection: u64) -> Option<&mut Option<Box<SimConnection>>> {
        let at = usize::try_from(connection.checked_sub(1)?).ok()?;
        self.by_number.get_mut(at)
    }

    pub fn close(&mut self, connection: u64) {
        if let Some(slot) = self.slot(connection) {
            if let Some(c) = slot.take() {
                if let Some(blocked) = &c.blocked {
                    self.left_blocked.push((c.node, blocked.waiter));
                }
            }
        }
    }

    pub fn get_mut(&mut self, connection: u64) -> Option<&mut SimConnection> {
        self.slot(connection)?.as_deref_mut()
    }

    /// Queues requests sent on `connection` ([`World::serve`] takes them).
    pub fn send(&mut self, connection: u64, frames: impl IntoIterator<Item = Frame>) {
        if let Some(c) = self.get_mut(connection) {
            c.input.extend(frames);
        }
    }

    /// Where requests sent on `connection` queue, to send them one by one.
    pub fn input(&mut self, connection: u64) -> Option<&mut VecDeque<Frame>> {
        self.get_mut(connection).map(|c| &mut c.input)
    }

    /// Closes every connection to `node` (it crashed); returns their numbers and owners.
    pub fn close_on(&mut self, node: NodeId) -> Vec<(u64, Owner)> {
        let mut lost = Vec::new();
        for (at, slot) in self.by_number.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|c| c.node == node) {
                let c = slot.take().expect("checked");
                lost.push((at as u64 + 1, c.owner));
            }
        }
        lost
    }
}

/// The node status local commands would report: the simulated clients send none that asks.
struct NoStatus;

impl NodeInfo for NoStatus {
    fn status(&self) -> NodeReport {
        NodeReport::default()
    }
}

impl World<KvState> {
    /// Serves `connection`: admits its requests in order, proposes a write run when it ends,
    /// starts reads, and releases every reply that can leave, until it waits for an outcome or
    /// has nothing left.
    pub(crate) fn serve(&mut self, connection: u64) {
        match self.user.clients.connections.get_mut(connection) {
            Some(c) if !c.serving => c.serving = true,
            _ => return,
        }
        while self.violation.is_none() && self.serve_step(connection) {}
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        c.serving = false;
        if std::mem::take(&mut c.node_has_work) {
            // Outcomes this brings come back to `serve` afresh.
            let node = c.node;
            self.drive(node);
        }
    }

    /// One release of a draining connection's pipeline; false when it waits for an outcome.
    fn release_step(&mut self, connection: u64) -> bool {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return false;
        };
        match c.pipeline.release() {
            Release::Send(reply) => {
                let owner = c.owner;
                self.deliver(connection, owner, reply);
            }
            Release::Watched { keys, point } => {
                let reply = c.protocol.watch_point(&keys, &point);
                let owner = c.owner;
                self.deliver(connection, owner, reply);
            }
            Release::Resolve { slot, error, relay } => self.resolve(connection, slot, error, relay),
            Release::Await(..) => return false,
            Release::Idle => c.draining = false,
        }
        true
    }

    /// One step of [`World::serve`]; false when the connection waits (or is gone).
    fn serve_step(&mut self, connection: u64) -> bool {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return false;
        };
        if c.draining {
            return self.release_step(connection);
        }
        if c.script.is_some() {
            // Nothing more is admitted until the script is answered.
            return false;
        }
        let request = match c.held.take() {
            Some(request) => request,
            None => {
                let Some(frame) = c.input.pop_front() else {
                    if c.pipeline.is_empty() {
                        return false;
                    }
                    // All that was sent is admitted: it is answered before more is taken.
                    self.drain(connection);
                    return true;
                };
                let announced = match c.pipeline.intake(&frame.args, &c.protocol) {
                    Intake::Answered => return true,
                    Intake::Dispatch(id) => id,
                };
                let dispatch = c.protocol.dispatch(&frame.args, &NoStatus);
                Request {
                    dispatch,
                    args: frame.args,
                    given_id: frame.given_id.or(announced),
                }
            }
        };
        match c.pipeline.admit(request) {
            Admission::Queued => {}
            Admission::AfterAll(request) => {
                c.held = Some(request);
                self.drain(connection);
                return true;
            }
            Admission::StartRead { slot, command } => self.start_read(connection, slot, command),
            Admission::Block(pop, args) => {
                self.block(connection, pop, args);
                return true;
            }
            Admission::Script(command, _) => {
                self.script(connection, command);
                return true;
            }
            // The simulated clients send neither QUIT nor admin commands.
            Admission::Close(_) | Admission::Admin(..) => {
                let detail = format!("connection {connection} was sent a request it never sends");
                self.violate("client request", detail);
                return false;
            }
        }
        if let Some(c) = self.user.clients.connections.get_mut(connection) {
            if c.pipeline.is_full() {
                self.drain(connection);
            }
        }
        true
    }

    /// Ends the admission of requests: proposes the writes not proposed yet as one batch, and
    /// releases replies from now on.
    pub(crate) fn drain(&mut self, connection: u64) {
        let Some(node) = self
            .user
            .clients
            .connections
            .get_mut(connection)
            .map(|c| c.node)
        else {
            return;
        };
        // Stamped with the proposing node's own wall clock, as the server stamps with its
        // system clock.
        let now_ms = self.wall_ms(node);
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        c.draining = true;
        let batch = c.pipeline.take_batch(now_ms);
        if batch.is_empty() {
            return;
        }
        c.pipeline.proposed(std::iter::repeat_n((), batch.len()));
        c.node_has_work = true;
        let id = c.node;
        let node = &mut self.nodes[(id - 1) as usize];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return; // a down node's connections are closed
        };
        let entries = batch
            .into_iter()
            .map(|(slot, entry)| (entry, ProposalToken { connection, slot }))
            .collect();
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        engine.propose_batch(raft, entries, &mut shell);
        let effects = shell.effects;
        // A refusal comes back among the effects and settles its write.
        self.carry_out(id, effects);
    }

    /// Starts a read admitted in slot `slot`: a ReadIndex round, then its turn in the apply
    /// pipeline ([`World::read_served`]).
    fn start_read(&mut self, connection: u64, slot: u64, command: ReadCommand) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        c.reads.push((slot, command));
        self.read_index(connection, slot);
    }

    /// Starts the ReadIndex round of `connection`'s read in slot `slot` on its node.
    pub(crate) fn read_index(&mut self, connection: u64, slot: u64) {
        let floor = self.checker.committed_max();
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        c.node_has_work = true;
        let id = c.node;
        let node = &mut self.nodes[(id - 1) as usize];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        let token = ReadToken {
            connection,
            slot,
            floor,
        };
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        engine.read(raft, token, &mut shell);
        let effects = shell.effects;
        self.carry_out(id, effects);
    }

    /// A read's turn came in node `id`'s apply pipeline: it sees the state applied there.
    pub(crate) fn read_served(&mut self, id: NodeId, token: ReadToken) {
        if token.slot == crate::scripts::SCRIPT_FETCH_SLOT {
            return self.script_keys_read(id, token.connection);
        }
        let World {
            user: kv, nodes, ..
        } = self;
        let Some(c) = kv.clients.connections.get_mut(token.connection) else {
            return;
        };
        let Some(command) = take_read(&mut c.reads, token.slot) else {
            return;
        };
        let app = nodes[(id - 1) as usize]
            .app
            .as_ref()
            .expect("a pipeline runs on a live node");
        let reply = app.applier.state().machine().state().read(&command);
        c.pipeline.settle(token.slot, Ok(reply));
        self.serve(token.connection);
    }

    /// The node will not serve the read here.
    pub(crate) fn read_refused(&mut self, token: ReadToken, error: ClientError) {
        if token.slot == crate::scripts::SCRIPT_FETCH_SLOT {
            return self.script_keys_refused(token.connection, &error);
        }
        let Some(c) = self.user.clients.connections.get_mut(token.connection) else {
            return;
        };
        take_read(&mut c.reads, token.slot);
        c.pipeline.settle(token.slot, Err(error));
        self.serve(token.connection);
    }

    /// A write's outcome: its entry applied with this result, or the node refused it (or lost
    /// track of it: "outcome unknown").
    pub(crate) fn write_settled(
        &mut self,
        token: ProposalToken,
        outcome: Result<Bytes, ClientError>,
    ) {
        match token.connection {
            crate::time::TICKS_CONNECTION => return self.tick_settled(token.slot, outcome),
            crate::time::EXPIRING_WRITES_CONNECTION => return,
            _ => {}
        }
        let Some(c) = self.user.clients.connections.get_mut(token.connection) else {
            return;
        };
        c.pipeline.settle_write(token.slot, outcome);
        self.serve(token.connection);
    }

    /// The refused request in slot `slot`, every request before it answered: forwarded to the
    /// leader, or answered with its refusal, as the server decides ([`redirect`]).
    fn resolve(&mut self, connection: u64, slot: u64, error: ClientError, relay: Relay) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let node = c.node;
        let forwarding = is_forwarding(&c.protocol);
        let reply = match redirect(&error, node, forwarding) {
            Redirect::Forward(leader) if self.params.forward_writes => {
                // As the server does (keel-server's `connection.rs`): the refused writes right
                // behind a refused write go to the leader with it, up to `FORWARD_GROUP_MAX`.
                // Here each is a forward of its own, all under way at once: any order the
                // server's one exchange and its retries can give, and more.
                let groups = !self.params.single_forwards && matches!(relay, Relay::WithId(..));
                let mut group = vec![(slot, relay)];
                let mut other = None;
                while groups && group.len() < FORWARD_GROUP_MAX {
                    let last = group.last().expect("one at least").0;
                    match c.pipeline.behind(last) {
                        Behind::Refused {
                            slot,
                            error,
                            id,
                            request,
                        } => {
                            let relay = Relay::WithId(id, request);
                            if redirect(&error, node, forwarding) == Redirect::Forward(leader) {
                                group.push((slot, relay));
                            } else {
                                other = Some((slot, error, relay));
                                break;
                            }
                        }
                        // A write's outcome comes as an event here: one that has none yet is
                        // resolved when it reaches the front.
                        Behind::Await(..) | Behind::Stop => break,
                    }
                }
                self.user.forwards_grouped += group.len() as u64 - 1;
                for (slot, relay) in group {
                    self.start_forward(connection, slot, node, leader, relay);
                }
                if let Some((slot, error, relay)) = other {
                    self.resolve(connection, slot, error, relay);
                }
                return;
            }
            // The simulated nodes know no client addresses: a seed without forwarding runs nodes
            // that cannot reach the leader's client port, and the client goes there itself.
            Redirect::Forward(leader) | Redirect::LeaderElsewhere(leader) => {
                leader_address_unknown(leader)
            }
            Redirect::Answer => client_error_reply(&error),
        };
        self.trace_line(|| format!("conn {connection} n{node} refused {slot}: {error}"));
        self.connection_answered(connection, slot, reply);
    }

    /// The reply to the refused request in slot `slot` of `connection`, resolved (by a forward).
    pub(crate) fn connection_answered(&mut self, connection: u64, slot: u64, reply: Reply) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        c.pipeline.answer(slot, reply);
        self.serve(connection);
    }

    /// A reply of `connection` leaves, to its owner (a blocked connection's attempt's, to its
    /// blocking pop).
    pub(crate) fn deliver(&mut self, connection: u64, owner: Owner, reply: Reply) {
        let (attempt, committing) = match self.user.clients.connections.get_mut(connection) {
            Some(c) => (
                c.blocked.is_some(),
                c.script.as_ref().is_some_and(|s| s.committing.is_some()),
            ),
            None => (false, false),
        };
        if attempt {
            return self.attempt_answered(connection, reply);
        }
        if committing {
            return self.script_committed(connection, reply);
        }
        match owner {
            Owner::Client(c) => self.client_reply(c, connection, reply),
            Owner::Queue(q) => self.queue_reply(q, connection, reply),
            Owner::Forward(_) => self.forward_leg_reply(connection, reply),
        }
    }
}

/// Removes the read of slot `slot` from `reads`.
fn take_read(reads: &mut Vec<(u64, ReadCommand)>, slot: u64) -> Option<ReadCommand> {
    let at = reads.iter().position(|(s, _)| *s == slot)?;
    Some(reads.swap_remove(at).1)
}
