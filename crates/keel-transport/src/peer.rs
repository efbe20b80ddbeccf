//! The peer transport as a node sees it: [`PeerTransport`], what a running node asks of the
//! transport that carries its Raft messages and snapshots, and [`Connector`], what starts one
//! for a node. keel's TCP transport ([`crate::Transport`], with the cluster secret) is the
//! default; [`crate::InProcessNetwork`] connects nodes of one process without sockets (tests,
//! simulations of a cluster inside one program).
//!
//! What an implementation must guarantee:
//!
//! - `send` never blocks and never fails loudly: a message it cannot deliver (queue full, peer
//!   unknown or unreachable) is dropped and counted. Every message and snapshot travels with
//!   its Raft group ([`GroupId`]) and arrives with it: a transport is a node's, and the groups
//!   the node hosts share it. Raft tolerates loss, duplication and
//!   reordering of messages; it does not tolerate a message attributed to the wrong sender, so
//!   `Message::from` must be the node that sent it.
//! - What arrives is handed to the node through the `mpsc::Sender<Inbound>` the connector was
//!   given: `Inbound::Message` for messages, `Inbound::Snapshot` for a snapshot received whole
//!   (a complete, fsynced file in keel's snapshot format, under a temporary name
//!   `snapshot-*.snap.tmp` in the node's snapshot directory, `TransportConfig::snapshot_dir`).
//! - `send_node_message` (optional: the default carries none) queues an application's bytes for
//!   one peer or every peer, never blocking; a peer receives them as `Inbound::NodeMessage`, in
//!   the order sent while a connection lives. They are bounded per peer, lost (counted) when a
//!   bound is reached or a connection drops, and never retried.
//! - `send_snapshot` resolves once the receiver holds the whole snapshot durably and handed it
//!   to its node, or with an error (the node asks again later).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use keel_core::{GroupId, Message, NodeId, SnapshotMeta, Term};
use keel_engine::handshake::ConfigurationChange;
use tokio::sync::mpsc;

use crate::{
    ClientAddrs, Inbound, NodeMessageSent, SnapshotCounters, TransportConfig, TransportError,
};

/// A boxed future a transport returns (`send_snapshot`, `Connector::connect`).
pub type TransportFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A node's peer transport, running: see the module documentation for what it must guarantee.
pub trait PeerTransport: Send + Sync + 'static {
    /// The address peers reach this node at (the bound port when it bound port 0).
    fn local_addr(&self) -> SocketAddr;
    /// Adds or re-addresses a peer.
    fn set_peer(&self, id: NodeId, addr: SocketAddr);
    /// The address messages to `id` go to, if it is a peer.
    fn peer_addr(&self, id: NodeId) -> Option<SocketAddr>;
    /// The cluster's configuration changed (members that left may come back with new storage).
    fn configuration_changed(&self, change: &ConfigurationChange);
    /// Queues `msg` (of `group`) for `msg.to` without waiting; drops it (counted) when it cannot.
    fn send(&self, group: GroupId, msg: Message);
    /// Queues the node message `message` for `to`, or for every peer with `None`, without
    /// waiting; drops it (counted) where it cannot. The default carries none: every peer it was
    /// meant for is unknown to it, so it says nothing was queued.
    fn send_node_message(&self, to: Option<NodeId>, message: Bytes) -> NodeMessageSent {
        let _ = (to, message);
        NodeMessageSent::default()
    }
    /// Node messages dropped so far (budget spent, peer unknown, too long).
    fn dropped_node_messages(&self) -> u64 {
        0
    }
    /// Streams `group`'s snapshot file at `path` (for `meta`, sent as leader of `term`) to `to`.
    fn send_snapshot(
        &self,
        group: GroupId,
        to: NodeId,
        term: Term,
        meta: SnapshotMeta,
        path: PathBuf,
    ) -> TransportFuture<Result<(), TransportError>>;
    /// The node finished with the snapshot it was last handed (adopted or dropped it).
    fn snapshot_settled(&self);
    /// The node's commit index: a snapshot at or below it need not be received.
    fn set_snapshot_floor(&self, commit: u64);
    /// Messages dropped so far (queue full, peer unknown).
    fn dropped_messages(&self) -> u64;
    /// The members' application addresses, as announced (shared: it keeps learning).
    fn client_addrs(&self) -> Arc<ClientAddrs>;
    /// Snapshot transfer counters (shared: they keep counting).
    fn snapshot_counters(&self) -> Arc<SnapshotCounters>;
}

/// Starts a node's peer transport: binds or joins, and hands what arrives to `inbound`.
pub trait Connector: Send + Sync + std::fmt::Debug + 'static {
    /// The transport of the node `config.node_id`, listening at `listen` where that means
    /// something.
    fn connect(
        &self,
        config: TransportConfig,
        listen: SocketAddr,
        inbound: mpsc::Sender<Inbound>,
    ) -> TransportFuture<io::Result<Arc<dyn PeerTransport>>>;
}

/// keel's TCP transport ([`crate::Transport::bind`]), the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tcp;

impl Connector for Tcp {
    fn connect(
        &self,
        config: TransportConfig,
        listen: SocketAddr,
        inbound: mpsc::Sender<Inbound>,
    ) -> TransportFuture<io::Result<Arc<dyn PeerTransport>>> {
        Box::pin(async move {
            let transport = crate::Transport::bind(config, listen, inbound).await?;
            Ok(Arc::new(transport) as Arc<dyn PeerTransport>)
        })
    }
}

impl PeerTransport for crate::Transport {
    fn local_addr(&self) -> SocketAddr {
        crate::Transport::local_addr(self)
    }
    fn set_peer(&self, id: NodeId, addr: SocketAddr) {
        crate::Transport::set_peer(self, id, addr);
    }
    fn peer_addr(&self, id: NodeId) -> Option<SocketAddr> {
        crate::Transport::peer_addr(self, id)
    }
    fn configuration_changed(&self, change: &ConfigurationChange) {
        crate::Transport::configuration_changed(self, change);
    }
    fn send(&self, group: GroupId, msg: Message) {
        crate::Transport::send(self, group, msg);
    }
    fn send_node_message(&self, to: Option<NodeId>, message: Bytes) -> NodeMessageSent {
        crate::Transport::send_node_message(self, to, message)
    }
    fn dropped_node_messages(&self) -> u64 {
        crate::Transport::dropped_node_messages(self)
    }
    fn send_snapshot(
        &self,
        group: GroupId,
        to: NodeId,
        term: Term,
        meta: SnapshotMeta,
        path: PathBuf,
    ) -> TransportFuture<Result<(), TransportError>> {
        Box::pin(crate::Transport::send_snapshot(
            self, group, to, term, meta, path,
        ))
    }
    fn snapshot_settled(&self) {
        crate::Transport::snapshot_settled(self);
    }
    fn set_snapshot_floor(&self, commit: u64) {
        crate::Transport::set_snapshot_floor(self, commit);
    }
    fn dropped_messages(&self) -> u64 {
        crate::Transport::dropped_messages(self)
    }
    fn client_addrs(&self) -> Arc<ClientAddrs> {
        crate::Transport::client_addrs(self)
    }
    fn snapshot_counters(&self) -> Arc<SnapshotCounters> {
        crate::Transport::snapshot_counters(self)
    }
}
