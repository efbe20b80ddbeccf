//! The bodies of the single-write ops (1 to 6, 9 to 15, 128; 64 to 69 are in
//! `strings_and_keys.rs`): how a [`WriteCommand`] is encoded, its length predicted, and decoded
//! again, with the SET condition, expiry and expire-command codes they share. Apart from the
//! entry's header and the EXEC bodies because a write is the unit both a plain entry and a
//! transaction carry; its format is in the table of `log_command.rs`.

use bytes::{BufMut, Bytes};

use super::fields::{bytes, count, field_len, flag, list, list_count, put_list, u8_field};
use super::strings_and_keys::{self, READ_OPS, WRITE_OPS};
use super::{
    DecodeError, BYTES_FIELD_MIN, EXPIRY_BYTES, OP_APPEND, OP_CAS, OP_COLLECTION_READ,
    OP_COLLECTION_WRITE, OP_DBSIZE, OP_DEL, OP_ECHO, OP_EXEC, OP_EXEC_WATCHED, OP_EXISTS,
    OP_EXPIRE, OP_FLUSHALL, OP_GET, OP_GETDEL, OP_GETEX, OP_INCRBY, OP_MEMBER_ADDRS, OP_MGET,
    OP_MSET, OP_MSETNX, OP_PERSIST, OP_PING, OP_SET, OP_SET_WITH, OP_STRLEN, OP_TICK, OP_TTL,
    OP_WATCHPOINT,
};
use crate::command::{Command, ExpireCondition, Expiry, SetCondition, TtlCommand, WriteCommand};
use keel_redis_types::wire::{put_bytes, Reader};

pub(super) fn write_len_hint(command: &WriteCommand) -> usize {
    1 + match command {
        WriteCommand::Set { key, value, .. } | WriteCommand::Append { key, value } => {
            1 + field_len(key) + field_len(value)
        }
        WriteCommand::Del { keys } => 4 + keys.iter().map(field_len).sum::<usize>(),
        WriteCommand::IncrBy { key, .. } => field_len(key) + 8,
        WriteCommand::MSet { pairs } => {
            4 + pairs
                .iter()
                .map(|(k, v)| field_len(k) + field_len(v))
                .sum::<usize>()
        }
        WriteCommand::Cas { key, expected, new } => {
            field_len(key) + field_len(expected) + field_len(new)
        }
        WriteCommand::SetWith { key, value, .. } => {
            3 + EXPIRY_BYTES + field_len(key) + field_len(value)
        }
        WriteCommand::MSetNx { pairs } => {
            4 + pairs
                .iter()
                .map(|(k, v)| field_len(k) + field_len(v))
                .sum::<usize>()
        }
        WriteCommand::GetDel { key } | WriteCommand::Persist { key } => field_len(key),
        WriteCommand::GetEx { key, .. } => EXPIRY_BYTES + field_len(key),
        WriteCommand::Expire { key, .. } => EXPIRY_BYTES + 2 + field_len(key),
        WriteCommand::FlushAll | WriteCommand::FlushDb => 0,
        WriteCommand::SwapDb { .. } => 8,
        WriteCommand::Move { key, .. } => 4 + field_len(key),
        WriteCommand::IncrByFloat { key, .. } => field_len(key) + 8,
        WriteCommand::SetRange { key, value, .. } => field_len(key) + 8 + field_len(value),
        WriteCommand::SetBit { key, .. } => field_len(key) + 9,
        WriteCommand::Rename { key, new_key, .. } => field_len(key) + field_len(new_key),
        WriteCommand::Copy {
            source,
            destination,
            ..
        } => 5 + field_len(source) + field_len(destination),
        WriteCommand::Collection(typed) => 4 + typed.args.iter().map(field_len).sum::<usize>(),
    }
}

/// A write's op and body.
#[expect(clippy::too_many_lines)]
pub(super) fn put_write(out: &mut Vec<u8>, command: &WriteCommand) {
    match command {
        WriteCommand::Set {
            key,
            value,
            condition,
        } => {
            out.put_u8(OP_SET);
            out.put_u8(set_condition_code(*condition));
            put_bytes(out, key);
            put_bytes(out, value);
        }
        WriteCommand::SetWith {
            key,
            value,
            condition,
            expiry,
            get,
            command,
        } => {
            out.put_u8(OP_SET_WITH);
            out.put_u8(set_condition_code(*condition));
            out.put_u8(u8::from(*get));
            put_expiry(out, *expiry);
            out.put_u8(command.code());
            put_bytes(out, key);
            put_bytes(out, value);
        }
        WriteCommand::MSetNx { pairs } => {
            out.put_u8(OP_MSETNX);
            put_pairs(out, pairs);
        }
        WriteCommand::GetDel { key } => {
            out.put_u8(OP_GETDEL);
            put_bytes(out, key);
        }
        WriteCommand::GetEx { key, expiry } => {
            out.put_u8(OP_GETEX);
            put_expiry(out, *expiry);
            put_bytes(out, key);
        }
        WriteCommand::Expire {
            key,
            deadline,
            condition,
            command,
        } => {
            out.put_u8(OP_EXPIRE);
            put_expiry(out, *deadline);
            out.put_u8(match condition {
                ExpireCondition::Always => 0,
                ExpireCondition::IfNone => 1,
                ExpireCondition::IfSome => 2,
                ExpireCondition::IfLater => 3,
                ExpireCondition::IfEarlier => 4,
                ExpireCondition::IfEarlierWithDeadline => 5,
            });
            out.put_u8(command.code());
            put_bytes(out, key);
        }
        WriteCommand::Persist { key } => {
            out.put_u8(OP_PERSIST);
            put_bytes(out, key);
        }
        WriteCommand::FlushAll => out.put_u8(OP_FLUSHALL),
        WriteCommand::Del { keys } => {
            out.put_u8(OP_DEL);
            put_list(out, keys);
        }
        WriteCommand::IncrBy { key, delta } => {
            out.put_u8(OP_INCRBY);
            put_bytes(out, key);
            out.put_i64_le(*delta);
        }
        WriteCommand::MSet { pairs } => {
            out.put_u8(OP_MSET);
            put_pairs(out, pairs);
        }
        WriteCommand::Append { key, value } => {
            out.put_u8(OP_APPEND);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        WriteCommand::Cas { key, expected, new } => {
            out.put_u8(OP_CAS);
            put_bytes(out, key);
            put_bytes(out, expected);
            put_bytes(out, new);
        }
        WriteCommand::Collection(typed) => {
            out.put_u8(OP_COLLECTION_WRITE);
            put_list(out, &typed.args);
        }
        WriteCommand::IncrByFloat { .. }
        | WriteCommand::SetRange { .. }
        | WriteCommand::SetBit { .. }
        | WriteCommand::Rename { .. }
        | WriteCommand::Copy { .. }
        | WriteCommand::FlushDb
        | WriteCommand::SwapDb { .. }
        | WriteCommand::Move { .. } => strings_and_keys::put_write(out, command),
    }
}

fn put_pairs(out: &mut Vec<u8>, pairs: &[(Bytes, Bytes)]) {
    out.put_u32_le(count(pairs.len()));
    for (key, value) in pairs {
        put_bytes(out, key);
        put_bytes(out, value);
    }
}

/// A `count n >= 1, then n x (bytes key, bytes value)` list.
fn pairs(r: &mut Reader) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
    let n = list_count(r, 2 * BYTES_FIELD_MIN)?;
    (0..n).map(|_| Ok((bytes(r)?, bytes(r)?))).collect()
}

#[expect(clippy::too_many_lines)]
pub(super) fn decode_write(op: u8, r: &mut Reader) -> Result<WriteCommand, DecodeError> {
    Ok(match op {
        OP_SET => {
            let condition = set_condition(r)?;
            WriteCommand::Set {
                key: bytes(r)?,
                value: bytes(r)?,
                condition,
            }
        }
        OP_SET_WITH => {
            let condition = set_condition(r)?;
            let get = flag(r, "GET flag")?;
            let expiry = expiry(r)?;
            let command = ttl_command(r)?;
            WriteCommand::SetWith {
                key: bytes(r)?,
                value: bytes(r)?,
                condition,
                expiry,
                get,
                command,
            }
        }
        OP_MSETNX => WriteCommand::MSetNx { pairs: pairs(r)? },
        OP_GETDEL => WriteCommand::GetDel { key: bytes(r)? },
        OP_GETEX => {
            let expiry = expiry(r)?;
            WriteCommand::GetEx {
                key: bytes(r)?,
                expiry,
            }
        }
        OP_EXPIRE => {
            let deadline = expiry(r)?;
            if !matches!(deadline, Expiry::AfterMs(_) | Expiry::AtMs(_)) {
                return Err(DecodeError::UnknownCode("EXPIRE deadline kind", 0));
            }
            let condition = match u8_field(r)? {
                0 => ExpireCondition::Always,
                1 => ExpireCondition::IfNone,
                2 => ExpireCondition::IfSome,
                3 => ExpireCondition::IfLater,
                4 => ExpireCondition::IfEarlier,
                5 => ExpireCondition::IfEarlierWithDeadline,
                other => return Err(DecodeError::UnknownCode("EXPIRE condition", other)),
            };
            let command = ttl_command(r)?;
            WriteCommand::Expire {
                key: bytes(r)?,
                deadline,
                condition,
                command,
            }
        }
        OP_PERSIST => WriteCommand::Persist { key: bytes(r)? },
        OP_FLUSHALL => WriteCommand::FlushAll,
        OP_DEL => WriteCommand::Del { keys: list(r)? },
        OP_INCRBY => {
            let key = bytes(r)?;
            let delta = r.i64().ok_or(DecodeError::Truncated(r.position()))?;
            WriteCommand::IncrBy { key, delta }
        }
        OP_MSET => WriteCommand::MSet { pairs: pairs(r)? },
        OP_APPEND => WriteCommand::Append {
            key: bytes(r)?,
            value: bytes(r)?,
        },
        OP_CAS => WriteCommand::Cas {
            key: bytes(r)?,
            expected: bytes(r)?,
            new: bytes(r)?,
        },
        OP_EXEC => return Err(DecodeError::NestedExec),
        OP_COLLECTION_WRITE => match Command::parse(&list(r)?) {
            Ok(Command::Write(write @ WriteCommand::Collection(_))) => write,
            _ => return Err(DecodeError::InvalidArguments(OP_COLLECTION_WRITE)),
        },
        OP_COLLECTION_READ => return Err(DecodeError::OnlyInExec(op)),
        OP_MEMBER_ADDRS | OP_TICK | OP_EXEC_WATCHED => return Err(DecodeError::UnknownOp(op)),
        OP_GET | OP_MGET | OP_EXISTS | OP_STRLEN | OP_DBSIZE | OP_TTL | OP_WATCHPOINT | OP_PING
        | OP_ECHO => return Err(DecodeError::OnlyInExec(op)),
        write if WRITE_OPS.contains(&write) => strings_and_keys::decode_write(write, r)?,
        read if READ_OPS.contains(&read) => return Err(DecodeError::OnlyInExec(read)),
        other => return Err(DecodeError::UnknownOp(other)),
    })
}

fn set_condition_code(condition: SetCondition) -> u8 {
    match condition {
        SetCondition::Always => 0,
        SetCondition::IfAbsent => 1,
        SetCondition::IfPresent => 2,
    }
}

fn set_condition(r: &mut Reader) -> Result<SetCondition, DecodeError> {
    Ok(match u8_field(r)? {
        0 => SetCondition::Always,
        1 => SetCondition::IfAbsent,
        2 => SetCondition::IfPresent,
        other => return Err(DecodeError::UnknownCondition(other)),
    })
}

fn put_expiry(out: &mut Vec<u8>, expiry: Expiry) {
    let (kind, ms) = match expiry {
        Expiry::Clear => (0, 0),
        Expiry::Keep => (1, 0),
        Expiry::AfterMs(ms) => (2, ms),
        Expiry::AtMs(ms) => (3, ms),
    };
    out.put_u8(kind);
    out.put_i64_le(ms);
}

fn expiry(r: &mut Reader) -> Result<Expiry, DecodeError> {
    let kind = u8_field(r)?;
    let ms = r.i64().ok_or(DecodeError::Truncated(r.position()))?;
    Ok(match (kind, ms) {
        (0, 0) => Expiry::Clear,
        (1, 0) => Expiry::Keep,
        (2, ms) => Expiry::AfterMs(ms),
        (3, ms) => Expiry::AtMs(ms),
        _ => return Err(DecodeError::UnknownCode("expiry kind", kind)),
    })
}

fn ttl_command(r: &mut Reader) -> Result<TtlCommand, DecodeError> {
    let code = u8_field(r)?;
    TtlCommand::from_code(code).ok_or(DecodeError::UnknownCode("expire command", code))
}
