//! [`Map`]: the state machine's ordered map of keys to stored values.
//!
//! Two structures, one map: a hash table from key to value answers every point operation (GET,
//! SET of an existing key, DEL, ...), and an ordered set of the same keys gives the order
//! (snapshots are written in key order, and any ordered operation would walk it). The ordered set
//! changes only when a key is added or removed, so overwriting a key, the common write, costs one
//! hash lookup instead of a walk down a B-tree: on 100,000 keys that walk was the largest single
//! cost of applying a SET (`cargo bench -p keel-kv --bench apply`).
//!
//! The hash table's order is never observed (it differs between processes): everything that
//! leaves the map in order comes from the ordered set.

use std::collections::{BTreeSet, HashMap};

use super::key::Key;
use super::Stored;

#[derive(Clone, Default)]
pub(crate) struct Map {
    values: HashMap<Key, Stored>,
    /// Exactly the keys of `values`.
    order: BTreeSet<Key>,
}

impl Map {
    pub(crate) fn len(&self) -> usize {
        debug_assert_eq!(self.values.len(), self.order.len());
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

    /// Stores `stored` under `key`; returns what was stored there before.
    pub(crate) fn insert(&mut self, key: &[u8], stored: Stored) -> Option<Stored> {
        if let Some(slot) = self.values.get_mut(key) {
            return Some(std::mem::replace(slot, stored));
        }
        let key = Key::new(key);
        self.order.insert(key.clone());
        self.values.insert(key, stored);
        None
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Stored> {
        let removed = self.values.remove(key)?;
        let was_ordered = self.order.remove(key);
        debug_assert!(was_ordered, "every stored key is in the order set");
        Some(removed)
    }

    /// Every pair, in ascending key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Key, &Stored)> + '_ {
        self.order.iter().map(move |key| {
            let stored = self.values.get(key).expect("every ordered key is stored");
            (key, stored)
        })
    }
}

impl PartialEq for Map {
    fn eq(&self, other: &Map) -> bool {
        // The order set is a function of the keys, so the values decide.
        self.values == other.values
    }
}

impl Eq for Map {}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn stored(v: &str) -> Stored {
        Stored {
            value: Bytes::copy_from_slice(v.as_bytes()),
            pair_hash: v.len() as u64,
        }
    }

    #[test]
    fn iterates_in_key_order_through_inserts_overwrites_and_removes() {
        let mut map = Map::default();
        assert!(map.is_empty());
        for k in [
            "m",
            "a",
            "zz",
            "b",
            "a-much-longer-key-than-fits-inline-in-a-node",
        ] {
            assert_eq!(map.insert(k.as_bytes(), stored(k)), None);
        }
        assert_eq!(map.insert(b"b", stored("new")), Some(stored("b")));
        assert_eq!(map.remove(b"m"), Some(stored("m")));
        assert_eq!(map.remove(b"m"), None);
        assert!(map.contains_key(b"zz"));
        assert!(!map.contains_key(b"m"));
        assert_eq!(map.get(b"b"), Some(&stored("new")));
        let keys: Vec<&[u8]> = map.iter().map(|(k, _)| k.as_bytes()).collect();
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
        other.insert(b"b", stored("other"));
        assert_ne!(other, map);
    }
}
