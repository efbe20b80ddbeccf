//! What a recovering node knows of the log that held its promise (the *former* log), and what a
//! peer can tell from it about its own log (`repair.rs`).
//!
//! The promise record keeps the first index of each of the former log's last terms (keel-wal's
//! `promise.rs`). Only the leader of a term writes entries of that term, at the indexes its own
//! log gives them, and never changes them. So if the former log's last entry of term `t` is at
//! `e`, any log's entry of term `t` at an index up to `e` is the former log's entry there, and by
//! Log Matching so is everything before it; an entry at an index the former log gives term `t`
//! is the former one exactly when its term is `t`.
//!
//! `FormerTerms` holds those term starts; `held_by` names the last entry of a log that is the
//! former log's entry at its index (which of a peer's entries are the lost ones), and `lacked_by`
//! whether a log holds none of the former entries after a point.

use crate::log::RaftLog;
use crate::types::{Index, LogId, Term};

/// The first index of each term of the former log that the node knows, rising in term and
/// index, the last one of the promised term (the first may be clipped: the term may start
/// earlier).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FormerTerms {
    promised: LogId,
    starts: Vec<LogId>,
}

impl FormerTerms {
    /// From the promise record's term starts, if they describe a log ending at `promised`
    /// (rising, the last one of its term, none after it); else (a record of format version 1
    /// kept none) only the promised entry is known.
    pub fn new(promised: LogId, recorded: &[LogId]) -> Self {
        let rising = recorded
            .windows(2)
            .all(|w| w[0].term < w[1].term && w[0].index < w[1].index);
        let ends = recorded
            .last()
            .is_some_and(|last| last.term == promised.term && last.index <= promised.index);
        let starts = match rising && ends {
            true => recorded.to_vec(),
            false => vec![promised],
        };
        FormerTerms { promised, starts }
    }

    /// As a peer received them in a repair request (validated: `validate.rs`).
    pub fn received(promised: LogId, starts: Vec<LogId>) -> Self {
        FormerTerms { promised, starts }
    }

    pub fn promised(&self) -> LogId {
        self.promised
    }

    /// What is known of the former log through `point`, one of its entries: the promise
    /// lowered to it (`repair.rs`).
    pub fn lowered_to(&self, point: LogId) -> Self {
        let through = self.starts.partition_point(|s| s.index <= point.index);
        let starts = match through.checked_sub(1) {
            Some(at) if self.starts[at].term == point.term => self.starts[..through].to_vec(),
            _ => vec![point],
        };
        FormerTerms {
            promised: point,
            starts,
        }
    }

    /// What is known after `last`: the starts after it, and the start of the term that holds
    /// `last.index + 1`, if known, clipped to it.
    pub fn after(&self, last: LogId) -> Vec<LogId> {
        let next = last.index + 1;
        let later = self.starts.partition_point(|s| s.index <= next);
        let covering = later
            .checked_sub(1)
            .map(|at| LogId::new(self.starts[at].term, next));
        covering
            .into_iter()
            .chain(self.starts[later..].iter().copied())
            .collect()
    }

    /// The former log's term at `index`: `Ok` when a known start covers it, else `Err` with the
    /// highest it can be (the first known start's term: terms rise along a log).
    pub fn term_at(&self, index: Index) -> Result<Term, Term> {
        let at = self.starts.partition_point(|s| s.index <= index);
        match at.checked_sub(1) {
            Some(i) => Ok(self.starts[i].term),
            None => Err(self.starts.first().map_or(self.promised.term, |s| s.term)),
        }
    }

    /// The last entry of each known term, newest first.
    fn term_ends(&self) -> impl Iterator<Item = LogId> + '_ {
        (0..self.starts.len()).rev().map(|k| {
            let end = self
                .starts
                .get(k + 1)
                .map_or(self.promised.index, |next| next.index - 1);
            LogId::new(self.starts[k].term, end)
        })
    }

    /// The last entry of `log` that is the former log's entry at its index (module
    /// documentation): `log` and the former log agree through it.
    pub fn held_by(&self, log: &RaftLog) -> Option<LogId> {
        self.term_ends().find_map(|end| {
            let at = log.last_index_of_term_at_most(end.term)?.min(end.index);
            (log.term_of_any(at) == Some(end.term)).then_some(LogId::new(end.term, at))
        })
    }

    /// Whether `log` holds none of the former entries after `last` (a prefix of the former log,
    /// or an entry committed in the cluster): it ends at or before `last.index`, or its entry
    /// after it is of another term than the former one there (by Log Matching it then holds no
    /// later former entry either). Where the former term is unknown, any term from `last.term`
    /// to the highest it can be may be the former one.
    pub fn lacked_by(&self, log: &RaftLog, last: LogId) -> bool {
        let next = last.index + 1;
        if log.last_index() < next {
            return true;
        }
        let Some(term) = log.term_of_any(next) else {
            return false;
        };
        match self.term_at(next) {
            Ok(former) => term != former,
            Err(highest) => term < last.term || term > highest,
        }
    }

    /// Whether `committed`, an entry committed in the cluster, cannot be the former log's entry at
    /// its index (`lowest` the lowest term the former log can have there): then no former entry
    /// from there on was ever committed.
    pub fn differs_from(&self, committed: LogId, lowest: Term) -> bool {
        match self.term_at(committed.index) {
            Ok(former) => committed.term != former,
            Err(highest) => committed.term < lowest || committed.term > highest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::positions;
    use super::*;

    #[test]
    fn recorded_starts_that_do_not_describe_the_promised_log_are_not_used() {
        let promised = LogId::new(5, 40);
        let fits = positions(&[(1, 1), (3, 20), (5, 30)]);
        assert_eq!(FormerTerms::new(promised, &fits).starts, fits);
        // Falling, past the promise, ending in another term, none (format version 1): only the
        // promise is known. (Dropping one start in the middle would stretch the term before it
        // over the dropped one's indexes.)
        for bad in [
            positions(&[(1, 1), (3, 20), (2, 25), (5, 30)]),
            positions(&[(1, 1), (5, 41)]),
            positions(&[(1, 1), (3, 20)]),
            vec![],
        ] {
            assert_eq!(
                FormerTerms::new(promised, &bad).starts,
                vec![promised],
                "{bad:?}"
            );
        }
    }

    #[test]
    fn what_is_known_after_a_position_starts_with_the_term_covering_the_next_index() {
        let former = FormerTerms::new(LogId::new(5, 40), &positions(&[(1, 1), (3, 20), (5, 30)]));
        assert_eq!(
            former.after(LogId::new(1, 10)),
            positions(&[(1, 11), (3, 20), (5, 30)])
        );
        assert_eq!(
            former.after(LogId::new(1, 19)),
            positions(&[(3, 20), (5, 30)])
        );
        assert_eq!(former.after(LogId::new(5, 35)), positions(&[(5, 36)]));
        let clipped = FormerTerms::new(LogId::new(5, 40), &positions(&[(3, 20), (5, 30)]));
        assert_eq!(
            clipped.after(LogId::new(1, 10)),
            positions(&[(3, 20), (5, 30)])
        );
        assert_eq!(
            clipped.term_at(15),
            Err(3),
            "below the first start: at most its term"
        );
        assert_eq!(clipped.term_at(25), Ok(3));
        assert_eq!(clipped.term_at(40), Ok(5));
    }
}
