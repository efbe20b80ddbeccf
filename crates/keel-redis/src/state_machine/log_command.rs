//! The log entry payload for a key-value write: the command plus the request id that makes a
//! retry harmless, and the time its leader proposed it.
//!
//! Format, version 2 or 3. Integers little-endian; `bytes` is a `u32` length then that many
//! bytes; `count` is a `u32`; `db` is a `u32` database index below `DATABASES_MAX` (1,024; an
//! entry naming a higher one does not decode).
//!
//! ```text
//! offset size  field
//! 0      1     format version = 2 or 3 (1 is read too: see below)
//! 1      8     client_id   u64   (who sent it; the dedup session)
//! 9      8     request_seq u64   (per client, unique per request; a retry reuses it)
//! 17     8     stamp_ms    u64   (the proposer's wall-clock time when it proposed the entry, in
//!                                 ms since the Unix epoch; 0: no time information)
//! 25     4     db          u32   (version 3 only: the database the command runs in, its
//!                                 client's SELECT; a version 2 entry runs in database 0)
//! 25/29  1     op: 1 SET, 2 DEL, 3 INCRBY, 4 MSET, 5 APPEND, 6 CAS, 7 EXEC, 8 MEMBER ADDRS,
//!              9 SET WITH, 10 MSETNX, 11 GETDEL, 12 GETEX, 13 EXPIRE, 14 PERSIST, 15 FLUSHALL,
//!              48 TICK, 49 EXEC WATCHED, 64 INCRBYFLOAT, 65 SETRANGE, 66 SETBIT, 67 RENAME,
//!              68 RENAMENX, 69 COPY, 70 FLUSHDB, 71 SWAPDB, 72 MOVE, 73 COPY DB, 50 EXEC
//!              WATCHED DB, 128 COLLECTION (64..=95 are for writes, 96..=127 for reads inside an
//!              EXEC)
//! 26/30  ...   body, by op:
//!              SET     condition u8 (0 always, 1 NX, 2 XX), bytes key, bytes value
//!              DEL     count n >= 1, then n x bytes key
//!              INCRBY  bytes key, delta i64
//!              MSET    count n >= 1, then n x (bytes key, bytes value)
//!              APPEND  bytes key, bytes value
//!              CAS     bytes key, bytes expected, bytes new
//!              SET WITH  condition u8, get u8 (0 or 1), expiry, command u8, bytes key,
//!                      bytes value: SET with EX/PX/EXAT/PXAT/KEEPTTL/GET, SETEX, PSETEX, GETSET
//!              MSETNX  count n >= 1, then n x (bytes key, bytes value) (SETNX: n = 1)
//!              GETDEL  bytes key
//!              GETEX   expiry, bytes key (expiry kind 0: PERSIST)
//!              EXPIRE  expiry (kind 2 or 3), condition u8 (0 always, 1 NX, 2 XX, 3 GT, 4 LT, 5 XX LT),
//!                      command u8, bytes key
//!              PERSIST bytes key
//!              FLUSHALL  (no body): every database (an entry written before databases existed
//!                      emptied database 0, then the only one: the same effect)
//!              FLUSHDB  (no body): the entry's database (before databases, FLUSHDB was logged as 15)
//!              SWAPDB  db a, db b
//!              MOVE    db destination, bytes key
//!              COPY DB  replace u8 (0 or 1), db destination, bytes source, bytes destination
//!              INCRBYFLOAT  bytes key, delta u64 (the f64's IEEE 754 bits)
//!              SETRANGE  bytes key, offset u64, bytes value
//!              SETBIT  bytes key, offset u64 (bit offset), bit u8 (0 or 1)
//!              RENAME  bytes key, bytes new key
//!              RENAMENX  bytes key, bytes new key
//!              COPY    replace u8 (0 or 1), bytes source, bytes destination
//!              COLLECTION  count n >= 1, then n x bytes: a write on a list, hash, set or sorted set as its
//!                      arguments, its name first (LPUSH, HSET, SADD, ...). Every replica parses
//!                      them again (`crate::command::collections`); arguments that do not parse
//!                      to such a write make the entry undecodable. A blocked client's pop is
//!                      one too: `RAFT.BLOCKED deadline-ms woken` then its command (BLPOP, ...,
//!                      XREAD and XREADGROUP with BLOCK), see `crate::command::blocking`. A build
//!                      from before blocking stream reads cannot parse such an attempt naming
//!                      XREAD or XREADGROUP (undecodable: a no-op there): every replica must
//!                      run a build that reads it before a client blocks in XREAD.
//!              EXEC    count n >= 1, then n x (op u8, body): a MULTI ... EXEC transaction, run
//!                      in order as this one entry under this one request id. op is one of
//!                        1..6, 9..15, 64..69, 128  a write, its body as above
//!                        16 GET     bytes key
//!                        17 MGET    count n >= 1, then n x bytes key
//!                        18 EXISTS  count n >= 1, then n x bytes key
//!                        19 STRLEN  bytes key
//!                        20 DBSIZE  (no body)
//!                        21 TTL     form u8 (0 TTL, 1 PTTL, 2 EXPIRETIME, 3 PEXPIRETIME),
//!                                   bytes key
//!                        22 WATCHPOINT  (no body; replies [applied index, log time])
//!                        96 GETRANGE  bytes key, start i64, end i64 (also SUBSTR)
//!                        97 GETBIT  bytes key, offset u64
//!                        98 BITCOUNT  range u8 (0 the whole value, 1 a byte range, 2 a
//!                                   bit range), start i64, end i64 (both 0 for range 0),
//!                                   bytes key
//!                        99 LCS     form u8 (0 the subsequence, 1 LEN, 2 IDX, 3 IDX
//!                                   WITHMATCHLEN), min match len u64 (0 for forms 0 and 1),
//!                                   bytes key1, bytes key2
//!                        100 TYPE   bytes key
//!                        101 RANDOMKEY  (no body)
//!                        102 KEYS   bytes pattern
//!                        103 SCAN   cursor u64, count u32 (>= 1; above SCAN_COUNT_MAX it
//!                                   counts as that), strings u8 (1, or 0 when TYPE names
//!                                   another type), pattern u8 (0 none, 1: then bytes pattern)
//!                        23 SELECT  db (the commands after it run in that database)
//!                        32 PING    (no body; replies PONG)
//!                        33 ECHO    bytes message (ECHO, and PING with a message)
//!                        129 COLLECTION READ  count n >= 1, then n x bytes: a read of a list,
//!                                   hash or set as its arguments (LRANGE, HGET, ...), parsed
//!                                   again as op 128 is
//!                      An EXEC inside an EXEC, or a read op outside one, is invalid.
//!              EXEC WATCHED  count w >= 1, then w x (bytes key, index u64, time_ms u64): the
//!                      keys the transaction watches and the applied index and log time they
//!                      were watched at; then count n >= 0 and n x (op u8, body) as EXEC. Aborted,
//!                      nothing run, if a watched key changed since (`key_metadata.rs`).
//!              EXEC WATCHED DB  as EXEC WATCHED, each watched key preceded by its db (written
//!                      only when a watched key is in a database other than 0)
//!              TICK    count n >= 0, then n x bytes key: the leader's tick (the log's time moves
//!                      on) naming keys to remove, from every database, where they have expired
//!                      (active expiry; the header's db is 0 and means nothing). Its
//!                      client_id and request_seq are 0: a tick is not deduplicated. Not valid
//!                      inside an EXEC.
//!
//!              expiry  kind u8 (0 none, 1 keep, 2 ms after the entry's time, 3 at this time in
//!                      ms since the epoch), then ms i64 (0 for kinds 0 and 1)
//!              command u8: the command named in an "invalid expire time" error
//!                      (`TtlCommand::code`)
//!              MEMBER ADDRS  node id u64 (> 0), bytes peer addr, bytes client addr: where a
//!                      member is reached, recorded with a membership change so that every
//!                      replica knows it; each address is `host:port` or empty (unknown), at
//!                      most 300 bytes; both empty forgets the member's addresses. Not valid
//!                      inside an EXEC.
//! ```
//!
//! Version 1 is the same without `stamp_ms` (op at offset 17, body from 18). It is still decoded,
//! as `stamp_ms` = 0: entries written before version 2 keep applying exactly as they did, and
//! carry no time. Version 2 is version 3 without `db` (op at offset 25): it decodes as database
//! 0. Encoding writes version 2 for an entry in database 0 and version 3 for any other, so an
//! entry in database 0 is byte for byte what a build before databases wrote.
//!
//! Mixed versions and databases: a build before version 3 reads every entry of database 0 this
//! build writes (ops 70 to 73, 50 and 23 aside) and fails to decode an entry of another database,
//! which it would apply as a no-op while newer replicas apply it. So no client may select a
//! database other than 0, nor send SWAPDB, MOVE, COPY ... DB or FLUSHDB, before every replica
//! runs a build that reads version 3 (the same rule as for any new op, below).
//!
//! The stamp is the leader's clock, taken when it proposes a batch (`connection/pipeline.rs`,
//! `Pipeline::take_batch`); nothing orders it: a new leader's clock may be behind the old one's,
//! so a later entry may carry a lower stamp. The state machine derives its time from the stamps
//! so that it is monotone and the same on every replica (`log_time_ms` in `mod.rs`).
//!
//! Mixed-version clusters: a build that reads only version 1 cannot decode a version-2 entry; it
//! applies it as the documented no-op (below) while newer replicas apply it, and they diverge. So
//! every replica must run a build that reads version 2 before any of them proposes it. This build
//! always writes version 2 (there is no negotiation): a cluster of builds that read only version 1
//! is upgraded by stopping every node and starting them all on this build, not by a rolling
//! upgrade, in which a node already upgraded could lead while others are not.
//!
//! Ops 7 (EXEC), 8 (MEMBER ADDRS), 9 to 15, 21, 22, 48, 49, 64 to 69, 96 to 103, 128 and 129 were added
//! without changing the version byte: every entry written before them decodes exactly as before,
//! and a build that predates one does not decode it (an unknown op) rather than misreading it.
//!
//! Nothing may follow the body. INCR, DECR and DECRBY are logged as INCRBY with their delta. The
//! entry has no checksum of its own: the WAL and the peer transport checksum every entry.
//!
//! A decoder that meets a version or op it does not know fails ([`DecodeError`]) rather than
//! guessing. The state machine applies such an entry as a no-op (a peer can get any bytes
//! committed, and a crash loop on every replica is worse): so a new op or version must not be
//! proposed before every replica decodes it, or an older replica would skip what newer ones
//! apply and diverge.

use bytes::{BufMut, Bytes};

use crate::command::{QueuedCommand, WatchedKey, WriteCommand};
use fields::{bytes, count, field_len, list_count};
use keel_redis_types::wire::{put_bytes, Reader};
use queued::{decode_queued, put_queued, queued_len_hint};
use writes::{decode_write, put_write, write_len_hint};

mod fields;
mod queued;
mod strings_and_keys;
mod writes;

const FORMAT_VERSION: u8 = 2;
/// The format with a database index: written for entries outside database 0.
const FORMAT_VERSION_WITH_DB: u8 = 3;
/// The format before `stamp_ms`: read, never written.
const FORMAT_VERSION_WITHOUT_STAMP: u8 = 1;
/// Bytes before the op: version, client_id, request_seq, stamp_ms.
const HEADER_BYTES: usize = 25;
/// Where format 2 keeps the stamp.
const STAMP_OFFSET: usize = 17;

const OP_SET: u8 = 1;
const OP_DEL: u8 = 2;
const OP_INCRBY: u8 = 3;
const OP_MSET: u8 = 4;
const OP_APPEND: u8 = 5;
const OP_CAS: u8 = 6;
const OP_EXEC: u8 = 7;
const OP_MEMBER_ADDRS: u8 = 8;
const OP_SET_WITH: u8 = 9;
const OP_MSETNX: u8 = 10;
const OP_GETDEL: u8 = 11;
const OP_GETEX: u8 = 12;
const OP_EXPIRE: u8 = 13;
const OP_PERSIST: u8 = 14;
const OP_FLUSHALL: u8 = 15;
const OP_TICK: u8 = 48;
const OP_EXEC_WATCHED: u8 = 49;
const OP_EXEC_WATCHED_DB: u8 = 50;
/// SELECT, only inside an EXEC.
const OP_SELECT: u8 = 23;
/// Bytes of an encoded expiry: kind and ms.
const EXPIRY_BYTES: usize = 9;
/// Longest address in a MEMBER ADDRS entry (the admin command's bound,
/// `crate::command::ADDR_BYTES_MAX`).
pub const MEMBER_ADDR_BYTES_MAX: usize = crate::command::ADDR_BYTES_MAX;
// Only inside an EXEC.
const OP_GET: u8 = 16;
const OP_MGET: u8 = 17;
const OP_EXISTS: u8 = 18;
const OP_STRLEN: u8 = 19;
const OP_DBSIZE: u8 = 20;
const OP_TTL: u8 = 21;
const OP_WATCHPOINT: u8 = 22;
const OP_PING: u8 = 32;
/// A command on a list, hash, set or sorted set, as its arguments (`crate::command::collections`).
const OP_COLLECTION_WRITE: u8 = 128;
/// A read of a list, hash, set or sorted set inside an EXEC, as its arguments.
const OP_COLLECTION_READ: u8 = 129;
const OP_ECHO: u8 = 33;

/// Smallest encoding of one `bytes` field (an empty one): its length.
const BYTES_FIELD_MIN: usize = 4;

/// A write as the Raft log carries it.
///
/// `client_id` must be unique for the life of the cluster and never reused (not after a node
/// restart either): a reused id whose seqs start again at 1 would be answered from the old
/// session's remembered replies without applying. A random 64-bit id per connection, or one built
/// from (node id, a persisted incarnation counter, a connection counter), satisfies this.
/// `request_seq` counts that client's writes from 1; a retry reuses the original's seq.
///
/// `stamp_ms` is the proposer's wall-clock time in ms since the Unix epoch, taken when it proposed
/// the entry (0: no time information, as in a version-1 entry). A retry under the same request id
/// is stamped again when it is proposed again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogCommand {
    pub client_id: u64,
    pub request_seq: u64,
    pub stamp_ms: u64,
    /// The database the command runs in (its client's SELECT; 0 by default).
    pub db: u32,
    pub command: LoggedCommand,
}

/// What one log entry runs: a single write, or a whole MULTI ... EXEC transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoggedCommand {
    Write(WriteCommand),
    /// The queued commands, in order (at least one).
    Exec(Vec<QueuedCommand>),
    /// Where a member is reached (cluster metadata kept beside the key-value state).
    MemberAddrs(MemberAddrs),
    /// The leader's tick: moves the log's time on and names keys to remove if they have expired
    /// (active expiry; may be empty). Proposed with request id (0, 0), never deduplicated.
    Tick(Vec<Bytes>),
    /// A transaction with watched keys (at least one): aborted, nothing run, if any of them
    /// changed since it was watched; else run as [`LoggedCommand::Exec`] (its commands may be
    /// none: a transaction of local commands only still checks its watches).
    WatchedExec {
        watched: Vec<WatchedKey>,
        commands: Vec<QueuedCommand>,
    },
}

/// A member's addresses as `RAFT.MEMBER ADD` recorded them: `host:port` each, empty when not
/// given. Both empty: forget the member (`RAFT.MEMBER REMOVE`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberAddrs {
    pub id: u64,
    pub peer: Bytes,
    pub client: Bytes,
}

impl From<WriteCommand> for LoggedCommand {
    fn from(command: WriteCommand) -> Self {
        LoggedCommand::Write(command)
    }
}

/// Why a log entry is not a valid key-value command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unsupported log command format version {0} (this build reads versions 1 to 3)")]
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
    #[error("op {0} is only valid inside an EXEC")]
    OnlyInExec(u8),
    #[error("EXEC inside an EXEC")]
    NestedExec,
    #[error("invalid member addresses: {0}")]
    InvalidMemberAddrs(&'static str),
    #[error("unknown {0} {1}")]
    UnknownCode(&'static str, u8),
    #[error("database {0} is out of range")]
    DatabaseOutOfRange(u32),
    #[error("op {0}: the arguments are not a command of that op")]
    InvalidArguments(u8),
}

impl LogCommand {
    /// A command under the request id (`client_id`, `request_seq`), stamped `stamp_ms` (the
    /// proposer's wall clock, ms since the Unix epoch; 0 for none).
    pub fn new(
        client_id: u64,
        request_seq: u64,
        stamp_ms: u64,
        command: impl Into<LoggedCommand>,
    ) -> Self {
        LogCommand {
            client_id,
            request_seq,
            stamp_ms,
            db: 0,
            command: command.into(),
        }
    }

    /// The same command, run in database `db` (below `DATABASES_MAX`).
    pub fn in_db(mut self, db: u32) -> Self {
        self.db = db;
        self
    }

    pub fn encode(&self) -> Bytes {
        Bytes::from(self.encode_to_vec())
    }

    /// [`LogCommand::encode`] into a buffer the caller may still stamp
    /// ([`LogCommand::restamp`]) before freezing it.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        let hint = match &self.command {
            LoggedCommand::Write(write) => write_len_hint(write),
            LoggedCommand::Exec(commands) => {
                4 + commands.iter().map(queued_len_hint).sum::<usize>()
            }
            LoggedCommand::MemberAddrs(addrs) => {
                9 + field_len(&addrs.peer) + field_len(&addrs.client)
            }
            LoggedCommand::Tick(keys) => 5 + keys.iter().map(field_len).sum::<usize>(),
            LoggedCommand::WatchedExec { watched, commands } => {
                8 + watched
                    .iter()
                    .map(|w| field_len(&w.key) + 16)
                    .sum::<usize>()
                    + commands.iter().map(queued_len_hint).sum::<usize>()
            }
        };
        let mut out = Vec::with_capacity(HEADER_BYTES + 4 + hint);
        out.put_u8(match self.db {
            0 => FORMAT_VERSION,
            _ => FORMAT_VERSION_WITH_DB,
        });
        out.put_u64_le(self.client_id);
        out.put_u64_le(self.request_seq);
        out.put_u64_le(self.stamp_ms);
        if self.db != 0 {
            out.put_u32_le(self.db);
        }
        match &self.command {
            LoggedCommand::Write(write) => put_write(&mut out, write),
            LoggedCommand::Exec(commands) => {
                out.put_u8(OP_EXEC);
                out.put_u32_le(count(commands.len()));
                for command in commands {
                    put_queued(&mut out, command);
                }
            }
            LoggedCommand::MemberAddrs(addrs) => {
                out.put_u8(OP_MEMBER_ADDRS);
                out.put_u64_le(addrs.id);
                put_bytes(&mut out, &addrs.peer);
                put_bytes(&mut out, &addrs.client);
            }
            LoggedCommand::WatchedExec { watched, commands } => {
                put_watched_exec(&mut out, watched, commands)
            }
            LoggedCommand::Tick(keys) => {
                out.put_u8(OP_TICK);
                out.put_u32_le(count(keys.len()));
                for key in keys {
                    put_bytes(&mut out, key);
                }
            }
        }
        out
    }

    /// Rewrites the stamp of an entry [`LogCommand::encode_to_vec`] wrote (formats 2 and 3: the
    /// stamp is bytes 17..25). Lets a proposer encode a write as soon as it arrives — its key and value
    /// copied out, so the client's input buffer is free again — and stamp it when it is proposed.
    pub fn restamp(entry: &mut [u8], stamp_ms: u64) {
        assert!(
            entry[0] == FORMAT_VERSION || entry[0] == FORMAT_VERSION_WITH_DB,
            "only an entry this build wrote"
        );
        entry[STAMP_OFFSET..STAMP_OFFSET + 8].copy_from_slice(&stamp_ms.to_le_bytes());
    }

    /// Decodes an entry; keys and values are zero-copy slices of `entry`.
    pub fn decode(entry: &Bytes) -> Result<LogCommand, DecodeError> {
        let mut r = Reader::new(entry.clone());
        let truncated = |r: &Reader| DecodeError::Truncated(r.position());
        let version = r.u8().ok_or(DecodeError::Truncated(0))?;
        if ![
            FORMAT_VERSION,
            FORMAT_VERSION_WITHOUT_STAMP,
            FORMAT_VERSION_WITH_DB,
        ]
        .contains(&version)
        {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let client_id = r.u64().ok_or_else(|| truncated(&r))?;
        let request_seq = r.u64().ok_or_else(|| truncated(&r))?;
        let stamp_ms = if version == FORMAT_VERSION_WITHOUT_STAMP {
            0
        } else {
            r.u64().ok_or_else(|| truncated(&r))?
        };
        let db = if version == FORMAT_VERSION_WITH_DB {
            db_field(&mut r)?
        } else {
            0
        };
        let op = r.u8().ok_or_else(|| truncated(&r))?;
        let command = if op == OP_EXEC {
            // Every queued command takes at least its op byte.
            let n = list_count(&mut r, 1)?;
            let commands = (0..n)
                .map(|_| decode_queued(&mut r))
                .collect::<Result<_, _>>()?;
            LoggedCommand::Exec(commands)
        } else if op == OP_MEMBER_ADDRS {
            LoggedCommand::MemberAddrs(decode_member_addrs(&mut r)?)
        } else if op == OP_EXEC_WATCHED || op == OP_EXEC_WATCHED_DB {
            decode_watched_exec(&mut r, op)?
        } else if op == OP_TICK {
            let n = r
                .count(BYTES_FIELD_MIN)
                .ok_or_else(|| DecodeError::Truncated(r.position()))?;
            LoggedCommand::Tick((0..n).map(|_| bytes(&mut r)).collect::<Result<_, _>>()?)
        } else {
            LoggedCommand::Write(decode_write(op, &mut r)?)
        };
        if r.remaining() > 0 {
            return Err(DecodeError::TrailingBytes(r.remaining()));
        }
        Ok(LogCommand {
            client_id,
            request_seq,
            stamp_ms,
            db,
            command,
        })
    }
}

/// EXEC WATCHED (or EXEC WATCHED DB): op, watched keys, queued commands.
fn put_watched_exec(out: &mut Vec<u8>, watched: &[WatchedKey], commands: &[QueuedCommand]) {
    let with_db = watched.iter().any(|w| w.db != 0);
    out.put_u8(match with_db {
        true => OP_EXEC_WATCHED_DB,
        false => OP_EXEC_WATCHED,
    });
    out.put_u32_le(count(watched.len()));
    for w in watched {
        if with_db {
            out.put_u32_le(w.db);
        }
        put_bytes(out, &w.key);
        out.put_u64_le(w.index);
        out.put_u64_le(w.time_ms);
    }
    out.put_u32_le(count(commands.len()));
    for command in commands {
        put_queued(out, command);
    }
}

/// The body of EXEC WATCHED (`op` 49) or EXEC WATCHED DB (50).
fn decode_watched_exec(r: &mut Reader, op: u8) -> Result<LoggedCommand, DecodeError> {
    // Each watched key takes at least its length, index and time.
    let w = list_count(r, BYTES_FIELD_MIN + 16)?;
    let watched = (0..w)
        .map(|_| {
            let db = match op {
                OP_EXEC_WATCHED_DB => db_field(r)?,
                _ => 0,
            };
            let key = bytes(r)?;
            let index = r.u64().ok_or(DecodeError::Truncated(r.position()))?;
            let time_ms = r.u64().ok_or(DecodeError::Truncated(r.position()))?;
            Ok(WatchedKey {
                db,
                key,
                index,
                time_ms,
            })
        })
        .collect::<Result<_, DecodeError>>()?;
    let n = r.count(1).ok_or(DecodeError::Truncated(r.position()))?;
    let commands = (0..n).map(|_| decode_queued(r)).collect::<Result<_, _>>()?;
    Ok(LoggedCommand::WatchedExec { watched, commands })
}

/// A database index: below `DATABASES_MAX`, else the entry does not decode.
fn db_field(r: &mut Reader) -> Result<u32, DecodeError> {
    let db = r.u32().ok_or(DecodeError::Truncated(r.position()))?;
    match db < super::DATABASES_MAX {
        true => Ok(db),
        false => Err(DecodeError::DatabaseOutOfRange(db)),
    }
}

fn decode_member_addrs(r: &mut Reader) -> Result<MemberAddrs, DecodeError> {
    let id = r.u64().ok_or(DecodeError::Truncated(r.position()))?;
    let (peer, client) = (bytes(r)?, bytes(r)?);
    if id == 0 {
        return Err(DecodeError::InvalidMemberAddrs("node id 0"));
    }
    if peer.len().max(client.len()) > MEMBER_ADDR_BYTES_MAX {
        return Err(DecodeError::InvalidMemberAddrs("address too long"));
    }
    Ok(MemberAddrs { id, peer, client })
}
