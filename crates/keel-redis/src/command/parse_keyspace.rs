//! Parsing the keyspace commands with options: COPY and SCAN. Errors are worded as Redis words
//! them.

use bytes::Bytes;

use super::parse::{integer, is};
use super::{CommandError, ScanArgs, TypeFilter, WriteCommand};
use crate::kind::Kind;

/// SCAN's COUNT when none is given (Redis's).
const SCAN_COUNT_DEFAULT: u32 = 10;

/// `COPY source destination [DB destination-db] [REPLACE]`: database 0 is the only one.
pub(super) fn parse_copy(rest: &[Bytes]) -> Result<WriteCommand, CommandError> {
    let mut replace = false;
    let mut db = None;
    let mut options = rest[2..].iter();
    while let Some(option) = options.next() {
        if is(option, "REPLACE") {
            replace = true;
        } else if is(option, "DB") {
            let index = options.next().ok_or(CommandError::Syntax)?;
            db = Some(super::parse::db_index(index)?);
        } else {
            return Err(CommandError::Syntax);
        }
    }
    // With DB, whether it names the connection's own database is known when it applies.
    if rest[0] == rest[1] && db.is_none() {
        return Err(CommandError::SameObject);
    }
    Ok(WriteCommand::Copy {
        source: rest[0].clone(),
        destination: rest[1].clone(),
        replace,
        db,
    })
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`, options in any order, the last of
/// each kind winning (as in Redis).
pub(super) fn parse_scan(rest: &[Bytes]) -> Result<ScanArgs, CommandError> {
    let mut scan = ScanArgs {
        cursor: cursor(&rest[0])?,
        pattern: None,
        count: SCAN_COUNT_DEFAULT,
        types: TypeFilter::Any,
    };
    let mut options = rest[1..].iter();
    while let Some(option) = options.next() {
        let value = options.next().ok_or(CommandError::Syntax)?;
        if is(option, "COUNT") {
            let count = integer(value)?;
            if count < 1 {
                return Err(CommandError::Syntax);
            }
            scan.count = u32::try_from(count).unwrap_or(u32::MAX);
        } else if is(option, "MATCH") {
            // `*` matches every key: no pattern to test.
            scan.pattern = (&value[..] != b"*").then(|| value.clone());
        } else if is(option, "TYPE") {
            scan.types = Kind::named(value).map_or(TypeFilter::Nothing, TypeFilter::Only);
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(scan)
}

/// A cursor as `strtoul` reads it for Redis: decimal digits that fit 64 bits (leading zeros
/// allowed) after an optional sign, a negative one wrapping around (`-1` is the largest cursor).
fn cursor(arg: &[u8]) -> Result<u64, CommandError> {
    let (negative, digits) = match arg {
        [b'-', digits @ ..] => (true, digits),
        [b'+', digits @ ..] => (false, digits),
        digits => (false, digits),
    };
    let value: Option<u64> = (!digits.is_empty() && digits.iter().all(u8::is_ascii_digit))
        .then(|| std::str::from_utf8(digits).ok()?.parse().ok())
        .flatten();
    let value = value.ok_or(CommandError::InvalidCursor)?;
    Ok(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}
