//! COMMAND: what clients ask about the server's commands when they connect.
//!
//! `redis-cli` asks `COMMAND DOCS` for its help and hints; `redis-benchmark` asks
//! `CONFIG GET save` and `CONFIG GET appendonly`; cluster-aware libraries ask `COMMAND` for key
//! positions. The answers come from the same table the parser enforces arity with. COMMAND INFO,
//! LIST FILTERBY, DOCS and GETKEYS answer in Redis 7's shapes.

use keel_redis::command::metadata::{
    acl_categories, command_docs, get_keys, is_acl_category, key_specs, subcommands, KeySpec,
    Subcommand, SUBCOMMANDS,
};
use keel_redis::command::{CommandQuery, CommandSpec, ListFilter, COMMAND_TABLE};
use keel_redis::glob::{glob_match, Case};
use keel_resp::Reply;

pub(crate) fn command_reply(query: &CommandQuery) -> Reply {
    match query {
        CommandQuery::All => Reply::Array(COMMAND_TABLE.iter().map(command_info).collect()),
        CommandQuery::Count => Reply::Integer(COMMAND_TABLE.len() as i64),
        CommandQuery::List(filter) => Reply::Array(
            all_names()
                .filter(|name| listed(name, filter))
                .map(Reply::text)
                .collect(),
        ),
        CommandQuery::Info(names) if names.is_empty() => command_reply(&CommandQuery::All),
        CommandQuery::Info(names) => Reply::Array(
            names
                .iter()
                .map(|name| match find(name) {
                    Some(Found::Command(spec)) => command_info(spec),
                    Some(Found::Subcommand(sub)) => subcommand_info(sub),
                    None => Reply::Null,
                })
                .collect(),
        ),
        CommandQuery::Docs(names) => {
            let docs = |name: &'static str| (Reply::text(name), command_docs_reply(name));
            if names.is_empty() {
                Reply::Map(COMMAND_TABLE.iter().map(|spec| docs(spec.name)).collect())
            } else {
                // Redis leaves unknown names out of the map.
                Reply::Map(
                    names
                        .iter()
                        .filter_map(|n| find(n))
                        .map(|found| docs(found.name()))
                        .collect(),
                )
            }
        }
        CommandQuery::GetKeys { args, flags } => match get_keys(args) {
            Ok(keys) => Reply::Array(
                keys.iter()
                    .map(|key| {
                        let name = Reply::Bulk(args[key.position].clone());
                        if *flags {
                            Reply::Array(vec![name, simple_list(key.flags)])
                        } else {
                            name
                        }
                    })
                    .collect(),
            ),
            Err(error) => error.to_reply(),
        },
    }
}

/// A name `COMMAND INFO` or `COMMAND DOCS` was given, found.
enum Found {
    Command(&'static CommandSpec),
    Subcommand(&'static Subcommand),
}

impl Found {
    fn name(&self) -> &'static str {
        match self {
            Found::Command(spec) => spec.name,
            Found::Subcommand(sub) => sub.full_name,
        }
    }
}

/// A command, or a subcommand named `parent|sub` (any case).
fn find(name: &[u8]) -> Option<Found> {
    if let Some(spec) = CommandSpec::lookup(name) {
        return Some(Found::Command(spec));
    }
    SUBCOMMANDS
        .iter()
        .find(|sub| sub.full_name.as_bytes().eq_ignore_ascii_case(name))
        .map(Found::Subcommand)
}

/// Every command, each followed by its subcommands (what `COMMAND LIST` lists).
fn all_names() -> impl Iterator<Item = &'static str> {
    COMMAND_TABLE.iter().flat_map(|spec| {
        std::iter::once(spec.name).chain(subcommands(spec.name).map(|sub| sub.full_name))
    })
}

/// Whether `COMMAND LIST FILTERBY ...` lists `name`.
fn listed(name: &str, filter: &ListFilter) -> bool {
    match filter {
        ListFilter::All => true,
        // keel has no modules.
        ListFilter::Module(_) => false,
        ListFilter::AclCategory(category) => {
            is_acl_category(category)
                && acl_categories(name, flags_of(name))
                    .iter()
                    .any(|c| c.as_bytes()[1..].eq_ignore_ascii_case(category))
        }
        ListFilter::Pattern(pattern) => glob_match(pattern, name.as_bytes(), Case::Insensitive),
    }
}

fn flags_of(name: &str) -> &'static [&'static str] {
    match find(name.as_bytes()) {
        Some(Found::Command(spec)) => spec.flags,
        Some(Found::Subcommand(sub)) => sub.flags,
        None => &[],
    }
}

fn simple_list(items: &[&'static str]) -> Reply {
    Reply::Array(items.iter().map(|item| Reply::simple(*item)).collect())
}

/// The ten-element entry of Redis 7's COMMAND INFO: name, arity, flags, first key, last key, key
/// step, ACL categories, tips, key specs, subcommands.
fn command_info(spec: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::text(spec.name),
        Reply::Integer(spec.arity.into()),
        simple_list(spec.flags),
        Reply::Integer(spec.first_key.into()),
        Reply::Integer(spec.last_key.into()),
        Reply::Integer(spec.key_step.into()),
        simple_list(&acl_categories(spec.name, spec.flags)),
        Reply::Array(Vec::new()),
        Reply::Array(key_specs(spec.name).iter().map(key_spec).collect()),
        Reply::Array(subcommands(spec.name).map(subcommand_info).collect()),
    ])
}

/// A subcommand's entry, in the same shape (subcommands have no keys in keel).
fn subcommand_info(sub: &Subcommand) -> Reply {
    Reply::Array(vec![
        Reply::text(sub.full_name),
        Reply::Integer(sub.arity.into()),
        simple_list(sub.flags),
        Reply::Integer(0),
        Reply::Integer(0),
        Reply::Integer(0),
        simple_list(&acl_categories(sub.full_name, sub.flags)),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

/// One key specification, as Redis 7 replies it: flags, `begin_search` (by index) and
/// `find_keys` (a range).
fn key_spec(spec: &KeySpec) -> Reply {
    let field = |name: &'static str, value: Reply| (Reply::text(name), value);
    let typed = |kind: &'static str, spec: Vec<(Reply, Reply)>| {
        Reply::Map(vec![
            field("type", Reply::text(kind)),
            field("spec", Reply::Map(spec)),
        ])
    };
    Reply::Map(vec![
        field("flags", simple_list(spec.flags)),
        field(
            "begin_search",
            typed(
                "index",
                vec![field("index", Reply::Integer(spec.begin.into()))],
            ),
        ),
        field(
            "find_keys",
            typed(
                "range",
                vec![
                    field("lastkey", Reply::Integer(spec.last_key.into())),
                    field("keystep", Reply::Integer(spec.key_step.into())),
                    field("limit", Reply::Integer(0)),
                ],
            ),
        ),
    ])
}

/// One line per command for `COMMAND DOCS` (what `redis-cli`'s HELP shows).
#[expect(clippy::too_many_lines)]
fn summary(name: &str) -> &'static str {
    match name {
        "get" => "Returns the value of a key (linearizable read).",
        "lpush" | "rpush" => "Adds elements to the head (LPUSH) or tail (RPUSH) of a list.",
        "lpushx" | "rpushx" => "Adds elements to a list only if it exists.",
        "lpop" | "rpop" => "Removes and returns elements from the head or tail of a list.",
        "lset" => "Sets the element at an index of a list.",
        "lrem" => "Removes elements equal to a value from a list.",
        "ltrim" => "Keeps only a range of a list.",
        "linsert" => "Inserts an element before or after another in a list.",
        "rpoplpush" => "Moves the tail of a list to the head of another.",
        "lmove" => "Moves an element from one end of a list to an end of another.",
        "blpop" | "brpop" => {
            "Removes and returns the first (last) element of the first non-empty list, or blocks."
        }
        "brpoplpush" | "blmove" => "Moves an element between lists, or blocks until there is one.",
        "lmpop" => "Removes and returns elements from the first non-empty list.",
        "blmpop" => "Removes and returns elements from the first non-empty list, or blocks.",
        "bzpopmin" | "bzpopmax" => {
            "Removes and returns the member of least or greatest score of a sorted set, or blocks."
        }
        "zmpop" => "Removes and returns members from the first non-empty sorted set.",
        "bzmpop" => "Removes and returns members from the first non-empty sorted set, or blocks.",
        "llen" => "Returns the length of a list.",
        "lrange" => "Returns a range of a list.",
        "lindex" => "Returns the element at an index of a list.",
        "lpos" => "Returns the indexes of matching elements in a list.",
        "hset" => "Sets fields of a hash; how many are new.",
        "hmset" => "Sets fields of a hash.",
        "hsetnx" => "Sets a field of a hash only if it does not exist.",
        "hdel" => "Removes fields from a hash.",
        "hincrby" => "Adds an integer to a field of a hash.",
        "hincrbyfloat" => "Adds a float to a field of a hash.",
        "hget" => "Returns the value of a field of a hash.",
        "hmget" => "Returns the values of fields of a hash.",
        "hlen" => "Returns the number of fields of a hash.",
        "hexists" => "Whether a field of a hash exists.",
        "hstrlen" => "Returns the length of the value of a field of a hash.",
        "hgetall" => "Returns every field and value of a hash.",
        "hkeys" => "Returns every field of a hash.",
        "hvals" => "Returns every value of a hash.",
        "sadd" => "Adds members to a set; how many are new.",
        "srem" => "Removes members from a set.",
        "smove" => "Moves a member from one set to another.",
        "sinterstore" | "sunionstore" | "sdiffstore" => {
            "Stores the intersection, union or difference of sets in a key."
        }
        "spop" => "Removes and returns members of a set (the same on every replica).",
        "smembers" => "Returns every member of a set.",
        "sismember" => "Whether a value is a member of a set.",
        "smismember" => "Whether each value is a member of a set.",
        "scard" => "Returns the number of members of a set.",
        "sinter" | "sunion" | "sdiff" => "Returns the intersection, union or difference of sets.",
        "sintercard" => "Returns the size of the intersection of sets.",
        "srandmember" => "Returns random members of a set.",
        "sort" => "Sorts a list, set or sorted set; with STORE, stores the result as a list.",
        "sort_ro" => "Sorts a list, set or sorted set (read-only SORT).",
        "zadd" => "Adds members with scores to a sorted set (NX, XX, GT, LT, CH, INCR).",
        "zrem" => "Removes members from a sorted set.",
        "zincrby" => "Adds to the score of a member of a sorted set.",
        "zpopmin" | "zpopmax" => "Removes and returns the members of least or greatest score.",
        "zremrangebyscore" => "Removes the members with scores in a range.",
        "zremrangebyrank" => "Removes the members in a range of positions.",
        "zscore" => "Returns the score of a member of a sorted set.",
        "zmscore" => "Returns the scores of members of a sorted set.",
        "zcard" => "Returns the number of members of a sorted set.",
        "zrank" | "zrevrank" => "Returns the position of a member in a sorted set.",
        "zcount" => "Counts the members with scores in a range.",
        "zrange" => "Returns a range of a sorted set: by position, BYSCORE or BYLEX, REV, LIMIT.",
        "zrevrange" | "zrangebyscore" | "zrevrangebyscore" | "zrangebylex" | "zrevrangebylex" => {
            "Returns a range of a sorted set (the older forms of ZRANGE)."
        }
        "object" => "OBJECT ENCODING (Redis's name for such a value) and OBJECT REFCOUNT (1).",
        "memory" => "MEMORY USAGE: the bytes a key and its value are counted as taking.",
        "time" => "Returns the node's wall clock: seconds and microseconds.",
        "save" => "Takes a snapshot now (every acknowledged write is durable already).",
        "shutdown" => "Refused: a keel node stops on SIGTERM or SIGINT.",
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
        "flushdb" => "Removes every key of the connection's database.",
        "flushall" => "Removes every key of every database.",
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
            "Iterates over the keys (MATCH, COUNT, TYPE); each call costs O(keys), see docs/redis.md."
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
        "select" => "Selects the database this connection's commands run in (0 to databases - 1).",
        "swapdb" => "Swaps the contents of two databases (every key of both counts as changed for WATCH).",
        "move" => "Moves a key (with its deadline) to another database; 1 if moved, 0 if not.",
        "quit" => "Closes the connection.",
        "info" => {
            "Reports the node's state in Redis's sections (server, clients, memory, stats, \
             replication, cpu, commandstats, errorstats, keyspace) and keel's raft section."
        }
        "raft.status" => "Reports the node's Raft state (the INFO raft section).",
        "monitor" => {
            "Streams every command this node's clients run, in Redis's format (bounded: a \
             monitor that falls behind is disconnected)."
        }
        "function" => {
            "FUNCTION FLUSH / LIST: keel has no functions (nothing to flush, none listed)."
        }
        "eval" | "evalsha" => {
            "Runs a Lua script atomically: on the leader, against copies of its keys, its writes \
             committed as one transaction watching them (run again if one changed)."
        }
        "eval_ro" | "evalsha_ro" => "Runs a Lua script that may not write.",
        "script" => "SCRIPT LOAD / EXISTS / FLUSH / KILL: this node's script cache and scripts.",
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
        "raft.blocked" => "A blocked client's attempt to pop: takes nothing past its deadline.",
        "raft.watched" => {
            "Inside MULTI: keys a follower's client watched, with their watch points."
        }
        "client|setname" => "Names the connection (an empty name clears it).",
        "client|getname" => "Returns the connection's name, or nil.",
        "client|setinfo" => "Records the client library's name or version (LIB-NAME, LIB-VER).",
        "client|id" => "Returns the connection's id.",
        "client|info" => "Describes the connection, as a CLIENT LIST line.",
        "client|list" => "Describes the node's connections (TYPE, ID filters).",
        "client|reply" => "ON | OFF | SKIP: which of the connection's replies are sent.",
        "client|kill" => "Closes connections by address or by filters (ID, ADDR, LADDR, SKIPME).",
        "client|unblock" => "Ends a blocked client's wait, as a timeout or with an error.",
        "command|count" => "Returns the number of commands.",
        "command|docs" => "Documents commands: summary, since, group, complexity.",
        "command|info" => "Describes commands: arity, flags, keys, ACL categories, key specs.",
        "command|list" => "Names the commands (FILTERBY MODULE, ACLCAT or PATTERN).",
        "command|getkeys" => "Returns the keys of a command given with its arguments.",
        "command|getkeysandflags" => "Returns the keys of a command with their access flags.",
        "config|get" => "Returns the settings matching glob patterns.",
        "config|set" => "Changes settings (all or none).",
        "config|resetstat" => "Zeroes the counters INFO reports (stats, commandstats, errorstats).",
        "function|flush" => "Nothing to flush: keel has no functions.",
        "function|list" => "Always empty: keel has no functions.",
        "script|load" => "Compiles a script and caches it on this node; returns its SHA-1.",
        "script|exists" => "Whether scripts are in this node's cache, by SHA-1.",
        "script|flush" => "Empties this node's script cache.",
        "script|kill" => "Stops the scripts running on this node (none of their writes apply).",
        _ => stream_summary(name),
    }
}

/// The pub/sub commands' summaries.
fn pubsub_summary(name: &str) -> &'static str {
    match name {
        "publish" => {
            "Posts a message to a channel: to this node's subscribers and every other node's; \
             answers this node's receivers."
        }
        "spublish" => "Posts a message to a shard channel (every node is the one shard).",
        "subscribe" => "Listens for messages on channels.",
        "psubscribe" => "Listens for messages on channels matching glob patterns.",
        "ssubscribe" => "Listens for messages on shard channels.",
        "unsubscribe" => "Stops listening on channels (all without arguments).",
        "punsubscribe" => "Stops listening on patterns (all without arguments).",
        "sunsubscribe" => "Stops listening on shard channels (all without arguments).",
        "pubsub" => "Reports this node's channels, patterns and subscribers.",
        "pubsub|channels" => "Names this node's channels with a subscriber, matching a pattern.",
        "pubsub|numpat" => "Returns the number of patterns subscribed on this node.",
        "pubsub|numsub" => "Returns the subscribers of channels on this node.",
        "pubsub|shardchannels" => "Names this node's shard channels with a subscriber.",
        "pubsub|shardnumsub" => "Returns the subscribers of shard channels on this node.",
        "pubsub|help" => "Describes the PUBSUB subcommands.",
        _ => "",
    }
}

/// The stream commands' summaries.
fn stream_summary(name: &str) -> &'static str {
    match name {
        "xadd" => "Appends an entry to a stream; its ID from the log's time with `*`.",
        "xtrim" => "Trims a stream by MAXLEN or MINID.",
        "xdel" => "Removes entries from a stream.",
        "xsetid" => "Sets a stream's last ID, entries added and greatest deleted ID.",
        "xlen" => "Returns the number of entries of a stream.",
        "xrange" | "xrevrange" => "Returns a range of a stream's entries, by ID.",
        "xread" => "Reads entries after given IDs from streams.",
        "xreadgroup" => "Reads entries as a consumer of a group (a write: it records deliveries).",
        "xgroup" => "Creates, changes and destroys consumer groups and their consumers.",
        "xack" => "Acknowledges pending entries of a group.",
        "xpending" => "Returns a group's pending entries.",
        "xclaim" => "Gives pending entries to another consumer.",
        "xautoclaim" => "Gives idle pending entries to another consumer, scanning the PEL.",
        "xinfo" => "Returns information about a stream, its groups or a group's consumers.",
        _ => pubsub_summary(name),
    }
}

/// `COMMAND DOCS`'s map for one command or subcommand: summary, since, group, complexity, and
/// its subcommands' docs.
fn command_docs_reply(name: &'static str) -> Reply {
    let docs = command_docs(name);
    let field = |k: &'static str, v: &'static str| (Reply::text(k), Reply::text(v));
    let mut map = vec![
        field("summary", summary(name)),
        field("since", docs.since),
        field("group", docs.group),
    ];
    if !docs.complexity.is_empty() {
        map.push(field("complexity", docs.complexity));
    }
    let subs: Vec<(Reply, Reply)> = subcommands(name)
        .map(|sub| {
            (
                Reply::text(sub.full_name),
                command_docs_reply(sub.full_name),
            )
        })
        .collect();
    if !subs.is_empty() {
        map.push((Reply::text("subcommands"), Reply::Map(subs)));
    }
    Reply::Map(map)
}

#[cfg(test)]
mod tests;
