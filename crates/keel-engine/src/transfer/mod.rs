//! Snapshot transfer decisions: what a sender streams and resends, what a receiver accepts,
//! writes, resumes, refuses and hands to its node. No sockets, no timers: keel-transport's tokio
//! shell (its `snapshot.rs`) moves the frames over TCP, the simulator over its simulated
//! network, and both run this code. The frames' byte layout is keel-transport's (`wire`, section
//! "Snapshot channel"); the frames themselves are the types here.
//!
//! One transfer is one connection's worth of frames:
//!
//! ```text
//! sender                                   receiver
//!   Offer {id, total}           ─────▶     SnapshotReceiver::offer: not needed / too large /
//!                                          stale leader / resume at the durable offset / new
//!                               ◀─────     Position {status, offset}
//!   SendSession::start(position)
//!   Chunk {offset, crc, data} × window ─▶  ReceiveSession::chunk: check, write, sync
//!                               ◀─────     Ack {Accepted | Resend | Complete | Failed}
//!   SendSession::on_ack
//! ```
//!
//! - **Receiver** ([`SnapshotReceiver`], shared by its connections; [`ReceiveSession`] per
//!   connection): one partial transfer at a time in a durable partial file ([`partial`]); the
//!   connection whose offer came last owns it. Chunks are checked (CRC32C) and written in order;
//!   a corrupt or misplaced chunk is answered with the offset held. Whole, the file's checksum
//!   and its own snapshot checksums are verified before the node hears of it.
//! - **Sender** ([`SendSession`]): at most a window of chunks unacknowledged; a refusal rewinds
//!   to the offset the receiver holds; a lost connection reconnects and resumes from the
//!   receiver's durable offset, at most [`RESUME_ATTEMPTS_MAX`] times ([`resume_backoff_ms`]).
//!
//! Offers: one at or below the commit index, or of the snapshot just received while the node is
//! still handling it (until [`SnapshotReceiver::settled`]), is answered "not needed"; one too
//! large, or from a stale leader, is refused; the same snapshot as the partial file resumes at its
//! durable offset; another starts anew. One the node did not install (a stale leader's, or one its
//! storage already had a newer snapshot than) is taken again when a leader offers it. A later offer
//! of the same snapshot takes the partial file over: an older connection still streaming it (a
//! deposed leader's) is superseded. [`ReceiveSession`] checks each chunk; after a refusal, the
//! chunks in flight behind it are skipped without an answer until the sender resends from the
//! offset held. [`starts_transfer`]: the core asking again does not restart a running transfer of
//! the same snapshot; a transfer of another one replaces it. With the `snapshot-resume-skips-chunk`
//! mutation a resumed partial believes it holds one chunk more than it does.

pub mod partial;
mod receiver;
mod sender;
#[cfg(test)]
mod tests;

pub use receiver::{
    discard_stale_partial, ChunkAnswer, OfferDecision, ReceiveSession, ReceiverLimits,
    SnapshotReceiver,
};
pub use sender::{resume_backoff_ms, AckStep, SendSession, RESUME_ATTEMPTS_MAX};

/// Consecutive refused chunks before a side gives up the connection.
pub const REFUSALS_MAX: u32 = 16;

/// Whether the core's request to send snapshot `requested` to a follower starts a transfer,
/// given the one `running` to it: not if it is the same snapshot (the core asks again after its
/// own timeout, and the running transfer resumes across lost connections by itself); another
/// snapshot replaces the running one.
pub fn starts_transfer(running: Option<keel_core::LogId>, requested: keel_core::LogId) -> bool {
    running != Some(requested)
}

/// Which snapshot a transfer carries: the sending leader's term and the snapshot's last entry.
/// A receiver resumes a partial transfer only for the same `(index, term)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotId {
    /// The term of the leader sending it. A receiver holding a partial transfer of another
    /// snapshot from a later leader refuses the offer ([`PositionStatus::RefusedStale`]).
    pub leader_term: u64,
    /// The snapshot's last index.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
}

impl SnapshotId {
    /// Same snapshot (whichever leader sends it).
    pub fn same_snapshot(&self, other: &SnapshotId) -> bool {
        self.index == other.index && self.term == other.term
    }
}

/// Sender → receiver, first frame after the handshake: "which offset do you hold for this?"
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotOffer {
    /// The snapshot channel's protocol version (keel-transport's `SNAPSHOT_CHANNEL_VERSION`).
    pub version: u16,
    /// The Raft group whose snapshot this is.
    pub group: keel_core::GroupId,
    /// The snapshot offered.
    pub id: SnapshotId,
    /// Length of the whole snapshot file in bytes.
    pub total_len_bytes: u64,
}

/// Receiver's answer to an offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PositionStatus {
    /// Send from `offset` (0: from the start); everything below it is durable here.
    Continue = 0,
    /// A transfer from a leader of a later term is in progress here.
    RefusedStale = 1,
    /// Larger than this receiver accepts.
    RefusedTooLarge = 2,
    /// The receiver already holds this snapshot's position (committed, or just received it).
    NotNeeded = 3,
}

/// Receiver → sender, the answer to a [`SnapshotOffer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPosition {
    /// The offered snapshot's last index, echoed.
    pub index: u64,
    /// The offered snapshot's term, echoed.
    pub term: u64,
    /// Whether to send, and if not, why.
    pub status: PositionStatus,
    /// With `Continue`: the offset to send from, in bytes (everything below it is durable
    /// here).
    pub offset: u64,
}

/// Sender → receiver: the header of one chunk; `len_bytes` raw data bytes follow the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The snapshot the chunk belongs to.
    pub id: SnapshotId,
    /// Where the chunk's data starts in the snapshot file, in bytes.
    pub offset: u64,
    /// Length of the chunk's data.
    pub len_bytes: u32,
    /// CRC32C of the chunk's data bytes.
    pub crc: u32,
    /// On the final chunk: the whole snapshot's length and CRC32C.
    pub last: Option<(u64, u32)>,
}

/// What a receiver did with a chunk ([`SnapshotAck::status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckStatus {
    /// The chunk is written; `received` moved past it.
    Accepted = 0,
    /// The chunk was refused (bad checksum, or not at `received`): resend from `received`.
    /// Chunks already sent after it are skipped silently.
    Resend = 1,
    /// The whole snapshot verified, is durable, and was handed to the node.
    Complete = 2,
    /// The transfer cannot complete: the whole snapshot failed verification (the partial file
    /// was discarded), or a chunk reached past the announced length (the part before it kept).
    Failed = 3,
}

/// Receiver → sender, the answer to a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotAck {
    /// The snapshot's last index.
    pub index: u64,
    /// The snapshot's term.
    pub term: u64,
    /// What became of the chunk.
    pub status: AckStatus,
    /// Bytes written contiguously from the start (what the sender continues from).
    pub received: u64,
    /// Bytes fsynced (what survives a crash of the receiver).
    pub durable: u64,
}

/// Why one side ends a transfer's connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The other side refused to go on (a definite answer: reconnecting does not help).
    #[error("refused: {0}")]
    Refused(&'static str),
    /// The other side broke the protocol.
    #[error("the peer sent a {0} where it was not expected")]
    Unexpected(&'static str),
    /// The receiver answered `Failed`: the whole snapshot was corrupt and discarded (a retry
    /// starts from zero), or a chunk ran past the announced length (a retry resumes).
    #[error("the receiver found the whole snapshot corrupt")]
    CorruptWhole,
    /// A chunk longer than this receiver takes, refused before anything is allocated for it.
    #[error("a chunk of {len_bytes} bytes (at most {bytes_max})")]
    OversizeChunk {
        /// The length the chunk's header announced.
        len_bytes: u32,
        /// The receiver's `chunk_bytes_max`.
        bytes_max: u32,
    },
}
