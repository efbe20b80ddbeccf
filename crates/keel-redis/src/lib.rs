//! keel-redis: the Redis data model of keel's server, without I/O.
//!
//! - [`command`]: requests as typed commands (the command table, parsing, validation), classified
//!   as write / read / local / admin.
//! - [`state_machine`]: the replicated state machine (ordered map of typed values, incremental
//!   digest, request-id deduplication, expiry, WATCH points, snapshots) and the log encoding of
//!   writes. The values themselves (lists, hashes, sets, sorted sets: structure, content hash,
//!   snapshot body, the operations on one value) are keel-redis-types', a module per family.
//! - [`script`]: EVAL and its kin: Lua 5.1 scripts, run against a view of the state machine.
//! - [`expiry`]: the leader's clock for keys with deadlines (time as an input).
//! - [`adapter`]: the state machine behind `keel_engine::StateMachine`, which the runtime and the
//!   simulator both drive.
//!
//! Nothing here uses tokio or a socket, so the deterministic simulator runs the same code as the
//! server (`keel-session` holds the per-connection protocol, `keel-server` the I/O).

pub mod adapter;
pub mod command;
pub mod expiry;
pub mod glob;
pub mod kind;
pub mod notify;
pub mod script;
pub mod slot;
pub mod state_machine;

pub use adapter::{FilledKeysListener, KeyEventsListener, KvAdapter, SmStats, SmStatsValue};
pub use command::{Command, CommandClass, QueuedCommand, ReadCommand, WriteCommand};
pub use state_machine::{
    ApplyReply, KvStateMachine, LogCommand, LoggedCommand, RequestId, WriteReply,
};

/// A deliberately broken variant of the Redis server's own code, for the simulator to catch (the
/// protocol's and the runtime's are `keel_core::Mutation`). Each is a branch the server runs too,
/// compiled out without the `mutations` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The state machine ignores request ids: a retried request applies twice.
    DedupOff,
    /// A forwarded request retried after a lost link is sent under a new request id.
    ForwardRetryNewId,
    /// The state machine runs a watched `EXEC` whatever happened to the watched keys.
    WatchIgnored,
    /// A node answers `LPOP k` and `RPOP k` from its own state, as a read, without proposing
    /// the pop: the element is delivered and stays in the list (keel-session's dispatch).
    PopWithoutProposing,
    /// A script's writes are proposed without watching the keys it touched (the script view):
    /// a write to them between the script's copy and its commit goes unseen.
    ScriptUnwatched,
}

impl Mutation {
    pub const ALL: [Mutation; 5] = [
        Mutation::DedupOff,
        Mutation::ForwardRetryNewId,
        Mutation::WatchIgnored,
        Mutation::PopWithoutProposing,
        Mutation::ScriptUnwatched,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutation::DedupOff => "dedup-off",
            Mutation::ForwardRetryNewId => "forward-retry-new-id",
            Mutation::WatchIgnored => "watch-ignored",
            Mutation::PopWithoutProposing => "pop-without-proposing",
            Mutation::ScriptUnwatched => "script-unwatched",
        }
    }

    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The Redis version keel reports in HELLO and INFO: the command semantics it follows, so that
/// clients which gate features on a version treat it as a modern server. keel's own version is in
/// `INFO server` as `keel_version`.
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";
