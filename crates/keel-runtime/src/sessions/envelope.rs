//! The bytes of a session entry ([`Envelope`]) and of a refusal the session layer answers with
//! ([`Refusal`]). The layout is in the module doc (`sessions/mod.rs`).

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use keel_core::codec::Reader;

use super::SessionId;

/// The envelope version this build writes and reads.
pub const ENVELOPE_VERSION: u8 = 1;

/// Bytes before an envelope's inner data: version, kind, session, seq, time, lowest unanswered.
pub const ENVELOPE_HEADER_LEN: usize = 34;

/// What a session entry asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// Open a session; its id is the entry's log index.
    Register,
    /// Apply the inner data once for this (session, seq).
    Request,
    /// End a session and forget its results.
    Close,
}

impl EntryKind {
    fn code(self) -> u8 {
        match self {
            EntryKind::Register => 1,
            EntryKind::Request => 2,
            EntryKind::Close => 3,
        }
    }

    fn from_code(code: u8) -> Option<EntryKind> {
        match code {
            1 => Some(EntryKind::Register),
            2 => Some(EntryKind::Request),
            3 => Some(EntryKind::Close),
            _ => None,
        }
    }
}

/// One entry of a deduplicated log, decoded: see the module doc for its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// What the entry asks for.
    pub kind: EntryKind,
    /// The session (client id) of a request or a close; 0 in a register.
    pub session: SessionId,
    /// The request's sequence number in its session; 0 in a register or a close.
    pub seq: u64,
    /// The proposer's wall clock when it first proposed the entry, in ms since the Unix epoch:
    /// the log time advances to the largest of these.
    pub time_ms: u64,
    /// The lowest sequence number whose answer the client has not received yet (at most
    /// `seq`): the results of every lower one may be forgotten. 0 in a register or a close.
    pub lowest_unanswered: u64,
    /// The embedder's own entry, handed to the inner state machine; empty unless a request.
    pub data: Bytes,
}

impl Envelope {
    /// A register entry, stamped `time_ms`.
    pub fn register(time_ms: u64) -> Envelope {
        Envelope {
            kind: EntryKind::Register,
            session: 0,
            seq: 0,
            time_ms,
            lowest_unanswered: 0,
            data: Bytes::new(),
        }
    }

    /// A request of `session`, number `seq`, carrying the inner `data`.
    pub fn request(
        session: SessionId,
        seq: u64,
        lowest_unanswered: u64,
        time_ms: u64,
        data: Bytes,
    ) -> Envelope {
        Envelope {
            kind: EntryKind::Request,
            session,
            seq,
            time_ms,
            lowest_unanswered,
            data,
        }
    }

    /// A close entry of `session`.
    pub fn close(session: SessionId, time_ms: u64) -> Envelope {
        Envelope {
            kind: EntryKind::Close,
            session,
            seq: 0,
            time_ms,
            lowest_unanswered: 0,
            data: Bytes::new(),
        }
    }

    /// The entry's bytes, to propose.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(ENVELOPE_HEADER_LEN + self.data.len());
        out.put_u8(ENVELOPE_VERSION);
        out.put_u8(self.kind.code());
        out.put_u64_le(self.session);
        out.put_u64_le(self.seq);
        out.put_u64_le(self.time_ms);
        out.put_u64_le(self.lowest_unanswered);
        out.put_slice(&self.data);
        out.freeze()
    }

    /// Reads an entry, refusing anything this version did not write: a short header, another
    /// version, an unknown kind, or fields a kind does not use set to anything but zero.
    pub fn decode(entry: &Bytes) -> Result<Envelope, String> {
        let mut reader = Reader::new(entry.clone());
        let version = reader.u8("envelope version")?;
        if version != ENVELOPE_VERSION {
            return Err(format!(
                "envelope version {version} (this build reads {ENVELOPE_VERSION})"
            ));
        }
        let kind = reader.u8("entry kind")?;
        let session = reader.u64("session id")?;
        let seq = reader.u64("sequence number")?;
        let time_ms = reader.u64("proposer time")?;
        let lowest_unanswered = reader.u64("lowest unanswered sequence number")?;
        let kind =
            EntryKind::from_code(kind).ok_or_else(|| format!("unknown entry kind {kind}"))?;
        let data = entry.slice(ENVELOPE_HEADER_LEN..);
        let envelope = Envelope {
            kind,
            session,
            seq,
            time_ms,
            lowest_unanswered,
            data,
        };
        envelope.check_fields()?;
        Ok(envelope)
    }

    /// Fields a kind does not use must be zero (so a later version may give them a meaning);
    /// a request cannot have been answered already for its own sequence number.
    fn check_fields(&self) -> Result<(), String> {
        match self.kind {
            EntryKind::Register
                if self.session != 0
                    || self.seq != 0
                    || self.lowest_unanswered != 0
                    || !self.data.is_empty() =>
            {
                Err("a register entry carries only its time".into())
            }
            EntryKind::Close
                if self.seq != 0 || self.lowest_unanswered != 0 || !self.data.is_empty() =>
            {
                Err("a close entry carries only its session and time".into())
            }
            EntryKind::Request if self.lowest_unanswered > self.seq => Err(format!(
                "lowest unanswered sequence number {} above the request's own {}",
                self.lowest_unanswered, self.seq
            )),
            _ => Ok(()),
        }
    }
}

/// Why the session layer refused an entry, as the refusal's bytes carry it
/// (`ApplyError::Refused`, then `ClientError::Refused` at the proposer): a code byte, then a
/// message. The inner state machine's own refusals travel as [`Refusal::Inner`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Code 0: the inner state machine refused the request (`ApplyError::Refused`) with these
    /// bytes; a retry of the same request is answered with the same refusal.
    Inner(Bytes),
    /// Code 1: not an envelope this build reads (truncated, another version, an unknown kind).
    Malformed(String),
    /// Code 2: the session is unknown, expired or closed; nothing was applied.
    SessionExpired,
    /// Code 3: a register found [`SESSIONS_MAX`](super::SESSIONS_MAX) sessions open.
    TooManySessions,
    /// Code 4: the session already holds
    /// [`UNACKNOWLEDGED_RESULTS_MAX`](super::UNACKNOWLEDGED_RESULTS_MAX) results its client has
    /// not acknowledged; nothing was applied.
    TooManyUnacknowledged,
    /// Code 5: the request's sequence number is below one its client already acknowledged
    /// (a stale copy committed after its answer was received); nothing was applied.
    AlreadyAnswered,
}

impl Refusal {
    /// The refusal's bytes: its code, then the inner reason or a message for people.
    pub fn encode(&self) -> Bytes {
        let (code, message): (u8, &[u8]) = match self {
            Refusal::Inner(reason) => (0, reason),
            Refusal::Malformed(why) => (1, why.as_bytes()),
            Refusal::SessionExpired => (2, b"session unknown or expired"),
            Refusal::TooManySessions => (3, b"too many sessions"),
            Refusal::TooManyUnacknowledged => (4, b"too many unacknowledged results"),
            Refusal::AlreadyAnswered => (5, b"request already answered and acknowledged"),
        };
        let mut out = BytesMut::with_capacity(1 + message.len());
        out.put_u8(code);
        out.put_slice(message);
        out.freeze()
    }

    /// Reads a refusal's bytes; `None` if they are not a refusal of the session layer (an
    /// unknown code or no bytes: a cluster newer than this client, or no wrapper at all).
    pub fn decode(refusal: &Bytes) -> Option<Refusal> {
        let (&code, _) = refusal.split_first()?;
        let message = refusal.slice(1..);
        Some(match code {
            0 => Refusal::Inner(message),
            1 => Refusal::Malformed(String::from_utf8_lossy(&message).into_owned()),
            2 => Refusal::SessionExpired,
            3 => Refusal::TooManySessions,
            4 => Refusal::TooManyUnacknowledged,
            5 => Refusal::AlreadyAnswered,
            _ => return None,
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Inner(reason) => write!(f, "refused: {}", String::from_utf8_lossy(reason)),
            Refusal::Malformed(why) => write!(f, "malformed session entry: {why}"),
            other => f.write_str(&String::from_utf8_lossy(&other.encode()[1..])),
        }
    }
}

impl From<Refusal> for keel_engine::ApplyError {
    fn from(refusal: Refusal) -> keel_engine::ApplyError {
        keel_engine::ApplyError::Refused(refusal.encode())
    }
}
