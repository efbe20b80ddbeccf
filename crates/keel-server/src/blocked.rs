//! [`BlockedClients`]: the clients of this node waiting in a blocking pop (or XREAD, XREADGROUP
//! with BLOCK), and what wakes them (the apply of an entry that filled one of their keys, or
//! changed whole databases).
//!
//! Who waits on which key, who is first and whom a fill or a leaving waiter wakes is
//! keel-session's [`Waiters`] (the simulator runs the same); this is its thread-safe shell: the
//! registry behind a lock, and a [`Notify`] per waiter that its connection's task awaits. The
//! apply thread reads the count of waiters before every entry without taking the lock.
//!
//! Bounds: one waiter per connection (a blocked connection reads nothing else), so at most
//! `maxclients` waiters; a waiter names at most the keys of one request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_session::blocked::{WaiterId, Waiters};
use keel_session::connection::ClientRecord;
use tokio::sync::Notify;

/// The waiters of this node; see the module documentation.
#[derive(Debug, Default)]
pub struct BlockedClients {
    /// How many waiters are registered: read by the apply thread before every entry.
    waiting: AtomicUsize,
    /// How many of them wait as Redis's blocked clients do (past their first attempt, or
    /// waiting for their turn): `INFO clients`' `blocked_clients`.
    blocked: AtomicUsize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    waiters: Waiters,
    /// Each waiter's signal, by id.
    signals: HashMap<WaiterId, Arc<Waiter>>,
}

impl Inner {
    fn signal(&self, woken: Vec<WaiterId>) {
        for id in woken {
            if let Some(waiter) = self.signals.get(&id) {
                waiter.notify.notify_one();
            }
        }
    }
}

/// One blocked client's wake-up signal.
#[derive(Debug, Default)]
pub struct Waiter {
    notify: Notify,
}

impl Waiter {
    /// Waits for a wake (one given before the wait is kept for it).
    pub async fn woken(&self) {
        self.notify.notified().await;
    }
}

/// A client's place in the queues of its keys; leaving them when dropped.
pub struct Registration {
    blocked: Arc<BlockedClients>,
    id: WaiterId,
    waiter: Arc<Waiter>,
    /// Whether the wake is handed on when it leaves (set by [`Registration::served`]).
    served: bool,
    /// Whether it was first in the queue of one of its keys when it joined.
    first: bool,
    /// Its connection, once it waits ([`Registration::waits`]).
    record: Option<Arc<ClientRecord>>,
}

impl Registration {
    pub fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    /// Whether it joined first in line on one of its keys: otherwise it waits for its turn
    /// before it tries (a client that blocked earlier on its keys is woken first).
    pub fn first_in_line(&self) -> bool {
        self.first
    }

    /// The client proposes an attempt now: a wake that comes after this one is one the attempt
    /// may not have seen, to hand on if it leaves without trying again.
    pub fn attempting(&self) {
        self.blocked.lock().waiters.attempting(self.id);
    }

    /// The client counts as blocked from now (`blocked_clients`, CLIENT LIST's `b`), and CLIENT
    /// UNBLOCK may end its wait (taken when it waits). A blocked XREAD calls this only once its
    /// first attempt resolved its `$`, so that a client that sees it blocked and then adds an
    /// entry is sure to have it served; the others when they register.
    pub fn waits(&mut self, record: &Arc<ClientRecord>) {
        if self.record.is_none() {
            record.blocked.begin();
            self.blocked.blocked.fetch_add(1, Ordering::AcqRel);
            self.record = Some(Arc::clone(record));
        }
    }

    /// The client was answered by its attempt (an element, or an error that took nothing):
    /// whoever is next on its keys is woken when it leaves (there may be more to take).
    pub fn served(mut self) {
        self.served = true;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            record.blocked.end();
            self.blocked.blocked.fetch_sub(1, Ordering::AcqRel);
        }
        let mut inner = self.blocked.lock();
        let woken = inner.waiters.leave(self.id, self.served);
        inner.signals.remove(&self.id);
        self.blocked.waiting.fetch_sub(1, Ordering::AcqRel);
        inner.signal(woken);
    }
}

impl BlockedClients {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts a client at the end of the queue of each of `keys` (a key named twice once);
    /// `reader` if it takes nothing (a blocked XREAD).
    pub fn register(self: &Arc<Self>, keys: &[Bytes], reader: bool) -> Registration {
        let waiter = Arc::new(Waiter::default());
        let joined = {
            let mut inner = self.lock();
            let joined = inner.waiters.join(keys, reader);
            inner.signals.insert(joined.id, Arc::clone(&waiter));
            self.waiting.fetch_add(1, Ordering::AcqRel);
            joined
        };
        Registration {
            blocked: Arc::clone(self),
            id: joined.id,
            waiter,
            served: false,
            first: joined.first_in_line,
            record: None,
        }
    }

    /// How many clients are registered now (some may be making their first attempt).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// How many clients wait as blocked ([`Registration::waits`]).
    pub fn blocked(&self) -> usize {
        self.blocked.load(Ordering::Acquire)
    }

    /// Wakes the first waiter of each of `keys` that has one.
    pub fn wake_first(&self, keys: &[Bytes]) {
        let mut inner = self.lock();
        let woken = inner.waiters.wake_first(keys);
        inner.signal(woken);
    }

    /// Wakes the first waiter of every key.
    pub fn wake_all_first(&self) {
        let mut inner = self.lock();
        let woken = inner.waiters.wake_all_first();
        inner.signal(woken);
    }
}

impl keel_redis::FilledKeysListener for BlockedClients {
    fn waiting(&self) -> bool {
        BlockedClients::waiting(self) > 0
    }

    fn filled(&self, keys: Vec<Bytes>) {
        self.wake_first(&keys);
    }

    fn restored(&self) {
        self.wake_all_first();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue logic is keel-session's (tested there); this is the signal around it.
    #[tokio::test]
    async fn a_wake_reaches_the_waiter_and_one_before_the_wait_is_not_lost() {
        let blocked = Arc::new(BlockedClients::default());
        let key = [Bytes::from_static(b"q")];
        let mut first = blocked.register(&key, false);
        let second = blocked.register(&key, false);
        let record = Arc::new(ClientRecord::new(1, String::new(), String::new(), -1));
        first.waits(&record);
        first.waits(&record);
        assert_eq!(blocked.blocked(), 1, "counted once, once it waits");
        assert!(record.blocked.is_blocked());
        assert!(first.first_in_line() && !second.first_in_line());
        assert_eq!(blocked.waiting(), 2);
        blocked.wake_first(&key);
        let wait = std::time::Duration::from_secs(5);
        tokio::time::timeout(wait, first.waiter().woken())
            .await
            .expect("the stored wake");
        first.served();
        assert_eq!(blocked.waiting(), 1);
        assert_eq!(blocked.blocked(), 0);
        assert!(!record.blocked.is_blocked());
        tokio::time::timeout(wait, second.waiter().woken())
            .await
            .expect("the wake handed on");
        drop(second);
        assert_eq!(blocked.waiting(), 0);
        assert!(blocked.lock().signals.is_empty());
    }
}
