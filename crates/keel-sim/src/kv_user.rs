//! keel's own user of the simulator: keel-redis's state machine behind the server's connection
//! pipelines (`connection.rs`), clients speaking RESP (`client/`), writes followers forward
//! (`forward.rs`), the leaders' tick entries (`time.rs`), the key-value history the
//! linearizability checker reads (`linearize.rs`), and the queue workload (`queues/`) with the
//! nodes' blocked connections (`blocking.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;

use crate::blocking::NodeWaiters;
use crate::client::Clients;
use crate::forward::ForwardEvent;
use crate::history::History;
use crate::host::{ProposalToken, ReadToken};
use crate::invariants::Violation;
use crate::mutation::Layers;
use crate::params::Params;
use crate::queues::QueueClients;
use crate::user::User;
use crate::world::World;

/// keel-redis's time keeper: when a leading node proposes a tick entry (`time.rs`).
pub(crate) type SimTimeKeeper = keel_redis::expiry::TimeKeeper;

/// The key-value application's part of the world: its clients and their history, the writes
/// followers forward, and its counters. The rest of the world (nodes, network, disks, faults,
/// checks) knows nothing of keys or RESP.
pub(crate) struct KvState {
    /// Writes of short-lived keys proposed so far (`time.rs`).
    pub expiring_writes: u64,
    /// Expired keys removed by tick entries, as their replies say.
    pub keys_expired_by_ticks: u64,
    /// Watched transactions whose EXEC applied, and those aborted (`client.rs`).
    pub watched_swapped: u64,
    pub watched_aborted: u64,
    /// Refused writes forwarded with the one before them (`connection.rs`).
    pub forwards_grouped: u64,
    pub clients: Clients,
    pub history: History,
    /// Writes followers are forwarding, by number.
    pub forwards: BTreeMap<u64, crate::forward::SimForward>,
    pub next_forward: u64,
    /// Blocking pops that took an element after an attempt of theirs took nothing (woken by a
    /// fill, `blocking.rs`).
    pub served_after_waiting: u64,
    /// The queue workload, when the run has it (`RunConfig::queues`).
    pub queues: Option<QueueClients>,
    /// Each node slot's blocked connections (slot `id - 1`).
    pub waiters: Vec<NodeWaiters>,
    /// The register clients also use scripts (`RunConfig::scripts`).
    pub scripts: bool,
    /// Scripts whose writes applied, and reruns after a change (`scripts.rs`).
    pub scripts_applied: u64,
    pub scripts_rerun: u64,
}

/// keel's key-value user's own events.
pub(crate) enum KvEvent {
    /// A forwarded write's request, reply or timer (`forward.rs`).
    Forward(ForwardEvent),
    /// A queue client's timer, and its operation's deadline (`queues/`).
    QueueWake {
        client: usize,
        generation: u64,
    },
    QueueDeadline {
        client: usize,
        generation: u64,
    },
    /// The timeout of a blocking pop (`blocking.rs`).
    BlockTimeout {
        connection: u64,
        waiter: keel_session::blocked::WaiterId,
    },
}

impl KvState {
    /// The user of a run of `params`; `queues`: with the queue workload, its clients drawn from
    /// `seed`.
    pub fn new(params: &Params, queues: bool, scripts: bool, seed: u64) -> Self {
        KvState {
            scripts,
            scripts_applied: 0,
            scripts_rerun: 0,
            served_after_waiting: 0,
            queues: queues.then(|| QueueClients::new(seed)),
            waiters: (0..params.node_count)
                .map(|_| NodeWaiters::default())
                .collect(),
            expiring_writes: 0,
            keys_expired_by_ticks: 0,
            watched_swapped: 0,
            watched_aborted: 0,
            forwards_grouped: 0,
            clients: Clients::new(params.clients, params.node_count),
            history: History::default(),
            forwards: BTreeMap::new(),
            next_forward: 1,
        }
    }
}

impl User for KvState {
    type Machine = keel_redis::KvAdapter;
    type Event = KvEvent;
    type NodeApp = SimTimeKeeper;

    fn machine(&self, node: Option<NodeId>, mutation: Option<crate::Mutation>) -> Self::Machine {
        let mut sm = keel_redis::KvStateMachine::new();
        sm.set_mutation(mutation.redis());
        let adapter = keel_redis::KvAdapter::new(sm);
        match node {
            // The node's blocked connections hear what its entries fill.
            Some(id) if self.queues.is_some() => {
                let listener = Arc::clone(&self.waiters[(id - 1) as usize].listener);
                adapter.with_filled_keys_listener(listener)
            }
            _ => adapter,
        }
    }

    fn digest(machine: &Self::Machine) -> u64 {
        machine.state().state_digest()
    }

    fn node_app() -> SimTimeKeeper {
        keel_redis::expiry::TimeKeeper::new(keel_redis::expiry::TIME_TICK_MS_DEFAULT)
    }

    fn client_wake(w: &mut World<Self>, client: usize, generation: u64) {
        w.client_wake(client, generation);
    }

    fn client_deadline(w: &mut World<Self>, client: usize, history_index: usize) {
        w.client_deadline(client, history_index);
    }

    fn event(w: &mut World<Self>, event: KvEvent) {
        match event {
            KvEvent::Forward(event) => w.forward_event(event),
            KvEvent::QueueWake { client, generation } => w.queue_wake(client, generation),
            KvEvent::QueueDeadline { client, generation } => w.queue_deadline(client, generation),
            KvEvent::BlockTimeout { connection, waiter } => w.block_timeout(connection, waiter),
        }
    }

    fn ticked(w: &mut World<Self>, id: NodeId) {
        w.keep_time(id);
    }

    fn after_event(w: &mut World<Self>) {
        if w.user.queues.is_some() {
            w.wake_filled();
        }
        let wakes = std::mem::take(&mut w.user.clients.wake);
        for (client, delay) in wakes {
            let generation = w.user.clients.generation(client);
            w.schedule(
                delay,
                crate::world::Event::ClientWake { client, generation },
            );
        }
    }

    fn write_settled(
        w: &mut World<Self>,
        token: ProposalToken,
        result: Result<Bytes, ClientError>,
    ) {
        w.write_settled(token, result);
    }

    fn read_refused(w: &mut World<Self>, token: ReadToken, error: ClientError) {
        w.read_refused(token, error);
    }

    fn read_served(w: &mut World<Self>, id: NodeId, token: ReadToken) {
        w.read_served(id, token);
    }

    fn node_lost(w: &mut World<Self>, id: NodeId) {
        w.user.clients.node_lost(id);
        w.user.waiters[(id - 1) as usize].clear();
        w.queue_node_lost(id);
    }

    fn pending_ops(&self) -> usize {
        let queued = self.queues.as_ref().map_or(0, QueueClients::pending);
        self.clients.pending_ops() + queued
    }

    fn check_history(&self) -> Result<(), Violation> {
        crate::linearize::check_history(&self.history)
    }
}
