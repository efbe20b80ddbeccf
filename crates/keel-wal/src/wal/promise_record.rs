//! The promise record's side of the log's writes (layout and rules in `crate::promise`): lowered
//! before a truncation or reset, raised after each synced batch, riding on the log's flushes, and
//! released when the core lets go of a promise it recovered to.

use keel_core::{Index, LogId};

use super::Wal;
use crate::error::Result;
use crate::fs::Fs;
use crate::promise::{Promise, PromiseFile, TermStarts, PROMISE_TERM_STARTS_MAX};

impl<F: Fs> Wal<F> {
    /// The promise is about to be reset to `reset`, or truncated from `truncate_from`: lower it to
    /// the entry the log keeps, durably, before the log changes (promise.rs: the promise never
    /// names an entry the log may legitimately no longer hold). Entries at or below a snapshot
    /// stay covered by it.
    pub(super) fn lower_promise(
        &mut self,
        reset: Option<LogId>,
        truncate_from: Option<Index>,
    ) -> Result<()> {
        let keep = match (reset, truncate_from) {
            (Some(snapshot), _) => snapshot,
            (None, Some(from)) => LogId::new(self.term_at(from - 1).unwrap_or(0), from - 1),
            (None, None) => return Ok(()),
        };
        let Some(current) = self.promise.as_ref().map(PromiseFile::current) else {
            return Ok(());
        };
        if current.acked.index <= keep.index {
            return Ok(());
        }
        let starts = match reset {
            Some(snapshot) => TermStarts::new([snapshot]),
            None => self.term_starts_through(keep.index),
        };
        let file = self.promise.as_mut().expect("checked above");
        let result = file.set(Promise {
            acked: keep,
            starts,
            ..current
        });
        self.poison_on_error(result)
    }

    /// Raises the promise to what is synced now: the synced term and vote, the last entry. Runs
    /// after the log's fsync, never before: a promise durable ahead of its entries would read as
    /// damage after a crash. It becomes durable with the next batch's fsync, or
    /// [`Wal::flush_promise`] if none comes (promise.rs: one flush per group commit, not two).
    pub(super) fn record_promise(&mut self) -> Result<()> {
        let promise = self.synced_promise();
        let Some(file) = self.promise.as_mut() else {
            return Ok(());
        };
        let current = file.current();
        let result = if (promise.term, promise.vote) != (current.term, current.vote) {
            // A new term or vote is flushed at once: rare (elections), and a repair that has to
            // set aside the log's newest segments must still know it (a node never votes twice
            // in a term).
            file.set(promise)
        } else {
            file.raise(promise)
        };
        self.poison_on_error(result)
    }

    /// A log write that will be synced is about to be issued (`fsync_next: false`), or its fsync
    /// (`true`): the raised promise rides along (promise.rs).
    pub(super) fn promise_rides(&mut self, fsync_next: bool) -> Result<()> {
        let Some(file) = self.promise.as_mut() else {
            return Ok(());
        };
        let result = match fsync_next {
            false => file.start(),
            true => file.before_log_sync(),
        };
        self.poison_on_error(result)
    }

    /// Makes the promise raised by the last batch durable now, if it is not: for a runtime whose
    /// log has been idle a while (no next fsync to ride on). Returns whether it flushed.
    pub fn flush_promise(&mut self) -> Result<bool> {
        self.check_usable()?;
        let Some(file) = self.promise.as_mut() else {
            return Ok(false);
        };
        if !file.pending() {
            return Ok(false);
        }
        let result = file.flush();
        self.poison_on_error(result).map(|()| true)
    }

    /// Whether the promise last raised still waits for a flush ([`Wal::flush_promise`]).
    pub fn promise_unflushed(&self) -> bool {
        self.promise.as_ref().is_some_and(PromiseFile::pending)
    }

    /// The promise as last recorded (`None` until open has set it up): durable, or durable with
    /// the next fsync ([`Wal::promise_unflushed`]).
    pub fn promise(&self) -> Option<Promise> {
        self.promise.as_ref().map(PromiseFile::current)
    }

    /// The core let go of the promise it recovered to (`Write::release_promise`): the record
    /// drops to what the synced log holds now and forgets the floor open kept, flushed, so that
    /// a restart does not take the shorter log for damage again.
    pub(super) fn release_promise(&mut self) -> Result<()> {
        let promise = self.synced_promise();
        let Some(file) = self.promise.as_mut() else {
            return Ok(());
        };
        let result = file.release(promise);
        self.poison_on_error(result)
    }

    /// The core lowered the promise it recovers to, to `point`, an entry beyond the log
    /// (`Write::lower_promise_to`): the floor becomes `point`, flushed. Of the lost log's terms
    /// the record then names only `point`'s (a restart asks peers knowing only that entry).
    pub(super) fn lower_promise_floor(&mut self, point: LogId) -> Result<()> {
        let promise = self.synced_promise();
        let Some(file) = self.promise.as_mut() else {
            return Ok(());
        };
        let result = file.lower_floor(point, promise);
        self.poison_on_error(result)
    }

    /// What the synced log promises now: its synced term and vote, and its last entry.
    fn synced_promise(&self) -> Promise {
        let last = LogId::new(self.term_at(self.last_index).unwrap_or(0), self.last_index);
        Promise::of(
            &self.synced_hard_state,
            last,
            self.term_starts_through(last.index),
        )
    }

    /// The first index of each of the log's last terms through `index` (the base position
    /// first, standing for its term's start: the log knows no earlier one).
    pub(super) fn term_starts_through(&self, index: Index) -> TermStarts {
        // Only the last few are kept: found by bisection, since this runs once per group commit
        // and a long-lived log has seen many terms.
        let after_base = self.terms.partition_point(|t| t.index <= self.base.index);
        let through = self.terms.partition_point(|t| t.index <= index);
        let from = after_base.max(through.saturating_sub(PROMISE_TERM_STARTS_MAX));
        let later = self.terms[from.min(through)..through].iter().copied();
        let starts = TermStarts::new(std::iter::once(self.base).chain(later));
        debug_assert!(starts
            .as_slice()
            .last()
            .is_some_and(|s| Some(s.term) == self.term_at(index)));
        starts
    }
}
