//! keel-kv: the replicated key-value server's pieces that need no consensus, plus `keel bench`.
//!
//! - [`resp`]: the Redis protocol, sans-IO: a bounded incremental request decoder and a RESP2/RESP3
//!   reply encoder (and a reply parser for clients).
//! - [`command`]: requests as typed commands, validated, classified as write / read / local /
//!   admin.
//! - [`connection`]: one client connection's protocol state (HELLO, CLIENT, CONFIG GET, COMMAND,
//!   INFO), handing writes, reads and admin commands back to the caller.
//! - [`forwarding`]: when a follower retries a write it forwarded to the leader, under which
//!   request id, and when it gives up (time as an input, no I/O).
//! - [`state_machine`]: the replicated state machine (ordered map, incremental digest, request-id
//!   deduplication, snapshots) and the log encoding of writes.
//! - [`adapter`]: the state machine behind `keel_engine::StateMachine`, which the runtime and the
//!   simulator both drive.
//! - `bench` (feature `cli`): the closed-loop RESP load generator behind `keel bench`.
//! - `server` (feature `cli`): the RESP server over `keel-runtime` behind `keel serve` and
//!   `keel up`.
//!
//! Without the `cli` feature nothing here uses tokio, so the deterministic simulator can run the
//! state machine and the protocol layer unchanged. The runtime (consensus, sockets) plugs in
//! around [`connection::ClientConnection`] and [`state_machine::KvStateMachine`].

pub mod adapter;
pub mod command;
pub mod connection;
pub mod expiry;
pub mod forwarding;
mod glob;
mod number;
pub mod resp;
pub mod script;
pub mod state_machine;

#[cfg(feature = "cli")]
pub mod bench;
#[cfg(feature = "cli")]
pub mod server;

pub use adapter::{KvAdapter, SmStats, SmStatsValue};
pub use command::{Command, CommandClass, QueuedCommand, ReadCommand, WriteCommand};
pub use connection::{ClientConnection, Dispatch, NodeInfo, NodeStatus, Transaction};
pub use resp::{Limits, ProtocolVersion, Reply};
pub use state_machine::{ApplyReply, KvStateMachine, LogCommand, LoggedCommand, WriteReply};
