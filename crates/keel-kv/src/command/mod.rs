//! Typed commands: a request's arguments become a [`Command`] after arity and argument checks,
//! with errors worded as Redis words them where clients depend on the text.
//!
//! Every command has a [`CommandClass`] that tells the server where it runs:
//!
//! | class | commands | where |
//! |---|---|---|
//! | [`CommandClass::Write`] | SET, DEL, UNLINK, INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, MSET, APPEND, SETRANGE, SETBIT, CAS, SETEX, PSETEX, SETNX, MSETNX, GETSET, GETDEL, GETEX (with an option), EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST, RENAME, RENAMENX, COPY, FLUSHDB, FLUSHALL; LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LSET, LREM, LTRIM, LINSERT, RPOPLPUSH, LMOVE; HSET, HMSET, HSETNX, HDEL, HINCRBY, HINCRBYFLOAT; SADD, SREM, SMOVE, SINTERSTORE, SUNIONSTORE, SDIFFSTORE, SPOP; SORT with STORE | proposed to the Raft log, applied by every replica's state machine |
//! | [`CommandClass::Read`] | GET, MGET, EXISTS, TOUCH, STRLEN, GETRANGE, SUBSTR, GETBIT, BITCOUNT, LCS, TYPE, DBSIZE, RANDOMKEY, KEYS, SCAN, TTL, PTTL, EXPIRETIME, PEXPIRETIME; LLEN, LRANGE, LINDEX; HGET, HMGET, HLEN, HEXISTS, HSTRLEN, HGETALL, HKEYS, HVALS; SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SINTER, SUNION, SDIFF, SINTERCARD; SORT without STORE, SORT_RO | linearizable read: served after a ReadIndex round, from the state machine |
//! | [`CommandClass::Local`] | PING, ECHO, HELLO, COMMAND, CLIENT, CONFIG GET, SELECT, QUIT, INFO, RAFT.STATUS | answered by the node that holds the connection |
//! | [`CommandClass::Admin`] | RAFT.MEMBER, RAFT.TRANSFER, RAFT.SNAPSHOT, DEBUG | executed by the runtime (membership changes go through the log as configuration entries, not as key-value commands) |
//! | [`CommandClass::Transaction`] | MULTI, EXEC, DISCARD, WATCH, UNWATCH | the connection queues commands between MULTI and EXEC; EXEC proposes them as one log entry ([`QueuedCommand`]) |
//!
//! `RAFT.FORWARD` is not in the table: nodes send it to each other on forwarding connections
//! (`forward.rs`), and to every other client it is an unknown command.

mod arguments;
mod collections;
mod forward;
pub mod metadata;
mod parse;
mod parse_keys;
mod parse_keyspace;
mod parse_strings;
mod sort;
mod zsets;

pub use arguments::{BitRange, BitUnit, FloatBits, LcsForm, ScanArgs, TypeFilter};
pub use collections::{
    CollectionRead, CollectionWrite, End, HSetReply, ObjectQuery, SetAlgebra, Typed,
    SRANDMEMBER_REPEATS_MAX,
};
pub use forward::{
    forward_request, is_forward, may_follow_forward, parse_forward, FORWARD, FORWARD_CLIENT_NAME,
};
pub use parse::ADDR_BYTES_MAX;
pub use sort::SortArgs;
pub use zsets::{parse_score, LexBound, ZAddCondition, ZRange, ZRangeBy, ZSetRead, ZSetWrite};

use bytes::Bytes;

use crate::resp::ProtocolVersion;

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
    /// FLUSHDB and FLUSHALL (one database): every key removed.
    FlushAll,
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

/// The command a deadline came from, for Redis's "invalid expire time in '<name>' command".
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
        )
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
    /// SCAN: one step of an iteration over the keys (`state_machine/keys.rs`).
    Scan(ScanArgs),
    /// `RAFT.WATCHPOINT` (what WATCH reads; a follower forwards it for its client's WATCH): the
    /// applied index and the log's time of the state read, `[index, time_ms]`.
    WatchPoint,
    /// A read of a list, hash or set (`collections.rs`).
    Collection(Typed<CollectionRead>),
}

/// A key a transaction watches, and the state it was watched at: the applied index and the
/// log's time of a linearizable read made by WATCH. EXEC aborts if the key changed after that
/// index or expired after that time (decided by the state machine: `state_machine/keyspace.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedKey {
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
}

/// Commands the node holding the connection answers itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalCommand {
    Ping(Option<Bytes>),
    Echo(Bytes),
    Hello(HelloArgs),
    Command(CommandQuery),
    Client(ClientCommand),
    /// `CONFIG GET pattern [pattern ...]`.
    ConfigGet(Vec<Bytes>),
    /// `CONFIG SET name value [name value ...]`, as given (checked when answered).
    ConfigSet(Vec<(Bytes, Bytes)>),
    /// `CONFIG RESETSTAT`: zeroes the counters INFO reports.
    ConfigResetStat,
    /// `SELECT 0` (any other index is rejected while parsing).
    Select,
    Quit,
    /// `INFO [section ...]`, sections as given.
    Info(Vec<Bytes>),
    RaftStatus,
    /// `FUNCTION FLUSH [ASYNC | SYNC]`: keel has no functions, so there is nothing to flush
    /// (`+OK`; Redis's test suite sends it before every group of tests).
    FunctionFlush,
    /// `FUNCTION LIST`: always empty.
    FunctionList,
    /// `TIME`: the node's wall clock, `[seconds, microseconds]`.
    Time,
    /// `SHUTDOWN [...]`: refused (a keel node is stopped by its process's signal).
    Shutdown,
    /// `MONITOR`: the connection is shown every command the node's clients run
    /// (`connection/monitor.rs`).
    Monitor,
    /// `AUTH [username] password`.
    Auth {
        user: Option<Bytes>,
        password: Bytes,
    },
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HelloArgs {
    /// None: keep the connection's protocol and just report.
    pub protover: Option<ProtocolVersion>,
    pub auth: Option<(Bytes, Bytes)>,
    pub setname: Option<Bytes>,
}

/// `COMMAND [COUNT | DOCS [name ...] | INFO [name ...] | LIST [FILTERBY ...] | GETKEYS ... |
/// GETKEYSANDFLAGS ...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandQuery {
    All,
    Count,
    Docs(Vec<Bytes>),
    Info(Vec<Bytes>),
    List(ListFilter),
    /// `GETKEYS` (`flags` false) or `GETKEYSANDFLAGS`: the command given, its name first.
    GetKeys {
        args: Vec<Bytes>,
        flags: bool,
    },
}

/// `COMMAND LIST`'s `FILTERBY`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ListFilter {
    #[default]
    All,
    /// `MODULE name`: keel has no modules, so nothing matches.
    Module(Bytes),
    /// `ACLCAT category` (without `@`).
    AclCategory(Bytes),
    /// `PATTERN glob`, matched against names and `parent|sub` names, case-insensitively.
    Pattern(Bytes),
}

/// The CLIENT subcommands we answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCommand {
    /// An empty name clears it.
    SetName(Bytes),
    GetName,
    SetInfo {
        attribute: ClientAttribute,
        value: Bytes,
    },
    Id,
    Info,
    /// `CLIENT LIST [TYPE type] [ID id ...]`.
    List(ClientFilter),
    /// `CLIENT REPLY ON | OFF | SKIP`: which of the connection's replies are sent.
    Reply(ReplyMode),
    /// `CLIENT KILL ip:port` (`+OK`, or an error if no connection has that address).
    KillAddr(String),
    /// `CLIENT KILL filter value [filter value ...]` (the number killed).
    Kill(KillFilters),
}

/// `CLIENT REPLY`'s modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    /// Every reply is sent (the default).
    On,
    /// No reply is sent, this one's included, until `CLIENT REPLY ON`.
    Off,
    /// This one's reply and the next request's are not sent.
    Skip,
}

/// CLIENT KILL's filters, all of which a connection must match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillFilters {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    /// `TYPE master | replica | pubsub`: keel has no such connections, so none matches.
    pub matches_none: bool,
    /// `SKIPME yes` (the default): the connection sending it is spared.
    pub skip_me: bool,
}

/// Which connections CLIENT LIST shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientFilter {
    #[default]
    All,
    /// `TYPE master | replica | pubsub`: keel has no such connections.
    None,
    /// `ID id ...`.
    Ids(Vec<u64>),
}

impl ClientFilter {
    pub fn admits(&self, id: u64) -> bool {
        match self {
            ClientFilter::All => true,
            ClientFilter::None => false,
            ClientFilter::Ids(ids) => ids.contains(&id),
        }
    }
}

/// `CLIENT SETINFO LIB-NAME | LIB-VER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAttribute {
    LibName,
    LibVersion,
}

/// Cluster administration, executed by the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    /// `RAFT.MEMBER ADD id peer-addr [LEARNER] [CLIENT client-addr]`.
    MemberAdd {
        id: u64,
        peer_addr: String,
        learner: bool,
        /// Where the new member's clients reach it (until it announces its own).
        client_addr: Option<String>,
    },
    /// `RAFT.MEMBER REMOVE id [FORCE]`: FORCE skips the check that the members left can still
    /// form a quorum.
    MemberRemove { id: u64, force: bool },
    /// `RAFT.TRANSFER id`.
    Transfer { id: u64 },
    /// `RAFT.SNAPSHOT` (the index it covers) and `SAVE` (`+OK`): take a snapshot now.
    Snapshot { save: bool },
    /// `DEBUG subcommand ...`: refused unless the node runs with `--enable-debug-command`
    /// (checked before the subcommand, as Redis does).
    Debug(DebugCommand),
}

/// `DEBUG` subcommands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DebugCommand {
    /// `DEBUG PANIC`: panics the node task, as a bug there would (a fail-stop test hook).
    Panic,
    /// Any other subcommand, as given: answered with an error once DEBUG is allowed.
    Unknown(String),
}

/// A request that is not a valid command. [`CommandError::to_reply`] gives the `-ERR` reply;
/// the connection stays open.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("ERR empty command")]
    Empty,
    /// Redis's wording, including the argument preview (`'a' 'b' `), which some tests match.
    #[error("ERR unknown command '{name}', with args beginning with: {args_preview}")]
    Unknown { name: String, args_preview: String },
    /// `name` is lowercase, `client|setname` for subcommands, as Redis reports it.
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(String),
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR syntax error")]
    Syntax,
    /// An argument Redis refuses in these words (after `ERR `).
    #[error("ERR {0}")]
    Invalid(&'static str),
    #[error("ERR unsupported option '{option}' for '{command}': {reason}")]
    UnsupportedOption {
        command: &'static str,
        option: String,
        reason: &'static str,
    },
    #[error("ERR unknown subcommand '{subcommand}'. Try {command} HELP.")]
    UnknownSubcommand {
        command: &'static str,
        subcommand: String,
    },
    #[error("ERR {0}")]
    Unsupported(&'static str),
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    #[error("ERR Protocol version is not an integer or out of range")]
    ProtocolVersionNotInteger,
    #[error("NOPROTO unsupported protocol version")]
    NoProto,
    #[error("ERR Syntax error in HELLO option '{0}'")]
    HelloSyntax(String),
    #[error("ERR Client names cannot contain spaces, newlines or special characters.")]
    InvalidClientName,
    #[error("ERR Unknown client type '{0}'")]
    UnknownClientType(String),
    #[error("ERR Invalid client ID")]
    InvalidClientId,
    #[error("ERR client-id should be greater than 0")]
    KillClientId,
    #[error("ERR No such user '{0}'")]
    NoSuchUser(String),
    #[error("ERR Unrecognized option '{0}'")]
    UnrecognizedOption(String),
    #[error("ERR MULTI calls can not be nested")]
    NestedMulti,
    #[error("ERR EXEC without MULTI")]
    ExecWithoutMulti,
    #[error("ERR DISCARD without MULTI")]
    DiscardWithoutMulti,
    #[error("EXECABORT Transaction discarded because of previous errors.")]
    ExecAbort,
    /// Redis's wording for commands flagged `no-multi`.
    #[error("ERR Command not allowed inside a transaction")]
    NotAllowedInMulti,
    /// Redis's wording; the transaction goes on.
    #[error("ERR WATCH inside MULTI is not allowed")]
    WatchInMulti,
    /// Redis's words: a monitor, like a replica, may not read or write keys.
    #[error("ERR Replica can't interact with the keyspace")]
    MonitorKeyspace,
    #[error("ERR RAFT.WATCHED without MULTI")]
    WatchedWithoutMulti,
    #[error("EXECABORT EXEC sent before WATCH was answered (in the same pipeline): the transaction is discarded; wait for WATCH's reply before EXEC")]
    ExecBeforeWatchAnswered,
    #[error("ERR transaction too large: more than {max} queued commands (multi-commands-max); the transaction is discarded at EXEC")]
    TooManyQueued { max: usize },
    #[error("ERR transaction too large: queued commands exceed {max} bytes (multi-bytes-max); the transaction is discarded at EXEC")]
    QueuedTooLarge { max: usize },
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR offset is out of range")]
    OffsetOutOfRange,
    #[error("ERR bit offset is not an integer or out of range")]
    BitOffsetOutOfRange,
    #[error("ERR bit is not an integer or out of range")]
    BitOutOfRange,
    #[error("ERR source and destination objects are the same")]
    SameObject,
    #[error("ERR If you want both the length and indexes, please just use IDX.")]
    LcsLengthAndRanges,
    #[error("ERR invalid cursor")]
    InvalidCursor,
    /// Redis's wording; the name is the command's, lowercase.
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpireTime(&'static str),
    #[error("ERR Unsupported option {0}")]
    UnsupportedExpireOption(String),
    #[error("ERR NX and XX, GT or LT options at the same time are not compatible")]
    ExpireNxAndOthers,
    #[error("ERR GT and LT options at the same time are not compatible")]
    ExpireGtAndLt,
    #[error("ERR invalid node id '{0}': expected a positive integer")]
    InvalidNodeId(String),
    #[error("ERR invalid peer address '{0}': expected host:port")]
    InvalidPeerAddr(String),
    #[error("ERR invalid client address '{0}': expected host:port")]
    InvalidClientAddr(String),
    /// A malformed or misplaced `RAFT.FORWARD` (see `forward.rs`).
    #[error("ERR RAFT.FORWARD: {0}")]
    Forward(&'static str),
}

impl CommandError {
    pub fn to_reply(&self) -> crate::resp::Reply {
        crate::resp::Reply::error(self.to_string())
    }
}

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
const CONN_FLAGS: &[&str] = &["loading", "stale", "fast"];
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
        spec("llen", 2, READ_FLAGS, ONE_KEY, Read),
        spec("lrange", 4, SLOW_READ_FLAGS, ONE_KEY, Read),
        spec("lindex", 3, SLOW_READ_FLAGS, ONE_KEY, Read),
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
        spec("raft.watched", -4, TX_FLAGS, NO_KEYS, Transaction),
    ]
};

#[cfg(test)]
mod tests;
