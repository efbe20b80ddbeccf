//! keel: Raft consensus for Rust, with its durable log and its runtime.
//!
//! Bring a deterministic [`StateMachine`]; keel replicates the entries you propose to a majority
//! of nodes, persists them in its write-ahead log (the commit index with them), applies them to
//! your state machine in one order on every node, snapshots it, and serves linearizable reads.
//! Nodes talk over TCP; with a cluster secret every connection is authenticated and sealed.
//!
//! A runnable example, three nodes of a replicated counter in one process, is
//! `examples/counter.rs` (`cargo run -p keel --example counter`); `examples/http_kv.rs` is a
//! key-value store with an HTTP API, one node per process.
//!
//! This crate is the one to depend on: it re-exports every type a node needs and nothing else.
//! The crates behind it (`keel-core`, the protocol without I/O; `keel-wal`, the log;
//! `keel-engine`, the node's decisions; `keel-transport`, the peer wire format; `keel-runtime`,
//! the tokio driver) are the implementation.
//!
//! # A node
//!
//! ```no_run
//! use bytes::Bytes;
//! use keel::{ApplyError, LogId, Node, NodeConfig, RestoreError, SnapshotWriter, StateMachine};
//!
//! /// Adds the little-endian u64 of each entry; answers the new total.
//! #[derive(Default)]
//! struct Counter(u64);
//!
//! impl StateMachine for Counter {
//!     fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
//!         let Ok(add) = data[..].try_into().map(u64::from_le_bytes) else {
//!             // Refused alike on every node; the state is unchanged.
//!             return Err(ApplyError::Refused(Bytes::from_static(b"not a u64")));
//!         };
//!         self.0 += add;
//!         Ok(Bytes::copy_from_slice(&self.0.to_le_bytes()))
//!     }
//!     fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
//!         Box::new(self.0.to_le_bytes().to_vec())
//!     }
//!     fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
//!         let mut bytes = [0u8; 8];
//!         data.read_exact(&mut bytes).map_err(|e| RestoreError(e.to_string()))?;
//!         self.0 = u64::from_le_bytes(bytes);
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Node 1 of a new cluster of one (a cluster of three lists three ids and their addresses).
//! let mut config = NodeConfig::new(1, 0x6b65656c, "data/node-1");
//! config.initial_members = vec![1];
//! let node = Node::start(config, Counter::default()).await?;
//!
//! let handle = node.handle();
//! let total = handle.propose(Bytes::copy_from_slice(&5u64.to_le_bytes())).await?;
//! assert_eq!(total[..], 5u64.to_le_bytes());
//! let read = handle.read(|counter: &Counter| counter.0).await?;
//! assert_eq!(read, 5);
//! node.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # What keel guarantees, and what it asks
//!
//! - A proposal that returns `Ok` was committed and applied exactly once, at one index, on every
//!   node that applies that index. [`ClientError`] says whether a failed one was certainly not
//!   applied (`NotLeader`, `Busy`) or may have been (`Unknown`: retry only with an id your state
//!   machine deduplicates, which [`sessions`] does for you). A request the node never took from
//!   its queue before its deadline is dropped there (`NotProposed`), never proposed later behind
//!   your back.
//! - [`Handle::propose_tracked`] returns the entry's [`LogId`] as soon as the leader appended it;
//!   whatever happens next, [`Handle::commit_status`] tells what became of it (`Committed` and
//!   `Overwritten` are final), also after the entry was compacted into a snapshot.
//! - A read runs on the leader's state after every write that completed before the read began.
//! - A node that cannot go on (its disk failed a write or an fsync, your state machine or keel
//!   panicked) stops whole and says why: [`Node::failed`] resolves with a [`NodeFailure`]. keel
//!   never exits your process; [`exit_on_failure`] is the one line that makes it do so.
//! - The state machine must be deterministic: the same entries in the same order give the same
//!   state and the same answers on every node (no clock, no randomness, no iteration over hash
//!   maps into results or snapshots).
//!
//! The guide for embedders (a node's life, what a state machine must guarantee, threads, errors
//! and retries, failures, upgrades) is `docs/embedding.md` in the repository; the design contract,
//! the failure model and the scenarios keel is tested against are `docs/DESIGN.md` and
//! `docs/SCENARIOS.md`.

#![deny(missing_docs)]

pub use keel_core::{CommitStatus, GroupId, Index, LogId, Membership, NodeId, Role, Term};
pub use keel_engine::{ApplyError, RestoreError, SnapshotWriter, StateMachine};
pub use keel_runtime::{
    exit_on_failure, ClientError, DeadlineTimer, Handle, Node, NodeConfig, NodeFailure, NodeStatus,
    Pending, ReplayStats, StartError, PROPOSE_BATCH_MAX,
};

pub use keel_runtime::sessions;

/// Node messages: an application's own bytes from one node to its peers over the peer
/// connections, never through the log, at most once, in send order per sender
/// ([`Handle::send_node_message`], [`Node::take_node_messages`]; docs/embedding.md, "Node
/// messages").
pub mod node_messages {
    pub use keel_runtime::node_messages::{NodeMessage, NodeMessageStats, NODE_MESSAGE_BYTES_MAX};
    pub use keel_transport::NodeMessageSent;
}

/// The Raft protocol's settings (election timeout, heartbeats, flow control, bounds): the
/// `raft` field of [`NodeConfig`].
pub use keel_core::Config as RaftConfig;
/// The peer transport's settings (cluster id and secret, frame bounds, queues): the
/// `transport` field of [`NodeConfig`].
pub use keel_transport::TransportConfig;
/// The write-ahead log's settings: the `wal` field of [`NodeConfig`].
pub use keel_wal::WalConfig;

/// The peer transport: keel's TCP transport is the default;
/// [`InProcessNetwork`](transport::InProcessNetwork) connects nodes of one process without
/// sockets (set `config.transport.connector`), with faults for tests (`isolate`, `heal`); an
/// embedder's own
/// transport implements [`PeerTransport`](transport::PeerTransport) and starts through a
/// [`Connector`](transport::Connector).
pub mod transport {
    pub use keel_core::{Message, MessageBody};
    pub use keel_engine::handshake::ConfigurationChange;
    pub use keel_transport::{
        ClientAddrs, Connector, InProcessNetwork, Inbound, NodeMessageSent, PeerTransport,
        SnapshotCounters, SnapshotTransferStats, Tcp, TransportError, TransportFuture,
    };
}

/// Your own log storage: the contract ([`Storage`](storage::Storage)), the in-memory
/// implementation, the records to store and the conformance suite that checks an
/// implementation in one call.
///
/// keel's own write-ahead log is what [`Node::start`] runs on, and the right choice unless the
/// log must live in a database you already run; [`Node::start_with_storage`] takes any
/// [`Storage`](storage::Storage). Snapshot files stay keel's either way (under the node's data
/// directory); the storage records which one is the newest. `examples/redb_storage.rs` is a
/// storage on redb that passes the suite.
pub mod storage {
    pub use keel_core::storage::{MemStorage, Never, Storage};
    pub use keel_core::{Entry, EntryPayload, HardState, RecoveredState, SnapshotMeta, Write};
    /// The conformance suite: `run_all(make, reopen)` checks a storage against the contract.
    pub use keel_wal::conformance;
    pub use keel_wal::records::{
        decode_entry, decode_hard_state, decode_snapshot_meta, encode_entry, encode_hard_state,
        encode_snapshot_meta, RecordError,
    };
}

// ---------------------------------------------------------------------------------------------
// Operations: what a node's process needs beyond the node itself (metrics, the background
// scrub, peer authentication, client addresses, the clock). keel's own Redis server
// (keel-server) depends on this crate alone for everything consensus-related, and takes these
// from here.
// ---------------------------------------------------------------------------------------------

// The metrics' names and descriptions and the histograms' buckets, for the recorder a process
// installs (the module's documentation says how).
pub use keel_runtime::metrics;

/// The background scrub of a node's data directory: its settings (the `scrub` field of
/// [`NodeConfig`]; off by default), what to do with damage it finds, and its counters
/// ([`Node::scrub_counters`]).
pub mod scrub {
    pub use keel_runtime::scrub::{OnDamage, ScrubConfig, ScrubCounters};
    /// Given to an [`OnDamage::Call`] callback.
    pub use keel_wal::ScrubPass;
    pub use keel_wal::{Damage, DamageKind};
}

pub use keel_transport::load_cluster_secret;
/// What [`TransportConfig::advertise_client_addr`] and [`Handle::set_client_addr`] require
/// of a client address.
pub use keel_transport::wire::valid_client_addr;
/// The cluster secret that authenticates and seals every peer connection: the
/// `cluster_secret` field of [`TransportConfig`] (from its bytes, or read from a file by
/// [`load_cluster_secret`]).
pub use keel_transport::wire::ClusterSecret;

/// A state machine that keeps time should take it from the entries, stamped with this clock
/// when proposed: it is the one `NodeConfig::clock_offset_ms_max` bounds across the cluster (a
/// node whose clock is further from its leader's does not campaign).
pub use keel_runtime::wall_clock_ms;
