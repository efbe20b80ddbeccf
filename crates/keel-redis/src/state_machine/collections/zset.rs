//! A sorted set: members with scores, ordered by (score, member), with its content hash: the
//! XOR of its pairs' hashes (`element_hash(5, member, score bits LE)`), so the pairs alone count.
//!
//! Two indexes: member to score (a hash table, for ZSCORE and updates) and (score, member) in
//! order (a B-tree, for ranges). A rank costs O(rank) (the B-tree keeps no counts), as a range
//! from the start does; Redis's skiplist answers ranks in O(log n).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;

use crate::state_machine::digest::element_hash;
use crate::state_machine::value::{CollectionValue, Value};

/// A score: never NaN, and 0 for negative zero, so that equal scores are equal bits (the digest
/// and the snapshot see bits).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Score(f64);

impl Score {
    /// None for NaN.
    pub(crate) fn new(score: f64) -> Option<Score> {
        if score.is_nan() {
            None
        } else if score == 0.0 {
            Some(Score(0.0))
        } else {
            Some(Score(score))
        }
    }

    pub(crate) fn get(self) -> f64 {
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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ZSet {
    scores: HashMap<Bytes, Score>,
    order: BTreeSet<(Score, Bytes)>,
    hash: u64,
    member_bytes: u64,
}

fn pair_hash(member: &[u8], score: Score) -> u64 {
    element_hash(5, member, &score.0.to_bits().to_le_bytes())
}

impl ZSet {
    pub(crate) fn score(&self, member: &[u8]) -> Option<Score> {
        self.scores.get(member).copied()
    }

    /// Sets `member`'s score; its old one if it had one.
    pub(crate) fn insert(&mut self, member: Bytes, score: Score) -> Option<Score> {
        let old = self.remove(&member);
        self.hash ^= pair_hash(&member, score);
        self.member_bytes += member.len() as u64;
        self.order.insert((score, member.clone()));
        self.scores.insert(member, score);
        old
    }

    /// Removes `member`; its score if it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> Option<Score> {
        let (member, score) = self.scores.remove_entry(member)?;
        self.hash ^= pair_hash(&member, score);
        self.member_bytes -= member.len() as u64;
        self.order.remove(&(score, member));
        Some(score)
    }

    /// Every pair in (score, member) order.
    pub(crate) fn ascending(&self) -> impl DoubleEndedIterator<Item = &(Score, Bytes)> {
        self.order.iter()
    }

    /// The pairs with scores in a range, in ascending order.
    pub(crate) fn by_score(&self, min: Bound<Score>, max: Bound<Score>) -> Vec<&(Score, Bytes)> {
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
    pub(crate) fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(
            self.order
                .range(..(score, Bytes::copy_from_slice(member)))
                .count(),
        )
    }

    /// Every pair in ascending member order: snapshots.
    pub(crate) fn by_member(&self) -> Vec<(&Bytes, Score)> {
        let mut pairs: Vec<(&Bytes, Score)> = self.scores.iter().map(|(m, s)| (m, *s)).collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        pairs
    }
}

collection_impl!(ZSet, ZSet, scores, member_bytes);
