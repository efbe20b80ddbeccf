//! Where each member's clients reach it: the address book a follower uses to forward a request to
//! the leader, or to name the leader's address in a redirection.
//!
//! Entries come from three places, the latest write winning: this node's own advertised client
//! address (at start), a member's announcement in extension record 3 of the handshake of each
//! message connection it opens to this node (`TransportConfig::advertise_client_addr`; a leader
//! connects to every member, so every member learns the leader's), and the application
//! (`Handle::set_client_addr`, e.g. for a member added with its address). An address the
//! application set is thus replaced by the member's own announcement when one arrives.
//! An application that has a fixed list to enforce (keel-server's `--client-peers`) consults that
//! first. The book is shared by the transport and every `Handle`; it is small (one entry per
//! member ever heard of, each at most `wire::CLIENT_ADDR_BYTES_MAX` bytes) and only announced
//! addresses of connections that passed the handshake checks enter it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use keel_core::NodeId;

/// The address book: each member's client address, `host:port`, by node id. One per transport,
/// shared behind an `Arc` with every `Handle`, so every method takes `&self`.
#[derive(Debug, Default)]
pub struct ClientAddrs {
    by_node: Mutex<BTreeMap<NodeId, String>>,
}

impl ClientAddrs {
    /// Where `id`'s clients reach it; `None` when nothing has been heard of it.
    pub fn get(&self, id: NodeId) -> Option<String> {
        self.lock().get(&id).cloned()
    }

    /// Records `addr` for `id`; returns whether that changed the book.
    pub fn set(&self, id: NodeId, addr: &str) -> bool {
        let mut book = self.lock();
        if book.get(&id).is_some_and(|known| known == addr) {
            return false;
        }
        book.insert(id, addr.to_string());
        true
    }

    /// A copy of the whole book, by node id.
    pub fn all(&self) -> BTreeMap<NodeId, String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, String>> {
        // A panic while holding this lock cannot leave the map half-updated (single inserts).
        self.by_node.lock().unwrap_or_else(|e| e.into_inner())
    }
}
