//! The client side: a [`Session`] numbers its requests and retries each one, under the same
//! number, until it gets an answer that is not in doubt; the [`Deduplicated`] wrapper makes the
//! retries apply once.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use bytes::Bytes;
use keel_core::NodeId;
use keel_engine::{ClientError, StateMachine};

use super::envelope::{Envelope, Refusal};
use super::machine::Deduplicated;
use super::SessionId;
use crate::{wall_clock_ms, Handle};

/// Why a [`Session`] got no result. Unlike a bare proposal's [`ClientError::Unknown`], a request
/// a session retried until it was answered either applied once or not at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session is unknown to the cluster: it expired (idle past the session timeout, by log
    /// time), was closed, or never existed. This attempt applied nothing; if an earlier attempt
    /// of the same request ended in doubt, it may have applied before the session expired.
    /// Open a new session.
    #[error("the session expired or is unknown")]
    SessionExpired,
    /// Applied, and refused by the inner state machine with this reason
    /// (`ApplyError::Refused`): the state is unchanged, and a retry gets the same answer.
    #[error("refused by the state machine: {}", String::from_utf8_lossy(.0))]
    Refused(Bytes),
    /// Opening a session found [`SESSIONS_MAX`](super::SESSIONS_MAX) open: retry once some close
    /// or expire.
    #[error("too many sessions are open")]
    TooManySessions,
    /// The session keeps [`UNACKNOWLEDGED_RESULTS_MAX`](super::UNACKNOWLEDGED_RESULTS_MAX)
    /// answers its client did not acknowledge; nothing was applied.
    #[error("too many unacknowledged results in the session")]
    TooManyUnacknowledged,
    /// Not answered. `ClientError::Unknown` when any attempt ended in doubt and the retries ran
    /// out: the request may have applied (once). Any other error: it certainly did not.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// An answer this client does not understand (a refusal of a request it never sent, a
    /// cluster whose state machine is not [`Deduplicated`] or speaks another envelope version).
    #[error("session protocol: {0}")]
    Protocol(String),
}

impl SessionError {
    /// The session layer's refusal in `reason` (`ClientError::Refused`), as this client's error.
    fn from_refusal(reason: &Bytes) -> SessionError {
        match Refusal::decode(reason) {
            Some(Refusal::Inner(reason)) => SessionError::Refused(reason),
            Some(Refusal::SessionExpired) => SessionError::SessionExpired,
            Some(Refusal::TooManySessions) => SessionError::TooManySessions,
            Some(Refusal::TooManyUnacknowledged) => SessionError::TooManyUnacknowledged,
            Some(other) => SessionError::Protocol(other.to_string()),
            None => SessionError::Protocol(format!(
                "not a session refusal: {}",
                String::from_utf8_lossy(reason)
            )),
        }
    }
}

/// How a [`Session`] retries a request whose outcome is in doubt or that was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included (at least 1 is made).
    pub attempts: u32,
    /// The wait after the first failed attempt; doubled after each next one.
    pub backoff_min: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    /// 10 attempts, waiting 20 ms, then 40 ms, ... up to 1 s between two: enough to ride out an
    /// election.
    fn default() -> Self {
        RetryPolicy {
            attempts: 10,
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(1),
        }
    }
}

/// A client session of a cluster whose state machine is [`Deduplicated`]: each request gets the
/// next sequence number, and is retried under it (through whichever node leads) when its outcome
/// is in doubt (`Unknown`, `Shutdown`) or it was not taken (`NotLeader`, `Busy`, `NotProposed`).
/// The cluster applies it once and answers every copy alike.
///
/// One request at a time (`propose` takes `&mut self`); open several sessions for concurrency.
/// A request whose `propose` was abandoned (dropped, or out of retries) is acknowledged by the
/// next one: if it had not applied by then, a late copy of it never will.
pub struct Session<S> {
    handles: BTreeMap<NodeId, Handle<Deduplicated<S>>>,
    /// The node proposed to next: the last one that led, as far as this session saw.
    current: NodeId,
    id: SessionId,
    next_seq: u64,
    retry: RetryPolicy,
}

impl<S: StateMachine> Session<S> {
    /// Opens a new session through these nodes' handles (all of one cluster; one is enough, and
    /// any that leads will do), retried by the default [`RetryPolicy`]. A register whose outcome
    /// stayed in doubt may leave an unused session behind, which expires.
    ///
    /// # Panics
    /// If `handles` is empty.
    pub async fn open(
        handles: BTreeMap<NodeId, Handle<Deduplicated<S>>>,
    ) -> Result<Session<S>, SessionError> {
        let mut session = Session::resume(handles, 0, 1);
        let entry = Envelope::register(wall_clock_ms()).encode();
        let id = session.submit(&entry).await?;
        session.id = id[..]
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| SessionError::Protocol(format!("a session id of {} bytes", id.len())))?;
        Ok(session)
    }

    /// A session opened earlier (by [`Session::open`], perhaps in another process that kept its
    /// [`id`](Session::id) and [`next_seq`](Session::next_seq)), carrying on from `next_seq`.
    /// Every request numbered below `next_seq` counts as answered.
    ///
    /// # Panics
    /// If `handles` is empty.
    pub fn resume(
        handles: BTreeMap<NodeId, Handle<Deduplicated<S>>>,
        id: SessionId,
        next_seq: u64,
    ) -> Session<S> {
        let current = *handles
            .keys()
            .next()
            .expect("a session needs at least one handle");
        Session {
            handles,
            current,
            id,
            next_seq,
            retry: RetryPolicy::default(),
        }
    }

    /// The same session, retrying by `retry` from now on.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Session<S> {
        self.retry = retry;
        self
    }

    /// The session's id: the log index of its register entry.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The sequence number the next request gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Proposes `data` to the inner state machine as the session's next request, stamped with
    /// this machine's wall clock, and returns the inner machine's result: applied exactly once
    /// however many attempts it took.
    pub async fn propose(&mut self, data: Bytes) -> Result<Bytes, SessionError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        // Every earlier request was answered or abandoned: acknowledge them all.
        let entry = Envelope::request(self.id, seq, seq, wall_clock_ms(), data).encode();
        self.submit(&entry).await
    }

    /// Closes the session: the cluster forgets it and its answers (closing an expired session
    /// succeeds too).
    pub async fn close(mut self) -> Result<(), SessionError> {
        let entry = Envelope::close(self.id, wall_clock_ms()).encode();
        self.submit(&entry).await.map(drop)
    }

    /// Proposes `entry` until it is answered, following the leader, by the retry policy.
    async fn submit(&mut self, entry: &Bytes) -> Result<Bytes, SessionError> {
        let mut backoff = self.retry.backoff_min;
        let mut in_doubt = false;
        let mut last_error = ClientError::Unknown;
        for attempt in 1..=self.retry.attempts.max(1) {
            let error = match self.handles[&self.current].propose(entry.clone()).await {
                Ok(result) => return Ok(result),
                Err(ClientError::Refused(reason)) => {
                    return Err(SessionError::from_refusal(&reason))
                }
                Err(error) => error,
            };
            match &error {
                // Certainly not applied there: straight to the leader it names.
                ClientError::NotLeader {
                    leader: Some(leader),
                    ..
                } if *leader != self.current && self.handles.contains_key(leader) => {
                    self.current = *leader;
                    last_error = error;
                    continue;
                }
                ClientError::NotLeader { .. } => self.next_node(),
                // The node stopped: an entry it appended may still commit, elsewhere.
                ClientError::Shutdown => {
                    in_doubt = true;
                    self.next_node();
                }
                ClientError::Unknown => in_doubt = true,
                ClientError::Busy(_) | ClientError::NotProposed => {}
                // Rejected: the entry cannot be done as asked; retrying changes nothing.
                _ => return Err(unanswered(in_doubt, error)),
            }
            last_error = error;
            if attempt < self.retry.attempts {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.retry.backoff_max);
            }
        }
        Err(unanswered(in_doubt, last_error))
    }

    /// Moves on to the next node's handle, in id order, wrapping around.
    fn next_node(&mut self) {
        let after = self
            .handles
            .range((Bound::Excluded(self.current), Bound::Unbounded))
            .next();
        let next = after.or_else(|| self.handles.iter().next());
        self.current = *next.expect("at least one handle").0;
    }
}

/// The error of a request given up on after `last_error`: `Unknown` if any attempt may have
/// applied it, whatever the last one said.
fn unanswered(in_doubt: bool, last_error: ClientError) -> SessionError {
    SessionError::Client(if in_doubt {
        ClientError::Unknown
    } else {
        last_error
    })
}
