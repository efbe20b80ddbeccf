//! The pops of `command/blocking.rs` (BLPOP, BLMOVE, BZPOPMIN, LMPOP, ..., and a waiting
//! client's `RAFT.BLOCKED` attempt), with Redis's replies.
//!
//! The keys are looked at in order, as Redis does: the first that holds a list (a sorted set)
//! with something in it serves the pop; a key holding another kind stops the search with
//! WRONGTYPE (a woken client's attempt passes it over). When none serves, a waiting client's
//! attempt answers null (nothing changed: the client goes on waiting), and every other form
//! Redis's null array (a null bulk string for the moves), as where Redis cannot block.
//! An attempt applied once the log's time is past its deadline does nothing and answers null:
//! its client has given up, or is about to, and must not lose an element to it.

use bytes::Bytes;

use super::{Family, List, ZSet};
use crate::command::blocking::{BlockingPop, PopShape, PopSource};
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::{KvStateMachine, WriteError, WriteReply};
use keel_resp::Reply;

impl KvStateMachine {
    pub(super) fn blocking_pop(&mut self, pop: &BlockingPop) -> WriteAnswer {
        if let Some(deadline) = pop.attempt_deadline_ms {
            if deadline != 0 && self.log_time_ms > deadline {
                return WriteReply::Nil.into();
            }
        }
        if let PopShape::Streams(read) = &pop.shape {
            return self.blocking_read(pop, read);
        }
        let key = match self.first_serving(pop) {
            Err(error) => return error.into(),
            Ok(Some(key)) => key,
            // The attempt's "not yet" is remembered as it is (a retry of it answers null again);
            // the other forms answer Redis's null.
            Ok(None) if pop.attempt_deadline_ms.is_some() => return WriteReply::Nil.into(),
            Ok(None) => return WriteAnswer::Value(pop.nothing_reply()),
        };
        match (&pop.shape, pop.source) {
            (PopShape::MoveTo { destination, end }, PopSource::List(from)) => {
                self.lmove(&key, destination, from, *end)
            }
            (PopShape::MoveTo { .. }, PopSource::ZSet { .. })
            | (PopShape::Streams(_), _)
            | (_, PopSource::Streams) => unreachable!("only lists are moved, streams read above"),
            (shape, PopSource::List(end)) => {
                let count = many(shape).unwrap_or(1);
                let popped = self.change(&key, false, |list: &mut List| list.pop_up_to(end, count));
                let elements: Vec<Reply> = match popped {
                    Err(error) => return error.into(),
                    Ok(popped) => popped
                        .unwrap_or_default()
                        .into_iter()
                        .map(Reply::Bulk)
                        .collect(),
                };
                WriteAnswer::Value(keyed(key, elements, many(shape).is_some()))
            }
            (shape, PopSource::ZSet { max }) => {
                let count = many(shape).unwrap_or(1) as usize;
                let popped = self.change(&key, false, |zset: &mut ZSet| zset.pop(max, count));
                let pairs = match popped {
                    Err(error) => return error.into(),
                    Ok(popped) => popped.unwrap_or_default(),
                };
                let nested = many(shape).is_some();
                let elements = pairs
                    .into_iter()
                    .flat_map(|(score, member)| {
                        let pair = [Reply::Bulk(member), Reply::double(score.get())];
                        if nested {
                            vec![Reply::Array(pair.to_vec())]
                        } else {
                            pair.to_vec()
                        }
                    })
                    .collect();
                WriteAnswer::Value(keyed(key, elements, nested))
            }
        }
    }

    /// The first key that can serve the pop, or WRONGTYPE for a key of another kind met first
    /// (passed over by a woken attempt).
    fn first_serving(&self, pop: &BlockingPop) -> Result<Option<Bytes>, WriteError> {
        for key in &pop.keys {
            let filled = match pop.source {
                PopSource::List(_) => self.collection::<List>(key).map(|l| l.map(Family::len)),
                PopSource::ZSet { .. } => self.collection::<ZSet>(key).map(|z| z.map(Family::len)),
                PopSource::Streams => Ok(None),
            };
            let filled = match filled {
                Err(_) if pop.woken => false,
                Err(error) => return Err(error),
                Ok(len) => len.unwrap_or(0) > 0,
            };
            if filled {
                return Ok(Some(key.clone()));
            }
        }
        Ok(None)
    }
}

/// The count of the many-element forms (LMPOP, BZMPOP, ...), `None` for the others.
fn many(shape: &PopShape) -> Option<u64> {
    match shape {
        PopShape::KeyAndElements(count) => Some(*count),
        _ => None,
    }
}

/// `[key, element...]` (BLPOP, BZPOPMIN) or `[key, [element, ...]]` (the many-element forms).
fn keyed(key: Bytes, elements: Vec<Reply>, nested: bool) -> Reply {
    let key = Reply::Bulk(key);
    if nested {
        Reply::Array(vec![key, Reply::Array(elements)])
    } else {
        let mut reply = Vec::with_capacity(elements.len() + 1);
        reply.push(key);
        reply.extend(elements);
        Reply::Array(reply)
    }
}
