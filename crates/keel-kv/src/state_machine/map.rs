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
use super::Stored;

#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Map {
    values: HashMap<Key, Stored>,
}

impl Map {
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
        let replaced = self.values.insert(Key::new(key), stored);
        debug_assert!(replaced.is_none(), "insert_new of a key already held");
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Stored> {
        self.values.remove(key)
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
        Stored::new(v.as_bytes(), v.len() as u64)
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
        assert_eq!(map.remove(b"m"), Some(stored("m")));
        assert_eq!(map.remove(b"m"), None);
        assert!(map.contains_key(b"zz"));
        assert!(!map.contains_key(b"m"));
        assert_eq!(map.get(b"b"), Some(&stored("new")));
        let keys: Vec<&[u8]> = map.sorted().iter().map(|(k, _)| k.as_bytes()).collect();
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
