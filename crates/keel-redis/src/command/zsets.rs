//! Commands on sorted sets: what they parse to ([`ZSetWrite`], [`ZSetRead`]). Like the other
//! collections' commands (`collections.rs`) they travel in the log as their arguments.

use std::ops::Bound;

use bytes::Bytes;

use super::collections::optional_count;
use super::parse::{integer, is};
use super::{CommandError, FloatBits};
use keel_redis_types::zset::ZAddCondition;
use keel_resp::number::parse_f64;

/// What a range of a sorted set selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZRangeBy {
    /// Positions, inclusive, negative from the end.
    Index { start: i64, stop: i64 },
    Score {
        min: Bound<FloatBits>,
        max: Bound<FloatBits>,
    },
    /// Members by byte order (meaningful when every score is equal, as in Redis).
    Lex { min: LexBound, max: LexBound },
}

/// A bound of a lex range: `-` ([`LexBound::Least`]), `+` ([`LexBound::Greatest`]), `[a`, `(a`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexBound {
    Least,
    Greatest,
    Included(Bytes),
    Excluded(Bytes),
}

impl LexBound {
    /// Whether `member` is at or above this bound taken as a minimum.
    pub fn admits_from_below(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Least => true,
            LexBound::Greatest => false,
            LexBound::Included(b) => member >= &b[..],
            LexBound::Excluded(b) => member > &b[..],
        }
    }

    /// Whether `member` is at or below this bound taken as a maximum.
    pub fn admits_from_above(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Least => false,
            LexBound::Greatest => true,
            LexBound::Included(b) => member <= &b[..],
            LexBound::Excluded(b) => member < &b[..],
        }
    }
}

/// ZRANGE and the older ZRANGEBYSCORE, ZREVRANGE, ... forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZRange {
    pub key: Bytes,
    pub by: ZRangeBy,
    /// Highest first (the bounds are still min and max here).
    pub rev: bool,
    /// LIMIT offset count (count < 0: all).
    pub limit: Option<(i64, i64)>,
    pub with_scores: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZSetWrite {
    /// ZADD: how many added (with CH: changed); with INCR the new score, or null.
    Add {
        key: Bytes,
        condition: ZAddCondition,
        changed: bool,
        incr: bool,
        pairs: Vec<(FloatBits, Bytes)>,
    },
    Rem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    IncrBy {
        key: Bytes,
        delta: FloatBits,
        member: Bytes,
    },
    /// ZPOPMIN, ZPOPMAX (`max`).
    Pop {
        key: Bytes,
        max: bool,
        count: Option<u64>,
    },
    RemRangeByScore {
        key: Bytes,
        min: Bound<FloatBits>,
        max: Bound<FloatBits>,
    },
    RemRangeByRank {
        key: Bytes,
        start: i64,
        stop: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZSetRead {
    Score {
        key: Bytes,
        member: Bytes,
    },
    MScore {
        key: Bytes,
        members: Vec<Bytes>,
    },
    Card {
        key: Bytes,
    },
    /// ZRANK, ZREVRANK (`rev`).
    Rank {
        key: Bytes,
        member: Bytes,
        rev: bool,
    },
    Count {
        key: Bytes,
        min: Bound<FloatBits>,
        max: Bound<FloatBits>,
    },
    Range(ZRange),
}

fn float(arg: &[u8]) -> Result<f64, CommandError> {
    parse_score(arg).ok_or(CommandError::Invalid("value is not a valid float"))
}

/// A score as Redis reads it: a float, `inf`, `+inf` or `-inf`; never NaN.
pub fn parse_score(arg: &[u8]) -> Option<f64> {
    if is(arg, "inf") || is(arg, "+inf") {
        Some(f64::INFINITY)
    } else if is(arg, "-inf") {
        Some(f64::NEG_INFINITY)
    } else {
        parse_f64(arg)
    }
}

/// A score bound: `(1.5` excludes, `1.5`, `-inf`, `+inf` include.
fn score_bound(arg: &[u8]) -> Result<Bound<FloatBits>, CommandError> {
    let invalid = CommandError::Invalid("min or max is not a float");
    Ok(match arg.strip_prefix(b"(") {
        Some(rest) => Bound::Excluded(FloatBits(parse_score(rest).ok_or(invalid)?)),
        None => Bound::Included(FloatBits(parse_score(arg).ok_or(invalid)?)),
    })
}

/// A lex bound: `[a` includes, `(a` excludes, `-` and `+` are the ends.
fn lex_bound(arg: &Bytes) -> Result<LexBound, CommandError> {
    match (arg.first(), arg.len()) {
        (Some(b'-'), 1) => Ok(LexBound::Least),
        (Some(b'+'), 1) => Ok(LexBound::Greatest),
        (Some(b'['), _) => Ok(LexBound::Included(arg.slice(1..))),
        (Some(b'('), _) => Ok(LexBound::Excluded(arg.slice(1..))),
        _ => Err(CommandError::Invalid(
            "min or max not valid string range item",
        )),
    }
}

fn parse_zadd(rest: &[Bytes]) -> Result<ZSetWrite, CommandError> {
    let mut condition = ZAddCondition::default();
    let (mut changed, mut incr) = (false, false);
    let mut at = 1;
    while let Some(option) = rest.get(at) {
        match () {
            _ if is(option, "NX") => condition.only_new = true,
            _ if is(option, "XX") => condition.only_existing = true,
            _ if is(option, "GT") => condition.only_greater = true,
            _ if is(option, "LT") => condition.only_lesser = true,
            _ if is(option, "CH") => changed = true,
            _ if is(option, "INCR") => incr = true,
            _ => break,
        }
        at += 1;
    }
    let pairs = &rest[at..];
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(CommandError::Syntax);
    }
    if condition.only_new && condition.only_existing {
        return Err(CommandError::Invalid(
            "XX and NX options at the same time are not compatible",
        ));
    }
    let ordering = [
        condition.only_new,
        condition.only_greater,
        condition.only_lesser,
    ];
    if ordering.iter().filter(|&&set| set).count() > 1 {
        return Err(CommandError::Invalid(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs.len() != 2 {
        return Err(CommandError::Invalid(
            "INCR option supports a single increment-element pair",
        ));
    }
    let pairs = pairs
        .chunks_exact(2)
        .map(|pair| Ok((FloatBits(float(&pair[0])?), pair[1].clone())))
        .collect::<Result<Vec<_>, CommandError>>()?;
    Ok(ZSetWrite::Add {
        key: rest[0].clone(),
        condition,
        changed,
        incr,
        pairs,
    })
}

/// A write on a sorted set; `name` lowercase, `rest` after it (arity already checked).
pub(super) fn parse_write(name: &str, rest: &[Bytes]) -> Result<ZSetWrite, CommandError> {
    let key = || rest[0].clone();
    Ok(match name {
        "zadd" => parse_zadd(rest)?,
        "zrem" => ZSetWrite::Rem {
            key: key(),
            members: rest[1..].to_vec(),
        },
        "zincrby" => ZSetWrite::IncrBy {
            key: key(),
            delta: FloatBits(float(&rest[1])?),
            member: rest[2].clone(),
        },
        "zpopmin" | "zpopmax" if rest.len() > 2 => {
            return Err(CommandError::WrongArity(name.into()))
        }
        "zpopmin" | "zpopmax" => ZSetWrite::Pop {
            key: key(),
            max: name == "zpopmax",
            count: optional_count(rest)?,
        },
        "zremrangebyscore" => ZSetWrite::RemRangeByScore {
            key: key(),
            min: score_bound(&rest[1])?,
            max: score_bound(&rest[2])?,
        },
        "zremrangebyrank" => ZSetWrite::RemRangeByRank {
            key: key(),
            start: integer(&rest[1])?,
            stop: integer(&rest[2])?,
        },
        other => unreachable!("{other} is not a sorted set write"),
    })
}

/// The options after a range's bounds: `[REV] [LIMIT offset count] [WITHSCORES]` (as allowed).
fn range_options(
    range: &mut ZRange,
    options: &[Bytes],
    rev_allowed: bool,
    limit_allowed: bool,
) -> Result<(), CommandError> {
    let mut at = 0;
    while let Some(option) = options.get(at) {
        if is(option, "WITHSCORES") {
            range.with_scores = true;
        } else if rev_allowed && is(option, "REV") {
            range.rev = true;
        } else if is(option, "LIMIT") && options.len() > at + 2 {
            if !limit_allowed {
                return Err(CommandError::Invalid(
                    "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
                ));
            }
            range.limit = Some((integer(&options[at + 1])?, integer(&options[at + 2])?));
            at += 2;
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    Ok(())
}

fn parse_zrange(rest: &[Bytes]) -> Result<ZRange, CommandError> {
    let options = &rest[3..];
    let by_score = options.iter().any(|o| is(o, "BYSCORE"));
    let by_lex = options.iter().any(|o| is(o, "BYLEX"));
    let others: Vec<Bytes> = options
        .iter()
        .filter(|o| !is(o, "BYSCORE") && !is(o, "BYLEX"))
        .cloned()
        .collect();
    let mut range = ZRange {
        key: rest[0].clone(),
        by: ZRangeBy::Index { start: 0, stop: 0 },
        rev: false,
        limit: None,
        with_scores: false,
    };
    range_options(&mut range, &others, true, by_score || by_lex)?;
    // With REV, BYSCORE and BYLEX take the maximum first.
    let (low, high) = if range.rev && (by_score || by_lex) {
        (&rest[2], &rest[1])
    } else {
        (&rest[1], &rest[2])
    };
    range.by = match (by_score, by_lex) {
        (true, true) => return Err(CommandError::Syntax),
        (true, false) => ZRangeBy::Score {
            min: score_bound(low)?,
            max: score_bound(high)?,
        },
        (false, true) => {
            if range.with_scores {
                return Err(CommandError::Invalid(
                    "syntax error, WITHSCORES not supported in combination with BYLEX",
                ));
            }
            ZRangeBy::Lex {
                min: lex_bound(low)?,
                max: lex_bound(high)?,
            }
        }
        (false, false) => ZRangeBy::Index {
            start: integer(low)?,
            stop: integer(high)?,
        },
    };
    Ok(range)
}

/// A read of a sorted set (see [`parse_write`]).
#[expect(clippy::too_many_lines)]
pub(super) fn parse_read(name: &str, rest: &[Bytes]) -> Result<ZSetRead, CommandError> {
    let key = || rest[0].clone();
    let range = |by: ZRangeBy, rev: bool, options: &[Bytes], limit: bool| {
        let mut range = ZRange {
            key: key(),
            by,
            rev,
            limit: None,
            with_scores: false,
        };
        range_options(&mut range, options, false, limit).map(|()| ZSetRead::Range(range))
    };
    Ok(match name {
        "zscore" => ZSetRead::Score {
            key: key(),
            member: rest[1].clone(),
        },
        "zmscore" => ZSetRead::MScore {
            key: key(),
            members: rest[1..].to_vec(),
        },
        "zcard" => ZSetRead::Card { key: key() },
        "zrank" | "zrevrank" => ZSetRead::Rank {
            key: key(),
            member: rest[1].clone(),
            rev: name == "zrevrank",
        },
        "zcount" => ZSetRead::Count {
            key: key(),
            min: score_bound(&rest[1])?,
            max: score_bound(&rest[2])?,
        },
        "zrange" => ZSetRead::Range(parse_zrange(rest)?),
        "zrevrange" => {
            let by = ZRangeBy::Index {
                start: integer(&rest[1])?,
                stop: integer(&rest[2])?,
            };
            range(by, true, &rest[3..], false)?
        }
        "zrangebyscore" | "zrevrangebyscore" => {
            let rev = name == "zrevrangebyscore";
            let (low, high) = if rev {
                (&rest[2], &rest[1])
            } else {
                (&rest[1], &rest[2])
            };
            let by = ZRangeBy::Score {
                min: score_bound(low)?,
                max: score_bound(high)?,
            };
            range(by, rev, &rest[3..], true)?
        }
        "zrangebylex" | "zrevrangebylex" => {
            let rev = name == "zrevrangebylex";
            let (low, high) = if rev {
                (&rest[2], &rest[1])
            } else {
                (&rest[1], &rest[2])
            };
            let by = ZRangeBy::Lex {
                min: lex_bound(low)?,
                max: lex_bound(high)?,
            };
            let read = range(by, rev, &rest[3..], true)?;
            if matches!(&read, ZSetRead::Range(r) if r.with_scores) {
                return Err(CommandError::Syntax);
            }
            read
        }
        other => unreachable!("{other} is not a sorted set read"),
    })
}

/// The writes of this module, by name.
pub(super) const WRITES: &[&str] = &[
    "zadd",
    "zrem",
    "zincrby",
    "zpopmin",
    "zpopmax",
    "zremrangebyscore",
    "zremrangebyrank",
];

/// The reads of this module, by name.
pub(super) const READS: &[&str] = &[
    "zscore",
    "zmscore",
    "zcard",
    "zrank",
    "zrevrank",
    "zcount",
    "zrange",
    "zrevrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zrangebylex",
    "zrevrangebylex",
];
