//! [`COMMAND_TABLE`]: every command keel knows, with its arity, flags, key positions and
//! [`CommandClass`], as `COMMAND` reports it and as the parser checks arity against it
//! ([`CommandSpec`]). Kept apart from the command types and the parser: it is a table of data,
//! one row a command, that a reader scans rather than follows.

use super::CommandClass;

/// What `COMMAND` reports about a command, and the arity the parser enforces.
#[derive(Clone, Copy, Debug)]
pub struct CommandSpec {
    /// Lowercase, as Redis reports names.
    pub name: &'static str,
    /// Redis's convention, counting the name: `n` means exactly n arguments, `-n` at least n.
    pub arity: i32,
    pub flags: &'static [&'static str],
    /// Positions of the keys (1-based; 0 when there are none; last -1 means "to the end").
    pub first_key: i32,
    pub last_key: i32,
    pub key_step: i32,
    pub class: CommandClass,
}

impl CommandSpec {
    /// Finds a command by name, case-insensitively.
    pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
        Self::index(name).map(|index| &COMMAND_TABLE[index])
    }

    /// The position of the command `name` in [`COMMAND_TABLE`], case-insensitively.
    pub fn index(name: &[u8]) -> Option<usize> {
        COMMAND_TABLE
            .iter()
            .position(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
    }

    pub(crate) fn arity_ok(&self, argc: usize) -> bool {
        let needed = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            argc == needed
        } else {
            argc >= needed
        }
    }
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    class: CommandClass,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        key_step: keys.2,
        class,
    }
}

const NO_KEYS: (i32, i32, i32) = (0, 0, 0);
const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
const ALL_KEYS: (i32, i32, i32) = (1, -1, 1);
const WRITE_FLAGS: &[&str] = &["write", "denyoom"];
const WRITE_FAST_FLAGS: &[&str] = &["write", "denyoom", "fast"];
const READ_FLAGS: &[&str] = &["readonly", "fast"];
/// Reads that take more than O(1) (a range, a scan of the keys).
const SLOW_READ_FLAGS: &[&str] = &["readonly"];
const TWO_KEYS: (i32, i32, i32) = (1, 2, 1);
const BLOCKING_FLAGS: &[&str] = &["write", "blocking"];
const BLOCKING_WRITE_FLAGS: &[&str] = &["write", "denyoom", "blocking"];
const BLOCKING_MOVABLE_FLAGS: &[&str] = &["write", "blocking", "movablekeys"];
const CONN_FLAGS: &[&str] = &["loading", "stale", "fast"];
const SCRIPT_FLAGS: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "may_replicate",
    "no_mandatory_keys",
    "movablekeys",
];
const SCRIPT_RO_FLAGS: &[&str] = &[
    "readonly",
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];
const PUBLISH_FLAGS: &[&str] = &["pubsub", "loading", "stale", "fast", "may_replicate"];
const SUBSCRIBE_FLAGS: &[&str] = &["pubsub", "noscript", "loading", "stale"];
const TX_FLAGS: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];

/// Every command keel knows, in the order `COMMAND` lists them.
pub const COMMAND_TABLE: &[CommandSpec] = {
    use CommandClass::{Admin, Local, Read, Transaction, Write};
    &[
        spec("get", 2, READ_FLAGS, ONE_KEY, Read),
        spec("set", -3, WRITE_FLAGS, ONE_KEY, Write),
        spec("del", -2, &["write"], ALL_KEYS, Write),
        spec("exists", -2, READ_FLAGS, ALL_KEYS, Read),
        spec("incr", 2, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("incrby", 3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("decr", 2, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("decrby", 3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("mget", -2, READ_FLAGS, ALL_KEYS, Read),
        spec("mset", -3, WRITE_FLAGS, (1, -1, 2), Write),
        spec("append", 3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("strlen", 2, READ_FLAGS, ONE_KEY, Read),
        spec("dbsize", 1, READ_FLAGS, NO_KEYS, Read),
        spec("cas", 4, WRITE_FLAGS, ONE_KEY, Write),
        spec("setex", 4, WRITE_FLAGS, ONE_KEY, Write),
        spec("psetex", 4, WRITE_FLAGS, ONE_KEY, Write),
        spec("setnx", 3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("msetnx", -3, WRITE_FLAGS, (1, -1, 2), Write),
        spec("getset", 3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("getdel", 2, &["write", "fast"], ONE_KEY, Write),
        spec("getex", -2, &["write", "fast"], ONE_KEY, Write),
        spec("expire", -3, &["write", "fast"], ONE_KEY, Write),
        spec("pexpire", -3, &["write", "fast"], ONE_KEY, Write),
        spec("expireat", -3, &["write", "fast"], ONE_KEY, Write),
        spec("pexpireat", -3, &["write", "fast"], ONE_KEY, Write),
        spec("persist", 2, &["write", "fast"], ONE_KEY, Write),
        spec("ttl", 2, READ_FLAGS, ONE_KEY, Read),
        spec("pttl", 2, READ_FLAGS, ONE_KEY, Read),
        spec("expiretime", 2, READ_FLAGS, ONE_KEY, Read),
        spec("pexpiretime", 2, READ_FLAGS, ONE_KEY, Read),
        spec("incrbyfloat", 3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("setrange", 4, WRITE_FLAGS, ONE_KEY, Write),
        spec("setbit", 4, WRITE_FLAGS, ONE_KEY, Write),
        spec("getrange", 4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("substr", 4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("getbit", 3, READ_FLAGS, ONE_KEY, Read),
        spec("bitcount", -2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("lcs", -3, SLOW_READ_FLAGS, TWO_KEYS, Read),
        spec("rename", 3, &["write"], TWO_KEYS, Write),
        spec("renamenx", 3, &["write", "fast"], TWO_KEYS, Write),
        spec("copy", -3, WRITE_FLAGS, TWO_KEYS, Write),
        spec("unlink", -2, &["write", "fast"], ALL_KEYS, Write),
        spec("touch", -2, READ_FLAGS, ALL_KEYS, Read),
        spec("type", 2, READ_FLAGS, ONE_KEY, Read),
        spec("randomkey", 1, SLOW_READ_FLAGS, NO_KEYS, Read),
        spec("keys", 2, SLOW_READ_FLAGS, NO_KEYS, Read),
        spec("scan", -2, SLOW_READ_FLAGS, NO_KEYS, Read),
        spec("flushdb", -1, &["write"], NO_KEYS, Write),
        spec("swapdb", 3, &["write", "fast"], NO_KEYS, Write),
        spec("move", 3, &["write", "fast"], ONE_KEY, Write),
        spec("lpush", -3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("rpush", -3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("lpushx", -3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("rpushx", -3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("lpop", -2, &["write", "fast"], ONE_KEY, Write),
        spec("rpop", -2, &["write", "fast"], ONE_KEY, Write),
        spec("lset", 4, WRITE_FLAGS, ONE_KEY, Write),
        spec("lrem", 4, &["write"], ONE_KEY, Write),
        spec("ltrim", 4, &["write"], ONE_KEY, Write),
        spec("linsert", 5, WRITE_FLAGS, ONE_KEY, Write),
        spec("rpoplpush", 3, WRITE_FLAGS, TWO_KEYS, Write),
        spec("lmove", 5, WRITE_FLAGS, TWO_KEYS, Write),
        spec("lmpop", -4, &["write", "movablekeys"], NO_KEYS, Write),
        spec("blpop", -3, BLOCKING_FLAGS, (1, -2, 1), Write),
        spec("brpop", -3, BLOCKING_FLAGS, (1, -2, 1), Write),
        spec("brpoplpush", 4, BLOCKING_WRITE_FLAGS, TWO_KEYS, Write),
        spec("blmove", 6, BLOCKING_WRITE_FLAGS, TWO_KEYS, Write),
        spec("blmpop", -5, BLOCKING_MOVABLE_FLAGS, NO_KEYS, Write),
        spec("llen", 2, READ_FLAGS, ONE_KEY, Read),
        spec("lrange", 4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("lindex", 3, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("lpos", -3, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("hset", -4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("hmset", -4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("hsetnx", 4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("hdel", -3, &["write", "fast"], ONE_KEY, Write),
        spec("hincrby", 4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("hincrbyfloat", 4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("hget", 3, READ_FLAGS, ONE_KEY, Read),
        spec("hmget", -3, READ_FLAGS, ONE_KEY, Read),
        spec("hlen", 2, READ_FLAGS, ONE_KEY, Read),
        spec("hexists", 3, READ_FLAGS, ONE_KEY, Read),
        spec("hstrlen", 3, READ_FLAGS, ONE_KEY, Read),
        spec("hgetall", 2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("hkeys", 2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("hvals", 2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("sadd", -3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("srem", -3, &["write", "fast"], ONE_KEY, Write),
        spec("smove", 4, &["write", "fast"], TWO_KEYS, Write),
        spec("sinterstore", -3, WRITE_FLAGS, ALL_KEYS, Write),
        spec("sunionstore", -3, WRITE_FLAGS, ALL_KEYS, Write),
        spec("sdiffstore", -3, WRITE_FLAGS, ALL_KEYS, Write),
        spec("spop", -2, &["write", "fast"], ONE_KEY, Write),
        spec("smembers", 2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("sismember", 3, READ_FLAGS, ONE_KEY, Read),
        spec("smismember", -3, READ_FLAGS, ONE_KEY, Read),
        spec("scard", 2, READ_FLAGS, ONE_KEY, Read),
        spec("sinter", -2, SLOW_READ_FLAGS, ALL_KEYS, Read),
        spec("sunion", -2, SLOW_READ_FLAGS, ALL_KEYS, Read),
        spec("sdiff", -2, SLOW_READ_FLAGS, ALL_KEYS, Read),
        spec(
            "sintercard",
            -3,
            &["readonly", "movablekeys"],
            NO_KEYS,
            Read,
        ),
        spec("srandmember", -2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("zadd", -4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("zrem", -3, &["write", "fast"], ONE_KEY, Write),
        spec("zincrby", 4, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("zpopmin", -2, &["write", "fast"], ONE_KEY, Write),
        spec("zpopmax", -2, &["write", "fast"], ONE_KEY, Write),
        spec("zmpop", -4, &["write", "movablekeys"], NO_KEYS, Write),
        spec("bzpopmin", -3, BLOCKING_FLAGS, (1, -2, 1), Write),
        spec("bzpopmax", -3, BLOCKING_FLAGS, (1, -2, 1), Write),
        spec("bzmpop", -5, BLOCKING_MOVABLE_FLAGS, NO_KEYS, Write),
        spec("zremrangebyscore", 4, &["write"], ONE_KEY, Write),
        spec("zremrangebyrank", 4, &["write"], ONE_KEY, Write),
        spec("zscore", 3, READ_FLAGS, ONE_KEY, Read),
        spec("zmscore", -3, READ_FLAGS, ONE_KEY, Read),
        spec("zcard", 2, READ_FLAGS, ONE_KEY, Read),
        spec("zrank", 3, READ_FLAGS, ONE_KEY, Read),
        spec("zrevrank", 3, READ_FLAGS, ONE_KEY, Read),
        spec("zcount", 4, READ_FLAGS, ONE_KEY, Read),
        spec("zrange", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("zrevrange", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("zrangebyscore", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("zrevrangebyscore", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("zrangebylex", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("zrevrangebylex", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        // SORT is a write only with STORE (the parser decides); SORT_RO never is.
        spec(
            "sort",
            -2,
            &["write", "denyoom", "movablekeys"],
            ONE_KEY,
            Write,
        ),
        spec("sort_ro", -2, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("xadd", -5, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("xtrim", -4, &["write"], ONE_KEY, Write),
        spec("xdel", -3, &["write", "fast"], ONE_KEY, Write),
        spec("xsetid", -3, WRITE_FAST_FLAGS, ONE_KEY, Write),
        spec("xlen", 2, READ_FLAGS, ONE_KEY, Read),
        spec("xrange", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("xrevrange", -4, SLOW_READ_FLAGS, ONE_KEY, Read),
        // XREAD's and XREADGROUP's keys follow STREAMS (`metadata::get_keys` finds them).
        spec(
            "xread",
            -4,
            &["readonly", "blocking", "movablekeys"],
            NO_KEYS,
            Read,
        ),
        spec(
            "xreadgroup",
            -7,
            &["write", "blocking", "movablekeys"],
            NO_KEYS,
            Write,
        ),
        // XGROUP HELP is a read (the parser decides); every other subcommand is a write, and
        // CREATE and CREATECONSUMER may grow the data (`denyoom`, as Redis flags them).
        spec("xgroup", -2, WRITE_FLAGS, (2, 2, 1), Write),
        spec("xack", -4, &["write", "fast"], ONE_KEY, Write),
        spec("xpending", -3, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("xclaim", -6, &["write", "fast"], ONE_KEY, Write),
        spec("xautoclaim", -6, &["write", "fast"], ONE_KEY, Write),
        spec("xinfo", -2, SLOW_READ_FLAGS, (2, 2, 1), Read),
        spec("object", -2, SLOW_READ_FLAGS, (2, 2, 1), Read),
        spec("memory", -2, SLOW_READ_FLAGS, (2, 2, 1), Read),
        spec("time", 1, &["loading", "stale", "fast"], NO_KEYS, Local),
        spec(
            "save",
            1,
            &["admin", "noscript", "no_multi"],
            NO_KEYS,
            Admin,
        ),
        spec(
            "shutdown",
            -1,
            &["admin", "noscript", "loading", "stale", "no_multi"],
            NO_KEYS,
            Local,
        ),
        spec("flushall", -1, &["write"], NO_KEYS, Write),
        spec("ping", -1, &["fast", "stale"], NO_KEYS, Local),
        spec("echo", 2, &["fast"], NO_KEYS, Local),
        spec(
            "hello",
            -1,
            &["noscript", "loading", "stale", "fast", "no_auth"],
            NO_KEYS,
            Local,
        ),
        spec("command", -1, &["loading", "stale"], NO_KEYS, Local),
        spec(
            "client",
            -2,
            &["noscript", "loading", "stale"],
            NO_KEYS,
            Local,
        ),
        spec(
            "config",
            -2,
            &["admin", "noscript", "loading", "stale"],
            NO_KEYS,
            Local,
        ),
        spec("select", 2, CONN_FLAGS, NO_KEYS, Local),
        // Pub/sub never touches the log: each node answers it (keel-session's `pubsub`). A
        // shard channel is reported as a key (Redis's `not_key` key spec), as Redis does.
        spec("publish", 3, PUBLISH_FLAGS, NO_KEYS, Local),
        spec("spublish", 3, PUBLISH_FLAGS, ONE_KEY, Local),
        spec("subscribe", -2, SUBSCRIBE_FLAGS, NO_KEYS, Local),
        spec("psubscribe", -2, SUBSCRIBE_FLAGS, NO_KEYS, Local),
        spec("ssubscribe", -2, SUBSCRIBE_FLAGS, ALL_KEYS, Local),
        spec("unsubscribe", -1, SUBSCRIBE_FLAGS, NO_KEYS, Local),
        spec("punsubscribe", -1, SUBSCRIBE_FLAGS, NO_KEYS, Local),
        spec("sunsubscribe", -1, SUBSCRIBE_FLAGS, ALL_KEYS, Local),
        spec("pubsub", -2, &[], NO_KEYS, Local),
        spec(
            "quit",
            -1,
            &["noscript", "loading", "stale", "fast", "no_auth"],
            NO_KEYS,
            Local,
        ),
        spec("info", -1, &["loading", "stale"], NO_KEYS, Local),
        spec(
            "auth",
            -2,
            &["noscript", "loading", "stale", "fast", "no_auth"],
            NO_KEYS,
            Local,
        ),
        spec("raft.status", 1, &["loading", "stale"], NO_KEYS, Local),
        spec(
            "monitor",
            1,
            &["admin", "noscript", "loading", "stale"],
            NO_KEYS,
            Local,
        ),
        spec("function", -2, &["noscript"], NO_KEYS, Local),
        spec("eval", -3, SCRIPT_FLAGS, NO_KEYS, Local),
        spec("evalsha", -3, SCRIPT_FLAGS, NO_KEYS, Local),
        spec("eval_ro", -3, SCRIPT_RO_FLAGS, NO_KEYS, Local),
        spec("evalsha_ro", -3, SCRIPT_RO_FLAGS, NO_KEYS, Local),
        spec("script", -2, &["noscript"], NO_KEYS, Local),
        spec("raft.member", -3, &["admin"], NO_KEYS, Admin),
        spec("raft.transfer", 2, &["admin"], NO_KEYS, Admin),
        spec("raft.snapshot", 1, &["admin"], NO_KEYS, Admin),
        spec(
            "debug",
            -2,
            &["admin", "noscript", "loading", "stale"],
            NO_KEYS,
            Admin,
        ),
        spec("multi", 1, TX_FLAGS, NO_KEYS, Transaction),
        spec(
            "exec",
            1,
            &["noscript", "loading", "stale", "skip_slowlog"],
            NO_KEYS,
            Transaction,
        ),
        spec("discard", 1, TX_FLAGS, NO_KEYS, Transaction),
        spec("watch", -2, TX_FLAGS, ALL_KEYS, Transaction),
        spec("unwatch", 1, TX_FLAGS, NO_KEYS, Transaction),
        spec("raft.watchpoint", 1, READ_FLAGS, NO_KEYS, Read),
        // A blocked client's attempt to pop (`blocking.rs`): node to node, like RAFT.WATCHED.
        spec(
            "raft.blocked",
            -4,
            &["write", "movablekeys"],
            NO_KEYS,
            Write,
        ),
        spec("raft.watched", -4, TX_FLAGS, NO_KEYS, Transaction),
    ]
};
