//! The leader's tick entries in the simulated world: keel-redis's `TimeKeeper` (the decision the
//! server's expiry task runs) on each node's own wall clock (`clock.rs`), asked at every node
//! tick while the node leads and serves, its tick proposed through the engine like a client's
//! write. Once the world heals it proposes only ticks that remove expired keys (see `keep_time`):
//! idle ticks would never let the liveness check find the cluster at rest.
//!
//! So that keys really expire (the clients' keys never do: the checker's registers have no time),
//! the leader also writes short-lived keys of its own now and then, outside the clients' key space
//! (`ttl:0` to `ttl:15`, TTLs of 1 to 500 ms), and with each a write to a list, hash, set or sorted
//! set (`collection_write`, a fixed cycle of commands on keys `c:*`): ticks then name keys to
//! remove, writes find expired keys to replace, and the state-digest invariant checks at every
//! index that replicas agree on deadlines, removals and the log's time.

use bytes::Bytes;
use keel_core::{NodeId, Role};
use keel_engine::ClientError;
use keel_redis::command::{Expiry, SetCondition, TtlCommand};
use keel_redis::expiry::TICK_KEYS_MAX;
use keel_redis::ApplyReply;
use keel_redis::LogCommand;
use keel_redis::WriteCommand;
use keel_redis::WriteReply;

use crate::host::{ProposalToken, SimShell};
use crate::kv_user::KvState;
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

/// The request-id client of the background writes to lists, hashes, sets and sorted sets.
const COLLECTION_WRITES_CLIENT: u64 = u64::MAX - 1;

/// The `n`th background write to a collection: a fixed cycle over the kinds' commands on a few
/// keys outside the clients' (`c:list`, ...), so that every replica, snapshot and restart carries
/// collections and the state-digest invariant checks that replicas agree on them. Their outcomes
/// are not looked at; bounded by the trims and pops in the cycle.
fn collection_write(n: u64) -> WriteCommand {
    let line = match n % 14 {
        0 => format!("RPUSH c:list {n} x{}", n % 3),
        1 => format!("LPUSH c:list {n}"),
        2 => "LPOP c:list".to_string(),
        3 => "LMOVE c:list c:list2 LEFT RIGHT".to_string(),
        // Both lists grow by one per cycle otherwise: each is trimmed every other cycle.
        4 => format!("LTRIM c:list{} -8 -1", ["", "2"][(n / 14 % 2) as usize]),
        5 => format!("SADD c:set {} {}", n % 9, n % 5),
        6 => format!("SREM c:set {}", n % 7),
        7 => format!("HSET c:hash f{} {n}", n % 5),
        8 => format!("HDEL c:hash f{}", n % 4),
        9 => format!("ZADD c:zset {} m{}", n % 11, n % 7),
        10 => "ZPOPMIN c:zset".to_string(),
        11 => "SUNIONSTORE c:union c:set c:other".to_string(),
        12 => format!("PEXPIRE c:union {}", 1 + n % 400),
        _ => format!("HINCRBY c:hash f{} 1", n % 5),
    };
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::from(w.to_string()))
        .collect();
    match keel_redis::command::Command::parse(&args) {
        Ok(keel_redis::command::Command::Write(write)) => write,
        other => unreachable!("{line} is a write: {other:?}"),
    }
}

impl World<KvState> {
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
        let state = app.applier.state().machine().state();
        let (log_time_ms, has_deadlines) = (state.log_time_ms(), state.wants_ticks());
        let due = state.keys_due(now_ms, TICK_KEYS_MAX);
        // After healing, only ticks that remove keys: the liveness check waits for a cluster
        // at rest, and idle ticks never let it rest (the server ticks for as long as it runs).
        if self.healing && due.is_empty() {
            return;
        }
        let mut proposals = Vec::new();
        if let Some(tick) = app.user.next_tick(now_ms, log_time_ms, has_deadlines, due) {
            let token = ProposalToken {
                connection: TICKS_CONNECTION,
                slot: id,
            };
            proposals.push((tick.encode(), token));
        }
        if !self.healing && self.steps % EXPIRING_WRITE_EVERY_STEPS == 0 {
            self.user.expiring_writes += 1;
            let n = self.user.expiring_writes;
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
            let entry = LogCommand::new(COLLECTION_WRITES_CLIENT, n, now_ms, collection_write(n));
            proposals.push((entry.encode(), token));
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
            self.user.keys_expired_by_ticks += removed as u64;
        }
        if let Some(app) = self.nodes[(id - 1) as usize].app.as_mut() {
            app.user.tick_done();
        }
    }
}
