//! The sending side: what one connection streams, and what each acknowledgement does to it.

use std::collections::VecDeque;

use super::{
    AckStatus, ChunkHeader, PositionStatus, SnapshotAck, SnapshotId, SnapshotPosition,
    TransferError, REFUSALS_MAX,
};

/// Reconnections (each resuming from the receiver's durable offset) before a transfer is given
/// up and reported failed to the core.
pub const RESUME_ATTEMPTS_MAX: u32 = 5;

/// How long to wait before reconnection number `attempts_so_far + 1` of a transfer whose
/// connection was lost: `backoff_min_ms` doubled `attempts_so_far + 1` times, so the first wait
/// is twice the minimum (at most six doublings); `None` once [`RESUME_ATTEMPTS_MAX`]
/// reconnections were spent: the transfer is given up.
pub fn resume_backoff_ms(attempts_so_far: u32, backoff_min_ms: u64) -> Option<u64> {
    (attempts_so_far < RESUME_ATTEMPTS_MAX).then(|| backoff_min_ms << (attempts_so_far + 1).min(6))
}

/// What an acknowledgement means for the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckStep {
    /// Go on (send what the window allows).
    Continue,
    /// The receiver holds the whole snapshot and handed it to its node.
    Complete,
}

/// One connection's sending state after the receiver answered the offer.
#[derive(Clone, Debug)]
pub struct SendSession {
    id: SnapshotId,
    total_len_bytes: u64,
    chunk_bytes: u64,
    window_bytes: u64,
    /// Sent up to here; acknowledged up to `acked`.
    sent: u64,
    acked: u64,
    /// CRC32C of the file's first `sent` bytes.
    crc: u32,
    /// (offset, CRC32C of the prefix up to it) at every chunk boundary not yet acknowledged, to
    /// rewind on a refusal without rereading the file.
    boundaries: VecDeque<(u64, u32)>,
    refusals: u32,
}

impl SendSession {
    /// The offset the receiver's answer to the offer of `id` (`total_len_bytes` long) lets the
    /// sender stream from, or why it may not.
    pub fn position_offset(
        id: SnapshotId,
        total_len_bytes: u64,
        position: &SnapshotPosition,
    ) -> Result<u64, TransferError> {
        if (position.index, position.term) != (id.index, id.term)
            || position.offset >= total_len_bytes
        {
            return Err(TransferError::Unexpected("position for another snapshot"));
        }
        match position.status {
            PositionStatus::Continue => Ok(position.offset),
            PositionStatus::RefusedStale => Err(TransferError::Refused(
                "a later leader's transfer is in progress",
            )),
            PositionStatus::RefusedTooLarge => Err(TransferError::Refused(
                "snapshot larger than the receiver accepts",
            )),
            // Reported as a failure so the leader's core probes the follower at once.
            PositionStatus::NotNeeded => {
                Err(TransferError::Refused("the follower no longer needs it"))
            }
        }
    }

    /// Streams `id` from `offset` (from [`SendSession::position_offset`]), `prefix_crc` being
    /// the CRC32C of the file's first `offset` bytes.
    pub fn new(
        id: SnapshotId,
        total_len_bytes: u64,
        offset: u64,
        prefix_crc: u32,
        chunk_bytes: u32,
        window_chunks: usize,
    ) -> Self {
        debug_assert!(offset < total_len_bytes);
        let chunk_bytes = u64::from(chunk_bytes.max(1));
        SendSession {
            id,
            total_len_bytes,
            chunk_bytes,
            window_bytes: chunk_bytes * window_chunks.max(1) as u64,
            sent: offset,
            acked: offset,
            crc: prefix_crc,
            boundaries: [(offset, prefix_crc)].into(),
            refusals: 0,
        }
    }

    /// The next chunk to send, `(offset, length)`, if the window has room for one.
    pub fn next_chunk(&self) -> Option<(u64, usize)> {
        (self.sent < self.total_len_bytes && self.sent - self.acked < self.window_bytes).then(
            || {
                let len = (self.total_len_bytes - self.sent).min(self.chunk_bytes);
                (self.sent, len as usize)
            },
        )
    }

    /// The header for `data`, the chunk [`SendSession::next_chunk`] named, which counts as sent.
    pub fn chunk_sent(&mut self, data: &[u8]) -> ChunkHeader {
        debug_assert_eq!(self.next_chunk().map(|(_, len)| len), Some(data.len()));
        self.crc = crc32c::crc32c_append(self.crc, data);
        let offset = self.sent;
        self.sent += data.len() as u64;
        self.boundaries.push_back((self.sent, self.crc));
        ChunkHeader {
            id: self.id,
            offset,
            len_bytes: data.len() as u32,
            crc: crc32c::crc32c(data),
            last: (self.sent == self.total_len_bytes).then_some((self.total_len_bytes, self.crc)),
        }
    }

    /// Takes the receiver's acknowledgement.
    pub fn on_ack(&mut self, ack: &SnapshotAck) -> Result<AckStep, TransferError> {
        if (ack.index, ack.term) != (self.id.index, self.id.term) || ack.received > self.sent {
            return Err(TransferError::Unexpected(
                "acknowledgement for another snapshot",
            ));
        }
        match ack.status {
            AckStatus::Accepted => {
                self.refusals = 0;
                self.acked = self.acked.max(ack.received);
                while self.boundaries.len() > 1 && self.boundaries[0].0 < self.acked {
                    self.boundaries.pop_front();
                }
                Ok(AckStep::Continue)
            }
            AckStatus::Resend => {
                self.refusals += 1;
                if self.refusals > REFUSALS_MAX {
                    return Err(TransferError::Refused("too many chunks refused"));
                }
                let Some(&(at, at_crc)) = self.boundaries.iter().find(|(o, _)| *o == ack.received)
                else {
                    return Err(TransferError::Unexpected("resend from an unknown offset"));
                };
                while self.boundaries.back().is_some_and(|(o, _)| *o > at) {
                    self.boundaries.pop_back();
                }
                self.sent = at;
                self.acked = at;
                self.crc = at_crc;
                Ok(AckStep::Continue)
            }
            AckStatus::Complete => Ok(AckStep::Complete),
            AckStatus::Failed => Err(TransferError::CorruptWhole),
        }
    }
}
