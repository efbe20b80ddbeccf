//! Typed commands: a request's arguments become a [`Command`] after arity and argument checks,
//! with errors worded as Redis words them where clients depend on the text.
//!
//! Every command has a [`CommandClass`] that tells the server where it runs:
//!
//! | class | commands | where |
//! |---|---|---|
//! | [`CommandClass::Write`] | SET, DEL, UNLINK, INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, MSET, APPEND, SETRANGE, SETBIT, CAS, SETEX, PSETEX, SETNX, MSETNX, GETSET, GETDEL, GETEX (with an option), EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST, RENAME, RENAMENX, COPY, FLUSHDB, FLUSHALL; LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LSET, LREM, LTRIM, LINSERT, RPOPLPUSH, LMOVE; HSET, HMSET, HSETNX, HDEL, HINCRBY, HINCRBYFLOAT; SADD, SREM, SMOVE, SINTERSTORE, SUNIONSTORE, SDIFFSTORE, SPOP; SORT with STORE; LMPOP, ZMPOP, the blocking pops (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP: outside MULTI the server waits and proposes `RAFT.BLOCKED` attempts, `blocking.rs`) | proposed to the Raft log, applied by every replica's state machine |
//! | [`CommandClass::Read`] | GET, MGET, EXISTS, TOUCH, STRLEN, GETRANGE, SUBSTR, GETBIT, BITCOUNT, LCS, TYPE, DBSIZE, RANDOMKEY, KEYS, SCAN, TTL, PTTL, EXPIRETIME, PEXPIRETIME; LLEN, LRANGE, LINDEX, LPOS; HGET, HMGET, HLEN, HEXISTS, HSTRLEN, HGETALL, HKEYS, HVALS; SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SINTER, SUNION, SDIFF, SINTERCARD; SORT without STORE, SORT_RO | linearizable read: served after a ReadIndex round, from the state machine |
//! | [`CommandClass::Local`] | PING, ECHO, HELLO, COMMAND, CLIENT, CONFIG GET, SELECT, QUIT, INFO, RAFT.STATUS; EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT (run by the node's script runner, `crate::script`) | answered by the node that holds the connection |
//! | [`CommandClass::Admin`] | RAFT.MEMBER, RAFT.TRANSFER, RAFT.SNAPSHOT, DEBUG | executed by the runtime (membership changes go through the log as configuration entries, not as key-value commands) |
//! | [`CommandClass::Transaction`] | MULTI, EXEC, DISCARD, WATCH, UNWATCH | the connection queues commands between MULTI and EXEC; EXEC proposes them as one log entry ([`QueuedCommand`]) |
//!
//! `RAFT.FORWARD` is not in the table: nodes send it to each other on forwarding connections
//! (`raft_forward.rs`), and to every other client it is an unknown command.
//!
//! Beside the table: the commands a node answers itself and the admin commands, never
//! replicated (`local.rs`); Redis-worded errors (`error.rs`); lists, hashes and sets
//! (`collections.rs`) and sorted sets (`zsets.rs`), and the pops that may block (`blocking.rs`), kept with the arguments they were parsed
//! from because the log carries them as such; SORT (`sort.rs`); the command table (`table.rs`)
//! and what COMMAND reports beyond it (`metadata.rs`); the parsers by family (`parse_keys.rs`,
//! `parse_strings.rs`, `parse_keyspace.rs`, with Redis's argument rules in `arguments.rs`).

mod arguments;
pub mod blocking;
mod collections;
mod error;
mod local;
pub mod metadata;
mod parse;
mod parse_keys;
mod parse_keyspace;
mod parse_strings;
mod raft_forward;
pub(crate) mod script;
mod sort;
mod stream_groups;
mod streams;
mod table;
mod zsets;

pub use arguments::{BitRange, BitUnit, FloatBits, LcsForm, ScanArgs, TypeFilter};
pub use collections::{
    CollectionRead, CollectionWrite, HSetReply, LPos, ObjectQuery, Typed, SRANDMEMBER_REPEATS_MAX,
};
pub use error::{client_error_reply, CommandError};
pub use local::{
    AdminCommand, ClientAttribute, ClientCommand, ClientFilter, CommandQuery, DebugCommand,
    HelloArgs, KillFilters, ListFilter, LocalCommand, ReplyMode,
};
pub use parse::ADDR_BYTES_MAX;
pub use raft_forward::{
    encode_forward_request, forward_request, is_forward, may_follow_forward, parse_forward,
    FORWARD, FORWARD_CLIENT_NAME,
};
pub use script::{ScriptCommand, ScriptSource, ScriptedExec};
pub use sort::SortArgs;
pub use stream_groups::{XGROUP_HELP, XINFO_HELP};
pub use streams::{GroupStart, PendingRange, ReadFrom, StreamRead, StreamWrite, XInfo, XRead};
pub use table::{CommandSpec, COMMAND_TABLE};
pub use zsets::{parse_score, LexBound, ZRange, ZRangeBy, ZSetRead, ZSetWrite};

use bytes::Bytes;

/// Where a command runs; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandClass {
    Write,
    Read,
    Local,
    Admin,
    Transaction,
}

/// A parsed, validated request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Write(WriteCommand),
    Read(ReadCommand),
    Local(LocalCommand),
    Admin(AdminCommand),
    Transaction(TransactionCommand),
}

impl Command {
    /// Parses a request (the command name first). Names are case-insensitive.
    pub fn parse(args: &[Bytes]) -> Result<Command, CommandError> {
        parse::parse(args)
    }

    pub fn class(&self) -> CommandClass {
        match self {
            Command::Write(_) => CommandClass::Write,
            Command::Read(_) => CommandClass::Read,
            Command::Local(_) => CommandClass::Local,
            Command::Admin(_) => CommandClass::Admin,
            Command::Transaction(_) => CommandClass::Transaction,
        }
    }
}

/// The commands that change state. These, with a request id, are what the Raft log carries
/// (encoding in [`crate::state_machine::LogCommand`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteCommand {
    Set {
        key: Bytes,
        value: Bytes,
        condition: SetCondition,
    },
    Del {
        keys: Vec<Bytes>,
    },
    /// INCR (delta 1), DECR (-1), INCRBY n, DECRBY n (-n).
    IncrBy {
        key: Bytes,
        delta: i64,
    },
    MSet {
        pairs: Vec<(Bytes, Bytes)>,
    },
    Append {
        key: Bytes,
        value: Bytes,
    },
    /// `CAS key expected new`: set `key` to `new` if its current value is exactly `expected`.
    Cas {
        key: Bytes,
        expected: Bytes,
        new: Bytes,
    },
    /// SET with an expiry option or GET (a plain SET is [`WriteCommand::Set`]), SETEX, PSETEX,
    /// GETSET.
    SetWith {
        key: Bytes,
        value: Bytes,
        condition: SetCondition,
        expiry: Expiry,
        /// GET: reply with the value replaced (or null), whether or not the condition held.
        get: bool,
        /// Which command it came from: named in an "invalid expire time" error.
        command: TtlCommand,
    },
    /// SETNX (one pair) and MSETNX: every pair is set if no key exists, else none; 1 or 0.
    MSetNx {
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// GETDEL: the value, and the key deleted.
    GetDel {
        key: Bytes,
    },
    /// GETEX with an option: the value, and the key's expiry changed ([`Expiry::Clear`] is
    /// PERSIST; without an option GETEX is a read, [`ReadCommand::Get`]).
    GetEx {
        key: Bytes,
        expiry: Expiry,
    },
    /// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: 1 if the deadline was set (or the key deleted, for
    /// a deadline already past), 0 if the key does not exist or the condition did not hold.
    Expire {
        key: Bytes,
        /// [`Expiry::AfterMs`] or [`Expiry::AtMs`]; may be zero or negative (deletes the key).
        deadline: Expiry,
        condition: ExpireCondition,
        command: TtlCommand,
    },
    /// PERSIST: 1 if a deadline was removed.
    Persist {
        key: Bytes,
    },
    /// FLUSHALL: every key of every database removed.
    FlushAll,
    /// FLUSHDB: every key of the entry's database removed.
    FlushDb,
    /// SWAPDB: the contents of two databases exchanged (`+OK`); every key of both counts as
    /// changed for WATCH.
    SwapDb {
        a: u32,
        b: u32,
    },
    /// MOVE: the key, with its deadline, moves to database `db` (1), unless it does not exist or
    /// `db` holds it already (0); `db` the entry's own database is an error.
    Move {
        key: Bytes,
        db: u32,
    },
    /// INCRBYFLOAT: the new value, as a bulk string; the deadline is kept.
    IncrByFloat {
        key: Bytes,
        delta: FloatBits,
    },
    /// SETRANGE: `value` written at byte `offset`, zero-padded; the new length. The deadline is
    /// kept.
    SetRange {
        key: Bytes,
        offset: u64,
        value: Bytes,
    },
    /// SETBIT: the bit at `offset` (bit 0 is the most significant bit of byte 0) set or
    /// cleared, zero-padded; the old bit. The deadline is kept.
    SetBit {
        key: Bytes,
        offset: u64,
        bit: bool,
    },
    /// RENAME (`+OK`) and RENAMENX (`only_if_absent`: 1 renamed, 0 `new_key` exists): the value
    /// and its deadline move to `new_key`.
    Rename {
        key: Bytes,
        new_key: Bytes,
        only_if_absent: bool,
    },
    /// COPY: 1 if copied (with its deadline), 0 if `source` does not exist or `destination` does
    /// and `replace` is false.
    Copy {
        source: Bytes,
        destination: Bytes,
        replace: bool,
        /// `DB n`: the destination's database (`None`: the entry's own).
        db: Option<u32>,
    },
    /// A command on a list, hash or set (`collections.rs`).
    Collection(Typed<CollectionWrite>),
}

/// A key's expiry as a write sets it. Deadlines are absolute: milliseconds since the Unix epoch
/// on the state machine's clock (the log time, `state_machine/mod.rs`), never a node's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expiry {
    /// No deadline: what a plain SET leaves (any deadline the key had is removed).
    #[default]
    Clear,
    /// KEEPTTL: the deadline the key had, if any.
    Keep,
    /// EX, PX, EXPIRE, PEXPIRE: this many ms after the time of the entry that applies it
    /// (T(i), computed when the entry applies, identical on every replica).
    AfterMs(i64),
    /// EXAT, PXAT, EXPIREAT, PEXPIREAT: this absolute deadline.
    AtMs(i64),
}

/// EXPIRE's NX / XX / GT / LT. A key without a deadline counts as expiring never (GT fails, LT
/// holds), as in Redis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpireCondition {
    #[default]
    Always,
    /// NX: only if the key has no deadline.
    IfNone,
    /// XX: only if the key has a deadline.
    IfSome,
    /// GT: only if the new deadline is later than the current one.
    IfLater,
    /// LT: only if the new deadline is earlier than the current one.
    IfEarlier,
    /// XX LT: only if the key has a deadline and the new one is earlier.
    IfEarlierWithDeadline,
}

/// The command a deadline came from, for Redis's "invalid expire time in '`<name>`' command".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlCommand {
    Set,
    SetEx,
    PSetEx,
    GetSet,
    GetEx,
    Expire,
    PExpire,
    ExpireAt,
    PExpireAt,
}

impl TtlCommand {
    pub const ALL: [TtlCommand; 9] = [
        TtlCommand::Set,
        TtlCommand::SetEx,
        TtlCommand::PSetEx,
        TtlCommand::GetSet,
        TtlCommand::GetEx,
        TtlCommand::Expire,
        TtlCommand::PExpire,
        TtlCommand::ExpireAt,
        TtlCommand::PExpireAt,
    ];

    /// Lowercase, as Redis names it in errors.
    pub fn name(self) -> &'static str {
        match self {
            TtlCommand::Set => "set",
            TtlCommand::SetEx => "setex",
            TtlCommand::PSetEx => "psetex",
            TtlCommand::GetSet => "getset",
            TtlCommand::GetEx => "getex",
            TtlCommand::Expire => "expire",
            TtlCommand::PExpire => "pexpire",
            TtlCommand::ExpireAt => "expireat",
            TtlCommand::PExpireAt => "pexpireat",
        }
    }

    /// Its code in the log and in remembered replies (`log_command.rs`, `snapshot.rs`).
    pub fn code(self) -> u8 {
        Self::ALL.iter().position(|&c| c == self).expect("in ALL") as u8
    }

    pub fn from_code(code: u8) -> Option<TtlCommand> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

/// What TTL, PTTL, EXPIRETIME and PEXPIRETIME report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlForm {
    /// TTL: seconds left (rounded as Redis rounds: to the nearest).
    RemainingSeconds,
    /// PTTL.
    RemainingMs,
    /// EXPIRETIME: the deadline in seconds since the epoch.
    AtSeconds,
    /// PEXPIRETIME.
    AtMs,
}

impl WriteCommand {
    /// Whether the command may make the data take more memory: refused past `maxmemory`, as
    /// Redis refuses the commands it flags `denyoom`.
    pub fn may_grow_memory(&self) -> bool {
        if let WriteCommand::Collection(typed) = self {
            return typed.op.may_grow_memory();
        }
        !matches!(
            self,
            WriteCommand::Del { .. }
                | WriteCommand::GetDel { .. }
                | WriteCommand::Expire { .. }
                | WriteCommand::Persist { .. }
                | WriteCommand::GetEx { .. }
                | WriteCommand::Rename { .. }
                | WriteCommand::FlushAll
                | WriteCommand::FlushDb
                | WriteCommand::SwapDb { .. }
                | WriteCommand::Move { .. }
        )
    }

    /// The database indexes the command names (SWAPDB, MOVE, COPY ... DB), which the connection
    /// checks against `databases`.
    pub fn databases_named(&self) -> Vec<u32> {
        match self {
            WriteCommand::SwapDb { a, b } => vec![*a, *b],
            WriteCommand::Move { db, .. } | WriteCommand::Copy { db: Some(db), .. } => vec![*db],
            _ => Vec::new(),
        }
    }
}

/// SET's NX / XX.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetCondition {
    #[default]
    Always,
    /// NX: only if the key does not exist.
    IfAbsent,
    /// XX: only if the key exists.
    IfPresent,
}

/// The commands that only read the key-value state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadCommand {
    Get {
        key: Bytes,
    },
    MGet {
        keys: Vec<Bytes>,
    },
    Exists {
        keys: Vec<Bytes>,
    },
    StrLen {
        key: Bytes,
    },
    DbSize,
    /// TTL, PTTL, EXPIRETIME, PEXPIRETIME: -2 for no such key, -1 for no deadline.
    Ttl {
        key: Bytes,
        form: TtlForm,
    },
    /// GETRANGE and SUBSTR: the bytes from `start` to `end` inclusive (negative: from the end).
    GetRange {
        key: Bytes,
        start: i64,
        end: i64,
    },
    /// GETBIT: the bit at `offset` (0 past the end).
    GetBit {
        key: Bytes,
        offset: u64,
    },
    /// BITCOUNT: the set bits of the value, or of a range of it.
    BitCount {
        key: Bytes,
        range: Option<BitRange>,
    },
    /// LCS: the longest common subsequence of two values (a missing key is the empty string).
    Lcs {
        key1: Bytes,
        key2: Bytes,
        form: LcsForm,
    },
    /// TYPE: `string`, or `none` for no such key.
    Type {
        key: Bytes,
    },
    /// RANDOMKEY: any key, or null when there is none.
    RandomKey,
    /// KEYS: every key matching a glob pattern.
    Keys {
        pattern: Bytes,
    },
    /// SCAN: one step of an iteration over the keys (`state_machine/keyspace_commands.rs`).
    Scan(ScanArgs),
    /// `RAFT.WATCHPOINT` (what WATCH reads; a follower forwards it for its client's WATCH): the
    /// applied index and the log's time of the state read, `[index, time_ms]`.
    WatchPoint,
    /// A read of a list, hash or set (`collections.rs`).
    Collection(Typed<CollectionRead>),
}

/// A key a transaction watches, and the state it was watched at: the applied index and the
/// log's time of a linearizable read made by WATCH. EXEC aborts if the key changed after that
/// index or expired after that time (decided by the state machine:
/// `state_machine/key_metadata.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedKey {
    /// The database the key was watched in.
    pub db: u32,
    pub key: Bytes,
    pub index: u64,
    pub time_ms: u64,
}

/// MULTI, EXEC, DISCARD, WATCH, UNWATCH: handled by the connection's transaction state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransactionCommand {
    Multi,
    Exec,
    Discard,
    /// `WATCH key [key ...]`: a linearizable read of the watch point, then the keys watched.
    Watch(Vec<Bytes>),
    /// `UNWATCH`: forgets the watched keys (`+OK`).
    Unwatch,
    /// `RAFT.WATCHED key index time_ms [...]` inside MULTI: the keys a follower's client
    /// watched, sent with the transaction it forwards (`forwarding.rs`).
    Watched(Vec<WatchedKey>),
}

/// A command queued between MULTI and EXEC: what a transaction log entry carries, executed in
/// order by the state machine as one entry (reads included, so they see the transaction's
/// earlier writes and nothing else in between).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueuedCommand {
    Write(WriteCommand),
    Read(ReadCommand),
    /// `PING` (`+PONG`); `PING message` is queued as [`QueuedCommand::Echo`].
    Ping,
    /// `ECHO message` / `PING message`: the message as a bulk string.
    Echo(Bytes),
    /// `SELECT db` inside MULTI: the commands after it run in database `db` (`+OK`).
    Select(u32),
}

#[cfg(test)]
mod tests;
