//! [`Waiters`]: the clients of one node waiting in a blocking pop (or a blocked XREAD or
//! XREADGROUP), by key, and whom a fill wakes;
//! without I/O, threads or a clock, so that the server (keel-server's `blocked.rs`, a lock and a
//! wake-up signal around it) and the simulator decide alike who tries next.
//!
//! Each key has a queue of its waiters in the order they joined. A filled key wakes only the first
//! of its queue: it proposes an attempt and, if that takes an element (or answers an error), it
//! leaves [`served`](Waiters::leave) and the wake is handed on to the next one, which tries in
//! turn; if it takes nothing (a client of another node got there first, or the key is empty again),
//! it stays first and waits for the next fill. So the clients of one node are served first come,
//! first served, and one fill of many elements serves many waiters one after another. A waiter
//! that leaves for any other reason (its timeout, its connection closed) while woken hands the
//! wake on too: the fill it was woken for may still serve the next one.
//!
//! A *reader* (a blocked XREAD) takes nothing from what it is served: it is not in anyone's way.
//! A fill wakes every reader of the key besides its first taker, a reader tries at once when it
//! joins (it need not wait for its turn), and a reader that leaves hands nothing on (the fill
//! that served it woke the first taker too). Takers (the pops, XREADGROUP) keep their order among
//! themselves, readers or not around them.
//!
//! Every operation returns the waiters to wake; the caller signals them. Bounds: one waiter per
//! blocked connection (a blocked connection reads nothing else), so at most as many as the node
//! has clients; a waiter names at most the keys of one request.
//!
//! The attempt's deadline in the log's time comes from [`attempt_deadline_ms`]: the client's own
//! deadline, at most [`ATTEMPT_WINDOW_MS`] away, plus [`CLOCK_SLACK_MS`] for the leader's clock
//! (which stamps the log) being ahead of this node's.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

/// The longest an attempt may wait for the log: one that applies later takes nothing.
pub const ATTEMPT_WINDOW_MS: u64 = 10_000;

/// How far ahead of this node's clock the leader's may be without an attempt taking nothing for
/// being late: what the cluster's clocks are assumed to agree within.
pub const CLOCK_SLACK_MS: u64 = 1_000;

/// The log-time deadline of an attempt proposed at `now_ms` on this node's clock by a client that
/// waits `remaining_ms` more (`None`: for ever): past it, the attempt takes nothing.
pub fn attempt_deadline_ms(now_ms: u64, remaining_ms: Option<u64>) -> u64 {
    let window = remaining_ms.map_or(ATTEMPT_WINDOW_MS, |r| r.min(ATTEMPT_WINDOW_MS));
    now_ms + window + CLOCK_SLACK_MS
}

/// Names a waiter while it waits; never reused within one [`Waiters`].
pub type WaiterId = u64;

/// One waiter's keys and whether a wake is pending for it.
#[derive(Debug)]
struct Waiter {
    keys: Vec<Bytes>,
    /// Woken and not yet trying again: handed on if it leaves.
    woken: bool,
    /// It takes nothing (a blocked XREAD); see the module documentation.
    reader: bool,
}

/// The waiters of one node; see the module documentation.
#[derive(Debug, Default)]
pub struct Waiters {
    /// Each key's waiters, first come first.
    queues: HashMap<Bytes, VecDeque<WaiterId>>,
    waiters: HashMap<WaiterId, Waiter>,
    next_id: WaiterId,
}

/// A waiter that just joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    pub id: WaiterId,
    /// Whether it is first in the queue of one of its keys (readers aside), or a reader:
    /// otherwise it waits for its turn (a wake handed on) before it tries, since a client that
    /// blocked earlier on its keys goes first.
    pub first_in_line: bool,
}

impl Waiters {
    /// Puts a new waiter at the end of the queue of each of `keys` (a key named twice once);
    /// `reader` if it takes nothing (a blocked XREAD).
    pub fn join(&mut self, keys: &[Bytes], reader: bool) -> Joined {
        self.next_id += 1;
        let id = self.next_id;
        let mut unique: Vec<Bytes> = Vec::with_capacity(keys.len());
        for key in keys {
            if !unique.contains(key) {
                unique.push(key.clone());
            }
        }
        let mut first_in_line = reader;
        for key in &unique {
            first_in_line |= self.first_taker(key).is_none();
            self.queues.entry(key.clone()).or_default().push_back(id);
        }
        let waiter = Waiter {
            keys: unique,
            woken: false,
            reader,
        };
        self.waiters.insert(id, waiter);
        Joined { id, first_in_line }
    }

    /// Waiter `id` proposes an attempt now: a wake after this one is one the attempt may not have
    /// seen, to hand on if it leaves without trying again.
    pub fn attempting(&mut self, id: WaiterId) {
        if let Some(waiter) = self.waiters.get_mut(&id) {
            waiter.woken = false;
        }
    }

    /// Whether a wake is pending for waiter `id`.
    pub fn is_woken(&self, id: WaiterId) -> bool {
        self.waiters.get(&id).is_some_and(|w| w.woken)
    }

    /// Waiter `id` leaves the queues of its keys; `served` when its attempt answered it (an
    /// element, or an error that took nothing). Returns the waiters to wake: the next of each of
    /// its keys when it was served or woken (there may be more to take).
    pub fn leave(&mut self, id: WaiterId, served: bool) -> Vec<WaiterId> {
        let Some(waiter) = self.waiters.remove(&id) else {
            return Vec::new();
        };
        let hand_on = !waiter.reader && (served || waiter.woken);
        let mut woken = Vec::new();
        for key in &waiter.keys {
            let Some(queue) = self.queues.get_mut(key) else {
                continue;
            };
            queue.retain(|w| *w != id);
            if queue.is_empty() {
                self.queues.remove(key);
            } else if hand_on {
                woken.extend(self.first_taker(key));
            }
        }
        self.mark_woken(woken)
    }

    /// The first waiter of `key`'s queue that takes what it is served (not a reader).
    fn first_taker(&self, key: &Bytes) -> Option<WaiterId> {
        let queue = self.queues.get(key)?;
        let taker = |id: &&WaiterId| self.waiters.get(id).is_some_and(|w| !w.reader);
        queue.iter().find(taker).copied()
    }

    /// Whom a fill of `key` wakes: its first taker and every reader.
    fn woken_by_fill(&self, key: &Bytes, into: &mut Vec<WaiterId>) {
        let Some(queue) = self.queues.get(key) else {
            return;
        };
        into.extend(self.first_taker(key));
        let readers = queue
            .iter()
            .filter(|id| self.waiters.get(id).is_some_and(|w| w.reader));
        into.extend(readers);
    }

    /// How many waiters wait now.
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Wakes the first taker and every reader of each of `keys` (the keys an applied entry
    /// filled).
    pub fn wake_first(&mut self, keys: &[Bytes]) -> Vec<WaiterId> {
        let mut woken = Vec::new();
        for key in keys {
            self.woken_by_fill(key, &mut woken);
        }
        self.mark_woken(woken)
    }

    /// Wakes the first taker and every reader of every key (a snapshot replaced the whole state,
    /// or an entry whole databases).
    pub fn wake_all_first(&mut self) -> Vec<WaiterId> {
        let mut woken = Vec::new();
        for key in self.queues.keys() {
            self.woken_by_fill(key, &mut woken);
        }
        self.mark_woken(woken)
    }

    /// Marks `ids` woken and returns them, each once.
    fn mark_woken(&mut self, mut ids: Vec<WaiterId>) -> Vec<WaiterId> {
        ids.sort_unstable();
        ids.dedup();
        for id in &ids {
            if let Some(waiter) = self.waiters.get_mut(id) {
                waiter.woken = true;
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Waiters {
        fn join_taker(&mut self, keys: &[Bytes]) -> Joined {
            self.join(keys, false)
        }
    }

    fn keys(names: &[&str]) -> Vec<Bytes> {
        names
            .iter()
            .map(|n| Bytes::copy_from_slice(n.as_bytes()))
            .collect()
    }

    #[test]
    fn a_fill_wakes_the_first_waiter_only_and_a_served_one_hands_on() {
        let mut waiters = Waiters::default();
        let first = waiters.join_taker(&keys(&["q", "q"]));
        let second = waiters.join_taker(&keys(&["q"]));
        let other = waiters.join_taker(&keys(&["r"]));
        assert!(first.first_in_line && !second.first_in_line && other.first_in_line);
        assert_eq!(waiters.len(), 3);
        assert_eq!(waiters.wake_first(&keys(&["q", "q"])), vec![first.id]);
        assert!(waiters.is_woken(first.id) && !waiters.is_woken(second.id));
        assert!(!waiters.is_woken(other.id));
        assert_eq!(
            waiters.leave(first.id, true),
            vec![second.id],
            "next in line"
        );
        assert!(waiters.is_woken(second.id));
        assert_eq!(waiters.len(), 2);
        // Tried and took nothing: it stays first, and leaving without having been woken since
        // hands nothing on.
        waiters.attempting(second.id);
        let third = waiters.join_taker(&keys(&["q"]));
        assert_eq!(waiters.leave(second.id, false), Vec::<WaiterId>::new());
        assert!(!waiters.is_woken(third.id));
        waiters.leave(third.id, false);
        waiters.leave(other.id, false);
        assert!(waiters.is_empty());
        assert!(waiters.queues.is_empty(), "no queue left");
    }

    #[test]
    fn a_woken_waiter_that_leaves_unserved_hands_the_wake_on() {
        let mut waiters = Waiters::default();
        let first = waiters.join_taker(&keys(&["a", "b"]));
        let on_a = waiters.join_taker(&keys(&["a"]));
        let on_b = waiters.join_taker(&keys(&["b"]));
        assert_eq!(waiters.wake_all_first(), vec![first.id]);
        let mut handed = waiters.leave(first.id, false);
        handed.sort_unstable();
        assert_eq!(handed, vec![on_a.id, on_b.id]);
        assert!(waiters.is_woken(on_a.id) && waiters.is_woken(on_b.id));
    }

    #[test]
    fn a_waiter_that_joins_behind_another_is_not_first_in_line() {
        let mut waiters = Waiters::default();
        let a = waiters.join_taker(&keys(&["a"]));
        let ab = waiters.join_taker(&keys(&["a", "b"]));
        let a_again = waiters.join_taker(&keys(&["a"]));
        assert!(a.first_in_line && ab.first_in_line, "first on b");
        assert!(!a_again.first_in_line);
        assert_eq!(waiters.leave(99, true), Vec::<WaiterId>::new(), "unknown");
    }

    #[test]
    fn readers_are_woken_by_every_fill_try_at_once_and_hand_nothing_on() {
        let mut waiters = Waiters::default();
        let reader = waiters.join(&keys(&["s"]), true);
        let taker = waiters.join(&keys(&["s"]), false);
        let late_reader = waiters.join(&keys(&["s"]), true);
        let second_taker = waiters.join(&keys(&["s"]), false);
        assert!(
            reader.first_in_line && late_reader.first_in_line,
            "readers try at once"
        );
        assert!(taker.first_in_line, "no taker ahead of it");
        assert!(!second_taker.first_in_line);
        let mut woken = waiters.wake_first(&keys(&["s"]));
        woken.sort_unstable();
        assert_eq!(woken, vec![reader.id, taker.id, late_reader.id]);
        // A reader served hands nothing on: the fill woke the first taker already.
        assert_eq!(waiters.leave(reader.id, true), Vec::<WaiterId>::new());
        // The taker served hands on to the next taker, past the reader.
        assert_eq!(waiters.leave(taker.id, true), vec![second_taker.id]);
    }

    #[test]
    fn an_attempt_deadline_is_at_most_the_window_away_plus_the_slack() {
        assert_eq!(attempt_deadline_ms(1_000, Some(50)), 1_050 + CLOCK_SLACK_MS);
        let capped = 1_000 + ATTEMPT_WINDOW_MS + CLOCK_SLACK_MS;
        assert_eq!(attempt_deadline_ms(1_000, Some(u64::MAX / 2)), capped);
        assert_eq!(attempt_deadline_ms(1_000, None), capped);
    }
}
