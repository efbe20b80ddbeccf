//! Request-id deduplication over a bounded window.
//!
//! Every logged write carries `(client_id, request_seq)`. A node that is unsure whether its
//! proposal committed (a forward that timed out, a leader change) proposes it again with the *same*
//! id; when both copies commit, the second must not apply again. So per client we remember which
//! recent sequence numbers were applied and what they replied:
//!
//! - **Per client**: the highest applied seq `max_seq` and the replies of the applied seqs in the
//!   window `(max_seq - replies_per_client_max, max_seq]`. Seqs need not arrive in order (a
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
//! defaults: 4,096 x 128 x 24 B = 12 MiB at most, far less in practice).
//!
//! The table is replicated state: it is built only from applied entries, deterministically, and it
//! travels in snapshots (with its limits, so a restored replica keeps the same window).

use std::collections::{BTreeMap, VecDeque};

use super::{WriteError, WriteReply};

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
    pub(crate) max_seq: u64,
    /// Applied seqs in the window with their replies, ascending by seq.
    pub(crate) replies: VecDeque<(u64, WriteReply)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DedupTable {
    limits: DedupLimits,
    sessions: BTreeMap<u64, Session>,
    /// `last_used_index -> client_id`: the eviction order. Indexes are unique because each apply
    /// has its own log index.
    by_last_use: BTreeMap<u64, u64>,
}

impl DedupTable {
    pub(crate) fn new(limits: DedupLimits) -> Self {
        assert!(limits.clients_max > 0 && limits.replies_per_client_max > 0);
        DedupTable {
            limits,
            sessions: BTreeMap::new(),
            by_last_use: BTreeMap::new(),
        }
    }

    pub(crate) fn limits(&self) -> DedupLimits {
        self.limits
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    pub(crate) fn sessions(&self) -> impl Iterator<Item = (&u64, &Session)> {
        self.sessions.iter()
    }

    fn window(&self) -> u64 {
        u64::from(self.limits.replies_per_client_max)
    }

    pub(crate) fn check(&self, client_id: u64, seq: u64) -> Seen {
        let Some(session) = self.sessions.get(&client_id) else {
            return Seen::New;
        };
        if seq > session.max_seq {
            return Seen::New; // the common case: the client's next request
        }
        if let Ok(at) = session.replies.binary_search_by_key(&seq, |(s, _)| *s) {
            return Seen::Duplicate(session.replies[at].1);
        }
        if seq.saturating_add(self.window()) <= session.max_seq {
            return Seen::TooOld;
        }
        Seen::New
    }

    /// Marks `client_id` as used at `index` (a duplicate keeps its session alive too).
    pub(crate) fn touch(&mut self, index: u64, client_id: u64) {
        if let Some(session) = self.sessions.get_mut(&client_id) {
            self.by_last_use.remove(&session.last_used_index);
            session.last_used_index = index;
            self.by_last_use.insert(index, client_id);
        }
    }

    /// Records that `(client_id, seq)` was applied at `index` with `reply`. The caller checked it
    /// was [`Seen::New`].
    pub(crate) fn record(&mut self, index: u64, client_id: u64, seq: u64, reply: WriteReply) {
        debug_assert!(reply != WriteReply::Error(WriteError::RequestTooOld));
        if !self.sessions.contains_key(&client_id)
            && self.sessions.len() >= self.limits.clients_max as usize
        {
            debug_assert_eq!(self.by_last_use.len(), self.sessions.len());
            let (_, oldest) = self.by_last_use.pop_first().expect("sessions is not empty");
            self.sessions.remove(&oldest);
        }
        let window = self.window();
        let session = self.sessions.entry(client_id).or_insert(Session {
            last_used_index: index,
            max_seq: seq,
            replies: VecDeque::new(),
        });
        self.by_last_use.remove(&session.last_used_index);
        session.last_used_index = index;
        self.by_last_use.insert(index, client_id);
        session.max_seq = session.max_seq.max(seq);
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
            if oldest.saturating_add(window) > session.max_seq {
                break;
            }
            session.replies.pop_front();
        }
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
                .all(|(s, _)| *s <= session.max_seq && s.saturating_add(window) > session.max_seq);
            if !seqs_ascending || !in_window {
                return Err("session replies out of order or outside the window");
            }
        }
        Ok(DedupTable {
            limits,
            sessions,
            by_last_use,
        })
    }
}
