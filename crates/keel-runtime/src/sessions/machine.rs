//! [`Deduplicated`]: the state machine that wraps the embedder's own, applying each session
//! request once and answering its copies from the session table.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use keel_core::LogId;
use keel_engine::{ApplyError, RestoreError, SnapshotWriter, StateMachine};

use super::envelope::{EntryKind, Envelope, Refusal};
use super::snapshot::{encode_table, read_table};
use super::table::{Answer, Seen, SessionTable, SESSION_TIMEOUT_DEFAULT};
use super::SessionId;

/// A [`StateMachine`] that applies each client request once, however many times it is
/// proposed: the embedder's state machine `S` wrapped with a replicated table of client
/// sessions (Raft dissertation §6.3). Every entry is an [`Envelope`]; the inner machine sees only
/// the data of requests it has not applied before, at their own log index. The module doc
/// (`keel_runtime::sessions`) says what is guaranteed and what must stay deterministic.
///
/// Reads see the wrapper: `handle.read(|d: &Deduplicated<S>| d.inner().lookup(..))`.
pub struct Deduplicated<S> {
    inner: S,
    table: SessionTable,
}

impl<S: StateMachine> Deduplicated<S> {
    /// Wraps `inner`, with sessions expiring after [`SESSION_TIMEOUT_DEFAULT`] idle by log time.
    pub fn new(inner: S) -> Deduplicated<S> {
        Deduplicated::with_session_timeout(inner, SESSION_TIMEOUT_DEFAULT)
    }

    /// Wraps `inner`, with sessions expiring after `timeout` idle by log time. The timeout
    /// decides which requests apply, so every node must be given the same one (module doc).
    pub fn with_session_timeout(inner: S, timeout: Duration) -> Deduplicated<S> {
        Deduplicated {
            inner,
            table: SessionTable::new(timeout),
        }
    }
}

impl<S> Deduplicated<S> {
    /// The embedder's state machine.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The embedder's state machine, to change: only before the node starts (or in tests), as
    /// any change outside the log is a change other replicas do not make.
    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The embedder's state machine, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// How long a session may stay idle, by log time, before it expires.
    pub fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.table.timeout_ms)
    }

    /// The log time: the largest proposer time of the entries applied so far, in ms since the
    /// Unix epoch (0 before any).
    pub fn log_time_ms(&self) -> u64 {
        self.table.log_time_ms
    }

    /// How many sessions are open (registered, not closed, not expired).
    pub fn session_count(&self) -> usize {
        self.table.len()
    }

    /// How many answers `session` keeps for its client to acknowledge; `None` if the session is
    /// not open.
    pub fn unacknowledged_results(&self, session: SessionId) -> Option<usize> {
        self.table.unacknowledged(session)
    }
}

impl<S: StateMachine> Deduplicated<S> {
    fn apply_request(
        &mut self,
        at: LogId,
        request: &Envelope,
        now_ms: u64,
    ) -> Result<Bytes, ApplyError> {
        let answer = match self.table.check(request, now_ms) {
            Err(refusal) => {
                self.table.record(request, now_ms, None);
                return Err(refusal.into());
            }
            Ok(Seen::Answered(answer)) => {
                self.table.record(request, now_ms, None);
                answer
            }
            Ok(Seen::New) => {
                let answer: Answer = match self.inner.apply(at, &request.data) {
                    Ok(result) => Ok(result),
                    Err(ApplyError::Refused(reason)) => Err(reason),
                    // The node stops before this entry counts as applied: leave the table as it
                    // was, as the inner machine left itself.
                    Err(fatal) => return Err(fatal),
                };
                self.table.record(request, now_ms, Some(answer.clone()));
                answer
            }
        };
        answer.map_err(|reason| Refusal::Inner(reason).into())
    }
}

impl<S: StateMachine> StateMachine for Deduplicated<S> {
    fn apply(&mut self, at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        let index = at.index;
        // A malformed entry reaches no session and moves no time: it carries none we can trust.
        let envelope = Envelope::decode(data).map_err(Refusal::Malformed)?;
        let now_ms = self.table.log_time_after(envelope.time_ms);
        match envelope.kind {
            EntryKind::Register => {
                self.table.register(index, now_ms)?;
                Ok(Bytes::copy_from_slice(&index.to_le_bytes()))
            }
            EntryKind::Request => self.apply_request(at, &envelope, now_ms),
            EntryKind::Close => {
                self.table.close(envelope.session, now_ms);
                Ok(Bytes::new())
            }
        }
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        // The table is bounded (SESSIONS_MAX sessions of at most UNACKNOWLEDGED_RESULTS_MAX
        // answers), so it is encoded here; the inner machine captures its own view.
        Box::new(TableThenInner {
            table: encode_table(&self.table),
            inner: self.inner.snapshot_view(),
        })
    }

    fn restore(&mut self, last: LogId, data: &mut dyn Read) -> Result<(), RestoreError> {
        let table = read_table(data, self.table.timeout_ms)?;
        // The rest of the stream is the inner machine's, read as it reads it.
        self.inner.restore(last, data)?;
        self.table = table;
        Ok(())
    }
}

/// A snapshot of a [`Deduplicated`]: the framed table, then the inner machine's snapshot.
struct TableThenInner {
    table: Vec<u8>,
    inner: Box<dyn SnapshotWriter>,
}

impl SnapshotWriter for TableThenInner {
    fn write_to(self: Box<Self>, out: &mut dyn Write) -> std::io::Result<()> {
        out.write_all(&self.table)?;
        self.inner.write_to(out)
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Deduplicated<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deduplicated")
            .field("inner", &self.inner)
            .field("sessions", &self.table.len())
            .field("log_time_ms", &self.table.log_time_ms)
            .finish()
    }
}
