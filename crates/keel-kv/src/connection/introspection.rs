//! COMMAND: what clients ask about the server's commands when they connect.
//!
//! `redis-cli` asks `COMMAND DOCS` for its help and hints; `redis-benchmark` asks
//! `CONFIG GET save` and `CONFIG GET appendonly`; cluster-aware libraries ask `COMMAND` for key
//! positions. The answers come from the same table the parser enforces arity with.

use crate::command::{CommandClass, CommandQuery, CommandSpec, COMMAND_TABLE};
use crate::resp::Reply;

pub(crate) fn command_reply(query: &CommandQuery) -> Reply {
    match query {
        CommandQuery::All => Reply::Array(COMMAND_TABLE.iter().map(command_info).collect()),
        CommandQuery::Count => Reply::Integer(COMMAND_TABLE.len() as i64),
        CommandQuery::List => Reply::Array(
            COMMAND_TABLE
                .iter()
                .map(|spec| Reply::text(spec.name))
                .collect(),
        ),
        CommandQuery::Info(names) if names.is_empty() => command_reply(&CommandQuery::All),
        CommandQuery::Info(names) => Reply::Array(
            names
                .iter()
                .map(|name| CommandSpec::lookup(name).map_or(Reply::Null, command_info))
                .collect(),
        ),
        CommandQuery::Docs(names) => {
            let specs: Vec<&CommandSpec> = if names.is_empty() {
                COMMAND_TABLE.iter().collect()
            } else {
                // Redis leaves unknown names out of the map.
                names
                    .iter()
                    .filter_map(|n| CommandSpec::lookup(n))
                    .collect()
            };
            Reply::Map(
                specs
                    .into_iter()
                    .map(|spec| (Reply::text(spec.name), command_docs(spec)))
                    .collect(),
            )
        }
    }
}

/// The ten-element entry of Redis 7's COMMAND INFO: name, arity, flags, first key, last key, key
/// step, ACL categories, tips, key specs, subcommands.
fn command_info(spec: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::text(spec.name),
        Reply::Integer(spec.arity.into()),
        Reply::Array(spec.flags.iter().map(|f| Reply::simple(*f)).collect()),
        Reply::Integer(spec.first_key.into()),
        Reply::Integer(spec.last_key.into()),
        Reply::Integer(spec.key_step.into()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

/// One line per command for `COMMAND DOCS` (what `redis-cli`'s HELP shows).
fn summary(name: &str) -> &'static str {
    match name {
        "get" => "Returns the value of a key (linearizable read).",
        "set" => {
            "Sets a key to a value; NX only if absent, XX only if present; EX, PX, EXAT, PXAT, \
             KEEPTTL for its expiry; GET returns the old value."
        }
        "setex" | "psetex" => "Sets a key to a value that expires after seconds (ms for PSETEX).",
        "setnx" => "Sets a key only if it does not exist; 1 if set.",
        "msetnx" => "Sets several keys only if none exists; 1 if set.",
        "getset" => "Sets a key and returns its old value.",
        "getdel" => "Returns the value of a key and deletes it.",
        "getex" => {
            "Returns the value of a key and changes its expiry (EX, PX, EXAT, PXAT, PERSIST)."
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" => {
            "Sets a key's deadline (NX, XX, GT, LT); 1 if set. Judged by the log's time."
        }
        "persist" => "Removes a key's deadline; 1 if it had one.",
        "ttl" | "pttl" => "Time left before a key expires (-1: never, -2: no such key).",
        "expiretime" | "pexpiretime" => "When a key expires, since the epoch (-1, -2 as TTL).",
        "flushdb" | "flushall" => "Removes every key.",
        "del" => "Deletes keys; returns how many existed.",
        "exists" => "Counts how many of the given keys exist.",
        "incr" | "incrby" | "decr" | "decrby" => {
            "Adds to the integer value of a key; returns the new value."
        }
        "mget" => "Returns the values of several keys.",
        "mset" => "Sets several keys atomically.",
        "append" => "Appends to a value; returns the new length.",
        "strlen" => "Returns the length of a value.",
        "dbsize" => "Returns the number of keys.",
        "cas" => "CAS key expected new: sets key to new if its value is expected; 1 if swapped.",
        "incrbyfloat" => "Adds a float to the value of a key; returns the new value.",
        "setrange" => {
            "Overwrites part of a value at an offset, zero-padded; returns the new length."
        }
        "setbit" => "Sets or clears the bit at an offset; returns the old bit.",
        "getrange" | "substr" => "Returns the bytes of a value between two offsets (inclusive).",
        "getbit" => "Returns the bit at an offset (0 past the end).",
        "bitcount" => {
            "Counts the set bits of a value, or of a range of bytes (BYTE) or bits (BIT)."
        }
        "lcs" => {
            "Longest common subsequence of two values (LEN: its length; IDX: the matching ranges)."
        }
        "rename" => "Renames a key (with its deadline), replacing any key of the new name.",
        "renamenx" => "Renames a key only if the new name does not exist; 1 if renamed.",
        "copy" => {
            "Copies a key's value and deadline to another key (REPLACE to overwrite); 1 if copied."
        }
        "unlink" => "Deletes keys (as DEL); returns how many existed.",
        "touch" => "Counts how many of the given keys exist.",
        "type" => "Returns the type of a key: string, or none.",
        "randomkey" => "Returns a random key, or nil when there is none.",
        "keys" => "Returns every key matching a glob pattern (scans every key).",
        "scan" => {
            "Iterates over the keys (MATCH, COUNT, TYPE); each call costs O(keys), see the README."
        }
        "ping" => "Returns PONG, or the message given.",
        "echo" => "Returns the message given.",
        "hello" => "Switches the protocol (HELLO 3 for RESP3) and describes the server.",
        "command" => "Describes the commands keel knows.",
        "client" => {
            "Names the connection and describes it (SETNAME, GETNAME, SETINFO, ID, INFO); LIST \
             describes the node's connections, KILL closes them (ID, ADDR, LADDR, SKIPME), REPLY \
             ON | OFF | SKIP silences replies."
        }
        "config" => {
            "CONFIG GET / SET: the node's settings in Redis terms (SET: maxmemory, timeout, \
             maxclients; save, repl-backlog-size, maxmemory-samples inert); RESETSTAT zeroes \
             INFO's counters."
        }
        "select" => "Selects database 0 (the only one).",
        "quit" => "Closes the connection.",
        "info" => "Reports the node's state (sections: server, clients, raft, keyspace).",
        "raft.status" => "Reports the node's Raft state (the INFO raft section).",
        "monitor" => {
            "Streams every command this node's clients run, in Redis's format (bounded: a \
             monitor that falls behind is disconnected)."
        }
        "function" => {
            "FUNCTION FLUSH / LIST: keel has no functions (nothing to flush, none listed)."
        }
        "raft.member" => {
            "RAFT.MEMBER ADD id addr [LEARNER] [CLIENT addr] | RAFT.MEMBER REMOVE id [FORCE]."
        }
        "auth" => "Authenticates the connection: AUTH [default] password (requirepass).",
        "raft.transfer" => "Transfers leadership to the given node.",
        "raft.snapshot" => "Takes a snapshot now.",
        "debug" => "DEBUG PANIC: panics the node (only with --enable-debug-command).",
        "multi" => "Starts a transaction: later commands are queued until EXEC.",
        "exec" => "Runs the queued commands atomically, as one log entry; one reply per command.",
        "discard" => "Drops the queued commands and leaves the transaction.",
        "watch" => "Watches keys: EXEC aborts (null) if one changed since (decided in the log).",
        "unwatch" => "Forgets the watched keys.",
        "raft.watchpoint" => "The applied index and log time of a linearizable read (for WATCH).",
        "raft.watched" => {
            "Inside MULTI: keys a follower's client watched, with their watch points."
        }
        _ => "",
    }
}

fn command_docs(spec: &CommandSpec) -> Reply {
    let group = match spec.class {
        CommandClass::Write | CommandClass::Read => "string",
        CommandClass::Local => "connection",
        CommandClass::Admin => "server",
        CommandClass::Transaction => "transactions",
    };
    Reply::Map(vec![
        (Reply::text("summary"), Reply::text(summary(spec.name))),
        (Reply::text("since"), Reply::text("0.1.0")),
        (Reply::text("group"), Reply::text(group)),
    ])
}
