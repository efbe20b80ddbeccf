//! Pub/sub across the cluster: what a node's clients publish goes to every peer as a node
//! message (keel's `Handle::send_node_message`), and what peers publish comes in from the node's
//! node message channel (`Node::take_node_messages`) to this node's subscribers. Never through
//! the log: a follower answers pub/sub commands itself, and no leader is needed. The subscriptions
//! and the message format are keel-session's `pubsub` module; the connection side is
//! `connection.rs` (each subscriber's queue, polled beside its socket).

use std::sync::Arc;

use keel::node_messages::NODE_MESSAGE_BYTES_MAX;
use keel::{Handle, Node};
use keel_redis::KvAdapter;
use keel_session::pubsub::{PubSub, CLUSTER_HEADER_BYTES};

/// Connects the node's pub/sub to its peers: publishes go out through `node`'s handle, and a
/// task hands what peers publish to `pubsub` until the node stops (its channel closes).
pub(super) fn connect(node: &mut Node<KvAdapter>, pubsub: &Arc<PubSub>) {
    let handle: Handle<KvAdapter> = node.handle();
    // Sent without waiting; a full queue or an unreachable peer loses the message there
    // (counted by the node: `keel_node_messages_total`). A stopped node sends nothing.
    let hook = move |message| {
        let _ = handle.send_node_message(None, message);
    };
    let bytes_max = NODE_MESSAGE_BYTES_MAX - CLUSTER_HEADER_BYTES;
    pubsub.set_cluster_hook(Box::new(hook), bytes_max);
    let Some(mut inbox) = node.take_node_messages() else {
        return;
    };
    let pubsub = Arc::clone(pubsub);
    tokio::spawn(async move {
        while let Some(received) = inbox.recv().await {
            pubsub.receive_from_peer(&received.message);
        }
    });
}
