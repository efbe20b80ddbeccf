//! A value's body in a snapshot (format 5, `snapshot.rs`), after its kind tag:
//!
//! ```text
//! kind 0 string  bytes value
//! kind 1 list    count n >= 1 (u32), n x bytes element, head first
//! kind 2 hash    count n >= 1 (u32), n x (bytes field, bytes value), fields strictly ascending
//! kind 3 set     count n >= 1 (u32), n x bytes member, strictly ascending
//! kind 4 zset    count n >= 1 (u32), n x (bytes member, score u64: the f64's bits, never NaN
//!                nor negative zero), members strictly ascending
//! ```
//!
//! `bytes` is a `u32` length then that many bytes, each at most `STRING_BYTES_MAX`. A collection
//! is never empty (an empty one is no key). Ascending orders make the encoding a function of the
//! content alone, the same on every replica; decoding checks them, so a hash or set cannot hold a
//! field or member twice.

use std::sync::Arc;

use bytes::{BufMut, Bytes};

use super::{Collection, Hash, List, Score, Set, ZSet};
use crate::command::STRING_BYTES_MAX;
use crate::kind::Kind;
use crate::state_machine::snapshot::SnapshotError;
use crate::state_machine::value::{CollectionValue, Value};
use crate::state_machine::wire::{put_bytes, Reader};

/// Smallest encoding of one `bytes` field (an empty one): its length.
const BYTES_FIELD_MIN: usize = 4;

fn put_count(out: &mut Vec<u8>, count: usize) {
    out.put_u32_le(u32::try_from(count).expect("a collection's size fits the format"));
}

pub(crate) fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Str(bytes) => put_bytes(out, bytes),
        Value::Collection(c) => encode_collection(out, c),
    }
}

fn encode_collection(out: &mut Vec<u8>, collection: &CollectionValue) {
    match collection {
        CollectionValue::List(list) => {
            put_count(out, list.items().len());
            list.items().iter().for_each(|e| put_bytes(out, e));
        }
        CollectionValue::Hash(hash) => {
            let pairs = hash.sorted();
            put_count(out, pairs.len());
            for (field, value) in pairs {
                put_bytes(out, field);
                put_bytes(out, value);
            }
        }
        CollectionValue::Set(set) => {
            let members = set.sorted();
            put_count(out, members.len());
            members.into_iter().for_each(|m| put_bytes(out, m));
        }
        CollectionValue::ZSet(zset) => {
            let pairs = zset.by_member();
            put_count(out, pairs.len());
            for (member, score) in pairs {
                put_bytes(out, member);
                out.put_u64_le(score.get().to_bits());
            }
        }
    }
}

fn element(r: &mut Reader) -> Result<Bytes, SnapshotError> {
    let bytes = r
        .bytes()
        .ok_or(SnapshotError::Truncated("a collection's element"))?;
    if bytes.len() > STRING_BYTES_MAX {
        return Err(SnapshotError::Malformed("value over the size limit"));
    }
    // Its own allocation, not a slice of the whole snapshot (see `key.rs`).
    Ok(Bytes::copy_from_slice(&bytes))
}

/// Elements, each strictly above the one before.
fn ascending(previous: &mut Option<Bytes>, next: &Bytes) -> Result<(), SnapshotError> {
    if previous.as_ref().is_some_and(|p| p >= next) {
        return Err(SnapshotError::Malformed(
            "a hash's fields or a set's members not strictly ascending",
        ));
    }
    *previous = Some(next.clone());
    Ok(())
}

pub(crate) fn decode_value(r: &mut Reader, kind: Kind) -> Result<Value, SnapshotError> {
    if kind == Kind::String {
        let bytes = element(r)?;
        return Ok(Value::Str(Arc::from(&bytes[..])));
    }
    let per_element = match kind {
        Kind::Hash => 2 * BYTES_FIELD_MIN,
        Kind::ZSet => BYTES_FIELD_MIN + 8,
        _ => BYTES_FIELD_MIN,
    };
    let count = r
        .count(per_element)
        .ok_or(SnapshotError::Truncated("a collection's size"))?;
    if count == 0 {
        return Err(SnapshotError::Malformed("an empty collection"));
    }
    let mut previous = None;
    Ok(match kind {
        Kind::List => {
            let mut list = List::default();
            for _ in 0..count {
                list.push_back(element(r)?);
            }
            list.into_value()
        }
        Kind::Hash => {
            let mut hash = Hash::default();
            for _ in 0..count {
                let field = element(r)?;
                ascending(&mut previous, &field)?;
                hash.insert(field, element(r)?);
            }
            hash.into_value()
        }
        Kind::Set => {
            let mut set = Set::default();
            for _ in 0..count {
                let member = element(r)?;
                ascending(&mut previous, &member)?;
                set.insert(member);
            }
            set.into_value()
        }
        Kind::ZSet => {
            let mut zset = ZSet::default();
            for _ in 0..count {
                let member = element(r)?;
                ascending(&mut previous, &member)?;
                let bits = r.u64().ok_or(SnapshotError::Truncated("a score"))?;
                let score = Score::new(f64::from_bits(bits))
                    .filter(|s| s.get().to_bits() == bits)
                    .ok_or(SnapshotError::Malformed(
                        "a score that is NaN or negative zero",
                    ))?;
                zset.insert(member, score);
            }
            zset.into_value()
        }
        Kind::String => unreachable!("handled above"),
    })
}
