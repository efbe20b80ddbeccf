//! What a key holds ([`Value`]): a string, or a list, hash, set, sorted set or stream
//! (`collections/`),
//! and the bookkeeping kept beside it ([`Stored`]).
//!
//! Values are reference-counted and overwritten in place while no snapshot view or reply shares
//! them; collections are copied on write, so snapshot views and replies share them. A command
//! on another kind of value answers WRONGTYPE.

use std::sync::Arc;

use bytes::Bytes;

use super::collections::{Family, Hash, List, Set, Stream, ZSet};
use crate::kind::Kind;

/// A key's value. Collections are reference-counted and copied on write
/// ([`Arc::make_mut`]), as strings are shared: a snapshot view shares every value with the state
/// machine, and only a value written while the view is alive is copied. A collection sits behind
/// one pointer whatever its kind, so that a value takes 16 bytes, as a string alone did (the
/// pointer's niche tells the two variants apart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    Str(Arc<[u8]>),
    Collection(Arc<CollectionValue>),
}

/// A list, hash, set or sorted set, as a [`Value`] holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CollectionValue {
    List(List),
    Hash(Hash),
    Set(Set),
    ZSet(ZSet),
    Stream(Stream),
}

impl Value {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Value::Str(_) => Kind::String,
            Value::Collection(c) => match &**c {
                CollectionValue::List(_) => Kind::List,
                CollectionValue::Hash(_) => Kind::Hash,
                CollectionValue::Set(_) => Kind::Set,
                CollectionValue::ZSet(_) => Kind::ZSet,
                CollectionValue::Stream(_) => Kind::Stream,
            },
        }
    }

    /// The bytes the value is counted as taking (`map.rs`): a string's length, a collection's
    /// elements and their overhead.
    pub(crate) fn counted_bytes(&self) -> u64 {
        match self {
            Value::Str(bytes) => bytes.len() as u64,
            Value::Collection(c) => match &**c {
                CollectionValue::List(list) => list.counted_bytes(),
                CollectionValue::Hash(hash) => hash.counted_bytes(),
                CollectionValue::Set(set) => set.counted_bytes(),
                CollectionValue::ZSet(zset) => zset.counted_bytes(),
                CollectionValue::Stream(stream) => stream.counted_bytes(),
            },
        }
    }
}

/// A stored value with its pair hash (its share of the digest, so that replacing a large value
/// does not rehash the old one), its deadline and its version.
///
/// A string is an exact-size copy (see `key.rs` for why a copy), reference-counted so that a
/// snapshot view or a GET reply shares it instead of copying it. While nothing shares it, a value
/// of the same length is overwritten in place ([`super::KvStateMachine::put`]): the common
/// overwrite allocates and frees nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) value: Value,
    pub(crate) pair_hash: u64,
    /// When the key expires, in ms since the Unix epoch on the log's clock; 0: never.
    pub(crate) expire_at_ms: u64,
    /// The log index of the key's last change (value or deadline): what WATCH compares
    /// (`key_metadata.rs`).
    pub(crate) version: u64,
}

impl Stored {
    /// A string value.
    pub(crate) fn new(value: &[u8], pair_hash: u64, expire_at_ms: u64, version: u64) -> Stored {
        Stored::holding(
            Value::Str(Arc::from(value)),
            pair_hash,
            expire_at_ms,
            version,
        )
    }

    pub(crate) fn holding(value: Value, pair_hash: u64, expire_at_ms: u64, version: u64) -> Stored {
        Stored {
            value,
            pair_hash,
            expire_at_ms,
            version,
        }
    }

    /// Whether the key still exists at `now_ms` (a deadline at or before now has passed).
    pub(crate) fn alive_at(&self, now_ms: u64) -> bool {
        self.expire_at_ms == 0 || self.expire_at_ms > now_ms
    }

    pub(crate) fn kind(&self) -> Kind {
        self.value.kind()
    }

    /// The string value; None for a collection.
    pub(crate) fn string(&self) -> Option<&[u8]> {
        match &self.value {
            Value::Str(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// The string value for a reply, sharing it rather than copying it (a later write of the
    /// key then copies instead of overwriting in place while the reply is alive); None for a
    /// collection.
    pub(crate) fn shared_string(&self) -> Option<Bytes> {
        match &self.value {
            Value::Str(bytes) => Some(Bytes::from_owner(Arc::clone(bytes))),
            _ => None,
        }
    }

    pub(crate) fn counted_bytes(&self) -> u64 {
        self.value.counted_bytes()
    }

    /// OBJECT ENCODING: the encoding Redis 7.0 would use for this value at its default
    /// thresholds (keel has one representation per kind; the name says what Redis would do).
    pub(crate) fn encoding_name(&self) -> &'static str {
        const SMALL_ENTRIES: usize = 128;
        const SMALL_VALUE_BYTES: usize = 64;
        const INTSET_ENTRIES: usize = 512;
        const EMBSTR_BYTES: usize = 44;
        let small = |b: &Bytes| b.len() <= SMALL_VALUE_BYTES;
        let collection = match &self.value {
            Value::Str(bytes)
                if bytes.len() <= 20 && keel_resp::number::parse_i64(bytes).is_some() =>
            {
                return "int"
            }
            Value::Str(bytes) if bytes.len() <= EMBSTR_BYTES => return "embstr",
            Value::Str(_) => return "raw",
            Value::Collection(c) => &**c,
        };
        match collection {
            CollectionValue::List(list)
                if list.items().len() <= SMALL_ENTRIES && list.items().iter().all(small) =>
            {
                "listpack"
            }
            CollectionValue::List(_) => "quicklist",
            CollectionValue::Hash(hash)
                if hash.len() <= SMALL_ENTRIES
                    && hash.sorted().iter().all(|(f, v)| small(f) && small(v)) =>
            {
                "listpack"
            }
            CollectionValue::Hash(_) => "hashtable",
            CollectionValue::Set(set)
                if set.len() <= INTSET_ENTRIES
                    && set
                        .sorted()
                        .iter()
                        .all(|m| keel_resp::number::parse_i64(m).is_some()) =>
            {
                "intset"
            }
            CollectionValue::Set(_) => "hashtable",
            CollectionValue::ZSet(zset)
                if zset.len() <= SMALL_ENTRIES && zset.ascending().all(|(_, m)| small(m)) =>
            {
                "listpack"
            }
            CollectionValue::ZSet(_) => "skiplist",
            CollectionValue::Stream(_) => "stream",
        }
    }
}

#[cfg(test)]
mod tests {
    /// A stored value costs what a string alone did before collections: a collection's kind
    /// hides in the pointer's niche.
    #[test]
    fn a_value_is_as_small_as_a_string() {
        assert_eq!(std::mem::size_of::<super::Value>(), 16);
        assert_eq!(std::mem::size_of::<super::Stored>(), 40);
    }
}
