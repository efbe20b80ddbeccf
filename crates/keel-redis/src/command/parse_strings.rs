//! Parsing the string commands that read or write part of a value, or a value as a number:
//! INCRBYFLOAT, SETRANGE, SETBIT, GETRANGE, GETBIT, BITCOUNT, LCS. Errors are worded as Redis
//! words them (its test suite matches them).

use bytes::Bytes;

use super::parse::{integer, is};
use super::{BitRange, BitUnit, CommandError, FloatBits, LcsForm, ReadCommand, WriteCommand};
use keel_redis_types::STRING_BYTES_MAX;
use keel_resp::number::{parse_f64, parse_i64};

/// `INCRBYFLOAT key increment`.
pub(super) fn parse_incr_by_float(rest: &[Bytes]) -> Result<WriteCommand, CommandError> {
    let delta = parse_f64(&rest[1]).ok_or(CommandError::NotFloat)?;
    Ok(WriteCommand::IncrByFloat {
        key: rest[0].clone(),
        delta: FloatBits(delta),
    })
}

/// `SETRANGE key offset value`. An offset too far for the value to fit is refused when the
/// command runs (an empty value writes nothing, wherever it is, as in Redis).
pub(super) fn parse_setrange(rest: &[Bytes]) -> Result<WriteCommand, CommandError> {
    let offset = integer(&rest[1])?;
    let offset = u64::try_from(offset).map_err(|_| CommandError::OffsetOutOfRange)?;
    Ok(WriteCommand::SetRange {
        key: rest[0].clone(),
        offset,
        value: rest[2].clone(),
    })
}

/// A SETBIT or GETBIT offset: within a value of at most [`STRING_BYTES_MAX`] bytes (Redis bounds
/// it by `proto-max-bulk-len` the same way).
pub(super) fn bit_offset(arg: &[u8]) -> Result<u64, CommandError> {
    parse_i64(arg)
        .and_then(|offset| u64::try_from(offset).ok())
        .filter(|&offset| offset >> 3 < STRING_BYTES_MAX as u64)
        .ok_or(CommandError::BitOffsetOutOfRange)
}

/// `SETBIT key offset 0|1`.
pub(super) fn parse_setbit(rest: &[Bytes]) -> Result<WriteCommand, CommandError> {
    let offset = bit_offset(&rest[1])?;
    let bit = match parse_i64(&rest[2]) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err(CommandError::BitOutOfRange),
    };
    Ok(WriteCommand::SetBit {
        key: rest[0].clone(),
        offset,
        bit,
    })
}

/// `GETRANGE key start end` (and SUBSTR).
pub(super) fn parse_getrange(rest: &[Bytes]) -> Result<ReadCommand, CommandError> {
    Ok(ReadCommand::GetRange {
        key: rest[0].clone(),
        start: integer(&rest[1])?,
        end: integer(&rest[2])?,
    })
}

/// `BITCOUNT key [start end [BYTE | BIT]]`.
pub(super) fn parse_bitcount(rest: &[Bytes]) -> Result<ReadCommand, CommandError> {
    let range = match &rest[1..] {
        [] => None,
        [start, end, unit @ ..] if unit.len() <= 1 => {
            let (start, end) = (integer(start)?, integer(end)?);
            let unit = match unit {
                [] => BitUnit::Byte,
                [unit] if is(unit, "BYTE") => BitUnit::Byte,
                [unit] if is(unit, "BIT") => BitUnit::Bit,
                _ => return Err(CommandError::Syntax),
            };
            Some(BitRange { start, end, unit })
        }
        _ => return Err(CommandError::Syntax),
    };
    Ok(ReadCommand::BitCount {
        key: rest[0].clone(),
        range,
    })
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`. As in Redis, MINMATCHLEN and
/// WITHMATCHLEN without IDX change nothing, and a negative MINMATCHLEN is 0.
pub(super) fn parse_lcs(rest: &[Bytes]) -> Result<ReadCommand, CommandError> {
    let (mut length, mut ranges, mut with_match_len) = (false, false, false);
    let mut min_match_len = 0u64;
    let mut options = rest[2..].iter();
    while let Some(option) = options.next() {
        if is(option, "LEN") {
            length = true;
        } else if is(option, "IDX") {
            ranges = true;
        } else if is(option, "WITHMATCHLEN") {
            with_match_len = true;
        } else if is(option, "MINMATCHLEN") {
            let value = options.next().ok_or(CommandError::Syntax)?;
            min_match_len = integer(value)?.max(0) as u64;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let form = match (length, ranges) {
        (true, true) => return Err(CommandError::LcsLengthAndRanges),
        (true, false) => LcsForm::Length,
        (false, true) => LcsForm::Ranges {
            min_match_len,
            with_match_len,
        },
        (false, false) => LcsForm::Text,
    };
    Ok(ReadCommand::Lcs {
        key1: rest[0].clone(),
        key2: rest[1].clone(),
        form,
    })
}
