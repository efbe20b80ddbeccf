//! [`BlockedClients`]: the clients of this node waiting in a blocking pop, by key, and what wakes
//! them (the apply of an entry that filled one of their keys).
//!
//! Each key has a queue of its waiters in the order they blocked. A filled key wakes only the
//! first of its queue: it proposes an attempt (`connection/blocking.rs`) and, if that takes an
//! element, leaves the queue and wakes the next one, which tries in turn; if it takes nothing
//! (a client of another node got there first, or the key is empty again), it stays first and
//! waits for the next fill. So the clients of one node are served first come, first served, and
//! one fill of many elements serves many waiters one after another. A waiter that leaves for any
//! other reason (its timeout, its connection closed) while woken hands the wake on.
//!
//! Bounds: one waiter per connection (a blocked connection reads nothing else), so at most
//! `maxclients` waiters; a waiter names at most the keys of one request.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Notify;

/// The waiters of this node; see the module documentation.
#[derive(Debug, Default)]
pub struct BlockedClients {
    /// How many waiters are registered: read by the apply thread before every entry.
    waiting: AtomicUsize,
    /// Each key's waiters, first come first.
    queues: Mutex<HashMap<Bytes, VecDeque<Arc<Waiter>>>>,
}

/// One blocked client.
#[derive(Debug, Default)]
pub struct Waiter {
    notify: Notify,
    /// Woken and not yet done with it: handed on if it leaves without an element.
    woken: AtomicBool,
}

impl Waiter {
    /// Waits for a wake.
    pub async fn woken(&self) {
        self.notify.notified().await;
    }

    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

/// A client's place in the queues of its keys; leaving them when dropped.
pub struct Registration {
    blocked: Arc<BlockedClients>,
    waiter: Arc<Waiter>,
    keys: Vec<Bytes>,
    /// Whether the wake is handed on when it leaves (set by [`Registration::served`]).
    served: bool,
    /// Whether it was first in the queue of one of its keys when it joined.
    first: bool,
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
        self.waiter.woken.store(false, Ordering::Release);
    }

    /// The client was answered by its attempt (an element, or an error that took nothing):
    /// whoever is next on its keys is woken when it leaves (there may be more to take).
    pub fn served(mut self) {
        self.served = true;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let hand_on = self.served || self.waiter.woken.load(Ordering::Acquire);
        self.blocked.leave(&self.waiter, &self.keys, hand_on);
    }
}

impl BlockedClients {
    /// Puts a client at the end of the queue of each of `keys` (a key named twice once).
    pub fn register(self: &Arc<Self>, keys: &[Bytes]) -> Registration {
        let waiter = Arc::new(Waiter::default());
        let mut unique: Vec<Bytes> = Vec::with_capacity(keys.len());
        for key in keys {
            if !unique.contains(key) {
                unique.push(key.clone());
            }
        }
        let mut first = false;
        {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            for key in &unique {
                let queue = queues.entry(Bytes::copy_from_slice(key)).or_default();
                first |= queue.is_empty();
                queue.push_back(Arc::clone(&waiter));
            }
            self.waiting.fetch_add(1, Ordering::AcqRel);
        }
        Registration {
            blocked: Arc::clone(self),
            waiter,
            keys: unique,
            served: false,
            first,
        }
    }

    fn leave(&self, waiter: &Arc<Waiter>, keys: &[Bytes], hand_on: bool) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            let Some(queue) = queues.get_mut(key) else {
                continue;
            };
            queue.retain(|w| !Arc::ptr_eq(w, waiter));
            match queue.front() {
                None => {
                    queues.remove(key);
                }
                Some(next) if hand_on => next.wake(),
                Some(_) => {}
            }
        }
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many clients wait now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Wakes the first waiter of each of `keys` that has one.
    pub fn wake_first(&self, keys: &[Bytes]) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            if let Some(first) = queues.get(key).and_then(VecDeque::front) {
                first.wake();
            }
        }
    }

    /// Wakes the first waiter of every key.
    pub fn wake_all_first(&self) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for first in queues.values().filter_map(VecDeque::front) {
            first.wake();
        }
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

    fn keys(names: &[&str]) -> Vec<Bytes> {
        names
            .iter()
            .map(|n| Bytes::copy_from_slice(n.as_bytes()))
            .collect()
    }

    fn is_woken(registration: &Registration) -> bool {
        registration.waiter.woken.load(Ordering::Acquire)
    }

    #[test]
    fn a_fill_wakes_the_first_waiter_only_and_a_served_one_hands_on() {
        let blocked = Arc::new(BlockedClients::default());
        let first = blocked.register(&keys(&["q", "q"]));
        let second = blocked.register(&keys(&["q"]));
        let other = blocked.register(&keys(&["r"]));
        assert!(first.first_in_line() && !second.first_in_line() && other.first_in_line());
        assert_eq!(blocked.waiting(), 3);
        blocked.wake_first(&keys(&["q"]));
        assert!(is_woken(&first) && !is_woken(&second) && !is_woken(&other));
        first.served();
        assert!(is_woken(&second), "the next in line tries next");
        assert_eq!(blocked.waiting(), 2);
        // Tried and took nothing: it stays first, and leaving without having been woken since
        // hands nothing on.
        second.attempting();
        let third = blocked.register(&keys(&["q"]));
        drop(second);
        assert!(!is_woken(&third));
        drop((third, other));
        assert_eq!(blocked.waiting(), 0);
        assert!(blocked.queues.lock().unwrap().is_empty(), "no queue left");
    }

    #[test]
    fn a_woken_waiter_that_leaves_unserved_hands_the_wake_on() {
        let blocked = Arc::new(BlockedClients::default());
        let first = blocked.register(&keys(&["a", "b"]));
        let on_a = blocked.register(&keys(&["a"]));
        let on_b = blocked.register(&keys(&["b"]));
        blocked.wake_all_first();
        assert!(is_woken(&first));
        drop(first);
        assert!(is_woken(&on_a) && is_woken(&on_b));
    }

    #[tokio::test]
    async fn a_wake_before_the_wait_is_not_lost() {
        let blocked = Arc::new(BlockedClients::default());
        let waiter = blocked.register(&keys(&["q"]));
        blocked.wake_first(&keys(&["q"]));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter.waiter().woken())
            .await
            .expect("the stored wake");
    }
}
