//! What a running script's `redis.call` reaches: [`ScriptView`], the script's own view of the
//! data, sans-IO.
//!
//! Each command a script calls is parsed as a client's would be, its keys found from the
//! command's key specification (`COMMAND GETKEYS`), and every key not seen yet copied from the
//! replicated state into the script's scratch state (`state_machine/scratch.rs`) through
//! [`Fetch`]: a linearizable read on the leader, recording the applied index and log time it
//! copied at. The command then runs in the scratch: reads see the script's earlier writes, and
//! nothing is proposed yet. When the script ends, [`ScriptView::finish`] gives its
//! [`Effects`]: the writes in order, and every key touched with the point it was copied at,
//! which the transaction that carries the writes watches (`crate::script` has the whole
//! protocol and the argument why a committed script ran atomically).
//!
//! Refused inside a script: commands that would touch keys the command does not name (KEYS,
//! SCAN, RANDOMKEY, DBSIZE, FLUSHALL, FLUSHDB, SORT with BY or GET patterns, commands without a
//! key specification), because their result could not be watched; commands that are not data
//! commands (CONFIG, CLIENT, MULTI, EVAL, ...), as Redis refuses them; and writes in a read-only
//! script (EVAL_RO). SPOP's random choice depends on the log index it applies at, so the script
//! logs what it actually popped, as SREM, rather than SPOP again.

use std::collections::HashSet;

use bytes::Bytes;
use keel_engine::ClientError;

use super::lua::Redis;
use crate::command::metadata::get_keys;
use crate::command::{
    CollectionRead, CollectionWrite, Command, LocalCommand, QueuedCommand, ReadCommand, WatchedKey,
    WriteCommand,
};
use crate::state_machine::KvStateMachine;
use keel_resp::Reply;

/// How a script reaches the replicated state: the runtime on the leader, a test's state machine.
pub trait Fetch {
    /// Copies `keys` from the replicated state into `scratch` (each as it is there, or removed
    /// from the scratch when absent), from a state at or after every write acknowledged before
    /// the call: answers that state's applied index and log time.
    fn fetch(
        &mut self,
        keys: Vec<Bytes>,
        scratch: &mut KvStateMachine,
    ) -> Result<(u64, u64), ClientError>;

    /// The node's wall clock in microseconds since the Unix epoch (TIME).
    fn wall_clock_us(&self) -> u64;

    /// Shows a command the script calls to the node's monitors (as Redis's `[0 lua]` lines).
    fn show(&self, _args: &[Bytes]) {}

    /// The database of the script's caller: where [`Fetch::fetch`] copies keys from, and what
    /// its watched keys name (the script's effects are proposed in it).
    fn db(&self) -> u32 {
        0
    }
}

/// Bounds on what one script may write and watch: those of a transaction, because its effects
/// are proposed as one ([`keel_resp::Limits::multi_commands_max`], `multi_bytes_max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewLimits {
    pub commands_max: usize,
    pub bytes_max: usize,
}

/// Why a script's effects cannot be proposed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewFailure {
    /// Reading the replicated state failed (this node does not lead, the read timed out, ...).
    Fetch(ClientError),
    /// The script wrote or touched more than one transaction may carry.
    TooLarge(Reply),
}

impl ViewFailure {
    /// What the script's `redis.call` answers for it.
    fn reply(&self) -> Reply {
        match self {
            ViewFailure::Fetch(error) => crate::command::client_error_reply(error),
            ViewFailure::TooLarge(reply) => reply.clone(),
        }
    }
}

/// What a script that ran to its end changes: proposed as one transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Every key the script touched, with the point it was copied at.
    pub watched: Vec<WatchedKey>,
    /// The writes, in the order the script made them.
    pub writes: Vec<QueuedCommand>,
    /// Each write's arguments (a follower forwards a transaction as its requests).
    pub requests: Vec<Vec<Bytes>>,
    /// How many fetches the keys took: with at most one, every read came from one state and a
    /// script without writes needs no check that its reads still hold.
    pub fetches: u32,
    /// The messages the script published (`(shard, channel, message)`, in order): published by
    /// the node that ran it once its writes applied (or at once without writes), through the
    /// node's PUBLISH path, so exactly one node publishes them; never through the log.
    pub publishes: Vec<(bool, Bytes, Bytes)>,
}

/// Per-argument overhead a write is counted with against [`ViewLimits::bytes_max`], as a queued
/// command of a transaction is.
const ARG_OVERHEAD_BYTES: usize = 16;

/// A running script's view; see the module documentation.
pub struct ScriptView<'a> {
    scratch: KvStateMachine,
    copied: HashSet<Bytes>,
    effects: Effects,
    write_bytes: usize,
    read_only: bool,
    limits: ViewLimits,
    failure: Option<ViewFailure>,
    fetch: &'a mut dyn Fetch,
    #[cfg(feature = "mutations")]
    mutation: Option<crate::Mutation>,
}

impl<'a> ScriptView<'a> {
    pub fn new(read_only: bool, limits: ViewLimits, fetch: &'a mut dyn Fetch) -> Self {
        ScriptView {
            scratch: KvStateMachine::scratch(0, 0),
            copied: HashSet::new(),
            effects: Effects::default(),
            write_bytes: 0,
            read_only,
            limits,
            failure: None,
            fetch,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: the simulator's deliberately broken variant ([`crate::Mutation`]).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<crate::Mutation>) {
        self.mutation = mutation;
    }

    /// Whether the script calling now may not write: a transaction runs its commands and
    /// scripts in one view, and an `EVAL_RO` among them may not write while the others may.
    pub fn set_read_only(&mut self, read_only: bool) {
        self.read_only = read_only;
    }

    /// The script's effects, or why they cannot be proposed (whatever the script answered).
    pub fn finish(self) -> Result<Effects, ViewFailure> {
        #[cfg(feature = "mutations")]
        let mut effects = self.effects;
        #[cfg(not(feature = "mutations"))]
        let effects = self.effects;
        #[cfg(feature = "mutations")]
        if self.mutation == Some(crate::Mutation::ScriptUnwatched) {
            effects.watched.clear();
        }
        match self.failure {
            Some(failure) => Err(failure),
            None => Ok(effects),
        }
    }

    fn fail(&mut self, failure: ViewFailure) -> Reply {
        let reply = failure.reply();
        self.failure.get_or_insert(failure);
        reply
    }

    /// Copies the keys of `keys` not copied yet.
    fn copy(&mut self, keys: Vec<Bytes>) -> Result<(), Reply> {
        let missing: Vec<Bytes> = keys
            .into_iter()
            .filter(|key| !self.copied.contains(key))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if self.effects.watched.len() + missing.len() > self.limits.commands_max {
            return Err(self.fail(ViewFailure::TooLarge(Reply::error(format!(
                "ERR the script touches more than {} keys, more than one transaction may watch",
                self.limits.commands_max
            )))));
        }
        match self.fetch.fetch(missing.clone(), &mut self.scratch) {
            Ok((index, time_ms)) => {
                self.scratch.advance_scratch(index, time_ms);
                self.effects.fetches += 1;
                for key in missing {
                    self.effects.watched.push(WatchedKey {
                        db: self.fetch.db(),
                        key: key.clone(),
                        index,
                        time_ms,
                    });
                    self.copied.insert(key);
                }
                Ok(())
            }
            Err(error) => Err(self.fail(ViewFailure::Fetch(error))),
        }
    }

    /// Records a message the script publishes. Answers 0: it is published when the script's
    /// writes apply, after the script ran, so its receivers are not known to the script.
    fn publish(&mut self, shard: bool, channel: Bytes, message: Bytes) -> Reply {
        if self.read_only {
            return Reply::error("ERR Write commands are not allowed from read-only scripts.");
        }
        let bytes = channel.len() + message.len() + 3 * ARG_OVERHEAD_BYTES;
        if self.effects.publishes.len() >= self.limits.commands_max
            || self.write_bytes.saturating_add(bytes) > self.limits.bytes_max
        {
            return self.fail(ViewFailure::TooLarge(Reply::error(format!(
                "ERR the script publishes more than one transaction may carry ({} commands, {} \
                 bytes)",
                self.limits.commands_max, self.limits.bytes_max
            ))));
        }
        self.write_bytes += bytes;
        self.effects.publishes.push((shard, channel, message));
        Reply::Integer(0)
    }

    /// Records a write the script made, as the transaction will carry it.
    fn record_write(&mut self, write: WriteCommand, args: Vec<Bytes>) -> Result<(), Reply> {
        let bytes: usize = args.iter().map(|a| a.len() + ARG_OVERHEAD_BYTES).sum();
        if self.effects.writes.len() >= self.limits.commands_max
            || self.write_bytes.saturating_add(bytes) > self.limits.bytes_max
        {
            return Err(self.fail(ViewFailure::TooLarge(Reply::error(format!(
                "ERR the script writes more than one transaction may carry ({} commands, {} \
                 bytes)",
                self.limits.commands_max, self.limits.bytes_max
            )))));
        }
        self.write_bytes += bytes;
        self.effects.writes.push(QueuedCommand::Write(write));
        self.effects.requests.push(args);
        Ok(())
    }

    fn data_command(&mut self, command: Command, args: Vec<Bytes>) -> Reply {
        if let Some(refusal) = refused_in_scripts(&command) {
            return refusal;
        }
        let is_write = matches!(command, Command::Write(_));
        if is_write && self.read_only {
            return Reply::error("ERR Write commands are not allowed from read-only scripts.");
        }
        let keys = match get_keys(&args) {
            Ok(found) => found
                .iter()
                .filter_map(|k| args.get(k.position).cloned())
                .collect(),
            Err(_) => return not_by_name(&args),
        };
        if let Err(reply) = self.copy(keys) {
            return reply;
        }
        match command {
            Command::Read(read) => self.scratch.run_in_scratch(&QueuedCommand::Read(read)),
            Command::Write(write) => {
                let reply = self
                    .scratch
                    .run_in_scratch(&QueuedCommand::Write(write.clone()));
                let logged = match (&write, &reply) {
                    (WriteCommand::Collection(typed), _)
                        if matches!(typed.op, CollectionWrite::SPop { .. }) =>
                    {
                        popped_as_srem(&args[1], &reply)
                    }
                    _ => Some((write, args)),
                };
                if let Some((write, args)) = logged {
                    if let Err(error) = self.record_write(write, args) {
                        return error;
                    }
                }
                reply
            }
            _ => unreachable!("only data commands reach here"),
        }
    }
}

impl Redis for ScriptView<'_> {
    fn call(&mut self, args: Vec<Bytes>) -> Reply {
        if let Some(failure) = &self.failure {
            // Nothing the script does after a failure can be proposed: every call fails alike.
            return failure.reply();
        }
        let parsed = Command::parse(&args);
        if parsed.is_ok() {
            self.fetch.show(&args);
        }
        match parsed {
            Err(error) => error.to_reply(),
            Ok(Command::Local(LocalCommand::Ping(None))) => Reply::PONG,
            Ok(Command::Local(LocalCommand::Ping(Some(message))))
            | Ok(Command::Local(LocalCommand::Echo(message))) => Reply::Bulk(message),
            Ok(Command::Local(LocalCommand::Time)) => {
                let now_us = self.fetch.wall_clock_us();
                Reply::Array(vec![
                    Reply::text((now_us / 1_000_000).to_string()),
                    Reply::text((now_us % 1_000_000).to_string()),
                ])
            }
            Ok(command @ (Command::Read(_) | Command::Write(_))) => {
                self.data_command(command, args)
            }
            Ok(Command::Local(LocalCommand::Publish {
                shard,
                channel,
                message,
            })) => self.publish(shard, channel, message),
            Ok(_) => Reply::error("ERR This Redis command is not allowed from script"),
        }
    }
}

/// A data command a script may not call beyond those [`not_by_name`] refuses, with why.
fn refused_in_scripts(command: &Command) -> Option<Reply> {
    let patterns = |sort: &crate::command::SortArgs| {
        (sort.by.is_some() && !sort.no_sort) || !sort.get.is_empty()
    };
    let by_pattern = match command {
        Command::Read(ReadCommand::WatchPoint) => {
            return Some(Reply::error(
                "ERR This Redis command is not allowed from script",
            ))
        }
        Command::Read(ReadCommand::Collection(typed)) => match &typed.op {
            CollectionRead::Sort(sort) => patterns(sort),
            _ => false,
        },
        Command::Write(WriteCommand::Collection(typed)) => match &typed.op {
            CollectionWrite::SortStore { args, .. } => patterns(args),
            _ => false,
        },
        _ => false,
    };
    by_pattern.then(|| {
        Reply::error(
            "ERR SORT with BY or GET patterns cannot be called from a script in keel: a script \
             may only touch the keys its commands name",
        )
    })
}

/// The refusal of a command that names no keys but reads or writes the keyspace.
fn not_by_name(args: &[Bytes]) -> Reply {
    Reply::error(format!(
        "ERR '{}' cannot be called from a script in keel: a script may only touch the keys its \
         commands name",
        String::from_utf8_lossy(&args[0]).to_lowercase()
    ))
}

/// SPOP as what it did: SREM of the members it popped (none: nothing to log).
fn popped_as_srem(key: &Bytes, reply: &Reply) -> Option<(WriteCommand, Vec<Bytes>)> {
    let members: Vec<Bytes> = match reply {
        Reply::Bulk(member) => vec![member.clone()],
        Reply::Array(members) => members
            .iter()
            .filter_map(|m| match m {
                Reply::Bulk(member) => Some(member.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if members.is_empty() {
        return None;
    }
    let mut args = vec![Bytes::from_static(b"SREM"), key.clone()];
    args.extend(members);
    match Command::parse(&args) {
        Ok(Command::Write(write)) => Some((write, args)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
