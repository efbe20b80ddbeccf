//! Request-id deduplication over a bounded window.
//!
//! Every logged write carries `(client_id, request_seq)`. A node that is unsure whether its
//! proposal committed (a forward that timed out, a leader change) proposes it again with the *same*
//! id; when both copies commit, the second must not apply again. So per client we remember which
//! recent sequence numbers were applied and what they replied:
//!
//! - **Per client**: the highest applied seq `seq_max` and the replies of the applied seqs in the
//!   window `(seq_max - replies_per_client_max, seq_max]`. Seqs need not arrive in order (a
//!   pipelined connection has several in flight): a seq inside the window that is not remembered
//!   was never applied and applies now. A seq *below* the window cannot be told apart from one
//!   that was applied and forgotten, so it is refused with [`WriteError::RequestTooOld`] and changes
//!   nothing: safety over liveness. The runtime avoids this by keeping at most
//!   `replies_per_client_max` writes of one client in flight.
//! - **Across clients**: at most `clients_max` sessions. Beyond that, the session used least
//!   recently (by log index of its last write, so every replica picks the same one) is evicted.
//!   A retry from an evicted client would apply again; that is the one case the bound gives up,
//!   and it needs `clients_max` other clients to write between a proposal and its retry.
//!
//! A MULTI ... EXEC transaction is one request id; what is remembered for it is only that it
//! applied (`+OK`), not its array of replies (see `apply_reply.rs`).
//!
//! Memory bound: `clients_max x replies_per_client_max` remembered replies of 24 bytes (the
//! defaults: 4,096 x 128 x 24 B = 12 MiB at most, far less in practice), plus the eviction queue
//! below, at most `2 x clients_max + EVICTION_QUEUE_SLACK` entries of 16 bytes.
//!
//! Cost per applied write: a few hash lookups of the client and one push onto the eviction queue.
//! The queue is the order of last use without a search tree: every use pushes `(index, client)` at
//! the back (indexes only grow, so the queue stays sorted), and the entries it supersedes are left
//! in place, recognisable as stale because their index is no longer their session's
//! `last_used_index`. Evicting pops stale entries from the front until a live one; the queue is
//! compacted (stale entries dropped, order kept) whenever it grows past twice the sessions, so
//! each use costs O(1) amortised.
//!
//! The table is replicated state: it is built only from applied entries, deterministically, and it
//! travels in snapshots (with its limits, so a restored replica keeps the same window).

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{WriteError, WriteReply};

/// The request id a write is proposed under: the dedup session and the write's number in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub client_id: u64,
    pub seq: u64,
}

/// The size of the deduplication window. Part of the replicated state: every replica of a cluster
/// must use the same values (a snapshot carries them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupLimits {
    /// Most client sessions remembered.
    pub clients_max: u32,
    /// Most recent sequence numbers remembered per client.
    pub replies_per_client_max: u32,
}

impl Default for DedupLimits {
    fn default() -> Self {
        DedupLimits {
            clients_max: 4096,
            replies_per_client_max: 128,
        }
    }
}

/// What the table knows about a request id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Never applied: apply it.
    New,
    /// Applied before: answer this, change nothing.
    Duplicate(WriteReply),
    /// Below the window: may or may not have been applied.
    TooOld,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    pub(crate) last_used_index: u64,
    pub(crate) seq_max: u64,
    /// Applied seqs in the window with their replies, ascending by seq.
    pub(crate) replies: VecDeque<(u64, WriteReply)>,
}

/// Entries the eviction queue may hold beyond twice the sessions before it is compacted, so a
/// table with few sessions is not compacted on every use.
const EVICTION_QUEUE_SLACK: usize = 64;

#[derive(Clone, Debug)]
pub(crate) struct DedupTable {
    limits: DedupLimits,
    sessions: HashMap<u64, Session>,
    /// `(last_used_index, client_id)` in ascending index order, live where the index is still
    /// that session's `last_used_index`, stale otherwise (see the module documentation).
    by_last_use: VecDeque<(u64, u64)>,
}

/// Equal when the remembered sessions are: the stale entries of the eviction queue are an
/// accident of history and never change an outcome.
impl PartialEq for DedupTable {
    fn eq(&self, other: &DedupTable) -> bool {
        self.limits == other.limits && self.sessions == other.sessions
    }
}

impl Eq for DedupTable {}

impl DedupTable {
    pub(crate) fn new(limits: DedupLimits) -> Self {
        assert!(limits.clients_max > 0 && limits.replies_per_client_max > 0);
        DedupTable {
            limits,
            sessions: HashMap::new(),
            by_last_use: VecDeque::new(),
        }
    }

    pub(crate) fn limits(&self) -> DedupLimits {
        self.limits
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Every session, by ascending client id (sorted now: snapshots only).
    pub(crate) fn sorted_sessions(&self) -> Vec<(u64, &Session)> {
        let mut sessions: Vec<(u64, &Session)> =
            self.sessions.iter().map(|(id, s)| (*id, s)).collect();
        sessions.sort_unstable_by_key(|(id, _)| *id);
        sessions
    }

    fn window(&self) -> u64 {
        u64::from(self.limits.replies_per_client_max)
    }

    pub(crate) fn check(&self, client_id: u64, seq: u64) -> Seen {
        let Some(session) = self.sessions.get(&client_id) else {
            return Seen::New;
        };
        if seq > session.seq_max {
            return Seen::New; // the common case: the client's next request
        }
        if let Ok(at) = session.replies.binary_search_by_key(&seq, |(s, _)| *s) {
            return Seen::Duplicate(session.replies[at].1);
        }
        if seq.saturating_add(self.window()) <= session.seq_max {
            return Seen::TooOld;
        }
        Seen::New
    }

    /// Marks `client_id` as used at `index` (a duplicate keeps its session alive too).
    pub(crate) fn touch(&mut self, index: u64, client_id: u64) {
        if let Some(session) = self.sessions.get_mut(&client_id) {
            session.last_used_index = index;
            self.note_use(index, client_id);
        }
    }

    /// Queues `client_id`'s use at `index`, the newest of all (its previous entry goes stale).
    fn note_use(&mut self, index: u64, client_id: u64) {
        debug_assert!(self
            .by_last_use
            .back()
            .is_none_or(|(last, _)| *last < index));
        self.by_last_use.push_back((index, client_id));
        if self.by_last_use.len() > 2 * self.sessions.len() + EVICTION_QUEUE_SLACK {
            let sessions = &self.sessions;
            self.by_last_use
                .retain(|(index, id)| is_live(sessions, *index, *id));
            debug_assert_eq!(self.by_last_use.len(), self.sessions.len());
        }
    }

    /// Forgets the session used least recently.
    fn evict_least_recently_used(&mut self) {
        while let Some((index, id)) = self.by_last_use.pop_front() {
            if is_live(&self.sessions, index, id) {
                self.sessions.remove(&id);
                return;
            }
        }
        unreachable!("every session has a live entry in the eviction queue");
    }

    /// Records that `(client_id, seq)` was applied at `index` with `reply`. The caller checked it
    /// was [`Seen::New`].
    pub(crate) fn record(&mut self, index: u64, client_id: u64, seq: u64, reply: WriteReply) {
        debug_assert!(reply != WriteReply::Error(WriteError::RequestTooOld));
        if !self.sessions.contains_key(&client_id)
            && self.sessions.len() >= self.limits.clients_max as usize
        {
            self.evict_least_recently_used();
        }
        let window = self.window();
        let session = self.sessions.entry(client_id).or_insert(Session {
            last_used_index: index,
            seq_max: seq,
            replies: VecDeque::new(),
        });
        session.last_used_index = index;
        session.seq_max = session.seq_max.max(seq);
        // A client numbers its requests in order, so the new one nearly always goes last.
        if session.replies.back().is_none_or(|(last, _)| *last < seq) {
            session.replies.push_back((seq, reply));
        } else {
            let at = session
                .replies
                .binary_search_by_key(&seq, |(s, _)| *s)
                .expect_err("a recorded seq is never New");
            session.replies.insert(at, (seq, reply));
        }
        while let Some(&(oldest, _)) = session.replies.front() {
            if oldest.saturating_add(window) > session.seq_max {
                break;
            }
            session.replies.pop_front();
        }
        self.note_use(index, client_id);
    }

    /// Rebuilds a table from a snapshot's sessions, checking what the encoder guarantees.
    pub(crate) fn from_sessions(
        limits: DedupLimits,
        sessions: BTreeMap<u64, Session>,
    ) -> Result<Self, &'static str> {
        if limits.clients_max == 0 || limits.replies_per_client_max == 0 {
            return Err("zero dedup limit");
        }
        if sessions.len() > limits.clients_max as usize {
            return Err("more sessions than clients_max");
        }
        let window = u64::from(limits.replies_per_client_max);
        let mut by_last_use = BTreeMap::new();
        for (&client_id, session) in &sessions {
            if by_last_use
                .insert(session.last_used_index, client_id)
                .is_some()
            {
                return Err("two sessions last used at the same index");
            }
            if session.replies.len() > limits.replies_per_client_max as usize {
                return Err("more replies than replies_per_client_max");
            }
            let seqs_ascending = session
                .replies
                .iter()
                .zip(session.replies.iter().skip(1))
                .all(|(a, b)| a.0 < b.0);
            let in_window = session
                .replies
                .iter()
                .all(|(s, _)| *s <= session.seq_max && s.saturating_add(window) > session.seq_max);
            if !seqs_ascending || !in_window {
                return Err("session replies out of order or outside the window");
            }
        }
        Ok(DedupTable {
            limits,
            sessions: sessions.into_iter().collect(),
            by_last_use: by_last_use.into_iter().collect(),
        })
    }
}

fn is_live(sessions: &HashMap<u64, Session>, index: u64, client_id: u64) -> bool {
    sessions
        .get(&client_id)
        .is_some_and(|s| s.last_used_index == index)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The eviction queue against the obvious model (evict the smallest last-used index), through
    /// enough uses that it is compacted many times and evicts on most new clients.
    #[test]
    fn evicts_exactly_the_least_recently_used_session_through_compactions() {
        let limits = DedupLimits {
            clients_max: 5,
            replies_per_client_max: 4,
        };
        let mut table = DedupTable::new(limits);
        let mut model: BTreeMap<u64, u64> = BTreeMap::new(); // client -> last used index
        let mut next_seq: BTreeMap<u64, u64> = BTreeMap::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut compactions = 0;
        for index in 1..=20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly a few hot clients, sometimes one of many others.
            let client = if x % 4 == 0 { x % 40 } else { x % 3 };
            let seq = next_seq.entry(client).or_insert(1);
            let queue_before = table.by_last_use.len();
            if x % 7 == 0 && table.sessions.contains_key(&client) && *seq > 1 {
                // A retry of the last request: a duplicate, which still counts as a use.
                assert!(matches!(table.check(client, *seq - 1), Seen::Duplicate(_)));
                table.touch(index, client);
            } else {
                assert_eq!(table.check(client, *seq), Seen::New);
                if !model.contains_key(&client) && model.len() == 5 {
                    let (&oldest, _) = model.iter().min_by_key(|(_, used)| **used).unwrap();
                    model.remove(&oldest);
                    next_seq.remove(&oldest);
                }
                table.record(
                    index,
                    client,
                    *next_seq.entry(client).or_insert(1),
                    WriteReply::Ok,
                );
                *next_seq.get_mut(&client).unwrap() += 1;
            }
            model.insert(client, index);
            if table.by_last_use.len() < queue_before {
                compactions += 1;
            }
            let mut clients: Vec<u64> = table.sessions.keys().copied().collect();
            clients.sort_unstable();
            assert_eq!(
                clients,
                model.keys().copied().collect::<Vec<_>>(),
                "at {index}"
            );
            assert!(table.by_last_use.len() <= 2 * 5 + EVICTION_QUEUE_SLACK + 1);
        }
        assert!(compactions > 100, "only {compactions} compactions");
    }

    #[test]
    fn a_table_rebuilt_from_its_sessions_equals_it_and_evicts_alike() {
        let limits = DedupLimits {
            clients_max: 3,
            replies_per_client_max: 2,
        };
        let mut table = DedupTable::new(limits);
        for (index, client) in [(1, 10), (2, 20), (3, 10), (4, 30), (5, 10)] {
            let seq = index;
            table.record(index, client, seq, WriteReply::Integer(index as i64));
        }
        let sessions: BTreeMap<u64, Session> = table
            .sorted_sessions()
            .into_iter()
            .map(|(id, s)| (id, s.clone()))
            .collect();
        let mut rebuilt = DedupTable::from_sessions(limits, sessions).unwrap();
        assert_eq!(rebuilt, table);
        // Both evict client 20 (last used at 2) for a new client.
        table.record(6, 40, 1, WriteReply::Ok);
        rebuilt.record(6, 40, 1, WriteReply::Ok);
        assert_eq!(rebuilt, table);
        assert!(!table.sessions.contains_key(&20));
    }
}
