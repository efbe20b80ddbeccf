//! keel's own user of the simulator: keel-redis's state machine behind the server's connection
//! pipelines (`connection.rs`), clients speaking RESP (`client/`), writes followers forward
//! (`forward.rs`), the leaders' tick entries (`time.rs`), and the key-value history the
//! linearizability checker reads (`linearize.rs`).

use std::collections::BTreeMap;

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;

use crate::client::Clients;
use crate::forward::ForwardEvent;
use crate::history::History;
use crate::host::{ProposalToken, ReadToken};
use crate::invariants::Violation;
use crate::mutation::Layers;
use crate::params::Params;
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
}

impl KvState {
    pub fn new(params: &Params) -> Self {
        KvState {
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
    type Event = ForwardEvent;
    type NodeApp = SimTimeKeeper;

    fn machine(&self, mutation: Option<crate::Mutation>) -> Self::Machine {
        let mut sm = keel_redis::KvStateMachine::new();
        sm.set_mutation(mutation.redis());
        keel_redis::KvAdapter::new(sm)
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

    fn event(w: &mut World<Self>, event: ForwardEvent) {
        w.forward_event(event);
    }

    fn ticked(w: &mut World<Self>, id: NodeId) {
        w.keep_time(id);
    }

    fn after_event(w: &mut World<Self>) {
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
    }

    fn pending_ops(&self) -> usize {
        self.clients.pending_ops()
    }

    fn check_history(&self) -> Result<(), Violation> {
        crate::linearize::check_history(&self.history)
    }
}
