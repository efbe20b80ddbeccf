//! The list commands (LPUSH, LPOP, LRANGE, ...), with Redis's replies.

use bytes::Bytes;

use super::List;
use crate::command::LPos;
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::{KvStateMachine, WriteError, WriteReply};
use keel_redis_types::list::End;
use keel_resp::Reply;

/// A copy of an argument to keep: its own allocation, not a slice of the request's buffer.
pub(super) fn owned(arg: &Bytes) -> Bytes {
    Bytes::copy_from_slice(arg)
}

impl KvStateMachine {
    /// LPUSH, RPUSH, LPUSHX, RPUSHX: the new length (0 for the X forms on no key).
    pub(super) fn push(
        &mut self,
        key: &[u8],
        elements: &[Bytes],
        end: End,
        existing_only: bool,
    ) -> WriteAnswer {
        let pushed = self.change(key, !existing_only, |list: &mut List| {
            for element in elements {
                list.push(end, owned(element));
            }
            list.items().len()
        });
        match pushed {
            Ok(len) => WriteReply::Integer(len.unwrap_or(0) as i64).into(),
            Err(error) => error.into(),
        }
    }

    /// LPOP, RPOP: without a count one element or null; with one an array of up to `count`
    /// (null for no key, as Redis answers).
    pub(super) fn pop(&mut self, key: &[u8], end: End, count: Option<u64>) -> WriteAnswer {
        let popped = self.change(key, false, |list: &mut List| {
            list.pop_up_to(end, count.unwrap_or(1))
        });
        match (popped, count) {
            (Err(error), _) => error.into(),
            (Ok(None), None) => WriteAnswer::Value(Reply::Null),
            // With a count, Redis answers a missing key with the null array (`*-1` in RESP2).
            (Ok(None), Some(_)) => WriteAnswer::Value(Reply::NullArray),
            (Ok(Some(mut popped)), None) => {
                WriteAnswer::Value(popped.pop().map_or(Reply::Null, Reply::Bulk))
            }
            (Ok(Some(popped)), Some(_)) => {
                WriteAnswer::Value(Reply::Array(popped.into_iter().map(Reply::Bulk).collect()))
            }
        }
    }

    pub(super) fn lset(&mut self, key: &[u8], index: i64, element: &Bytes) -> WriteAnswer {
        let set = self.change(key, false, |list: &mut List| {
            list.set_at(index, owned(element))
        });
        match set {
            Err(error) => error.into(),
            Ok(None) => WriteError::NoSuchKey.into(),
            Ok(Some(false)) => WriteError::IndexOutOfRange.into(),
            Ok(Some(true)) => WriteReply::Ok.into(),
        }
    }

    /// LREM: removes up to |count| elements equal to `element` (from the head for count > 0,
    /// the tail for < 0, all for 0); how many.
    pub(super) fn lrem(&mut self, key: &[u8], count: i64, element: &[u8]) -> WriteAnswer {
        let removed = self.change(key, false, |list: &mut List| {
            list.remove_matching(count, element)
        });
        match removed {
            Ok(n) => WriteReply::Integer(n.unwrap_or(0) as i64).into(),
            Err(error) => error.into(),
        }
    }

    pub(super) fn ltrim(&mut self, key: &[u8], start: i64, stop: i64) -> WriteAnswer {
        let trimmed = self.change(key, false, |list: &mut List| list.trim(start, stop));
        match trimmed {
            Ok(_) => WriteReply::Ok.into(),
            Err(error) => error.into(),
        }
    }

    /// LINSERT: the new length, -1 if `pivot` is not in the list, 0 for no key.
    pub(super) fn linsert(
        &mut self,
        key: &[u8],
        before: bool,
        pivot: &[u8],
        element: &Bytes,
    ) -> WriteAnswer {
        let inserted = self.change(key, false, |list: &mut List| {
            list.insert_by_pivot(before, pivot, owned(element))
        });
        match inserted {
            Err(error) => error.into(),
            Ok(None) => WriteReply::Integer(0).into(),
            Ok(Some(None)) => WriteReply::Integer(-1).into(),
            Ok(Some(Some(len))) => WriteReply::Integer(len as i64).into(),
        }
    }

    /// LMOVE and RPOPLPUSH: the element moved, or null when `source` has none. Both keys are
    /// checked to be lists before anything moves.
    pub(super) fn lmove(
        &mut self,
        source: &[u8],
        destination: &[u8],
        from: End,
        to: End,
    ) -> WriteAnswer {
        self.expire_if_due(destination);
        if let Err(error) = self.collection::<List>(destination) {
            return error.into();
        }
        let popped = self.change(source, false, |list: &mut List| list.pop(from));
        let element = match popped {
            Err(error) => return error.into(),
            Ok(None | Some(None)) => return WriteAnswer::Value(Reply::Null),
            Ok(Some(Some(element))) => element,
        };
        let moved = element.clone();
        if let Err(error) = self.change(destination, true, |list: &mut List| list.push(to, moved)) {
            debug_assert!(false, "the destination was checked: {error}");
        }
        WriteAnswer::Value(Reply::Bulk(element))
    }

    pub(super) fn llen(&self, key: &[u8]) -> Result<Reply, WriteError> {
        Ok(Reply::Integer(
            self.collection::<List>(key)?.map_or(0, |l| l.items().len()) as i64,
        ))
    }

    pub(super) fn lrange(&self, key: &[u8], start: i64, stop: i64) -> Result<Reply, WriteError> {
        let Some(list) = self.collection::<List>(key)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        Ok(Reply::Array(
            list.range(start, stop)
                .map(|e| Reply::Bulk(e.clone()))
                .collect(),
        ))
    }

    pub(super) fn lindex(&self, key: &[u8], index: i64) -> Result<Reply, WriteError> {
        let Some(list) = self.collection::<List>(key)? else {
            return Ok(Reply::Null);
        };
        Ok(list
            .at(index)
            .map_or(Reply::Null, |e| Reply::Bulk(e.clone())))
    }

    pub(super) fn lpos(&self, lpos: &LPos) -> Result<Reply, WriteError> {
        let Some(list) = self.collection::<List>(&lpos.key)? else {
            return Ok(match lpos.count {
                Some(_) => Reply::Array(Vec::new()),
                None => Reply::Null,
            });
        };
        let items = list.items();
        let len = items.len();
        let scanned = match lpos.maxlen {
            0 => len,
            maxlen => len.min(usize::try_from(maxlen).unwrap_or(usize::MAX)),
        };
        let from_head = lpos.rank > 0;
        // Matches before the first one reported.
        let skip = usize::try_from(lpos.rank.unsigned_abs() - 1).unwrap_or(usize::MAX);
        let wanted = match lpos.count {
            None => 1,
            Some(0) => usize::MAX,
            Some(count) => usize::try_from(count).unwrap_or(usize::MAX),
        };
        let matches = (0..scanned)
            .map(|scanned| {
                if from_head {
                    scanned
                } else {
                    len - 1 - scanned
                }
            })
            .filter(|&at| items[at] == lpos.element)
            .skip(skip)
            .take(wanted)
            .map(|at| Reply::Integer(at as i64));
        Ok(match lpos.count {
            Some(_) => Reply::Array(matches.collect()),
            None => matches.into_iter().next().unwrap_or(Reply::Null),
        })
    }
}
