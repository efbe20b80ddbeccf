//! The parsers of the consumer group commands and XINFO (`streams.rs` has their types): XGROUP,
//! XCLAIM, XAUTOCLAIM, XPENDING, XINFO, with Redis 7.0's errors.

use bytes::Bytes;

use super::parse::{integer, is, lossy};
use super::streams::{subcommand_syntax, GroupStart, PendingRange, StreamRead, StreamWrite, XInfo};
use super::CommandError;
use keel_redis_types::stream::{AutoClaim, ClaimOptions, Delivery, RangeBound, StreamId};

/// XGROUP HELP's lines, as Redis 7.0 gives them.
pub const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

/// XINFO HELP's lines.
pub const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// BLOCK's timeout, in ms.
pub(super) fn timeout(arg: &[u8]) -> Result<u64, CommandError> {
    let ms = keel_resp::number::parse_i64(arg).ok_or(CommandError::Invalid(
        "timeout is not an integer or out of range",
    ))?;
    u64::try_from(ms).map_err(|_| CommandError::Invalid("timeout is negative"))
}

fn strict_id(arg: &[u8]) -> Result<StreamId, CommandError> {
    StreamId::parse(arg, 0, false).ok_or(CommandError::Invalid(
        "Invalid stream ID specified as stream command argument",
    ))
}

/// The arity of each XGROUP and XINFO subcommand (Redis's convention, the command counted).
fn subcommand_arity(command: &str, sub: &str) -> Option<i32> {
    Some(match (command, sub) {
        ("xgroup", "create") | ("xgroup", "setid") => -5,
        ("xgroup", "destroy") => 4,
        ("xgroup", "createconsumer") | ("xgroup", "delconsumer") => 5,
        ("xinfo", "stream") => -3,
        ("xinfo", "groups") => 3,
        ("xinfo", "consumers") => 4,
        (_, "help") => 2,
        _ => return None,
    })
}

/// The subcommand `rest[0]` of `command`, lowercase, its arity checked.
pub(super) fn subcommand(
    command: &'static str,
    upper: &'static str,
    rest: &[Bytes],
) -> Result<String, CommandError> {
    let sub = lossy(&rest[0]).to_ascii_lowercase();
    let Some(arity) = subcommand_arity(command, &sub) else {
        return Err(CommandError::UnknownSubcommand {
            command: upper,
            subcommand: lossy(&rest[0]),
        });
    };
    let argc = rest.len() as i32 + 1;
    if (arity >= 0 && argc != arity) || (arity < 0 && argc < -arity) {
        return Err(CommandError::WrongArity(format!("{command}|{sub}")));
    }
    Ok(sub)
}

/// XGROUP CREATE's and SETID's options after the ID: MKSTREAM (CREATE) and ENTRIESREAD.
fn group_options(sub: &str, options: &[Bytes]) -> Result<(bool, Option<u64>), CommandError> {
    let (mut mkstream, mut entries_read) = (false, None);
    let mut at = 0;
    while let Some(option) = options.get(at) {
        if sub == "create" && is(option, "MKSTREAM") {
            mkstream = true;
            at += 1;
        } else if is(option, "ENTRIESREAD") && at + 1 < options.len() {
            let n = integer(&options[at + 1])?;
            if n < -1 {
                return Err(CommandError::Invalid(
                    "value for ENTRIESREAD must be positive or -1",
                ));
            }
            entries_read = u64::try_from(n).ok();
            at += 2;
        } else {
            return Err(subcommand_syntax(
                "XGROUP",
                sub.to_ascii_uppercase().as_bytes(),
            ));
        }
    }
    if sub == "setid" && !options.is_empty() && options.len() != 2 {
        return Err(subcommand_syntax("XGROUP", b"SETID"));
    }
    Ok((mkstream, entries_read))
}

/// XGROUP's subcommands but HELP (a read, `parse.rs`).
pub(super) fn parse_xgroup(rest: &[Bytes]) -> Result<StreamWrite, CommandError> {
    let sub = subcommand("xgroup", "XGROUP", rest)?;
    let (key, group) = (rest[1].clone(), rest[2].clone());
    Ok(match sub.as_str() {
        "create" | "setid" => {
            if rest.len() > 7 {
                return Err(subcommand_syntax("XGROUP", &rest[0]));
            }
            let (mkstream, entries_read) = group_options(&sub, &rest[4..])?;
            let start = match &rest[3][..] {
                b"$" => GroupStart::Last,
                id if sub == "create" => GroupStart::Id(strict_id(id)?),
                id => GroupStart::Id(StreamId::parse(id, 0, true).ok_or(CommandError::Invalid(
                    "Invalid stream ID specified as stream command argument",
                ))?),
            };
            if sub == "create" {
                StreamWrite::GroupCreate {
                    key,
                    group,
                    start,
                    mkstream,
                    entries_read,
                }
            } else {
                StreamWrite::GroupSetId {
                    key,
                    group,
                    start,
                    entries_read,
                }
            }
        }
        "destroy" => StreamWrite::GroupDestroy { key, group },
        "createconsumer" | "delconsumer" => StreamWrite::Consumer {
            key,
            group,
            consumer: rest[3].clone(),
            create: sub == "createconsumer",
        },
        _ => return Err(subcommand_syntax("XGROUP", &rest[0])),
    })
}

/// An integer option of XCLAIM, with its own error.
fn claim_integer(arg: &[u8], error: &'static str) -> Result<i64, CommandError> {
    keel_resp::number::parse_i64(arg).ok_or(CommandError::Invalid(error))
}

/// `XCLAIM key group consumer min-idle-time id [id ...] [options]`.
pub(super) fn parse_xclaim(rest: &[Bytes]) -> Result<StreamWrite, CommandError> {
    let min_idle = claim_integer(&rest[3], "Invalid min-idle-time argument for XCLAIM")?;
    let mut args = ClaimOptions {
        min_idle_ms: u64::try_from(min_idle).unwrap_or(0),
        ..ClaimOptions::default()
    };
    let ids: Vec<StreamId> = rest[4..]
        .iter()
        .map_while(|arg| StreamId::parse(arg, 0, false))
        .collect();
    let mut at = 4 + ids.len();
    while let Some(option) = rest.get(at) {
        let value = rest.get(at + 1);
        match value {
            _ if is(option, "FORCE") => args.force = true,
            _ if is(option, "JUSTID") => args.just_id = true,
            Some(value) if is(option, "IDLE") => {
                let idle = claim_integer(value, "Invalid IDLE option argument for XCLAIM")?;
                args.delivery = Some(Delivery::IdleMs(idle));
                at += 1;
            }
            Some(value) if is(option, "TIME") => {
                let time = claim_integer(value, "Invalid TIME option argument for XCLAIM")?;
                args.delivery = Some(Delivery::AtMs(time));
                at += 1;
            }
            Some(value) if is(option, "RETRYCOUNT") => {
                let retry = claim_integer(value, "Invalid RETRYCOUNT option argument for XCLAIM")?;
                args.retry_count = u64::try_from(retry).ok();
                at += 1;
            }
            Some(value) if is(option, "LASTID") => {
                args.last_id = Some(strict_id(value)?);
                at += 1;
            }
            _ => {
                return Err(CommandError::UnrecognizedXClaimOption(lossy(option)));
            }
        }
        at += 1;
    }
    Ok(StreamWrite::Claim {
        key: rest[0].clone(),
        group: rest[1].clone(),
        consumer: rest[2].clone(),
        ids,
        options: args,
    })
}

/// The largest XAUTOCLAIM COUNT: Redis's `LONG_MAX / 10` (it examines ten times COUNT).
const AUTOCLAIM_COUNT_MAX: i64 = i64::MAX / 10;

/// `XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]`.
pub(super) fn parse_xautoclaim(rest: &[Bytes]) -> Result<StreamWrite, CommandError> {
    let min_idle = claim_integer(&rest[3], "Invalid min-idle-time argument for XAUTOCLAIM")?;
    let start = RangeBound::parse(&rest[4], 0)
        .ok_or(CommandError::Invalid(
            "Invalid stream ID specified as stream command argument",
        ))?
        .start()
        .ok_or(CommandError::Invalid("invalid start ID for the interval"))?;
    let (mut count, mut just_id) = (100usize, false);
    let mut at = 5;
    while let Some(option) = rest.get(at) {
        if is(option, "COUNT") && at + 1 < rest.len() {
            let n =
                integer(&rest[at + 1]).map_err(|_| CommandError::Invalid("COUNT must be > 0"))?;
            if !(1..=AUTOCLAIM_COUNT_MAX).contains(&n) {
                return Err(CommandError::Invalid("COUNT must be > 0"));
            }
            count = usize::try_from(n).unwrap_or(usize::MAX);
            at += 1;
        } else if is(option, "JUSTID") {
            just_id = true;
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    Ok(StreamWrite::AutoClaim {
        key: rest[0].clone(),
        group: rest[1].clone(),
        consumer: rest[2].clone(),
        args: AutoClaim {
            start,
            count,
            min_idle_ms: u64::try_from(min_idle).unwrap_or(0),
            just_id,
        },
    })
}

/// `XPENDING key group [[IDLE min-idle-time] start end count [consumer]]`.
pub(super) fn parse_xpending(rest: &[Bytes]) -> Result<StreamRead, CommandError> {
    let (key, group) = (rest[0].clone(), rest[1].clone());
    let argc = rest.len() + 1;
    if argc == 3 {
        return Ok(StreamRead::Pending {
            key,
            group,
            range: None,
        });
    }
    if !(6..=9).contains(&argc) {
        return Err(CommandError::Syntax);
    }
    let mut at = 2;
    let mut min_idle_ms = 0;
    if is(&rest[2], "IDLE") {
        min_idle_ms = u64::try_from(integer(&rest[3])?).unwrap_or(0);
        if argc < 8 {
            return Err(CommandError::Syntax);
        }
        at = 4;
    }
    let count = usize::try_from(integer(&rest[at + 2])?.max(0)).unwrap_or(usize::MAX);
    let start = RangeBound::parse(&rest[at], 0)
        .ok_or(CommandError::Invalid(
            "Invalid stream ID specified as stream command argument",
        ))?
        .start()
        .ok_or(CommandError::Invalid("invalid start ID for the interval"))?;
    let end = RangeBound::parse(&rest[at + 1], u64::MAX)
        .ok_or(CommandError::Invalid(
            "Invalid stream ID specified as stream command argument",
        ))?
        .end()
        .ok_or(CommandError::Invalid("invalid end ID for the interval"))?;
    let consumer = match rest.get(at + 3..) {
        Some([consumer]) => Some(consumer.clone()),
        Some([]) | None => None,
        Some(_) => return Err(CommandError::Syntax),
    };
    let range = PendingRange {
        min_idle_ms,
        start,
        end,
        count,
        consumer,
    };
    Ok(StreamRead::Pending {
        key,
        group,
        range: Some(range),
    })
}

/// XINFO's subcommands.
pub(super) fn parse_xinfo(rest: &[Bytes]) -> Result<StreamRead, CommandError> {
    let sub = subcommand("xinfo", "XINFO", rest)?;
    Ok(StreamRead::Info(match sub.as_str() {
        "help" => return Ok(StreamRead::Help(XINFO_HELP)),
        "groups" => XInfo::Groups {
            key: rest[1].clone(),
        },
        "consumers" => XInfo::Consumers {
            key: rest[1].clone(),
            group: rest[2].clone(),
        },
        _ => {
            let key = rest[1].clone();
            let full = match &rest[2..] {
                [] => None,
                [full] if is(full, "FULL") => Some(10),
                [full, count, n] if is(full, "FULL") && is(count, "COUNT") => {
                    let n = integer(n)?;
                    Some(if n < 0 { 10 } else { n as usize })
                }
                _ => return Err(subcommand_syntax("XINFO", &rest[0])),
            };
            XInfo::Stream { key, full }
        }
    }))
}
