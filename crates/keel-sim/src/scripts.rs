//! Scripts in the simulated world, as the server runs them (keel-server's
//! `connection/script_runner.rs`) but without tokio or a thread: the script's keys are copied
//! from the node's state by a read through the engine's ReadIndex path, the script runs on that
//! copy with keel-redis's own sandbox and view ([`lua::run`], [`ScriptView`]), and its writes are
//! proposed through the connection's pipeline as the transaction the server proposes (`EXEC
//! WATCHED`: applied only if no key the script touched changed since it was copied). A
//! transaction aborted by a change runs the script again from a fresh copy, at most
//! [`SCRIPT_ATTEMPTS_MAX`] times in all.
//!
//! Two differences from the server, both on the client's side of a refusal: the server copies
//! each key when the script first touches it (one read per new key) where the simulator copies
//! every declared key in one read before the script starts (the workload's scripts touch only
//! their `KEYS`; a key they did not declare answers an error), and a node that cannot read
//! (not the leader) answers the script with its refusal instead of forwarding the script. The
//! transaction that carries the writes is forwarded like any other write.

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::ClientError;
use keel_redis::command::{client_error_reply, ScriptCommand, ScriptSource};
use keel_redis::script::lua::{self, Limits as LuaLimits};
use keel_redis::script::sha1::sha1_hex;
use keel_redis::script::view::{Effects, Fetch, ScriptView, ViewFailure, ViewLimits};
use keel_redis::script::{SCRIPT_ATTEMPTS_MAX, SCRIPT_MEMORY_BYTES_MAX};
use keel_redis::state_machine::{KvStateMachine, EXEC_REPLY_BYTES_MAX};
use keel_redis::{ApplyReply, RequestId};
use keel_resp::{Limits, Reply};
use keel_session::connection::pipeline::{Admission, Request};
use keel_session::connection::Transaction;
use keel_session::Dispatch;

use crate::kv_user::KvState;
use crate::world::World;

/// The read slot a script's copy of its keys goes under: no request of the pipeline has it.
pub(crate) const SCRIPT_FETCH_SLOT: u64 = u64::MAX;

/// A script's transactions are proposed under the dedup session `SCRIPT_SESSION_BASE +` its
/// connection's number (the register clients' are 1 to 6, the queue clients' from 10,000).
const SCRIPT_SESSION_BASE: u64 = 1 << 40;

/// A connection's script in progress.
#[derive(Debug)]
pub(crate) struct RunningScript {
    body: Bytes,
    sha: String,
    keys: Vec<Bytes>,
    args: Vec<Bytes>,
    read_only: bool,
    /// Runs so far.
    runs: u32,
    /// The reply of the run whose writes are proposed, while their transaction is in flight.
    pub committing: Option<Reply>,
}

/// The keys as one read copied them: what the view's fetches are served from.
struct CopiedKeys {
    copy: KvStateMachine,
    keys: Vec<Bytes>,
    index: u64,
    time_ms: u64,
    wall_ms: u64,
}

impl Fetch for CopiedKeys {
    fn fetch(
        &mut self,
        keys: Vec<Bytes>,
        scratch: &mut KvStateMachine,
    ) -> Result<(u64, u64), ClientError> {
        if keys.iter().any(|key| !self.keys.contains(key)) {
            // The workload's scripts touch only the keys they declare.
            return Err(ClientError::Refused(
                "ERR the simulator copies only a script's declared keys".into(),
            ));
        }
        for key in &keys {
            // The copy holds its keys in database 0, as a scratch does.
            self.copy.copy_key_into(0, key, scratch);
        }
        Ok((self.index, self.time_ms))
    }

    fn wall_clock_us(&self) -> u64 {
        self.wall_ms.saturating_mul(1000)
    }
}

/// A script's Lua bounds, as the server's.
const LUA_LIMITS: LuaLimits = LuaLimits {
    memory_bytes_max: SCRIPT_MEMORY_BYTES_MAX,
    reply_bytes_max: EXEC_REPLY_BYTES_MAX,
};

impl World<KvState> {
    /// `connection` was sent a script command (everything before it answered): the simulated
    /// clients send only `EVAL` and `EVAL_RO` of a body.
    pub(crate) fn script(&mut self, connection: u64, command: ScriptCommand) {
        let ScriptCommand::Eval {
            source: ScriptSource::Body(body),
            keys,
            args,
            read_only,
        } = command
        else {
            let detail =
                format!("connection {connection} was sent a script command it never sends");
            return self.violate("client request", detail);
        };
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let sha = sha1_hex(&body);
        c.script = Some(RunningScript {
            body,
            sha,
            keys,
            args,
            read_only,
            runs: 0,
            committing: None,
        });
        self.copy_script_keys(connection);
    }

    /// Starts the read that copies the script's keys.
    fn copy_script_keys(&mut self, connection: u64) {
        self.read_index(connection, SCRIPT_FETCH_SLOT);
        self.serve(connection);
    }

    /// The copy's read was served at node `id`: the script runs on it.
    pub(crate) fn script_keys_read(&mut self, id: NodeId, connection: u64) {
        let wall_ms = self.wall_ms(id);
        let mutation = self.user.clients.connections.mutation;
        let World {
            user: kv, nodes, ..
        } = self;
        let Some(c) = kv.clients.connections.get_mut(connection) else {
            return;
        };
        let db = c.pipeline.db();
        let Some(script) = c.script.as_mut() else {
            return;
        };
        let state = nodes[(id - 1) as usize]
            .app
            .as_ref()
            .expect("a pipeline runs on a live node")
            .applier
            .state()
            .machine()
            .state();
        let mut copy = KvStateMachine::new();
        for key in &script.keys {
            state.copy_key_into(db, key, &mut copy);
        }
        let mut fetch = CopiedKeys {
            copy,
            keys: script.keys.clone(),
            index: state.applied_index(),
            time_ms: state.log_time_ms(),
            wall_ms,
        };
        let limits = Limits::default();
        let view_limits = ViewLimits {
            commands_max: limits.multi_commands_max,
            bytes_max: limits.multi_bytes_max,
        };
        script.runs += 1;
        let mut view = ScriptView::new(script.read_only, view_limits, &mut fetch);
        view.set_mutation(mutation);
        let never_killed = std::sync::atomic::AtomicBool::new(false);
        let (body, sha, keys, args) = (&script.body, &script.sha, &script.keys, &script.args);
        let reply = lua::run(body, sha, keys, args, &never_killed, &LUA_LIMITS, &mut view);
        let outcome = view.finish();
        self.trace_line(|| format!("conn {connection} n{id} script ran: {reply:?} {outcome:?}"));
        self.script_ran(connection, reply, outcome);
    }

    /// The copy's read was refused: so is the script.
    pub(crate) fn script_keys_refused(&mut self, connection: u64, error: &ClientError) {
        self.script_done(connection, client_error_reply(error));
    }

    /// One run of `connection`'s script ended: its reply, or its writes proposed.
    fn script_ran(&mut self, connection: u64, reply: Reply, outcome: Result<Effects, ViewFailure>) {
        let effects = match outcome {
            Err(ViewFailure::Fetch(error)) => return self.script_keys_refused(connection, &error),
            Err(ViewFailure::TooLarge(error)) => return self.script_done(connection, error),
            Ok(effects) if effects.writes.is_empty() => {
                // Every read came from one copy, at one point: nothing to check again.
                return self.script_done(connection, reply);
            }
            Ok(effects) => effects,
        };
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let Some(script) = c.script.as_mut() else {
            return;
        };
        script.committing = Some(reply);
        let request = Request {
            dispatch: Dispatch::Exec(Transaction {
                commands: effects.writes,
                requests: effects.requests,
                local_replies: Vec::new(),
                watched: effects.watched,
                // The workload's scripts publish nothing (the simulator has no subscribers).
                publishes: Default::default(),
            }),
            args: Vec::new(),
            // As the server's connection numbers its own writes under a session of its own: a
            // register client's connection's session is the client's id, whose numbers the
            // client gives its own writes.
            given_id: Some(RequestId {
                client_id: SCRIPT_SESSION_BASE + connection,
                seq: c.script_seq + 1,
            }),
        };
        c.script_seq += 1;
        if !matches!(c.pipeline.admit(request), Admission::Queued) {
            return self.violate("script", "its transaction was not queued".into());
        }
        self.drain(connection);
        self.serve(connection);
    }

    /// The answer of the transaction that carried `connection`'s script's writes: applied (an
    /// array), aborted by a change (null: the script runs again), or an error (refused, or its
    /// outcome unknown: the script's answer, as the server's).
    pub(crate) fn script_committed(&mut self, connection: u64, answer: Reply) {
        self.trace_line(|| format!("conn {connection} script's transaction: {answer:?}"));
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        let Some(script) = c.script.as_mut() else {
            return;
        };
        let reply = script.committing.take().expect("a transaction's answer");
        match answer {
            // Applied (a retry of its transaction that found it applied says so instead of
            // its replies): the run's reply is the script's.
            Reply::Array(_) => {
                self.user.scripts_applied += 1;
                self.script_done(connection, reply);
            }
            other if other == ApplyReply::AppliedBefore.into_reply() => {
                self.user.scripts_applied += 1;
                self.script_done(connection, reply);
            }
            Reply::NullArray if script.runs < SCRIPT_ATTEMPTS_MAX => {
                self.user.scripts_rerun += 1;
                self.copy_script_keys(connection);
            }
            Reply::NullArray => self.script_done(
                connection,
                Reply::error("TRYAGAIN the keys the script touched changed while it ran"),
            ),
            other => self.script_done(connection, other),
        }
    }

    /// `connection`'s script is answered.
    fn script_done(&mut self, connection: u64, reply: Reply) {
        let Some(c) = self.user.clients.connections.get_mut(connection) else {
            return;
        };
        c.script = None;
        let owner = c.owner;
        self.deliver(connection, owner, reply);
        self.serve(connection);
    }
}
