//! The TCP peer transport (docs/DESIGN.md section 5).
//!
//! - **Outbound**: one task and one connection per peer. Messages go into a bounded queue; when it
//!   is full the message is dropped and counted, never queued without limit: Raft retransmits
//!   (heartbeats, probes, Append retries), so a lost message costs a round trip, while an
//!   unbounded queue to a dead peer would cost the process its memory. The task writes every
//!   message queued so far in one `write_all` (batching), and reconnects with exponential backoff
//!   bounded by `reconnect_backoff_max_ms`. A write that stalls past `write_timeout_ms` (a peer
//!   that vanished without a reset) drops the connection. A large message goes out one part at
//!   a time (`wire/parts.rs`), with every queued message but Appends and InstallSnapshots (which
//!   keep their order) written between its parts.
//! - **Inbound**: a listener whose connections start with a handshake (wrong cluster id, version
//!   or required flags: the reason is logged, the connection closed). Message connections forward
//!   each decoded message into a bounded channel to the node task; a full channel pushes back on
//!   that connection's TCP stream. Garbage, a bad checksum or an oversize length closes that one
//!   connection. The handshake's decisions (cluster id, storage incarnation, the addresses to
//!   adopt) are keel-engine's `handshake` module ([`HandshakeGate`]), which the simulator runs
//!   per message. A connection whose message names another `from` than its handshake is closed.
//! - **Authentication** (with `TransportConfig::cluster_secret`): every connection, both channels,
//!   runs a mutual challenge-response in its handshake and then seals every frame both ways
//!   (`auth.rs`, `record.rs`; the exchange in `wire/auth.rs`). A peer that fails is refused
//!   before anything it sent is read, and only then are its announced addresses and incarnation
//!   adopted.
//! - **Snapshots** travel on a connection of their own (handshake channel `Snapshot`), chunked,
//!   checksummed and resumable (`snapshot.rs` moves the bytes; the decisions and the receiver's
//!   durable partial file are keel-engine's `transfer` module), so a large transfer never delays
//!   heartbeats or Appends.
//!
//! **Peer addresses.** A node knows the ones it was given (initial cluster, a membership change
//! run on it) and learns the rest from handshakes: every message connection announces the
//! sender's peer address in an extension record ([`TransportConfig::advertise_addr`], by default
//! the listener's address unless it is a wildcard), and a node that has no address for that peer
//! adopts it. Client addresses travel the same way ([`TransportConfig::advertise_client_addr`],
//! extension record 3) into the address book `client_addrs.rs` keeps ([`ClientAddrs`]).
//!
//! **Refusals.** A refused connection is told why before it is closed (the refusal frame, body
//! kind 8); the refusing side then shuts its write half and drains, so that the close is not a
//! reset that could discard the reason. The message connection is otherwise write-only; its read
//! half is watched for that frame alone. The refused node logs the reason at error level once
//! per peer and reason ([`Transport::refusal_from`]), so a wiped member says itself that it must
//! be removed and added back. From changed storage (S37), a member's messages that promise
//! nothing are heard; its first answer gets the connection refused with the reason.

#![deny(missing_docs)]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_core::{GroupId, Message, MessageBody, NodeId, SnapshotMeta, Term};
use keel_engine::handshake::{ConfigurationChange, HandshakeGate, Refusal};
use keel_wal::StdFs;

mod auth;
mod client_addrs;
mod in_process;
mod inbound;
mod node_messages;
mod peer;
mod record;
mod snapshot;
pub mod wire;

pub use auth::load_cluster_secret;
pub use client_addrs::ClientAddrs;
pub use in_process::InProcessNetwork;
pub use node_messages::NodeMessageSent;
use node_messages::{NodeBudget, QueuedNodeMessage};
pub use peer::{Connector, PeerTransport, Tcp, TransportFuture};
use record::{FrameWriter, RecordReader};
pub use snapshot::{discard_stale_partial, SnapshotCounters, SnapshotTransferStats};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

use crate::wire::{
    AuthError, Body, Channel, ClusterSecret, FrameHeader, Handshake, WireError,
    FRAME_HEADER_SIZE_BYTES, FRAME_SIZE_BYTES_MAX_DEFAULT,
};

/// Handshake frames are tiny; a larger one is refused before the cluster id is even read.
const HANDSHAKE_FRAME_BYTES_MAX: u32 = 8192;
/// Default bound on a message received in parts: an Append carrying the largest entry the
/// default WAL stores (80 MiB), with room to spare.
pub const MESSAGE_SIZE_BYTES_MAX_DEFAULT: u32 = 96 << 20;

/// What one node's transport needs: its identity, the cluster secret, and every bound and timeout.
/// [`TransportConfig::new`] gives the defaults; the node sets the rest before [`Transport::bind`].
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// The cluster's id: a peer whose handshake names another is refused.
    pub cluster_id: u64,
    /// This node's id, announced in every handshake.
    pub node_id: NodeId,
    /// The cluster secret (`None`: peers are not authenticated). With it every connection, both
    /// ways and on both channels, authenticates in its handshake and seals every frame after it;
    /// a peer without it (or with another) is refused before anything it says is read.
    pub cluster_secret: Option<ClusterSecret>,
    /// Bound on one frame on message connections, checked before allocating (at least
    /// `wire::MESSAGE_FRAME_BYTES_MAX`: larger messages arrive in parts).
    pub frame_size_bytes_max: u32,
    /// Bound on one message received in parts (an Append carrying a large entry), checked on its
    /// first part before anything is buffered.
    pub message_size_bytes_max: u32,
    /// This node's storage incarnation, announced in every handshake (0: none).
    pub incarnation: u64,
    /// The directory whose `peer-incarnations` file remembers the incarnations peers announced
    /// (`None`: in memory only).
    pub incarnations_dir: Option<PathBuf>,
    /// The peer address this node announces in its handshakes. `None`: the listener's address,
    /// unless it is a wildcard (0.0.0.0 / ::), in which case nothing is announced.
    pub advertise_addr: Option<SocketAddr>,
    /// Where this node's clients reach it, announced in its handshakes so that other members can
    /// forward to it while it leads (`None`: nothing announced). Must pass
    /// `wire::valid_client_addr`.
    pub advertise_client_addr: Option<String>,
    /// Where a receiving node keeps its one partial snapshot (its data directory; the node sets
    /// it). `None`: snapshot connections are refused.
    pub snapshot_dir: Option<PathBuf>,
    /// Bound on a whole snapshot this node accepts.
    pub snapshot_size_bytes_max: u64,
    /// Chunk size the sender uses.
    pub snapshot_chunk_size_bytes: u32,
    /// Bound on a chunk this node accepts, checked before allocating (at most
    /// `wire::SNAPSHOT_CHUNK_BYTES_LIMIT`).
    pub snapshot_chunk_size_bytes_max: u32,
    /// Unacknowledged chunks in flight per transfer: the sender's memory is about this many
    /// chunks.
    pub snapshot_window_chunks: usize,
    /// The receiver fsyncs its partial file and records the durable offset every this many
    /// bytes (and before answering an offer), bounding what a receiver crash costs.
    pub snapshot_sync_interval_bytes: u64,
    /// Bound on every wait of a transfer (a read, a write, an acknowledgement).
    pub snapshot_timeout_ms: u64,
    /// Sender pacing (0: unlimited), so a transfer need not saturate the link.
    pub snapshot_send_rate_bytes_per_sec: u64,
    /// Messages queued per peer before new ones are dropped.
    pub send_queue_messages_max: usize,
    /// Node messages queued per peer (beside the Raft messages) before new ones are dropped.
    pub node_message_queue_messages_max: usize,
    /// Bytes of node messages queued per peer before new ones are dropped.
    pub node_message_queue_bytes_max: usize,
    /// Messages written per `write_all`.
    pub batch_messages_max: usize,
    /// The first wait before reconnecting to a peer, in milliseconds; it doubles after each attempt
    /// that fails, and is back to this once a connection is made. Also the base of a snapshot
    /// transfer's resume backoff.
    pub reconnect_backoff_min_ms: u64,
    /// The longest wait between reconnection attempts, in milliseconds.
    pub reconnect_backoff_max_ms: u64,
    /// Bound on one TCP connect, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Bound on one write of a batch to a peer on a message connection, in milliseconds: a write
    /// stalled longer (a peer that vanished without a reset) drops the connection.
    pub write_timeout_ms: u64,
    /// Bound on each wait for a handshake frame, in milliseconds: an inbound connection's first
    /// frame, and with a cluster secret each reply of the authentication exchange, on both sides.
    pub handshake_timeout_ms: u64,
    /// Inbound connections still in their handshake (nothing about the peer is known yet): a
    /// new one beyond this closes the oldest, so that connections that never finish their
    /// handshake cannot keep a member's from getting through.
    pub handshakes_pending_max: usize,
    /// Inbound connections open at once; one more is closed at once.
    pub inbound_connections_max: usize,
    /// What carries this node's messages and snapshots: `None` is keel's TCP transport
    /// ([`Tcp`]); an [`InProcessNetwork`] connects nodes of one process without sockets; an
    /// embedder's own [`Connector`] starts its own [`PeerTransport`].
    pub connector: Option<Arc<dyn Connector>>,
}

impl TransportConfig {
    /// The defaults for node `node_id` of cluster `cluster_id`: no cluster secret, no advertised
    /// addresses, no incarnation, incarnations kept in memory only, and no snapshot directory, so
    /// snapshot connections are refused until the node sets one.
    pub fn new(cluster_id: u64, node_id: NodeId) -> Self {
        TransportConfig {
            cluster_id,
            node_id,
            cluster_secret: None,
            frame_size_bytes_max: FRAME_SIZE_BYTES_MAX_DEFAULT,
            message_size_bytes_max: MESSAGE_SIZE_BYTES_MAX_DEFAULT,
            advertise_addr: None,
            advertise_client_addr: None,
            incarnation: 0,
            incarnations_dir: None,
            snapshot_dir: None,
            snapshot_size_bytes_max: 16 << 30,
            snapshot_chunk_size_bytes: 1 << 20,
            snapshot_chunk_size_bytes_max: 16 << 20,
            snapshot_window_chunks: 4,
            snapshot_sync_interval_bytes: 16 << 20,
            snapshot_timeout_ms: 10_000,
            snapshot_send_rate_bytes_per_sec: 0,
            send_queue_messages_max: 4096,
            node_message_queue_messages_max: 4096,
            node_message_queue_bytes_max: 16 << 20,
            batch_messages_max: 256,
            reconnect_backoff_min_ms: 10,
            reconnect_backoff_max_ms: 1000,
            connect_timeout_ms: 1000,
            write_timeout_ms: 5000,
            handshake_timeout_ms: 5000,
            handshakes_pending_max: 64,
            inbound_connections_max: 1024,
            connector: None,
        }
    }
}

/// What the transport hands the node task. Messages and snapshots name their Raft group: the
/// node drops those of a group it does not host.
#[derive(Debug)]
#[non_exhaustive]
pub enum Inbound {
    /// A Raft message from a peer (its `from` is the node its connection's handshake named).
    Message {
        /// The Raft group the message belongs to.
        group: GroupId,
        /// The message.
        message: Message,
    },
    /// A whole snapshot from `from` (leader of `term`), verified and fsynced at `path` (a
    /// temporary name the WAL deletes on open); the node adopts it as its newest snapshot, then
    /// steps `InstallSnapshot`.
    Snapshot {
        /// The Raft group whose snapshot it is.
        group: GroupId,
        /// The leader that sent it.
        from: NodeId,
        /// The term the sender led when it offered the snapshot.
        term: Term,
        /// Position, membership and term history of the snapshot, from its file header.
        meta: SnapshotMeta,
        /// The received file, complete and fsynced.
        path: PathBuf,
    },
    /// A node message from `from` (the node its connection's handshake named): an application's
    /// bytes, at most `wire::NODE_MESSAGE_BYTES_MAX`, in the order `from` sent them.
    NodeMessage {
        /// The peer that sent it.
        from: NodeId,
        /// The message.
        message: Bytes,
    },
    /// `from` connected and says it is reached at `addr` (its handshake's advertised address).
    PeerAddress {
        /// The peer.
        from: NodeId,
        /// The peer address its handshake advertised.
        addr: SocketAddr,
    },
}

/// Why a connection, a handshake or a snapshot transfer failed. A connection's error closes that
/// connection only; the transport goes on.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A socket or file operation failed, or the peer closed the connection early: a lost
    /// connection, retried (a snapshot transfer resumes).
    #[error("I/O: {0}")]
    Io(io::Error),
    /// Authentication failed ([`AuthError`] says how): in the handshake (no or a wrong proof,
    /// only one side with a secret, another node answering), or on a sealed record after it (a
    /// tag that does not verify, an oversize record).
    #[error("authentication: {0}")]
    Auth(#[from] AuthError),
    /// The peer broke the wire format: garbage, a bad checksum, an oversize length, a wrong cluster
    /// id or version, an unknown required flag.
    #[error("protocol: {0}")]
    Wire(#[from] WireError),
    /// A wait ran past its bound; the string names the wait.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// No address is known for the node a snapshot was to be sent to.
    #[error("no address known for node {0}")]
    UnknownPeer(NodeId),
    /// The peer sent a frame the protocol does not allow at that point, or ended a stream where it
    /// had to say more; the string names what came.
    #[error("the peer sent a {0} where it was not expected")]
    Unexpected(&'static str),
    /// A definite refusal, by this node or by the peer, to go on with a connection or a snapshot
    /// transfer (a snapshot connection without chunked transfer, no snapshot directory, a later
    /// leader's transfer in progress, ...): reconnecting does not change it. The string says why.
    #[error("refused: {0}")]
    Refused(&'static str),
    /// The peer refused this node's connection and said why (its refusal frame).
    #[error("the peer refused this node's connection: {0}")]
    RefusedByPeer(String),
    /// A peer came back with another storage incarnation than this node remembers for it: it
    /// lost its state and may have forgotten its votes. Only its messages that promise nothing
    /// are heard; its first other one gets its connection refused with this.
    #[error(
        "node {node} came back with other storage (incarnation {got}, known {known}): it lost \
         its state and may have forgotten its votes; remove it and add it back as a new member"
    )]
    StorageChanged {
        /// The peer.
        node: NodeId,
        /// The incarnation this node remembers for it.
        known: u64,
        /// The incarnation its handshake announced.
        got: u64,
    },
}

impl From<io::Error> for TransportError {
    /// The record reader reports a bad tag through `io::Error` (it is an `AsyncRead`): it is an
    /// authentication failure, not a broken connection.
    fn from(e: io::Error) -> Self {
        match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<AuthError>())
        {
            Some(auth) => TransportError::Auth(*auth),
            None => TransportError::Io(e),
        }
    }
}

impl From<Refusal> for TransportError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::WrongCluster { expected, got } => {
                TransportError::Wire(WireError::WrongClusterId { expected, got })
            }
            Refusal::StorageChanged { node, known, got } => {
                TransportError::StorageChanged { node, known, got }
            }
        }
    }
}

/// The peer-incarnations file could not be rewritten: still enforced in memory; only a restart
/// of this node would forget it.
fn report_persist_error(gate: &mut HandshakeGate<StdFs>) {
    if let Some(e) = gate.incarnations().take_persist_error() {
        tracing::error!("cannot record peer incarnations: {e}");
    }
}

impl TransportError {
    /// What the refused peer is told. Never this cluster's id: an unauthenticated peer learns
    /// nothing it could use to pass the check next time (the refusing node logs the whole
    /// error). An authentication failure says only that.
    fn wire_reason(&self) -> String {
        match self {
            TransportError::Auth(AuthError::Required) => {
                "authentication failed: this node requires the cluster secret".into()
            }
            TransportError::Auth(AuthError::NotConfigured) => {
                "authentication failed: this node has no cluster secret".into()
            }
            TransportError::Auth(_) => "authentication failed".into(),
            TransportError::Wire(WireError::WrongClusterId { got, .. }) => {
                format!("wrong cluster id {got:#x}: not this cluster's")
            }
            other => other.to_string(),
        }
    }
}

/// What a peer's queue holds: a Raft message with its group, or a node message.
enum Outgoing {
    Raft(GroupId, Message),
    Node(QueuedNodeMessage),
}

struct Peer {
    addr: SocketAddr,
    queue: mpsc::Sender<Outgoing>,
    node_budget: Arc<NodeBudget>,
    task: JoinHandle<()>,
}

impl Peer {
    /// Whether the queue holds fewer than `send_queue_messages_max` Raft messages: the rest of
    /// its capacity is the node messages' share. (Counted from the queue's free capacity and
    /// the node messages held, which a racing send can change: off by a few at most.)
    fn has_raft_room(&self, c: &TransportConfig) -> bool {
        let queued = self.queue.max_capacity() - self.queue.capacity();
        queued.saturating_sub(self.node_budget.queued()) < c.send_queue_messages_max
    }
}

struct Shared {
    config: Arc<TransportConfig>,
    dropped_messages: AtomicU64,
    dropped_node_messages: AtomicU64,
    refused_connections: AtomicU64,
    snapshots: Arc<SnapshotCounters>,
    receiver: snapshot::SharedReceiver,
    /// The node's commit index: offers of snapshots at or below it are not needed.
    snapshot_floor: AtomicU64,
    /// The handshake decisions (keel-engine's), with the incarnations peers announced.
    gate: Mutex<HandshakeGate<StdFs>>,
    /// The last reason each peer gave for refusing this node's connections (one per peer).
    refusals: Mutex<HashMap<SocketAddr, String>>,
    client_addrs: Arc<ClientAddrs>,
}

/// The transport of one node. Dropping it closes the listener, its connections and every
/// outbound task.
pub struct Transport {
    shared: Arc<Shared>,
    peers: Mutex<HashMap<NodeId, Peer>>,
    local_addr: SocketAddr,
    listener: JoinHandle<()>,
}

impl Transport {
    /// Binds the peer listener and starts accepting. Inbound messages go to `inbound`.
    pub async fn bind(
        config: TransportConfig,
        listen: SocketAddr,
        inbound: mpsc::Sender<Inbound>,
    ) -> io::Result<Transport> {
        if (config.frame_size_bytes_max as usize) < wire::MESSAGE_FRAME_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "transport frame_size_bytes_max {} is below the frames peers send on message \
                     connections (up to {} bytes)",
                    config.frame_size_bytes_max,
                    wire::MESSAGE_FRAME_BYTES_MAX
                ),
            ));
        }
        let gate = HandshakeGate::load(
            config.cluster_id,
            config.node_id,
            StdFs,
            config.incarnations_dir.clone(),
        )?;
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let mut config = config;
        if config.advertise_addr.is_none() && !local_addr.ip().is_unspecified() {
            config.advertise_addr = Some(local_addr);
        }
        let client_addrs = Arc::new(ClientAddrs::default());
        if let Some(own) = &config.advertise_client_addr {
            if !wire::valid_client_addr(own) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("advertised client address {own:?} is not host:port"),
                ));
            }
            client_addrs.set(config.node_id, own);
        }
        let receiver = snapshot::shared_receiver(&config);
        let shared = Arc::new(Shared {
            client_addrs,
            config: Arc::new(config),
            dropped_messages: AtomicU64::new(0),
            dropped_node_messages: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            snapshots: Arc::default(),
            receiver,
            snapshot_floor: AtomicU64::new(0),
            gate: Mutex::new(gate),
            refusals: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(inbound::accept_loop(shared.clone(), listener, inbound));
        Ok(Transport {
            shared,
            peers: Mutex::new(HashMap::new()),
            local_addr,
            listener: task,
        })
    }

    /// The address the peer listener is bound to (the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Adds or re-addresses a peer.
    pub fn set_peer(&self, id: NodeId, addr: SocketAddr) {
        let mut peers = self.peers.lock().expect("peers lock");
        if peers.get(&id).is_some_and(|p| p.addr == addr) {
            return;
        }
        let c = &self.shared.config;
        // Node messages have their own share (`node_budget`): they never crowd out Raft's.
        let capacity = c.send_queue_messages_max + c.node_message_queue_messages_max;
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let node_budget = NodeBudget::new(
            c.node_message_queue_messages_max,
            c.node_message_queue_bytes_max,
        );
        let task = tokio::spawn(run_peer(self.shared.clone(), id, addr, rx));
        if let Some(old) = peers.insert(
            id,
            Peer {
                addr,
                queue: tx,
                node_budget,
                task,
            },
        ) {
            old.task.abort();
        }
    }

    /// The configuration changed: members that left may come back (added anew) with new
    /// storage, and only members' storage incarnations are remembered.
    pub fn configuration_changed(&self, change: &ConfigurationChange) {
        let mut gate = self.shared.gate.lock().expect("gate lock");
        gate.configuration_changed(change);
        report_persist_error(&mut gate);
    }

    /// Forgets the peer: its outbound task stops and the messages queued to it are dropped (not
    /// counted). Inbound connections from it are not closed.
    pub fn remove_peer(&self, id: NodeId) {
        if let Some(old) = self.peers.lock().expect("peers lock").remove(&id) {
            old.task.abort();
        }
    }

    /// The address messages to `id` go to; `None` for a node that is not a peer (never set or
    /// removed).
    pub fn peer_addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.peers
            .lock()
            .expect("peers lock")
            .get(&id)
            .map(|p| p.addr)
    }

    /// Queues `msg` (of `group`) for its destination without waiting; drops it (counted) if the
    /// queue is full or the peer unknown.
    pub fn send(&self, group: GroupId, msg: Message) {
        let peers = self.peers.lock().expect("peers lock");
        let sent = peers.get(&msg.to).is_some_and(|p| {
            p.has_raft_room(&self.shared.config)
                && p.queue.try_send(Outgoing::Raft(group, msg)).is_ok()
        });
        if !sent {
            self.shared.dropped_messages.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Queues the node message `message` (at most `wire::NODE_MESSAGE_BYTES_MAX` bytes: a
    /// longer one is dropped for every peer) for peer `to`, or for every peer with `None`,
    /// without waiting; drops it (counted) for a peer whose node message budget is spent or
    /// that is unknown.
    pub fn send_node_message(&self, to: Option<NodeId>, message: Bytes) -> NodeMessageSent {
        let peers = self.peers.lock().expect("peers lock");
        let mut sent = NodeMessageSent::default();
        let fits = message.len() <= wire::NODE_MESSAGE_BYTES_MAX;
        let mut offer = |peer: Option<&Peer>| {
            let queued = peer.filter(|_| fits).is_some_and(|p| {
                let reserved = p.node_budget.reserve(message.clone());
                reserved.is_some_and(|m| p.queue.try_send(Outgoing::Node(m)).is_ok())
            });
            if queued {
                sent.queued += 1;
            } else {
                sent.dropped += 1;
            }
        };
        match to {
            Some(id) => offer(peers.get(&id)),
            None => peers.values().for_each(|p| offer(Some(p))),
        }
        let dropped = sent.dropped as u64;
        (self.shared.dropped_node_messages).fetch_add(dropped, Ordering::Relaxed);
        sent
    }

    /// Node messages dropped because a peer's budget was spent, the peer unknown or the message
    /// too long (one per peer it was meant for).
    pub fn dropped_node_messages(&self) -> u64 {
        self.shared.dropped_node_messages.load(Ordering::Relaxed)
    }

    /// Messages dropped because a queue was full or the peer unknown.
    pub fn dropped_messages(&self) -> u64 {
        self.shared.dropped_messages.load(Ordering::Relaxed)
    }

    /// Inbound connections refused (handshake or frame errors).
    pub fn refused_connections(&self) -> u64 {
        self.shared.refused_connections.load(Ordering::Relaxed)
    }

    /// The reason the peer at `addr` last gave for refusing this node's connections (or why this
    /// node refused the peer's proof), if it did.
    pub fn refusal_from(&self, addr: SocketAddr) -> Option<String> {
        self.shared
            .refusals
            .lock()
            .expect("refusals lock")
            .get(&addr)
            .cloned()
    }

    /// The node finished handling the snapshot it was last handed (see
    /// `SnapshotReceiver::settled`).
    pub fn snapshot_settled(&self) {
        let mut receiver = self
            .shared
            .receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(r) = receiver.as_mut() {
            r.settled();
        }
    }

    /// Tells the receiving side the node's commit index: a snapshot offered at or below it is
    /// answered "not needed" (the core would ignore it) instead of being transferred.
    pub fn set_snapshot_floor(&self, commit: u64) {
        self.shared.snapshot_floor.store(commit, Ordering::Relaxed);
    }

    /// The members' client addresses (shared: it keeps learning after this call).
    pub fn client_addrs(&self) -> Arc<ClientAddrs> {
        self.shared.client_addrs.clone()
    }

    /// Snapshot transfer counters (shared: they keep counting after this call).
    pub fn snapshot_counters(&self) -> Arc<SnapshotCounters> {
        self.shared.snapshots.clone()
    }

    /// A future that streams the snapshot file at `path` (`group`'s, for `meta`, as leader of
    /// `term`) to `to` on a connection of its own, chunked and resuming after dropped connections. It
    /// resolves once the receiver holds the whole snapshot durably and handed it to its node;
    /// the receiver's core acknowledges through Raft (an AppendResponse).
    pub fn send_snapshot(
        &self,
        group: GroupId,
        to: NodeId,
        term: Term,
        meta: SnapshotMeta,
        path: PathBuf,
    ) -> impl std::future::Future<Output = Result<(), TransportError>> + Send + 'static {
        let addr = self.peer_addr(to);
        let config = self.shared.config.clone();
        let counters = self.shared.snapshots.clone();
        async move {
            let addr = addr.ok_or(TransportError::UnknownPeer(to))?;
            let destination = snapshot::Destination {
                group,
                to,
                addr,
                leader_term: term,
            };
            snapshot::send(config, counters, destination, meta, path).await
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.listener.abort();
        for (_, p) in self.peers.lock().expect("peers lock").drain() {
            p.task.abort();
        }
    }
}

/// The reading and writing halves of a peer connection, above the record layer.
pub(crate) type ConnReader = RecordReader<BufReader<OwnedReadHalf>>;
pub(crate) type ConnWriter = FrameWriter<OwnedWriteHalf>;

/// Bound on a record the connecting side reads (both channels): the accepting side writes only
/// refusals and, on snapshot connections, control frames, each sealed alone.
const RECORD_TO_INITIATOR_BYTES_MAX: u32 = REFUSAL_FRAME_BYTES_MAX + FRAME_HEADER_SIZE_BYTES as u32;

/// Bound on a record the accepting side reads on `channel`: a batch of frames (a sender stops
/// filling a record at `RECORD_FILL_BYTES`, so one frame may go past it), or a chunk header and
/// its data.
fn record_to_responder_bytes_max(c: &TransportConfig, channel: Channel) -> u32 {
    let header = FRAME_HEADER_SIZE_BYTES as u32;
    match channel {
        Channel::Messages => c
            .frame_size_bytes_max
            .saturating_add(header + wire::auth::RECORD_FILL_BYTES),
        Channel::Snapshot => c
            .snapshot_chunk_size_bytes_max
            .min(wire::SNAPSHOT_CHUNK_BYTES_LIMIT)
            .saturating_add(header + wire::SNAPSHOT_CONTROL_FRAME_BYTES_MAX),
    }
}

/// Connects to `peer` at `addr` and sends the handshake; with a cluster secret, authenticates
/// both ways before returning (the connection is then sealed).
async fn connect(
    c: &TransportConfig,
    peer: NodeId,
    addr: SocketAddr,
    channel: Channel,
) -> Result<(ConnReader, ConnWriter), TransportError> {
    let stream = timeout(
        Duration::from_millis(c.connect_timeout_ms),
        TcpStream::connect(addr),
    )
    .await
    .map_err(|_| TransportError::Timeout("connect"))??;
    stream.set_nodelay(true)?;
    let (rd, wr) = stream.into_split();
    let (mut rd, mut wr) = (
        RecordReader::plain(BufReader::new(rd)),
        FrameWriter::plain(wr),
    );
    let mut hello = Handshake::new(c.cluster_id, c.node_id, channel);
    if c.incarnation != 0 {
        hello = hello.with_incarnation(c.incarnation);
    }
    if let (Channel::Messages, Some(addr)) = (channel, c.advertise_addr) {
        hello = hello.with_advertised_addr(addr);
    }
    if let (Channel::Messages, Some(addr)) = (channel, &c.advertise_client_addr) {
        hello = hello.with_client_addr(addr);
    }
    match &c.cluster_secret {
        Some(secret) => {
            let limit = Duration::from_millis(c.handshake_timeout_ms);
            let max = RECORD_TO_INITIATOR_BYTES_MAX;
            auth::initiate(secret, hello, peer, &mut rd, &mut wr, limit, max).await?;
        }
        None => {
            wire::encode_handshake(&hello, wr.buf());
            wr.send().await?;
        }
    }
    Ok((rd, wr))
}

/// Logs why connections to `addr` fail when it needs an operator (a refusal, a failed
/// authentication): loud once per reason, quiet on every retry. Remembered for `refusal_from`.
fn note_refusal(shared: &Shared, addr: SocketAddr, error: &TransportError) {
    let reason = match error {
        TransportError::RefusedByPeer(reason) => reason.clone(),
        other => other.to_string(),
    };
    let mut refusals = shared.refusals.lock().expect("refusals lock");
    if refusals.get(&addr) != Some(&reason) {
        match error {
            TransportError::RefusedByPeer(_) => {
                tracing::error!(%addr, "the peer refuses this node: {reason}")
            }
            _ => tracing::error!(%addr, "the peer at this address failed {reason}"),
        }
        refusals.insert(addr, reason);
    } else {
        tracing::debug!(%addr, "the peer refuses this node: {reason}");
    }
}

/// One peer's outbound side: connect, pump the queue, reconnect with bounded backoff.
async fn run_peer(
    shared: Arc<Shared>,
    peer: NodeId,
    addr: SocketAddr,
    mut queue: mpsc::Receiver<Outgoing>,
) {
    let c = &shared.config;
    let mut backoff_ms = c.reconnect_backoff_min_ms;
    loop {
        match connect(c, peer, addr, Channel::Messages).await {
            Ok((rd, wr)) => {
                backoff_ms = c.reconnect_backoff_min_ms;
                match pump(c, rd, wr, &mut queue).await {
                    Ok(()) => return, // the transport is gone
                    Err(e @ (TransportError::RefusedByPeer(_) | TransportError::Auth(_))) => {
                        note_refusal(&shared, addr, &e)
                    }
                    Err(e) => tracing::debug!(%addr, "peer connection lost: {e}"),
                }
            }
            Err(e @ (TransportError::RefusedByPeer(_) | TransportError::Auth(_))) => {
                note_refusal(&shared, addr, &e)
            }
            Err(e) => tracing::trace!(%addr, "connect failed: {e}"),
        }
        sleep(Duration::from_millis(backoff_ms)).await;
        backoff_ms = (backoff_ms * 2).min(c.reconnect_backoff_max_ms);
        if queue.is_closed() {
            return;
        }
    }
}

/// Bound on the one frame a message connection can receive: a refusal.
const REFUSAL_FRAME_BYTES_MAX: u32 = 1 + 2 + wire::REFUSAL_REASON_BYTES_MAX as u32;

/// Writes queued messages until the queue closes (Ok) or the connection fails. The peer writes
/// nothing on this connection unless it refuses it (then its reason, and it closes), so the
/// read half is only watched for that.
///
/// A message too large for one frame goes out part by part, one part per write; before each
/// part, whatever was queued meanwhile and may overtake it (everything but Appends and
/// InstallSnapshots, which keep their order: see [`keeps_order`]) is written first, so a large
/// Append never holds a heartbeat back by more than one part. The messages that must wait are
/// held here, at most `send_queue_messages_max` of them; beyond that they wait in the queue.
async fn pump<R, W>(
    c: &TransportConfig,
    mut rd: RecordReader<R>,
    mut wr: FrameWriter<W>,
    queue: &mut mpsc::Receiver<Outgoing>,
) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let mut refusal = AbortOnDrop(tokio::spawn(async move {
        read_frame(&mut rd, REFUSAL_FRAME_BYTES_MAX).await
    }));
    let write_limit = Duration::from_millis(c.write_timeout_ms);
    let mut held: VecDeque<Outgoing> = VecDeque::new();
    let mut in_parts: Option<wire::OutgoingParts> = None;
    loop {
        if in_parts.is_none() && held.is_empty() {
            let first = tokio::select! {
                first = queue.recv() => match first {
                    Some(first) => first,
                    None => return Ok(()),
                },
                heard = &mut refusal.0 => return Err(how_the_peer_ended(heard)),
            };
            held.push_back(first);
        }
        // One write (and, when sealed, one record and one MAC) per batch.
        match &mut in_parts {
            Some(parts) => {
                overtake_parts(c, queue, &mut held, wr.buf());
                parts.encode_next(wr.buf());
                if parts.is_done() {
                    in_parts = None;
                }
            }
            None => {
                let mut batched = 0;
                while batched < c.batch_messages_max
                    && wr.pending_bytes() < wire::auth::RECORD_FILL_BYTES as usize
                {
                    let next = match held.pop_front() {
                        Some(next) => next,
                        None => match queue.try_recv() {
                            Ok(next) => next,
                            Err(_) => break,
                        },
                    };
                    batched += 1;
                    let (group, msg) = match next {
                        Outgoing::Raft(group, msg) => (group, msg),
                        Outgoing::Node(node) => {
                            wire::encode_node_message(&node.message, wr.buf());
                            continue;
                        }
                    };
                    if let Some(mut parts) = wire::encode_message_or_parts(group, &msg, wr.buf()) {
                        parts.encode_next(wr.buf());
                        in_parts = Some(parts);
                        break;
                    }
                }
            }
        }
        match timeout(write_limit, wr.send()).await {
            Err(_) => return Err(TransportError::Timeout("write")),
            Ok(Ok(())) => {}
            // A refusal may be why the write failed: it is read (or not) within a moment.
            Ok(Err(e)) => {
                return match timeout(Duration::from_millis(100), &mut refusal.0).await {
                    Ok(heard) => Err(how_the_peer_ended(heard)),
                    Err(_) => Err(e.into()),
                }
            }
        }
    }
}

/// While a message goes out in parts: encodes into `buf` what was queued meanwhile and may
/// overtake it, and holds back what must keep its order ([`keeps_order`]).
fn overtake_parts(
    c: &TransportConfig,
    queue: &mut mpsc::Receiver<Outgoing>,
    held: &mut VecDeque<Outgoing>,
    buf: &mut Vec<u8>,
) {
    let mut batched = 0;
    while batched < c.batch_messages_max && held.len() < c.send_queue_messages_max {
        let (group, msg) = match queue.try_recv() {
            Ok(Outgoing::Raft(group, msg)) => (group, msg),
            // Node messages keep their order among themselves, never behind a Raft message.
            Ok(Outgoing::Node(node)) => {
                wire::encode_node_message(&node.message, buf);
                batched += 1;
                continue;
            }
            Err(_) => break,
        };
        if keeps_order(&msg) {
            held.push_back(Outgoing::Raft(group, msg));
        } else if let Some(large) = wire::encode_message_or_parts(group, &msg, buf) {
            // Not expected (only Appends grow large); it waits its turn whole.
            drop(large);
            held.push_back(Outgoing::Raft(group, msg));
        } else {
            batched += 1;
        }
    }
}

/// Whether `msg` must not overtake a message being sent in parts: Appends must arrive in the
/// order the leader sent them (a follower refuses one that does not continue its log, and the
/// leader would have to probe), and an InstallSnapshot must not overtake the Appends before it.
fn keeps_order(msg: &Message) -> bool {
    matches!(
        msg.body,
        MessageBody::Append { .. } | MessageBody::InstallSnapshot { .. }
    )
}

/// What the peer's side of a message connection said before it ended.
fn how_the_peer_ended(
    heard: Result<Result<Option<Body>, TransportError>, tokio::task::JoinError>,
) -> TransportError {
    match heard {
        Ok(Ok(Some(Body::Refusal(reason)))) => TransportError::RefusedByPeer(reason),
        Ok(Ok(Some(_))) => TransportError::Unexpected("a frame from the receiving side"),
        Ok(Ok(None)) => TransportError::Io(io::ErrorKind::UnexpectedEof.into()),
        Ok(Err(e)) => e,
        Err(e) => TransportError::Io(io::Error::other(e)),
    }
}

/// Aborts the task when dropped: a task that serves a connection, a transfer or a node must
/// not outlive its owner (a stopped node keeps no transfer running).
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads one frame's body, checksum verified but not decoded; `Ok(None)` on a clean end of
/// stream before a frame starts. The length is checked against `bytes_max` before the body
/// buffer is allocated.
pub async fn read_frame_raw<R: AsyncRead + Unpin>(
    reader: &mut R,
    bytes_max: u32,
) -> Result<Option<Bytes>, TransportError> {
    let mut header = [0u8; FRAME_HEADER_SIZE_BYTES];
    let n = reader.read(&mut header[..1]).await?;
    if n == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut header[1..]).await?;
    let header = FrameHeader::parse(header, bytes_max)?;
    // Read into spare capacity, never zeroed first: zeroing a buffer the read overwrites anyway
    // (fresh memory, for a large Append) was a large share of receiving a frame.
    let len_bytes = header.len_bytes as usize;
    let mut body = BytesMut::with_capacity(len_bytes);
    let mut rest = (&mut *reader).take(len_bytes as u64);
    while body.len() < len_bytes {
        if rest.read_buf(&mut body).await? == 0 {
            return Err(TransportError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
    }
    header.verify(&body)?;
    Ok(Some(body.freeze()))
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a frame starts. The length is
/// checked against `bytes_max` before the body buffer is allocated.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    bytes_max: u32,
) -> Result<Option<Body>, TransportError> {
    match read_frame_raw(reader, bytes_max).await? {
        Some(body) => Ok(Some(wire::decode_body(body)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod node_message_tests;
#[cfg(test)]
mod tests;
