//! Client sessions: retries that apply once (the Raft dissertation's §6.3).
//!
//! A proposal that ends in `ClientError::Unknown` or `Shutdown` may or may not have applied, and
//! proposing it again may apply it twice. With sessions, every request carries its client's
//! session id and a sequence number; the replicated state machine remembers the answer of each
//! request until the client acknowledges it, and answers a copy of an applied request from
//! memory instead of applying it again. Retrying is then always safe.
//!
//! Two pieces, one per side:
//!
//! - [`Deduplicated<S>`](Deduplicated) wraps the embedder's [`StateMachine`](crate::StateMachine)
//!   `S`: the node runs `Deduplicated::new(my_machine)`, and reads reach the embedder's state
//!   through [`Deduplicated::inner`].
//! - [`Session<S>`](Session) is a client: [`Session::open`] registers it through one or more
//!   nodes' handles, [`Session::propose`] numbers a request, proposes it, and retries it under
//!   the same number (following the leader) until it is answered.
//!
//! ```no_run
//! # use std::collections::BTreeMap;
//! # use bytes::Bytes;
//! # use keel_runtime::{Node, NodeConfig, StateMachine};
//! use keel_runtime::sessions::{Deduplicated, Session, SessionError};
//! # async fn run<S: StateMachine + Default>(config: NodeConfig) -> Result<(), Box<dyn std::error::Error>> {
//! // Every node runs the embedder's state machine wrapped (with the same session timeout).
//! let node = Node::start(config, Deduplicated::new(S::default())).await?;
//! // A client opens a session through the handles of the nodes it knows, by node id.
//! let mut session = Session::open(BTreeMap::from([(1, node.handle())])).await?;
//! match session.propose(Bytes::from_static(b"my entry")).await {
//!     Ok(result) => println!("applied once: {result:?}"),
//!     Err(SessionError::Refused(reason)) => println!("refused by S: {reason:?}"),
//!     Err(SessionError::SessionExpired) => println!("idle too long: open a new session"),
//!     Err(other) => return Err(other.into()),
//! }
//! // Reads reach the embedder's state machine through the wrapper.
//! let sessions = node.handle().read(|d: &Deduplicated<S>| d.session_count()).await?;
//! println!("{sessions} sessions open");
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - A request (session, seq) applies to the inner machine at most once, at the index of the
//!   first of its copies to commit; every later copy is answered with the same result, or the
//!   same refusal if the inner machine refused it (`ApplyError::Refused`), without reaching the
//!   inner machine.
//! - A copy committed after its client acknowledged the answer (its "lowest unanswered" moved
//!   past it) is refused ([`Refusal::AlreadyAnswered`]) and applies nothing.
//! - A request on a session that is unknown, closed or expired applies nothing and is refused
//!   ([`Refusal::SessionExpired`], [`SessionError::SessionExpired`] at the client). So is a
//!   request over a bound (below). Every replica decides alike: the table is built only from
//!   the log.
//! - The inner machine sees the inner data of each request it applies, at that entry's index,
//!   and nothing else; a fatal error it returns leaves the table as it was.
//!
//! # The entry (envelope), version 1
//!
//! Every entry of a deduplicated log is an [`Envelope`]; integers are little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version: 1 ([`ENVELOPE_VERSION`]) |
//! | 1 | 1 | kind: 1 register, 2 request, 3 close ([`EntryKind`]) |
//! | 2 | 8 | client id: the session id (0 in a register) |
//! | 10 | 8 | request sequence number (0 in a register or a close) |
//! | 18 | 8 | the proposer's wall-clock time, ms since the Unix epoch |
//! | 26 | 8 | the lowest sequence number whose answer the client has not seen (at most the request's own; 0 in a register or a close) |
//! | 34 | rest | the inner data, handed to the inner machine (requests only; empty otherwise) |
//!
//! A register opens a session whose id is the register entry's log index (unique and the same
//! on every replica) and answers that id (8 bytes). A close ends a session and answers nothing
//! (closing an unknown session is not an error). Anything else (shorter than 34 bytes, another
//! version, another kind, a field a kind does not use set to non-zero) is refused as
//! [`Refusal::Malformed`] and changes nothing.
//!
//! A refusal of the session layer reaches the proposer as `ClientError::Refused(bytes)`: one code
//! byte, then a message ([`Refusal`]): 0 the inner machine's refusal (its reason follows as it
//! gave it), 1 malformed, 2 session expired or unknown, 3 too many sessions, 4 too many
//! unacknowledged results, 5 already answered. [`Session`] turns them into [`SessionError`]s.
//!
//! # Log time and expiry
//!
//! The log time is the largest proposer time of the entries applied so far: it never goes back
//! when a proposer's clock does, and every replica computes the same. No node's clock is read
//! on the apply path. Each entry that moves it expires the sessions idle for longer than the
//! session timeout ([`SESSION_TIMEOUT_DEFAULT`], 1 hour, or
//! [`Deduplicated::with_session_timeout`]) by then: the sessions are kept ordered by last
//! activity, so this looks at the idlest ones only. A proposer whose clock runs ahead expires
//! sessions early: their clients get `SessionExpired` (never a second apply).
//!
//! # Bounds
//!
//! At most [`SESSIONS_MAX`] sessions (a register beyond it is refused:
//! [`SessionError::TooManySessions`]); per session, at most [`UNACKNOWLEDGED_RESULTS_MAX`]
//! answers not yet acknowledged (a new request beyond it is refused, not applied:
//! [`SessionError::TooManyUnacknowledged`]). The answers of acknowledged requests are dropped,
//! so the table holds at most `SESSIONS_MAX × UNACKNOWLEDGED_RESULTS_MAX` answers whatever the
//! number of requests (a [`Session`] keeps at most one). Each answer is as large as the inner
//! machine's result.
//!
//! # Snapshots
//!
//! A snapshot of a `Deduplicated` is the session table, then the inner machine's snapshot, in
//! one stream:
//!
//! | size | field |
//! |---|---|
//! | 1 | table version: 1 |
//! | 8 | N, the length of the table's body |
//! | N | body: log time (8); session count (4); per session in ascending id: id (8), last activity (8), acknowledged-below seq (8), answer count (4), then per answer in ascending seq: seq (8), outcome (1: 0 result, 1 refused), length (4), bytes |
//! | 4 | CRC-32C of the body |
//! | rest | the inner machine's snapshot |
//!
//! Restore reads the table, checks its length and checksum, and hands the rest of the stream,
//! unread, to the inner machine's `restore`. Everything is written in ascending order, so
//! replicas with the same state write the same bytes.
//!
//! # What the embedder keeps deterministic
//!
//! Beyond the inner machine's own determinism (`docs/embedding.md`): the session timeout is
//! part of the state machine's behaviour (it decides which requests apply), so every node must
//! be given the same one. A node given another timeout than its peers, or one that replays
//! entries under another timeout than they were first applied under, may decide differently:
//! change it as you would change the code of `apply` (the guide's "Upgrades"). Every entry of
//! the log must be an envelope: propose through [`Session`], or encode [`Envelope`]s yourself.
//! Wrapping changes what the log and the snapshots hold, so a cluster adopts it from its first
//! entry (or as an upgrade of its state machine's formats): a `Deduplicated` refuses entries
//! that are not envelopes and cannot restore a snapshot its inner machine wrote alone.

mod client;
mod envelope;
mod machine;
mod snapshot;
mod table;

#[cfg(test)]
mod tests;

pub use client::{RetryPolicy, Session, SessionError};
pub use envelope::{EntryKind, Envelope, Refusal, ENVELOPE_HEADER_LEN, ENVELOPE_VERSION};
pub use machine::Deduplicated;
pub use table::{SESSIONS_MAX, SESSION_TIMEOUT_DEFAULT, UNACKNOWLEDGED_RESULTS_MAX};

/// A session's id: the log index of the entry that registered it.
pub type SessionId = u64;
