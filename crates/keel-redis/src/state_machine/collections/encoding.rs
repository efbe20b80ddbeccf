//! A value's body in a snapshot (formats 5 and 6, `snapshot.rs`), after its kind tag:
//!
//! ```text
//! kind 0 string  bytes value
//! kind 1 list    count n >= 1 (u32), then the list's body    (keel_redis_types::list)
//! kind 2 hash    count n >= 1 (u32), then the hash's body    (keel_redis_types::hash)
//! kind 3 set     count n >= 1 (u32), then the set's body     (keel_redis_types::set)
//! kind 4 zset    count n >= 1 (u32), then the sorted set's body (keel_redis_types::zset)
//! kind 5 stream  count n >= 0 (u32: its entries), then the stream's body
//!                (keel_redis_types::stream; format 6 only)
//! ```
//!
//! `bytes` is a `u32` length then that many bytes, each at most `STRING_BYTES_MAX`. A collection
//! is never empty (an empty one is no key), except a stream, which is a key with no entries
//! too, as in Redis. Each family's body is in a canonical order (ascending
//! fields and members, a list head first), so the encoding is a function of the content alone,
//! the same on every replica; decoding checks the order, so a hash or set cannot hold a field or
//! member twice.

use std::sync::Arc;

use keel_redis_types::wire::{put_bytes, Reader};
use keel_redis_types::{encode_body, read_element, BodyError};

use super::{Collection, Hash, List, Set, Stream, ZSet};
use crate::kind::Kind;
use crate::state_machine::snapshot::SnapshotError;
use crate::state_machine::value::{CollectionValue, Value};

impl From<BodyError> for SnapshotError {
    fn from(error: BodyError) -> SnapshotError {
        match error {
            BodyError::Truncated(part) => SnapshotError::Truncated(part),
            BodyError::Malformed(rule) => SnapshotError::Malformed(rule),
        }
    }
}

pub(crate) fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Str(bytes) => put_bytes(out, bytes),
        Value::Collection(c) => match &**c {
            CollectionValue::List(list) => encode_body(out, list),
            CollectionValue::Hash(hash) => encode_body(out, hash),
            CollectionValue::Set(set) => encode_body(out, set),
            CollectionValue::ZSet(zset) => encode_body(out, zset),
            CollectionValue::Stream(stream) => encode_body(out, stream),
        },
    }
}

/// A collection's count and body.
fn decode<C: Collection>(r: &mut Reader) -> Result<Value, SnapshotError> {
    let count = r
        .count(C::ELEMENT_BYTES_MIN)
        .ok_or(SnapshotError::Truncated("a collection's size"))?;
    let value = C::decode_body(r, count)?;
    if value.is_empty() {
        return Err(SnapshotError::Malformed("an empty collection"));
    }
    Ok(value.into_value())
}

pub(crate) fn decode_value(r: &mut Reader, kind: Kind) -> Result<Value, SnapshotError> {
    match kind {
        Kind::String => {
            let bytes = read_element(r)?;
            Ok(Value::Str(Arc::from(&bytes[..])))
        }
        Kind::List => decode::<List>(r),
        Kind::Hash => decode::<Hash>(r),
        Kind::Set => decode::<Set>(r),
        Kind::ZSet => decode::<ZSet>(r),
        Kind::Stream => decode::<Stream>(r),
    }
}
