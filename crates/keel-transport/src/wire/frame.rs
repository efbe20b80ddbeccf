//! Frames: the 8-byte header (length checked before the body is allocated, CRC32C verified),
//! framing every body kind ([`encode_handshake`], [`encode_message`] or its parts,
//! [`encode_refusal`], ...), and [`decode_frame`] / [`decode_body`], which dispatch on the body
//! kind to the decoders of `handshake.rs`, `message.rs`, `snapshot.rs`, `auth.rs` and `parts.rs`.
//! The layout is "Frame" and "Refusal" in the module documentation of `wire`; apart from the
//! bodies because it is the one layer every connection's bytes pass through.

use bytes::Bytes;
use keel_core::{GroupId, Message};

use super::{
    auth, decode_message_fields, encode_message_fields, node_message, parts, snapshot, Challenge,
    ChunkHeader, Handshake, MessagePart, OutgoingParts, ReadWire, Reader, Response, SnapshotAck,
    SnapshotOffer, SnapshotPosition, WireError, BODY_HANDSHAKE, BODY_MESSAGE, BODY_MESSAGE_PART,
    BODY_REFUSAL, FRAME_HEADER_SIZE_BYTES, MESSAGE_PART_BYTES, REFUSAL_REASON_BYTES_MAX,
};

/// A decoded frame body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// The first frame of every connection (body kind 1).
    Handshake(Handshake),
    /// One whole Raft message (body kind 2), of the group it names.
    Message(GroupId, Message),
    /// A sender's offer of a snapshot (body kind 4).
    SnapshotOffer(SnapshotOffer),
    /// The receiver's answer to an offer (body kind 5).
    SnapshotPosition(SnapshotPosition),
    /// A chunk's header (body kind 6); the chunk's raw data follows the frame.
    SnapshotChunk(ChunkHeader),
    /// The receiver's acknowledgement of chunks (body kind 7).
    SnapshotAck(SnapshotAck),
    /// Why the receiver of a connection refused it (body kind 8).
    Refusal(String),
    /// The responder's nonce and proof (body kind 9).
    AuthChallenge(Challenge),
    /// The initiator's proof (body kind 10).
    AuthResponse(Response),
    /// One part of a message too large for one frame (body kind 11).
    MessagePart(MessagePart),
    /// An application's node message (body kind 12).
    NodeMessage(Bytes),
}

/// The 8-byte frame header, checked before the body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Length of the body in bytes, at most the bound [`FrameHeader::parse`] was given.
    pub len_bytes: u32,
    /// CRC32C the body must have.
    pub crc: u32,
}

impl FrameHeader {
    /// Parses a header and checks its length bound: call before allocating the body.
    pub fn parse(header: [u8; FRAME_HEADER_SIZE_BYTES], bytes_max: u32) -> Result<Self, WireError> {
        let len_bytes = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        if len_bytes > bytes_max {
            return Err(WireError::Oversize {
                len_bytes: len_bytes.into(),
                bytes_max: bytes_max.into(),
            });
        }
        Ok(FrameHeader { len_bytes, crc })
    }

    /// Checks the body's CRC32C: [`WireError::BadChecksum`] if it is not the header's.
    pub fn verify(&self, body: &[u8]) -> Result<(), WireError> {
        let actual = crc32c::crc32c(body);
        if actual != self.crc {
            return Err(WireError::BadChecksum {
                expected: self.crc,
                actual,
            });
        }
        Ok(())
    }
}

/// Appends one frame whose body `body` writes.
pub(super) fn put_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_SIZE_BYTES]);
    body(out);
    seal_frame(out, start);
}

/// Fills in the header of the frame at `start`, whose body runs to the end of `out`.
fn seal_frame(out: &mut [u8], start: usize) {
    let body_start = start + FRAME_HEADER_SIZE_BYTES;
    let len = u32::try_from(out.len() - body_start).expect("frame body under 4 GiB");
    let crc = crc32c::crc32c(&out[body_start..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..body_start].copy_from_slice(&crc.to_le_bytes());
}

/// Appends `h` as a handshake frame to `out`.
pub fn encode_handshake(h: &Handshake, out: &mut Vec<u8>) {
    put_frame(out, |b| h.encode_body(b));
}

/// A handshake frame around an already encoded body (an authenticating initiator keeps the
/// exact bytes: they enter the transcript).
pub fn encode_handshake_body(body: &[u8], out: &mut Vec<u8>) {
    put_frame(out, |b| b.extend_from_slice(body));
}

/// Appends `c` as an authentication challenge frame (body kind 9) to `out`.
pub fn encode_challenge(c: &Challenge, out: &mut Vec<u8>) {
    put_frame(out, |b| auth::encode_challenge_body(c, b));
}

/// Appends `r` as an authentication response frame (body kind 10) to `out`.
pub fn encode_response(r: &Response, out: &mut Vec<u8>) {
    put_frame(out, |b| auth::encode_response_body(r, b));
}

/// Appends a refusal frame saying `reason` to `out`, cut to [`REFUSAL_REASON_BYTES_MAX`] bytes at a
/// character boundary.
pub fn encode_refusal(reason: &str, out: &mut Vec<u8>) {
    let mut len = reason.len().min(REFUSAL_REASON_BYTES_MAX);
    while !reason.is_char_boundary(len) {
        len -= 1;
    }
    put_frame(out, |b| {
        b.push(BODY_REFUSAL);
        b.extend_from_slice(&(len as u16).to_le_bytes());
        b.extend_from_slice(&reason.as_bytes()[..len]);
    });
}

fn decode_refusal(r: &mut Reader) -> Result<String, WireError> {
    let len = usize::from(r.u16("refusal reason length")?);
    if len > REFUSAL_REASON_BYTES_MAX {
        return Err(WireError::Invalid("refusal reason too long"));
    }
    let reason = r.bytes(len, "refusal reason")?;
    String::from_utf8(reason.to_vec())
        .map_err(|_| WireError::Invalid("refusal reason is not UTF-8"))
}

/// Appends `msg` (of `group`) as one frame, whatever its size (see [`encode_message_or_parts`]).
pub fn encode_message(group: GroupId, msg: &Message, out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_MESSAGE);
        b.extend_from_slice(&group.to_le_bytes());
        encode_message_fields(msg, b);
    });
}

/// Appends `msg` (of `group`) as one frame if its body is at most [`MESSAGE_PART_BYTES`];
/// otherwise appends nothing and returns its body to be sent in parts.
pub fn encode_message_or_parts(
    group: GroupId,
    msg: &Message,
    out: &mut Vec<u8>,
) -> Option<OutgoingParts> {
    let start = out.len();
    let body_start = start + FRAME_HEADER_SIZE_BYTES;
    out.extend_from_slice(&[0u8; FRAME_HEADER_SIZE_BYTES]);
    out.push(BODY_MESSAGE);
    out.extend_from_slice(&group.to_le_bytes());
    encode_message_fields(msg, out);
    if out.len() - body_start > MESSAGE_PART_BYTES {
        // Before any checksum: each part gets its own.
        let body = out.split_off(body_start);
        out.truncate(start);
        return Some(OutgoingParts::new(body));
    }
    seal_frame(out, start);
    None
}

/// Decodes a verified frame body. Payloads share `body`'s buffer (no copies).
pub fn decode_body(body: Bytes) -> Result<Body, WireError> {
    let mut r = Reader::new(body);
    let decoded = match r.u8("body kind")? {
        BODY_HANDSHAKE => Body::Handshake(Handshake::decode_fields(&mut r)?),
        BODY_MESSAGE => {
            let group = r.u64("group")?;
            Body::Message(group, decode_message_fields(&mut r)?)
        }
        snapshot::BODY_SNAPSHOT_OFFER => Body::SnapshotOffer(snapshot::decode_offer(&mut r)?),
        snapshot::BODY_SNAPSHOT_POSITION => {
            Body::SnapshotPosition(snapshot::decode_position(&mut r)?)
        }
        snapshot::BODY_SNAPSHOT_CHUNK => {
            Body::SnapshotChunk(snapshot::decode_chunk_header(&mut r)?)
        }
        snapshot::BODY_SNAPSHOT_ACK => Body::SnapshotAck(snapshot::decode_ack(&mut r)?),
        BODY_REFUSAL => Body::Refusal(decode_refusal(&mut r)?),
        auth::BODY_AUTH_CHALLENGE => Body::AuthChallenge(auth::decode_challenge(&mut r)?),
        auth::BODY_AUTH_RESPONSE => Body::AuthResponse(auth::decode_response(&mut r)?),
        BODY_MESSAGE_PART => Body::MessagePart(parts::decode_part(&mut r)?),
        node_message::BODY_NODE_MESSAGE => {
            Body::NodeMessage(node_message::decode_node_message(&mut r)?)
        }
        tag => return Err(WireError::UnknownTag { what: "body", tag }),
    };
    r.finish()?;
    Ok(decoded)
}

/// Splits one whole frame off the front of `buf`: the decoded body and the bytes consumed, or
/// `Ok(None)` if `buf` does not hold a whole frame yet. The length is checked before anything
/// else.
pub fn decode_frame(buf: &Bytes, bytes_max: u32) -> Result<Option<(Body, usize)>, WireError> {
    if buf.len() < FRAME_HEADER_SIZE_BYTES {
        return Ok(None);
    }
    let header: [u8; FRAME_HEADER_SIZE_BYTES] =
        buf[..FRAME_HEADER_SIZE_BYTES].try_into().expect("8 bytes");
    let header = FrameHeader::parse(header, bytes_max)?;
    let end = FRAME_HEADER_SIZE_BYTES + header.len_bytes as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let body = buf.slice(FRAME_HEADER_SIZE_BYTES..end);
    header.verify(&body)?;
    Ok(Some((decode_body(body)?, end)))
}
