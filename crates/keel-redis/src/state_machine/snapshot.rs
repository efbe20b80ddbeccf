//! The state machine's snapshot format.
//!
//! Format, version 7. Integers little-endian; `bytes` is a `u32` length then that many bytes.
//! Database 0 is where a single-database snapshot kept its keys; the databases after it follow
//! at the end (version 7).
//!
//! ```text
//! offset  size  field
//! 0       8     magic b"KEELKVS\0"
//! 8       4     format version u32 = 7 or 6 (1 to 5 are read too: see below)
//! 12      8     applied_index u64
//! 20      8     pairs digest u64          (the XOR of database 0's pair and deadline hashes:
//!                                          its share of `state_digest`; recomputed and
//!                                          compared on restore)
//! 28      4     dedup clients_max u32
//! 32      4     dedup replies_per_client_max u32
//! 36      8     key_count u64             (database 0's)
//! 44      ...   key_count x key entry, keys strictly ascending bytewise (database 0's):
//!                 bytes key,
//!                 1  kind u8              (0 string, 1 list, 2 hash, 3 set, 4 zset, 5 stream;
//!                                          versions 5 and 6, stream in 6 only)
//!                 the value: in versions 5 and 6 its body by kind (`collections/encoding.rs`: a
//!                 string is `bytes value`), in older versions `bytes value` (a string),
//!                 8  expire_at_ms u64     (0: no deadline; versions 4 to 6)
//!                 8  version u64          (log index of the key's last change, at most
//!                                          applied_index; versions 4 to 6)
//! ...     8     session_count u64         (<= clients_max)
//! ...     ...   session_count x session, client ids strictly ascending:
//!                 8  client_id u64
//!                 8  last_used_index u64  (unique across sessions)
//!                 8  seq_max u64
//!                 4  reply_count u32      (<= replies_per_client_max)
//!                 reply_count x (seq u64, reply), seqs strictly ascending within the window
//! ...     4     member_count u32          (<= MEMBER_ADDRS_MAX; versions 2 and 3)
//! ...     ...   member_count x (node id u64, bytes peer addr, bytes client addr), ids strictly
//!               ascending, each address at most MEMBER_ADDR_BYTES_MAX bytes, not both empty
//! ...     8     log_time_ms u64           (versions 3 and 4: the state machine's time at
//!                                          applied_index, the highest entry stamp applied; 0
//!                                          for none)
//! ...     1     versions_valid u8         (versions 4 to 6: 1, or 0 while the versions are the
//!                                          placeholders a restore of version 3 or older gave,
//!                                          `execute.rs`)
//! ...     8     tombstone horizon u64     (versions 4 to 6, at most applied_index)
//! ...     4     tombstone_count u32       (versions 4 to 6, <= TOMBSTONES_MAX)
//! ...     ...   tombstone_count x (bytes key, tombstone u64 <= applied_index), keys strictly
//!               ascending, none of them a key of the map (`key_metadata.rs`; database 0's)
//! ...     4     db_count u32              (version 7: the databases after 0 that hold keys or
//!                                          tombstones)
//! ...     ...   db_count x database, indexes strictly ascending, from 1 to below
//!               DATABASES_MAX (1,024):
//!                 4  db index u32
//!                 8  pairs digest u64     (this database's XOR of pair and deadline hashes,
//!                                          recomputed and compared on restore)
//!                 8  key_count u64
//!                 key_count x key entry, as database 0's
//!                 8  tombstone horizon u64
//!                 4  tombstone_count u32
//!                 tombstone_count x (bytes key, tombstone u64), as database 0's
//! end-4   4     crc32c of every byte before it
//! ```
//!
//! Version 6 is version 7 without the databases after 0 (it ends after database 0's tombstones):
//! it restores into database 0. It is still written for a state with nothing outside database 0,
//! so that such a snapshot is the same bytes a build before databases wrote, and an older build
//! reads it; a state with keys in another database is written as version 7, which an older build
//! refuses (it stops rather than diverge).
//!
//! Older versions, read and never written: version 5 is version 6 without streams (kind 5
//! came with them: a stream in a version 5 snapshot is malformed); version 4 has no kind byte (every value is a string);
//! version 3 has no deadlines, versions or tombstones;
//! version 2 also ends after the member addresses and version 1 after the sessions (no member
//! addresses). They restore with no deadlines, every version at applied_index, no tombstones,
//! `versions_valid` = 0, and version 1 and 2 with `log_time_ms` = 0, the state machine's time
//! before entries carried stamps. A build that reads only older versions refuses a newer
//! snapshot (and stops rather than diverge): like new log operations (`log_command.rs`), a new
//! version must not reach a node before every node runs a build that reads it.
//!
//! A reply is a tag byte and its payload: 0 `+OK`; 1 nil; 2 integer (i64); 3 error, then an error
//! code byte (1 not an integer, 2 overflow, 3 string too large, 6 too many members, 7 invalid
//! expire time followed by the command's code byte, `TtlCommand::code`, 8 not a valid float, 9
//! NaN or infinity, 10 string exceeds maximum allowed size, 11 no such key, 12 WRONGTYPE, 13 index out of range, 14 hash value is not an
//! integer, 15 hash value is not a float, 16 resulting score is not a number, 17 SORT of a value
//! that is not a number, 18 SORT result too large, 19 source and destination objects are the same; 4 request too old and 5 undecodable entry
//! exist only in relayed replies, never in a snapshot). Codes 8 to 18 came with the commands
//! that produce them (`log_command.rs`; SORT ... STORE in op 128): a snapshot holds one only once
//! such a command applied, which every replica must parse first anyway, so the format version is
//! unchanged.
//!
//! Restore checks, in order: the length holds at least a header and checksum; the checksum (so a
//! truncated or bit-flipped snapshot is rejected before anything is parsed); magic; version; then
//! every count and length against the bytes remaining, the orderings above, the value size bound,
//! and finally the recomputed digest. Any failure is a [`SnapshotError`] and leaves the state
//! machine unchanged.

use std::collections::{BTreeMap, VecDeque};

use bytes::{BufMut, Bytes};

use super::collections::{decode_value, encode_value, value_pair_hash};
use super::dedup::{DedupLimits, DedupTable, Session};
use super::digest::expiry_hash;
use super::key::Key;
use super::key_metadata::{Deadlines, Tombstones, TOMBSTONES_MAX};
use super::log_command::MEMBER_ADDR_BYTES_MAX;
use super::map::Map;
use super::value::{Stored, Value};
use super::{
    Db, KvStateMachine, MemberAddrs, WriteError, WriteReply, MEMBER_ADDRS_MAX, STRING_BYTES_MAX,
};
use crate::command::TtlCommand;
use crate::kind::Kind;
use keel_redis_types::wire::{put_bytes, Reader};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"KEELKVS\0";
const FORMAT_VERSION: u32 = 7;
/// The format before databases: what a state in database 0 alone is still written in (so an
/// older build reads it), and read.
const FORMAT_VERSION_WITHOUT_DBS: u32 = 6;
/// The format before streams: read, never written.
const FORMAT_VERSION_WITHOUT_STREAMS: u32 = 5;
/// The format before lists, hashes and sets: read, never written.
const FORMAT_VERSION_WITHOUT_KINDS: u32 = 4;
/// The format before deadlines, versions and tombstones: read, never written.
const FORMAT_VERSION_WITHOUT_EXPIRY: u32 = 3;
/// The format before the log time: read, never written.
const FORMAT_VERSION_WITHOUT_TIME: u32 = 2;
/// The format before member addresses: read, never written.
const FORMAT_VERSION_WITHOUT_MEMBERS: u32 = 1;
const HEADER_BYTES: usize = 44;
const CHECKSUM_BYTES: usize = 4;

/// Why a snapshot cannot be restored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot is {0} bytes, shorter than its header and checksum")]
    TooShort(usize),
    #[error("snapshot checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("not a keel key-value snapshot (bad magic)")]
    BadMagic,
    #[error("unsupported snapshot format version {0} (this build reads versions 1 to 7)")]
    UnsupportedVersion(u32),
    #[error("snapshot truncated inside {0}")]
    Truncated(&'static str),
    #[error("snapshot is malformed: {0}")]
    Malformed(&'static str),
    #[error("snapshot digest mismatch: stored {stored:#018x}, recomputed {computed:#018x}")]
    DigestMismatch { stored: u64, computed: u64 },
}

/// The decoded content of a snapshot, ready to become a state machine.
pub(crate) struct Restored {
    pub(crate) applied_index: u64,
    /// Every database, 0 first; those after it up to the highest the snapshot holds.
    pub(crate) dbs: Vec<Db>,
    pub(crate) versions_valid: bool,
    pub(crate) dedup: DedupTable,
    pub(crate) members: BTreeMap<u64, MemberAddrs>,
    pub(crate) log_time_ms: u64,
}

pub(crate) fn encode_reply(out: &mut Vec<u8>, reply: &WriteReply) {
    match reply {
        WriteReply::Ok => out.put_u8(0),
        WriteReply::Nil => out.put_u8(1),
        WriteReply::Integer(n) => {
            out.put_u8(2);
            out.put_i64_le(*n);
        }
        WriteReply::Error(error) => {
            out.put_u8(3);
            out.put_u8(match error {
                WriteError::NotInteger => 1,
                WriteError::Overflow => 2,
                WriteError::StringTooLarge => 3,
                WriteError::RequestTooOld => 4,
                WriteError::UndecodableEntry => 5,
                WriteError::TooManyMembers => 6,
                WriteError::InvalidExpireTime(_) => 7,
                WriteError::NotFloat => 8,
                WriteError::NanOrInfinity => 9,
                WriteError::StringExceedsMaxSize => 10,
                WriteError::NoSuchKey => 11,
                WriteError::WrongType => 12,
                WriteError::IndexOutOfRange => 13,
                WriteError::HashValueNotInteger => 14,
                WriteError::HashValueNotFloat => 15,
                WriteError::ScoreNotANumber => 16,
                WriteError::SortNotDouble => 17,
                WriteError::SortTooLarge => 18,
                WriteError::SameObject => 19,
            });
            if let WriteError::InvalidExpireTime(command) = error {
                out.put_u8(command.code());
            }
        }
    }
}

/// Why a reply could not be read.
#[derive(Clone, Copy)]
pub(crate) enum ReplyDecodeError {
    Truncated,
    Unknown,
}

/// Reads one reply in the encoding of [`encode_reply`].
pub(crate) fn read_reply(r: &mut Reader) -> Result<WriteReply, ReplyDecodeError> {
    let truncated = ReplyDecodeError::Truncated;
    Ok(match r.u8().ok_or(ReplyDecodeError::Truncated)? {
        0 => WriteReply::Ok,
        1 => WriteReply::Nil,
        2 => WriteReply::Integer(r.i64().ok_or(truncated)?),
        3 => WriteReply::Error(match r.u8().ok_or(truncated)? {
            1 => WriteError::NotInteger,
            2 => WriteError::Overflow,
            3 => WriteError::StringTooLarge,
            4 => WriteError::RequestTooOld,
            5 => WriteError::UndecodableEntry,
            6 => WriteError::TooManyMembers,
            7 => WriteError::InvalidExpireTime(
                TtlCommand::from_code(r.u8().ok_or(truncated)?).ok_or(ReplyDecodeError::Unknown)?,
            ),
            8 => WriteError::NotFloat,
            9 => WriteError::NanOrInfinity,
            10 => WriteError::StringExceedsMaxSize,
            11 => WriteError::NoSuchKey,
            12 => WriteError::WrongType,
            13 => WriteError::IndexOutOfRange,
            14 => WriteError::HashValueNotInteger,
            15 => WriteError::HashValueNotFloat,
            16 => WriteError::ScoreNotANumber,
            17 => WriteError::SortNotDouble,
            18 => WriteError::SortTooLarge,
            19 => WriteError::SameObject,
            _ => return Err(ReplyDecodeError::Unknown),
        }),
        _ => return Err(ReplyDecodeError::Unknown),
    })
}

fn decode_reply(r: &mut Reader) -> Result<WriteReply, SnapshotError> {
    match read_reply(r) {
        // Never remembered: a refused request changes nothing, its reply included, and an
        // undecodable entry names no request.
        Ok(WriteReply::Error(WriteError::RequestTooOld | WriteError::UndecodableEntry))
        | Err(ReplyDecodeError::Unknown) => Err(SnapshotError::Malformed(
            "unknown reply in the deduplication table",
        )),
        Err(ReplyDecodeError::Truncated) => Err(SnapshotError::Truncated("a remembered reply")),
        Ok(reply) => Ok(reply),
    }
}

/// Encodes a state (the state machine itself, or the cheap copy a [`super::SnapshotView`] holds
/// while the state machine keeps applying).
pub(crate) fn encode(sm: &KvStateMachine) -> Vec<u8> {
    let mut out = Vec::new();
    encode_to(&mut out, sm).expect("writing to a Vec");
    out
}

/// Bytes buffered by [`encode_to`] between writes to its output.
const ENCODE_BUFFER_BYTES: usize = 256 << 10;

/// Streams the encoding of [`encode`] into `out` through a bounded buffer, computing the trailing
/// checksum on the way: a large state is never serialized whole in memory.
pub(crate) fn encode_to(out: &mut dyn std::io::Write, sm: &KvStateMachine) -> std::io::Result<()> {
    let version = match other_dbs(sm).is_empty() {
        true => FORMAT_VERSION_WITHOUT_DBS,
        false => FORMAT_VERSION,
    };
    encode_version_to(out, sm, version)
}

/// The state in an older format (what an older build wrote), for the tests that show this one
/// still reads it. Whatever the older format cannot hold is left out.
#[cfg(test)]
pub(crate) fn encode_version(sm: &KvStateMachine, version: u32) -> Vec<u8> {
    let mut out = Vec::new();
    encode_version_to(&mut out, sm, version).expect("writing to a Vec");
    out
}

/// The encoder's output: a bounded buffer written out when full, and the checksum of every byte
/// written so far.
struct Sink<'a> {
    buf: Vec<u8>,
    crc: u32,
    out: &'a mut dyn std::io::Write,
}

impl Sink<'_> {
    fn flush(&mut self) -> std::io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Room for `bytes` more: the buffer is written out first when they would not fit.
    fn room(&mut self, bytes: usize) -> std::io::Result<()> {
        if self.buf.len() + bytes > ENCODE_BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// The buffer written out, then the checksum.
    fn finish(mut self) -> std::io::Result<()> {
        self.flush()?;
        self.out.write_all(&self.crc.to_le_bytes())
    }
}

/// The pairs of one database an encoding of `version` holds, in ascending key order: an older
/// format (tests only) holds what it knew, strings alone or no streams.
fn pairs_of(data: &Map, version: u32) -> Vec<(&Key, &Stored)> {
    let with_kinds = version >= FORMAT_VERSION_WITHOUT_STREAMS;
    data.sorted()
        .into_iter()
        .filter(|(_, stored)| match stored.kind() {
            Kind::String => true,
            Kind::Stream => version >= FORMAT_VERSION_WITHOUT_DBS,
            _ => with_kinds,
        })
        .collect()
}

/// The key entries of `keys` (the count is the caller's).
fn put_keys(sink: &mut Sink, keys: &[(&Key, &Stored)], version: u32) -> std::io::Result<()> {
    let with_expiry = version >= FORMAT_VERSION_WITHOUT_KINDS;
    let with_kinds = version >= FORMAT_VERSION_WITHOUT_STREAMS;
    let put_key_entry = |out: &mut Vec<u8>, key: &Key, stored: &Stored| {
        put_bytes(out, key);
        if with_kinds {
            out.put_u8(stored.kind().tag());
            encode_value(out, &stored.value);
        } else {
            put_bytes(out, stored.string().expect("strings only"));
        }
        if with_expiry {
            out.put_u64_le(stored.expire_at_ms);
            out.put_u64_le(stored.version);
        }
    };
    for (key, stored) in keys {
        let entry_bytes = key.len() + stored.counted_bytes() as usize + KEY_ENTRY_FIXED_BYTES;
        sink.room(entry_bytes)?;
        if entry_bytes > ENCODE_BUFFER_BYTES {
            // An entry larger than the buffer goes straight through.
            put_key_entry(&mut sink.buf, key, stored);
            sink.flush()?;
            continue;
        }
        put_key_entry(&mut sink.buf, key, stored);
    }
    Ok(())
}

/// A tombstone table: horizon, count, entries.
fn put_tombstones(sink: &mut Sink, tombstones: &Tombstones) -> std::io::Result<()> {
    sink.buf.put_u64_le(tombstones.horizon());
    let sorted = tombstones.sorted();
    sink.buf
        .put_u32_le(u32::try_from(sorted.len()).expect("bounded by TOMBSTONES_MAX"));
    for (key, tombstone) in sorted {
        sink.room(key.len() + 12)?;
        put_bytes(&mut sink.buf, key);
        sink.buf.put_u64_le(tombstone);
    }
    Ok(())
}

/// The databases after 0 that are not blank, with their indexes (version 7).
fn other_dbs(sm: &KvStateMachine) -> Vec<(u32, &Db)> {
    (sm.dbs.iter().enumerate().skip(1))
        .filter(|(_, db)| !db.is_blank())
        .map(|(i, db)| (i as u32, db))
        .collect()
}

fn encode_version_to(
    out: &mut dyn std::io::Write,
    sm: &KvStateMachine,
    version: u32,
) -> std::io::Result<()> {
    let (db0, dedup) = (&sm.dbs[0], &sm.dedup);
    let with_expiry = version >= FORMAT_VERSION_WITHOUT_KINDS;
    let keys = pairs_of(&db0.data, version);
    let mut sink = Sink {
        buf: Vec::with_capacity(ENCODE_BUFFER_BYTES + 64),
        crc: 0,
        out,
    };
    sink.buf.put_slice(MAGIC);
    sink.buf.put_u32_le(version);
    sink.buf.put_u64_le(sm.applied_index);
    sink.buf
        .put_u64_le(if version >= FORMAT_VERSION_WITHOUT_DBS {
            db0.digest
        } else {
            keys.iter().fold(0, |digest, (key, stored)| {
                let deadline = if with_expiry { stored.expire_at_ms } else { 0 };
                digest ^ stored.pair_hash ^ expiry_hash(key, deadline)
            })
        });
    let limits = dedup.limits();
    sink.buf.put_u32_le(limits.clients_max);
    sink.buf.put_u32_le(limits.replies_per_client_max);
    sink.buf.put_u64_le(keys.len() as u64);
    debug_assert_eq!(sink.buf.len(), HEADER_BYTES);
    put_keys(&mut sink, &keys, version)?;
    sink.buf.put_u64_le(dedup.len() as u64);
    for (client_id, session) in dedup.sorted_sessions() {
        if sink.buf.len() > ENCODE_BUFFER_BYTES {
            sink.flush()?;
        }
        let buf = &mut sink.buf;
        buf.put_u64_le(client_id);
        buf.put_u64_le(session.last_used_index);
        buf.put_u64_le(session.seq_max);
        buf.put_u32_le(session.replies.len() as u32);
        for (seq, reply) in &session.replies {
            buf.put_u64_le(*seq);
            encode_reply(buf, reply);
        }
    }
    if version >= FORMAT_VERSION_WITHOUT_TIME {
        let buf = &mut sink.buf;
        buf.put_u32_le(u32::try_from(sm.members.len()).expect("bounded by MEMBER_ADDRS_MAX"));
        for (id, addrs) in &sm.members {
            buf.put_u64_le(*id);
            put_bytes(buf, &addrs.peer);
            put_bytes(buf, &addrs.client);
        }
    }
    if version >= FORMAT_VERSION_WITHOUT_EXPIRY {
        sink.buf.put_u64_le(sm.log_time_ms);
    }
    if with_expiry {
        sink.buf.put_u8(u8::from(sm.versions_valid));
        put_tombstones(&mut sink, &db0.tombstones)?;
    }
    if version >= FORMAT_VERSION {
        put_other_dbs(&mut sink, sm, version)?;
    }
    sink.finish()
}

/// The databases after 0 (version 7).
fn put_other_dbs(sink: &mut Sink, sm: &KvStateMachine, version: u32) -> std::io::Result<()> {
    let others = other_dbs(sm);
    sink.buf.put_u32_le(others.len() as u32);
    for (index, db) in others {
        let keys = pairs_of(&db.data, version);
        sink.room(20)?;
        sink.buf.put_u32_le(index);
        sink.buf.put_u64_le(db.digest);
        sink.buf.put_u64_le(keys.len() as u64);
        put_keys(sink, &keys, version)?;
        put_tombstones(sink, &db.tombstones)?;
    }
    Ok(())
}

impl super::SnapshotView {
    /// Streams the snapshot of this view into `out` (same bytes as [`Self::encode`]), on
    /// whatever thread holds the view.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        encode_to(out, &self.0)
    }
}

#[expect(clippy::too_many_lines)]
pub(crate) fn decode(snapshot: &[u8]) -> Result<Restored, SnapshotError> {
    if snapshot.len() < HEADER_BYTES + 8 + CHECKSUM_BYTES {
        return Err(SnapshotError::TooShort(snapshot.len()));
    }
    let (body, stored_crc) = snapshot.split_at(snapshot.len() - CHECKSUM_BYTES);
    let stored = u32::from_le_bytes(stored_crc.try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch { stored, computed });
    }
    if &body[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    // The reader works on a copy of the body; keys and values are copied out of it again, each
    // into its own allocation (see `key.rs`), so the body is freed once restored.
    let mut r = Reader::new(Bytes::copy_from_slice(&body[8..]));
    let header = SnapshotError::Truncated("the header");
    let version = r.u32().ok_or(header.clone())?;
    if ![
        FORMAT_VERSION,
        FORMAT_VERSION_WITHOUT_DBS,
        FORMAT_VERSION_WITHOUT_STREAMS,
        FORMAT_VERSION_WITHOUT_KINDS,
        FORMAT_VERSION_WITHOUT_EXPIRY,
        FORMAT_VERSION_WITHOUT_TIME,
        FORMAT_VERSION_WITHOUT_MEMBERS,
    ]
    .contains(&version)
    {
        return Err(SnapshotError::UnsupportedVersion(version));
    }
    let applied_index = r.u64().ok_or(header.clone())?;
    let stored_digest = r.u64().ok_or(header.clone())?;
    let limits = DedupLimits {
        clients_max: r.u32().ok_or(header.clone())?,
        replies_per_client_max: r.u32().ok_or(header.clone())?,
    };
    let key_count = r.u64().ok_or(header)?;

    let has_expiry = version >= FORMAT_VERSION_WITHOUT_KINDS;
    let (data, deadlines, digest) = decode_keys(&mut r, key_count, version, applied_index)?;

    let session_count = r
        .u64()
        .ok_or(SnapshotError::Truncated("the session count"))?;
    if session_count > u64::from(limits.clients_max) {
        return Err(SnapshotError::Malformed("more sessions than clients_max"));
    }
    let mut sessions = BTreeMap::new();
    let mut previous_client: Option<u64> = None;
    for _ in 0..session_count {
        let (client_id, session) = decode_session(&mut r, &limits)?;
        if previous_client.is_some_and(|p| p >= client_id) {
            return Err(SnapshotError::Malformed(
                "client ids not strictly ascending",
            ));
        }
        if session.last_used_index > applied_index {
            return Err(SnapshotError::Malformed(
                "session used after the applied index",
            ));
        }
        previous_client = Some(client_id);
        sessions.insert(client_id, session);
    }
    let members = if version == FORMAT_VERSION_WITHOUT_MEMBERS {
        BTreeMap::new()
    } else {
        decode_members(&mut r)?
    };
    let log_time_ms = if version >= FORMAT_VERSION_WITHOUT_EXPIRY {
        r.u64().ok_or(SnapshotError::Truncated("the log time"))?
    } else {
        0
    };
    let (versions_valid, tombstones) = if has_expiry {
        decode_tombstones(&mut r, &data, applied_index)?
    } else {
        (false, Tombstones::default())
    };
    let mut dbs = vec![Db {
        data,
        digest,
        deadlines,
        tombstones,
    }];
    if version >= FORMAT_VERSION {
        decode_other_dbs(&mut r, version, applied_index, &mut dbs)?;
    }
    if r.remaining() > 0 {
        return Err(SnapshotError::Malformed("bytes after the last section"));
    }
    let dedup = DedupTable::from_sessions(limits, sessions).map_err(SnapshotError::Malformed)?;
    if dbs[0].digest != stored_digest {
        return Err(SnapshotError::DigestMismatch {
            stored: stored_digest,
            computed: dbs[0].digest,
        });
    }
    Ok(Restored {
        applied_index,
        dbs,
        versions_valid,
        dedup,
        members,
        log_time_ms,
    })
}

/// `key_count` key entries of one database: its map, deadlines and pairs digest.
fn decode_keys(
    r: &mut Reader,
    key_count: u64,
    version: u32,
    applied_index: u64,
) -> Result<(Map, Deadlines, u64), SnapshotError> {
    let has_expiry = version >= FORMAT_VERSION_WITHOUT_KINDS;
    let has_kinds = version >= FORMAT_VERSION_WITHOUT_STREAMS;
    let mut data = Map::default();
    let mut deadlines = Deadlines::default();
    let mut digest = 0u64;
    let mut previous: Option<Bytes> = None;
    for _ in 0..key_count {
        // Each pair takes at least 8 bytes, so a huge count runs out of input before it runs
        // out of memory: nothing is preallocated from it.
        let pair = SnapshotError::Truncated("a key-value pair");
        let key = r.bytes().ok_or(pair.clone())?;
        let value = if has_kinds {
            let tag = r.u8().ok_or(pair.clone())?;
            let kind = Kind::from_tag(tag)
                .filter(|kind| *kind != Kind::Stream || version >= FORMAT_VERSION_WITHOUT_DBS)
                .ok_or(SnapshotError::Malformed("unknown kind of value"))?;
            decode_value(r, kind)?
        } else {
            Value::Str(Arc::from(&r.bytes().ok_or(pair.clone())?[..]))
        };
        let (expire_at_ms, key_version) = if has_expiry {
            (r.u64().ok_or(pair.clone())?, r.u64().ok_or(pair)?)
        } else {
            (0, applied_index)
        };
        if previous.as_ref().is_some_and(|p| *p >= key) {
            return Err(SnapshotError::Malformed("keys not strictly ascending"));
        }
        if key.len() > STRING_BYTES_MAX {
            return Err(SnapshotError::Malformed("key over the size limit"));
        }
        if key_version > applied_index {
            return Err(SnapshotError::Malformed(
                "a key changed after the applied index",
            ));
        }
        let hash = value_pair_hash(&key, &value);
        digest ^= hash ^ expiry_hash(&key, expire_at_ms);
        if expire_at_ms != 0 {
            deadlines.insert(expire_at_ms, &key);
        }
        data.insert_new(
            &key,
            Stored::holding(value, hash, expire_at_ms, key_version),
        );
        previous = Some(key);
    }

    Ok((data, deadlines, digest))
}

/// The databases after 0 (version 7): count, then each with its index, pairs digest, keys and
/// tombstones, indexes strictly ascending from 1 and below `DATABASES_MAX`.
fn decode_other_dbs(
    r: &mut Reader,
    version: u32,
    applied_index: u64,
    dbs: &mut Vec<Db>,
) -> Result<(), SnapshotError> {
    let truncated = SnapshotError::Truncated("the databases");
    let count = r.u32().ok_or(truncated.clone())?;
    for _ in 0..count {
        let index = r.u32().ok_or(truncated.clone())?;
        let stored_digest = r.u64().ok_or(truncated.clone())?;
        let key_count = r.u64().ok_or(truncated.clone())?;
        if (index as usize) < dbs.len() || index >= super::DATABASES_MAX {
            return Err(SnapshotError::Malformed(
                "database indexes not strictly ascending from 1, or out of range",
            ));
        }
        let (data, deadlines, digest) = decode_keys(r, key_count, version, applied_index)?;
        if digest != stored_digest {
            return Err(SnapshotError::DigestMismatch {
                stored: stored_digest,
                computed: digest,
            });
        }
        let tombstones = decode_tombstone_table(r, &data, applied_index)?;
        dbs.resize_with(index as usize, Db::default);
        dbs.push(Db {
            data,
            digest,
            deadlines,
            tombstones,
        });
    }
    Ok(())
}

/// Bytes of a key entry besides its key and value: two lengths, the kind, the deadline and the
/// version.
const KEY_ENTRY_FIXED_BYTES: usize = 4 + 4 + 1 + 8 + 8;

fn decode_tombstones(
    r: &mut Reader,
    data: &Map,
    applied_index: u64,
) -> Result<(bool, Tombstones), SnapshotError> {
    let truncated = SnapshotError::Truncated("the tombstones");
    let versions_valid = match r.u8().ok_or(truncated.clone())? {
        0 => false,
        1 => true,
        _ => return Err(SnapshotError::Malformed("versions_valid is not 0 or 1")),
    };
    Ok((
        versions_valid,
        decode_tombstone_table(r, data, applied_index)?,
    ))
}

/// A tombstone table: horizon, count, entries (none of them a key of `data`).
fn decode_tombstone_table(
    r: &mut Reader,
    data: &Map,
    applied_index: u64,
) -> Result<Tombstones, SnapshotError> {
    let truncated = SnapshotError::Truncated("the tombstones");
    let horizon = r.u64().ok_or(truncated.clone())?;
    let count = r.u32().ok_or(truncated.clone())? as usize;
    if count > TOMBSTONES_MAX || horizon > applied_index {
        return Err(SnapshotError::Malformed("tombstones out of bounds"));
    }
    let mut removed_at = std::collections::HashMap::with_capacity(count.min(r.remaining() / 12));
    let mut previous: Option<Bytes> = None;
    for _ in 0..count {
        let key = r.bytes().ok_or(truncated.clone())?;
        let tombstone = r.u64().ok_or(truncated.clone())?;
        if previous.as_ref().is_some_and(|p| *p >= key) {
            return Err(SnapshotError::Malformed(
                "tombstones not strictly ascending",
            ));
        }
        if tombstone > applied_index || data.contains_key(&key) || key.len() > STRING_BYTES_MAX {
            return Err(SnapshotError::Malformed("a tombstone out of bounds"));
        }
        removed_at.insert(Key::new(&key), tombstone);
        previous = Some(key);
    }
    Ok(Tombstones::from_parts(removed_at, horizon))
}

fn decode_members(r: &mut Reader) -> Result<BTreeMap<u64, MemberAddrs>, SnapshotError> {
    let truncated = SnapshotError::Truncated("the member addresses");
    let count = r.u32().ok_or(truncated.clone())? as usize;
    if count > MEMBER_ADDRS_MAX {
        return Err(SnapshotError::Malformed(
            "more member addresses than allowed",
        ));
    }
    let mut members = BTreeMap::new();
    for _ in 0..count {
        let id = r.u64().ok_or(truncated.clone())?;
        let peer = r.bytes().ok_or(truncated.clone())?;
        let client = r.bytes().ok_or(truncated.clone())?;
        if members
            .last_key_value()
            .is_some_and(|(last, _)| *last >= id)
            || id == 0
        {
            return Err(SnapshotError::Malformed(
                "member ids not strictly ascending",
            ));
        }
        if peer.len().max(client.len()) > MEMBER_ADDR_BYTES_MAX
            || (peer.is_empty() && client.is_empty())
        {
            return Err(SnapshotError::Malformed("a member address out of bounds"));
        }
        members.insert(id, MemberAddrs { id, peer, client });
    }
    Ok(members)
}

fn decode_session(r: &mut Reader, limits: &DedupLimits) -> Result<(u64, Session), SnapshotError> {
    let truncated = SnapshotError::Truncated("a session");
    let client_id = r.u64().ok_or(truncated.clone())?;
    let last_used_index = r.u64().ok_or(truncated.clone())?;
    let seq_max = r.u64().ok_or(truncated.clone())?;
    let reply_count = r.u32().ok_or(truncated)?;
    if reply_count > limits.replies_per_client_max {
        return Err(SnapshotError::Malformed("more replies than the window"));
    }
    // A reply takes at least 9 bytes: check before the count sizes an allocation.
    if reply_count as usize * 9 > r.remaining() {
        return Err(SnapshotError::Truncated("a session's replies"));
    }
    let mut replies = VecDeque::with_capacity(reply_count as usize);
    for _ in 0..reply_count {
        let seq = r
            .u64()
            .ok_or(SnapshotError::Truncated("a remembered reply"))?;
        replies.push_back((seq, decode_reply(r)?));
    }
    Ok((
        client_id,
        Session {
            last_used_index,
            seq_max,
            replies,
        },
    ))
}
