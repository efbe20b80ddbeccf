//! SORT, SORT_RO and SORT ... STORE on lists, sets and sorted sets, with Redis 7.0's semantics
//! (`sort.c`) where they are deterministic, and a deterministic choice where Redis's are not:
//!
//! - Numeric sorting reads each element (or the value BY names) as a float: a value that is not
//!   one fails the whole command ("One or more scores can't be converted into double"); a value
//!   BY names that does not exist, or is not a string (a hash field for `->`), counts as 0; an
//!   empty string is 0, as C's `strtod` reads it. Equal numbers are ordered by the elements'
//!   bytes, as Redis orders them.
//! - ALPHA compares bytes (Redis without STORE compares with the server's locale collation,
//!   `strcoll`; in the C locale the same order). With BY, a missing value sorts first, and equal
//!   values are ordered by the elements' bytes (Redis leaves their order to `qsort`).
//! - DESC reverses the whole order, ties included, as Redis's comparator does.
//! - `BY` a pattern without `*` (`BY nosort`) keeps the native order: a list's, a sorted set's by
//!   score; a set has none, and keel's is its members' byte order (Redis uses its hash table's,
//!   or, with STORE, sorts ALPHA), reversed by DESC.
//!
//! STORE writes the result as a list, or removes the destination when the result is empty (a
//! version change WATCH sees).
//!
//! The result is built in memory, so it is bounded: at most [`SORT_RESULT_BYTES_MAX`] bytes (the
//! EXEC reply bound), counted as an EXEC's reply is (`apply_reply::reply_bytes`); beyond it SORT
//! answers an error and stores nothing.

use std::cmp::Ordering;

use bytes::Bytes;

use super::{Hash, List};
use crate::command::SortArgs;
use crate::state_machine::apply_reply::reply_bytes;
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::value::{CollectionValue, Value};
use crate::state_machine::{KvStateMachine, WriteError, EXEC_REPLY_BYTES_MAX};
use keel_resp::number::parse_f64;
use keel_resp::Reply;

/// The largest result SORT builds (RESP bytes, roughly): the bound of an EXEC's reply, which a
/// SORT inside one must fit anyway. A constant, not a setting: whether SORT ... STORE fails
/// must be the same on every replica.
pub const SORT_RESULT_BYTES_MAX: usize = EXEC_REPLY_BYTES_MAX;

/// What one element is sorted by.
enum SortKey {
    Number(f64),
    Bytes(Option<Bytes>),
}

impl KvStateMachine {
    /// SORT without STORE, SORT_RO: an array, GET's missing values null.
    pub(super) fn sort_reply(&self, args: &SortArgs) -> Result<Reply, WriteError> {
        let values = self.sort_result(args)?;
        Ok(Reply::Array(
            values
                .into_iter()
                .map(|value| value.map_or(Reply::Null, Reply::Bulk))
                .collect(),
        ))
    }

    /// SORT ... STORE: `destination` becomes a list of the result (GET's missing values empty
    /// strings), or is removed if the result is empty, whatever it held (a change WATCH sees);
    /// the result's length. An error stores nothing.
    pub(super) fn sort_store(&mut self, args: &SortArgs, destination: &[u8]) -> WriteAnswer {
        self.expire_if_due(&args.key);
        let values = match self.sort_result(args) {
            Ok(values) => values,
            Err(error) => return error.into(),
        };
        let mut list = List::default();
        list.replace_all(values.into_iter().map(Option::unwrap_or_default).collect());
        self.store_result(destination, list)
    }

    /// The values SORT answers, in order: the elements of the range LIMIT selects, or for each
    /// of them one value per GET pattern (None where the pattern names nothing).
    fn sort_result(&self, args: &SortArgs) -> Result<Vec<Option<Bytes>>, WriteError> {
        let mut elements = self.elements_to_sort(&args.key)?;
        if args.no_sort {
            if args.descending {
                elements.reverse();
            }
        } else {
            self.sort_elements(args, &mut elements)?;
        }
        let Some((first, last)) = limit_range(args.limit, elements.len()) else {
            return Ok(Vec::new());
        };
        let mut result_bytes = 0usize;
        let mut result = Vec::new();
        for element in &elements[first..=last] {
            let values: Vec<Option<Bytes>> = if args.get.is_empty() {
                vec![Some(element.clone())]
            } else {
                args.get
                    .iter()
                    .map(|pattern| self.lookup_by_pattern(pattern, element))
                    .collect()
            };
            for value in values {
                result_bytes += reply_bytes(&Reply::Null) + value.as_ref().map_or(0, Bytes::len);
                if result_bytes > SORT_RESULT_BYTES_MAX {
                    return Err(WriteError::SortTooLarge);
                }
                result.push(value);
            }
        }
        Ok(result)
    }

    /// The elements of the list, set or sorted set under `key` in their native order (a set's:
    /// byte order; a sorted set's: by score); none for no key; WRONGTYPE for another kind.
    fn elements_to_sort(&self, key: &[u8]) -> Result<Vec<Bytes>, WriteError> {
        let Some(stored) = self.live(key) else {
            return Ok(Vec::new());
        };
        let Value::Collection(collection) = &stored.value else {
            return Err(WriteError::WrongType);
        };
        Ok(match &**collection {
            CollectionValue::List(list) => list.items().iter().cloned().collect(),
            CollectionValue::Set(set) => set.sorted().into_iter().cloned().collect(),
            CollectionValue::ZSet(zset) => zset.ascending().map(|(_, m)| m.clone()).collect(),
            CollectionValue::Hash(_) | CollectionValue::Stream(_) => {
                return Err(WriteError::WrongType)
            }
        })
    }

    fn sort_elements(&self, args: &SortArgs, elements: &mut Vec<Bytes>) -> Result<(), WriteError> {
        let mut keyed = Vec::with_capacity(elements.len());
        for element in elements.drain(..) {
            let by = match &args.by {
                Some(pattern) => self.lookup_by_pattern(pattern, &element),
                None => Some(element.clone()),
            };
            let key = if args.alpha {
                SortKey::Bytes(by)
            } else {
                SortKey::Number(match by {
                    None => 0.0,
                    Some(text) if text.is_empty() => 0.0,
                    Some(text) => parse_f64(&text).ok_or(WriteError::SortNotDouble)?,
                })
            };
            keyed.push((key, element));
        }
        keyed.sort_by(|(a, a_element), (b, b_element)| {
            let by_key = match (a, b) {
                (SortKey::Number(a), SortKey::Number(b)) => {
                    a.partial_cmp(b).unwrap_or(Ordering::Equal)
                }
                (SortKey::Bytes(a), SortKey::Bytes(b)) => a.cmp(b),
                _ => unreachable!("every key is of the same kind"),
            };
            let order = by_key.then_with(|| a_element.cmp(b_element));
            if args.descending {
                order.reverse()
            } else {
                order
            }
        });
        elements.extend(keyed.into_iter().map(|(_, element)| element));
        Ok(())
    }

    /// The value a BY or GET pattern names for `element` (Redis's `lookupKeyByPattern`): `#` is
    /// the element itself; otherwise the first `*` is replaced by the element to make a key,
    /// whose string value it is, or with `->field` after the `*` (a field named) that field of
    /// the hash under the key. None if there is no `*`, no such key, or a value of another kind.
    fn lookup_by_pattern(&self, pattern: &[u8], element: &Bytes) -> Option<Bytes> {
        if pattern == b"#" {
            return Some(element.clone());
        }
        let star = pattern.iter().position(|&b| b == b'*')?;
        let after_star = &pattern[star + 1..];
        let (key_suffix, field) = match after_star.windows(2).position(|w| w == b"->") {
            Some(arrow) if arrow + 2 < after_star.len() => {
                (&after_star[..arrow], Some(&after_star[arrow + 2..]))
            }
            _ => (after_star, None),
        };
        let mut key = Vec::with_capacity(star + element.len() + key_suffix.len());
        key.extend_from_slice(&pattern[..star]);
        key.extend_from_slice(element);
        key.extend_from_slice(key_suffix);
        let stored = self.live(&key)?;
        match field {
            None => stored.shared_string(),
            Some(field) => match &stored.value {
                Value::Collection(collection) => match &**collection {
                    CollectionValue::Hash(hash) => Hash::get(hash, field).cloned(),
                    _ => None,
                },
                Value::Str(_) => None,
            },
        }
    }
}

/// The positions LIMIT selects among `len` elements (both inclusive), as Redis clamps them: a
/// negative offset is 0, a negative count means all; None if none.
fn limit_range(limit: Option<(i64, i64)>, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let (start, end) = match limit {
        None => (0, len - 1),
        Some((offset, count)) => {
            let start = offset.clamp(0, len);
            match count.clamp(-1, len) {
                -1 => (start, len - 1),
                count => (start, (start + count - 1).min(len - 1)),
            }
        }
    };
    (start < len && start <= end).then_some((start as usize, end as usize))
}
