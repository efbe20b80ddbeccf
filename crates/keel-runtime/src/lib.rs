//! keel-runtime: the tokio driver around the sans-IO `keel_core::RaftNode` (docs/DESIGN.md section 2).
//!
//! - [`Node::start`]: recover from the WAL (or bootstrap), replay to the persisted commit index,
//!   then serve. A [`Handle`] proposes (with [`Handle::propose_tracked`], learning the entry's
//!   `LogId` at once, and [`Handle::commit_status`] to ask what became of it), reads
//!   linearizably, reports status, changes membership,
//!   transfers leadership and takes snapshots.
//! - The application supplies a [`StateMachine`] (apply, snapshot view, restore); bytes everywhere
//!   else.
//! - The peer transport is keel-transport's: [`keel_transport::wire`], the peer wire format
//!   (frames, handshake, message encoding), documented byte by byte, and
//!   [`keel_transport::Transport`], TCP peer connections with bounded queues, batching, reconnect
//!   and backoff.
//! - [`sessions`]: client sessions whose retries apply once ([`sessions::Deduplicated`] around
//!   the application's state machine, [`sessions::Session`] on the client side).
//!
//! A node that cannot go on (a storage error, a panic) stops alone and says why
//! ([`Node::failed`], [`NodeFailure`]); the library never exits the process ([`exit_on_failure`]
//! is the one line a process that wants fail-stop adds).
//!
//! Threads: the node task (tokio), the storage thread (group commit on the WAL), the apply
//! thread (the state machine). See `node/mod.rs` for the picture.

#![deny(missing_docs)]

mod apply;
mod event;
mod failure;
mod handle;
pub mod metrics;
mod node;
pub mod node_messages;
pub mod recover;
pub mod scrub;
pub mod sessions;
mod storage;

pub use apply::{SnapshotWriter, StateMachine};
pub use failure::NodeFailure;
pub use handle::{
    ClientError, DeadlineTimer, Handle, NodeStatus, NodeView, Pending, Proposal, ReplayStats,
    PROPOSE_BATCH_MAX,
};
pub use keel_core::Role;
pub use keel_core::{CommitStatus, LogId};
pub use keel_engine::{ApplyError, RestoreError};
pub use node::{exit_on_failure, wall_clock_ms, Node, NodeConfig, StartError};
