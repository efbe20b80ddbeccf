//! A list: a double-ended queue of byte strings, with its content hash, its body in a snapshot
//! (`count n >= 1 (u32), n x bytes element, head first`) and the list commands' operations.
//!
//! The content hash is a polynomial in the elements' hashes, modulo the Mersenne prime
//! P = 2^61 - 1: `sum over i of h(e_i) * B^i`, with `h` = `element_hash(1, e, "") mod P` and a
//! fixed base `B`. Pushing or popping at either end, and replacing one element, update it in
//! O(1) multiplications (O(log n) for the power at an end or an index); the operations that move
//! many elements anyway (LREM, LINSERT, LTRIM) recompute it. Order counts: `[a, b]` and `[b, a]`
//! hash apart. Part of the replicated format (the digest).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::wire::{put_bytes, Reader};
use crate::BYTES_FIELD_MIN;
use crate::{element_hash, index_of, index_range, read_element, BodyError, Family};

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

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

/// A list value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct List {
    items: VecDeque<Bytes>,
    hash: u64,
    element_bytes: u64,
}

impl List {
    pub fn items(&self) -> &VecDeque<Bytes> {
        &self.items
    }

    pub fn get(&self, at: usize) -> Option<&Bytes> {
        self.items.get(at)
    }

    pub fn push_front(&mut self, element: Bytes) {
        self.hash = add(mul(self.hash, B), h(&element));
        self.element_bytes += element.len() as u64;
        self.items.push_front(element);
    }

    pub fn push_back(&mut self, element: Bytes) {
        let power = pow(B, self.items.len() as u64);
        self.hash = add(self.hash, mul(h(&element), power));
        self.element_bytes += element.len() as u64;
        self.items.push_back(element);
    }

    pub fn pop_front(&mut self) -> Option<Bytes> {
        let element = self.items.pop_front()?;
        self.hash = mul(sub(self.hash, h(&element)), B_INVERSE);
        self.element_bytes -= element.len() as u64;
        Some(element)
    }

    pub fn pop_back(&mut self) -> Option<Bytes> {
        let element = self.items.pop_back()?;
        let power = pow(B, self.items.len() as u64);
        self.hash = sub(self.hash, mul(h(&element), power));
        self.element_bytes -= element.len() as u64;
        Some(element)
    }

    /// Replaces the element at `at` (which exists).
    pub fn set(&mut self, at: usize, element: Bytes) {
        let power = pow(B, at as u64);
        let old = &self.items[at];
        self.hash = add(self.hash, mul(sub(h(&element), h(old)), power));
        self.element_bytes = self.element_bytes - old.len() as u64 + element.len() as u64;
        self.items[at] = element;
    }

    /// Replaces every element (LREM, LINSERT, LTRIM): O(n) anyway.
    pub fn replace_all(&mut self, items: VecDeque<Bytes>) {
        *self = List::default();
        for element in items {
            self.push_back(element);
        }
    }

    /// The hash as computed from scratch (tests compare it with the one kept up to date).
    #[cfg(test)]
    pub fn recomputed_hash(&self) -> u64 {
        let mut fresh = List::default();
        self.items.iter().for_each(|e| fresh.push_back(e.clone()));
        fresh.hash
    }
}

impl List {
    /// Pushes `element` at `end`.
    pub fn push(&mut self, end: End, element: Bytes) {
        match end {
            End::Left => self.push_front(element),
            End::Right => self.push_back(element),
        }
    }

    /// Pops the element at `end`.
    pub fn pop(&mut self, end: End) -> Option<Bytes> {
        match end {
            End::Left => self.pop_front(),
            End::Right => self.pop_back(),
        }
    }

    /// LPOP and RPOP with a count: up to `count` elements from `end`, in the order popped.
    pub fn pop_up_to(&mut self, end: End, count: u64) -> Vec<Bytes> {
        let n = count.min(self.items.len() as u64);
        (0..n).filter_map(|_| self.pop(end)).collect()
    }

    /// LSET: replaces the element at `index` (negative from the end); false if there is none.
    pub fn set_at(&mut self, index: i64, element: Bytes) -> bool {
        match index_of(index, self.items.len()) {
            Some(at) => {
                self.set(at, element);
                true
            }
            None => false,
        }
    }

    /// LREM: removes up to |count| elements equal to `element` (from the head for count > 0,
    /// the tail for < 0, all for 0); how many.
    pub fn remove_matching(&mut self, count: i64, element: &[u8]) -> usize {
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs().min(usize::MAX as u64) as usize
        };
        let mut items: Vec<Bytes> = self.items.iter().cloned().collect();
        if count < 0 {
            items.reverse();
        }
        let mut removed = 0;
        items.retain(|e| {
            let drop = removed < limit && e[..] == *element;
            removed += usize::from(drop);
            !drop
        });
        if count < 0 {
            items.reverse();
        }
        if removed > 0 {
            self.replace_all(VecDeque::from(items));
        }
        removed
    }

    /// LTRIM: keeps the elements from `start` to `stop` (inclusive, negative from the end).
    pub fn trim(&mut self, start: i64, stop: i64) {
        let kept = match index_range(start, stop, self.items.len()) {
            Some((first, last)) => self.items.range(first..=last).cloned().collect(),
            None => VecDeque::new(),
        };
        if kept.len() != self.items.len() {
            self.replace_all(kept);
        }
    }

    /// LINSERT: inserts `element` before or after the first `pivot`; the new length, None if
    /// `pivot` is not in the list.
    pub fn insert_by_pivot(&mut self, before: bool, pivot: &[u8], element: Bytes) -> Option<usize> {
        let at = self.items.iter().position(|e| e[..] == *pivot)?;
        let mut items = self.items.clone();
        items.insert(if before { at } else { at + 1 }, element);
        self.replace_all(items);
        Some(self.items.len())
    }

    /// LRANGE: the elements from `start` to `stop` (inclusive, negative from the end).
    pub fn range(&self, start: i64, stop: i64) -> impl Iterator<Item = &Bytes> {
        let positions = index_range(start, stop, self.items.len());
        positions
            .into_iter()
            .flat_map(move |(first, last)| self.items.range(first..=last))
    }

    /// LINDEX: the element at `index` (negative from the end).
    pub fn at(&self, index: i64) -> Option<&Bytes> {
        index_of(index, self.items.len()).and_then(|at| self.items.get(at))
    }
}

impl Family for List {
    const ELEMENT_BYTES_MIN: usize = BYTES_FIELD_MIN;

    family_counts!(items, element_bytes);

    fn encode_body(&self, out: &mut Vec<u8>) {
        self.items.iter().for_each(|e| put_bytes(out, e));
    }

    fn decode_body(r: &mut Reader, count: usize) -> Result<List, BodyError> {
        let mut list = List::default();
        for _ in 0..count {
            list.push_back(read_element(r)?);
        }
        Ok(list)
    }
}

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
