//! A sorted set: members with scores, ordered by (score, member), with its content hash: the
//! XOR of its pairs' hashes (`element_hash(5, member, score bits LE)`), so the pairs alone count;
//! its body in a snapshot (`count n >= 1 (u32), n x (bytes member, score u64: the f64's bits,
//! never NaN nor negative zero), members strictly ascending`); and the sorted set commands'
//! operations. Replies write scores as doubles (keel-resp's `Reply::double`).
//!
//! Two indexes: member to score (a hash table, for ZSCORE and updates) and (score, member) in
//! order (a B-tree, for ranges). A rank costs O(rank) (the B-tree keeps no counts), as a range
//! from the start does; Redis's skiplist answers ranks in O(log n).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use bytes::Bytes;

use bytes::BufMut;

use crate::wire::{put_bytes, Reader};
use crate::BYTES_FIELD_MIN;
use crate::{ascending, element_hash, read_element, BodyError, Family, ValueError};

/// A score: never NaN, and 0 for negative zero, so that equal scores are equal bits (the digest
/// and the snapshot see bits).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score(f64);

impl Score {
    /// None for NaN.
    pub fn new(score: f64) -> Option<Score> {
        if score.is_nan() {
            None
        } else if score == 0.0 {
            Some(Score(0.0))
        } else {
            Some(Score(score))
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sorted set value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZSet {
    scores: HashMap<Bytes, Score>,
    order: BTreeSet<(Score, Bytes)>,
    hash: u64,
    member_bytes: u64,
}

fn pair_hash(member: &[u8], score: Score) -> u64 {
    element_hash(5, member, &score.0.to_bits().to_le_bytes())
}

impl ZSet {
    pub fn score(&self, member: &[u8]) -> Option<Score> {
        self.scores.get(member).copied()
    }

    /// Sets `member`'s score; its old one if it had one.
    pub fn insert(&mut self, member: Bytes, score: Score) -> Option<Score> {
        let old = self.remove(&member);
        self.hash ^= pair_hash(&member, score);
        self.member_bytes += member.len() as u64;
        self.order.insert((score, member.clone()));
        self.scores.insert(member, score);
        old
    }

    /// Removes `member`; its score if it was there.
    pub fn remove(&mut self, member: &[u8]) -> Option<Score> {
        let (member, score) = self.scores.remove_entry(member)?;
        self.hash ^= pair_hash(&member, score);
        self.member_bytes -= member.len() as u64;
        self.order.remove(&(score, member));
        Some(score)
    }

    /// Every pair in (score, member) order.
    pub fn ascending(&self) -> impl DoubleEndedIterator<Item = &(Score, Bytes)> {
        self.order.iter()
    }

    /// The pairs with scores in a range, in ascending order.
    pub fn by_score(&self, min: Bound<Score>, max: Bound<Score>) -> Vec<&(Score, Bytes)> {
        // The empty member is the least of a score: every pair of score s is at or after
        // (s, "").
        let lower = match min {
            Bound::Included(s) | Bound::Excluded(s) => Bound::Included((s, Bytes::new())),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.order
            .range((lower, Bound::Unbounded))
            .skip_while(|(score, _)| matches!(min, Bound::Excluded(s) if *score == s))
            .take_while(|(score, _)| match max {
                Bound::Included(s) => *score <= s,
                Bound::Excluded(s) => *score < s,
                Bound::Unbounded => true,
            })
            .collect()
    }

    /// The 0-based position of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(
            self.order
                .range(..(score, Bytes::copy_from_slice(member)))
                .count(),
        )
    }

    /// Every pair in ascending member order: snapshots.
    pub fn by_member(&self) -> Vec<(&Bytes, Score)> {
        let mut pairs: Vec<(&Bytes, Score)> = self.scores.iter().map(|(m, s)| (m, *s)).collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        pairs
    }
}

/// ZADD's NX / XX / GT / LT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZAddCondition {
    /// NX: only new members.
    pub only_new: bool,
    /// XX: only existing members.
    pub only_existing: bool,
    /// GT: only a greater score (new members are added).
    pub only_greater: bool,
    /// LT: only a lesser score (new members are added).
    pub only_lesser: bool,
}

/// What one ZADD pair did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    New,
    Changed,
    Same,
    Skipped,
}

impl ZSet {
    /// One pair of ZADD (ZINCRBY with `incr`): what it did, and the member's score after it if
    /// it was not skipped.
    pub fn add(
        &mut self,
        condition: ZAddCondition,
        incr: bool,
        score: f64,
        member: &Bytes,
    ) -> Result<(Added, Option<f64>), ValueError> {
        let existing = self.score(member);
        if (condition.only_new && existing.is_some())
            || (condition.only_existing && existing.is_none())
        {
            return Ok((Added::Skipped, None));
        }
        let wanted = if incr {
            existing.map_or(0.0, Score::get) + score
        } else {
            score
        };
        let new = Score::new(wanted).ok_or(ValueError::ScoreNotANumber)?;
        match existing {
            Some(old)
                if (condition.only_greater && new <= old)
                    || (condition.only_lesser && new >= old) =>
            {
                Ok((Added::Skipped, None))
            }
            Some(old) if old == new => Ok((Added::Same, Some(new.get()))),
            Some(_) => {
                self.insert(Bytes::copy_from_slice(member), new);
                Ok((Added::Changed, Some(new.get())))
            }
            None => {
                self.insert(Bytes::copy_from_slice(member), new);
                Ok((Added::New, Some(new.get())))
            }
        }
    }

    /// ZPOPMIN (ZPOPMAX with `max`): removes and returns up to `count` pairs from that end.
    pub fn pop(&mut self, max: bool, count: usize) -> Vec<(Score, Bytes)> {
        let chosen: Vec<(Score, Bytes)> = if max {
            self.ascending().rev().take(count).cloned().collect()
        } else {
            self.ascending().take(count).cloned().collect()
        };
        chosen.iter().for_each(|(_, m)| {
            self.remove(m);
        });
        chosen
    }

    /// Removes `members`; how many were there.
    pub fn remove_all(&mut self, members: &[Bytes]) -> usize {
        members.iter().filter(|m| self.remove(m).is_some()).count()
    }
}

impl Family for ZSet {
    const ELEMENT_BYTES_MIN: usize = BYTES_FIELD_MIN + 8;

    family_counts!(scores, member_bytes);

    fn encode_body(&self, out: &mut Vec<u8>) {
        for (member, score) in self.by_member() {
            put_bytes(out, member);
            out.put_u64_le(score.get().to_bits());
        }
    }

    fn decode_body(r: &mut Reader, count: usize) -> Result<ZSet, BodyError> {
        let (mut zset, mut previous) = (ZSet::default(), None);
        for _ in 0..count {
            let member = read_element(r)?;
            ascending(&mut previous, &member)?;
            let bits = r.u64().ok_or(BodyError::Truncated("a score"))?;
            let score = Score::new(f64::from_bits(bits))
                .filter(|s| s.get().to_bits() == bits)
                .ok_or(BodyError::Malformed("a score that is NaN or negative zero"))?;
            zset.insert(member, score);
        }
        Ok(zset)
    }
}
