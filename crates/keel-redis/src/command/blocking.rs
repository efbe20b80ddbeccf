//! Blocking pops (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP), their
//! many-key forms that never block (LMPOP, ZMPOP), and `RAFT.BLOCKED`, the log's form of a
//! waiting client's attempt: what they parse to ([`BlockingPop`]).
//!
//! A blocked client waits on the node it is connected to, not in the log: keel-server's
//! `connection/blocking.rs` proposes an attempt when one of the keys may serve it (at once, and
//! then each time the apply of an entry fills one of them). The attempt is a write like any other,
//! `RAFT.BLOCKED deadline-ms woken <the client's command>`, so that every replica parses it again as
//! it parses the client's own (`collections.rs`): it pops as the command would without blocking,
//! or answers null and changes nothing when every key is empty or when it applies at a log time
//! past `deadline-ms` (an attempt that reaches the log after its client gave up takes nothing).
//! `woken` is 1 for an attempt after a wake: a key that holds another kind of value by then is
//! passed over (Redis wakes a blocked client only for a key of its kind), where the first attempt
//! answers WRONGTYPE as the command does.
//!
//! Without `RAFT.BLOCKED` (inside MULTI, in a script, LMPOP and ZMPOP), the command pops what is
//! there or answers null at once, as Redis's blocking commands do where they cannot block.
//!
//! XREAD and XREADGROUP with BLOCK wait the same way ([`PopSource::Streams`], served by the state
//! machine's `blocking_reads.rs`): their attempts are log entries too, `RAFT.BLOCKED deadline-ms
//! woken XREAD ...`. XREADGROUP's must be (a served one moves the group's last ID and pending
//! entries, once, on every replica); XREAD's are so that it waits exactly as the pops do (same
//! forwarding, deadlines and wakes) and so that `$` is resolved once, at a place in the log:
//! the first attempt (`woken` 0) of an XREAD naming `$` that finds nothing answers the IDs each
//! `$` stands for, as an array of IDs, one per stream ([`BlockingPop::resolved_request`]); the
//! client's later attempts name those IDs instead of `$`. A woken attempt serves the first
//! stream, in the command's order, that has entries after its ID (Redis serves the stream whose
//! key was signalled, alone).

use bytes::Bytes;

use super::collections::end;
use super::parse::{integer, is};
use super::streams::{ReadFrom, XRead};
use super::CommandError;
use keel_redis_types::list::End;
use keel_redis_types::stream::StreamId;
use keel_resp::number::parse_f64;

/// Where elements are popped from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopSource {
    /// A list, from this end.
    List(End),
    /// A sorted set: its lowest scores (`max` false) or its highest.
    ZSet { max: bool },
    /// Streams: XREAD's entries after its IDs, XREADGROUP's entries new to its group.
    Streams,
}

/// What a served pop answers and does with the element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PopShape {
    /// BLPOP, BRPOP: `[key, element]`; BZPOPMIN, BZPOPMAX: `[key, member, score]`.
    KeyAndElement,
    /// BLMPOP, LMPOP, BZMPOP, ZMPOP: `[key, [element, ...]]` (sorted sets: `[member, score]`
    /// pairs), up to this many.
    KeyAndElements(u64),
    /// BLMOVE, BRPOPLPUSH: the element, pushed to `destination` at `end`.
    MoveTo { destination: Bytes, end: End },
    /// XREAD, XREADGROUP: their reply (streams and their entries).
    Streams(Box<XRead>),
}

/// A pop from the first of `keys` that holds something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockingPop {
    pub keys: Vec<Bytes>,
    pub source: PopSource,
    pub shape: PopShape,
    /// How long the client waits, in ms (0: for ever); `None` for LMPOP and ZMPOP, which never
    /// wait.
    pub timeout_ms: Option<u64>,
    /// `RAFT.BLOCKED`: a waiting client's attempt, which does nothing once the log's time is past
    /// this (ms since the Unix epoch; 0: no deadline).
    pub attempt_deadline_ms: Option<u64>,
    /// An attempt after a wake: a key holding another kind of value is passed over, not an
    /// error (Redis wakes a blocked client only for a key of its kind).
    pub woken: bool,
}

impl BlockingPop {
    /// Whether the client waits for an element when every key is empty (outside MULTI and
    /// scripts).
    pub fn blocks(&self) -> bool {
        self.timeout_ms.is_some() && self.attempt_deadline_ms.is_none()
    }

    /// The keys whose filling may serve it (a move's destination is not one).
    pub fn watched_keys(&self) -> &[Bytes] {
        &self.keys
    }

    /// [`Self::watched_keys`] in database `db`, as the waiters' queues name them
    /// ([`waiting_key`]).
    pub fn waiting_keys(&self, db: u32) -> Vec<Bytes> {
        self.keys.iter().map(|key| waiting_key(db, key)).collect()
    }
}

/// How blocked clients and the state machine's filled keys name `key` of database `db`: the
/// database's index (4 bytes, little-endian), then the key. A push to a key of one database
/// must not wake a client blocked on the same name in another.
pub fn waiting_key(db: u32, key: &[u8]) -> Bytes {
    let mut named = Vec::with_capacity(4 + key.len());
    named.extend_from_slice(&db.to_le_bytes());
    named.extend_from_slice(key);
    Bytes::from(named)
}

impl BlockingPop {
    /// What it answers when nothing serves it (its timeout, or at once where it cannot block):
    /// a null array, or a null bulk string for the moves, as Redis.
    pub fn nothing_reply(&self) -> keel_resp::Reply {
        match self.shape {
            PopShape::MoveTo { .. } => keel_resp::Reply::Null,
            _ => keel_resp::Reply::NullArray,
        }
    }

    /// Whether it may make the data larger: only a move (its destination's new element).
    /// XREADGROUP records deliveries, but Redis does not refuse it past maxmemory.
    pub fn may_grow_memory(&self) -> bool {
        matches!(self.shape, PopShape::MoveTo { .. })
    }

    /// XREAD or XREADGROUP `read` as a client that waits, if it does: with BLOCK, and for
    /// XREADGROUP only when every stream is read from `>` (a consumer's own history is answered
    /// at once, even when empty, as in Redis).
    pub fn stream_read(read: &XRead) -> Option<BlockingPop> {
        let waits = read.block_ms.is_some()
            && (read.group.is_none() || read.streams.iter().all(|(_, f)| *f == ReadFrom::New));
        waits.then(|| BlockingPop {
            keys: read.streams.iter().map(|(key, _)| key.clone()).collect(),
            source: PopSource::Streams,
            shape: PopShape::Streams(Box::new(read.clone())),
            timeout_ms: read.block_ms,
            attempt_deadline_ms: None,
            woken: false,
        })
    }

    /// The blocking pop, or XREADGROUP that waits, `command` is, if it is one.
    pub fn of_write(command: &super::WriteCommand) -> Option<BlockingPop> {
        use super::{CollectionWrite, StreamWrite};
        match command {
            super::WriteCommand::Collection(typed) => match &typed.op {
                CollectionWrite::BlockingPop(pop) => Some(pop.clone()),
                CollectionWrite::Stream(StreamWrite::ReadGroup(read)) => Self::stream_read(read),
                _ => None,
            },
            _ => None,
        }
    }

    /// The XREAD that waits `command` is, if it is one.
    pub fn of_read(command: &super::ReadCommand) -> Option<BlockingPop> {
        use super::{CollectionRead, StreamRead};
        match command {
            super::ReadCommand::Collection(typed) => match &typed.op {
                CollectionRead::Stream(StreamRead::Read(read)) => Self::stream_read(read),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether it takes nothing from what serves it (XREAD): it need not wait for its turn
    /// behind clients that take, and every fill wakes it (keel-session's `Waiters`).
    pub fn takes_nothing(&self) -> bool {
        matches!(&self.shape, PopShape::Streams(read) if read.group.is_none())
    }

    /// The XREAD whose `$` its first attempt resolves, if it is one that names `$`.
    pub fn reads_after_last(&self) -> Option<&XRead> {
        match &self.shape {
            PopShape::Streams(read)
                if read.group.is_none()
                    && read.streams.iter().any(|(_, f)| *f == ReadFrom::Last) =>
            {
                Some(read)
            }
            _ => None,
        }
    }

    /// The client's `request` with each `$` replaced by the ID the first attempt's `reply`
    /// resolved it to (an array of one ID per stream), or None when `reply` is no such answer
    /// (the attempt served the client, or answered an error or null).
    pub fn resolved_request(
        &self,
        request: &[Bytes],
        reply: &keel_resp::Reply,
    ) -> Option<Vec<Bytes>> {
        let read = self.reads_after_last()?;
        let keel_resp::Reply::Array(ids) = reply else {
            return None;
        };
        let streams = read.streams.len();
        if ids.len() != streams || request.len() < streams {
            return None;
        }
        let mut resolved = request.to_vec();
        let first_id = request.len() - streams;
        for (at, ((_, from), id)) in read.streams.iter().zip(ids).enumerate() {
            let id = match id {
                keel_resp::Reply::Bulk(id) => id.clone(),
                keel_resp::Reply::Simple(id) => Bytes::copy_from_slice(id.as_bytes()),
                _ => return None,
            };
            StreamId::parse(&id, 0, false)?;
            if *from == ReadFrom::Last {
                resolved[first_id + at] = id;
            }
        }
        Some(resolved)
    }
}

/// The commands parsed here, lowercase.
pub(super) const NAMES: &[&str] = &[
    "blpop",
    "brpop",
    "brpoplpush",
    "blmove",
    "blmpop",
    "lmpop",
    "bzpopmin",
    "bzpopmax",
    "bzmpop",
    "zmpop",
    "raft.blocked",
];

/// The name of the attempt form.
pub const ATTEMPT: &str = "RAFT.BLOCKED";

/// The arguments of the attempt of a waiting client: `RAFT.BLOCKED deadline_ms woken` (`woken`
/// 0 for its first attempt, 1 after a wake) and the client's command as it sent it.
pub fn attempt_args(deadline_ms: u64, woken: bool, command: &[Bytes]) -> Vec<Bytes> {
    let mut args = Vec::with_capacity(command.len() + 3);
    args.push(Bytes::from_static(ATTEMPT.as_bytes()));
    args.push(Bytes::from(deadline_ms.to_string()));
    args.push(Bytes::from_static(if woken { b"1" } else { b"0" }));
    args.extend(command.iter().cloned());
    args
}

/// Parses one of [`NAMES`]; `rest` is what follows the name (arity already checked).
pub(super) fn parse(name: &str, rest: &[Bytes]) -> Result<BlockingPop, CommandError> {
    match name {
        "raft.blocked" => parse_attempt(rest),
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => {
            let (timeout, keys) = rest.split_last().ok_or(CommandError::Syntax)?;
            let source = match name {
                "blpop" => PopSource::List(End::Left),
                "brpop" => PopSource::List(End::Right),
                _ => PopSource::ZSet {
                    max: name == "bzpopmax",
                },
            };
            Ok(BlockingPop {
                keys: keys.to_vec(),
                source,
                shape: PopShape::KeyAndElement,
                timeout_ms: Some(timeout_ms(timeout)?),
                attempt_deadline_ms: None,
                woken: false,
            })
        }
        "brpoplpush" => Ok(BlockingPop {
            keys: vec![rest[0].clone()],
            source: PopSource::List(End::Right),
            shape: PopShape::MoveTo {
                destination: rest[1].clone(),
                end: End::Left,
            },
            timeout_ms: Some(timeout_ms(&rest[2])?),
            attempt_deadline_ms: None,
            woken: false,
        }),
        "blmove" => Ok(BlockingPop {
            keys: vec![rest[0].clone()],
            source: PopSource::List(end(&rest[2])?),
            shape: PopShape::MoveTo {
                destination: rest[1].clone(),
                end: end(&rest[3])?,
            },
            timeout_ms: Some(timeout_ms(&rest[4])?),
            attempt_deadline_ms: None,
            woken: false,
        }),
        "blmpop" | "bzmpop" => {
            let timeout = timeout_ms(&rest[0])?;
            let mut pop = parse_many(name == "bzmpop", &rest[1..])?;
            pop.timeout_ms = Some(timeout);
            Ok(pop)
        }
        "lmpop" | "zmpop" => parse_many(name == "zmpop", rest),
        other => unreachable!("{other} is not a blocking pop"),
    }
}

/// `RAFT.BLOCKED deadline_ms woken command args...`: the command must be one that blocks
/// (XREAD and XREADGROUP with BLOCK, XREADGROUP reading `>` only).
fn parse_attempt(rest: &[Bytes]) -> Result<BlockingPop, CommandError> {
    let deadline = u64::try_from(integer(&rest[0])?).map_err(|_| CommandError::NotInteger)?;
    let woken = match &rest[1][..] {
        b"0" => false,
        b"1" => true,
        _ => return Err(CommandError::Syntax),
    };
    let command = &rest[2..];
    let name = command
        .first()
        .map(|name| String::from_utf8_lossy(name).to_ascii_lowercase())
        .ok_or(CommandError::Syntax)?;
    let spec = super::CommandSpec::lookup(name.as_bytes()).ok_or(CommandError::Syntax)?;
    if !spec.arity_ok(command.len()) {
        return Err(CommandError::WrongArity(spec.name.to_string()));
    }
    let mut pop = match spec.name {
        "raft.blocked" | "lmpop" | "zmpop" => return Err(CommandError::Syntax),
        name if NAMES.contains(&name) => parse(name, &command[1..])?,
        name @ ("xread" | "xreadgroup") => {
            let read = super::streams::parse_xread(&command[1..], name == "xreadgroup")?;
            BlockingPop::stream_read(&read).ok_or(CommandError::Syntax)?
        }
        _ => return Err(CommandError::Syntax),
    };
    pop.attempt_deadline_ms = Some(deadline);
    pop.woken = woken;
    Ok(pop)
}

/// LMPOP / ZMPOP's arguments (BLMPOP / BZMPOP's after the timeout): `numkeys key... LEFT|RIGHT
/// [COUNT n]` (sorted sets: `MIN|MAX`), in Redis's words when they are wrong.
fn parse_many(zset: bool, rest: &[Bytes]) -> Result<BlockingPop, CommandError> {
    let numkeys = integer(&rest[0])
        .ok()
        .filter(|n| *n > 0)
        .ok_or(CommandError::Invalid("numkeys should be greater than 0"))? as u64;
    let after = &rest[1..];
    if numkeys >= after.len() as u64 {
        return Err(CommandError::Syntax);
    }
    let (keys, options) = after.split_at(numkeys as usize);
    let where_ = &options[0];
    let source = if zset {
        match () {
            () if is(where_, "MIN") => PopSource::ZSet { max: false },
            () if is(where_, "MAX") => PopSource::ZSet { max: true },
            () => return Err(CommandError::Syntax),
        }
    } else {
        PopSource::List(end(where_)?)
    };
    let count = match &options[1..] {
        [] => 1,
        [word, count] if is(word, "COUNT") => integer(count)
            .ok()
            .filter(|n| *n > 0)
            .ok_or(CommandError::Invalid("count should be greater than 0"))?
            as u64,
        _ => return Err(CommandError::Syntax),
    };
    Ok(BlockingPop {
        keys: keys.to_vec(),
        source,
        shape: PopShape::KeyAndElements(count),
        timeout_ms: None,
        attempt_deadline_ms: None,
        woken: false,
    })
}

/// The most a client may wait, in ms: about 31,700 years, past which a timeout means for ever
/// anyway; what keeps `now + timeout` from overflowing.
pub const TIMEOUT_MS_MAX: u64 = 1 << 50;

/// A timeout in seconds (a float, as Redis takes it) as whole ms, rounded up so that a short
/// timeout never becomes 0 (for ever).
fn timeout_ms(arg: &[u8]) -> Result<u64, CommandError> {
    let seconds = parse_f64(arg).ok_or(CommandError::Invalid(
        "timeout is not a float or out of range",
    ))?;
    if seconds.is_nan() {
        return Err(CommandError::Invalid(
            "timeout is not a float or out of range",
        ));
    }
    if seconds < 0.0 {
        return Err(CommandError::Invalid("timeout is negative"));
    }
    let ms = (seconds * 1000.0).ceil();
    if ms > TIMEOUT_MS_MAX as f64 {
        return Err(CommandError::Invalid("timeout is out of range"));
    }
    Ok(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<Bytes> {
        text.split_whitespace()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    fn parsed(text: &str) -> Result<BlockingPop, CommandError> {
        let all = args(text);
        let name = String::from_utf8_lossy(&all[0]).to_ascii_lowercase();
        parse(&name, &all[1..])
    }

    #[test]
    fn timeouts_are_seconds_rounded_up_to_ms() {
        assert_eq!(parsed("BLPOP a b 0").unwrap().timeout_ms, Some(0));
        assert_eq!(parsed("BLPOP a 1.5").unwrap().timeout_ms, Some(1500));
        assert_eq!(parsed("BLPOP a 0.0001").unwrap().timeout_ms, Some(1));
        for (text, error) in [
            ("BLPOP a -1", "ERR timeout is negative"),
            ("BLPOP a x", "ERR timeout is not a float or out of range"),
            ("BLPOP a 1e300", "ERR timeout is out of range"),
        ] {
            assert_eq!(parsed(text).unwrap_err().to_string(), error, "{text}");
        }
    }

    #[test]
    fn many_key_forms_check_numkeys_direction_and_count_in_redis_words() {
        let pop = parsed("LMPOP 2 a b RIGHT COUNT 3").unwrap();
        assert_eq!(pop.keys, args("a b"));
        assert_eq!(pop.source, PopSource::List(End::Right));
        assert_eq!(pop.shape, PopShape::KeyAndElements(3));
        assert!(!pop.blocks());
        let pop = parsed("BZMPOP 0.5 1 z MAX").unwrap();
        assert_eq!(pop.source, PopSource::ZSet { max: true });
        assert_eq!(pop.timeout_ms, Some(500));
        assert!(pop.blocks());
        for (text, error) in [
            ("LMPOP 0 a LEFT", "ERR numkeys should be greater than 0"),
            ("LMPOP x a LEFT", "ERR numkeys should be greater than 0"),
            ("LMPOP 1 a bad", "ERR syntax error"),
            ("LMPOP 1 a LEFT bad", "ERR syntax error"),
            ("LMPOP 1 a COUNT", "ERR syntax error"),
            ("LMPOP 1 a LEFT COUNT 1 COUNT 2", "ERR syntax error"),
            ("LMPOP 2 a LEFT", "ERR syntax error"),
            (
                "LMPOP 1 a LEFT COUNT 0",
                "ERR count should be greater than 0",
            ),
            (
                "LMPOP 1 a LEFT COUNT -1",
                "ERR count should be greater than 0",
            ),
            ("ZMPOP 1 a LEFT", "ERR syntax error"),
        ] {
            assert_eq!(parsed(text).unwrap_err().to_string(), error, "{text}");
        }
    }

    #[test]
    fn an_attempt_wraps_a_blocking_command_and_nothing_else() {
        let attempt = attempt_args(1234, true, &args("BLMOVE src dst LEFT RIGHT 5"));
        let name = String::from_utf8_lossy(&attempt[0]).to_ascii_lowercase();
        let pop = parse(&name, &attempt[1..]).unwrap();
        assert_eq!(pop.attempt_deadline_ms, Some(1234));
        assert!(pop.woken);
        assert!(!pop.blocks());
        assert_eq!(
            pop.shape,
            PopShape::MoveTo {
                destination: Bytes::from_static(b"dst"),
                end: End::Right
            }
        );
        for text in [
            "RAFT.BLOCKED 1 0 LMPOP 1 a LEFT",
            "RAFT.BLOCKED 1 0 GET a",
            "RAFT.BLOCKED 1 0 RAFT.BLOCKED 1 0 BLPOP a 0",
            "RAFT.BLOCKED 1 2 BLPOP a 0",
        ] {
            assert!(parsed(text).is_err(), "{text}");
        }
        assert_eq!(
            parsed("RAFT.BLOCKED 1 0 BLPOP").unwrap_err().to_string(),
            "ERR wrong number of arguments for 'blpop' command"
        );
        assert_eq!(
            parsed("RAFT.BLOCKED -1 0 BLPOP a 0").unwrap_err(),
            CommandError::NotInteger
        );
    }
}
