//! The leader's tick entries in the simulated world: keel-kv's `TimeKeeper` (the decision the
//! server's expiry task runs) on each node's own wall clock (`clock.rs`), asked at every node
//! tick while the node leads and serves. Once the world heals it proposes only ticks that remove
//! expired keys (see `keep_time`).
//!
//! So that keys really expire (the clients' keys never do: the checker's registers have no
//! time), the leader also writes short-lived keys of its own now and then, outside the clients'
//! key space (`ttl:0` to `ttl:15`, TTLs of 1 to 500 ms): ticks then name keys to remove, writes
//! find expired keys to replace, and the state-digest invariant checks at every index that
//! replicas agree on deadlines, removals and the log's time.

use bytes::Bytes;
use keel_core::{NodeId, Role};
use keel_engine::ClientError;
use keel_kv::command::{Expiry, SetCondition, TtlCommand};
use keel_kv::expiry::TICK_KEYS_MAX;
use keel_kv::{ApplyReply, LogCommand, WriteCommand, WriteReply};

use crate::host::{ProposalToken, SimShell};
use crate::world::World;

/// The connection number of tick proposals (no client has it); the slot is the node's id.
pub(crate) const TICKS_CONNECTION: u64 = u64::MAX;
/// The connection number of the short-lived writes (their outcomes are not looked at).
pub(crate) const EXPIRING_WRITES_CONNECTION: u64 = u64::MAX - 1;
/// The request-id client of the short-lived writes (no simulated client draws it).
const EXPIRING_WRITES_CLIENT: u64 = u64::MAX;
/// One short-lived write every this many events on a leader's tick (no draw from the run's
/// generator, so nothing else a seed does moves).
const EXPIRING_WRITE_EVERY_STEPS: u64 = 7;

impl World {
    /// Proposes the tick the node's time keeper decides on, if it leads.
    pub(crate) fn keep_time(&mut self, id: NodeId) {
        let now_ms = self.wall_ms(id);
        let node = &mut self.nodes[(id - 1) as usize];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        if raft.role() != Role::Leader || !app.engine.serving() {
            return;
        }
        let state = app.applier.state().kv();
        let (log_time_ms, has_deadlines) = (state.log_time_ms(), state.wants_ticks());
        let due = state.keys_due(now_ms, TICK_KEYS_MAX);
        // After healing, only ticks that remove keys: the liveness check waits for a cluster
        // at rest, and idle ticks never let it rest (the server ticks for as long as it runs).
        if self.healing && due.is_empty() {
            return;
        }
        let mut proposals = Vec::new();
        if let Some(tick) = app
            .time_keeper
            .next_tick(now_ms, log_time_ms, has_deadlines, due)
        {
            let token = ProposalToken {
                connection: TICKS_CONNECTION,
                slot: id,
            };
            proposals.push((tick.encode(), token));
        }
        if !self.healing && self.steps % EXPIRING_WRITE_EVERY_STEPS == 0 {
            self.expiring_writes += 1;
            let n = self.expiring_writes;
            let write = WriteCommand::SetWith {
                key: Bytes::from(format!("ttl:{}", n % 16)),
                value: Bytes::from(n.to_string()),
                condition: SetCondition::Always,
                expiry: Expiry::AfterMs(1 + (n * 37 % 500) as i64),
                get: false,
                command: TtlCommand::Set,
            };
            let entry = LogCommand::new(EXPIRING_WRITES_CLIENT, n, now_ms, write).encode();
            let token = ProposalToken {
                connection: EXPIRING_WRITES_CONNECTION,
                slot: n,
            };
            proposals.push((entry, token));
        }
        if proposals.is_empty() {
            return;
        }
        let (mut shell, engine) = SimShell::new(app, &node.snapshot_data);
        // A refusal comes back among the effects and settles the proposal (`tick_settled`).
        for (entry, token) in proposals {
            let _ = engine.propose(raft, entry, token, &mut shell);
        }
        let effects = shell.effects;
        self.carry_out(id, effects);
        self.drive(id);
    }

    /// A tick's outcome, whatever it is: the node's time keeper may propose the next.
    pub(crate) fn tick_settled(&mut self, id: NodeId, outcome: Result<Bytes, ClientError>) {
        if let Some(ApplyReply::Write(WriteReply::Integer(removed))) =
            outcome.ok().as_ref().and_then(ApplyReply::decode)
        {
            self.keys_expired_by_ticks += removed as u64;
        }
        if let Some(app) = self.nodes[(id - 1) as usize].app.as_mut() {
            app.time_keeper.tick_done();
        }
    }
}
