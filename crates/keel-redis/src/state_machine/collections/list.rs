//! A list: a double-ended queue of byte strings, with its content hash.
//!
//! The content hash is a polynomial in the elements' hashes, modulo the Mersenne prime
//! P = 2^61 - 1: `sum over i of h(e_i) * B^i`, with `h` = `element_hash(1, e, "") mod P` and a
//! fixed base `B`. Pushing or popping at either end, and replacing one element, update it in
//! O(1) multiplications (O(log n) for the power at an end or an index); the operations that move
//! many elements anyway (LREM, LINSERT, LTRIM) recompute it. Order counts: `[a, b]` and `[b, a]`
//! hash apart. Part of the replicated format (the digest).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use crate::state_machine::digest::element_hash;
use crate::state_machine::value::{CollectionValue, Value};

const P: u64 = (1 << 61) - 1;
/// The base: any fixed value in 2..P-1 would do; this one is `b"keellist"` as an integer, mod P.
const B: u64 = u64::from_le_bytes(*b"keellist") % P;
/// The inverse of `B` mod P (Fermat: B^(P-2)).
const B_INVERSE: u64 = pow(B, P - 2);

const fn reduce(x: u128) -> u64 {
    let folded = (x & P as u128) + (x >> 61);
    let folded = (folded & P as u128) + (folded >> 61);
    let r = folded as u64;
    if r >= P {
        r - P
    } else {
        r
    }
}

const fn mul(a: u64, b: u64) -> u64 {
    reduce(a as u128 * b as u128)
}

const fn add(a: u64, b: u64) -> u64 {
    reduce(a as u128 + b as u128)
}

const fn sub(a: u64, b: u64) -> u64 {
    add(a, P - b)
}

const fn pow(mut base: u64, mut exponent: u64) -> u64 {
    let mut result = 1;
    while exponent > 0 {
        if exponent & 1 == 1 {
            result = mul(result, base);
        }
        base = mul(base, base);
        exponent >>= 1;
    }
    result
}

fn h(element: &[u8]) -> u64 {
    element_hash(1, element, b"") % P
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct List {
    items: VecDeque<Bytes>,
    hash: u64,
    element_bytes: u64,
}

impl List {
    pub(crate) fn items(&self) -> &VecDeque<Bytes> {
        &self.items
    }

    pub(crate) fn get(&self, at: usize) -> Option<&Bytes> {
        self.items.get(at)
    }

    pub(crate) fn push_front(&mut self, element: Bytes) {
        self.hash = add(mul(self.hash, B), h(&element));
        self.element_bytes += element.len() as u64;
        self.items.push_front(element);
    }

    pub(crate) fn push_back(&mut self, element: Bytes) {
        let power = pow(B, self.items.len() as u64);
        self.hash = add(self.hash, mul(h(&element), power));
        self.element_bytes += element.len() as u64;
        self.items.push_back(element);
    }

    pub(crate) fn pop_front(&mut self) -> Option<Bytes> {
        let element = self.items.pop_front()?;
        self.hash = mul(sub(self.hash, h(&element)), B_INVERSE);
        self.element_bytes -= element.len() as u64;
        Some(element)
    }

    pub(crate) fn pop_back(&mut self) -> Option<Bytes> {
        let element = self.items.pop_back()?;
        let power = pow(B, self.items.len() as u64);
        self.hash = sub(self.hash, mul(h(&element), power));
        self.element_bytes -= element.len() as u64;
        Some(element)
    }

    /// Replaces the element at `at` (which exists).
    pub(crate) fn set(&mut self, at: usize, element: Bytes) {
        let power = pow(B, at as u64);
        let old = &self.items[at];
        self.hash = add(self.hash, mul(sub(h(&element), h(old)), power));
        self.element_bytes = self.element_bytes - old.len() as u64 + element.len() as u64;
        self.items[at] = element;
    }

    /// Replaces every element (LREM, LINSERT, LTRIM): O(n) anyway.
    pub(crate) fn replace_all(&mut self, items: VecDeque<Bytes>) {
        *self = List::default();
        for element in items {
            self.push_back(element);
        }
    }

    /// The hash as computed from scratch (tests compare it with the one kept up to date).
    #[cfg(test)]
    pub(crate) fn recomputed_hash(&self) -> u64 {
        let mut fresh = List::default();
        self.items.iter().for_each(|e| fresh.push_back(e.clone()));
        fresh.hash
    }
}

collection_impl!(List, List, items, element_bytes);

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn the_hash_kept_up_to_date_is_the_hash_from_scratch() {
        assert_eq!(mul(B, B_INVERSE), 1);
        let mut list = List::default();
        for i in 0..50 {
            if i % 3 == 0 {
                list.push_front(b(&format!("f{i}")));
            } else {
                list.push_back(b(&format!("b{i}")));
            }
            assert_eq!(list.hash, list.recomputed_hash());
        }
        list.set(7, b("seven"));
        assert_eq!(list.hash, list.recomputed_hash());
        for i in 0..40 {
            if i % 2 == 0 {
                list.pop_front();
            } else {
                list.pop_back();
            }
            assert_eq!(list.hash, list.recomputed_hash());
        }
        while list.pop_back().is_some() {}
        assert_eq!((list.hash, list.element_bytes), (0, 0));
    }

    #[test]
    fn order_counts() {
        let mut ab = List::default();
        ab.push_back(b("a"));
        ab.push_back(b("b"));
        let mut ba = List::default();
        ba.push_back(b("b"));
        ba.push_back(b("a"));
        assert_ne!(ab.hash, ba.hash);
    }
}
