//! What `COMMAND INFO`, `COMMAND DOCS`, `COMMAND LIST FILTERBY` and `COMMAND GETKEYS` report
//! beyond the table's arity, flags and legacy key range: Redis 7's key specifications, ACL
//! categories, documentation group, version and complexity, and the subcommands of the container
//! commands (CLIENT, CONFIG, COMMAND, FUNCTION).
//!
//! Kept apart from [`super::COMMAND_TABLE`] and looked up by name, so an entry added to the table needs
//! nothing here to work (it reports no key specs, only the categories its flags imply, group
//! `server`). The values for Redis's commands are Redis 7.0's (`src/commands/*.json`).

use bytes::Bytes;

use super::sort::sort_key_positions;
use super::{CommandError, CommandSpec};

/// One of Redis 7's key specifications: where a command's keys are and what it does with them.
/// Every keel command finds its keys by position (`begin_search` of type `index`, `find_keys`
/// of type `range`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Redis's key flags: `RO`, `RW`, `OW`, `RM`, then `access`, `update`, `insert`, `delete`,
    /// `variable_flags`.
    pub flags: &'static [&'static str],
    /// The position of the first key (the command name is 0).
    pub begin: i32,
    /// The last key, relative to `begin` (0: one key); negative: counted from the end (-1: the
    /// last argument).
    pub last_key: i32,
    pub key_step: i32,
}

const fn key(flags: &'static [&'static str]) -> KeySpec {
    KeySpec {
        flags,
        begin: 1,
        last_key: 0,
        key_step: 1,
    }
}

const fn keys_to_end(flags: &'static [&'static str], key_step: i32) -> KeySpec {
    KeySpec {
        flags,
        begin: 1,
        last_key: -1,
        key_step,
    }
}

const fn second_key(flags: &'static [&'static str]) -> KeySpec {
    KeySpec {
        flags,
        begin: 2,
        last_key: 0,
        key_step: 1,
    }
}

const RO: &[&str] = &["RO"];
const RO_ACCESS: &[&str] = &["RO", "access"];
const RW_ACCESS_UPDATE: &[&str] = &["RW", "access", "update"];
const RW_UPDATE: &[&str] = &["RW", "update"];
const OW_UPDATE: &[&str] = &["OW", "update"];
const OW_INSERT: &[&str] = &["OW", "insert"];
const RM_DELETE: &[&str] = &["RM", "delete"];
const RW_INSERT: &[&str] = &["RW", "insert"];
const RW_DELETE: &[&str] = &["RW", "delete"];
const RW_ACCESS_DELETE: &[&str] = &["RW", "access", "delete"];
/// A shard channel: named where a key would be (it picks the shard), but not a key.
const NOT_KEY: &[&str] = &["not_key"];

/// The key specifications of the command `name` (a name in [`super::COMMAND_TABLE`]); empty for a
/// command without keys.
#[expect(clippy::too_many_lines)]
pub fn key_specs(name: &str) -> &'static [KeySpec] {
    match name {
        "get" | "getrange" | "substr" | "getbit" | "bitcount" | "ttl" | "pttl" | "expiretime"
        | "pexpiretime" => const { &[key(RO_ACCESS)] },
        "strlen" | "type" => const { &[key(RO)] },
        "mget" => const { &[keys_to_end(RO_ACCESS, 1)] },
        "exists" | "touch" | "watch" => const { &[keys_to_end(RO, 1)] },
        "set" => const { &[key(&["RW", "access", "update", "variable_flags"])] },
        "incr" | "incrby" | "decr" | "decrby" | "incrbyfloat" | "getset" | "getex" | "setbit"
        | "cas" => const { &[key(RW_ACCESS_UPDATE)] },
        "append" => const { &[key(&["RW", "insert"])] },
        "setrange" | "expire" | "pexpire" | "expireat" | "pexpireat" | "persist" => {
            const { &[key(RW_UPDATE)] }
        }
        "setex" | "psetex" => const { &[key(OW_UPDATE)] },
        "setnx" => const { &[key(OW_INSERT)] },
        "mset" => const { &[keys_to_end(OW_UPDATE, 2)] },
        "msetnx" => const { &[keys_to_end(OW_INSERT, 2)] },
        "getdel" => const { &[key(RW_ACCESS_DELETE)] },
        "del" | "unlink" => const { &[keys_to_end(RM_DELETE, 1)] },
        "lcs" => {
            const {
                &[KeySpec {
                    flags: RO_ACCESS,
                    begin: 1,
                    last_key: 1,
                    key_step: 1,
                }]
            }
        }
        "rename" => const { &[key(RW_ACCESS_DELETE), second_key(OW_UPDATE)] },
        "renamenx" => const { &[key(RW_ACCESS_DELETE), second_key(OW_INSERT)] },
        "copy" => const { &[key(RO_ACCESS), second_key(OW_UPDATE)] },
        "move" => const { &[key(RW_ACCESS_DELETE)] },
        "lpush" | "rpush" | "lpushx" | "rpushx" | "linsert" | "sadd" => const { &[key(RW_INSERT)] },
        "lpop" | "rpop" | "spop" => const { &[key(RW_ACCESS_DELETE)] },
        "lset" | "hset" | "hmset" => const { &[key(RW_UPDATE)] },
        "lrem" | "ltrim" | "hdel" | "srem" => const { &[key(RW_DELETE)] },
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => {
            const {
                &[KeySpec {
                    flags: RW_ACCESS_DELETE,
                    begin: 1,
                    last_key: -2,
                    key_step: 1,
                }]
            }
        }
        "rpoplpush" | "lmove" | "smove" | "brpoplpush" | "blmove" => {
            const { &[key(RW_ACCESS_DELETE), second_key(RW_INSERT)] }
        }
        "hsetnx" => const { &[key(RW_INSERT)] },
        "hincrby" | "hincrbyfloat" => const { &[key(RW_ACCESS_UPDATE)] },
        "llen" | "hlen" | "hexists" | "hstrlen" | "scard" | "sismember" | "smismember" => {
            const { &[key(RO)] }
        }
        "lrange" | "lindex" | "lpos" | "hget" | "hmget" | "hgetall" | "hkeys" | "hvals"
        | "smembers" => const { &[key(RO_ACCESS)] },
        "sinter" | "sunion" | "sdiff" => const { &[keys_to_end(RO_ACCESS, 1)] },
        "srandmember" | "sort_ro" => const { &[key(RO_ACCESS)] },
        // STORE's destination is found by keyword (`get_keys`), as Redis's key spec does.
        "sort" => const { &[key(RO_ACCESS)] },
        "zadd" | "zincrby" => const { &[key(RW_UPDATE)] },
        "zrem" | "zremrangebyscore" | "zremrangebyrank" => const { &[key(RW_DELETE)] },
        "zpopmin" | "zpopmax" => const { &[key(RW_ACCESS_DELETE)] },
        "zcard" | "zcount" => const { &[key(RO)] },
        "zscore" | "zmscore" | "zrank" | "zrevrank" | "zrange" | "zrevrange" | "zrangebyscore"
        | "zrevrangebyscore" | "zrangebylex" | "zrevrangebylex" => const { &[key(RO_ACCESS)] },
        "object" | "memory" => const { &[second_key(RO)] },
        "xadd" => const { &[key(RW_INSERT)] },
        "xtrim" | "xdel" => const { &[key(RW_DELETE)] },
        "xsetid" | "xack" | "xclaim" | "xautoclaim" => const { &[key(RW_UPDATE)] },
        "xlen" => const { &[key(RO)] },
        "xrange" | "xrevrange" | "xpending" => const { &[key(RO_ACCESS)] },
        "xgroup" => const { &[second_key(RW_UPDATE)] },
        "xinfo" => const { &[second_key(RO_ACCESS)] },
        "spublish" => const { &[key(NOT_KEY)] },
        "ssubscribe" | "sunsubscribe" => const { &[keys_to_end(NOT_KEY, 1)] },
        "sinterstore" | "sunionstore" | "sdiffstore" => {
            const {
                &[
                    key(OW_UPDATE),
                    KeySpec {
                        flags: RO_ACCESS,
                        begin: 2,
                        last_key: -1,
                        key_step: 1,
                    },
                ]
            }
        }
        _ => const { &[] },
    }
}

/// What `COMMAND DOCS` reports besides the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Docs {
    /// One of Redis's groups: `string`, `generic`, `bitmap`, `server`, `connection`,
    /// `transactions`, `scripting`, `cluster`.
    pub group: &'static str,
    /// The Redis version that introduced the command, or keel's for its own.
    pub since: &'static str,
    pub complexity: &'static str,
    /// ACL categories given explicitly (without `@`); those the flags imply are added by
    /// [`acl_categories`].
    pub categories: &'static [&'static str],
}

/// keel's version, the `since` of keel's own commands.
const KEEL: &str = env!("CARGO_PKG_VERSION");

const fn docs(
    group: &'static str,
    since: &'static str,
    complexity: &'static str,
    categories: &'static [&'static str],
) -> Docs {
    Docs {
        group,
        since,
        complexity,
        categories,
    }
}

const STRING: &[&str] = &["string"];
const KEYSPACE: &[&str] = &["keyspace"];
const BITMAP: &[&str] = &["bitmap"];
const CONNECTION: &[&str] = &["connection"];
const TRANSACTION: &[&str] = &["transaction"];
const LIST: &[&str] = &["list"];
const HASH: &[&str] = &["hash"];
const SET: &[&str] = &["set"];
const ZSET: &[&str] = &["sortedset"];
const BLOCKING_LIST: &[&str] = &["list", "blocking"];
const BLOCKING_ZSET: &[&str] = &["sortedset", "blocking"];
const ON_KEYS_AND_COUNT: &str =
    "O(N+M) where N is the number of keys given and M the number of elements returned.";
const ON_ARGS: &str = "O(N) where N is the number of elements given.";
const ON_COUNT: &str = "O(N) where N is the number of elements returned.";
const ON_LIST: &str = "O(N) where N is the length of the list.";
const ON_SIZE: &str = "O(N) where N is the size of the collection.";
const ON_SETS: &str = "O(N) where N is the total number of members of the sets given.";
const O1: &str = "O(1)";
const ON_KEYS: &str = "O(N) where N is the number of keys given.";
const ON_ALL_KEYS: &str = "O(N) where N is the number of keys in the database.";
const ON_LENGTH: &str = "O(N) where N is the length of the value.";
const SORT_COMPLEXITY: &str = "O(N+M*log(M)) where N is the number of elements in the list or \
     set to sort, and M the number of returned elements.";

/// The documentation of `name` (a command or a `parent|sub` subcommand).
#[expect(clippy::too_many_lines)]
pub fn command_docs(name: &str) -> Docs {
    match name {
        "get" | "incr" | "decr" | "incrby" | "decrby" | "getset" => {
            docs("string", "1.0.0", O1, STRING)
        }
        "set" | "setnx" => docs("string", "1.0.0", O1, STRING),
        "setex" | "append" => docs("string", "2.0.0", O1, STRING),
        "psetex" | "incrbyfloat" => docs("string", "2.6.0", O1, STRING),
        "strlen" => docs("string", "2.2.0", O1, STRING),
        "setrange" => docs("string", "2.2.0", ON_LENGTH, STRING),
        "getrange" => docs("string", "2.4.0", ON_LENGTH, STRING),
        "substr" => docs("string", "1.0.0", ON_LENGTH, STRING),
        "getdel" | "getex" => docs("string", "6.2.0", O1, STRING),
        "mget" | "mset" | "msetnx" => docs("string", "1.0.0", ON_KEYS, STRING),
        "lcs" => docs(
            "string",
            "7.0.0",
            "O(N*M) where N and M are the lengths of the two values.",
            STRING,
        ),
        "cas" => docs("string", KEEL, ON_LENGTH, STRING),
        "setbit" | "getbit" => docs("bitmap", "2.2.0", O1, BITMAP),
        "bitcount" => docs("bitmap", "2.6.0", ON_LENGTH, BITMAP),
        "del" | "exists" => docs("generic", "1.0.0", ON_KEYS, KEYSPACE),
        "unlink" => docs("generic", "4.0.0", ON_KEYS, KEYSPACE),
        "touch" => docs("generic", "3.2.1", ON_KEYS, KEYSPACE),
        "expire" | "ttl" | "type" | "rename" | "renamenx" => docs("generic", "1.0.0", O1, KEYSPACE),
        "expireat" => docs("generic", "1.2.0", O1, KEYSPACE),
        "pexpire" | "pexpireat" | "pttl" => docs("generic", "2.6.0", O1, KEYSPACE),
        "persist" => docs("generic", "2.2.0", O1, KEYSPACE),
        "expiretime" | "pexpiretime" => docs("generic", "7.0.0", O1, KEYSPACE),
        "copy" => docs("generic", "6.2.0", O1, KEYSPACE),
        "move" => docs("generic", "1.0.0", O1, KEYSPACE),
        "swapdb" => docs("server", "4.0.0", "O(N) where N is the count of clients watching or blocking on keys from both databases.", KEYSPACE),
        // Picks a random position in the key map, then walks to the next key.
        "randomkey" => docs("generic", "1.0.0", ON_ALL_KEYS, KEYSPACE),
        "keys" => docs("generic", "1.0.0", ON_ALL_KEYS, &["keyspace", "dangerous"]),
        // Every call walks the keys (see docs/redis.md, "Where keel differs from Redis 7.0").
        "scan" => docs("generic", "2.8.0", ON_ALL_KEYS, KEYSPACE),
        "dbsize" => docs("server", "1.0.0", O1, KEYSPACE),
        "flushdb" | "flushall" => docs("server", "1.0.0", ON_ALL_KEYS, &["keyspace", "dangerous"]),
        "ping" | "echo" | "select" | "quit" | "auth" => docs("connection", "1.0.0", O1, CONNECTION),
        "hello" => docs("connection", "6.0.0", O1, CONNECTION),
        "client" => docs("connection", "2.4.0", "Depends on subcommand.", &[]),
        "client|setname" | "client|getname" => docs("connection", "2.6.9", O1, CONNECTION),
        "client|setinfo" => docs("connection", "7.2.0", O1, CONNECTION),
        "client|id" => docs("connection", "5.0.0", O1, CONNECTION),
        "client|info" => docs("connection", "6.2.0", O1, CONNECTION),
        "client|reply" => docs("connection", "3.2.0", O1, CONNECTION),
        "client|unblock" => docs("connection", "5.0.0", "O(log N) where N is the number of client connections.", CONNECTION),
        "client|list" | "client|kill" => docs(
            "connection",
            "2.4.0",
            "O(N) where N is the number of client connections.",
            CONNECTION,
        ),
        "command" => docs(
            "server",
            "2.8.13",
            "O(N) where N is the number of commands.",
            CONNECTION,
        ),
        "command|count" => docs("server", "2.8.13", O1, CONNECTION),
        "command|info" | "command|getkeys" => docs(
            "server",
            "2.8.13",
            "O(N) where N is the number of arguments.",
            CONNECTION,
        ),
        "command|docs" | "command|list" | "command|getkeysandflags" => docs(
            "server",
            "7.0.0",
            "O(N) where N is the number of arguments or commands.",
            CONNECTION,
        ),
        "config" => docs("server", "2.0.0", "Depends on subcommand.", &[]),
        "config|get" | "config|set" => docs(
            "server",
            "2.0.0",
            "O(N) where N is the number of parameters.",
            &[],
        ),
        "config|resetstat" => docs("server", "2.0.0", O1, &[]),
        "info" => docs("server", "1.0.0", O1, &["dangerous"]),
        "monitor" => docs("server", "1.0.0", O1, &["admin", "slow", "dangerous"]),
        "function" => docs("scripting", "7.0.0", "Depends on subcommand.", &[]),
        "function|flush" | "function|list" => docs("scripting", "7.0.0", O1, &["scripting"]),
        "eval" | "evalsha" => docs(
            "scripting",
            "2.6.0",
            "Depends on the script that is executed.",
            &["scripting"],
        ),
        "eval_ro" | "evalsha_ro" => docs(
            "scripting",
            "7.0.0",
            "Depends on the script that is executed.",
            &["scripting"],
        ),
        "script" => docs("scripting", "2.6.0", "Depends on subcommand.", &[]),
        "script|load" | "script|exists" | "script|flush" | "script|kill" => docs(
            "scripting",
            "2.6.0",
            "O(N) with N the number of bytes or scripts.",
            &["scripting"],
        ),
        "debug" => docs("server", "1.0.0", "Depends on subcommand.", &[]),
        "multi" | "exec" => docs("transactions", "1.2.0", O1, TRANSACTION),
        "discard" => docs(
            "transactions",
            "2.0.0",
            "O(N) where N is the number of queued commands.",
            TRANSACTION,
        ),
        "watch" => docs("transactions", "2.2.0", ON_KEYS, TRANSACTION),
        "unwatch" => docs("transactions", "2.2.0", O1, TRANSACTION),
        "raft.watchpoint" | "raft.watched" => docs("transactions", KEEL, O1, TRANSACTION),
        "raft.member" | "raft.transfer" => docs("cluster", KEEL, O1, &[]),
        "raft.snapshot" => docs(
            "cluster",
            KEEL,
            "O(N) where N is the size of the data.",
            &[],
        ),
        "raft.status" => docs("cluster", KEEL, O1, &[]),
        "lpush" | "rpush" => docs("list", "1.0.0", ON_ARGS, LIST),
        "lpushx" | "rpushx" => docs("list", "2.2.0", ON_ARGS, LIST),
        "lpop" | "rpop" => docs("list", "1.0.0", ON_COUNT, LIST),
        "llen" => docs("list", "1.0.0", O1, LIST),
        "lset" | "lindex" => docs("list", "1.0.0", ON_LIST, LIST),
        "lrem" | "ltrim" | "lrange" => docs("list", "1.0.0", ON_LIST, LIST),
        "linsert" => docs("list", "2.2.0", ON_LIST, LIST),
        "lpos" => docs("list", "6.0.6", ON_LIST, LIST),
        "rpoplpush" => docs("list", "1.2.0", O1, LIST),
        "lmove" => docs("list", "6.2.0", O1, LIST),
        "blpop" | "brpop" => docs("list", "2.0.0", ON_KEYS, BLOCKING_LIST),
        "brpoplpush" => docs("list", "2.2.0", O1, BLOCKING_LIST),
        "blmove" => docs("list", "6.2.0", O1, BLOCKING_LIST),
        "lmpop" => docs("list", "7.0.0", ON_KEYS_AND_COUNT, LIST),
        "blmpop" => docs("list", "7.0.0", ON_KEYS_AND_COUNT, BLOCKING_LIST),
        "bzpopmin" | "bzpopmax" => docs("sorted-set", "5.0.0", ON_KEYS, BLOCKING_ZSET),
        "zmpop" => docs("sorted-set", "7.0.0", ON_KEYS_AND_COUNT, ZSET),
        "bzmpop" => docs("sorted-set", "7.0.0", ON_KEYS_AND_COUNT, BLOCKING_ZSET),
        "raft.blocked" => docs("list", KEEL, ON_KEYS_AND_COUNT, BLOCKING_LIST),
        "hset" | "hget" | "hdel" | "hexists" => docs("hash", "2.0.0", O1, HASH),
        "hmset" | "hsetnx" | "hlen" | "hincrby" => docs("hash", "2.0.0", O1, HASH),
        "hmget" => docs("hash", "2.0.0", ON_ARGS, HASH),
        "hgetall" | "hkeys" | "hvals" => docs("hash", "2.0.0", ON_SIZE, HASH),
        "hincrbyfloat" => docs("hash", "2.6.0", O1, HASH),
        "hstrlen" => docs("hash", "3.2.0", O1, HASH),
        "sadd" | "srem" | "sismember" | "scard" | "smove" | "spop" => docs("set", "1.0.0", O1, SET),
        "smismember" => docs("set", "6.2.0", ON_ARGS, SET),
        "smembers" => docs("set", "1.0.0", ON_SIZE, SET),
        "sinter" | "sunion" | "sdiff" | "sinterstore" | "sunionstore" | "sdiffstore" => {
            docs("set", "1.0.0", ON_SETS, SET)
        }
        "sintercard" => docs("set", "7.0.0", ON_SETS, SET),
        "srandmember" => docs("set", "1.0.0", ON_SIZE, SET),
        "sort" => docs(
            "generic",
            "1.0.0",
            SORT_COMPLEXITY,
            &["set", "sortedset", "list", "dangerous"],
        ),
        "sort_ro" => docs(
            "generic",
            "7.0.0",
            SORT_COMPLEXITY,
            &["set", "sortedset", "list", "dangerous"],
        ),
        "zadd" | "zrem" | "zincrby" | "zscore" | "zcard" => {
            docs("sorted-set", "1.2.0", ON_SIZE, ZSET)
        }
        "zrank" | "zrevrank" | "zcount" => docs("sorted-set", "2.0.0", ON_SIZE, ZSET),
        "zrange" | "zrevrange" | "zrangebyscore" | "zremrangebyscore" => {
            docs("sorted-set", "1.2.0", ON_SIZE, ZSET)
        }
        "zrevrangebyscore" | "zremrangebyrank" => docs("sorted-set", "2.2.0", ON_SIZE, ZSET),
        "zrangebylex" | "zrevrangebylex" => docs("sorted-set", "2.8.9", ON_SIZE, ZSET),
        "zpopmin" | "zpopmax" => docs("sorted-set", "5.0.0", ON_SIZE, ZSET),
        "zmscore" => docs("sorted-set", "6.2.0", ON_ARGS, ZSET),
        "object" => docs("generic", "2.2.3", ON_SIZE, KEYSPACE),
        "memory" => docs("server", "4.0.0", ON_SIZE, &[]),
        "time" => docs("server", "2.6.0", O1, &["fast"]),
        "save" => docs(
            "server",
            "1.0.0",
            ON_ALL_KEYS,
            &["admin", "slow", "dangerous"],
        ),
        "shutdown" => docs("server", "1.0.0", O1, &["admin", "slow", "dangerous"]),
        _ => stream_docs(name),
    }
}

const STREAM: &[&str] = &["stream"];

/// The stream commands' documentation (Redis 7.0's), and keel's own commands' default.
fn stream_docs(name: &str) -> Docs {
    let on_count = "O(N) with N being the number of elements being returned.";
    match name {
        "xadd" | "xlen" | "xsetid" => docs("stream", "5.0.0", O1, STREAM),
        "xrange" | "xrevrange" | "xread" | "xreadgroup" | "xinfo" | "xpending" => {
            docs("stream", "5.0.0", on_count, STREAM)
        }
        "xtrim" | "xdel" | "xack" | "xclaim" => docs("stream", "5.0.0", ON_ARGS, STREAM),
        "xgroup" => docs("stream", "5.0.0", "Depends on subcommand.", STREAM),
        "xautoclaim" => docs("stream", "6.2.0", "O(1) if COUNT is small.", STREAM),
        _ => pubsub_docs(name),
    }
}

const PUBSUB: &[&str] = &["pubsub"];

/// The pub/sub commands' documentation (Redis 7.0's), and keel's own commands' default.
fn pubsub_docs(name: &str) -> Docs {
    let on_subscribers = "O(N+M) where N is the number of clients subscribed to the receiving \
                          channel and M is the total number of subscribed patterns.";
    let on_names = "O(N) where N is the number of channels or patterns named.";
    match name {
        "publish" => docs("pubsub", "2.0.0", on_subscribers, PUBSUB),
        "spublish" => docs("pubsub", "7.0.0", on_subscribers, PUBSUB),
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" => {
            docs("pubsub", "2.0.0", on_names, PUBSUB)
        }
        "ssubscribe" | "sunsubscribe" => docs("pubsub", "7.0.0", on_names, PUBSUB),
        "pubsub" => docs("pubsub", "2.8.0", "Depends on subcommand.", &[]),
        "pubsub|channels" | "pubsub|numsub" => docs(
            "pubsub",
            "2.8.0",
            "O(N) where N is the number of active channels.",
            PUBSUB,
        ),
        "pubsub|numpat" => docs("pubsub", "2.8.0", O1, PUBSUB),
        "pubsub|shardchannels" | "pubsub|shardnumsub" => docs(
            "pubsub",
            "7.0.0",
            "O(N) where N is the number of active shard channels.",
            PUBSUB,
        ),
        "pubsub|help" => docs("pubsub", "6.2.0", O1, PUBSUB),
        _ => docs("server", KEEL, "", &[]),
    }
}

/// A subcommand of a container command: what `COMMAND LIST` names `parent|name` and `COMMAND
/// INFO` reports in its parent's tenth element.
#[derive(Clone, Copy, Debug)]
pub struct Subcommand {
    /// `parent|name`, lowercase.
    pub full_name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
}

const fn sub(full_name: &'static str, arity: i32, flags: &'static [&'static str]) -> Subcommand {
    Subcommand {
        full_name,
        arity,
        flags,
    }
}

const CLIENT_FLAGS: &[&str] = &["noscript", "loading", "stale"];
const CLIENT_ADMIN_FLAGS: &[&str] = &["admin", "noscript", "loading", "stale"];
const COMMAND_FLAGS: &[&str] = &["loading", "stale"];

const PUBSUB_FLAGS: &[&str] = &["pubsub", "loading", "stale"];

/// The subcommands keel answers, by parent, with Redis's arity and flags.
pub const SUBCOMMANDS: &[Subcommand] = &[
    sub("client|setname", 3, CLIENT_FLAGS),
    sub("client|getname", 2, CLIENT_FLAGS),
    sub("client|setinfo", 4, CLIENT_FLAGS),
    sub("client|id", 2, CLIENT_FLAGS),
    sub("client|info", 2, CLIENT_FLAGS),
    sub("client|list", -2, CLIENT_ADMIN_FLAGS),
    sub("client|reply", 3, CLIENT_FLAGS),
    sub("client|kill", -3, CLIENT_ADMIN_FLAGS),
    sub("client|unblock", -3, CLIENT_ADMIN_FLAGS),
    sub("command|count", 2, COMMAND_FLAGS),
    sub("command|docs", -2, COMMAND_FLAGS),
    sub("command|info", -2, COMMAND_FLAGS),
    sub("command|list", -2, COMMAND_FLAGS),
    sub("command|getkeys", -4, COMMAND_FLAGS),
    sub("command|getkeysandflags", -4, COMMAND_FLAGS),
    sub("config|get", -3, CLIENT_ADMIN_FLAGS),
    sub("config|set", -4, CLIENT_ADMIN_FLAGS),
    sub("config|resetstat", 2, CLIENT_ADMIN_FLAGS),
    sub("function|flush", -2, &["noscript", "write"]),
    sub("function|list", -2, &["noscript"]),
    sub("pubsub|channels", -2, PUBSUB_FLAGS),
    sub("pubsub|numpat", 2, PUBSUB_FLAGS),
    sub("pubsub|numsub", -2, PUBSUB_FLAGS),
    sub("pubsub|shardchannels", -2, PUBSUB_FLAGS),
    sub("pubsub|shardnumsub", -2, PUBSUB_FLAGS),
    sub("pubsub|help", 2, &["loading", "stale"]),
    sub("script|load", 3, &["noscript", "stale"]),
    sub("script|exists", -3, &["noscript"]),
    sub("script|flush", -2, &["noscript"]),
    sub("script|kill", 2, &["noscript", "allow_busy"]),
];

/// Whether `name` has subcommands in [`SUBCOMMANDS`] (a quick test for the request path).
pub fn has_subcommands(name: &str) -> bool {
    matches!(
        name,
        "client" | "command" | "config" | "function" | "pubsub" | "script"
    )
}

/// The subcommands of `parent` (empty for a command without).
pub fn subcommands(parent: &str) -> impl Iterator<Item = &'static Subcommand> + '_ {
    SUBCOMMANDS.iter().filter(move |s| {
        s.full_name
            .split_once('|')
            .is_some_and(|(p, _)| p == parent)
    })
}

/// Redis's ACL categories, in the order Redis lists them.
const CATEGORY_ORDER: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The ACL categories of a command (or subcommand) named `name` with `flags`, as Redis reports
/// them (`@string`, ...): the explicit ones, and those the flags imply (`write`, `readonly`:
/// `@read`, `admin`: `@admin` and `@dangerous`, `fast`, else `@slow`).
pub fn acl_categories(name: &str, flags: &[&str]) -> Vec<&'static str> {
    let explicit = command_docs(name).categories;
    let has = |flag: &str| flags.contains(&flag);
    let implied = |category: &str| match category {
        "write" => has("write"),
        "read" => has("readonly") && !explicit.contains(&"scripting"),
        "admin" | "dangerous" => has("admin"),
        "fast" => has("fast"),
        "slow" => !has("fast") && !explicit.contains(&"fast"),
        _ => false,
    };
    CATEGORY_ORDER
        .iter()
        .filter(|c| explicit.contains(c) || implied(c))
        .map(|c| match *c {
            "keyspace" => "@keyspace",
            "read" => "@read",
            "write" => "@write",
            "string" => "@string",
            "bitmap" => "@bitmap",
            "admin" => "@admin",
            "fast" => "@fast",
            "slow" => "@slow",
            "dangerous" => "@dangerous",
            "connection" => "@connection",
            "transaction" => "@transaction",
            "list" => "@list",
            "hash" => "@hash",
            "set" => "@set",
            "sortedset" => "@sortedset",
            "stream" => "@stream",
            "scripting" => "@scripting",
            "pubsub" => "@pubsub",
            _ => "@other",
        })
        .collect()
}

/// Whether `category` (without `@`, any case) is one of Redis's ACL categories.
pub fn is_acl_category(category: &[u8]) -> bool {
    CATEGORY_ORDER
        .iter()
        .any(|c| c.as_bytes().eq_ignore_ascii_case(category))
}

/// A key `COMMAND GETKEYS` found: its position in the arguments and its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundKey {
    pub position: usize,
    pub flags: &'static [&'static str],
}

/// SET's flags without GET: it overwrites without reading (Redis's `setGetKeys`).
const SET_WITHOUT_GET: &[&str] = &["OW", "update"];
const SET_WITH_GET: &[&str] = &["RW", "access", "update"];

/// The keys of the commands that count them (`LMPOP numkeys key ...`), which no index-and-range
/// key spec describes; `None` for every other command.
fn numkeys_keys(name: &str, args: &[Bytes]) -> Option<Result<Vec<FoundKey>, CommandError>> {
    let numkeys_at = match name {
        "lmpop" | "zmpop" => 1,
        "blmpop" | "bzmpop" => 2,
        _ => return None,
    };
    let invalid = || CommandError::Unsupported("Invalid arguments specified for command");
    let count = args
        .get(numkeys_at)
        .and_then(|n| keel_resp::number::parse_i64(n))
        .filter(|n| *n > 0)
        .and_then(|n| usize::try_from(n).ok());
    Some(match count {
        Some(count) if numkeys_at + count < args.len() => Ok((1..=count)
            .map(|i| FoundKey {
                position: numkeys_at + i,
                flags: RW_ACCESS_DELETE,
            })
            .collect()),
        _ => Err(invalid()),
    })
}

/// XREAD's and XREADGROUP's keys: after STREAMS.
fn stream_keys(name: &str, args: &[Bytes]) -> Result<Vec<FoundKey>, CommandError> {
    let flags = if name == "xread" {
        RO_ACCESS
    } else {
        RW_UPDATE
    };
    super::streams::stream_key_positions(args)
        .map(|positions| {
            positions
                .map(|position| FoundKey { position, flags })
                .collect()
        })
        .ok_or(CommandError::Unsupported(
            "Invalid arguments specified for command",
        ))
}

/// `COMMAND GETKEYS` / `GETKEYSANDFLAGS`: the keys of the command `args` (its name first), in
/// Redis's words when there are none to find.
pub fn get_keys(args: &[Bytes]) -> Result<Vec<FoundKey>, CommandError> {
    let spec = args
        .first()
        .and_then(|name| CommandSpec::lookup(name))
        .ok_or(CommandError::Unsupported("Invalid command specified"))?;
    if let Some(found) = numkeys_keys(spec.name, args) {
        return found;
    }
    if spec.name == "xread" || spec.name == "xreadgroup" {
        return stream_keys(spec.name, args);
    }
    let specs = key_specs(spec.name);
    if specs.is_empty() {
        return Err(CommandError::Unsupported(
            "The command has no key arguments",
        ));
    }
    if !spec.arity_ok(args.len()) {
        return Err(CommandError::Unsupported(
            "Invalid number of arguments specified for command",
        ));
    }
    if spec.name == "sort" {
        let flags = |position| if position == 1 { RO_ACCESS } else { OW_UPDATE };
        return Ok(sort_key_positions(args)
            .into_iter()
            .map(|position| FoundKey {
                position,
                flags: flags(position),
            })
            .collect());
    }
    let argc = args.len() as i64;
    let mut found = Vec::new();
    for key_spec in specs {
        let first = i64::from(key_spec.begin);
        let last = if key_spec.last_key >= 0 {
            first + i64::from(key_spec.last_key)
        } else {
            argc + i64::from(key_spec.last_key)
        };
        let mut position = first;
        while position <= last {
            if position >= argc {
                return Err(CommandError::Unsupported(
                    "Invalid arguments specified for command",
                ));
            }
            let flags = if spec.name == "set" {
                let get = args[3.min(args.len())..]
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(b"get"));
                if get {
                    SET_WITH_GET
                } else {
                    SET_WITHOUT_GET
                }
            } else {
                key_spec.flags
            };
            found.push(FoundKey {
                position: position as usize,
                flags,
            });
            position += i64::from(key_spec.key_step);
        }
    }
    Ok(found)
}
