//! The keyspace commands: RENAME, RENAMENX and COPY (writes, run at their entry's index and time
//! as `execute.rs` describes), TYPE, RANDOMKEY, KEYS and SCAN (reads). All of them see only keys
//! that have not expired. RENAME and COPY carry the source's deadline to the destination; KEYS
//! answers in ascending byte order.
//!
//! ## SCAN
//!
//! The map is a hash table whose order differs between processes and changes as it grows
//! (`map.rs`), so a cursor cannot be a position in it. Keys are ordered instead by (scan hash, key
//! bytes), the scan hash being SipHash-2-4 of the key under a fixed key ([`scan_hash`]): the same
//! on every node and every build, so a cursor one node answered is good on any other. A cursor is
//! the hash to continue from: 0 starts a scan, and a call answers 0 when nothing is left.
//!
//! A call walks the whole table once, keeping the `count` smallest (hash, key) at or after the
//! cursor among the keys that match MATCH and TYPE (a bounded max-heap), then adds every other
//! matching key that shares the last hash kept, so that a collision never splits between calls;
//! the next cursor is that hash + 1. The calls of one scan therefore cover consecutive ranges of
//! hashes with nothing left between them: every key present for the whole scan is returned at
//! least once (once, unless it is removed and added again), whatever is added or removed
//! meanwhile, which is Redis's guarantee.
//!
//! The cost is not Redis's: a call costs O(keys) (every key is hashed), where Redis's costs
//! O(COUNT), so a whole scan in steps of COUNT costs O(keys^2 / COUNT). Like every read it runs in
//! the apply pipeline, one at a time with the writes. COUNT is bounded by [`SCAN_COUNT_MAX`], and
//! since MATCH and TYPE filter before COUNT applies (Redis filters after), a call returns up to
//! COUNT matching keys rather than fewer or none.
//!
//! ## RANDOMKEY
//!
//! The key with the smallest SipHash-2-4 under a key drawn for the call (min-hash: every live key
//! equally likely, whatever the table's order). The draw mixes the applied index and a count of
//! draws this instance made, so repeated calls on an unchanged state differ; it is not replicated
//! state: inside a transaction each replica may pick a different key, and only the answer of the
//! node serving the client reaches it.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::execute::WriteAnswer;
use super::value::{Stored, Value};
use super::{too_large, KvStateMachine, WriteError, WriteReply};
use crate::command::{ScanArgs, TypeFilter};
use crate::glob::{glob_match, Case};
use keel_redis_types::siphash::SipHasher24;
use keel_resp::Reply;

/// Most keys one SCAN call returns (a larger COUNT counts as this): bounds the heap and the
/// reply.
pub const SCAN_COUNT_MAX: u32 = 100_000;

/// The SipHash key of [`scan_hash`]: the bytes of `"keel-kv scan   1"`. Cursors are hashes under
/// it, so changing it invalidates every cursor a client holds.
const SCAN_KEY: [u8; 16] = *b"keel-kv scan   1";

/// A key's place in SCAN's order (see the module documentation).
pub(crate) fn scan_hash(key: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(SCAN_KEY[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(SCAN_KEY[8..].try_into().expect("8 bytes"));
    keyed_hash(k0, k1, key)
}

pub(crate) fn keyed_hash(k0: u64, k1: u64, key: &[u8]) -> u64 {
    let mut hasher = SipHasher24::new_with_keys(k0, k1);
    hasher.write(key);
    hasher.finish()
}

/// How many RANDOMKEY draws this instance made. Not replicated state: two state machines are
/// equal whatever their counts, and snapshots leave it out.
#[derive(Debug, Default)]
pub(crate) struct Draws(AtomicU64);

impl Draws {
    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

impl Clone for Draws {
    fn clone(&self) -> Self {
        Draws(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl PartialEq for Draws {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Draws {}

/// A value and its deadline (0: none) as RENAME and COPY carry them to another key: shared with
/// the source entry, not copied, until written.
struct Carried {
    value: Value,
    deadline_ms: u64,
}

impl KvStateMachine {
    /// RENAME (`+OK`) and RENAMENX (1, or 0 when `new_key` exists): the value and its deadline
    /// move; removing the source is a change for WATCH, as is writing the destination. A key
    /// renamed onto itself stays as it is.
    pub(super) fn rename(
        &mut self,
        key: &[u8],
        new_key: &[u8],
        only_if_absent: bool,
    ) -> WriteAnswer {
        let carried = match self.carried(key, new_key) {
            Ok(Some(carried)) => carried,
            Ok(None) => return WriteError::NoSuchKey.into(),
            Err(error) => return error.into(),
        };
        let renamed = if only_if_absent {
            WriteReply::Integer(1)
        } else {
            WriteReply::Ok
        };
        let refused = WriteReply::Integer(0);
        if key == new_key {
            return if only_if_absent { refused } else { renamed }.into();
        }
        if only_if_absent && self.cur().data.contains_key(new_key) {
            return refused.into();
        }
        self.remove_live(key);
        self.put_value(new_key, carried.value, carried.deadline_ms);
        renamed.into()
    }

    /// COPY: 1 if `destination` (in database `db`, or this one) now holds `source`'s value and
    /// deadline.
    pub(super) fn copy(
        &mut self,
        source: &[u8],
        destination: &[u8],
        replace: bool,
        db: Option<u32>,
    ) -> WriteAnswer {
        let here = self.current_db();
        let there = db.unwrap_or(here);
        if there == here && source == destination {
            return WriteError::SameObject.into();
        }
        let carried = match self.carried(source, destination) {
            Ok(Some(carried)) => carried,
            Ok(None) => return WriteReply::Integer(0).into(),
            Err(error) => return error.into(),
        };
        self.select(there);
        self.expire_if_due(destination);
        let copied = replace || !self.cur().data.contains_key(destination);
        if copied {
            self.put_value(destination, carried.value, carried.deadline_ms);
        }
        self.select(here);
        WriteReply::Integer(i64::from(copied)).into()
    }

    /// MOVE: 1 if `key` moved (value and deadline) to database `db`, 0 if it does not exist here
    /// or exists there; `db` this database is an error, as in Redis.
    pub(super) fn move_key(&mut self, key: &[u8], db: u32) -> WriteAnswer {
        let here = self.current_db();
        if db == here {
            return WriteError::SameObject.into();
        }
        self.expire_if_due(key);
        let Some(carried) = self.cur().data.get(key).map(|stored| Carried {
            value: stored.value.clone(),
            deadline_ms: stored.expire_at_ms,
        }) else {
            return WriteReply::Integer(0).into();
        };
        self.select(db);
        self.expire_if_due(key);
        let moved = !self.cur().data.contains_key(key);
        if moved {
            self.put_value(key, carried.value, carried.deadline_ms);
        }
        self.select(here);
        if moved {
            self.remove_live(key);
        }
        WriteReply::Integer(i64::from(moved)).into()
    }

    /// SWAPDB: the contents of databases `a` and `b` exchanged. For WATCH every key of either
    /// changed (as Redis touches every watched key that exists in one of them): each key that
    /// leaves a database gets a tombstone there, each key that arrives the version of this entry.
    /// O(keys of both), where Redis's is O(1): the tokens are per key here.
    pub(super) fn swap_dbs(&mut self, a: u32, b: u32) -> WriteAnswer {
        if a == b {
            return WriteReply::Ok.into();
        }
        // Blocked clients of both wait on keys that may hold something else now.
        self.note_every_key_filled();
        let index = self.applied_index;
        let (low, high) = (a.min(b) as usize, a.max(b) as usize);
        self.db_at_mut(high as u32);
        let (left, right) = self.dbs.split_at_mut(high);
        let (x, y) = (&mut left[low], &mut right[0]);
        for db in [&mut *x, &mut *y] {
            super::execute::tombstone_all(&mut db.tombstones, &db.data, index);
        }
        std::mem::swap(&mut x.data, &mut y.data);
        std::mem::swap(&mut x.digest, &mut y.digest);
        std::mem::swap(&mut x.deadlines, &mut y.deadlines);
        for db in [x, y] {
            db.data.for_each_mut(|stored| stored.version = index);
            let keys: Vec<super::key::Key> = db.data.keys().cloned().collect();
            for key in keys {
                db.tombstones.forget(&key);
            }
        }
        WriteReply::Ok.into()
    }

    /// What RENAME and COPY write to `destination`: `source`'s value (shared, not copied) and
    /// deadline, None if it does not exist; both keys are rid of an expired entry first.
    fn carried(
        &mut self,
        source: &[u8],
        destination: &[u8],
    ) -> Result<Option<Carried>, WriteError> {
        if too_large(destination) {
            return Err(WriteError::StringTooLarge);
        }
        self.expire_if_due(source);
        self.expire_if_due(destination);
        Ok(self.cur().data.get(source).map(|stored| Carried {
            value: stored.value.clone(),
            deadline_ms: stored.expire_at_ms,
        }))
    }

    /// Every key that has not expired, with its stored entry.
    fn live_keys(&self) -> impl Iterator<Item = (&[u8], &Stored)> {
        let now = self.log_time_ms;
        self.cur()
            .data
            .iter()
            .filter(move |(_, stored)| stored.alive_at(now))
    }

    /// TYPE: `string`, `list`, `hash`, `set`, or `none` for no such key.
    pub(super) fn key_type(&self, key: &[u8]) -> Reply {
        Reply::simple(self.live(key).map_or("none", |stored| stored.kind().name()))
    }

    /// RANDOMKEY (see the module documentation).
    pub(super) fn random_key(&self) -> Reply {
        let (k0, k1) = (self.applied_index, self.random_draws.next());
        self.live_keys()
            .map(|(key, _)| (keyed_hash(k0, k1, key), key))
            .min()
            .map_or(Reply::Null, |(_, key)| {
                Reply::Bulk(Bytes::copy_from_slice(key))
            })
    }

    /// KEYS: the matching keys in ascending byte order (Redis's order is the table's; a sorted
    /// one shows nothing of this process's table).
    pub(super) fn keys(&self, pattern: &[u8]) -> Reply {
        let mut keys: Vec<&[u8]> = self
            .live_keys()
            .map(|(key, _)| key)
            .filter(|key| glob_match(pattern, key, Case::Sensitive))
            .collect();
        keys.sort_unstable();
        Reply::Array(
            keys.into_iter()
                .map(|key| Reply::Bulk(Bytes::copy_from_slice(key)))
                .collect(),
        )
    }

    /// SCAN (see the module documentation): `[next cursor, [key ...]]`.
    pub(super) fn scan(&self, args: &ScanArgs) -> Reply {
        let candidates = || {
            self.live_keys()
                .filter(|(_, stored)| match args.types {
                    TypeFilter::Any => true,
                    TypeFilter::Only(kind) => stored.kind() == kind,
                    TypeFilter::Nothing => false,
                })
                .map(|(key, _)| (scan_hash(key), key))
                .filter(|&(hash, key)| {
                    hash >= args.cursor
                        && args
                            .pattern
                            .as_ref()
                            .is_none_or(|pattern| glob_match(pattern, key, Case::Sensitive))
                })
        };
        let (keys, next_cursor) = scan_page(candidates, args.count);
        let keys = keys
            .into_iter()
            .map(|key| Reply::Bulk(Bytes::copy_from_slice(key)))
            .collect();
        Reply::Array(vec![
            Reply::text(next_cursor.to_string()),
            Reply::Array(keys),
        ])
    }
}

/// One SCAN call over `candidates` (each call of it walks the same (hash, key) pairs: the keys at
/// or after the cursor that match): the `count` smallest pairs, and every other pair sharing the
/// last hash among them, in order; and the next cursor (0: nothing is left).
fn scan_page<'k, I>(candidates: impl Fn() -> I, count: u32) -> (Vec<&'k [u8]>, u64)
where
    I: Iterator<Item = (u64, &'k [u8])>,
{
    let count = count.clamp(1, SCAN_COUNT_MAX) as usize;
    let mut smallest: BinaryHeap<(u64, &[u8])> = BinaryHeap::new();
    let mut matching = 0usize;
    for candidate in candidates() {
        matching += 1;
        if smallest.len() < count {
            smallest.push(candidate);
        } else if smallest.peek().is_some_and(|&largest| candidate < largest) {
            smallest.pop();
            smallest.push(candidate);
        }
    }
    let mut next_cursor = 0;
    let mut found = smallest.into_vec();
    if matching > count {
        let last = *found.iter().max().expect("count is at least 1");
        // The pairs beyond the heap that share its last hash, so that a collision never splits
        // between calls; anything hashed beyond it is left for the next call.
        for candidate in candidates().filter(|&candidate| candidate > last) {
            if candidate.0 == last.0 {
                found.push(candidate);
            } else {
                next_cursor = last.0 + 1;
            }
        }
    }
    found.sort_unstable();
    (found.into_iter().map(|(_, key)| key).collect(), next_cursor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages through `pairs` as successive SCAN calls would.
    fn scan_all(pairs: &[(u64, &'static [u8])], count: u32) -> Vec<Vec<&'static [u8]>> {
        let mut cursor = 0;
        let mut pages = Vec::new();
        loop {
            let candidates = || pairs.iter().copied().filter(move |&(h, _)| h >= cursor);
            let (keys, next) = scan_page(candidates, count);
            pages.push(keys);
            if next == 0 {
                return pages;
            }
            cursor = next;
        }
    }

    #[test]
    fn keys_sharing_a_hash_never_split_between_pages() {
        let pairs: [(u64, &[u8]); 6] = [
            (7, b"c"),
            (3, b"a"),
            (7, b"b"),
            (7, b"d"),
            (9, b"e"),
            (u64::MAX, b"f"),
        ];
        assert_eq!(
            scan_all(&pairs, 2),
            vec![vec![&b"a"[..], b"b", b"c", b"d"], vec![&b"e"[..], b"f"],]
        );
        assert_eq!(scan_all(&pairs, 1).len(), 4);
        // The last hash possible ends the scan without overflowing the cursor.
        let last: [(u64, &[u8]); 2] = [(u64::MAX, b"x"), (u64::MAX, b"y")];
        assert_eq!(scan_all(&last, 1), vec![vec![&b"x"[..], b"y"]]);
        assert_eq!(scan_all(&[], 10), vec![Vec::<&[u8]>::new()]);
    }
}
