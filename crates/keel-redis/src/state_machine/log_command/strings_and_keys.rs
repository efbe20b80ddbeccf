//! The bodies of the string and keyspace ops: writes 64 to 69 and the reads 96 to 103 an EXEC
//! carries. Their format is in the table of `log_command.rs`; decoding is as strict as for the
//! other ops (a flag is 0 or 1, an unused field is 0), so an entry decodes to exactly one command
//! and encodes back to the same bytes.

use bytes::BufMut;

use super::fields::{bytes, flag, u8_field};
use super::{DecodeError, Reader};
use crate::command::{
    BitRange, BitUnit, FloatBits, LcsForm, ReadCommand, ScanArgs, TypeFilter, WriteCommand,
};
use crate::kind::Kind;
use keel_redis_types::wire::put_bytes;

const OP_INCRBYFLOAT: u8 = 64;
const OP_SETRANGE: u8 = 65;
const OP_SETBIT: u8 = 66;
const OP_RENAME: u8 = 67;
const OP_RENAMENX: u8 = 68;
const OP_COPY: u8 = 69;
const OP_FLUSHDB: u8 = 70;
const OP_SWAPDB: u8 = 71;
const OP_MOVE: u8 = 72;
const OP_COPY_DB: u8 = 73;
/// The codes reserved for writes: a code in this range that is not an op above is unknown.
pub(super) const WRITE_OPS: std::ops::RangeInclusive<u8> = 64..=95;

const OP_GETRANGE: u8 = 96;
const OP_GETBIT: u8 = 97;
const OP_BITCOUNT: u8 = 98;
const OP_LCS: u8 = 99;
const OP_TYPE: u8 = 100;
const OP_RANDOMKEY: u8 = 101;
const OP_KEYS: u8 = 102;
const OP_SCAN: u8 = 103;
/// The codes reserved for reads inside an EXEC.
pub(super) const READ_OPS: std::ops::RangeInclusive<u8> = 96..=127;

/// A write of this module's ops: its op and body.
pub(super) fn put_write(out: &mut Vec<u8>, command: &WriteCommand) {
    match command {
        WriteCommand::IncrByFloat { key, delta } => {
            out.put_u8(OP_INCRBYFLOAT);
            put_bytes(out, key);
            out.put_u64_le(delta.0.to_bits());
        }
        WriteCommand::SetRange { key, offset, value } => {
            out.put_u8(OP_SETRANGE);
            put_bytes(out, key);
            out.put_u64_le(*offset);
            put_bytes(out, value);
        }
        WriteCommand::SetBit { key, offset, bit } => {
            out.put_u8(OP_SETBIT);
            put_bytes(out, key);
            out.put_u64_le(*offset);
            out.put_u8(u8::from(*bit));
        }
        WriteCommand::Rename {
            key,
            new_key,
            only_if_absent,
        } => {
            out.put_u8(if *only_if_absent {
                OP_RENAMENX
            } else {
                OP_RENAME
            });
            put_bytes(out, key);
            put_bytes(out, new_key);
        }
        WriteCommand::Copy {
            source,
            destination,
            replace,
            db,
        } => {
            out.put_u8(if db.is_some() { OP_COPY_DB } else { OP_COPY });
            out.put_u8(u8::from(*replace));
            if let Some(db) = db {
                out.put_u32_le(*db);
            }
            put_bytes(out, source);
            put_bytes(out, destination);
        }
        WriteCommand::FlushDb => out.put_u8(OP_FLUSHDB),
        WriteCommand::SwapDb { a, b } => {
            out.put_u8(OP_SWAPDB);
            out.put_u32_le(*a);
            out.put_u32_le(*b);
        }
        WriteCommand::Move { key, db } => {
            out.put_u8(OP_MOVE);
            out.put_u32_le(*db);
            put_bytes(out, key);
        }
        other => unreachable!("{other:?} is encoded by log_command.rs"),
    }
}

/// A write op in [`WRITE_OPS`] and its body.
pub(super) fn decode_write(op: u8, r: &mut Reader) -> Result<WriteCommand, DecodeError> {
    Ok(match op {
        OP_INCRBYFLOAT => WriteCommand::IncrByFloat {
            key: bytes(r)?,
            delta: FloatBits(f64::from_bits(u64_field(r)?)),
        },
        OP_SETRANGE => WriteCommand::SetRange {
            key: bytes(r)?,
            offset: u64_field(r)?,
            value: bytes(r)?,
        },
        OP_SETBIT => WriteCommand::SetBit {
            key: bytes(r)?,
            offset: u64_field(r)?,
            bit: flag(r, "SETBIT bit")?,
        },
        OP_RENAME | OP_RENAMENX => WriteCommand::Rename {
            key: bytes(r)?,
            new_key: bytes(r)?,
            only_if_absent: op == OP_RENAMENX,
        },
        OP_COPY | OP_COPY_DB => {
            let replace = flag(r, "COPY REPLACE flag")?;
            let db = match op {
                OP_COPY_DB => Some(super::db_field(r)?),
                _ => None,
            };
            WriteCommand::Copy {
                source: bytes(r)?,
                destination: bytes(r)?,
                replace,
                db,
            }
        }
        OP_FLUSHDB => WriteCommand::FlushDb,
        OP_SWAPDB => WriteCommand::SwapDb {
            a: super::db_field(r)?,
            b: super::db_field(r)?,
        },
        OP_MOVE => {
            let db = super::db_field(r)?;
            WriteCommand::Move { key: bytes(r)?, db }
        }
        other => return Err(DecodeError::UnknownOp(other)),
    })
}

/// A read of this module's ops (inside an EXEC): its op and body.
#[expect(clippy::too_many_lines)]
pub(super) fn put_read(out: &mut Vec<u8>, command: &ReadCommand) {
    match command {
        ReadCommand::GetRange { key, start, end } => {
            out.put_u8(OP_GETRANGE);
            put_bytes(out, key);
            out.put_i64_le(*start);
            out.put_i64_le(*end);
        }
        ReadCommand::GetBit { key, offset } => {
            out.put_u8(OP_GETBIT);
            put_bytes(out, key);
            out.put_u64_le(*offset);
        }
        ReadCommand::BitCount { key, range } => {
            out.put_u8(OP_BITCOUNT);
            let (unit, start, end) = match range {
                None => (0, 0, 0),
                Some(BitRange {
                    start,
                    end,
                    unit: BitUnit::Byte,
                }) => (1, *start, *end),
                Some(BitRange {
                    start,
                    end,
                    unit: BitUnit::Bit,
                }) => (2, *start, *end),
            };
            out.put_u8(unit);
            out.put_i64_le(start);
            out.put_i64_le(end);
            put_bytes(out, key);
        }
        ReadCommand::Lcs { key1, key2, form } => {
            out.put_u8(OP_LCS);
            let (code, min_match_len) = match form {
                LcsForm::Text => (0, 0),
                LcsForm::Length => (1, 0),
                LcsForm::Ranges {
                    min_match_len,
                    with_match_len: false,
                } => (2, *min_match_len),
                LcsForm::Ranges {
                    min_match_len,
                    with_match_len: true,
                } => (3, *min_match_len),
            };
            out.put_u8(code);
            out.put_u64_le(min_match_len);
            put_bytes(out, key1);
            put_bytes(out, key2);
        }
        ReadCommand::Type { key } => {
            out.put_u8(OP_TYPE);
            put_bytes(out, key);
        }
        ReadCommand::RandomKey => out.put_u8(OP_RANDOMKEY),
        ReadCommand::Keys { pattern } => {
            out.put_u8(OP_KEYS);
            put_bytes(out, pattern);
        }
        ReadCommand::Scan(scan) => {
            out.put_u8(OP_SCAN);
            out.put_u64_le(scan.cursor);
            out.put_u32_le(scan.count);
            out.put_u8(match scan.types {
                TypeFilter::Nothing => 0,
                TypeFilter::Any => 1,
                TypeFilter::Only(kind) => 2 + kind.tag(),
            });
            out.put_u8(u8::from(scan.pattern.is_some()));
            if let Some(pattern) = &scan.pattern {
                put_bytes(out, pattern);
            }
        }
        other => unreachable!("{other:?} is encoded by log_command.rs"),
    }
}

/// A read op in [`READ_OPS`] and its body.
#[expect(clippy::too_many_lines)]
pub(super) fn decode_read(op: u8, r: &mut Reader) -> Result<ReadCommand, DecodeError> {
    Ok(match op {
        OP_GETRANGE => ReadCommand::GetRange {
            key: bytes(r)?,
            start: i64_field(r)?,
            end: i64_field(r)?,
        },
        OP_GETBIT => ReadCommand::GetBit {
            key: bytes(r)?,
            offset: u64_field(r)?,
        },
        OP_BITCOUNT => {
            let (unit, start, end) = (u8_field(r)?, i64_field(r)?, i64_field(r)?);
            let range = |unit| Some(BitRange { start, end, unit });
            let range = match (unit, start, end) {
                (0, 0, 0) => None,
                (1, ..) => range(BitUnit::Byte),
                (2, ..) => range(BitUnit::Bit),
                _ => return Err(DecodeError::UnknownCode("BITCOUNT range", unit)),
            };
            ReadCommand::BitCount {
                key: bytes(r)?,
                range,
            }
        }
        OP_LCS => {
            let (code, min_match_len) = (u8_field(r)?, u64_field(r)?);
            let form = match (code, min_match_len) {
                (0, 0) => LcsForm::Text,
                (1, 0) => LcsForm::Length,
                (2 | 3, min_match_len) => LcsForm::Ranges {
                    min_match_len,
                    with_match_len: code == 3,
                },
                _ => return Err(DecodeError::UnknownCode("LCS form", code)),
            };
            ReadCommand::Lcs {
                key1: bytes(r)?,
                key2: bytes(r)?,
                form,
            }
        }
        OP_TYPE => ReadCommand::Type { key: bytes(r)? },
        OP_RANDOMKEY => ReadCommand::RandomKey,
        OP_KEYS => ReadCommand::Keys { pattern: bytes(r)? },
        OP_SCAN => {
            let cursor = u64_field(r)?;
            let count = r.u32().ok_or(DecodeError::Truncated(r.position()))?;
            if count == 0 {
                return Err(DecodeError::UnknownCode("SCAN count", 0));
            }
            let types = match u8_field(r)? {
                0 => TypeFilter::Nothing,
                1 => TypeFilter::Any,
                code => TypeFilter::Only(
                    code.checked_sub(2)
                        .and_then(Kind::from_tag)
                        .ok_or(DecodeError::UnknownCode("SCAN type", code))?,
                ),
            };
            let pattern = if flag(r, "SCAN pattern flag")? {
                Some(bytes(r)?)
            } else {
                None
            };
            ReadCommand::Scan(ScanArgs {
                cursor,
                pattern,
                count,
                types,
            })
        }
        other => return Err(DecodeError::UnknownOp(other)),
    })
}

fn u64_field(r: &mut Reader) -> Result<u64, DecodeError> {
    r.u64().ok_or(DecodeError::Truncated(r.position()))
}

fn i64_field(r: &mut Reader) -> Result<i64, DecodeError> {
    r.i64().ok_or(DecodeError::Truncated(r.position()))
}
