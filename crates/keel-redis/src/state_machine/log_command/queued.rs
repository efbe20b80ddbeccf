//! The bodies of the commands queued in an EXEC (op 7 and 49): a write as `writes.rs` encodes it,
//! or one of the reads, PING and ECHO that are valid only inside a transaction (ops 16 to 22, 32,
//! 33, 129; 96 to 103 are in `strings_and_keys.rs`). Apart from the single writes because these
//! ops exist only inside an EXEC and a nested EXEC is refused here.

use bytes::BufMut;

use super::fields::{bytes, field_len, list, put_list, u8_field};
use super::strings_and_keys::{self, READ_OPS};
use super::writes::{decode_write, put_write, write_len_hint};
use super::{
    DecodeError, OP_COLLECTION_READ, OP_DBSIZE, OP_ECHO, OP_EXEC, OP_EXISTS, OP_GET, OP_MGET,
    OP_PING, OP_STRLEN, OP_TTL, OP_WATCHPOINT,
};
use crate::command::{Command, QueuedCommand, ReadCommand, TtlForm};
use keel_redis_types::wire::{put_bytes, Reader};

pub(super) fn queued_len_hint(command: &QueuedCommand) -> usize {
    match command {
        QueuedCommand::Write(write) => write_len_hint(write),
        QueuedCommand::Read(
            ReadCommand::Get { key } | ReadCommand::StrLen { key } | ReadCommand::Type { key },
        ) => 1 + field_len(key),
        QueuedCommand::Read(ReadCommand::MGet { keys } | ReadCommand::Exists { keys }) => {
            5 + keys.iter().map(field_len).sum::<usize>()
        }
        QueuedCommand::Read(
            ReadCommand::DbSize | ReadCommand::RandomKey | ReadCommand::WatchPoint,
        )
        | QueuedCommand::Ping => 1,
        QueuedCommand::Read(ReadCommand::GetRange { key, .. }) => 17 + field_len(key),
        QueuedCommand::Read(ReadCommand::GetBit { key, .. }) => 9 + field_len(key),
        QueuedCommand::Read(ReadCommand::BitCount { key, .. }) => 18 + field_len(key),
        QueuedCommand::Read(ReadCommand::Lcs { key1, key2, .. }) => {
            10 + field_len(key1) + field_len(key2)
        }
        QueuedCommand::Read(ReadCommand::Keys { pattern }) => 1 + field_len(pattern),
        QueuedCommand::Read(ReadCommand::Scan(scan)) => {
            15 + scan.pattern.as_ref().map_or(0, field_len)
        }
        QueuedCommand::Read(ReadCommand::Ttl { key, .. }) => 2 + field_len(key),
        QueuedCommand::Read(ReadCommand::Collection(typed)) => {
            5 + typed.args.iter().map(field_len).sum::<usize>()
        }
        QueuedCommand::Echo(message) => 1 + field_len(message),
        QueuedCommand::Select(_) => 5,
    }
}

/// A queued command's op and body (inside an EXEC).
pub(super) fn put_queued(out: &mut Vec<u8>, command: &QueuedCommand) {
    match command {
        QueuedCommand::Write(write) => put_write(out, write),
        QueuedCommand::Read(ReadCommand::Get { key }) => {
            out.put_u8(OP_GET);
            put_bytes(out, key);
        }
        QueuedCommand::Read(ReadCommand::MGet { keys }) => {
            out.put_u8(OP_MGET);
            put_list(out, keys);
        }
        QueuedCommand::Read(ReadCommand::Exists { keys }) => {
            out.put_u8(OP_EXISTS);
            put_list(out, keys);
        }
        QueuedCommand::Read(ReadCommand::StrLen { key }) => {
            out.put_u8(OP_STRLEN);
            put_bytes(out, key);
        }
        QueuedCommand::Read(ReadCommand::DbSize) => out.put_u8(OP_DBSIZE),
        QueuedCommand::Read(ReadCommand::WatchPoint) => out.put_u8(OP_WATCHPOINT),
        QueuedCommand::Read(ReadCommand::Ttl { key, form }) => {
            out.put_u8(OP_TTL);
            out.put_u8(match form {
                TtlForm::RemainingSeconds => 0,
                TtlForm::RemainingMs => 1,
                TtlForm::AtSeconds => 2,
                TtlForm::AtMs => 3,
            });
            put_bytes(out, key);
        }
        QueuedCommand::Read(
            read @ (ReadCommand::GetRange { .. }
            | ReadCommand::GetBit { .. }
            | ReadCommand::BitCount { .. }
            | ReadCommand::Lcs { .. }
            | ReadCommand::Type { .. }
            | ReadCommand::RandomKey
            | ReadCommand::Keys { .. }
            | ReadCommand::Scan(_)),
        ) => strings_and_keys::put_read(out, read),
        QueuedCommand::Read(ReadCommand::Collection(typed)) => {
            out.put_u8(OP_COLLECTION_READ);
            put_list(out, &typed.args);
        }
        QueuedCommand::Ping => out.put_u8(OP_PING),
        QueuedCommand::Select(db) => {
            out.put_u8(super::OP_SELECT);
            out.put_u32_le(*db);
        }
        QueuedCommand::Echo(message) => {
            out.put_u8(OP_ECHO);
            put_bytes(out, message);
        }
    }
}

pub(super) fn decode_queued(r: &mut Reader) -> Result<QueuedCommand, DecodeError> {
    let op = r.u8().ok_or(DecodeError::Truncated(r.position()))?;
    Ok(match op {
        OP_EXEC => return Err(DecodeError::NestedExec),
        OP_GET => QueuedCommand::Read(ReadCommand::Get { key: bytes(r)? }),
        OP_MGET => QueuedCommand::Read(ReadCommand::MGet { keys: list(r)? }),
        OP_EXISTS => QueuedCommand::Read(ReadCommand::Exists { keys: list(r)? }),
        OP_STRLEN => QueuedCommand::Read(ReadCommand::StrLen { key: bytes(r)? }),
        OP_DBSIZE => QueuedCommand::Read(ReadCommand::DbSize),
        OP_WATCHPOINT => QueuedCommand::Read(ReadCommand::WatchPoint),
        OP_TTL => {
            let form = match u8_field(r)? {
                0 => TtlForm::RemainingSeconds,
                1 => TtlForm::RemainingMs,
                2 => TtlForm::AtSeconds,
                3 => TtlForm::AtMs,
                other => return Err(DecodeError::UnknownCode("TTL form", other)),
            };
            QueuedCommand::Read(ReadCommand::Ttl {
                key: bytes(r)?,
                form,
            })
        }
        OP_PING => QueuedCommand::Ping,
        OP_ECHO => QueuedCommand::Echo(bytes(r)?),
        super::OP_SELECT => QueuedCommand::Select(super::db_field(r)?),
        OP_COLLECTION_READ => match Command::parse(&list(r)?) {
            Ok(Command::Read(read @ ReadCommand::Collection(_))) => QueuedCommand::Read(read),
            _ => return Err(DecodeError::InvalidArguments(OP_COLLECTION_READ)),
        },
        read if READ_OPS.contains(&read) => {
            QueuedCommand::Read(strings_and_keys::decode_read(read, r)?)
        }
        write => QueuedCommand::Write(decode_write(write, r)?),
    })
}
