//! The commands that never reach the state machine: [`LocalCommand`], answered by the node that
//! holds the connection (PING, HELLO, COMMAND, CLIENT, CONFIG, INFO, ...), with the argument
//! types of its subcommands, and [`AdminCommand`], cluster administration the runtime executes.
//! Kept apart from the write, read and transaction commands in `mod.rs`, which the log and the
//! state machine carry, because nothing here is replicated: these types only concern one node
//! and its connections.

use bytes::Bytes;

use keel_resp::ProtocolVersion;

/// Commands the node holding the connection answers itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalCommand {
    /// PUBLISH (`shard` false) or SPUBLISH: answered by the connection's pub/sub, which also
    /// runs it inside MULTI and from scripts, published when the transaction or script applies.
    Publish {
        shard: bool,
        channel: Bytes,
        message: Bytes,
    },
    /// SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs and PUBSUB: answered by the
    /// connection's pub/sub before parsing; refused inside scripts.
    PubSub,
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
    Select(u32),
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
    /// `EVAL`, `EVALSHA`, their `_RO` forms and `SCRIPT`: run by the node's script runner
    /// (`crate::script`), not answered by the connection.
    Script(super::ScriptCommand),
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
    /// `CLIENT UNBLOCK id [TIMEOUT | ERROR]`: 1 if client `id` of this node was blocked, and
    /// it is answered as on its timeout (or, `error`, with `-UNBLOCKED`); 0 otherwise.
    Unblock {
        id: u64,
        error: bool,
    },
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
