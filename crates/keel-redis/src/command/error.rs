//! [`CommandError`]: every way a request can fail to be a valid command, each with the `-ERR`
//! text clients see (worded as Redis words it where clients depend on the text). Kept apart from
//! the command types because it is a long list of messages that grows with every command and
//! is read for its wording, not for the shape of a command.

use keel_engine::ClientError;

use keel_resp::Reply;

/// What a client is answered when the node could not produce a write's result: the runtime's
/// reason in Redis's words (`-TRYAGAIN` when trying again may succeed).
pub fn client_error_reply(error: &ClientError) -> Reply {
    match error {
        ClientError::NotLeader { .. } => Reply::error("TRYAGAIN no leader"),
        ClientError::Unknown => Reply::error("TRYAGAIN outcome unknown"),
        ClientError::Busy(what) => Reply::error(format!("TRYAGAIN busy: {what}")),
        ClientError::Rejected(why) => Reply::error(format!("ERR rejected: {why}")),
        ClientError::Shutdown => Reply::error("TRYAGAIN the node is shutting down"),
        ClientError::NotProposed => Reply::error("TRYAGAIN not proposed: the node was too busy"),
        // A variant added later: retrying is the safe default.
        _ => Reply::error(format!("TRYAGAIN {error}")),
    }
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
    /// Redis's words for a subcommand's options it cannot read (XGROUP, XINFO).
    #[error("ERR unknown subcommand or wrong number of arguments for '{subcommand}'. Try {command} HELP.")]
    SubcommandSyntax {
        command: &'static str,
        subcommand: String,
    },
    #[error("ERR Unrecognized XCLAIM option '{0}'")]
    UnrecognizedXClaimOption(String),
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
    /// A malformed or misplaced `RAFT.FORWARD` (see `raft_forward.rs`).
    #[error("ERR RAFT.FORWARD: {0}")]
    Forward(&'static str),
}

impl CommandError {
    pub fn to_reply(&self) -> keel_resp::Reply {
        keel_resp::Reply::error(self.to_string())
    }
}
