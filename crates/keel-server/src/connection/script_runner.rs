//! The tokio side of scripts (`keel_redis::script` has the protocol): runs a script on a blocking
//! thread, copies its keys with linearizable reads, proposes its effects as a watched
//! transaction through the connection's pipeline, and runs it again when a key it touched
//! changed meanwhile.
//!
//! The effects go through the connection's pipeline as `EXEC WATCHED`, forwarded like any EXEC.
//! A rerun after a conflict takes a node-wide turn, so reruns do not conflict with each other;
//! at most [`SCRIPT_ATTEMPTS_MAX`] (8) runs in all. A script without writes whose keys came from
//! more than one read checks them once more. A follower forwards a script that reads keys to
//! the leader (`EVALSHA` as `EVAL` of the body from its own cache: [`forwardable`]).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel::{ClientError, Handle};

use super::{Forwarding, Session};
use keel_redis::command::{ScriptCommand, ScriptSource};
use keel_redis::script::lua::{self, Limits as LuaLimits};
use keel_redis::script::sha1::sha1_hex;
use keel_redis::script::view::{Effects, Fetch, ScriptView, ViewFailure, ViewLimits};
use keel_redis::script::{ScriptRegistry, SCRIPT_ATTEMPTS_MAX, SCRIPT_MEMORY_BYTES_MAX};
use keel_redis::state_machine::{KvStateMachine, EXEC_REPLY_BYTES_MAX};
use keel_redis::{ApplyReply, KvAdapter};
use keel_resp::Reply;
use keel_session::connection::pipeline::Request;
use keel_session::connection::{Dispatch, Publishes, Transaction};

/// [`Fetch`] through the runtime: a linearizable read per fetch, from the script's thread.
pub(super) struct RuntimeFetch {
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) handle: Handle<KvAdapter>,
    pub(super) monitors: Arc<keel_session::connection::ClientRegistry>,
    /// The caller's database.
    pub(super) db: u32,
}

impl Fetch for RuntimeFetch {
    fn fetch(
        &mut self,
        keys: Vec<Bytes>,
        scratch: &mut KvStateMachine,
    ) -> Result<(u64, u64), ClientError> {
        let mut taken = std::mem::take(scratch);
        let db = self.db;
        let copied = self
            .runtime
            .block_on(self.handle.read(move |sm: &KvAdapter| {
                let state = sm.state();
                for key in &keys {
                    state.copy_key_into(db, key, &mut taken);
                }
                (taken, state.applied_index(), state.log_time_ms())
            }));
        let (copied, index, time_ms) = copied?;
        *scratch = copied;
        Ok((index, time_ms))
    }

    fn wall_clock_us(&self) -> u64 {
        super::super::wall_clock_ms().saturating_mul(1000)
    }

    fn db(&self) -> u32 {
        self.db
    }

    fn show(&self, args: &[Bytes]) {
        if self.monitors.has_monitors() && keel_session::connection::monitor::shows(args) {
            self.monitors
                .feed_monitors("lua", &[keel_session::connection::monitor::redacted(args)]);
        }
    }
}

/// A script's Lua bounds: its heap, and its reply within what EXEC may answer.
pub(super) const LUA_LIMITS: LuaLimits = LuaLimits {
    memory_bytes_max: SCRIPT_MEMORY_BYTES_MAX,
    reply_bytes_max: EXEC_REPLY_BYTES_MAX,
};

/// One run of a script: its reply, and what it changed (or why that cannot be proposed).
type Run = (Reply, Result<Effects, ViewFailure>);

impl Session<'_> {
    /// Answers a script command (everything before it is answered).
    pub(super) async fn script(&mut self, command: ScriptCommand, request: &[Bytes]) -> Reply {
        let scripts = Arc::clone(&self.ctx.scripts);
        if let Some(reply) = cache_command(&scripts, &command) {
            return reply;
        }
        match command {
            ScriptCommand::Load(_) | ScriptCommand::Exists(_) | ScriptCommand::Flush => {
                unreachable!("answered by cache_command")
            }
            ScriptCommand::Kill => self.kill_scripts(request).await,
            ScriptCommand::Exec(exec) => self.scripted_exec(*exec, request).await,
            ScriptCommand::Eval {
                source,
                keys,
                args,
                read_only,
            } => {
                let (body, sha) = match script_body(&scripts, source) {
                    Ok(found) => found,
                    Err(reply) => return reply,
                };
                let Some(running) = scripts.start(Instant::now()) else {
                    return busy_reply();
                };
                let kill = running.shared_kill_flag();
                let script = Script {
                    body,
                    sha,
                    keys,
                    args,
                    read_only,
                };
                // Registered until the reply is known, forwarding included: this node answers
                // -BUSY meanwhile, as the one its client sent the script to.
                let reply = self.eval(&script, kill, request).await;
                drop(running);
                reply
            }
        }
    }

    /// SCRIPT KILL: the scripts running here, or else the leader's (where this node's clients'
    /// scripts that read keys run).
    async fn kill_scripts(&mut self, request: &[Bytes]) -> Reply {
        if self.ctx.scripts.kill_all() > 0 {
            return Reply::OK;
        }
        let leader = match self.ctx.handle.status().await {
            Ok(status) => status.raft.leader,
            Err(_) => None,
        };
        match leader {
            Some(leader) if leader != self.ctx.node_id && !self.is_forwarding() => {
                let error = ClientError::NotLeader {
                    leader: Some(leader),
                    leader_addr: None,
                };
                self.resolve(Err(error), Forwarding::Once(request, false))
                    .await
            }
            _ => Reply::error("NOTBUSY No scripts in execution right now."),
        }
    }

    /// Runs `script` until its effects commit, it needs none, or it fails.
    async fn eval(&mut self, script: &Script, kill: Arc<AtomicBool>, request: &[Bytes]) -> Reply {
        let ctx = self.ctx;
        for attempt in 0..SCRIPT_ATTEMPTS_MAX {
            // The first run is optimistic, beside any other script; a run after a conflict
            // waits its turn, so that reruns never conflict with each other (every script that
            // reads keys runs on the leader): only plain writes to its keys can still beat it.
            let _turn = if attempt > 0 {
                Some(ctx.script_turn.lock().await)
            } else {
                None
            };
            let (reply, outcome) = self.run_once(script, Arc::clone(&kill)).await;
            let mut effects = match outcome {
                // Only the leader reads linearizably: the script runs there.
                Err(ViewFailure::Fetch(error)) => {
                    let request = forwardable(&ctx.scripts, request);
                    return self
                        .resolve(Err(error), Forwarding::Once(&request, true))
                        .await;
                }
                Err(ViewFailure::TooLarge(error)) => return error,
                Ok(effects) => effects,
            };
            if kill.load(std::sync::atomic::Ordering::Relaxed) {
                // Killed: nothing of it is proposed.
                return reply;
            }
            let publishes = std::mem::take(&mut effects.publishes);
            if effects.writes.is_empty() {
                if effects.fetches <= 1 {
                    return self.publish(&publishes, reply);
                }
                match self.reads_still_hold(effects.watched).await {
                    Ok(true) => return self.publish(&publishes, reply),
                    Ok(false) => continue,
                    Err(error) => return keel_redis::command::client_error_reply(&error),
                }
            }
            match self.commit(effects).await {
                Ok(Reply::NullArray) => continue,
                Ok(Reply::Array(_)) => return self.publish(&publishes, reply),
                // A retry of the forwarded transaction found it applied: so are the writes the
                // run's reply comes from.
                Ok(other) if other == ApplyReply::AppliedBefore.into_reply() => {
                    return self.publish(&publishes, reply)
                }
                Ok(other) => return other,
                Err(_) => return Reply::error("TRYAGAIN outcome unknown"),
            }
        }
        Reply::error(format!(
            "TRYAGAIN the keys the script touched changed while it ran, {SCRIPT_ATTEMPTS_MAX} \
             times: nothing of it applied"
        ))
    }

    /// Publishes what a script published, now that it took effect (through the node's PUBLISH
    /// path: its subscribers and the other nodes), and answers the script's `reply`.
    pub(super) fn publish(&self, publishes: &[(bool, Bytes, Bytes)], reply: Reply) -> Reply {
        let max = self.ctx.pubsub.publish_bytes_max();
        for (shard, channel, message) in publishes {
            // Too large for the other nodes: published nowhere, as PUBLISH refuses it.
            if max.is_some_and(|max| channel.len() + message.len() > max) {
                continue;
            }
            self.ctx.pubsub.publish(*shard, channel, message);
        }
        reply
    }

    /// What a script's reads go through.
    pub(super) fn runtime_fetch(&self) -> RuntimeFetch {
        RuntimeFetch {
            runtime: tokio::runtime::Handle::current(),
            handle: self.ctx.handle.clone(),
            monitors: Arc::clone(&self.ctx.client_registry),
            db: self.pipeline.db(),
        }
    }

    /// A script's bounds on what it writes and watches: a transaction's.
    pub(super) fn view_limits(&self) -> ViewLimits {
        ViewLimits {
            commands_max: self.ctx.limits.multi_commands_max,
            bytes_max: self.ctx.limits.multi_bytes_max,
        }
    }

    /// Runs the script once on a blocking thread.
    async fn run_once(&self, script: &Script, kill: Arc<AtomicBool>) -> Run {
        let mut fetch = self.runtime_fetch();
        let limits = self.view_limits();
        let script = script.clone();
        let run = tokio::task::spawn_blocking(move || {
            let mut view = ScriptView::new(script.read_only, limits, &mut fetch);
            let reply = lua::run(
                &script.body,
                &script.sha,
                &script.keys,
                &script.args,
                &kill,
                &LUA_LIMITS,
                &mut view,
            );
            (reply, view.finish())
        });
        match run.await {
            Ok(run) => run,
            // A panic stops the process (`fail_stop.rs`) before this is seen.
            Err(_) => (
                Reply::error("ERR the script's thread stopped"),
                Err(ViewFailure::Fetch(ClientError::Unknown)),
            ),
        }
    }

    /// Whether every key a script without writes read is unchanged now (what `EXEC WATCHED`
    /// checks, read linearizably here).
    pub(super) async fn reads_still_hold(
        &self,
        watched: Vec<keel_redis::command::WatchedKey>,
    ) -> Result<bool, ClientError> {
        self.ctx
            .handle
            .read(move |sm: &KvAdapter| watched.iter().all(|key| !sm.state().watched_changed(key)))
            .await
    }

    /// Proposes a script's effects as one watched transaction through the pipeline (forwarded
    /// to the leader like a client's), and answers its reply: an array if it applied, null if
    /// a watched key had changed.
    pub(super) async fn commit(&mut self, effects: Effects) -> std::io::Result<Reply> {
        let transaction = Transaction {
            commands: effects.writes,
            requests: effects.requests,
            local_replies: Vec::new(),
            watched: effects.watched,
            publishes: Publishes::default(),
        };
        let dispatch = Dispatch::Exec(transaction);
        if self
            .ctx
            .out_of_memory(keel_session::connection::pipeline::may_grow_memory(
                &dispatch,
            ))
            .await
        {
            return Ok(Reply::error(super::super::OOM));
        }
        let request = Request {
            dispatch,
            args: Vec::new(),
            given_id: None,
        };
        self.propose_alone(request, "the script's writes").await
    }
}

/// The reply to a script command that only reads or changes the node's cache (`SCRIPT LOAD |
/// EXISTS | FLUSH`), `None` for the others.
pub(super) fn cache_command(scripts: &ScriptRegistry, command: &ScriptCommand) -> Option<Reply> {
    Some(match command {
        ScriptCommand::Load(body) => match lua::check(body) {
            Ok(()) => {
                let sha = sha1_hex(body);
                scripts.cache().insert(sha.clone(), body.clone(), true);
                Reply::text(sha)
            }
            Err(error) => error,
        },
        ScriptCommand::Exists(shas) => {
            let cache = scripts.cache();
            Reply::Array(
                shas.iter()
                    .map(|sha| Reply::Integer(i64::from(cache.contains(sha))))
                    .collect(),
            )
        }
        ScriptCommand::Flush => {
            scripts.cache().clear();
            Reply::OK
        }
        _ => return None,
    })
}

/// The body of the script `source` names and its SHA-1 (caching a script given whole, as
/// `EVAL` does), or `NOSCRIPT`.
pub(super) fn script_body(
    scripts: &ScriptRegistry,
    source: ScriptSource,
) -> Result<(Bytes, String), Reply> {
    match source {
        ScriptSource::Body(body) => {
            let sha = sha1_hex(&body);
            scripts.cache().insert(sha.clone(), body.clone(), false);
            Ok((body, sha))
        }
        ScriptSource::Sha(sha) => match scripts.cache().get(&sha) {
            Some(body) => Ok((body, String::from_utf8_lossy(&sha).to_ascii_lowercase())),
            None => Err(Reply::error(
                "NOSCRIPT No matching script. Please use EVAL.",
            )),
        },
    }
}

/// `request` as this node forwards it to the leader: `EVALSHA` (`EVALSHA_RO`) of a script in
/// this node's cache becomes `EVAL` (`EVAL_RO`) of its body, since each node keeps its own cache
/// and the leader may not have it (a client that loaded a script on a follower and then ran it
/// there would otherwise get `NOSCRIPT` again after loading it again: Celery's broker, kombu, runs
/// its scripts that way); any other request as it is.
pub(super) fn forwardable(scripts: &ScriptRegistry, request: &[Bytes]) -> Vec<Bytes> {
    let mut forwarded = request.to_vec();
    let eval: &'static [u8] = match request.first() {
        Some(name) if name.eq_ignore_ascii_case(b"evalsha") => b"EVAL",
        Some(name) if name.eq_ignore_ascii_case(b"evalsha_ro") => b"EVAL_RO",
        _ => return forwarded,
    };
    if let Some(body) = request.get(1).and_then(|sha| scripts.cache().get(sha)) {
        forwarded[0] = Bytes::from_static(eval);
        forwarded[1] = body;
    }
    forwarded
}

/// `-BUSY` for a script that finds every slot taken.
pub(super) fn busy_reply() -> Reply {
    Reply::error(format!(
        "BUSY {} scripts are running on this node already: try again later",
        keel_redis::script::SCRIPTS_RUNNING_MAX
    ))
}

/// What a script run needs, owned, for its thread.
#[derive(Clone)]
struct Script {
    body: Bytes,
    sha: String,
    keys: Vec<Bytes>,
    args: Vec<Bytes>,
    read_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> Vec<Bytes> {
        args.iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn evalsha_of_a_cached_script_is_forwarded_as_eval_of_its_body() {
        let scripts = ScriptRegistry::default();
        let body = "return redis.call('SET', KEYS[1], ARGV[1])";
        let sha = sha1_hex(body.as_bytes());
        scripts.cache().insert(sha.clone(), Bytes::from(body), true);
        assert_eq!(
            forwardable(
                &scripts,
                &request(&["evalsha", &sha.to_uppercase(), "1", "k", "v"])
            ),
            request(&["EVAL", body, "1", "k", "v"])
        );
        assert_eq!(
            forwardable(&scripts, &request(&["EVALSHA_RO", &sha, "0"])),
            request(&["EVAL_RO", body, "0"])
        );
        // Unknown to this node: as it is (the leader answers NOSCRIPT, or knows it).
        let unknown = request(&["EVALSHA", &"0".repeat(40), "0"]);
        assert_eq!(forwardable(&scripts, &unknown), unknown);
        // Anything else: as it is.
        let eval = request(&["EVAL", "return 1", "0"]);
        assert_eq!(forwardable(&scripts, &eval), eval);
    }
}
