//! A hash: fields to values, with its content hash: the XOR of its pairs' hashes
//! (`element_hash(2, field, value)`), so the pairs alone count, not the order they came in; its
//! body in a snapshot (`count n >= 1 (u32), n x (bytes field, bytes value), fields strictly
//! ascending`); and the hash commands' operations.

use std::collections::HashMap;

use bytes::Bytes;

use keel_resp::number::{format_f64, parse_f64, parse_i64};

use crate::wire::{put_bytes, Reader};
use crate::BYTES_FIELD_MIN;
use crate::{ascending, element_hash, read_element, BodyError, Family, ValueError};

/// A hash value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hash {
    fields: HashMap<Bytes, Bytes>,
    hash: u64,
    pair_bytes: u64,
}

impl Hash {
    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.fields.get(field)
    }

    /// Every pair in ascending field order: replies and snapshots, so that every replica
    /// answers and writes the same.
    pub fn sorted(&self) -> Vec<(&Bytes, &Bytes)> {
        let mut pairs: Vec<(&Bytes, &Bytes)> = self.fields.iter().collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        pairs
    }

    /// Sets `field` to `value`; true if the field is new.
    pub fn insert(&mut self, field: Bytes, value: Bytes) -> bool {
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
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let Some(old) = self.fields.remove(field) else {
            return false;
        };
        self.hash ^= element_hash(2, field, &old);
        self.pair_bytes -= (field.len() + old.len()) as u64;
        true
    }

    /// HINCRBY: adds `delta` to the field's integer (0 if absent); the new value.
    pub fn incr_by(&mut self, field: Bytes, delta: i64) -> Result<i64, ValueError> {
        let current = match self.get(&field) {
            None => 0,
            Some(value) => parse_i64(value).ok_or(ValueError::HashValueNotInteger)?,
        };
        let new = current.checked_add(delta).ok_or(ValueError::Overflow)?;
        self.insert(field, Bytes::from(new.to_string()));
        Ok(new)
    }

    /// HINCRBYFLOAT: adds `delta` to the field's number (0 if absent); the new value as
    /// written.
    pub fn incr_by_float(&mut self, field: Bytes, delta: f64) -> Result<Bytes, ValueError> {
        let current = match self.get(&field) {
            None => 0.0,
            Some(value) => parse_f64(value).ok_or(ValueError::HashValueNotFloat)?,
        };
        let sum = current + delta;
        if !sum.is_finite() {
            return Err(ValueError::NanOrInfinity);
        }
        let text = Bytes::from(format_f64(sum));
        self.insert(field, text.clone());
        Ok(text)
    }
}

impl Family for Hash {
    const ELEMENT_BYTES_MIN: usize = 2 * BYTES_FIELD_MIN;

    family_counts!(fields, pair_bytes);

    fn encode_body(&self, out: &mut Vec<u8>) {
        for (field, value) in self.sorted() {
            put_bytes(out, field);
            put_bytes(out, value);
        }
    }

    fn decode_body(r: &mut Reader, count: usize) -> Result<Hash, BodyError> {
        let (mut hash, mut previous) = (Hash::default(), None);
        for _ in 0..count {
            let field = read_element(r)?;
            ascending(&mut previous, &field)?;
            hash.insert(field, read_element(r)?);
        }
        Ok(hash)
    }
}
