//! The log entry payload for a key-value write: the command plus the request id that makes a
//! retry harmless.
//!
//! Format, version 1. Integers little-endian; `bytes` is a `u32` length then that many bytes;
//! `count` is a `u32`.
//!
//! ```text
//! offset size  field
//! 0      1     format version = 1
//! 1      8     client_id   u64   (who sent it; the dedup session)
//! 9      8     request_seq u64   (per client, unique per request; a retry reuses it)
//! 17     1     op: 1 SET, 2 DEL, 3 INCRBY, 4 MSET, 5 APPEND, 6 CAS
//! 18     ...   body, by op:
//!              SET     condition u8 (0 always, 1 NX, 2 XX), bytes key, bytes value
//!              DEL     count n >= 1, then n x bytes key
//!              INCRBY  bytes key, delta i64
//!              MSET    count n >= 1, then n x (bytes key, bytes value)
//!              APPEND  bytes key, bytes value
//!              CAS     bytes key, bytes expected, bytes new
//! ```
//!
//! Nothing may follow the body. INCR, DECR and DECRBY are logged as INCRBY with their delta. The
//! entry has no checksum of its own: the WAL and the peer transport checksum every entry.
//!
//! A decoder that meets a version or op it does not know fails ([`DecodeError`]) rather than
//! skipping the entry: skipping would let an older node silently diverge from newer ones.

use bytes::{BufMut, Bytes};

use super::wire::{put_bytes, Reader};
use crate::command::{SetCondition, WriteCommand};

const FORMAT_VERSION: u8 = 1;

const OP_SET: u8 = 1;
const OP_DEL: u8 = 2;
const OP_INCRBY: u8 = 3;
const OP_MSET: u8 = 4;
const OP_APPEND: u8 = 5;
const OP_CAS: u8 = 6;

/// Smallest encoding of one `bytes` field (an empty one): its length.
const BYTES_FIELD_MIN: usize = 4;

/// A write as the Raft log carries it.
///
/// `client_id` must be unique for the life of the cluster and never reused (not after a node
/// restart either): a reused id whose seqs start again at 1 would be answered from the old
/// session's remembered replies without applying. A random 64-bit id per connection, or one built
/// from (node id, a persisted incarnation counter, a connection counter), satisfies this.
/// `request_seq` counts that client's writes from 1; a retry reuses the original's seq.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogCommand {
    pub client_id: u64,
    pub request_seq: u64,
    pub command: WriteCommand,
}

/// Why a log entry is not a valid key-value command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unsupported log command format version {0} (this build reads version 1)")]
    UnsupportedVersion(u8),
    #[error("unknown op {0}")]
    UnknownOp(u8),
    #[error("unknown SET condition {0}")]
    UnknownCondition(u8),
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("empty key list")]
    EmptyList,
    #[error("{0} bytes after the end of the command")]
    TrailingBytes(usize),
}

impl LogCommand {
    pub fn new(client_id: u64, request_seq: u64, command: WriteCommand) -> Self {
        LogCommand {
            client_id,
            request_seq,
            command,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(18 + self.body_len_hint());
        out.put_u8(FORMAT_VERSION);
        out.put_u64_le(self.client_id);
        out.put_u64_le(self.request_seq);
        match &self.command {
            WriteCommand::Set {
                key,
                value,
                condition,
            } => {
                out.put_u8(OP_SET);
                out.put_u8(match condition {
                    SetCondition::Always => 0,
                    SetCondition::IfAbsent => 1,
                    SetCondition::IfPresent => 2,
                });
                put_bytes(&mut out, key);
                put_bytes(&mut out, value);
            }
            WriteCommand::Del { keys } => {
                out.put_u8(OP_DEL);
                out.put_u32_le(count(keys.len()));
                for key in keys {
                    put_bytes(&mut out, key);
                }
            }
            WriteCommand::IncrBy { key, delta } => {
                out.put_u8(OP_INCRBY);
                put_bytes(&mut out, key);
                out.put_i64_le(*delta);
            }
            WriteCommand::MSet { pairs } => {
                out.put_u8(OP_MSET);
                out.put_u32_le(count(pairs.len()));
                for (key, value) in pairs {
                    put_bytes(&mut out, key);
                    put_bytes(&mut out, value);
                }
            }
            WriteCommand::Append { key, value } => {
                out.put_u8(OP_APPEND);
                put_bytes(&mut out, key);
                put_bytes(&mut out, value);
            }
            WriteCommand::Cas { key, expected, new } => {
                out.put_u8(OP_CAS);
                put_bytes(&mut out, key);
                put_bytes(&mut out, expected);
                put_bytes(&mut out, new);
            }
        }
        Bytes::from(out)
    }

    fn body_len_hint(&self) -> usize {
        let field = |b: &Bytes| b.len() + BYTES_FIELD_MIN;
        match &self.command {
            WriteCommand::Set { key, value, .. } | WriteCommand::Append { key, value } => {
                1 + field(key) + field(value)
            }
            WriteCommand::Del { keys } => 4 + keys.iter().map(field).sum::<usize>(),
            WriteCommand::IncrBy { key, .. } => field(key) + 8,
            WriteCommand::MSet { pairs } => {
                4 + pairs
                    .iter()
                    .map(|(k, v)| field(k) + field(v))
                    .sum::<usize>()
            }
            WriteCommand::Cas { key, expected, new } => field(key) + field(expected) + field(new),
        }
    }

    /// Decodes an entry; keys and values are zero-copy slices of `entry`.
    pub fn decode(entry: &Bytes) -> Result<LogCommand, DecodeError> {
        let mut r = Reader::new(entry.clone());
        let truncated = |r: &Reader| DecodeError::Truncated(r.position());
        let version = r.u8().ok_or(DecodeError::Truncated(0))?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let client_id = r.u64().ok_or_else(|| truncated(&r))?;
        let request_seq = r.u64().ok_or_else(|| truncated(&r))?;
        let op = r.u8().ok_or_else(|| truncated(&r))?;
        let command = decode_body(op, &mut r)?;
        if r.remaining() > 0 {
            return Err(DecodeError::TrailingBytes(r.remaining()));
        }
        Ok(LogCommand {
            client_id,
            request_seq,
            command,
        })
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).expect("argument counts are bounded by the request limits")
}

fn decode_body(op: u8, r: &mut Reader) -> Result<WriteCommand, DecodeError> {
    Ok(match op {
        OP_SET => {
            let condition = match r.u8().ok_or(DecodeError::Truncated(r.position()))? {
                0 => SetCondition::Always,
                1 => SetCondition::IfAbsent,
                2 => SetCondition::IfPresent,
                other => return Err(DecodeError::UnknownCondition(other)),
            };
            WriteCommand::Set {
                key: bytes(r)?,
                value: bytes(r)?,
                condition,
            }
        }
        OP_DEL => {
            let n = list_count(r, BYTES_FIELD_MIN)?;
            let keys = (0..n).map(|_| bytes(r)).collect::<Result<_, _>>()?;
            WriteCommand::Del { keys }
        }
        OP_INCRBY => {
            let key = bytes(r)?;
            let delta = r.i64().ok_or(DecodeError::Truncated(r.position()))?;
            WriteCommand::IncrBy { key, delta }
        }
        OP_MSET => {
            let n = list_count(r, 2 * BYTES_FIELD_MIN)?;
            let pairs = (0..n)
                .map(|_| Ok((bytes(r)?, bytes(r)?)))
                .collect::<Result<_, DecodeError>>()?;
            WriteCommand::MSet { pairs }
        }
        OP_APPEND => WriteCommand::Append {
            key: bytes(r)?,
            value: bytes(r)?,
        },
        OP_CAS => WriteCommand::Cas {
            key: bytes(r)?,
            expected: bytes(r)?,
            new: bytes(r)?,
        },
        other => return Err(DecodeError::UnknownOp(other)),
    })
}

/// A `bytes` field; failing means the input ended early.
fn bytes(r: &mut Reader) -> Result<Bytes, DecodeError> {
    r.bytes().ok_or(DecodeError::Truncated(r.position()))
}

fn list_count(r: &mut Reader, item_bytes_min: usize) -> Result<usize, DecodeError> {
    match r.count(item_bytes_min) {
        None => Err(DecodeError::Truncated(r.position())),
        Some(0) => Err(DecodeError::EmptyList),
        Some(n) => Ok(n),
    }
}
