//! A hash: fields to values, with its content hash: the XOR of its pairs' hashes
//! (`element_hash(2, field, value)`), so the pairs alone count, not the order they came in.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::state_machine::digest::element_hash;
use crate::state_machine::value::{CollectionValue, Value};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hash {
    fields: HashMap<Bytes, Bytes>,
    hash: u64,
    pair_bytes: u64,
}

impl Hash {
    pub(crate) fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.fields.get(field)
    }

    /// Every pair in ascending field order: replies and snapshots, so that every replica
    /// answers and writes the same.
    pub(crate) fn sorted(&self) -> Vec<(&Bytes, &Bytes)> {
        let mut pairs: Vec<(&Bytes, &Bytes)> = self.fields.iter().collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        pairs
    }

    /// Sets `field` to `value`; true if the field is new.
    pub(crate) fn insert(&mut self, field: Bytes, value: Bytes) -> bool {
        self.hash ^= element_hash(2, &field, &value);
        self.pair_bytes += (field.len() + value.len()) as u64;
        match self.fields.insert(field.clone(), value) {
            Some(old) => {
                self.hash ^= element_hash(2, &field, &old);
                self.pair_bytes -= (field.len() + old.len()) as u64;
                false
            }
            None => true,
        }
    }

    /// True if `field` was there.
    pub(crate) fn remove(&mut self, field: &[u8]) -> bool {
        let Some(old) = self.fields.remove(field) else {
            return false;
        };
        self.hash ^= element_hash(2, field, &old);
        self.pair_bytes -= (field.len() + old.len()) as u64;
        true
    }
}

collection_impl!(Hash, Hash, fields, pair_bytes);
