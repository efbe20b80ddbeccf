//! Node messages on the sending side: what bounds them per peer, and what a send reports.
//!
//! A node message shares its peer's queue and connection with the Raft messages (so it is
//! written in the order sent, batched with them), but not their bound: each peer's queue holds
//! at most `TransportConfig::node_message_queue_messages_max` node messages and
//! `node_message_queue_bytes_max` of their bytes, on top of the `send_queue_messages_max` Raft
//! messages. An application that sends faster than a peer takes loses node messages (counted),
//! never Raft messages, and never holds more than those bounds in memory per peer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// What one peer's queue holds of node messages now, against the transport's bounds.
#[derive(Debug)]
pub(crate) struct NodeBudget {
    messages: AtomicUsize,
    bytes: AtomicUsize,
    messages_max: usize,
    bytes_max: usize,
}

impl NodeBudget {
    pub(crate) fn new(messages_max: usize, bytes_max: usize) -> Arc<Self> {
        Arc::new(NodeBudget {
            messages: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            messages_max,
            bytes_max,
        })
    }

    /// Node messages queued (or being written) now.
    pub(crate) fn queued(&self) -> usize {
        self.messages.load(Ordering::Acquire)
    }

    /// `message`, holding its share of the budget until it is written or dropped; `None` when
    /// the budget has no room for it.
    pub(crate) fn reserve(self: &Arc<Self>, message: Bytes) -> Option<QueuedNodeMessage> {
        let len = message.len();
        let messages = self.messages.fetch_add(1, Ordering::AcqRel);
        let bytes = self.bytes.fetch_add(len, Ordering::AcqRel);
        // Taken first, checked after: two senders racing can only both fail, never both pass
        // a bound they would exceed together.
        let reserved = QueuedNodeMessage {
            message,
            budget: Arc::clone(self),
        };
        if messages >= self.messages_max || bytes.saturating_add(len) > self.bytes_max {
            return None; // `reserved` gives its share back as it drops
        }
        Some(reserved)
    }
}

/// A node message in a peer's queue; its share of the peer's budget is given back when it is
/// dropped (written, or lost with the queue).
#[derive(Debug)]
pub(crate) struct QueuedNodeMessage {
    pub(crate) message: Bytes,
    budget: Arc<NodeBudget>,
}

impl Drop for QueuedNodeMessage {
    fn drop(&mut self) {
        self.budget.messages.fetch_sub(1, Ordering::AcqRel);
        (self.budget.bytes).fetch_sub(self.message.len(), Ordering::AcqRel);
    }
}

/// What a send of a node message did: for how many peers it was queued, and for how many it
/// was dropped at once (queue full, peer unknown; also counted by the transport). Queued is not
/// delivered: a message queued may still be lost with its connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMessageSent {
    /// Peers whose queue took the message.
    pub queued: usize,
    /// Peers for which the message was dropped.
    pub dropped: usize,
}
