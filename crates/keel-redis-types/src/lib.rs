//! keel-redis-types: Redis's data types as keel replicates them, one module per family:
//! [`list`], [`hash`], [`set`], [`zset`], [`stream`] (HyperLogLog and the rest join as families of
//! their own). Each family holds its value's structure, the content hash it keeps up to date as
//! it changes (its share of the state digest), its body in a snapshot, and the operations
//! commands perform on one value.
//!
//! What is not here: keys. Which key holds which value, WRONGTYPE, deadlines, versions, the
//! digest over the whole keyspace, parsing and replies are keel-redis's; it looks a key up, then
//! calls into a family with `&mut` the value. So a family is a unit a reader holds in their head,
//! and testable alone.
//!
//! Everything here is part of the replicated format: a content hash or an encoding that changed
//! would make replicas built from different versions disagree, so each is pinned by tests.

/// `Family`'s `len`, `content_hash` and `counted_bytes` for a value whose elements are in field
/// `$elements`, whose element bytes are counted in `$bytes` and whose content hash is in `hash`.
macro_rules! family_counts {
    ($elements:ident, $bytes:ident) => {
        fn len(&self) -> usize {
            self.$elements.len()
        }

        fn content_hash(&self) -> u64 {
            self.hash
        }

        fn counted_bytes(&self) -> u64 {
            self.$bytes + self.$elements.len() as u64 * $crate::ELEMENT_OVERHEAD_BYTES
        }
    };
}

pub mod hash;
pub mod list;
pub mod set;
pub mod siphash;
pub mod stream;
pub mod wire;
pub mod zset;

use bytes::{BufMut, Bytes};

use siphash::keyed;
use wire::Reader;

/// Largest key, value or element the state machine stores (APPEND cannot grow a value past it).
/// A constant, not a setting: the outcome of a write must be the same on every replica.
pub const STRING_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What each element of a collection is counted as taking beyond its bytes (the memory count):
/// its slot and allocation.
pub const ELEMENT_OVERHEAD_BYTES: u64 = 32;

/// The SipHash key of [`element_hash`]: the bytes of `"keel-kv element1"`. Part of the
/// replicated format.
const ELEMENT_KEY: [u8; 16] = *b"keel-kv element1";

/// One element's hash inside a collection's content hash: SipHash-2-4 under `ELEMENT_KEY` over
/// `role u8 || len(first) as u64 LE || first || second`: a list element or set member is
/// `(role, element, "")`, a hash field `(role, field, value)`, a sorted set's member `(role,
/// member, score's f64 bits LE)`. The role (1 list, 2 hash, 3 set, 5 sorted set) keeps the kinds'
/// elements apart; role 4 is SPOP's draw ([`set::Set::pop_least_hashed`]), never part of the
/// digest.
pub fn element_hash(role: u8, first: &[u8], second: &[u8]) -> u64 {
    let mut hasher = keyed(&ELEMENT_KEY);
    hasher.write(&[role]);
    hasher.write(&(first.len() as u64).to_le_bytes());
    hasher.write(first);
    hasher.write(second);
    hasher.finish()
}

/// Redis's index convention for LRANGE, LTRIM, ZRANGE, ...: `start` and `stop` inclusive,
/// negative from the end; the positions they name within a sequence of `len`, None if empty.
pub fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

/// A single position, negative from the end; None if outside a sequence of `len`.
pub fn index_of(index: i64, len: usize) -> Option<usize> {
    let at = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&at).then_some(at as usize)
}

/// An operation that cannot be done on the value as it is; the command answers the error and
/// changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// HINCRBY on a field whose value is not an integer.
    HashValueNotInteger,
    /// HINCRBYFLOAT on a field whose value is not a number.
    HashValueNotFloat,
    /// An integer increment past `i64`.
    Overflow,
    /// A float increment to NaN or an infinity.
    NanOrInfinity,
    /// A sorted set's score that would be NaN (`+inf` plus `-inf`).
    ScoreNotANumber,
}

/// Why a value's body in a snapshot could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// The input ended inside the named part.
    Truncated(&'static str),
    /// The named rule of the format is broken.
    Malformed(&'static str),
}

/// Smallest encoding of one `bytes` field (an empty one): its length.
pub const BYTES_FIELD_MIN: usize = 4;

fn put_count(out: &mut Vec<u8>, count: usize) {
    out.put_u32_le(u32::try_from(count).expect("a collection's size fits the format"));
}

/// One `bytes` field of a body: at most [`STRING_BYTES_MAX`], copied into its own allocation
/// rather than kept as a slice of the whole snapshot (a slice would keep the snapshot alive).
pub fn read_element(r: &mut Reader) -> Result<Bytes, BodyError> {
    let bytes = r
        .bytes()
        .ok_or(BodyError::Truncated("a collection's element"))?;
    if bytes.len() > STRING_BYTES_MAX {
        return Err(BodyError::Malformed("value over the size limit"));
    }
    Ok(Bytes::copy_from_slice(&bytes))
}

/// Elements, each strictly above the one before.
fn ascending(previous: &mut Option<Bytes>, next: &Bytes) -> Result<(), BodyError> {
    if previous.as_ref().is_some_and(|p| p >= next) {
        return Err(BodyError::Malformed(
            "a hash's fields or a set's members not strictly ascending",
        ));
    }
    *previous = Some(next.clone());
    Ok(())
}

/// The hash of the elements' hashes kept by every family, and what a value counts as taking.
pub trait Family: Clone + Default {
    /// The number of elements: the collection is no key when it is 0.
    fn len(&self) -> usize;
    /// No elements: no key holds an empty collection.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The content hash: the family's share of the digest, kept up to date as it changes.
    fn content_hash(&self) -> u64;
    /// Element bytes plus [`ELEMENT_OVERHEAD_BYTES`] per element.
    fn counted_bytes(&self) -> u64;
    /// The smallest encoding of one element in a body (sizes a count against the input left).
    const ELEMENT_BYTES_MIN: usize;
    /// The body after its count: the elements in the family's canonical order.
    fn encode_body(&self, out: &mut Vec<u8>);
    /// A body of `count` elements (the count already read and bounded); checks the canonical
    /// order, so a field or member cannot come twice.
    fn decode_body(r: &mut Reader, count: usize) -> Result<Self, BodyError>;
}

/// A family's whole body: its count, then its elements.
pub fn encode_body<F: Family>(out: &mut Vec<u8>, value: &F) {
    put_count(out, value.len());
    value.encode_body(out);
}
