//! Node messages: an application's own bytes from one node to its peers, carried by the peer
//! transport beside the Raft messages and never through the log (keel-transport's `wire`, body
//! kind 12). keel's server carries Redis pub/sub in them; an embedder can carry anything that
//! may be lost: cache invalidations, presence, notifications.
//!
//! - **Send**: [`Handle::send_node_message`](crate::Handle::send_node_message), to one peer or
//!   to every peer the transport knows, without waiting: at most
//!   [`NODE_MESSAGE_BYTES_MAX`] bytes (longer: refused), queued per peer within the transport's
//!   bounds (`TransportConfig::node_message_queue_messages_max` and `_bytes_max`).
//! - **Receive**: [`Node::take_node_messages`](crate::Node::take_node_messages), once, gives the
//!   receiving end of a bounded channel (`NodeConfig::node_message_queue_max` messages) of
//!   [`NodeMessage`]s. The node task hands each one over without waiting: when the channel is
//!   full (the application does not keep up) or nobody took it, the message is dropped, counted.
//! - **Order and loss**: the messages one node sends arrive at each peer in the order sent,
//!   while the connection between them lives. They are at most once: lost, counted where they
//!   are lost ([`NodeMessageStats`], and the metrics `keel_node_messages_*`), when a bound is
//!   reached, a connection drops with messages in flight, or a node stops; never written down,
//!   never retried, never delivered again after a restart.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use keel_core::NodeId;
pub use keel_transport::wire::NODE_MESSAGE_BYTES_MAX;
use tokio::sync::mpsc;

/// A node message as the application receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMessage {
    /// The peer that sent it.
    pub from: NodeId,
    /// Its bytes (at most [`NODE_MESSAGE_BYTES_MAX`]).
    pub message: Bytes,
}

/// Node message counts of one node, since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMessageStats {
    /// Sends: one per message and peer it was queued for.
    pub sent: u64,
    /// Messages a send dropped at once, one per peer (a peer's budget spent, the peer unknown).
    pub send_dropped: u64,
    /// Messages received and handed to the application's channel.
    pub received: u64,
    /// Messages received and dropped: the application's channel was full or not taken.
    pub receive_dropped: u64,
}

/// The live counts behind [`NodeMessageStats`], shared by the node task and the handles.
#[derive(Debug, Default)]
pub(crate) struct NodeMessageCounters {
    sent: AtomicU64,
    send_dropped: AtomicU64,
    received: AtomicU64,
    receive_dropped: AtomicU64,
}

impl NodeMessageCounters {
    pub(crate) fn get(&self) -> NodeMessageStats {
        NodeMessageStats {
            sent: self.sent.load(Ordering::Relaxed),
            send_dropped: self.send_dropped.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            receive_dropped: self.receive_dropped.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn sent(&self, node: NodeId, queued: usize, dropped: usize) {
        self.sent.fetch_add(queued as u64, Ordering::Relaxed);
        self.send_dropped
            .fetch_add(dropped as u64, Ordering::Relaxed);
        crate::metrics::node_messages_sent(node, queued as u64, dropped as u64);
    }
}

/// The node task's end: hands what the transport received to the application's channel.
pub(crate) struct NodeMessageInbox {
    pub(crate) node: NodeId,
    pub(crate) tx: mpsc::Sender<NodeMessage>,
    pub(crate) counters: std::sync::Arc<NodeMessageCounters>,
}

impl NodeMessageInbox {
    /// Never waits: the node task must not stall on an application that does not read.
    pub(crate) fn deliver(&self, from: NodeId, message: Bytes) {
        let taken = self.tx.try_send(NodeMessage { from, message }).is_ok();
        let counter = match taken {
            true => &self.counters.received,
            false => &self.counters.receive_dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        crate::metrics::node_message_received(self.node, taken);
    }
}
