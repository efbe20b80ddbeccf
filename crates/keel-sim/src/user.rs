//! What the simulated world asks of its user: the state machine every node runs and the clients
//! that talk to the nodes. The world (nodes, network, disks, faults, the checks of the core and
//! the apply pipeline) is one for every user; keel's own key-value simulation is one user
//! (`kv_user.rs`).
//!
//! A user answers the engine's outcomes for the requests its clients made (a write's entry
//! applied or refused, a read indexed or refused), runs its clients' events, and says what its
//! state machine's state is (a digest every replica at one index must agree on).

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::{ClientError, StateMachine};

use crate::host::{ProposalToken, ReadToken};
use crate::invariants::Violation;
use crate::world::World;

pub(crate) trait User: Sized {
    /// The state machine every node runs.
    type Machine: StateMachine;
    /// The user's own events, queued with the world's.
    type Event;
    /// What a node holds for the user beside its engine, rebuilt at each start.
    type NodeApp;

    /// A fresh state machine for node `node` that starts (`None`: one of no node's, to check a
    /// snapshot's round trip).
    fn machine(&self, node: Option<NodeId>, mutation: Option<crate::Mutation>) -> Self::Machine;
    /// A digest of the state machine's state: replicas that applied the same index agree on it.
    fn digest(machine: &Self::Machine) -> u64;
    fn node_app() -> Self::NodeApp;

    /// A client's timer fired (`generation` tells an old timer from the current one).
    fn client_wake(w: &mut World<Self>, client: usize, generation: u64);
    /// A client stops waiting for the operation it recorded at `history_index`.
    fn client_deadline(w: &mut World<Self>, client: usize, history_index: usize);
    fn event(w: &mut World<Self>, event: Self::Event);
    /// Node `id` ticked (a leader's periodic proposals, say).
    fn ticked(w: &mut World<Self>, id: NodeId);
    /// After every event: schedules what the event asked of the clients.
    fn after_event(w: &mut World<Self>);

    /// The outcome of a write the engine took: the apply's result, or why it was refused.
    fn write_settled(w: &mut World<Self>, token: ProposalToken, result: Result<Bytes, ClientError>);
    fn read_refused(w: &mut World<Self>, token: ReadToken, error: ClientError);
    /// Node `id` applied far enough to serve the read.
    fn read_served(w: &mut World<Self>, id: NodeId, token: ReadToken);
    /// Node `id` went down: whatever waited on it is lost.
    fn node_lost(w: &mut World<Self>, id: NodeId);
    /// Operations the clients still wait on (a converged cluster has none).
    fn pending_ops(&self) -> usize;
    /// Checks the history the clients saw, once the run is over.
    fn check_history(&self) -> Result<(), Violation>;
}
