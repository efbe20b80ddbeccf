//! [`InProcessNetwork`]: nodes of one process connected without sockets, for tests and for
//! programs that run a whole cluster inside themselves. A node joins it through its transport
//! settings (`TransportConfig::connector`); messages go straight to the destination node's
//! inbound queue (bounded: a full queue drops the message, counted, as a full TCP send queue
//! does), and a snapshot is copied into the receiver's snapshot directory and fsynced before
//! the receiver is told of it.
//!
//! Faults for tests: [`InProcessNetwork::isolate`] cuts a node off (everything it sends and
//! everything sent to it is dropped, snapshots included) until [`InProcessNetwork::heal`].
//!
//! What it does not do: authenticate (there is no wire), check storage incarnations (a node
//! restarted in the same process on a wiped directory is not refused, as TCP peers would), or
//! bound a message's size beyond what the node itself checks. Peer addresses mean nothing here:
//! a node is reached by its id, and [`PeerTransport::local_addr`] is a placeholder.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use keel_core::{GroupId, Message, NodeId, SnapshotMeta, Term};
use keel_engine::handshake::ConfigurationChange;
use tokio::sync::mpsc;

use crate::peer::{Connector, PeerTransport, TransportFuture};
use crate::{
    ClientAddrs, Inbound, NodeMessageSent, SnapshotCounters, TransportConfig, TransportError,
};

/// Nodes of one process, connected without sockets (see the module documentation). Cheap to
/// clone: clones are the same network.
#[derive(Clone, Default)]
pub struct InProcessNetwork {
    shared: Arc<Mutex<Network>>,
}

#[derive(Default)]
struct Network {
    nodes: BTreeMap<NodeId, Endpoint>,
    isolated: BTreeSet<NodeId>,
    client_addrs: Arc<ClientAddrs>,
    /// Tells a node's transport from the one of an earlier run of the same node.
    joins: u64,
}

struct Endpoint {
    inbound: mpsc::Sender<Inbound>,
    snapshot_dir: Option<PathBuf>,
    join: u64,
}

impl std::fmt::Debug for InProcessNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let network = self.lock();
        f.debug_struct("InProcessNetwork")
            .field("nodes", &network.nodes.keys().collect::<Vec<_>>())
            .field("isolated", &network.isolated)
            .finish()
    }
}

impl InProcessNetwork {
    /// An empty network.
    pub fn new() -> Self {
        InProcessNetwork::default()
    }

    /// Cuts `id` off: what it sends and what is sent to it is dropped (counted by the sender).
    pub fn isolate(&self, id: NodeId) {
        self.lock().isolated.insert(id);
    }

    /// Connects `id` again.
    pub fn heal(&self, id: NodeId) {
        self.lock().isolated.remove(&id);
    }

    /// The nodes whose transport is running now.
    pub fn nodes(&self) -> Vec<NodeId> {
        self.lock().nodes.keys().copied().collect()
    }

    fn lock(&self) -> MutexGuard<'_, Network> {
        // Every update is a single insert or removal: a panic cannot leave it half-done.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `reach` applied to where a message from `from` to `to` goes now, if anywhere (under the
    /// network's lock: nothing is copied for a message that only needs a `try_send`).
    fn route<T>(&self, from: NodeId, to: NodeId, reach: impl FnOnce(&Endpoint) -> T) -> Option<T> {
        let network = self.lock();
        if network.isolated.contains(&from) || network.isolated.contains(&to) {
            return None;
        }
        network.nodes.get(&to).map(reach)
    }
}

impl Connector for InProcessNetwork {
    fn connect(
        &self,
        config: TransportConfig,
        _listen: SocketAddr,
        inbound: mpsc::Sender<Inbound>,
    ) -> TransportFuture<io::Result<Arc<dyn PeerTransport>>> {
        let id = config.node_id;
        let mut network = self.lock();
        network.joins += 1;
        let join = network.joins;
        // A restarted node replaces its earlier run (whose transport may not be dropped yet).
        network.nodes.insert(
            id,
            Endpoint {
                inbound,
                snapshot_dir: config.snapshot_dir.clone(),
                join,
            },
        );
        if let Some(own) = &config.advertise_client_addr {
            network.client_addrs.set(id, own);
        }
        let transport = InProcessTransport {
            network: self.clone(),
            id,
            join,
            client_addrs: Arc::clone(&network.client_addrs),
            peers: Mutex::default(),
            dropped: AtomicU64::new(0),
            dropped_node_messages: AtomicU64::new(0),
            transfers: AtomicU64::new(0),
            counters: Arc::default(),
        };
        Box::pin(async move { Ok(Arc::new(transport) as Arc<dyn PeerTransport>) })
    }
}

/// One node's side of an [`InProcessNetwork`].
struct InProcessTransport {
    network: InProcessNetwork,
    id: NodeId,
    join: u64,
    client_addrs: Arc<ClientAddrs>,
    /// Addresses the node was told; kept only to answer `peer_addr` (delivery is by id).
    peers: Mutex<BTreeMap<NodeId, SocketAddr>>,
    dropped: AtomicU64,
    dropped_node_messages: AtomicU64,
    /// Snapshot transfers started: with `id` and `join`, a name of its own for each copy.
    transfers: AtomicU64,
    counters: Arc<SnapshotCounters>,
}

impl InProcessTransport {
    fn peers(&self) -> MutexGuard<'_, BTreeMap<NodeId, SocketAddr>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for InProcessTransport {
    fn drop(&mut self) {
        let mut network = self.network.lock();
        if network
            .nodes
            .get(&self.id)
            .is_some_and(|e| e.join == self.join)
        {
            network.nodes.remove(&self.id);
        }
    }
}

/// A stand-in address: nodes of an in-process network are reached by id.
const NO_ADDRESS: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    0,
));

impl PeerTransport for InProcessTransport {
    fn local_addr(&self) -> SocketAddr {
        NO_ADDRESS
    }

    fn set_peer(&self, id: NodeId, addr: SocketAddr) {
        self.peers().insert(id, addr);
    }

    fn peer_addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.peers().get(&id).copied()
    }

    fn configuration_changed(&self, _change: &ConfigurationChange) {}

    fn send(&self, group: GroupId, msg: Message) {
        debug_assert_eq!(msg.from, self.id, "a message names its sender");
        let to = msg.to;
        let message = Inbound::Message {
            group,
            message: msg,
        };
        let delivered = (self.network)
            .route(self.id, to, |e| e.inbound.try_send(message).is_ok())
            .unwrap_or(false);
        if !delivered {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Straight into each peer's inbound queue (bounded: full, the message is dropped for that
    /// peer, counted), so node messages from one node arrive in the order sent. "Every peer" is
    /// every other node on the network.
    fn send_node_message(&self, to: Option<NodeId>, message: Bytes) -> NodeMessageSent {
        let peers: Vec<NodeId> = match to {
            Some(id) => vec![id],
            // Peers are reached by id here, whether or not the node was told an address.
            None => (self.network.nodes().into_iter())
                .filter(|&id| id != self.id)
                .collect(),
        };
        let fits = message.len() <= crate::wire::NODE_MESSAGE_BYTES_MAX;
        let mut sent = NodeMessageSent::default();
        for peer in peers {
            let delivered = fits
                && (self.network)
                    .route(self.id, peer, |e| {
                        let from = self.id;
                        let inbound = Inbound::NodeMessage {
                            from,
                            message: message.clone(),
                        };
                        e.inbound.try_send(inbound).is_ok()
                    })
                    .unwrap_or(false);
            if delivered {
                sent.queued += 1;
            } else {
                sent.dropped += 1;
            }
        }
        (self.dropped_node_messages).fetch_add(sent.dropped as u64, Ordering::Relaxed);
        sent
    }

    fn dropped_node_messages(&self) -> u64 {
        self.dropped_node_messages.load(Ordering::Relaxed)
    }

    fn send_snapshot(
        &self,
        group: GroupId,
        to: NodeId,
        term: Term,
        meta: SnapshotMeta,
        path: PathBuf,
    ) -> TransportFuture<Result<(), TransportError>> {
        let route =
            (self.network).route(self.id, to, |e| (e.inbound.clone(), e.snapshot_dir.clone()));
        let (from, join) = (self.id, self.join);
        let transfer = self.transfers.fetch_add(1, Ordering::Relaxed);
        let counters = Arc::clone(&self.counters);
        Box::pin(async move {
            let (inbound, dir) = route.ok_or(TransportError::UnknownPeer(to))?;
            let dir = dir.ok_or(TransportError::Refused(
                "the receiver has no snapshot directory",
            ))?;
            // A name of its own per transfer (sender, its run on this network, transfer): a
            // resent snapshot never overwrites one its receiver is adopting.
            let name = format!(
                "snapshot-in-process-{from}-{join}-{transfer}-{:020}.snap.tmp",
                meta.last.index
            );
            let copy = dir.join(name);
            let copied = copy.clone();
            let bytes = tokio::task::spawn_blocking(move || copy_durably(&path, &copied, &dir))
                .await
                .map_err(|e| TransportError::Io(io::Error::other(e)))?
                .map_err(TransportError::Io)?;
            counters.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
            let received = Inbound::Snapshot {
                group,
                from,
                term,
                meta,
                path: copy,
            };
            inbound
                .send(received)
                .await
                .map_err(|_| TransportError::UnknownPeer(to))?;
            counters.sends_completed.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    fn snapshot_settled(&self) {}

    fn set_snapshot_floor(&self, _commit: u64) {}

    fn dropped_messages(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn client_addrs(&self) -> Arc<ClientAddrs> {
        Arc::clone(&self.client_addrs)
    }

    fn snapshot_counters(&self) -> Arc<SnapshotCounters> {
        Arc::clone(&self.counters)
    }
}

/// Copies `from` to `to` and makes the copy durable (the file, then its directory): what a
/// receiver must hold before its node is told of a snapshot. The bytes copied.
fn copy_durably(from: &Path, to: &Path, dir: &Path) -> io::Result<u64> {
    let bytes = std::fs::copy(from, to)?;
    std::fs::File::open(to)?.sync_all()?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(bytes)
}
