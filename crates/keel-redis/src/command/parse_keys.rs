//! Parsing the commands that set or read a key's expiry: SET's options, SETEX, PSETEX, GETEX,
//! EXPIRE and its family. Errors are worded as Redis words them (its test suite matches them).

use bytes::Bytes;

use super::parse::{integer, is, lossy};
use super::{CommandError, ExpireCondition, Expiry, SetCondition, TtlCommand, WriteCommand};

/// Largest seconds value that still fits in milliseconds (Redis: `LLONG_MAX / 1000`).
const SECONDS_MAX: i64 = i64::MAX / 1000;

/// Seconds or milliseconds, as a command's option names them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Ms,
}

fn to_ms(value: i64, unit: Unit, command: TtlCommand) -> Result<i64, CommandError> {
    match unit {
        Unit::Ms => Ok(value),
        Unit::Seconds => value
            .checked_mul(1000)
            .ok_or(CommandError::InvalidExpireTime(command.name())),
    }
}

/// An EX/PX/EXAT/PXAT argument: an integer above 0 that fits in ms (Redis checks the range
/// before converting).
fn positive_expiry(
    arg: &[u8],
    unit: Unit,
    absolute: bool,
    command: TtlCommand,
) -> Result<Expiry, CommandError> {
    let value = integer(arg)?;
    if value <= 0 || (unit == Unit::Seconds && value > SECONDS_MAX) {
        return Err(CommandError::InvalidExpireTime(command.name()));
    }
    let ms = to_ms(value, unit, command)?;
    Ok(if absolute {
        Expiry::AtMs(ms)
    } else {
        Expiry::AfterMs(ms)
    })
}

/// `EX s | PX ms | EXAT t | PXAT t`: which option `option` is, if any.
fn expiry_option(option: &[u8]) -> Option<(Unit, bool)> {
    [
        ("EX", Unit::Seconds, false),
        ("PX", Unit::Ms, false),
        ("EXAT", Unit::Seconds, true),
        ("PXAT", Unit::Ms, true),
    ]
    .into_iter()
    .find(|(name, _, _)| is(option, name))
    .map(|(_, unit, absolute)| (unit, absolute))
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT t | PXAT t | KEEPTTL]`: a plain
/// [`WriteCommand::Set`] when no expiry option or GET is given.
pub(super) fn parse_set(rest: &[Bytes]) -> Result<WriteCommand, CommandError> {
    let mut condition = SetCondition::Always;
    let mut expiry: Option<Expiry> = None;
    let mut get = false;
    let mut options = rest[2..].iter();
    while let Some(option) = options.next() {
        if is(option, "NX") || is(option, "XX") {
            let wanted = if is(option, "NX") {
                SetCondition::IfAbsent
            } else {
                SetCondition::IfPresent
            };
            if condition != SetCondition::Always && condition != wanted {
                return Err(CommandError::Syntax);
            }
            condition = wanted;
        } else if let Some((unit, absolute)) = expiry_option(option) {
            let Some(arg) = options.next() else {
                return Err(CommandError::Syntax);
            };
            if expiry.is_some() {
                return Err(CommandError::Syntax);
            }
            expiry = Some(positive_expiry(arg, unit, absolute, TtlCommand::Set)?);
        } else if is(option, "KEEPTTL") {
            if expiry.is_some_and(|e| e != Expiry::Keep) {
                return Err(CommandError::Syntax);
            }
            expiry = Some(Expiry::Keep);
        } else if is(option, "GET") {
            get = true;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let (key, value) = (rest[0].clone(), rest[1].clone());
    Ok(match (expiry.unwrap_or_default(), get) {
        (Expiry::Clear, false) => WriteCommand::Set {
            key,
            value,
            condition,
        },
        (expiry, get) => WriteCommand::SetWith {
            key,
            value,
            condition,
            expiry,
            get,
            command: TtlCommand::Set,
        },
    })
}

/// `SETEX key seconds value` / `PSETEX key ms value`.
pub(super) fn parse_setex(rest: &[Bytes], ms: bool) -> Result<WriteCommand, CommandError> {
    let (unit, command) = if ms {
        (Unit::Ms, TtlCommand::PSetEx)
    } else {
        (Unit::Seconds, TtlCommand::SetEx)
    };
    Ok(WriteCommand::SetWith {
        key: rest[0].clone(),
        value: rest[2].clone(),
        condition: SetCondition::Always,
        expiry: positive_expiry(&rest[1], unit, false, command)?,
        get: false,
        command,
    })
}

/// `GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]`: `None` without an option (a read).
pub(super) fn parse_getex(rest: &[Bytes]) -> Result<Option<WriteCommand>, CommandError> {
    let key = rest[0].clone();
    let expiry = match &rest[1..] {
        [] => return Ok(None),
        [option] if is(option, "PERSIST") => Expiry::Clear,
        [option, arg] => match expiry_option(option) {
            Some((unit, absolute)) => positive_expiry(arg, unit, absolute, TtlCommand::GetEx)?,
            None => return Err(CommandError::Syntax),
        },
        _ => return Err(CommandError::Syntax),
    };
    Ok(Some(WriteCommand::GetEx { key, expiry }))
}

/// `EXPIRE key seconds [NX | XX | GT | LT]` and PEXPIRE, EXPIREAT, PEXPIREAT.
pub(super) fn parse_expire(
    rest: &[Bytes],
    command: TtlCommand,
) -> Result<WriteCommand, CommandError> {
    let (unit, absolute) = match command {
        TtlCommand::Expire => (Unit::Seconds, false),
        TtlCommand::PExpire => (Unit::Ms, false),
        TtlCommand::ExpireAt => (Unit::Seconds, true),
        TtlCommand::PExpireAt => (Unit::Ms, true),
        other => unreachable!("{} is not of the EXPIRE family", other.name()),
    };
    let value = integer(&rest[1])?;
    if unit == Unit::Seconds && !(-SECONDS_MAX..=SECONDS_MAX).contains(&value) {
        return Err(CommandError::InvalidExpireTime(command.name()));
    }
    let ms = to_ms(value, unit, command)?;
    let deadline = if absolute {
        Expiry::AtMs(ms)
    } else {
        Expiry::AfterMs(ms)
    };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &rest[2..] {
        if is(option, "NX") {
            nx = true;
        } else if is(option, "XX") {
            xx = true;
        } else if is(option, "GT") {
            gt = true;
        } else if is(option, "LT") {
            lt = true;
        } else {
            return Err(CommandError::UnsupportedExpireOption(lossy(option)));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CommandError::ExpireNxAndOthers);
    }
    if gt && lt {
        return Err(CommandError::ExpireGtAndLt);
    }
    // XX with GT or LT: both must hold; GT and LT already imply a deadline exists or not as
    // they need, except LT, which holds for a key without one: XX LT needs one.
    let condition = match (nx, xx, gt, lt) {
        (true, ..) => ExpireCondition::IfNone,
        (_, _, true, _) => ExpireCondition::IfLater,
        (_, true, _, true) => ExpireCondition::IfEarlierWithDeadline,
        (_, _, _, true) => ExpireCondition::IfEarlier,
        (_, true, ..) => ExpireCondition::IfSome,
        _ => ExpireCondition::Always,
    };
    Ok(WriteCommand::Expire {
        key: rest[0].clone(),
        deadline,
        condition,
        command,
    })
}
