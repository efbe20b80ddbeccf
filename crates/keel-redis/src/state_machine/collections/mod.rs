//! Lists, hashes, sets and sorted sets as keys hold them. The families' values and the
//! operations on one value are keel-redis-types'; here are the commands that look keys up and
//! run those operations (`list_commands.rs`, ...), and the one way every write changes a
//! collection ([`KvStateMachine::change`]), which keeps the digest, the memory count and the
//! key's version right and removes a collection left empty (as Redis does: an empty list is no
//! key). Collections are copied on write: snapshot views and replies share them.
//!
//! Each value keeps a content hash up to date as it changes, so a key's share of the digest
//! (`digest::collection_pair_hash`) costs O(1) hash work per element changed, not O(size):
//! a set's, a hash's and a sorted set's is the XOR of their elements' hashes (order does not
//! matter); a list's is a polynomial in its elements' hashes, so order does.

/// The [`Collection`] impl of a family's value held as `CollectionValue::$variant`.
macro_rules! collection_impl {
    ($type:ident, $variant:ident) => {
        impl Collection for $type {
            const KIND: Kind = Kind::$variant;

            fn of(value: &Value) -> Option<&Self> {
                match value {
                    Value::Collection(c) => match &**c {
                        CollectionValue::$variant(c) => Some(c),
                        _ => None,
                    },
                    Value::Str(_) => None,
                }
            }

            fn of_mut(value: &mut Value) -> Option<&mut Self> {
                let Value::Collection(shared) = value else {
                    return None;
                };
                // Checked before the copy on write: a command of another kind copies nothing.
                if !matches!(**shared, CollectionValue::$variant(_)) {
                    return None;
                }
                match Arc::make_mut(shared) {
                    CollectionValue::$variant(c) => Some(c),
                    _ => unreachable!("checked above"),
                }
            }

            fn into_value(self) -> Value {
                Value::Collection(Arc::new(CollectionValue::$variant(self)))
            }
        }
    };
}

mod blocking_pops;
mod blocking_reads;
mod encoding;
mod hash_commands;
mod list_commands;
mod set_commands;
mod sort;
mod stream_commands;
mod stream_reads;
mod zset_commands;

pub(crate) use encoding::{decode_value, encode_value};
pub use sort::SORT_RESULT_BYTES_MAX;

pub(crate) use keel_redis_types::hash::Hash;
pub(crate) use keel_redis_types::list::List;
pub(crate) use keel_redis_types::set::Set;
pub(crate) use keel_redis_types::stream::Stream;
pub(crate) use keel_redis_types::zset::{Score, ZSet};
pub(crate) use keel_redis_types::Family;
use keel_redis_types::STRING_BYTES_MAX;

use std::sync::Arc;

use bytes::Bytes;

use super::digest::{collection_pair_hash, expiry_hash};
use super::execute::WriteAnswer;
use super::map::PAIR_OVERHEAD_BYTES;
use super::value::{CollectionValue, Stored, Value};
use super::{KvStateMachine, WriteError, WriteReply};
use crate::command::blocking::PopShape;
use crate::command::{CollectionRead, CollectionWrite, ObjectQuery, StreamWrite, ZSetWrite};
use crate::kind::Kind;
use keel_resp::Reply;

/// A list, hash, set or sorted set as a key holds it: a family's value (`keel_redis_types`)
/// inside a [`Value`], as [`KvStateMachine::change`] and the snapshot code handle them.
pub(crate) trait Collection: Family {
    const KIND: Kind;
    fn of(value: &Value) -> Option<&Self>;
    /// The collection to change, copied first if something shares it (a snapshot view, COPY).
    fn of_mut(value: &mut Value) -> Option<&mut Self>;
    fn into_value(self) -> Value;
}

collection_impl!(List, List);
collection_impl!(Hash, Hash);
collection_impl!(Set, Set);
collection_impl!(ZSet, ZSet);
collection_impl!(Stream, Stream);

/// Whether a client may wait for a `C` to fill (a list or a sorted set: the blocking pops').
fn fills_waiters<C: Collection>() -> bool {
    matches!(C::KIND, Kind::List | Kind::ZSet)
}

/// The key's share of the digest for a collection.
pub(crate) fn pair_hash_of<C: Collection>(key: &[u8], collection: &C) -> u64 {
    collection_pair_hash(
        key,
        C::KIND.tag(),
        collection.len() as u64,
        collection.content_hash(),
    )
}

/// The key's share of the digest for any value: strings as they always were.
pub(crate) fn value_pair_hash(key: &[u8], value: &Value) -> u64 {
    match value {
        Value::Str(bytes) => super::digest::pair_hash(key, bytes),
        Value::Collection(c) => match &**c {
            CollectionValue::List(list) => pair_hash_of(key, list),
            CollectionValue::Hash(hash) => pair_hash_of(key, hash),
            CollectionValue::Set(set) => pair_hash_of(key, set),
            CollectionValue::ZSet(zset) => pair_hash_of(key, zset),
            CollectionValue::Stream(stream) => pair_hash_of(key, stream),
        },
    }
}

impl KvStateMachine {
    /// The live value of `key` if it is a `C`; Ok(None) if there is no such key; WRONGTYPE if it
    /// holds another kind.
    pub(crate) fn collection<C: Collection>(&self, key: &[u8]) -> Result<Option<&C>, WriteError> {
        match self.live(key) {
            None => Ok(None),
            Some(stored) => C::of(&stored.value).map(Some).ok_or(WriteError::WrongType),
        }
    }

    /// Runs `f` on the `C` under `key` (an empty one if there is no such key and `create`; if
    /// not `create`, `f` does not run and the answer is Ok(None)), then books the change: the
    /// digest, the counted bytes, the version (at this index, if the content changed), and the
    /// key removed (with its tombstone) if `f` left it empty. WRONGTYPE if `key` holds another
    /// kind. An expired entry is removed first, as by every write.
    pub(crate) fn change<C: Collection, R>(
        &mut self,
        key: &[u8],
        create: bool,
        f: impl FnOnce(&mut C) -> R,
    ) -> Result<Option<R>, WriteError> {
        self.expire_if_due(key);
        let index = self.applied_index;
        let Some(stored) = self.cur_mut().data.get_mut(key) else {
            if !create {
                return Ok(None);
            }
            let mut fresh = C::default();
            let result = f(&mut fresh);
            if !fresh.is_empty() {
                if fills_waiters::<C>() {
                    self.note_filled(key);
                }
                let hash = pair_hash_of(key, &fresh);
                self.cur_mut().digest ^= hash;
                self.cur_mut().tombstones.forget(key);
                self.cur_mut()
                    .data
                    .insert_new(key, Stored::holding(fresh.into_value(), hash, 0, index));
            }
            return Ok(Some(result));
        };
        let old_hash = stored.pair_hash;
        let Some(collection) = C::of_mut(&mut stored.value) else {
            return Err(WriteError::WrongType);
        };
        let old_bytes = collection.counted_bytes();
        let result = f(collection);
        let (emptied, new_bytes) = (collection.is_empty(), collection.counted_bytes());
        let new_hash = pair_hash_of(key, &*collection);
        if new_hash != old_hash {
            stored.pair_hash = new_hash;
            stored.version = index;
            self.cur_mut().digest ^= old_hash ^ new_hash;
        }
        self.cur_mut()
            .data
            .value_resized(old_bytes as usize, new_bytes as usize);
        if emptied {
            self.remove_stored(key);
            self.cur_mut().tombstones.record(key, index);
        } else if new_bytes > old_bytes && fills_waiters::<C>() {
            self.note_filled(key);
        }
        Ok(Some(result))
    }

    /// The STORE commands' last step: `destination` becomes `result`, whatever it held, or is
    /// removed if `result` is empty (a change WATCH sees, if it existed); the result's size.
    pub(super) fn store_result<C: Collection>(
        &mut self,
        destination: &[u8],
        result: C,
    ) -> WriteAnswer {
        let size = result.len();
        self.expire_if_due(destination);
        self.remove_live(destination);
        if size > 0 {
            self.put_value(destination, result.into_value(), 0);
        }
        WriteReply::Integer(size as i64).into()
    }

    /// Stores `value` (a whole collection, non-empty) under `key`, replacing whatever was
    /// there, with deadline `expire_at_ms` (0: none): the STORE commands, COPY and RENAME.
    pub(crate) fn put_value(&mut self, key: &[u8], value: Value, expire_at_ms: u64) {
        let collection = match &value {
            Value::Str(bytes) => {
                let bytes = Arc::clone(bytes);
                return self.put(key, &bytes, expire_at_ms);
            }
            Value::Collection(collection) => collection,
        };
        if matches!(
            **collection,
            CollectionValue::List(_) | CollectionValue::ZSet(_) | CollectionValue::Stream(_)
        ) {
            self.note_filled(key);
        }
        if self.cur().data.get(key).is_some() {
            self.remove_stored(key);
        }
        let hash = value_pair_hash(key, &value);
        self.cur_mut().digest ^= hash ^ expiry_hash(key, expire_at_ms);
        if expire_at_ms != 0 {
            self.cur_mut().deadlines.insert(expire_at_ms, key);
        }
        self.cur_mut().tombstones.forget(key);
        let index = self.applied_index;
        self.cur_mut()
            .data
            .insert_new(key, Stored::holding(value, hash, expire_at_ms, index));
    }
}

impl KvStateMachine {
    /// Runs a write on a list, hash, set or sorted set.
    pub(in crate::state_machine) fn execute_collection(
        &mut self,
        command: &CollectionWrite,
    ) -> WriteAnswer {
        use CollectionWrite as W;
        if let Some(error) = command_too_large(command) {
            return error.into();
        }
        match command {
            W::Push {
                key,
                elements,
                end,
                existing_only,
            } => self.push(key, elements, *end, *existing_only),
            W::Pop { key, end, count } => self.pop(key, *end, *count),
            W::LSet {
                key,
                index,
                element,
            } => self.lset(key, *index, element),
            W::LRem {
                key,
                count,
                element,
            } => self.lrem(key, *count, element),
            W::LTrim { key, start, stop } => self.ltrim(key, *start, *stop),
            W::LInsert {
                key,
                before,
                pivot,
                element,
            } => self.linsert(key, *before, pivot, element),
            W::LMove {
                source,
                destination,
                from,
                to,
            } => self.lmove(source, destination, *from, *to),
            W::HSet { key, pairs, reply } => self.hset(key, pairs, *reply),
            W::HDel { key, fields } => self.hdel(key, fields),
            W::HIncrBy { key, field, delta } => self.hincrby(key, field, *delta),
            W::HIncrByFloat { key, field, delta } => self.hincrbyfloat(key, field, delta.0),
            W::SAdd { key, members } => self.sadd(key, members),
            W::SRem { key, members } => self.srem(key, members),
            W::SMove {
                source,
                destination,
                member,
            } => self.smove(source, destination, member),
            W::SStore {
                algebra,
                destination,
                keys,
            } => self.sstore(*algebra, destination, keys),
            W::SPop { key, count } => self.spop(key, *count),
            W::ZSet(write) => self.execute_zset(write),
            W::Stream(write) => self.execute_stream(write),
            W::SortStore { args, destination } => self.sort_store(args, destination),
            W::BlockingPop(pop) => self.blocking_pop(pop),
        }
    }

    /// Runs a read of a list, hash, set or sorted set.
    pub(crate) fn read_collection(&self, command: &CollectionRead) -> Reply {
        use CollectionRead as R;
        let bulk_or_null =
            |value: Option<&Bytes>| value.map_or(Reply::Null, |v| Reply::Bulk(v.clone()));
        let answer = match command {
            R::LLen { key } => self.llen(key),
            R::LRange { key, start, stop } => self.lrange(key, *start, *stop),
            R::LIndex { key, index } => self.lindex(key, *index),
            R::LPos(lpos) => self.lpos(lpos),
            R::HGet { key, field } => self.hash_field(key, field).map(bulk_or_null),
            R::HMGet { key, fields } => self.collection::<Hash>(key).map(|hash| {
                Reply::Array(
                    fields
                        .iter()
                        .map(|f| bulk_or_null(hash.and_then(|h| h.get(f))))
                        .collect(),
                )
            }),
            R::HLen { key } => self
                .collection::<Hash>(key)
                .map(|h| Reply::Integer(h.map_or(0, |h| h.len()) as i64)),
            R::HExists { key, field } => self
                .hash_field(key, field)
                .map(|v| Reply::Integer(i64::from(v.is_some()))),
            R::HStrLen { key, field } => self
                .hash_field(key, field)
                .map(|v| Reply::Integer(v.map_or(0, |v| v.len()) as i64)),
            R::HGetAll { key } => self.hash_pairs(key, true, true),
            R::HKeys { key } => self.hash_pairs(key, true, false),
            R::HVals { key } => self.hash_pairs(key, false, true),
            R::SMembers { key } => self.smembers(key),
            R::SIsMember { key, member } => self
                .sismember(key, member)
                .map(|is| Reply::Integer(i64::from(is))),
            R::SMIsMember { key, members } => self.collection::<Set>(key).map(|set| {
                Reply::Array(
                    members
                        .iter()
                        .map(|m| Reply::Integer(i64::from(set.is_some_and(|s| s.contains(m)))))
                        .collect(),
                )
            }),
            R::SCard { key } => self
                .collection::<Set>(key)
                .map(|s| Reply::Integer(s.map_or(0, |s| s.len()) as i64)),
            R::SAlgebra { algebra, keys } => self.set_algebra_reply(*algebra, keys),
            R::SInterCard { keys, limit } => self.sintercard(keys, *limit),
            R::SRandMember { key, count } => self.srandmember(key, *count),
            R::ZSet(read) => self.read_zset(read),
            R::Stream(read) => self.read_stream(read),
            R::Sort(args) => self.sort_reply(args),
            R::Object { key, query } => {
                Ok(self.live(key).map_or(Reply::Null, |stored| match query {
                    ObjectQuery::Encoding => Reply::bulk(stored.encoding_name()),
                    ObjectQuery::RefCount => Reply::Integer(1),
                }))
            }
            R::MemoryUsage { key } => Ok(self.live(key).map_or(Reply::Null, |stored| {
                Reply::Integer(
                    (key.len() as u64 + stored.counted_bytes() + PAIR_OVERHEAD_BYTES) as i64,
                )
            })),
        };
        answer.unwrap_or_else(|error| Reply::error(error.to_string()))
    }
}

/// Whether a stream write stores a key, field, value, group or consumer name over the size
/// bound.
fn stream_too_large(write: &StreamWrite) -> bool {
    let large = |b: &Bytes| b.len() > STRING_BYTES_MAX;
    match write {
        StreamWrite::Add { key, fields, .. } => large(key) || fields.iter().any(large),
        StreamWrite::GroupCreate { key, group, .. } => large(key) || large(group),
        StreamWrite::Consumer {
            consumer,
            create: true,
            ..
        }
        | StreamWrite::Claim { consumer, .. }
        | StreamWrite::AutoClaim { consumer, .. } => large(consumer),
        StreamWrite::ReadGroup(read) => read.group.as_ref().is_some_and(|(_, c)| large(c)),
        _ => false,
    }
}

/// The first key or element over the size bound, as for strings.
fn command_too_large(command: &CollectionWrite) -> Option<WriteError> {
    use CollectionWrite as W;
    let large = |b: &Bytes| b.len() > STRING_BYTES_MAX;
    let any = match command {
        W::Push { key, elements, .. } => large(key) || elements.iter().any(large),
        W::LSet { key, element, .. } | W::LInsert { key, element, .. } => {
            large(key) || large(element)
        }
        W::LMove { destination, .. } | W::SMove { destination, .. } => large(destination),
        W::HSet { key, pairs, .. } => large(key) || pairs.iter().any(|(f, v)| large(f) || large(v)),
        W::HIncrBy { key, field, .. } | W::HIncrByFloat { key, field, .. } => {
            large(key) || large(field)
        }
        W::SAdd { key, members } => large(key) || members.iter().any(large),
        W::SStore { destination, .. } | W::SortStore { destination, .. } => large(destination),
        W::ZSet(ZSetWrite::Add { key, pairs, .. }) => {
            large(key) || pairs.iter().any(|(_, m)| large(m))
        }
        W::ZSet(ZSetWrite::IncrBy { key, member, .. }) => large(key) || large(member),
        W::BlockingPop(pop) => match &pop.shape {
            PopShape::MoveTo { destination, .. } => large(destination),
            _ => false,
        },
        W::Stream(write) => stream_too_large(write),
        W::Pop { .. }
        | W::LRem { .. }
        | W::LTrim { .. }
        | W::HDel { .. }
        | W::SRem { .. }
        | W::SPop { .. }
        | W::ZSet(_) => false,
    };
    any.then_some(WriteError::StringTooLarge)
}
