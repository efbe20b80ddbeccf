//! The session table: replicated state built only from applied entries, the same on every
//! replica. For each open session, the log time of its last entry and the answers its client
//! has not acknowledged; the log time; and the sessions ordered by last activity, so that
//! expiring the idle ones costs a look at the oldest, not a scan.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;

use super::envelope::{Envelope, Refusal};
use super::SessionId;

/// Most sessions open at once: a register beyond it is refused with
/// [`Refusal::TooManySessions`] until sessions close or expire.
pub const SESSIONS_MAX: usize = 16_384;

/// Most answers one session keeps that its client has not acknowledged: a request beyond it is
/// refused with [`Refusal::TooManyUnacknowledged`] (nothing applied) until the client's lowest
/// unanswered sequence number moves past some. A client that waits for each answer before its
/// next request (as [`Session`](super::Session) does) keeps at most one.
pub const UNACKNOWLEDGED_RESULTS_MAX: usize = 64;

/// How long a session may stay idle, by log time, before it expires, unless the wrapper is
/// given another timeout
/// ([`Deduplicated::with_session_timeout`](super::Deduplicated::with_session_timeout)).
pub const SESSION_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60 * 60);

/// What a request applied to: the inner state machine's result, or its refusal's reason.
pub(super) type Answer = Result<Bytes, Bytes>;

/// One open session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SessionState {
    /// The log time of the session's latest entry.
    pub(super) last_active_ms: u64,
    /// Every sequence number below this one was answered to the client, who said so: a request
    /// below it is a stale copy, refused.
    pub(super) acknowledged_below: u64,
    /// The answers of applied requests at or above `acknowledged_below`, by sequence number.
    pub(super) answers: BTreeMap<u64, Answer>,
}

/// What the table knows of a request it has not refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// Never applied: apply it now.
    New,
    /// Applied before, with this answer: answer it again, apply nothing.
    Answered(Answer),
}

/// The replicated table (module doc).
#[derive(Clone, Debug)]
pub(super) struct SessionTable {
    /// Not replicated but configured, and it must be the same on every node (module doc).
    pub(super) timeout_ms: u64,
    /// The largest proposer time of the entries applied so far.
    pub(super) log_time_ms: u64,
    pub(super) sessions: BTreeMap<SessionId, SessionState>,
    /// `(last_active_ms, session)` of every session: the first is the idlest.
    pub(super) by_activity: BTreeSet<(u64, SessionId)>,
}

impl SessionTable {
    pub(super) fn new(timeout: Duration) -> SessionTable {
        SessionTable {
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            log_time_ms: 0,
            sessions: BTreeMap::new(),
            by_activity: BTreeSet::new(),
        }
    }

    /// A table of these sessions at this log time, with its activity order derived from them.
    pub(super) fn from_sessions(
        timeout_ms: u64,
        log_time_ms: u64,
        sessions: BTreeMap<SessionId, SessionState>,
    ) -> SessionTable {
        let by_activity = sessions
            .iter()
            .map(|(&id, session)| (session.last_active_ms, id))
            .collect();
        SessionTable {
            timeout_ms,
            log_time_ms,
            sessions,
            by_activity,
        }
    }

    /// The log time once an entry stamped `time_ms` is applied: it never goes back, whatever a
    /// proposer's clock says.
    pub(super) fn log_time_after(&self, time_ms: u64) -> u64 {
        self.log_time_ms.max(time_ms)
    }

    fn idle_past_timeout(&self, last_active_ms: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(last_active_ms) > self.timeout_ms
    }

    /// Moves the log time to `now_ms` (never back) and expires the sessions idle for longer
    /// than the timeout by then, idlest first.
    pub(super) fn advance(&mut self, now_ms: u64) {
        if now_ms <= self.log_time_ms {
            return;
        }
        self.log_time_ms = now_ms;
        while let Some(&(last_active_ms, id)) = self.by_activity.first() {
            if !self.idle_past_timeout(last_active_ms, now_ms) {
                break;
            }
            self.by_activity.pop_first();
            self.sessions.remove(&id);
        }
    }

    /// Opens session `id` (the register entry's log index) at `now_ms`.
    pub(super) fn register(&mut self, id: SessionId, now_ms: u64) -> Result<(), Refusal> {
        self.advance(now_ms);
        if self.sessions.len() >= SESSIONS_MAX {
            return Err(Refusal::TooManySessions);
        }
        let session = SessionState {
            last_active_ms: self.log_time_ms,
            acknowledged_below: 0,
            answers: BTreeMap::new(),
        };
        // Log indexes are unique, so this never replaces a session.
        self.sessions.insert(id, session);
        self.by_activity.insert((self.log_time_ms, id));
        Ok(())
    }

    /// Ends `session` at `now_ms`, if it is still open: closing twice is closing once.
    pub(super) fn close(&mut self, session: SessionId, now_ms: u64) {
        self.advance(now_ms);
        if let Some(state) = self.sessions.remove(&session) {
            self.by_activity.remove(&(state.last_active_ms, session));
        }
    }

    /// What applying `request` at log time `now_ms` comes to, without changing anything: the
    /// inner machine may still fail fatally, and then the table must be as it was.
    pub(super) fn check(&self, request: &Envelope, now_ms: u64) -> Result<Seen, Refusal> {
        let Some(session) = self.sessions.get(&request.session) else {
            return Err(Refusal::SessionExpired);
        };
        if self.idle_past_timeout(session.last_active_ms, now_ms) {
            return Err(Refusal::SessionExpired);
        }
        if request.seq < session.acknowledged_below {
            return Err(Refusal::AlreadyAnswered);
        }
        if let Some(answer) = session.answers.get(&request.seq) {
            return Ok(Seen::Answered(answer.clone()));
        }
        let acknowledged_below = session.acknowledged_below.max(request.lowest_unanswered);
        if session.answers.range(acknowledged_below..).count() >= UNACKNOWLEDGED_RESULTS_MAX {
            return Err(Refusal::TooManyUnacknowledged);
        }
        Ok(Seen::New)
    }

    /// Records `request` at log time `now_ms` once decided: the log time advances (expiring
    /// idle sessions), and if its session is open, the session is active now, forgets the
    /// answers its client acknowledged, and keeps `answer` if the request applied.
    pub(super) fn record(&mut self, request: &Envelope, now_ms: u64, answer: Option<Answer>) {
        self.advance(now_ms);
        let Some(session) = self.sessions.get_mut(&request.session) else {
            return;
        };
        self.by_activity
            .remove(&(session.last_active_ms, request.session));
        session.last_active_ms = self.log_time_ms;
        self.by_activity
            .insert((session.last_active_ms, request.session));
        if request.lowest_unanswered > session.acknowledged_below {
            session.acknowledged_below = request.lowest_unanswered;
            session.answers = session.answers.split_off(&request.lowest_unanswered);
        }
        if let Some(answer) = answer {
            session.answers.insert(request.seq, answer);
        }
    }

    /// How many sessions are open.
    pub(super) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// The answers `session` keeps for its client, if it is open.
    pub(super) fn unacknowledged(&self, session: SessionId) -> Option<usize> {
        self.sessions.get(&session).map(|s| s.answers.len())
    }
}
