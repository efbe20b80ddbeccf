//! The sorted set commands (ZADD, ZRANGE, ZPOPMIN, ...), with Redis's replies: scores are
//! doubles (`Reply::double`), and `WITHSCORES` answers pairs (`Reply::Pairs`: RESP3 nests each
//! member with its score, RESP2 flattens them).

use std::ops::Bound;

use bytes::Bytes;

use super::{Family, Score, ZSet};
use crate::command::{FloatBits, ZRange, ZRangeBy, ZSetRead, ZSetWrite};
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::{KvStateMachine, WriteError, WriteReply};
use keel_redis_types::index_range;
use keel_redis_types::zset::{Added, ZAddCondition};
use keel_resp::Reply;

fn score_bounds(min: &Bound<FloatBits>, max: &Bound<FloatBits>) -> (Bound<Score>, Bound<Score>) {
    let convert = |bound: &Bound<FloatBits>| match bound {
        Bound::Included(f) => Score::new(f.0).map_or(Bound::Unbounded, Bound::Included),
        Bound::Excluded(f) => Score::new(f.0).map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Unbounded => Bound::Unbounded,
    };
    (convert(min), convert(max))
}

fn pairs_reply<'a>(
    pairs: impl IntoIterator<Item = &'a (Score, Bytes)>,
    with_scores: bool,
) -> Reply {
    let pairs = pairs.into_iter();
    if with_scores {
        Reply::Pairs(pairs.map(member_and_score).collect())
    } else {
        Reply::Array(
            pairs
                .map(|(_, member)| Reply::Bulk(member.clone()))
                .collect(),
        )
    }
}

fn member_and_score((score, member): &(Score, Bytes)) -> (Reply, Reply) {
    (Reply::Bulk(member.clone()), Reply::double(score.get()))
}

/// ZPOPMIN / ZPOPMAX: with a count, pairs; without one, Redis answers the one member and its
/// score as a flat array in RESP3 too.
fn popped_reply(popped: Vec<(Score, Bytes)>, count: Option<u64>) -> Reply {
    match (count, popped.as_slice()) {
        (None, [pair]) => {
            let (member, score) = member_and_score(pair);
            Reply::Array(vec![member, score])
        }
        _ => pairs_reply(popped.iter(), true),
    }
}

impl KvStateMachine {
    pub(super) fn execute_zset(&mut self, command: &ZSetWrite) -> WriteAnswer {
        match command {
            ZSetWrite::Add {
                key,
                condition,
                changed,
                incr,
                pairs,
            } => self.zadd(key, *condition, *changed, *incr, pairs),
            ZSetWrite::IncrBy { key, delta, member } => self.zadd(
                key,
                ZAddCondition::default(),
                false,
                true,
                &[(*delta, member.clone())],
            ),
            ZSetWrite::Rem { key, members } => {
                let removed = self.change(key, false, |z: &mut ZSet| z.remove_all(members));
                match removed {
                    Ok(n) => WriteReply::Integer(n.unwrap_or(0) as i64).into(),
                    Err(error) => error.into(),
                }
            }
            ZSetWrite::Pop { key, max, count } => {
                let popped = self.change(key, false, |z: &mut ZSet| {
                    z.pop(*max, count.unwrap_or(1) as usize)
                });
                match popped {
                    Err(error) => error.into(),
                    Ok(popped) => {
                        WriteAnswer::Value(popped_reply(popped.unwrap_or_default(), *count))
                    }
                }
            }
            ZSetWrite::RemRangeByScore { key, min, max } => {
                let (min, max) = score_bounds(min, max);
                self.zremove_where(key, |z| {
                    z.by_score(min, max)
                        .into_iter()
                        .map(|(_, m)| m.clone())
                        .collect()
                })
            }
            ZSetWrite::RemRangeByRank { key, start, stop } => {
                self.zremove_where(key, |z| match index_range(*start, *stop, z.len()) {
                    Some((first, last)) => z
                        .ascending()
                        .skip(first)
                        .take(last - first + 1)
                        .map(|(_, m)| m.clone())
                        .collect(),
                    None => Vec::new(),
                })
            }
        }
    }

    fn zremove_where(
        &mut self,
        key: &[u8],
        chosen: impl FnOnce(&ZSet) -> Vec<Bytes>,
    ) -> WriteAnswer {
        let removed = self.change(key, false, |z: &mut ZSet| {
            let members = chosen(z);
            members.iter().for_each(|m| {
                z.remove(m);
            });
            members.len()
        });
        match removed {
            Ok(n) => WriteReply::Integer(n.unwrap_or(0) as i64).into(),
            Err(error) => error.into(),
        }
    }

    fn zadd(
        &mut self,
        key: &[u8],
        condition: ZAddCondition,
        changed: bool,
        incr: bool,
        pairs: &[(FloatBits, Bytes)],
    ) -> WriteAnswer {
        let result = self.change(key, !condition.only_existing, |z: &mut ZSet| {
            let (mut added, mut updated, mut score) = (0, 0, None);
            for (delta, member) in pairs {
                let (what, new) = z.add(condition, incr, delta.0, member)?;
                match what {
                    Added::New => added += 1,
                    Added::Changed => updated += 1,
                    Added::Same | Added::Skipped => {}
                }
                score = new;
            }
            Ok::<_, keel_redis_types::ValueError>((added, updated, score))
        });
        let (added, updated, score) = match result {
            Err(error) => return error.into(),
            Ok(Some(Err(error))) => return WriteError::from(error).into(),
            Ok(None) => (0, 0, None),
            Ok(Some(Ok(counts))) => counts,
        };
        if incr {
            return WriteAnswer::Value(score.map_or(Reply::Null, Reply::double));
        }
        WriteReply::Integer(if changed { added + updated } else { added }).into()
    }

    pub(super) fn read_zset(&self, command: &ZSetRead) -> Result<Reply, WriteError> {
        let score_reply = |s: Option<Score>| s.map_or(Reply::Null, |s| Reply::double(s.get()));
        Ok(match command {
            ZSetRead::Score { key, member } => {
                score_reply(self.collection::<ZSet>(key)?.and_then(|z| z.score(member)))
            }
            ZSetRead::MScore { key, members } => {
                let zset = self.collection::<ZSet>(key)?;
                Reply::Array(
                    members
                        .iter()
                        .map(|m| score_reply(zset.and_then(|z| z.score(m))))
                        .collect(),
                )
            }
            ZSetRead::Card { key } => {
                Reply::Integer(self.collection::<ZSet>(key)?.map_or(0, |z| z.len()) as i64)
            }
            ZSetRead::Rank { key, member, rev } => {
                let Some(zset) = self.collection::<ZSet>(key)? else {
                    return Ok(Reply::Null);
                };
                zset.rank(member).map_or(Reply::Null, |rank| {
                    Reply::Integer(if *rev { zset.len() - 1 - rank } else { rank } as i64)
                })
            }
            ZSetRead::Count { key, min, max } => {
                let (min, max) = score_bounds(min, max);
                Reply::Integer(
                    self.collection::<ZSet>(key)?
                        .map_or(0, |z| z.by_score(min, max).len()) as i64,
                )
            }
            ZSetRead::Range(range) => self.zrange(range)?,
        })
    }

    fn zrange(&self, range: &ZRange) -> Result<Reply, WriteError> {
        let Some(zset) = self.collection::<ZSet>(&range.key)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let mut selected: Vec<&(Score, Bytes)> = match &range.by {
            ZRangeBy::Index { start, stop } => {
                let ordered: Vec<&(Score, Bytes)> = if range.rev {
                    zset.ascending().rev().collect()
                } else {
                    zset.ascending().collect()
                };
                return Ok(pairs_reply(
                    match index_range(*start, *stop, ordered.len()) {
                        Some((first, last)) => ordered[first..=last].to_vec(),
                        None => Vec::new(),
                    },
                    range.with_scores,
                ));
            }
            ZRangeBy::Score { min, max } => {
                let (min, max) = score_bounds(min, max);
                zset.by_score(min, max)
            }
            ZRangeBy::Lex { min, max } => zset
                .ascending()
                .filter(|(_, m)| min.admits_from_below(m) && max.admits_from_above(m))
                .collect(),
        };
        if range.rev {
            selected.reverse();
        }
        if let Some((offset, count)) = range.limit {
            let offset = usize::try_from(offset).unwrap_or(usize::MAX);
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            selected = selected.into_iter().skip(offset).take(count).collect();
        }
        Ok(pairs_reply(selected, range.with_scores))
    }
}
