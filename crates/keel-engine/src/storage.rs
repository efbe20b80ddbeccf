//! The storage worker's decisions: group commit, completion reports, and snapshot adoptions kept
//! in order with the writes around them.
//!
//! Writes arrive in `ready()` order. While one batch is written (and synced), the node keeps
//! queueing; the next batch takes every write queued up to the next adoption (at most
//! [`GROUP_COMMIT_WRITES_MAX`]), so one sync covers many writes under load. Completion is reported
//! as the last write id of the batch: `persisted(id)` means "this and every earlier write".
//!
//! An adoption (a complete snapshot file made the newest snapshot) is ordered with the writes
//! around it: a later write may purge up to it or install it, which the log refuses unless it is
//! already saved.
//!
//! The runtime's storage thread and the simulator's disks run this code over their own
//! [`LogStore`] (the WAL on real files, or the WAL on the fault-injecting file layer and the
//! in-memory storage). [`StorageWorker::in_flight`] lists the writes handed over and not yet
//! reported: what a crash may tear. With the `storage-complete-before-sync` mutation a batch is
//! reported before it is written.

use std::collections::VecDeque;

use keel_core::Write;

/// Bound on the writes one group commit takes, so one batch's buffer stays bounded even when the
/// node produces writes as fast as they are drained.
pub const GROUP_COMMIT_WRITES_MAX: usize = 1024;

/// What the storage worker needs from a log store.
pub trait LogStore {
    /// A failure after which the node must stop (a failed write or sync: never retried).
    type Error;
    /// What an adoption is given (a snapshot file, or the simulator's snapshot).
    type Adoption;
    /// What an adoption reports.
    type Adopted;

    /// Makes `writes` durable together (one write and one sync for all of them).
    fn write_batch(&mut self, writes: &[Write]) -> Result<(), Self::Error>;
    /// Makes a complete snapshot the newest one. `Ok(None)`: not adopted, nothing changed (an
    /// older snapshot than the one saved, or a file that does not verify).
    fn adopt(&mut self, adoption: Self::Adoption) -> Result<Option<Self::Adopted>, Self::Error>;
}

/// One unit of work handed to the [`StorageWorker`], run in the order submitted. `A` is the
/// store's [`LogStore::Adoption`].
pub enum StorageCommand<A> {
    /// A write from a `Ready`: consecutive writes are committed as one group (at most
    /// [`GROUP_COMMIT_WRITES_MAX`]).
    Write(Write),
    /// Make a complete snapshot the newest one, after every write submitted before it.
    Adopt(A),
}

/// What one unit of work completed.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion<T> {
    /// This write and every earlier one are durable.
    Persisted(u64),
    /// The snapshot was adopted; `T` is the store's [`LogStore::Adopted`] report.
    Adopted(T),
    /// The snapshot was not adopted and nothing changed (see [`LogStore::adopt`]).
    NotAdopted,
}

/// A [`LogStore`] with its queue of commands: runs them in order, one group commit or one
/// adoption at a time (see the module documentation).
pub struct StorageWorker<S: LogStore> {
    store: S,
    queue: VecDeque<StorageCommand<S::Adoption>>,
    /// `storage-complete-before-sync`: the batch reported durable and not yet written.
    #[cfg(feature = "mutations")]
    deferred: Vec<Write>,
    #[cfg(feature = "mutations")]
    mutation: Option<keel_core::Mutation>,
}

impl<S: LogStore> StorageWorker<S> {
    /// A worker over `store`, with nothing queued.
    pub fn new(store: S) -> Self {
        StorageWorker {
            store,
            queue: VecDeque::new(),
            #[cfg(feature = "mutations")]
            deferred: Vec::new(),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: a deliberately broken worker (see `keel_core::Mutation`).
    #[cfg(feature = "mutations")]
    pub fn with_mutation(store: S, mutation: Option<keel_core::Mutation>) -> Self {
        StorageWorker {
            mutation,
            ..StorageWorker::new(store)
        }
    }

    /// The store. It reflects only the work already run, not what is still queued.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, with everything queued dropped (a crash).
    pub fn into_store(self) -> S {
        self.store
    }

    /// The store, to act on beside the queue: nothing done through it is ordered with the
    /// queued commands.
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Queues a command behind every command queued before it.
    pub fn submit(&mut self, command: StorageCommand<S::Adoption>) {
        self.queue.push_back(command);
    }

    /// Writes handed to the worker and not yet durable, oldest first: what a crash may tear.
    pub fn in_flight(&self) -> impl Iterator<Item = &Write> {
        #[cfg(feature = "mutations")]
        let deferred = self.deferred.iter();
        #[cfg(not(feature = "mutations"))]
        let deferred = std::iter::empty();
        deferred.chain(self.queue.iter().filter_map(|c| match c {
            StorageCommand::Write(w) => Some(w),
            StorageCommand::Adopt(_) => None,
        }))
    }

    /// Runs the next unit of work — one group commit, or one adoption — and returns what it
    /// completed; `None` when nothing is queued.
    pub fn run_next(&mut self) -> Option<Result<Completion<S::Adopted>, S::Error>> {
        match self.queue.pop_front()? {
            StorageCommand::Write(first) => {
                let mut batch = vec![first];
                while batch.len() < GROUP_COMMIT_WRITES_MAX {
                    match self.queue.front() {
                        Some(StorageCommand::Write(_)) => match self.queue.pop_front() {
                            Some(StorageCommand::Write(w)) => batch.push(w),
                            _ => unreachable!("the front is a write"),
                        },
                        _ => break,
                    }
                }
                let last_id = batch.last().expect("one write at least").id;
                Some(self.write(batch).map(|()| Completion::Persisted(last_id)))
            }
            StorageCommand::Adopt(adoption) => Some(self.adopt(adoption)),
        }
    }

    fn write(&mut self, batch: Vec<Write>) -> Result<(), S::Error> {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(keel_core::Mutation::StorageCompleteBeforeSync) {
            // Broken on purpose: this batch is reported durable now and written only with the
            // next unit of work.
            let earlier = std::mem::replace(&mut self.deferred, batch);
            return match earlier.is_empty() {
                true => Ok(()),
                false => self.store.write_batch(&earlier),
            };
        }
        self.store.write_batch(&batch)
    }

    fn adopt(&mut self, adoption: S::Adoption) -> Result<Completion<S::Adopted>, S::Error> {
        #[cfg(feature = "mutations")]
        if !self.deferred.is_empty() {
            let earlier = std::mem::take(&mut self.deferred);
            self.store.write_batch(&earlier)?;
        }
        Ok(match self.store.adopt(adoption)? {
            Some(adopted) => Completion::Adopted(adopted),
            None => Completion::NotAdopted,
        })
    }
}

#[cfg(test)]
mod tests;
