//! The peer wire format, version 1: frames, the handshake, and a hand-written encoding of every
//! [`keel_core::Message`] (DESIGN.md sections 5 and 7: explicit encodings, never a serde format
//! whose layout can drift).
//!
//! All integers are little-endian. Checksums are CRC32C (Castagnoli).
//!
//! # Frame
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    4 | body length `L` in bytes (u32)                                     |
//! |      4 |    4 | CRC32C of the body                                                 |
//! |      8 |    L | body                                                               |
//!
//! `L` is checked against the receiver's configured maximum *before* anything is allocated for
//! the body (default [`FRAME_SIZE_BYTES_MAX_DEFAULT`]), so a hostile length cannot exhaust memory.
//! The first body byte is the body kind:
//!
//! | kind | body                                  | sent on                                  |
//! |-----:|---------------------------------------|------------------------------------------|
//! |    1 | handshake                             | first frame of every connection          |
//! |    2 | one Raft message                      | message connections                      |
//! |    3 | a whole snapshot (meta, then data)    | snapshot connections (one frame each)    |
//!
//! # Handshake (body kind 1)
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 1                                                       |
//! |      1 |    4 | magic `KEEL`                                                       |
//! |      5 |    2 | protocol version (u16, currently 1)                                |
//! |      7 |    1 | channel: 0 = Raft messages, 1 = snapshot transfer                  |
//! |      8 |    4 | flags (u32). Bits 0..16 are *required* features: a receiver refuses a bit it does not know. Bits 16..32 are optional and ignored when unknown. Version 1 defines none. |
//! |     12 |    8 | cluster id (u64)                                                   |
//! |     20 |    8 | sender node id (u64, never 0)                                      |
//! |     28 |    2 | extension length `E` (u16, at most [`HANDSHAKE_EXTENSION_BYTES_MAX`]) |
//! |     30 |    E | extension bytes, opaque to version 1                               |
//!
//! Magic and version are checked before anything else is parsed, because another version may lay
//! out the rest differently. The flags and the extension leave room for peer authentication (a
//! shared-secret MAC or a certificate binding in the extension, announced by a required flag) with
//! no format break: a version-1 peer refuses a required feature it lacks instead of misreading it.
//!
//! # Raft message (body kind 2)
//!
//! `kind u8 = 2`, `from u64`, `to u64`, `term u64`, `tag u8`, then per tag:
//!
//! | tag | message            | fields                                                         |
//! |----:|--------------------|----------------------------------------------------------------|
//! |   1 | PreVote            | last log id                                                    |
//! |   2 | PreVoteResponse    | granted bool                                                   |
//! |   3 | RequestVote        | last log id, transfer bool                                     |
//! |   4 | VoteResponse       | granted bool                                                   |
//! |   5 | Append             | prev log id, commit u64, count u32, `count` entries            |
//! |   6 | AppendResponse     | result kind u8: 0 = success, match u64; 1 = conflict, rejected u64, hint term present bool, hint term u64 (0 when absent), hint index u64 |
//! |   7 | Heartbeat          | commit u64, read round u64                                     |
//! |   8 | HeartbeatResponse  | read round u64, lagging bool                                   |
//! |   9 | TimeoutNow         | nothing                                                        |
//! |  10 | InstallSnapshot    | snapshot meta                                                  |
//!
//! - log id: term u64, index u64.
//! - bool: one byte, 0 or 1 (anything else is refused).
//! - entry: term u64, index u64, payload kind u8 (0 noop, 1 normal, 2 membership), payload
//!   length u32, payload. A noop has length 0.
//! - membership: three sets — voters, outgoing voters, learners — each count u32 followed by
//!   `count` node ids u64.
//! - snapshot meta: last log id, membership, term history count u32, then (term u64, first
//!   index u64) per term.
//!
//! Every count is checked against the bytes that remain (times the smallest encoding of one
//! element) before a vector is allocated. A body must be consumed exactly: trailing bytes are an
//! error.
//!
//! # Snapshot (body kind 3)
//!
//! `kind u8 = 3`, the sender's term u64 (what its InstallSnapshot message would carry), snapshot
//! meta (as above), data length u64, data. For now a snapshot travels as
//! one frame on a connection of its own (channel 1), bounded by the snapshot size limit, so it
//! never delays heartbeats on the message connection. Chunked, resumable transfer is future work.

mod codec;
mod message;

#[cfg(test)]
mod tests;

use bytes::Bytes;
use keel_core::{Message, NodeId, SnapshotMeta, Term};

pub use codec::Reader;
pub use message::{decode_message_fields, encode_message_fields, encode_meta};

/// Protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
pub const HANDSHAKE_MAGIC: [u8; 4] = *b"KEEL";
/// Default bound on a frame body on message connections.
pub const FRAME_SIZE_BYTES_MAX_DEFAULT: u32 = 16 << 20;
pub const FRAME_HEADER_SIZE_BYTES: usize = 8;
/// Bound on the handshake's opaque extension.
pub const HANDSHAKE_EXTENSION_BYTES_MAX: usize = 4096;
/// Required-feature bits this build understands (none in version 1).
pub const KNOWN_REQUIRED_FLAGS: u32 = 0;
const REQUIRED_FLAGS_MASK: u32 = 0xFFFF;

pub const BODY_HANDSHAKE: u8 = 1;
pub const BODY_MESSAGE: u8 = 2;
pub const BODY_SNAPSHOT: u8 = 3;

/// What a connection carries after its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Messages,
    Snapshot,
}

/// Why bytes from a peer were refused. Every variant closes that connection only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame of {len_bytes} bytes exceeds the maximum of {max_bytes}")]
    Oversize { len_bytes: u64, max_bytes: u64 },
    #[error("frame checksum mismatch (header {expected:#010x}, body {actual:#010x})")]
    BadChecksum { expected: u32, actual: u32 },
    #[error("truncated: needed {needed} more bytes while decoding {what}")]
    Truncated { what: &'static str, needed: usize },
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u8 },
    #[error("{0} trailing bytes after the body")]
    TrailingBytes(usize),
    #[error("invalid field: {0}")]
    Invalid(&'static str),
    #[error("bad handshake magic {0:02x?}")]
    BadMagic([u8; 4]),
    #[error("unsupported protocol version {got} (this node speaks {supported})")]
    UnsupportedVersion { got: u16, supported: u16 },
    #[error("wrong cluster id {got:#x} (this cluster is {expected:#x})")]
    WrongClusterId { expected: u64, got: u64 },
    #[error("unknown required feature flags {0:#x}")]
    UnknownRequiredFlags(u32),
    #[error("unexpected body kind {got} (expected {expected})")]
    UnexpectedBody { expected: u8, got: u8 },
}

/// The first frame of every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    pub version: u16,
    pub channel: Channel,
    pub flags: u32,
    pub cluster_id: u64,
    pub node_id: NodeId,
    pub extension: Bytes,
}

impl Handshake {
    pub fn new(cluster_id: u64, node_id: NodeId, channel: Channel) -> Self {
        Handshake {
            version: PROTOCOL_VERSION,
            channel,
            flags: 0,
            cluster_id,
            node_id,
            extension: Bytes::new(),
        }
    }

    /// Whether a peer saying this may talk to a node of `cluster_id`. The reason is logged by the
    /// caller before it closes the connection.
    pub fn validate(&self, cluster_id: u64) -> Result<(), WireError> {
        if self.cluster_id != cluster_id {
            return Err(WireError::WrongClusterId {
                expected: cluster_id,
                got: self.cluster_id,
            });
        }
        let unknown = self.flags & REQUIRED_FLAGS_MASK & !KNOWN_REQUIRED_FLAGS;
        if unknown != 0 {
            return Err(WireError::UnknownRequiredFlags(unknown));
        }
        Ok(())
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        assert!(self.extension.len() <= HANDSHAKE_EXTENSION_BYTES_MAX);
        out.push(BODY_HANDSHAKE);
        out.extend_from_slice(&HANDSHAKE_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.push(match self.channel {
            Channel::Messages => 0,
            Channel::Snapshot => 1,
        });
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.cluster_id.to_le_bytes());
        out.extend_from_slice(&self.node_id.to_le_bytes());
        out.extend_from_slice(&(self.extension.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.extension);
    }

    fn decode_fields(r: &mut Reader) -> Result<Self, WireError> {
        let magic: [u8; 4] = r.array("handshake magic")?;
        if magic != HANDSHAKE_MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = r.u16("handshake version")?;
        if version != PROTOCOL_VERSION {
            return Err(WireError::UnsupportedVersion {
                got: version,
                supported: PROTOCOL_VERSION,
            });
        }
        let channel = match r.u8("handshake channel")? {
            0 => Channel::Messages,
            1 => Channel::Snapshot,
            tag => {
                return Err(WireError::UnknownTag {
                    what: "channel",
                    tag,
                })
            }
        };
        let flags = r.u32("handshake flags")?;
        let cluster_id = r.u64("cluster id")?;
        let node_id = r.u64("node id")?;
        if node_id == 0 {
            return Err(WireError::Invalid("node id 0 is reserved"));
        }
        let ext_len = r.u16("extension length")? as usize;
        if ext_len > HANDSHAKE_EXTENSION_BYTES_MAX {
            return Err(WireError::Invalid("handshake extension too long"));
        }
        let extension = r.bytes(ext_len, "handshake extension")?;
        Ok(Handshake {
            version,
            channel,
            flags,
            cluster_id,
            node_id,
            extension,
        })
    }
}

/// A decoded frame body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Handshake(Handshake),
    Message(Message),
    Snapshot {
        term: Term,
        meta: SnapshotMeta,
        data: Bytes,
    },
}

/// The 8-byte frame header, checked before the body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub len_bytes: u32,
    pub crc: u32,
}

impl FrameHeader {
    /// Parses a header and checks its length bound: call before allocating the body.
    pub fn parse(header: [u8; FRAME_HEADER_SIZE_BYTES], max_bytes: u32) -> Result<Self, WireError> {
        let len_bytes = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        if len_bytes > max_bytes {
            return Err(WireError::Oversize {
                len_bytes: len_bytes.into(),
                max_bytes: max_bytes.into(),
            });
        }
        Ok(FrameHeader { len_bytes, crc })
    }

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
fn put_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_SIZE_BYTES]);
    body(out);
    let body_start = start + FRAME_HEADER_SIZE_BYTES;
    let len = u32::try_from(out.len() - body_start).expect("frame body under 4 GiB");
    let crc = crc32c::crc32c(&out[body_start..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..body_start].copy_from_slice(&crc.to_le_bytes());
}

pub fn encode_handshake(h: &Handshake, out: &mut Vec<u8>) {
    put_frame(out, |b| h.encode_body(b));
}

pub fn encode_message(msg: &Message, out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_MESSAGE);
        encode_message_fields(msg, b);
    });
}

pub fn encode_snapshot(term: Term, meta: &SnapshotMeta, data: &[u8], out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_SNAPSHOT);
        b.extend_from_slice(&term.to_le_bytes());
        encode_meta(meta, b);
        b.extend_from_slice(&(data.len() as u64).to_le_bytes());
        b.extend_from_slice(data);
    });
}

/// Decodes a verified frame body. Payloads share `body`'s buffer (no copies).
pub fn decode_body(body: Bytes) -> Result<Body, WireError> {
    let mut r = Reader::new(body);
    let decoded = match r.u8("body kind")? {
        BODY_HANDSHAKE => Body::Handshake(Handshake::decode_fields(&mut r)?),
        BODY_MESSAGE => Body::Message(decode_message_fields(&mut r)?),
        BODY_SNAPSHOT => {
            let term = r.u64("snapshot term")?;
            let meta = message::decode_meta(&mut r)?;
            let len = r.u64("snapshot data length")?;
            let len = usize::try_from(len).map_err(|_| WireError::Invalid("snapshot length"))?;
            let data = r.bytes(len, "snapshot data")?;
            Body::Snapshot { term, meta, data }
        }
        tag => return Err(WireError::UnknownTag { what: "body", tag }),
    };
    r.finish()?;
    Ok(decoded)
}

/// Splits one whole frame off the front of `buf`: the decoded body and the bytes consumed, or
/// `Ok(None)` if `buf` does not hold a whole frame yet. The length is checked before anything
/// else.
pub fn decode_frame(buf: &Bytes, max_bytes: u32) -> Result<Option<(Body, usize)>, WireError> {
    if buf.len() < FRAME_HEADER_SIZE_BYTES {
        return Ok(None);
    }
    let header: [u8; FRAME_HEADER_SIZE_BYTES] =
        buf[..FRAME_HEADER_SIZE_BYTES].try_into().expect("8 bytes");
    let header = FrameHeader::parse(header, max_bytes)?;
    let end = FRAME_HEADER_SIZE_BYTES + header.len_bytes as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let body = buf.slice(FRAME_HEADER_SIZE_BYTES..end);
    header.verify(&body)?;
    Ok(Some((decode_body(body)?, end)))
}
