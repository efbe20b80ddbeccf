//! Messages too large for one frame travel in parts (body kind 11), so that a large Append never
//! holds the connection for longer than one part: heartbeats, votes and responses queued behind
//! it go out between its parts (format in the module documentation, "Message parts").
//!
//! The sending side is [`OutgoingParts`] (one part at a time, so the transport can write other
//! messages between them); the receiving side is [`Reassembly`], which checks the whole message's
//! length against the message bound on the first part, before it buffers anything.

use bytes::Bytes;

use super::codec::Reader;
use super::frame::put_frame;
use super::{WireError, BODY_MESSAGE};

/// Body kind of one part of a message.
pub const BODY_MESSAGE_PART: u8 = 11;
/// A message body longer than this is sent in parts, each carrying at most this many of its
/// bytes: the longest a message queued behind it waits for the connection (one part's write).
pub const MESSAGE_PART_BYTES: usize = 256 << 10;
/// A part's body besides its data: kind u8, message length u32, offset u32.
pub const MESSAGE_PART_HEADER_BYTES: usize = 1 + 4 + 4;
/// The largest frame body a sender of this build writes on a message connection: a receiver's
/// frame bound must be at least this.
pub const MESSAGE_FRAME_BYTES_MAX: usize = MESSAGE_PART_BYTES + MESSAGE_PART_HEADER_BYTES;

/// One decoded part: bytes `offset .. offset + data.len()` of a message body of `message_len`
/// bytes (the body starts with its kind, [`BODY_MESSAGE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagePart {
    /// Length in bytes of the whole message body.
    pub message_len: u32,
    /// Where this part's data starts in the body, in bytes.
    pub offset: u32,
    /// This part's bytes of the body: at least one, none past `message_len`.
    pub data: Bytes,
}

pub(super) fn decode_part(r: &mut Reader) -> Result<MessagePart, WireError> {
    let message_len = r.u32("message part length")?;
    let offset = r.u32("message part offset")?;
    let data = r.bytes(r.remaining(), "message part data")?;
    if data.is_empty() {
        return Err(WireError::Invalid("empty message part"));
    }
    if u64::from(offset) + data.len() as u64 > u64::from(message_len) {
        return Err(WireError::Invalid(
            "message part beyond the message's length",
        ));
    }
    Ok(MessagePart {
        message_len,
        offset,
        data,
    })
}

/// A message body being sent part by part.
pub struct OutgoingParts {
    body: Vec<u8>,
    sent: usize,
}

impl OutgoingParts {
    /// `body` is a whole message body (kind byte first) longer than [`MESSAGE_PART_BYTES`].
    pub fn new(body: Vec<u8>) -> Self {
        debug_assert!(body.len() > MESSAGE_PART_BYTES && body[0] == BODY_MESSAGE);
        assert!(
            u32::try_from(body.len()).is_ok(),
            "message body under 4 GiB"
        );
        OutgoingParts { body, sent: 0 }
    }

    /// Appends the next part's frame to `out`.
    pub fn encode_next(&mut self, out: &mut Vec<u8>) {
        let end = (self.sent + MESSAGE_PART_BYTES).min(self.body.len());
        let data = &self.body[self.sent..end];
        put_frame(out, |b| {
            b.push(BODY_MESSAGE_PART);
            b.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
            b.extend_from_slice(&(self.sent as u32).to_le_bytes());
            b.extend_from_slice(data);
        });
        self.sent = end;
    }

    /// Whether every part's frame has been appended.
    pub fn is_done(&self) -> bool {
        self.sent == self.body.len()
    }
}

/// The receiving side: at most one message in parts per connection, its parts in order, its
/// length within the receiver's bound (checked on the first part, before anything is buffered;
/// the buffer then grows only as parts arrive).
#[derive(Default)]
pub struct Reassembly {
    message_len: usize,
    buf: Vec<u8>,
}

impl Reassembly {
    /// Adds `part`; returns the whole body once its last part arrived. Any part out of order,
    /// or a message longer than `message_bytes_max`, is an error (the connection is closed).
    pub fn add(
        &mut self,
        part: MessagePart,
        message_bytes_max: u32,
    ) -> Result<Option<Bytes>, WireError> {
        let offset = part.offset as usize;
        if self.buf.is_empty() {
            if offset != 0 {
                return Err(WireError::Invalid("message part does not start a message"));
            }
            if part.message_len > message_bytes_max {
                return Err(WireError::Oversize {
                    len_bytes: part.message_len.into(),
                    bytes_max: message_bytes_max.into(),
                });
            }
            self.message_len = part.message_len as usize;
        } else if offset != self.buf.len() || part.message_len as usize != self.message_len {
            return Err(WireError::Invalid("message part out of order"));
        }
        self.buf.extend_from_slice(&part.data);
        if self.buf.len() < self.message_len {
            return Ok(None);
        }
        self.message_len = 0;
        let body = Bytes::from(std::mem::take(&mut self.buf));
        if body[0] != BODY_MESSAGE {
            return Err(WireError::UnexpectedBody {
                expected: BODY_MESSAGE,
                got: body[0],
            });
        }
        Ok(Some(body))
    }

    /// Bytes held for a message not yet complete.
    pub fn held_bytes(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests;
