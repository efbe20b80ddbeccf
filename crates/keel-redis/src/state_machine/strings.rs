//! The string commands that change or read part of a value, or a value as a number: INCRBYFLOAT,
//! SETRANGE and SETBIT (writes, run at their entry's index and time as `execute.rs` describes),
//! GETRANGE, GETBIT and BITCOUNT (reads). LCS is in `lcs.rs`.
//!
//! Each write removes its key first if it has expired, keeps a live key's deadline (they change
//! the value, not the expiry, as in Redis), and never makes a value longer than
//! [`STRING_BYTES_MAX`]. Values are exact-size copies (`key.rs`), so changing part of one writes a
//! new copy and rehashes it for the digest: O(length), where Redis changes it in place.

use bytes::Bytes;

use super::execute::WriteAnswer;
use super::{too_large, KvStateMachine, WriteError, WriteReply};
use crate::command::{BitRange, BitUnit};
use keel_redis_types::STRING_BYTES_MAX;
use keel_resp::number::{format_f64, parse_f64};
use keel_resp::Reply;

impl KvStateMachine {
    /// INCRBYFLOAT: the sum in `f64` (Redis adds in `long double`; see `number.rs` for what that
    /// changes), stored and answered as text.
    pub(super) fn incr_by_float(&mut self, key: &[u8], delta: f64) -> WriteAnswer {
        let current = match self.counter(key, parse_f64, 0.0, WriteError::NotFloat) {
            Ok(current) => current,
            Err(error) => return error.into(),
        };
        let sum = current + delta;
        if !sum.is_finite() {
            return WriteError::NanOrInfinity.into();
        }
        let text = Bytes::from(format_f64(sum));
        self.put_keeping_deadline(key, &text);
        WriteAnswer::Value(Reply::Bulk(text))
    }

    /// SETRANGE: the new length. An empty `value` writes nothing, wherever it is (a missing key
    /// is not created), and is never too far, as in Redis.
    pub(super) fn set_range(&mut self, key: &[u8], offset: u64, value: &[u8]) -> WriteAnswer {
        if too_large(key) {
            return WriteError::StringTooLarge.into();
        }
        self.expire_if_due(key);
        let old = match self.string(key) {
            Ok(old) => old,
            Err(error) => return error.into(),
        };
        if value.is_empty() {
            return WriteReply::Integer(old.map_or(0, <[u8]>::len) as i64).into();
        }
        let end = offset
            .checked_add(value.len() as u64)
            .filter(|&end| end <= STRING_BYTES_MAX as u64);
        let Some(end) = end else {
            return WriteError::StringExceedsMaxSize.into();
        };
        let (offset, end) = (offset as usize, end as usize);
        let mut new = old.unwrap_or_default().to_vec();
        if new.len() < end {
            new.resize(end, 0);
        }
        new[offset..end].copy_from_slice(value);
        self.put_keeping_deadline(key, &new);
        WriteReply::Integer(new.len() as i64).into()
    }

    /// SETBIT: the bit's old value. A key is created (zero bytes up to the bit) even to clear a
    /// bit, as in Redis; a bit set to what it was changes nothing.
    pub(super) fn set_bit(&mut self, key: &[u8], offset: u64, bit: bool) -> WriteAnswer {
        let byte = offset >> 3;
        if too_large(key) {
            return WriteError::StringTooLarge.into();
        }
        // The parser refuses such an offset; only a forged entry carries one.
        if byte >= STRING_BYTES_MAX as u64 {
            return WriteError::StringExceedsMaxSize.into();
        }
        self.expire_if_due(key);
        let (byte, mask) = (byte as usize, 0x80u8 >> (offset & 7));
        let old = match self.string(key) {
            Ok(old) => old,
            Err(error) => return error.into(),
        };
        let old_byte = old.and_then(|value| value.get(byte)).copied();
        let old_bit = old_byte.is_some_and(|b| b & mask != 0);
        if old_byte.is_none() || old_bit != bit {
            let mut new = old.unwrap_or_default().to_vec();
            if new.len() <= byte {
                new.resize(byte + 1, 0);
            }
            new[byte] = if bit {
                new[byte] | mask
            } else {
                new[byte] & !mask
            };
            self.put_keeping_deadline(key, &new);
        }
        WriteReply::Integer(i64::from(old_bit)).into()
    }

    /// GETRANGE: a zero-copy slice of the stored value; empty for no such key.
    pub(super) fn get_range(&self, key: &[u8], start: i64, end: i64) -> Reply {
        let Some(stored) = self.live(key) else {
            return Reply::Bulk(Bytes::new());
        };
        let Some(value) = stored.shared_string() else {
            return wrong_type();
        };
        match inclusive_range(start, end, value.len() as u64) {
            Some((first, last)) => Reply::Bulk(value.slice(first as usize..=last as usize)),
            None => Reply::Bulk(Bytes::new()),
        }
    }

    /// GETBIT: 0 past the end, or for no such key.
    pub(super) fn get_bit(&self, key: &[u8], offset: u64) -> Reply {
        let byte = usize::try_from(offset >> 3).ok();
        let Ok(value) = self.string(key) else {
            return wrong_type();
        };
        let value = value.unwrap_or_default();
        let bit = byte
            .and_then(|byte| value.get(byte))
            .is_some_and(|b| b & (0x80 >> (offset & 7)) != 0);
        Reply::Integer(i64::from(bit))
    }

    /// BITCOUNT: the set bits of the value, or of the bytes or bits of a range of it.
    pub(super) fn bit_count(&self, key: &[u8], range: Option<BitRange>) -> Reply {
        let Ok(value) = self.string(key) else {
            return wrong_type();
        };
        let value = value.unwrap_or_default();
        let len = value.len() as u64;
        let count = match range {
            None => ones(value),
            Some(BitRange {
                start,
                end,
                unit: BitUnit::Byte,
            }) => inclusive_range(start, end, len).map_or(0, |(first, last)| {
                ones(&value[first as usize..=last as usize])
            }),
            Some(BitRange {
                start,
                end,
                unit: BitUnit::Bit,
            }) => inclusive_range(start, end, 8 * len)
                .map_or(0, |(first, last)| ones_between_bits(value, first, last)),
        };
        Reply::Integer(count as i64)
    }
}

/// Redis's range arithmetic (GETRANGE, BITCOUNT): `start` and `end` inclusive, a negative one
/// counting from the end of a sequence of `len`, clamped to it. None when the range is empty
/// (both negative with `start` after `end` is empty before clamping, as in Redis).
fn inclusive_range(start: i64, end: i64, len: u64) -> Option<(u64, u64)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    // A length fits: values are at most STRING_BYTES_MAX bytes, 2^29 bits.
    let len = len as i64;
    let from_end = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    (start <= end).then_some((start as u64, end as u64))
}

fn ones(bytes: &[u8]) -> u64 {
    bytes.iter().map(|b| u64::from(b.count_ones())).sum()
}

/// The set bits from bit `first` to bit `last` inclusive (bit 0 is the most significant bit of
/// byte 0), both within `value`.
fn ones_between_bits(value: &[u8], first: u64, last: u64) -> u64 {
    let (first_byte, last_byte) = ((first / 8) as usize, (last / 8) as usize);
    let before_first = value[first_byte] & !(0xff >> (first % 8));
    let after_last = value[last_byte] & 0xffu8.checked_shr((last % 8 + 1) as u32).unwrap_or(0);
    ones(&value[first_byte..=last_byte])
        - u64::from(before_first.count_ones())
        - u64::from(after_last.count_ones())
}

fn wrong_type() -> Reply {
    Reply::error(WriteError::WrongType.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_as_redis_resolves_them() {
        for (start, end, len, want) in [
            (0, 3, 11, Some((0, 3))),
            (0, -1, 11, Some((0, 10))),
            (-4, -1, 11, Some((7, 10))),
            (5, 3, 11, None),
            (5, 5000, 11, Some((5, 10))),
            (-5000, 10000, 11, Some((0, 10))),
            (-6, -7, 4, None),
            (0, -1, 0, None),
            (0, 4_294_967_297, 3, Some((0, 2))),
            (i64::MIN, i64::MAX, 3, Some((0, 2))),
        ] {
            assert_eq!(
                inclusive_range(start, end, len),
                want,
                "{start} {end} {len}"
            );
        }
    }

    #[test]
    fn bit_ranges_count_only_their_bits() {
        let value = b"foobar";
        let naive = |first: u64, last: u64| {
            (first..=last)
                .filter(|&bit| value[(bit / 8) as usize] & (0x80 >> (bit % 8)) != 0)
                .count() as u64
        };
        for first in 0..48 {
            for last in first..48 {
                assert_eq!(
                    ones_between_bits(value, first, last),
                    naive(first, last),
                    "{first}..={last}"
                );
            }
        }
    }
}
