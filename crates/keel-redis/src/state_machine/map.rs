//! [`Map`]: the state machine's map of keys to stored values.
//!
//! One hash table from key to value. Every operation a write or a read makes is a point operation
//! (SET, GET, DEL, ...), and a hash probe is the cheapest there is: a new key costs one insert into
//! the table, not one more into an ordered index beside it. (A B-tree of the keys kept beside the
//! table was the largest single item of the apply threads' profile, about an eighth of their time,
//! while `keel bench` filled a new cluster's key space.)
//!
//! Order is needed only when the whole map is written out in a snapshot, in ascending key order.
//! [`Map::sorted`] sorts then, on the thread that writes the snapshot (from a
//! [`super::SnapshotView`], while the apply thread goes on): O(n log n) once per snapshot instead
//! of O(log n) on every new key, off the apply path.
//!
//! The hash table's own order is never observed (it differs between processes): everything that
//! leaves the map in order comes from [`Map::sorted`].

use std::collections::HashMap;

use super::key::Key;
use super::value::Stored;

#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Map {
    values: HashMap<Key, Stored>,
    /// [`Map::used_bytes`], kept as pairs come and go.
    used_bytes: u64,
}

/// What one pair is counted beyond its key and value bytes: roughly its hash table slot (key
/// inline or its pointer, the value's pointer and hash) and the value's allocation header.
pub(crate) const PAIR_OVERHEAD_BYTES: u64 = 64;

fn pair_bytes(key_len: usize, value_len: usize) -> u64 {
    (key_len + value_len) as u64 + PAIR_OVERHEAD_BYTES
}

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
        self.values.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&Stored> {
        self.values.get(key)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.values.contains_key(key)
    }

    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut Stored> {
        self.values.get_mut(key)
    }

    /// Stores `stored` under `key`, which the map does not hold.
    pub(crate) fn insert_new(&mut self, key: &[u8], stored: Stored) {
        self.used_bytes += pair_bytes(key.len(), stored.counted_bytes() as usize);
        let replaced = self.values.insert(Key::new(key), stored);
        debug_assert!(replaced.is_none(), "insert_new of a key already held");
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Stored> {
        let removed = self.values.remove(key)?;
        self.used_bytes -= pair_bytes(key.len(), removed.counted_bytes() as usize);
        Some(removed)
    }

    /// Every pair, in no particular order: what the caller makes of them must not depend on it.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Stored)> {
        self.values
            .iter()
            .map(|(key, stored)| (key.as_bytes(), stored))
    }

    /// Every key, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Key> {
        self.values.keys()
    }

    /// Runs `f` on every stored value (in no particular order: `f` must not depend on it).
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut Stored)) {
        self.values.values_mut().for_each(&mut f);
    }

    /// Every pair, in ascending key order (sorted now: see the module documentation).
    pub(crate) fn sorted(&self) -> Vec<(&Key, &Stored)> {
        let mut pairs: Vec<(&Key, &Stored)> = self.values.iter().collect();
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
}
