//! The fields every op's body is built from: `bytes` fields and lists of them, counts, `u8`
//! codes and flags, each decoder failing with [`DecodeError`] where the input ends early or holds a
//! code this build does not know. Apart from the ops that use them so that the format's building
//! blocks, and how strictly they are read, can be checked in one place.

use bytes::{BufMut, Bytes};

use super::{DecodeError, BYTES_FIELD_MIN};
use keel_redis_types::wire::{put_bytes, Reader};

pub(super) fn field_len(b: &Bytes) -> usize {
    b.len() + BYTES_FIELD_MIN
}

pub(super) fn put_list(out: &mut Vec<u8>, items: &[Bytes]) {
    out.put_u32_le(count(items.len()));
    for item in items {
        put_bytes(out, item);
    }
}

pub(super) fn list(r: &mut Reader) -> Result<Vec<Bytes>, DecodeError> {
    let n = list_count(r, BYTES_FIELD_MIN)?;
    (0..n).map(|_| bytes(r)).collect()
}

pub(super) fn count(n: usize) -> u32 {
    u32::try_from(n).expect("argument counts are bounded by the request limits")
}

pub(super) fn u8_field(r: &mut Reader) -> Result<u8, DecodeError> {
    r.u8().ok_or(DecodeError::Truncated(r.position()))
}

/// A `u8` that is 0 (false) or 1 (true).
pub(super) fn flag(r: &mut Reader, what: &'static str) -> Result<bool, DecodeError> {
    match u8_field(r)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(DecodeError::UnknownCode(what, other)),
    }
}

/// A `bytes` field; failing means the input ended early.
pub(super) fn bytes(r: &mut Reader) -> Result<Bytes, DecodeError> {
    r.bytes().ok_or(DecodeError::Truncated(r.position()))
}

pub(super) fn list_count(r: &mut Reader, item_bytes_min: usize) -> Result<usize, DecodeError> {
    match r.count(item_bytes_min) {
        None => Err(DecodeError::Truncated(r.position())),
        Some(0) => Err(DecodeError::EmptyList),
        Some(n) => Ok(n),
    }
}
