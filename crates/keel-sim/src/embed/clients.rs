//! The embedder's clients in the simulated world, and one seed's run of them.
//!
//! A client runs one operation at a time. A write is proposed at the node the client believes
//! leads; a refusal that says the entry was not proposed (not the leader, busy, not proposed
//! before its deadline) sends it to the leader named in the refusal, or the next node, a little
//! later. A read is a linearizable read at that node. The client gives up after the run's client
//! timeout, and when its node goes down while it waits: the operation's outcome is then unknown
//! to the checker (it may or may not have taken effect).

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;

use super::{Op, OpRng, Workload};
use crate::host::{ProposalToken, ReadToken, SimShell};
use crate::invariants::Violation;
use crate::linearizability::{History, Model};
use crate::params::Params;
use crate::user::User;
use crate::world::{Event, RunConfig, World};

/// A client's first retry comes after this long; it doubles with every refusal in a row, at most
/// [`RETRY_DOUBLINGS_MAX`] times.
const RETRY_DELAY: u64 = 3;
const RETRY_DOUBLINGS_MAX: u32 = 3;

type Input<W> = <<W as Workload>::Model as Model>::Input;

/// How a client's operation ended, for the checker.
enum Ended<O> {
    /// The client was told `O`.
    Returned(O),
    /// The client never learned whether it took effect.
    Unknown,
    /// It cannot have taken effect: a read, or a write no node ever appended to its log.
    NotApplied,
}

/// What one client is doing.
struct Client<I> {
    leader_guess: NodeId,
    /// Told apart from wakes scheduled for an earlier operation or attempt.
    generation: u64,
    /// Refusals in a row (the retry delay doubles with each).
    refusals: u32,
    /// Operations this client started: its tokens' slots.
    ops_started: u64,
    pending: Option<Pending<I>>,
}

/// The operation a client waits on.
struct Pending<I> {
    op: Op<I>,
    /// Its slot: outcomes for another slot are late answers to an abandoned operation.
    slot: u64,
    /// The node it is outstanding at (`None` between attempts).
    node: Option<NodeId>,
    /// Whether a node appended the write to its log since it was last told "not applied".
    appended: bool,
}

/// The embedder's clients, their history and the workload that makes their operations.
pub(crate) struct Embedded<W: Workload> {
    workload: W,
    clients: Vec<Client<Input<W>>>,
    history: History<W::Model>,
    /// Client wakes the last event asked for: (client, delay).
    wakes: Vec<(usize, u64)>,
    node_count: usize,
    ops_completed: usize,
    ops_unknown: usize,
    ops_not_applied: usize,
}

impl<W: Workload> Embedded<W> {
    fn with(workload: W, params: &Params) -> Self {
        let clients = (0..params.clients)
            .map(|c| Client {
                leader_guess: (c % params.node_count) as NodeId + 1,
                generation: 0,
                refusals: 0,
                ops_started: 0,
                pending: None,
            })
            .collect();
        Embedded {
            workload,
            clients,
            history: History::new(),
            wakes: Vec::new(),
            node_count: params.node_count,
            ops_completed: 0,
            ops_unknown: 0,
            ops_not_applied: 0,
        }
    }

    /// How client `c`'s pending operation ends if the client stops waiting for it now.
    fn abandoned(&self, c: usize) -> Ended<<W::Model as Model>::Output> {
        match &self.clients[c].pending {
            Some(Pending {
                op: Op::Write { .. },
                appended: true,
                ..
            }) => Ended::Unknown,
            _ => Ended::NotApplied,
        }
    }

    fn next_node(&self, node: NodeId) -> NodeId {
        node % self.node_count as NodeId + 1
    }

    /// Client `c`'s operation ended.
    fn finish(&mut self, c: usize, now: u64, ended: Ended<<W::Model as Model>::Output>) {
        let client = &mut self.clients[c];
        client.pending = None;
        client.refusals = 0;
        client.generation += 1;
        let recorded = match ended {
            Ended::Returned(output) => {
                self.ops_completed += 1;
                self.history.complete(c as u64, output, now)
            }
            Ended::Unknown => {
                self.ops_unknown += 1;
                self.history.time_out(c as u64)
            }
            Ended::NotApplied => {
                self.ops_not_applied += 1;
                self.history.discard(c as u64)
            }
        };
        recorded.expect("a client's operations are recorded in order");
        self.wakes.push((c, 1));
    }

    /// The client tries again a little later, at `node`.
    fn retry(&mut self, c: usize, node: NodeId) {
        let client = &mut self.clients[c];
        client.leader_guess = node;
        client.generation += 1;
        if let Some(p) = client.pending.as_mut() {
            p.node = None;
            // Every retry follows an answer that says the attempt was not applied.
            p.appended = false;
        }
        let delay = RETRY_DELAY << client.refusals.min(RETRY_DOUBLINGS_MAX);
        client.refusals += 1;
        self.wakes.push((c, delay));
    }

    /// The pending operation of client `c` if `slot` is its slot.
    fn pending(&self, c: u64, slot: u64) -> Option<&Pending<Input<W>>> {
        let p = self.clients.get(c as usize)?.pending.as_ref()?;
        (p.slot == slot).then_some(p)
    }
}

impl<W: Workload> World<Embedded<W>> {
    /// Client `c` starts its next operation, or tries its pending one again.
    fn embedded_wake(&mut self, c: usize, generation: u64) {
        if self.user.clients[c].generation != generation {
            return;
        }
        if self.user.clients[c].pending.is_none() {
            if self.healing {
                // Quiet down so the cluster can be seen to converge.
                return;
            }
            let op = self.user.workload.next_op(c, &mut OpRng(&mut self.rng));
            let (key, input) = match &op {
                Op::Write { key, input, .. } | Op::Read { key, input } => (key, input),
            };
            self.user
                .history
                .invoke(c as u64, key.clone(), input.clone(), self.now)
                .expect("a client runs one operation at a time");
            let client = &mut self.user.clients[c];
            client.ops_started += 1;
            let slot = client.ops_started;
            client.pending = Some(Pending {
                op,
                slot,
                node: None,
                appended: false,
            });
            let deadline = self.params.client_timeout;
            self.schedule(
                deadline,
                Event::ClientDeadline {
                    client: c,
                    history_index: slot as usize,
                },
            );
        }
        self.attempt(c);
    }

    /// Sends client `c`'s pending operation to the node it believes leads.
    fn attempt(&mut self, c: usize) {
        let node_id = self.user.clients[c].leader_guess;
        let floor = self.checker.committed_max();
        let idx = (node_id - 1) as usize;
        let serving = self.serving(node_id);
        let node = &mut self.nodes[idx];
        let (Some(raft), Some(app), true) = (node.raft.as_mut(), node.app.as_mut(), serving) else {
            let next = self.user.next_node(node_id);
            return self.user.retry(c, next);
        };
        let Some(pending) = self.user.clients[c].pending.as_mut() else {
            return;
        };
        pending.node = Some(node_id);
        let (connection, slot) = (c as u64, pending.slot);
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        match &pending.op {
            Op::Write { command, .. } => {
                let token = ProposalToken { connection, slot };
                let command = command.clone();
                pending.appended = engine.propose(raft, command, token, &mut shell).is_ok();
            }
            Op::Read { .. } => {
                let token = ReadToken {
                    connection,
                    slot,
                    floor,
                };
                engine.read(raft, token, &mut shell);
            }
        }
        let effects = shell.effects;
        self.carry_out(node_id, effects);
        self.drive(node_id);
    }

    /// A refusal of client `c`'s attempt at `node`.
    fn refused(&mut self, c: usize, node: NodeId, error: ClientError) {
        match error {
            // Not applied anywhere: the client tries again, where the refusal points.
            ClientError::NotLeader { leader, .. } => {
                let next = leader.unwrap_or_else(|| self.user.next_node(node));
                self.user.retry(c, next);
            }
            ClientError::Busy(_) | ClientError::NotProposed => self.user.retry(c, node),
            ClientError::Refused(reason) => {
                let output = self.user.clients[c]
                    .pending
                    .as_ref()
                    .and_then(|p| match &p.op {
                        Op::Write { key, input, .. } => {
                            Some(W::write_output(key, input, Err(&reason)))
                        }
                        Op::Read { .. } => None,
                    });
                let ended = output.map_or(Ended::NotApplied, Ended::Returned);
                self.user.finish(c, self.now, ended);
            }
            // Perhaps applied (Unknown), or an answer the simulation never gives.
            _ => {
                let ended = self.user.abandoned(c);
                self.user.finish(c, self.now, ended);
            }
        }
    }
}

impl<W: Workload> User for Embedded<W> {
    type Machine = W::Machine;
    type Event = std::convert::Infallible;
    type NodeApp = ();

    fn machine(&self, _node: Option<NodeId>, _mutation: Option<crate::Mutation>) -> W::Machine {
        self.workload.machine()
    }

    fn digest(machine: &W::Machine) -> u64 {
        W::digest(machine)
    }

    fn node_app() {}

    fn client_wake(w: &mut World<Self>, client: usize, generation: u64) {
        w.embedded_wake(client, generation);
    }

    fn client_deadline(w: &mut World<Self>, client: usize, history_index: usize) {
        let slot = history_index as u64;
        if w.user.pending(client as u64, slot).is_some() {
            let ended = w.user.abandoned(client);
            w.user.finish(client, w.now, ended);
        }
    }

    fn event(_w: &mut World<Self>, event: Self::Event) {
        match event {}
    }

    fn ticked(_w: &mut World<Self>, _id: NodeId) {}

    fn after_event(w: &mut World<Self>) {
        let wakes = std::mem::take(&mut w.user.wakes);
        for (client, delay) in wakes {
            let generation = w.user.clients[client].generation;
            w.schedule(delay, Event::ClientWake { client, generation });
        }
    }

    fn write_settled(
        w: &mut World<Self>,
        token: ProposalToken,
        result: Result<Bytes, ClientError>,
    ) {
        let Some(pending) = w.user.pending(token.connection, token.slot) else {
            return; // the client gave up on it
        };
        let (c, node) = (token.connection as usize, pending.node);
        match (result, &pending.op) {
            (Ok(answer), Op::Write { key, input, .. }) => {
                let output = W::write_output(key, input, Ok(&answer));
                w.user.finish(c, w.now, Ended::Returned(output));
            }
            (Err(error), _) => {
                let node = node.unwrap_or(w.user.clients[c].leader_guess);
                w.refused(c, node, error);
            }
            (Ok(_), Op::Read { .. }) => unreachable!("a read's token is never proposed"),
        }
    }

    fn read_refused(w: &mut World<Self>, token: ReadToken, error: ClientError) {
        let Some(pending) = w.user.pending(token.connection, token.slot) else {
            return;
        };
        let c = token.connection as usize;
        let node = pending.node.unwrap_or(w.user.clients[c].leader_guess);
        w.refused(c, node, error);
    }

    fn read_served(w: &mut World<Self>, id: NodeId, token: ReadToken) {
        let Some(Pending {
            op: Op::Read { key, input },
            ..
        }) = w.user.pending(token.connection, token.slot)
        else {
            return;
        };
        let Some(app) = w.nodes[(id - 1) as usize].app.as_ref() else {
            return;
        };
        let output = W::read(app.applier.state().machine(), key, input);
        w.user
            .finish(token.connection as usize, w.now, Ended::Returned(output));
    }

    fn node_lost(w: &mut World<Self>, id: NodeId) {
        for c in 0..w.user.clients.len() {
            let at_node = w.user.clients[c]
                .pending
                .as_ref()
                .is_some_and(|p| p.node == Some(id));
            if at_node {
                let ended = w.user.abandoned(c);
                w.user.finish(c, w.now, ended);
            }
        }
    }

    fn pending_ops(&self) -> usize {
        self.clients.iter().filter(|c| c.pending.is_some()).count()
    }

    fn check_history(&self) -> Result<(), Violation> {
        crate::invariants::linearizable(&self.history)
    }
}

/// The outcome of one seed of an embedder's workload.
#[derive(Clone, Debug)]
pub struct WorkloadReport {
    pub seed: u64,
    /// Events the run processed.
    pub steps: u64,
    /// The first broken check, if any.
    pub violation: Option<Violation>,
    /// Operations whose client learned the outcome, those it never learned, and those that
    /// cannot have taken effect (reads and writes never appended that the client gave up on).
    pub ops_completed: usize,
    pub ops_unknown: usize,
    pub ops_not_applied: usize,
    /// The trace (with `RunConfig::trace`) and its digest: the same seed gives the same digest.
    pub trace: Vec<String>,
    pub trace_digest: u64,
}

/// Runs one seed of `workload`'s clients against a simulated cluster of its state machine.
pub fn simulate<W: Workload>(workload: W, cfg: &RunConfig) -> WorkloadReport {
    let mut w: World<Embedded<W>> =
        World::with_user(cfg, |params| Embedded::with(workload, params));
    w.run_to_end(cfg.fault_steps);
    if w.violation.is_none() {
        if let Err(v) = w.user.check_history() {
            w.fail(v);
        }
    }
    WorkloadReport {
        seed: cfg.seed,
        steps: w.steps,
        violation: w.violation.clone(),
        ops_completed: w.user.ops_completed,
        ops_unknown: w.user.ops_unknown,
        ops_not_applied: w.user.ops_not_applied,
        trace_digest: w.trace_digest(),
        trace: std::mem::take(&mut w.trace),
    }
}
