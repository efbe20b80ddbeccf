//! Commands on lists, hashes and sets (sorted sets: `zsets.rs`), and OBJECT and MEMORY USAGE:
//! what they parse to ([`CollectionWrite`], [`CollectionRead`]), kept with the arguments they
//! came from ([`Typed`]).
//!
//! The log carries such a command as its arguments (`log_command.rs`, ops 128 and 129), and
//! every replica parses them again with [`super::Command::parse`]: one parser for the client and
//! the log, as Redis replicates commands. So the way these commands parse is part of the
//! replicated format: a change to it must reach every replica before a leader proposes a command
//! whose meaning it changes, like a new log op.

use bytes::Bytes;

use super::blocking::{self, BlockingPop};
use super::parse::{integer, is, lossy};
use super::sort::SortArgs;
use super::streams::{self, StreamRead, StreamWrite};
use super::zsets::{self, ZSetRead, ZSetWrite};
use super::{CommandError, FloatBits};
use keel_redis_types::list::End;
use keel_redis_types::set::SetAlgebra;
use keel_resp::number::parse_f64;

/// A parsed command and the arguments (its name first) it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Typed<Op> {
    pub args: Vec<Bytes>,
    pub op: Op,
}

/// What HSET-like commands answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HSetReply {
    /// HSET: how many fields are new.
    Added,
    /// HMSET: `+OK`.
    Ok,
    /// HSETNX: 1 if set, 0 if the field existed (then nothing is set).
    IfNew,
}

/// The commands that change a list, hash, set or sorted set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollectionWrite {
    /// LPUSH, RPUSH, LPUSHX, RPUSHX (`existing_only`): the new length.
    Push {
        key: Bytes,
        elements: Vec<Bytes>,
        end: End,
        existing_only: bool,
    },
    /// LPOP, RPOP: one element (or null), or with a count an array (or null).
    Pop {
        key: Bytes,
        end: End,
        count: Option<u64>,
    },
    LSet {
        key: Bytes,
        index: i64,
        element: Bytes,
    },
    /// LREM: `count` > 0 from the head, < 0 from the tail, 0 all; how many removed.
    LRem {
        key: Bytes,
        count: i64,
        element: Bytes,
    },
    LTrim {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    /// LINSERT: the new length, -1 if `pivot` is not there, 0 if there is no list.
    LInsert {
        key: Bytes,
        before: bool,
        pivot: Bytes,
        element: Bytes,
    },
    /// LMOVE (and RPOPLPUSH: right to left): the element moved, or null.
    LMove {
        source: Bytes,
        destination: Bytes,
        from: End,
        to: End,
    },
    HSet {
        key: Bytes,
        pairs: Vec<(Bytes, Bytes)>,
        reply: HSetReply,
    },
    HDel {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    HIncrBy {
        key: Bytes,
        field: Bytes,
        delta: i64,
    },
    HIncrByFloat {
        key: Bytes,
        field: Bytes,
        delta: FloatBits,
    },
    SAdd {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SRem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SMove {
        source: Bytes,
        destination: Bytes,
        member: Bytes,
    },
    /// SINTERSTORE, SUNIONSTORE, SDIFFSTORE: the result's size.
    SStore {
        algebra: SetAlgebra,
        destination: Bytes,
        keys: Vec<Bytes>,
    },
    /// SPOP: members removed, chosen by the entry's index (the same on every replica).
    SPop {
        key: Bytes,
        count: Option<u64>,
    },
    /// A write on a sorted set (`zsets.rs`).
    ZSet(ZSetWrite),
    /// A write on a stream (`streams.rs`).
    Stream(StreamWrite),
    /// SORT ... STORE (`sort.rs`): the result stored as a list (the key removed if it is
    /// empty); the result's length.
    /// A pop from the first of several keys that holds something, which may block its client
    /// (`blocking.rs`).
    BlockingPop(BlockingPop),
    SortStore {
        args: SortArgs,
        destination: Bytes,
    },
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]: the indexes (from the head,
/// as LINDEX counts) of the matches of `element`, searched from the head when `rank` is
/// positive and from the tail when negative, skipping the first |rank| - 1 matches and looking
/// at no more than `maxlen` elements (0: all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LPos {
    pub key: Bytes,
    pub element: Bytes,
    /// Never 0.
    pub rank: i64,
    /// With COUNT: at most this many matches, in an array (0: every match). Without: the first
    /// match alone, or null.
    pub count: Option<u64>,
    pub maxlen: u64,
}

impl LPos {
    /// Parses the arguments after the command's name, with Redis's errors in Redis's order.
    fn parse(rest: &[Bytes]) -> Result<LPos, CommandError> {
        let mut lpos = LPos {
            key: rest[0].clone(),
            element: rest[1].clone(),
            rank: 1,
            count: None,
            maxlen: 0,
        };
        let mut options = rest[2..].iter();
        while let Some(option) = options.next() {
            let option = option.to_ascii_lowercase();
            let value = options.next().ok_or(CommandError::Syntax)?;
            match option.as_slice() {
                b"rank" => {
                    lpos.rank = integer(value)?;
                    if lpos.rank == i64::MIN {
                        return Err(CommandError::Invalid(
                            "value is out of range, value must between -9223372036854775807 \
                             and 9223372036854775807",
                        ));
                    }
                    if lpos.rank == 0 {
                        return Err(CommandError::Invalid(
                            "RANK can't be zero: use 1 to start from the first match, 2 from \
                             the second ... or use negative to start from the end of the list",
                        ));
                    }
                }
                b"count" => {
                    let count = u64::try_from(integer(value)?)
                        .map_err(|_| CommandError::Invalid("COUNT can't be negative"))?;
                    lpos.count = Some(count);
                }
                b"maxlen" => {
                    lpos.maxlen = u64::try_from(integer(value)?)
                        .map_err(|_| CommandError::Invalid("MAXLEN can't be negative"))?;
                }
                _ => return Err(CommandError::Syntax),
            }
        }
        Ok(lpos)
    }
}

/// The commands that read a list, hash, set or sorted set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollectionRead {
    LLen {
        key: Bytes,
    },
    LRange {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    LIndex {
        key: Bytes,
        index: i64,
    },
    /// LPOS: where `element` is in the list (see [`LPos`]).
    LPos(LPos),
    HGet {
        key: Bytes,
        field: Bytes,
    },
    HMGet {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    HLen {
        key: Bytes,
    },
    HExists {
        key: Bytes,
        field: Bytes,
    },
    HStrLen {
        key: Bytes,
        field: Bytes,
    },
    HGetAll {
        key: Bytes,
    },
    HKeys {
        key: Bytes,
    },
    HVals {
        key: Bytes,
    },
    SMembers {
        key: Bytes,
    },
    SIsMember {
        key: Bytes,
        member: Bytes,
    },
    SMIsMember {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SCard {
        key: Bytes,
    },
    /// SINTER, SUNION, SDIFF.
    SAlgebra {
        algebra: SetAlgebra,
        keys: Vec<Bytes>,
    },
    /// SINTERCARD: the intersection's size, counting no further than `limit` (0: no limit).
    SInterCard {
        keys: Vec<Bytes>,
        limit: u64,
    },
    /// SRANDMEMBER: without a count one member or null; with a count >= 0 up to that many
    /// distinct members, < 0 that many drawn with repetition.
    SRandMember {
        key: Bytes,
        count: Option<i64>,
    },
    /// OBJECT ENCODING and OBJECT REFCOUNT (about any kind of value).
    Object {
        key: Bytes,
        query: ObjectQuery,
    },
    /// MEMORY USAGE: the bytes the key and its value are counted as taking (`maxmemory`).
    MemoryUsage {
        key: Bytes,
    },
    /// A read of a sorted set (`zsets.rs`).
    ZSet(ZSetRead),
    /// A read of a stream (`streams.rs`).
    Stream(StreamRead),
    /// SORT without STORE, SORT_RO (`sort.rs`).
    Sort(SortArgs),
}

/// OBJECT's subcommands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectQuery {
    /// The name Redis would give the value's encoding at Redis's default thresholds (keel has
    /// one representation per kind; the name tells a client what Redis would do).
    Encoding,
    /// Always 1: keel shares no value objects between keys.
    RefCount,
}

/// The most members SRANDMEMBER with a negative count draws (with repetition): beyond it the
/// count is refused rather than answered with an unbounded reply.
pub const SRANDMEMBER_REPEATS_MAX: u64 = 1_000_000;

impl CollectionWrite {
    /// Whether the reply carries stored elements (remembered by deduplication only as
    /// "applied", `execute.rs`).
    pub fn replies_with_value(&self) -> bool {
        matches!(
            self,
            CollectionWrite::Pop { .. }
                | CollectionWrite::ZSet(ZSetWrite::Pop { .. } | ZSetWrite::IncrBy { .. })
                | CollectionWrite::ZSet(ZSetWrite::Add { incr: true, .. })
                | CollectionWrite::LMove { .. }
                | CollectionWrite::HIncrByFloat { .. }
                | CollectionWrite::SPop { .. }
                | CollectionWrite::BlockingPop(_)
                | CollectionWrite::Stream(_)
        )
    }

    /// Whether the command may make the data take more memory (refused past `maxmemory`).
    pub fn may_grow_memory(&self) -> bool {
        if let CollectionWrite::BlockingPop(pop) = self {
            return pop.may_grow_memory();
        }
        !matches!(
            self,
            CollectionWrite::Pop { .. }
                | CollectionWrite::LRem { .. }
                | CollectionWrite::LTrim { .. }
                | CollectionWrite::HDel { .. }
                | CollectionWrite::SRem { .. }
                | CollectionWrite::SMove { .. }
                | CollectionWrite::SPop { .. }
                // XREADGROUP, XCLAIM and XAUTOCLAIM record deliveries, but Redis does not
                // refuse them past maxmemory (no `denyoom`): neither does keel.
                | CollectionWrite::Stream(
                    StreamWrite::Trim { .. }
                        | StreamWrite::Del { .. }
                        | StreamWrite::GroupSetId { .. }
                        | StreamWrite::GroupDestroy { .. }
                        | StreamWrite::Consumer { create: false, .. }
                        | StreamWrite::ReadGroup(_)
                        | StreamWrite::Ack { .. }
                        | StreamWrite::Claim { .. }
                        | StreamWrite::AutoClaim { .. }
                )
                | CollectionWrite::ZSet(
                    ZSetWrite::Rem { .. }
                        | ZSetWrite::Pop { .. }
                        | ZSetWrite::RemRangeByScore { .. }
                        | ZSetWrite::RemRangeByRank { .. }
                )
        )
    }
}

pub(super) fn end(arg: &[u8]) -> Result<End, CommandError> {
    if is(arg, "LEFT") {
        Ok(End::Left)
    } else if is(arg, "RIGHT") {
        Ok(End::Right)
    } else {
        Err(CommandError::Syntax)
    }
}

/// A count that must not be negative, in Redis's words.
/// The optional count after a key (`LPOP key [count]`, `SPOP`, `ZPOPMIN`): one that must not be
/// negative, in Redis's words; anything after it is a syntax error.
pub(super) fn optional_count(rest: &[Bytes]) -> Result<Option<u64>, CommandError> {
    match rest {
        [_] => Ok(None),
        [_, count] => u64::try_from(integer(count)?)
            .map(Some)
            .map_err(|_| CommandError::Invalid("value is out of range, must be positive")),
        _ => Err(CommandError::Syntax),
    }
}

/// A write on a list, hash, set or sorted set; `name` is the command's lowercase name, `rest` its
/// arguments after it (arity already checked).
#[expect(clippy::too_many_lines)]
pub(super) fn parse_write(name: &str, rest: &[Bytes]) -> Result<CollectionWrite, CommandError> {
    let key = || rest[0].clone();
    Ok(match name {
        "lpush" | "rpush" | "lpushx" | "rpushx" => CollectionWrite::Push {
            key: key(),
            elements: rest[1..].to_vec(),
            end: if name.starts_with('l') {
                End::Left
            } else {
                End::Right
            },
            existing_only: name.ends_with('x'),
        },
        // Redis counts a second count as too many arguments, not a syntax error.
        "lpop" | "rpop" if rest.len() > 2 => return Err(CommandError::WrongArity(name.into())),
        "lpop" | "rpop" => CollectionWrite::Pop {
            key: key(),
            end: if name == "lpop" {
                End::Left
            } else {
                End::Right
            },
            count: optional_count(rest)?,
        },
        "lset" => CollectionWrite::LSet {
            key: key(),
            index: integer(&rest[1])?,
            element: rest[2].clone(),
        },
        "lrem" => CollectionWrite::LRem {
            key: key(),
            count: integer(&rest[1])?,
            element: rest[2].clone(),
        },
        "ltrim" => CollectionWrite::LTrim {
            key: key(),
            start: integer(&rest[1])?,
            stop: integer(&rest[2])?,
        },
        "linsert" => CollectionWrite::LInsert {
            key: key(),
            before: if is(&rest[1], "BEFORE") {
                true
            } else if is(&rest[1], "AFTER") {
                false
            } else {
                return Err(CommandError::Syntax);
            },
            pivot: rest[2].clone(),
            element: rest[3].clone(),
        },
        "rpoplpush" => CollectionWrite::LMove {
            source: key(),
            destination: rest[1].clone(),
            from: End::Right,
            to: End::Left,
        },
        "lmove" => CollectionWrite::LMove {
            source: key(),
            destination: rest[1].clone(),
            from: end(&rest[2])?,
            to: end(&rest[3])?,
        },
        "hset" | "hmset" => {
            if rest.len() % 2 == 0 {
                return Err(CommandError::WrongArity(name.to_string()));
            }
            CollectionWrite::HSet {
                key: key(),
                pairs: rest[1..]
                    .chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].clone()))
                    .collect(),
                reply: if name == "hset" {
                    HSetReply::Added
                } else {
                    HSetReply::Ok
                },
            }
        }
        "hsetnx" => CollectionWrite::HSet {
            key: key(),
            pairs: vec![(rest[1].clone(), rest[2].clone())],
            reply: HSetReply::IfNew,
        },
        "hdel" => CollectionWrite::HDel {
            key: key(),
            fields: rest[1..].to_vec(),
        },
        "hincrby" => CollectionWrite::HIncrBy {
            key: key(),
            field: rest[1].clone(),
            delta: integer(&rest[2])?,
        },
        "hincrbyfloat" => {
            let delta = parse_f64(&rest[2])
                .filter(|d| d.is_finite())
                .ok_or(CommandError::Invalid("value is not a valid float"))?;
            CollectionWrite::HIncrByFloat {
                key: key(),
                field: rest[1].clone(),
                delta: FloatBits(delta),
            }
        }
        "sadd" => CollectionWrite::SAdd {
            key: key(),
            members: rest[1..].to_vec(),
        },
        "srem" => CollectionWrite::SRem {
            key: key(),
            members: rest[1..].to_vec(),
        },
        "smove" => CollectionWrite::SMove {
            source: key(),
            destination: rest[1].clone(),
            member: rest[2].clone(),
        },
        "sinterstore" | "sunionstore" | "sdiffstore" => CollectionWrite::SStore {
            algebra: algebra(name),
            destination: key(),
            keys: rest[1..].to_vec(),
        },
        "spop" => CollectionWrite::SPop {
            key: key(),
            count: optional_count(rest)?,
        },
        zset if zsets::WRITES.contains(&zset) => {
            CollectionWrite::ZSet(zsets::parse_write(zset, rest)?)
        }
        pop if blocking::NAMES.contains(&pop) => {
            CollectionWrite::BlockingPop(blocking::parse(pop, rest)?)
        }
        stream if streams::WRITES.contains(&stream) => {
            CollectionWrite::Stream(streams::parse_write(stream, rest)?)
        }
        other => unreachable!("{other} is not a collection write"),
    })
}

fn algebra(name: &str) -> SetAlgebra {
    if name.starts_with("sinter") {
        SetAlgebra::Inter
    } else if name.starts_with("sunion") {
        SetAlgebra::Union
    } else {
        SetAlgebra::Diff
    }
}

/// A read of a list, hash, set or sorted set (see [`parse_write`]).
#[expect(clippy::too_many_lines)]
pub(super) fn parse_read(name: &str, rest: &[Bytes]) -> Result<CollectionRead, CommandError> {
    let key = || rest[0].clone();
    Ok(match name {
        "llen" => CollectionRead::LLen { key: key() },
        "lrange" => CollectionRead::LRange {
            key: key(),
            start: integer(&rest[1])?,
            stop: integer(&rest[2])?,
        },
        "lindex" => CollectionRead::LIndex {
            key: key(),
            index: integer(&rest[1])?,
        },
        "lpos" => CollectionRead::LPos(LPos::parse(rest)?),
        "hget" => CollectionRead::HGet {
            key: key(),
            field: rest[1].clone(),
        },
        "hmget" => CollectionRead::HMGet {
            key: key(),
            fields: rest[1..].to_vec(),
        },
        "hlen" => CollectionRead::HLen { key: key() },
        "hexists" => CollectionRead::HExists {
            key: key(),
            field: rest[1].clone(),
        },
        "hstrlen" => CollectionRead::HStrLen {
            key: key(),
            field: rest[1].clone(),
        },
        "hgetall" => CollectionRead::HGetAll { key: key() },
        "hkeys" => CollectionRead::HKeys { key: key() },
        "hvals" => CollectionRead::HVals { key: key() },
        "smembers" => CollectionRead::SMembers { key: key() },
        "sismember" => CollectionRead::SIsMember {
            key: key(),
            member: rest[1].clone(),
        },
        "smismember" => CollectionRead::SMIsMember {
            key: key(),
            members: rest[1..].to_vec(),
        },
        "scard" => CollectionRead::SCard { key: key() },
        "sinter" | "sunion" | "sdiff" => CollectionRead::SAlgebra {
            algebra: algebra(name),
            keys: rest.to_vec(),
        },
        "sintercard" => parse_sintercard(rest)?,
        "srandmember" => CollectionRead::SRandMember {
            key: key(),
            count: match rest {
                [_] => None,
                [_, count] => {
                    let count = integer(count)?;
                    if count < 0 && count.unsigned_abs() > SRANDMEMBER_REPEATS_MAX {
                        return Err(CommandError::Invalid("value is out of range"));
                    }
                    Some(count)
                }
                _ => return Err(CommandError::Syntax),
            },
        },
        "object" => match rest {
            [sub, key] if is(sub, "ENCODING") || is(sub, "REFCOUNT") => CollectionRead::Object {
                key: key.clone(),
                query: if is(sub, "ENCODING") {
                    ObjectQuery::Encoding
                } else {
                    ObjectQuery::RefCount
                },
            },
            [sub, ..] => {
                return Err(CommandError::UnknownSubcommand {
                    command: "OBJECT",
                    subcommand: lossy(sub),
                })
            }
            [] => unreachable!("arity checked"),
        },
        "memory" => match rest {
            [sub, key] if is(sub, "USAGE") => CollectionRead::MemoryUsage { key: key.clone() },
            // SAMPLES counts the elements Redis samples to estimate; keel counts exactly.
            [sub, key, samples, n] if is(sub, "USAGE") && is(samples, "SAMPLES") => {
                integer(n)?;
                CollectionRead::MemoryUsage { key: key.clone() }
            }
            [sub, ..] if is(sub, "USAGE") => return Err(CommandError::Syntax),
            [sub, ..] => {
                return Err(CommandError::UnknownSubcommand {
                    command: "MEMORY",
                    subcommand: lossy(sub),
                })
            }
            [] => unreachable!("arity checked"),
        },
        zset if zsets::READS.contains(&zset) => {
            CollectionRead::ZSet(zsets::parse_read(zset, rest)?)
        }
        stream if streams::READS.contains(&stream) => {
            CollectionRead::Stream(streams::parse_read(stream, rest)?)
        }
        other => unreachable!("{other} is not a collection read"),
    })
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`, with Redis's errors.
fn parse_sintercard(rest: &[Bytes]) -> Result<CollectionRead, CommandError> {
    let count = integer(&rest[0])?;
    if count <= 0 {
        return Err(CommandError::Invalid("numkeys should be greater than 0"));
    }
    let count = count as usize;
    if count > rest.len() - 1 {
        return Err(CommandError::Invalid(
            "Number of keys can't be greater than number of args",
        ));
    }
    let keys = rest[1..=count].to_vec();
    let mut limit = 0;
    let mut options = rest[count + 1..].iter();
    while let Some(option) = options.next() {
        match options.next() {
            Some(value) if is(option, "LIMIT") => {
                limit = u64::try_from(integer(value)?)
                    .map_err(|_| CommandError::Invalid("LIMIT can't be negative"))?;
            }
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(CollectionRead::SInterCard { keys, limit })
}

/// The writes of this module, by name (their arity and flags are in `COMMAND_TABLE`).
pub(super) const WRITES: &[&str] = &[
    "lpush",
    "rpush",
    "lpushx",
    "rpushx",
    "lpop",
    "rpop",
    "lset",
    "lrem",
    "ltrim",
    "linsert",
    "rpoplpush",
    "lmove",
    "hset",
    "hmset",
    "hsetnx",
    "hdel",
    "hincrby",
    "hincrbyfloat",
    "sadd",
    "srem",
    "smove",
    "sinterstore",
    "sunionstore",
    "sdiffstore",
    "spop",
];

/// The reads of this module, by name.
pub(super) const READS: &[&str] = &[
    "llen",
    "lrange",
    "lindex",
    "lpos",
    "hget",
    "hmget",
    "hlen",
    "hexists",
    "hstrlen",
    "hgetall",
    "hkeys",
    "hvals",
    "smembers",
    "sismember",
    "smismember",
    "scard",
    "sinter",
    "sunion",
    "sdiff",
    "sintercard",
    "srandmember",
    "object",
    "memory",
];
