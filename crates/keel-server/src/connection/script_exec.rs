//! `EXEC` of a transaction that queued a script (`keel_redis::script` has the design): the
//! transaction runs whole as one script does. Its commands and scripts run in order in one
//! script view, against copies of the keys they name; their writes, in order, become one
//! `EXEC WATCHED` entry that watches every key touched and every key the client watched. If a
//! key the client watched changed, EXEC answers nil, as any EXEC; if another key touched
//! changed, the transaction runs again (at most `SCRIPT_ATTEMPTS_MAX` times). EXEC's array is
//! the replies in order, the replies given when the commands were queued in their places.
//!
//! A follower forwards the whole transaction to the leader once, as `MULTI`, the client's
//! watched keys, the requests, `EXEC`, and relays EXEC's reply (a lost link answers
//! `-TRYAGAIN outcome unknown`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel::ClientError;

use super::script_runner::{busy_reply, cache_command, forwardable, script_body, LUA_LIMITS};
use super::{Forwarding, Session};
use keel_redis::command::{Command, LocalCommand, ScriptCommand, ScriptedExec, WatchedKey};
use keel_redis::script::lua::{self, Redis as _};
use keel_redis::script::view::{Effects, ScriptView, ViewFailure};
use keel_redis::script::{ScriptRegistry, SCRIPT_ATTEMPTS_MAX};
use keel_resp::Reply;

/// What one run of the transaction gives: its replies, and what it changed.
type TransactionRun = (Vec<Reply>, Result<Effects, ViewFailure>);

impl Session<'_> {
    /// Answers `EXEC` of `exec` (`request` is EXEC's arguments).
    pub(super) async fn scripted_exec(&mut self, exec: ScriptedExec, request: &[Bytes]) -> Reply {
        let Some(running) = self.ctx.scripts.start(Instant::now()) else {
            return busy_reply();
        };
        let kill = running.shared_kill_flag();
        let exec = Arc::new(exec);
        let reply = self.run_transaction(&exec, &kill).await;
        drop(running);
        match reply {
            Ok(reply) => reply,
            Err(error) => self.forward_transaction(&exec, request, error).await,
        }
    }

    /// Runs the transaction until its effects commit, it needs none, or it fails; `Err`: this
    /// node could not read (it does not lead).
    async fn run_transaction(
        &mut self,
        exec: &Arc<ScriptedExec>,
        kill: &Arc<AtomicBool>,
    ) -> Result<Reply, ClientError> {
        let ctx = self.ctx;
        for attempt in 0..SCRIPT_ATTEMPTS_MAX {
            let _turn = match attempt {
                0 => None,
                _ => Some(ctx.script_turn.lock().await),
            };
            // The client's watch first: a key it watched that changed fails EXEC, as always.
            if !exec.watched.is_empty() && !self.reads_still_hold(exec.watched.clone()).await? {
                return Ok(Reply::NullArray);
            }
            let (replies, outcome) = self.run_transaction_once(exec, kill).await;
            let mut effects = match outcome {
                Err(ViewFailure::Fetch(error)) => return Err(error),
                Err(ViewFailure::TooLarge(error)) => return Ok(error),
                Ok(effects) => effects,
            };
            if kill.load(Ordering::Relaxed) {
                return Ok(Reply::error(
                    "ERR Script killed by user with SCRIPT KILL...",
                ));
            }
            effects.watched.extend(exec.watched.iter().cloned());
            let publishes = std::mem::take(&mut effects.publishes);
            let applied = match effects.writes.is_empty() {
                true if effects.fetches <= 1 && exec.watched.is_empty() => true,
                true => self.reads_still_hold(effects.watched).await?,
                false => match self.commit(effects).await {
                    Ok(Reply::NullArray) => false,
                    Ok(Reply::Array(_)) => true,
                    Ok(other) => return Ok(other),
                    Err(_) => return Ok(Reply::error("TRYAGAIN outcome unknown")),
                },
            };
            if applied {
                return Ok(self.publish(&publishes, Reply::Array(replies)));
            }
        }
        Ok(Reply::error(format!(
            "TRYAGAIN the keys the transaction touched changed while it ran, \
             {SCRIPT_ATTEMPTS_MAX} times: nothing of it applied"
        )))
    }

    /// Runs every request of the transaction once, on a blocking thread.
    async fn run_transaction_once(
        &self,
        exec: &Arc<ScriptedExec>,
        kill: &Arc<AtomicBool>,
    ) -> TransactionRun {
        let mut fetch = self.runtime_fetch();
        let limits = self.view_limits();
        let (exec, kill) = (Arc::clone(exec), Arc::clone(kill));
        let scripts = Arc::clone(&self.ctx.scripts);
        let run = tokio::task::spawn_blocking(move || {
            let mut view = ScriptView::new(false, limits, &mut fetch);
            let replies = run_requests(&exec, &scripts, &kill, &mut view);
            (replies, view.finish())
        });
        match run.await {
            Ok(run) => run,
            // A panic stops the process (`fail_stop.rs`) before this is seen.
            Err(_) => (Vec::new(), Err(ViewFailure::Fetch(ClientError::Unknown))),
        }
    }

    /// On a node that could not read: the transaction, forwarded once to the leader.
    async fn forward_transaction(
        &mut self,
        exec: &ScriptedExec,
        request: &[Bytes],
        error: ClientError,
    ) -> Reply {
        let group = forwarded_group(&self.ctx.scripts, exec, request);
        let group: Vec<&[Bytes]> = group.iter().map(Vec::as_slice).collect();
        self.resolve(Err(error), Forwarding::Group(&group)).await
    }
}

/// `MULTI`, the client's watched keys (`RAFT.WATCHED`), the queued requests (an `EVALSHA` of a
/// script this node knows as `EVAL` of its body: see `script_runner::forwardable`), then `exec`.
fn forwarded_group(
    scripts: &ScriptRegistry,
    exec: &ScriptedExec,
    exec_request: &[Bytes],
) -> Vec<Vec<Bytes>> {
    let mut group = vec![vec![Bytes::from_static(b"MULTI")]];
    if !exec.watched.is_empty() {
        group.push(watched_request(&exec.watched));
    }
    group.extend(exec.requests.iter().map(|r| forwardable(scripts, r)));
    group.push(exec_request.to_vec());
    group
}

/// `RAFT.WATCHED key index time_ms ...`, as a follower sends the keys its client watched.
fn watched_request(watched: &[WatchedKey]) -> Vec<Bytes> {
    let mut request = vec![Bytes::from_static(b"RAFT.WATCHED")];
    for key in watched {
        request.push(key.key.clone());
        request.push(Bytes::from(key.index.to_string()));
        request.push(Bytes::from(key.time_ms.to_string()));
    }
    request
}

/// Every request of the transaction, in order, in `view`: each reply, the ones answered when
/// queued in their places.
fn run_requests(
    exec: &ScriptedExec,
    scripts: &ScriptRegistry,
    kill: &AtomicBool,
    view: &mut ScriptView<'_>,
) -> Vec<Reply> {
    let mut answered = exec.local_replies.iter().peekable();
    let mut replies = Vec::with_capacity(exec.requests.len());
    for (position, request) in exec.requests.iter().enumerate() {
        if let Some((_, reply)) = answered.next_if(|(at, _)| *at == position) {
            replies.push(reply.clone());
            continue;
        }
        let reply = match Command::parse(request) {
            Ok(Command::Local(LocalCommand::Script(command))) => {
                run_script_command(command, scripts, kill, view)
            }
            _ => view.call(request.clone()),
        };
        replies.push(reply);
    }
    replies
}

/// A script command queued in the transaction: a script run in the transaction's view, or a
/// cache command.
fn run_script_command(
    command: ScriptCommand,
    scripts: &ScriptRegistry,
    kill: &AtomicBool,
    view: &mut ScriptView<'_>,
) -> Reply {
    if let Some(reply) = cache_command(scripts, &command) {
        return reply;
    }
    let ScriptCommand::Eval {
        source,
        keys,
        args,
        read_only,
    } = command
    else {
        return Reply::error("ERR Command not allowed inside a transaction");
    };
    let (body, sha) = match script_body(scripts, source) {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    view.set_read_only(read_only);
    let reply = lua::run(&body, &sha, &keys, &args, kill, &LUA_LIMITS, view);
    view.set_read_only(false);
    reply
}
