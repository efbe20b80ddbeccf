//! The apply pipeline: the one ordered pipeline that feeds the state machine (docs/DESIGN.md
//! section 4).
//!
//! Items arrive in log order: committed entries, snapshot restores, linearizable reads (queued
//! only once every entry up to the read index was queued before them) and snapshot requests.
//! [`ApplyQueue`] holds them in that order until the [`Applier`] takes them; the applier checks
//! the order it is given (an entry is the one after the applied index, a restore moves past it)
//! and refuses anything else with a [`PipelineError`], which the runtime turns into a fail-stop
//! and the simulator into a violation: a state machine that skipped or repeated an entry would
//! diverge from the others silently. With the `apply-snapshot-over-pending` mutation a restore
//! jumps ahead of queued entries.
//!
//! [`SnapshotPolicy`] decides when a snapshot is due: once the entry data applied since the last
//! one is a multiple of that snapshot's file size, within a lower and an upper byte bound and an
//! entry bound (the runtime's defaults: 4 times, 16 MiB, 256 MiB, 1,000,000 entries), so the
//! work spent on snapshots stays a bounded share of the log's bytes however large the state
//! grows, and the log kept meanwhile (in memory) is bounded.

use std::collections::VecDeque;

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, Index, SnapshotMeta};

use crate::state_machine::{ApplyError, SnapshotWriter, StateMachine};

/// One item of the pipeline. `P` is how a proposer is answered, `R` a read waiting for the
/// state, `F` the snapshot a restore reads (an open file in the runtime, bytes in the simulator).
pub enum ApplyItem<P, R, F> {
    /// Committed entries, in order, each with its proposer's answer if this node proposed it.
    Entries(Vec<(Entry, Option<P>)>),
    /// Replace the state by the snapshot at `meta.last`.
    Restore {
        /// What the snapshot covers.
        meta: SnapshotMeta,
        /// Where its bytes are read from.
        snapshot: F,
    },
    /// A linearizable read, queued once every entry up to its read index was queued before it:
    /// served from the state this item finds.
    Read(R),
    /// Take a snapshot now (at whatever is applied).
    Snapshot,
}

/// The pipeline's queue, in log order.
///
/// Unbounded as a container, bounded in effect: it holds only committed entries the core handed
/// out (at most `unapplied_entries_max` beyond what was applied), reads (bounded by the node's
/// pending-read limit) and restores (one per install).
pub struct ApplyQueue<P, R, F> {
    items: VecDeque<ApplyItem<P, R, F>>,
    #[cfg(feature = "mutations")]
    mutation: Option<keel_core::Mutation>,
}

impl<P, R, F> Default for ApplyQueue<P, R, F> {
    fn default() -> Self {
        ApplyQueue {
            items: VecDeque::new(),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }
}

impl<P, R, F> ApplyQueue<P, R, F> {
    /// Test-only: a deliberately broken queue (see `keel_core::Mutation`).
    #[cfg(feature = "mutations")]
    pub fn with_mutation(mutation: Option<keel_core::Mutation>) -> Self {
        ApplyQueue {
            items: VecDeque::new(),
            mutation,
        }
    }

    /// Queues `item` behind everything queued before it.
    pub fn push(&mut self, item: ApplyItem<P, R, F>) {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(keel_core::Mutation::ApplySnapshotOverPending)
            && matches!(item, ApplyItem::Restore { .. })
        {
            // Broken on purpose: the restore overtakes the committed entries still queued.
            self.items.push_front(item);
            return;
        }
        self.items.push_back(item);
    }

    /// The oldest item, if any.
    pub fn pop(&mut self) -> Option<ApplyItem<P, R, F>> {
        self.items.pop_front()
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Why the [`Applier`] stopped: an item out of log order (applying it would make this replica
/// diverge from the others), or a state machine that cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// An entry other than the one right after the applied index: a gap or a repeat.
    #[error("entry {index} reached the state machine after entry {applied}: entries apply in order, each once")]
    OutOfOrder {
        /// The entry's index.
        index: Index,
        /// The applied index it should have followed.
        applied: Index,
    },
    /// A restore of a snapshot at or below the applied index: it would move the state back.
    #[error("a restore of the snapshot at {index} reached the state machine at applied index {applied}: a restore moves past what was applied")]
    RestoreBehind {
        /// The snapshot's last index.
        index: Index,
        /// The applied index.
        applied: Index,
    },
    /// The state machine failed to apply the entry at `index` (`ApplyError::Fatal`) or to
    /// restore the snapshot at `index`: the applied index stays below it.
    #[error("the state machine failed at {index}: {message}")]
    StateMachine {
        /// The entry or snapshot it failed on.
        index: Index,
        /// Its error.
        message: String,
    },
}

/// When a snapshot is due. A snapshot rewrites the whole state, so its cost grows with the state,
/// while the log it lets the node drop grows with the writes: taking one only once the log since
/// the last one is a multiple of that snapshot's size keeps the share of work spent on snapshots
/// bounded (about `1 / log_to_state_ratio` of the log's bytes) whatever the state's size. The
/// bounds on entries and bytes cap the log kept meanwhile (it is held in memory).
#[derive(Clone, Copy, Debug)]
pub struct SnapshotPolicy {
    /// At most this many entries applied between snapshots.
    pub entries_max: u64,
    /// At most this many bytes of entry data applied between snapshots.
    pub bytes_max: u64,
    /// At least this many bytes between snapshots (unless `entries_max` comes first), so a small
    /// state is not snapshotted after every few writes.
    pub bytes_min: u64,
    /// Between the two byte bounds: wait for this multiple of the last snapshot's size.
    pub log_to_state_ratio: u64,
}

impl SnapshotPolicy {
    /// Whether a snapshot is due after `entries` entries holding `bytes` bytes of data were
    /// applied since the last one, whose file was `last_snapshot_bytes` long.
    pub fn due(&self, entries: u64, bytes: u64, last_snapshot_bytes: u64) -> bool {
        let proportional = self.log_to_state_ratio.saturating_mul(last_snapshot_bytes);
        let bytes_threshold = proportional.max(self.bytes_min).min(self.bytes_max);
        entries >= self.entries_max || bytes >= bytes_threshold
    }
}

/// The state machine with its position in the log.
pub struct Applier<S> {
    sm: S,
    applied: Index,
    snapshot_index: Index,
    bytes_since_snapshot: u64,
    policy: SnapshotPolicy,
}

impl<S: StateMachine> Applier<S> {
    /// A state machine whose state is that of the log up to `applied` (restored from the
    /// snapshot there, or empty at 0).
    pub fn new(sm: S, applied: Index, policy: SnapshotPolicy) -> Self {
        Applier {
            sm,
            applied,
            snapshot_index: applied,
            bytes_since_snapshot: 0,
            policy,
        }
    }

    /// The index of the last entry the state reflects (applied, or covered by the last
    /// restore).
    pub fn applied(&self) -> Index {
        self.applied
    }

    /// The state machine, as of [`Applier::applied`].
    pub fn state(&self) -> &S {
        &self.sm
    }

    /// Applies a batch of entries in order. For each, `applied` is called with the entry, its
    /// proposer's answer (if any), the state machine's result (`Err`: its refusal's reason) and
    /// the state after it. A fatal error of the state machine ends the batch there: that entry
    /// and the ones after it are not applied (their proposers' answers are dropped).
    pub fn apply_entries<P>(
        &mut self,
        batch: Vec<(Entry, Option<P>)>,
        mut applied: impl FnMut(&Entry, Option<P>, Result<Bytes, Bytes>, &S),
    ) -> Result<(), PipelineError> {
        for (entry, reply) in batch {
            if entry.index != self.applied + 1 {
                return Err(PipelineError::OutOfOrder {
                    index: entry.index,
                    applied: self.applied,
                });
            }
            let result = match &entry.payload {
                EntryPayload::Normal(data) => match self.sm.apply(entry.log_id(), data) {
                    Ok(result) => Ok(result),
                    Err(ApplyError::Refused(reason)) => Err(reason),
                    Err(ApplyError::Fatal(message)) => {
                        return Err(PipelineError::StateMachine {
                            index: entry.index,
                            message,
                        })
                    }
                },
                EntryPayload::Noop | EntryPayload::Membership(_) => Ok(Bytes::new()),
            };
            if let EntryPayload::Normal(data) = &entry.payload {
                self.bytes_since_snapshot += data.len() as u64;
            }
            self.applied = entry.index;
            applied(&entry, reply, result, &self.sm);
        }
        Ok(())
    }

    /// Whether the policy asks for a snapshot now, the last one's file being
    /// `last_snapshot_bytes` long.
    pub fn snapshot_due(&self, last_snapshot_bytes: u64) -> bool {
        self.policy.due(
            self.applied - self.snapshot_index,
            self.bytes_since_snapshot,
            last_snapshot_bytes,
        )
    }

    /// Captures a view of the state at the applied index, to be serialized elsewhere.
    pub fn take_snapshot(&mut self) -> (Index, Box<dyn SnapshotWriter>) {
        self.snapshot_index = self.applied;
        self.bytes_since_snapshot = 0;
        (self.applied, self.sm.snapshot_view())
    }

    /// Replaces the state by the snapshot at `meta.last` (its bytes: `data`). Entries at or below
    /// it never come after it (the core drops them).
    pub fn restore(
        &mut self,
        meta: &SnapshotMeta,
        data: &mut dyn std::io::Read,
    ) -> Result<(), PipelineError> {
        if meta.last.index <= self.applied {
            return Err(PipelineError::RestoreBehind {
                index: meta.last.index,
                applied: self.applied,
            });
        }
        self.sm
            .restore(meta.last, data)
            .map_err(|e| PipelineError::StateMachine {
                index: meta.last.index,
                message: e.0,
            })?;
        self.applied = meta.last.index;
        self.snapshot_index = self.applied;
        self.bytes_since_snapshot = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
