//! [`Map`]: one database's map of keys to stored values, grouped by hash slot.
//!
//! One hash table per hash slot that holds keys (`crate::slot`: CRC16 of the key or its hash
//! tag, 16,384 slots), made on the slot's first insert and dropped when its last key goes, found
//! through a small index of the occupied slots. Every operation a write or a read makes is a
//! point operation (SET, GET, DEL, ...): the key's slot (a CRC16 over its bytes), one probe into
//! the index, then one into that slot's table. The index is sparse because maps are made and
//! copied often with few keys (a script's scratch state, a snapshot's frozen copy, each of the
//! sixteen databases): a table for every slot up front cost 16,384 empty tables (786 KB) to make,
//! copy and drop each time. A new key costs one insert into its slot's table, not one more into an ordered index
//! beside it. (A B-tree of the keys kept beside the table was the largest single item of the
//! apply threads' profile, about an eighth of their time, while `keel bench` filled a new
//! cluster's key space.) Grouping by slot makes counting and listing the keys of one slot
//! ([`Map::count_in_slot`], [`Map::keys_in_slot`]) cost what that slot holds: what handing slots
//! to several Raft groups will need.
//!
//! Order is needed only when the whole map is written out in a snapshot, in ascending key order.
//! [`Map::sorted`] sorts then, on the thread that writes the snapshot (from a
//! [`super::SnapshotView`], while the apply thread goes on): O(n log n) once per snapshot instead
//! of O(log n) on every new key, off the apply path.
//!
//! The hash tables' own order is never observed (it differs between processes): everything that
//! leaves the map in order comes from [`Map::sorted`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::key::Key;
use super::value::Stored;
use crate::slot::{key_slot, SLOTS};

/// The index of occupied slots: a slot number (below [`SLOTS`]) spread by one multiplication.
/// Nothing a client sends can make it slow: it holds at most [`SLOTS`] entries, whatever the keys.
#[derive(Default)]
struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8 | u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u16(&mut self, slot: u16) {
        self.0 = u64::from(slot).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type SlotTables = HashMap<u16, HashMap<Key, Stored>, BuildHasherDefault<SlotHasher>>;

#[derive(Clone, Default)]
pub(crate) struct Map {
    /// The pairs, by hash slot: a table for each slot that holds keys (none empty).
    slots: SlotTables,
    /// How many pairs all the slots hold.
    len: usize,
    /// [`Map::used_bytes`], kept as pairs come and go.
    used_bytes: u64,
}

/// What one pair is counted beyond its key and value bytes: roughly its hash table slot (key
/// inline or its pointer, the value's pointer and hash) and the value's allocation header.
pub(crate) const PAIR_OVERHEAD_BYTES: u64 = 64;

fn pair_bytes(key_len: usize, value_len: usize) -> u64 {
    (key_len + value_len) as u64 + PAIR_OVERHEAD_BYTES
}

/// Two maps are equal when they hold the same pairs, however their slots' tables were made.
impl PartialEq for Map {
    fn eq(&self, other: &Map) -> bool {
        self.len == other.len
            && self.used_bytes == other.used_bytes
            && self
                .iter()
                .all(|(key, stored)| other.get(key) == Some(stored))
    }
}

impl Eq for Map {}

impl Map {
    /// The memory the pairs are counted as taking: their key and value bytes and
    /// [`PAIR_OVERHEAD_BYTES`] each. A function of the contents alone, so every replica counts
    /// the same at the same applied index.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Records that the value under a key changed length from `old` to `new` (through
    /// [`Map::get_mut`]).
    pub(crate) fn value_resized(&mut self, old: usize, new: usize) {
        self.used_bytes = self.used_bytes - old as u64 + new as u64;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The table of `key`'s slot, if that slot holds keys.
    fn table(&self, key: &[u8]) -> Option<&HashMap<Key, Stored>> {
        self.slots.get(&key_slot(key))
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&Stored> {
        self.table(key)?.get(key)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut Stored> {
        self.slots.get_mut(&key_slot(key))?.get_mut(key)
    }

    /// Stores `stored` under `key`, which the map does not hold.
    pub(crate) fn insert_new(&mut self, key: &[u8], stored: Stored) {
        self.used_bytes += pair_bytes(key.len(), stored.counted_bytes() as usize);
        self.len += 1;
        let slot = key_slot(key);
        debug_assert!(usize::from(slot) < SLOTS);
        let table = self.slots.entry(slot).or_default();
        let replaced = table.insert(Key::new(key), stored);
        debug_assert!(replaced.is_none(), "insert_new of a key already held");
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Stored> {
        let slot = key_slot(key);
        let table = self.slots.get_mut(&slot)?;
        let removed = table.remove(key)?;
        if table.is_empty() {
            self.slots.remove(&slot);
        }
        self.used_bytes -= pair_bytes(key.len(), removed.counted_bytes() as usize);
        self.len -= 1;
        Some(removed)
    }

    /// Every pair, in no particular order: what the caller makes of them must not depend on it.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Stored)> {
        self.slots
            .values()
            .flat_map(|table| table.iter())
            .map(|(key, stored)| (key.as_bytes(), stored))
    }

    /// Every key, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Key> {
        self.slots.values().flat_map(|table| table.keys())
    }

    /// Runs `f` on every stored value (in no particular order: `f` must not depend on it).
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut Stored)) {
        for table in self.slots.values_mut() {
            table.values_mut().for_each(&mut f);
        }
    }

    /// How many keys hash slot `slot` holds (expired ones not yet removed included). O(1).
    pub(crate) fn count_in_slot(&self, slot: u16) -> usize {
        self.slots.get(&slot).map_or(0, HashMap::len)
    }

    /// Up to `count` keys of hash slot `slot`, in ascending order: O(keys of that slot).
    pub(crate) fn keys_in_slot(&self, slot: u16, count: usize) -> Vec<&Key> {
        let Some(table) = self.slots.get(&slot) else {
            return Vec::new();
        };
        let mut keys: Vec<&Key> = table.keys().collect();
        keys.sort_unstable();
        keys.truncate(count);
        keys
    }

    /// Every pair, in ascending key order (sorted now: see the module documentation).
    pub(crate) fn sorted(&self) -> Vec<(&Key, &Stored)> {
        let mut pairs: Vec<(&Key, &Stored)> =
            self.slots.values().flat_map(|table| table.iter()).collect();
        pairs.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        pairs
    }
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.sorted()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(v: &str) -> Stored {
        Stored::new(v.as_bytes(), v.len() as u64, 0, 0)
    }

    #[test]
    fn sorts_in_key_order_through_inserts_overwrites_and_removes() {
        let mut map = Map::default();
        assert!(map.is_empty());
        for k in [
            "m",
            "a",
            "zz",
            "b",
            "a-much-longer-key-than-fits-inline-in-a-node",
        ] {
            map.insert_new(k.as_bytes(), stored(k));
        }
        *map.get_mut(b"b").unwrap() = stored("new");
        map.value_resized(1, 3);
        assert_eq!(map.remove(b"m"), Some(stored("m")));
        assert_eq!(map.remove(b"m"), None);
        assert!(map.contains_key(b"zz"));
        assert!(!map.contains_key(b"m"));
        assert_eq!(map.get(b"b"), Some(&stored("new")));
        let keys: Vec<&[u8]> = map.sorted().iter().map(|(k, _)| k.as_bytes()).collect();
        let counted: u64 = map
            .sorted()
            .iter()
            .map(|(k, v)| pair_bytes(k.len(), v.counted_bytes() as usize))
            .sum();
        assert_eq!(map.used_bytes(), counted);
        assert_eq!(
            keys,
            [
                &b"a"[..],
                b"a-much-longer-key-than-fits-inline-in-a-node",
                b"b",
                b"zz"
            ]
        );
        assert_eq!(map.len(), 4);
        let mut other = map.clone();
        assert_eq!(other, map);
        *other.get_mut(b"b").unwrap() = stored("other");
        assert_ne!(other, map);
    }

    #[test]
    fn keys_are_grouped_by_hash_slot() {
        let mut map = Map::default();
        assert_eq!(map.count_in_slot(0), 0);
        assert!(map.keys_in_slot(0, 10).is_empty());
        for key in [
            "{user1000}.following",
            "{user1000}.followers",
            "foo",
            "123456789",
        ] {
            map.insert_new(key.as_bytes(), stored(key));
        }
        let slot = key_slot(b"user1000");
        assert_eq!(map.count_in_slot(slot), 2);
        let keys: Vec<&[u8]> = map
            .keys_in_slot(slot, 10)
            .iter()
            .map(|k| k.as_bytes())
            .collect();
        assert_eq!(
            keys,
            [&b"{user1000}.followers"[..], b"{user1000}.following"]
        );
        assert_eq!(map.keys_in_slot(slot, 1).len(), 1);
        assert_eq!(map.count_in_slot(12_182), 1, "foo");
        assert_eq!(map.count_in_slot(0x31C3), 1, "123456789");
        map.remove(b"foo");
        assert_eq!(map.count_in_slot(12_182), 0);
        assert!(
            !map.slots.contains_key(&12_182),
            "an emptied slot's table is dropped"
        );
        assert_eq!(map.len(), 3);
        // Equality is by pairs, whatever tables were made.
        let mut other = Map::default();
        for (key, value) in map.iter() {
            other.insert_new(key, value.clone());
        }
        assert_eq!(other, map);
        for key in ["{user1000}.following", "{user1000}.followers", "123456789"] {
            map.remove(key.as_bytes());
        }
        assert_eq!(map, Map::default());
    }
}
