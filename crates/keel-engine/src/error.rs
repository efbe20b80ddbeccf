//! Why a client request did not produce a result.

use std::net::SocketAddr;

use keel_core::NodeId;

/// Why a request did not produce a result. Each variant says whether the request may have been
/// applied: only [`ClientError::Unknown`] leaves that open.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Definitely not applied: this node is not the leader (or the entry was overwritten).
    /// Retry at `leader` if known.
    #[error("not the leader (leader hint: {leader:?} at {leader_addr:?})")]
    NotLeader {
        /// The leader this node knows of, if any and not itself.
        leader: Option<NodeId>,
        /// Where to reach `leader`, if this node knows (the shell's
        /// [`Shell::leader_addr`](crate::Shell::leader_addr)).
        leader_addr: Option<SocketAddr>,
    },
    /// The outcome is unknown (timeout, or committed under a snapshot): it may or may not have
    /// been applied. Retry only with a request id the state machine deduplicates.
    #[error("outcome unknown (timed out or leadership changed)")]
    Unknown,
    /// A bound was reached (pending proposals or reads, uncommitted entries, a transfer in
    /// progress): not applied, retry later.
    #[error("busy: {0}")]
    Busy(&'static str),
    /// Refused by the core (for instance a membership change while another is in progress).
    #[error("rejected: {0}")]
    Rejected(String),
    /// The node is shutting down or gone.
    #[error("the node is shut down")]
    Shutdown,
    /// Definitely not applied: the request's deadline passed while it waited in the node's queue,
    /// so it was dropped there rather than proposed behind its caller's back. Retry freely.
    #[error("not proposed: its deadline passed while it was queued")]
    NotProposed,
    /// Applied, and refused by the state machine with this reason (`ApplyError::Refused`): the
    /// state is unchanged, on every replica. Retrying the same request gets the same answer
    /// unless the state changed meanwhile.
    #[error("refused by the state machine: {}", String::from_utf8_lossy(.0))]
    Refused(bytes::Bytes),
}
