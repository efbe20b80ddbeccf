//! Commands on streams: what they parse to ([`StreamWrite`], [`StreamRead`]), with Redis 7.0's
//! argument rules and errors. Like the other collections' commands (`collections.rs`) they
//! travel in the log as their arguments and every replica parses them again, so their parsing
//! is part of the replicated format.
//!
//! XREADGROUP is a write: it changes the group's pending entries and last ID. XREAD is a read.
//! Both take BLOCK, parsed here and carried in [`XRead::block_ms`]; a client that blocks waits
//! as in a blocking pop, its attempts in the log (`blocking.rs`).

use bytes::Bytes;

use super::parse::{integer, is, lossy};
use super::CommandError;
use keel_redis_types::stream::APPROX_TRIM_LIMIT_DEFAULT;
use keel_redis_types::stream::{
    AutoClaim, ClaimOptions, NewId, RangeBound, StreamId, Trim, TrimStrategy,
};

/// Where XREAD or XREADGROUP reads a stream from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// `$`: after the stream's last ID when the command runs (XREAD only).
    Last,
    /// `>`: entries never delivered to the group (XREADGROUP only).
    New,
    /// After this ID (XREADGROUP: the consumer's own pending entries after it).
    After(StreamId),
}

/// XREAD and XREADGROUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XRead {
    /// COUNT (0: none).
    pub count: usize,
    /// BLOCK, in ms (0: forever), if given.
    pub block_ms: Option<u64>,
    /// XREADGROUP's GROUP group consumer.
    pub group: Option<(Bytes, Bytes)>,
    pub no_ack: bool,
    pub streams: Vec<(Bytes, ReadFrom)>,
}

/// XGROUP CREATE's and SETID's ID: `$` (the stream's last ID) or an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupStart {
    Last,
    Id(StreamId),
}

/// The writes on streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamWrite {
    Add {
        key: Bytes,
        no_mkstream: bool,
        trim: Option<Trim>,
        id: NewId,
        fields: Vec<Bytes>,
    },
    Trim {
        key: Bytes,
        trim: Trim,
    },
    Del {
        key: Bytes,
        ids: Vec<StreamId>,
    },
    SetId {
        key: Bytes,
        id: StreamId,
        entries_added: Option<u64>,
        max_deleted: StreamId,
    },
    GroupCreate {
        key: Bytes,
        group: Bytes,
        start: GroupStart,
        mkstream: bool,
        entries_read: Option<u64>,
    },
    GroupSetId {
        key: Bytes,
        group: Bytes,
        start: GroupStart,
        entries_read: Option<u64>,
    },
    GroupDestroy {
        key: Bytes,
        group: Bytes,
    },
    /// XGROUP CREATECONSUMER (`create`) and DELCONSUMER.
    Consumer {
        key: Bytes,
        group: Bytes,
        consumer: Bytes,
        create: bool,
    },
    ReadGroup(XRead),
    Ack {
        key: Bytes,
        group: Bytes,
        ids: Vec<StreamId>,
    },
    Claim {
        key: Bytes,
        group: Bytes,
        consumer: Bytes,
        ids: Vec<StreamId>,
        options: ClaimOptions,
    },
    AutoClaim {
        key: Bytes,
        group: Bytes,
        consumer: Bytes,
        args: AutoClaim,
    },
}

/// XPENDING's extended form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRange {
    pub min_idle_ms: u64,
    pub start: StreamId,
    pub end: StreamId,
    pub count: usize,
    pub consumer: Option<Bytes>,
}

/// XINFO's subcommands (HELP aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XInfo {
    /// STREAM, with FULL's COUNT (0: everything) if FULL.
    Stream {
        key: Bytes,
        full: Option<usize>,
    },
    Groups {
        key: Bytes,
    },
    Consumers {
        key: Bytes,
        group: Bytes,
    },
}

/// The reads of streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamRead {
    Len {
        key: Bytes,
    },
    /// XRANGE and XREVRANGE (`rev`); `count` None: all, Some(0): a null array (as Redis).
    Range {
        key: Bytes,
        start: StreamId,
        end: StreamId,
        count: Option<usize>,
        rev: bool,
    },
    Read(XRead),
    Pending {
        key: Bytes,
        group: Bytes,
        range: Option<PendingRange>,
    },
    Info(XInfo),
    /// XINFO HELP and XGROUP HELP: their lines.
    Help(&'static [&'static str]),
}

const INVALID_ID: CommandError =
    CommandError::Invalid("Invalid stream ID specified as stream command argument");

/// An ID as the commands that take no `-`/`+` read it (`ms` alone: sequence 0).
fn strict_id(arg: &[u8]) -> Result<StreamId, CommandError> {
    StreamId::parse(arg, 0, false).ok_or(INVALID_ID)
}

fn non_negative(arg: &[u8], error: &'static str) -> Result<u64, CommandError> {
    u64::try_from(integer(arg)?).map_err(|_| CommandError::Invalid(error))
}

/// A COUNT as Redis reads it: negative counts as 0.
fn count_of(arg: &[u8]) -> Result<usize, CommandError> {
    Ok(usize::try_from(integer(arg)?.max(0)).unwrap_or(usize::MAX))
}

/// A range's start and end (`(` excludes), with Redis's errors for an exclusive end past the
/// last ID or before the first.
fn interval(start: &[u8], end: &[u8]) -> Result<(StreamId, StreamId), CommandError> {
    let start = RangeBound::parse(start, 0)
        .ok_or(INVALID_ID)?
        .start()
        .ok_or(CommandError::Invalid("invalid start ID for the interval"))?;
    let end = RangeBound::parse(end, u64::MAX)
        .ok_or(INVALID_ID)?
        .end()
        .ok_or(CommandError::Invalid("invalid end ID for the interval"))?;
    Ok((start, end))
}

/// XADD's and XTRIM's options: the trimming, and for XADD NOMKSTREAM and the position of the
/// ID. `rest` starts after the key.
fn parse_trim(rest: &[Bytes], xadd: bool) -> Result<(Option<Trim>, bool, usize), CommandError> {
    let incompatible = "syntax error, MAXLEN and MINID options at the same time are not compatible";
    let (mut strategy, mut approx, mut limit, mut no_mkstream) = (None, false, None, false);
    let mut at = 0;
    while at < rest.len() {
        let (option, more) = (&rest[at], rest.len() - 1 - at);
        if xadd && &option[..] == b"*" {
            break;
        } else if (is(option, "MAXLEN") || is(option, "MINID")) && more > 0 {
            if strategy.is_some() {
                return Err(CommandError::Invalid(incompatible));
            }
            approx = more >= 2 && &rest[at + 1][..] == b"~";
            if more >= 2 && (approx || &rest[at + 1][..] == b"=") {
                at += 1;
            }
            let value = &rest[at + 1];
            strategy = Some(if is(option, "MAXLEN") {
                TrimStrategy::MaxLen(non_negative(value, "The MAXLEN argument must be >= 0.")?)
            } else {
                TrimStrategy::MinId(strict_id(value)?)
            });
            at += 2;
        } else if is(option, "LIMIT") && more > 0 {
            limit = Some(non_negative(
                &rest[at + 1],
                "The LIMIT argument must be >= 0.",
            )?);
            at += 2;
        } else if xadd && is(option, "NOMKSTREAM") {
            no_mkstream = true;
            at += 1;
        } else if xadd {
            break;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let Some(strategy) = strategy else {
        if limit.is_some_and(|l| l > 0) {
            return Err(CommandError::Invalid(
                "syntax error, LIMIT cannot be used without specifying a trimming strategy",
            ));
        }
        if !xadd {
            return Err(CommandError::Invalid(
                "syntax error, XTRIM must be called with a trimming strategy",
            ));
        }
        return Ok((None, no_mkstream, at));
    };
    if limit.is_some() && !approx {
        return Err(CommandError::Invalid(
            "syntax error, LIMIT cannot be used without the special ~ option",
        ));
    }
    let limit = if approx {
        limit.unwrap_or(APPROX_TRIM_LIMIT_DEFAULT)
    } else {
        0
    };
    let trim = Trim {
        strategy,
        approx,
        limit,
    };
    Ok((Some(trim), no_mkstream, at))
}

fn parse_xadd(rest: &[Bytes]) -> Result<StreamWrite, CommandError> {
    let (trim, no_mkstream, at) = parse_trim(&rest[1..], true)?;
    let id_at = at + 1;
    let fields = rest.get(id_at + 1..).unwrap_or_default();
    if id_at >= rest.len() || fields.is_empty() || fields.len() % 2 != 0 {
        return Err(CommandError::WrongArity("xadd".to_string()));
    }
    let id = NewId::parse(&rest[id_at]).ok_or(INVALID_ID)?;
    if id == NewId::Exact(StreamId::ZERO) {
        return Err(CommandError::Invalid(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    Ok(StreamWrite::Add {
        key: rest[0].clone(),
        no_mkstream,
        trim,
        id,
        fields: fields.to_vec(),
    })
}

fn parse_xsetid(rest: &[Bytes]) -> Result<StreamWrite, CommandError> {
    let id = strict_id(&rest[1])?;
    let (mut entries_added, mut max_deleted) = (None, StreamId::ZERO);
    let mut options = rest[2..].chunks(2);
    for pair in options.by_ref() {
        match pair {
            [option, value] if is(option, "ENTRIESADDED") => {
                entries_added = Some(non_negative(value, "entries_added must be positive")?);
            }
            [option, value] if is(option, "MAXDELETEDID") => {
                max_deleted = strict_id(value)?;
                if id < max_deleted {
                    return Err(CommandError::Invalid(
                        "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    ));
                }
            }
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(StreamWrite::SetId {
        key: rest[0].clone(),
        id,
        entries_added,
        max_deleted,
    })
}

/// A write on a stream; `name` lowercase, `rest` after it (arity already checked).
pub(super) fn parse_write(name: &str, rest: &[Bytes]) -> Result<StreamWrite, CommandError> {
    let key = || rest[0].clone();
    Ok(match name {
        "xadd" => parse_xadd(rest)?,
        "xtrim" => StreamWrite::Trim {
            key: key(),
            trim: parse_trim(&rest[1..], false)?
                .0
                .expect("XTRIM requires a strategy"),
        },
        "xdel" => StreamWrite::Del {
            key: key(),
            ids: rest[1..]
                .iter()
                .map(|a| strict_id(a))
                .collect::<Result<_, _>>()?,
        },
        "xsetid" => parse_xsetid(rest)?,
        "xgroup" => super::stream_groups::parse_xgroup(rest)?,
        "xreadgroup" => StreamWrite::ReadGroup(parse_xread(rest, true)?),
        "xack" => StreamWrite::Ack {
            key: key(),
            group: rest[1].clone(),
            ids: rest[2..]
                .iter()
                .map(|a| strict_id(a))
                .collect::<Result<_, _>>()?,
        },
        "xclaim" => super::stream_groups::parse_xclaim(rest)?,
        "xautoclaim" => super::stream_groups::parse_xautoclaim(rest)?,
        other => unreachable!("{other} is not a stream write"),
    })
}

/// XREAD's and XREADGROUP's options, then STREAMS and its keys and IDs.
pub(super) fn parse_xread(rest: &[Bytes], group_form: bool) -> Result<XRead, CommandError> {
    let mut read = XRead {
        count: 0,
        block_ms: None,
        group: None,
        no_ack: false,
        streams: Vec::new(),
    };
    let mut at = 0;
    let streams_at = loop {
        let Some(option) = rest.get(at) else {
            return Err(CommandError::Syntax);
        };
        let more = rest.len() - 1 - at;
        if is(option, "BLOCK") && more > 0 {
            read.block_ms = Some(super::stream_groups::timeout(&rest[at + 1])?);
            at += 2;
        } else if is(option, "COUNT") && more > 0 {
            read.count = count_of(&rest[at + 1])?;
            at += 2;
        } else if is(option, "STREAMS") && more > 0 {
            break at + 1;
        } else if is(option, "GROUP") && more >= 2 {
            if !group_form {
                return Err(CommandError::Invalid(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            read.group = Some((rest[at + 1].clone(), rest[at + 2].clone()));
            at += 3;
        } else if is(option, "NOACK") {
            if !group_form {
                return Err(CommandError::Invalid(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            read.no_ack = true;
            at += 1;
        } else {
            return Err(CommandError::Syntax);
        }
    };
    let streams = &rest[streams_at..];
    if streams.len() % 2 != 0 {
        return Err(CommandError::Invalid(
            "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        ));
    }
    if group_form && read.group.is_none() {
        return Err(CommandError::Invalid("Missing GROUP option for XREADGROUP"));
    }
    let (keys, ids) = streams.split_at(streams.len() / 2);
    for (key, id) in keys.iter().zip(ids) {
        read.streams.push((key.clone(), read_from(id, group_form)?));
    }
    Ok(read)
}

fn read_from(id: &[u8], group_form: bool) -> Result<ReadFrom, CommandError> {
    match id {
        b"$" if group_form => Err(CommandError::Invalid(
            "The $ ID is meaningless in the context of XREADGROUP: you want to read the history \
             of this consumer by specifying a proper ID, or use the > ID to get new messages. \
             The $ ID would just return an empty result set.",
        )),
        b"$" => Ok(ReadFrom::Last),
        b">" if group_form => Ok(ReadFrom::New),
        b">" => Err(CommandError::Invalid(
            "The > ID can be specified only when calling XREADGROUP using the GROUP <group> \
             <consumer> option.",
        )),
        _ => strict_id(id).map(ReadFrom::After),
    }
}

fn parse_xrange(rest: &[Bytes], rev: bool) -> Result<StreamRead, CommandError> {
    let (start, end) = if rev {
        interval(&rest[2], &rest[1])?
    } else {
        interval(&rest[1], &rest[2])?
    };
    let mut count = None;
    let mut options = rest[3..].iter();
    while let Some(option) = options.next() {
        match options.next() {
            Some(value) if is(option, "COUNT") => count = Some(count_of(value)?),
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(StreamRead::Range {
        key: rest[0].clone(),
        start,
        end,
        count,
        rev,
    })
}

/// A read of a stream (see [`parse_write`]).
pub(super) fn parse_read(name: &str, rest: &[Bytes]) -> Result<StreamRead, CommandError> {
    Ok(match name {
        "xlen" => StreamRead::Len {
            key: rest[0].clone(),
        },
        "xrange" | "xrevrange" => parse_xrange(rest, name == "xrevrange")?,
        "xread" => StreamRead::Read(parse_xread(rest, false)?),
        "xpending" => super::stream_groups::parse_xpending(rest)?,
        "xinfo" => super::stream_groups::parse_xinfo(rest)?,
        other => unreachable!("{other} is not a stream read"),
    })
}

/// `ERR unknown subcommand or wrong number of arguments for '<sub>'. Try <COMMAND> HELP.`
pub(super) fn subcommand_syntax(command: &'static str, sub: &[u8]) -> CommandError {
    CommandError::SubcommandSyntax {
        command,
        subcommand: lossy(sub),
    }
}

/// The positions of XREAD's or XREADGROUP's keys in `args` (the name first): the first half of
/// what follows STREAMS; None without STREAMS or with an odd number after it.
pub(crate) fn stream_key_positions(args: &[Bytes]) -> Option<std::ops::Range<usize>> {
    let mut at = 1;
    while at < args.len() {
        if is(&args[at], "STREAMS") {
            let rest = args.len() - at - 1;
            return (rest > 0 && rest % 2 == 0).then_some(at + 1..at + 1 + rest / 2);
        }
        at += if is(&args[at], "GROUP") {
            3
        } else if is(&args[at], "BLOCK") || is(&args[at], "COUNT") {
            2
        } else {
            1
        };
    }
    None
}

/// The writes of this module, by name.
pub(super) const WRITES: &[&str] = &[
    "xadd",
    "xtrim",
    "xdel",
    "xsetid",
    "xgroup",
    "xreadgroup",
    "xack",
    "xclaim",
    "xautoclaim",
];

/// The reads of this module, by name.
pub(super) const READS: &[&str] = &["xlen", "xrange", "xrevrange", "xread", "xpending", "xinfo"];
