//! RESP, the Redis serialization protocol: requests in, replies out. Sans-IO: everything here works
//! on byte slices and buffers; the caller owns the socket.
//!
//! - [`Decoder`] / [`parse`]: client requests, both RESP arrays of bulk strings (what every client
//!   library sends) and inline commands (what `redis-cli` in some modes, telnet and `nc` send).
//!   Every size is bounded by [`Limits`] and checked *before* anything is allocated or buffered for
//!   it, so a hostile length prefix costs nothing.
//! - [`Reply`] / [`encode`]: replies in RESP2 or RESP3, chosen per connection by
//!   [`ProtocolVersion`] (`HELLO 3` switches a connection to RESP3, `HELLO 2` back).
//! - [`parse_reply`] / [`skip_reply`]: the client side, for `keel bench` and tests.

mod inline;
pub mod number;
mod reply;
mod reply_parse;
mod request;

pub use reply::{
    encode, encode_request, format_double, put_array_header, put_bulk, put_decimal_bulk, Reply,
};
pub use reply_parse::{parse_reply, skip_reply, ReplyKind};
pub use request::{parse, Decoder, Frame, FrameKind};

/// The reply encoding a connection speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProtocolVersion {
    /// RESP2: every connection starts here.
    #[default]
    Resp2,
    /// RESP3: after `HELLO 3`. Adds a real null, maps, sets, doubles, verbatim strings, and more
    /// types keel does not send.
    Resp3,
}

impl ProtocolVersion {
    /// The number `HELLO` reports as `proto`.
    pub fn number(self) -> i64 {
        match self {
            ProtocolVersion::Resp2 => 2,
            ProtocolVersion::Resp3 => 3,
        }
    }
}

/// Bounds on what one request may claim. Each is checked against the *declared* size before the
/// bytes are read or any memory is reserved for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (one argument). Redis allows 512 MiB; we choose 64 MiB because a value
    /// also travels through the Raft log, a snapshot and every replica's memory.
    pub bulk_bytes_max: usize,
    /// Most arguments in one request, the command name included. Redis allows 1M (`*1048576`);
    /// 65,536 is more than any MSET/MGET/DEL batch a client sends in practice.
    pub args_max: usize,
    /// Longest inline command line (the same 64 KiB as Redis).
    pub inline_bytes_max: usize,
    /// Largest encoded request as a whole (headers and all bulk strings): the most a connection
    /// ever needs to buffer for one request. Without it 65,536 arguments of 64 MiB could be claimed.
    pub request_bytes_max: usize,
    /// Most commands queued between MULTI and EXEC. Beyond it the command is refused with `-ERR`
    /// and the transaction is aborted (EXEC answers `-EXECABORT`). Kept at or below `args_max`:
    /// a forwarded EXEC's reply array is parsed with these limits.
    pub multi_commands_max: usize,
    /// Most bytes of arguments queued between MULTI and EXEC (all queued commands' arguments,
    /// names included, each counted with 32 bytes more for its bookkeeping): bounds the queue's
    /// memory and roughly the size of the transaction's one log entry. Beyond it, as for
    /// `multi_commands_max`.
    pub multi_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            bulk_bytes_max: 64 * 1024 * 1024,
            args_max: 65_536,
            inline_bytes_max: 64 * 1024,
            request_bytes_max: 128 * 1024 * 1024,
            multi_commands_max: 65_536,
            multi_bytes_max: 128 * 1024 * 1024,
        }
    }
}

/// Malformed or over-limit input. The server answers `-ERR Protocol error: <message>` and closes
/// that connection (and only that one): after a framing error the rest of the stream cannot be
/// trusted to start at a frame boundary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("invalid multibulk length: {count} arguments exceeds the limit of {max}")]
    TooManyArguments { count: u64, max: usize },
    #[error("expected '$', got '{}'", char::from(*.0).escape_default())]
    ExpectedBulk(u8),
    #[error("invalid bulk length")]
    InvalidBulkLength,
    #[error("invalid bulk length: {len} bytes exceeds the limit of {max}")]
    BulkTooLong { len: u64, max: usize },
    #[error("request of at least {len} bytes exceeds the limit of {max}")]
    RequestTooLarge { len: u64, max: usize },
    #[error("too big inline request: longer than {max} bytes")]
    InlineTooLong { max: usize },
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("expected CRLF after bulk data")]
    MissingCrlf,
    #[error("length line too long or not terminated by CRLF")]
    LengthLineTooLong,
    // Reply-side errors (client parsing only).
    #[error("unknown reply type byte '{}'", char::from(*.0).escape_default())]
    UnknownReplyType(u8),
    #[error("invalid length or integer in reply")]
    InvalidReplyNumber,
    #[error("reply nested deeper than {max} levels")]
    NestingTooDeep { max: usize },
}

impl ProtocolError {
    /// The reply a server sends before closing the connection, in Redis's wording.
    pub fn to_reply(&self) -> Reply {
        Reply::error(format!("ERR Protocol error: {self}"))
    }
}

#[cfg(test)]
mod tests;
