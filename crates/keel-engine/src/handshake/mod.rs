//! The handshake decisions: whether a peer that connected may be heard, and what it announced
//! that this node adopts.
//!
//! The runtime's transport decodes a handshake (and, with a cluster secret, authenticates the
//! peer) and then asks [`HandshakeGate::admit`]; the simulator asks the same gate before a node
//! hears a peer's message. In order:
//!
//! 1. the cluster id must be this node's (a peer of another cluster is refused);
//! 2. the peer's storage incarnation must be the one known for it, or the first one seen
//!    ([`Incarnations`], scenario S37): a member that comes back with a wiped disk has forgotten
//!    its votes and acknowledgements, and they are not heard until it was removed and added
//!    back ([`HandshakeGate::hears_message`]: meanwhile only what promises nothing passes —
//!    a leader's entries, a candidate's request for votes — never an answer);
//! 3. only then are its announced addresses adopted: its peer address fills a gap in this
//!    node's address book (an address this node was given wins), its client address replaces
//!    the one known (latest wins).
//!
//! [`DepartedMembers`] tells which members left the configuration, so that their incarnations
//! are forgotten and a member added back with new storage is heard again.
//!
//! From changed storage, what passes `hears_message` is a leader's Appends, heartbeats,
//! snapshots and TimeoutNow, and vote requests; the runtime refuses the connection, with the
//! reason, at its first answer, so none of the member's votes or acknowledgements counts
//! (everything a follower promises travels on its own outbound connections). `DepartedMembers`
//! follows every configuration entry the log gains; a snapshot that skipped configuration
//! entries forgets every incarnation (a member may have left and come back within it), each
//! learned again as its member next connects. With the `keep-departed-incarnations` mutation the
//! gate never forgets.
//!
//! Peer addresses ([`adopts_peer_addr`]): a node knows the ones it was given (the initial cluster,
//! a membership change run on it) and learns the rest from handshakes, so a member added through
//! one node is reachable from all the others once it has connected to them (as a candidate or a
//! leader: the first time it needs them). Membership entries carry no addresses.
//!
//! The limit: a peer that never heard the old storage (it joined later, was itself rebuilt, or
//! installed a snapshot since) cannot tell a wiped member from a new one. A rebuilt disk comes
//! back under a new node id (docs/operating.md, "Replacing a member's disk"); the simulator's
//! `--disk-replacements` and `--unplanned-wipes` show where a same-id rebuild goes wrong.

mod incarnations;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use keel_core::log::RaftLog;
use keel_core::{Index, Membership, MessageBody, NodeId};
use keel_wal::Fs;

pub use incarnations::{Incarnations, INCARNATIONS_FILE_NAME};

/// What a peer's handshake says, decoded (the wire format is the transport's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHello {
    /// The cluster the peer belongs to; it must be this node's.
    pub cluster_id: u64,
    /// The node id the peer claims.
    pub node_id: NodeId,
    /// The peer's storage incarnation (`None`: an older peer that does not announce one).
    pub incarnation: Option<u64>,
    /// Where other members reach the peer.
    pub advertised_addr: Option<SocketAddr>,
    /// Where the application's clients reach the peer.
    pub client_addr: Option<String>,
}

/// Why a peer is not heard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The peer belongs to another cluster.
    #[error("wrong cluster id {got:#x} (this cluster is {expected:#x})")]
    WrongCluster {
        /// This node's cluster id.
        expected: u64,
        /// The peer's.
        got: u64,
    },
    /// The peer announced another storage incarnation than the one remembered for it: its disk
    /// was replaced or wiped, and it may have forgotten its votes and acknowledgements.
    #[error(
        "node {node} came back with other storage (incarnation {got}, known {known}): it lost \
         its state and may have forgotten its votes; remove it and add it back as a new member"
    )]
    StorageChanged {
        /// The peer.
        node: NodeId,
        /// The incarnation this node remembers for it.
        known: u64,
        /// The one it announced.
        got: u64,
    },
}

/// What an admitted peer's handshake makes this node adopt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Admission {
    /// The peer's client address, to record in the client address book.
    pub client_addr: Option<String>,
    /// The peer's advertised address, to record unless this node already has one for it.
    pub peer_addr: Option<SocketAddr>,
}

/// Whether an announced peer address replaces the one this node has for `peer`: only when it
/// has none (addresses it was given, from the initial cluster or a membership command, win) and
/// never for itself.
pub fn adopts_peer_addr(own_id: NodeId, peer: NodeId, known: Option<SocketAddr>) -> bool {
    peer != own_id && known.is_none()
}

/// What promises nothing of its sender that a quorum could count: a leader's entries,
/// heartbeats, snapshots and leadership handoff, and a candidate's request for votes. Every
/// answer (a vote, an acknowledgement, a heartbeat's echo, a repair answer) is a promise, and so
/// is a repair request: it names what its sender's storage promised.
pub fn promises_nothing(msg: &MessageBody) -> bool {
    matches!(
        msg,
        MessageBody::Append { .. }
            | MessageBody::Heartbeat { .. }
            | MessageBody::InstallSnapshot { .. }
            | MessageBody::TimeoutNow
            | MessageBody::PreVote { .. }
            | MessageBody::RequestVote { .. }
    )
}

/// The handshake checks of one node, with the incarnations it remembers.
#[derive(Debug)]
pub struct HandshakeGate<F: Fs> {
    cluster_id: u64,
    node_id: NodeId,
    incarnations: Incarnations<F>,
    /// Test-only broken variants (the `mutations` feature).
    mutation: Option<keel_core::Mutation>,
}

impl<F: Fs> HandshakeGate<F> {
    /// `dir`: where the incarnations are remembered (`None`: in memory only).
    pub fn load(
        cluster_id: u64,
        node_id: NodeId,
        fs: F,
        dir: Option<PathBuf>,
    ) -> std::io::Result<Self> {
        Ok(HandshakeGate {
            cluster_id,
            node_id,
            incarnations: Incarnations::load(fs, dir)?,
            mutation: None,
        })
    }

    /// Switches on a deliberately broken variant (only with the `mutations` feature).
    pub fn set_mutation(&mut self, mutation: Option<keel_core::Mutation>) {
        self.mutation = mutation;
    }

    /// Decides whether the peer that said `hello` is heard. Call it only once the peer has
    /// authenticated (when the cluster has a secret): a first-seen incarnation is remembered.
    pub fn admit(&mut self, hello: &PeerHello) -> Result<Admission, Refusal> {
        if hello.cluster_id != self.cluster_id {
            return Err(Refusal::WrongCluster {
                expected: self.cluster_id,
                got: hello.cluster_id,
            });
        }
        if let Some(got) = hello.incarnation {
            if let Err(known) = self.incarnations.check(hello.node_id, got) {
                return Err(Refusal::StorageChanged {
                    node: hello.node_id,
                    known,
                    got,
                });
            }
        }
        if hello.node_id == self.node_id {
            return Ok(Admission::default());
        }
        Ok(Admission {
            client_addr: hello.client_addr.clone(),
            peer_addr: hello.advertised_addr,
        })
    }

    /// Whether a message from `node` under storage `incarnation` is heard: the incarnation check
    /// of `admit` alone.
    pub fn hears(&mut self, node: NodeId, incarnation: u64) -> bool {
        self.incarnations.check(node, incarnation).is_ok()
    }

    /// Whether `msg`, from `node` under storage `incarnation`, is heard. From storage other than
    /// the one known, only what promises nothing passes ([`promises_nothing`]): the votes and
    /// acknowledgements of a node that forgot what it promised before its disk was lost must
    /// not count; but once it was removed and added back it may campaign and lead, and a member
    /// that missed its removal (it was cut off, or was itself out of the configuration
    /// meanwhile) must still vote for it and follow it, or neither might ever catch up. The
    /// simulator asks this per message; the runtime per message of a connection whose
    /// handshake announced changed storage.
    pub fn hears_message(&mut self, node: NodeId, incarnation: u64, msg: &MessageBody) -> bool {
        self.hears(node, incarnation) || promises_nothing(msg)
    }

    /// Whether a message from an earlier life of `node` (storage `incarnation`, its process
    /// gone since) is heard: unless another incarnation is known, and never remembered. In the
    /// runtime such a message can only arrive on a connection admitted while that life ran.
    pub fn hears_earlier_life(&self, node: NodeId, incarnation: u64) -> bool {
        self.incarnations
            .known(node)
            .is_none_or(|known| known == incarnation)
    }

    /// The configuration changed: forgets the members that left (and whatever is known of a
    /// node that is not a member) and remembers who the members are (only a member's
    /// first-seen incarnation is remembered).
    pub fn configuration_changed(&mut self, change: &ConfigurationChange) {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(keel_core::Mutation::KeepDepartedIncarnations) {
            let members = change.members.clone();
            self.incarnations.set_members_forgetting_nothing(members);
            return;
        }
        if change.history_skipped {
            self.incarnations.forget_all();
        }
        for id in &change.departed {
            self.incarnations.forget(*id);
        }
        self.incarnations.set_members(change.members.clone());
    }

    /// The remembered incarnations: the runtime and the simulator read them and take their
    /// persist errors to report.
    pub fn incarnations(&mut self) -> &mut Incarnations<F> {
        &mut self.incarnations
    }
}

/// A configuration change as the handshake gate needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigurationChange {
    /// Members that left (each reported once), ascending by id.
    pub departed: Vec<NodeId>,
    /// A snapshot replaced the log past configuration entries never seen here: a member may
    /// have left and come back meanwhile, so no incarnation known can be trusted to be its
    /// current one (each is learned again as its member next connects).
    pub history_skipped: bool,
    /// The members now.
    pub members: BTreeSet<NodeId>,
}

/// Tells which members left the configuration, following every configuration entry as the log
/// gains it (so a member removed and added back in one batch of entries is still seen leaving),
/// and the configuration a snapshot or a truncation replaced the log's with. A snapshot that
/// skipped configuration entries is reported as such: what it skipped cannot be known.
#[derive(Debug, Clone)]
pub struct DepartedMembers {
    /// The index of the configuration entry last followed.
    seen_index: Index,
    /// The configuration last seen, shared with the log: unchanged while the log holds the
    /// same one (a pointer comparison, cheap enough for every step).
    last: Arc<Membership>,
}

impl DepartedMembers {
    /// Starts from the configuration `log` has in effect now: no departure before it is
    /// reported.
    pub fn new(log: &RaftLog) -> Self {
        DepartedMembers {
            seen_index: log.membership_index(),
            last: log.membership_shared().clone(),
        }
    }

    /// The members now, as a change from nothing: to start a gate with.
    pub fn current(&self) -> ConfigurationChange {
        ConfigurationChange {
            departed: Vec::new(),
            members: self.last.members(),
            history_skipped: false,
        }
    }

    /// The change since the last call, if the configuration changed (usually not: cheap to call
    /// after every step).
    pub fn observe(&mut self, log: &RaftLog) -> Option<ConfigurationChange> {
        let current = log.membership_shared();
        if Arc::ptr_eq(current, &self.last) {
            return None;
        }
        let mut departed = Vec::new();
        let mut before: &Membership = &self.last;
        for (_, next) in log.memberships_after(self.seen_index) {
            note_departures(before, next, &mut departed);
            before = next;
        }
        // A snapshot or a truncation may have replaced the configuration without an entry.
        note_departures(before, current, &mut departed);
        let purged = log.purged().index;
        let history_skipped = purged > self.seen_index && log.membership_index() == purged;
        self.last = current.clone();
        self.seen_index = log.membership_index();
        departed.sort_unstable();
        departed.dedup();
        Some(ConfigurationChange {
            departed,
            members: current.members(),
            history_skipped,
        })
    }
}

fn note_departures(before: &Membership, after: &Membership, departed: &mut Vec<NodeId>) {
    for id in before
        .voters
        .iter()
        .chain(&before.outgoing)
        .chain(&before.learners)
    {
        if !after.contains(*id) {
            departed.push(*id);
        }
    }
}
