//! Validation of a peer's message before it reaches the protocol: [`RaftNode::validate`].
//!
//! Raft tolerates a network that loses, delays, duplicates and reorders messages, not one that
//! makes them up. Whoever can reach a peer port could otherwise take a node, or the cluster, down
//! with one message. The check refuses every message no honest peer can send, whatever the
//! network did to it, and nothing else: a stale, duplicated or reordered message passes and is
//! left to the protocol's own rules. It is deterministic and needs nothing but the message and
//! this node's id, term and known leader, so the runtime runs it on every inbound message and the
//! simulator on every delivery (where a refusal of an honest message is a violation).
//!
//! The rules, and why each holds for an honest peer:
//!
//! - **Addressed here, not from here** (`to` is this node, `from` is not; node id 0 is "nobody").
//!   The runtime's transport also checks that `from` is the node the connection's handshake named.
//! - **No term at or above [`TERM_LIMIT`], no index or commit index at or above [`INDEX_LIMIT`]**
//!   (2^62). Terms and indexes only ever grow by one: a node that adopted the largest term could
//!   never campaign again (no node would ever lead again, restarts included, as the term is
//!   durable), and a log ending at the largest index could never grow. An honest cluster would
//!   need 2^62 elections or entries to reach the limit; whatever a peer makes this node adopt
//!   below it leaves 2^62 terms to campaign in.
//! - **Term 0 only on a refused pre-vote.** Term 0 belongs to the empty log: every message of an
//!   honest node carries a term it adopted (at least 1), except the refusal of a node that has
//!   never had one.
//! - **Log positions are real.** A position has index 0 exactly when it has term 0 (the
//!   sentinel before the first entry); every entry has index and term of at least 1.
//! - **Append entries continue `prev`**: indexes contiguous from `prev.index + 1`, terms never
//!   falling, none below `prev.term` and none above the message's term (a leader holds no entry
//!   of a later term than its own; `prev` neither). A gap would corrupt the receiver's log.
//! - **Configurations in entries have a voter and no node 0** (every change is checked so on the
//!   leader that proposes it).
//! - **Repair entries continue `prev`** as Append entries do, of no later term than the
//!   responder's (a node's log holds no entry of a term it has not reached), and the positions a
//!   repair request or answer names are real. A repair request's term starts (at most
//!   [`REPAIR_TERMS_MAX`]) describe a log from its `last` entry to its promise: rising in term and
//!   index, after `last`, none above the promise, the last one of the promised term. A committed
//!   answer names an entry of no later term than the message's and a configuration with a voter
//!   and no node 0; so does a holds answer, whose entry is also after the one it was asked from
//!   (a later index, no earlier term).
//! - **A snapshot's term history rises** in term and index and ends at or before its last entry,
//!   which is of no later term than the message.
//! - **A vote request's log is no newer than its term** (`last_log_id.term` at most the
//!   candidate's term; for a pre-vote, below the term it would campaign in).
//! - **No second leader.** A leader message (Append, Heartbeat, InstallSnapshot, TimeoutNow) in
//!   this node's term from another node than the leader it knows for that term (itself, if it
//!   leads) claims a term that already has a leader: at most one node wins a term.
//! - **No answers from a term this node never reached.** A node answers a request in the
//!   request's term (our term then, at most our term now: terms only grow, and are durable
//!   before a vote request or leader message carries them). An Append acknowledgement, a granted
//!   vote or a heartbeat answer with a read round or `lagging` above our term is impossible. Only
//!   refusals and the bare heartbeat answer a node sends to a stale leader carry the responder's
//!   own, later, term. A pre-vote is the exception: it leaves before the term it was sent from is
//!   durable, so after a crash its granted answer may come from any later term (the simulator
//!   found this).
//!
//! Commit indexes beyond what the message proves are left to the protocol, which clamps them (a
//! follower commits only what the current Append proved to match, S15), and so are rejections
//! or acknowledgements of positions the leader never sent (it ignores them).
//!
//! A runtime drops what this check refuses. The handlers ignore such input by themselves too:
//! no message panics the core.

use crate::membership::Membership;
use crate::message::{AppendResult, Message, MessageBody, RepairAnswer};
use crate::node::RaftNode;
use crate::types::{
    Entry, EntryPayload, Index, LogId, NodeId, SnapshotMeta, Term, INDEX_LIMIT, TERM_LIMIT,
};

/// Why [`RaftNode::validate`] refused a message. [`InvalidMessage::kind`] names the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidMessage {
    /// `to` is another node.
    #[error("addressed to node {to}, not to this node")]
    WrongRecipient {
        /// The message's `to`.
        to: NodeId,
    },
    /// `from` is this node.
    #[error("claims to come from this node")]
    FromSelf,
    /// `from` or `to` is node 0, "nobody".
    #[error("names node 0, which is reserved")]
    ReservedNodeId,
    /// A term at or above [`TERM_LIMIT`], or an index or commit index at or above
    /// [`INDEX_LIMIT`].
    #[error("carries a term or index at or above 2^62, which no honest cluster reaches")]
    OutOfRange,
    /// The message's term is 0, and it is not a refused pre-vote.
    #[error("carries term 0 outside a refused pre-vote")]
    ZeroTerm,
    /// A position with index 0 and a term other than 0, or the reverse; or index 0 where an
    /// entry's position belongs.
    #[error("log position {0} does not exist")]
    ImpossiblePosition(LogId),
    /// Entries that do not continue their `prev` (or each other) index by index.
    #[error("entry at index {index} does not follow the one before it at {after}")]
    EntryGap {
        /// The index of the entry (or `prev`) before the gap.
        after: Index,
        /// The index of the entry that should have been `after + 1`.
        index: Index,
    },
    /// An entry of a lower term than the entry (or `prev`) before it.
    #[error("entry {entry} has a term below the entry before it ({before})")]
    EntryTermFalls {
        /// The term of the entry before it.
        before: Term,
        /// The entry whose term falls.
        entry: LogId,
    },
    /// A position of a later term than the message's own: no node holds an entry of a term it
    /// has not reached.
    #[error("{what} of term {term} comes in a message of term {message_term}")]
    TermAboveMessage {
        /// Which position, in words ("an entry", "the snapshot's last entry", ...).
        what: &'static str,
        /// The position's term.
        term: Term,
        /// The message's term.
        message_term: Term,
    },
    /// A configuration without a voter, or with node 0 as a member.
    #[error("a configuration without voters, or naming node 0")]
    BadConfiguration,
    /// A snapshot's term history that does not rise in term and index, or goes past its last
    /// entry.
    #[error("the snapshot's term history is out of order or runs past its last entry")]
    BadTermHistory,
    /// A repair request's `terms` that are too many, do not rise, fall outside `last` to
    /// `promised`, or do not end in the promised term.
    #[error(
        "a repair request's term starts do not describe a log from its last entry to its promise"
    )]
    BadRepairTerms,
    /// A [`RepairAnswer::Holds`] whose `through` is not after `after` (a later index, no earlier
    /// term).
    #[error(
        "reports holding entries through {through}, not after {after} where it was asked from"
    )]
    HeldNotAfter {
        /// The answer's `after`.
        after: LogId,
        /// The answer's `through`.
        through: LogId,
    },
    /// A leader message in this node's term from another node than the term's known leader.
    #[error("claims to lead term {term}, which node {leader} leads")]
    SecondLeader {
        /// The message's term, this node's.
        term: Term,
        /// The leader this node knows for that term (itself, if it leads).
        leader: NodeId,
    },
    /// An answer only a node in the message's term could send (an Append acknowledgement or
    /// conflict, a granted vote, a heartbeat answer with a read round or `lagging`), from a
    /// term this node has not reached.
    #[error("answers in term {term}, which this node (term {local_term}) never reached")]
    AnswerFromFutureTerm {
        /// The message's term.
        term: Term,
        /// This node's term.
        local_term: Term,
    },
}

impl InvalidMessage {
    /// A short fixed name of the rule, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            InvalidMessage::WrongRecipient { .. } => "wrong_recipient",
            InvalidMessage::FromSelf => "from_self",
            InvalidMessage::ReservedNodeId => "reserved_node_id",
            InvalidMessage::OutOfRange => "out_of_range",
            InvalidMessage::ZeroTerm => "zero_term",
            InvalidMessage::ImpossiblePosition(_) => "impossible_position",
            InvalidMessage::EntryGap { .. } => "entry_gap",
            InvalidMessage::EntryTermFalls { .. } => "entry_term_falls",
            InvalidMessage::TermAboveMessage { .. } => "term_above_message",
            InvalidMessage::BadConfiguration => "bad_configuration",
            InvalidMessage::BadTermHistory => "bad_term_history",
            InvalidMessage::BadRepairTerms => "bad_repair_terms",
            InvalidMessage::HeldNotAfter { .. } => "held_not_after",
            InvalidMessage::SecondLeader { .. } => "second_leader",
            InvalidMessage::AnswerFromFutureTerm { .. } => "answer_from_future_term",
        }
    }
}

impl RaftNode {
    /// Whether an honest peer could have sent `msg` to this node, as it is now (the rules are in
    /// the module documentation of `validate`). A refused message must not be stepped; an
    /// accepted one may still be ignored by the protocol (stale, duplicated, unexpected).
    pub fn validate(&self, msg: &Message) -> Result<(), InvalidMessage> {
        if msg.from == 0 || msg.to == 0 {
            return Err(InvalidMessage::ReservedNodeId);
        }
        if msg.to != self.id() {
            return Err(InvalidMessage::WrongRecipient { to: msg.to });
        }
        if msg.from == self.id() {
            return Err(InvalidMessage::FromSelf);
        }
        check_shape(msg)?;
        self.check_against_local_term(msg)
    }

    fn check_against_local_term(&self, msg: &Message) -> Result<(), InvalidMessage> {
        let local_term = self.term();
        let leads = matches!(
            msg.body,
            MessageBody::Append { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::InstallSnapshot { .. }
                | MessageBody::TimeoutNow
        );
        if leads && msg.term == local_term {
            if let Some(leader) = self.leader().filter(|l| *l != msg.from) {
                return Err(InvalidMessage::SecondLeader {
                    term: msg.term,
                    leader,
                });
            }
        }
        let impossible_answer = match msg.body {
            MessageBody::AppendResponse(_) | MessageBody::VoteResponse { granted: true } => {
                msg.term > local_term
            }
            MessageBody::HeartbeatResponse {
                read_round,
                lagging,
                ..
            } => msg.term > local_term && (read_round != 0 || lagging),
            _ => false,
        };
        if impossible_answer {
            return Err(InvalidMessage::AnswerFromFutureTerm {
                term: msg.term,
                local_term,
            });
        }
        Ok(())
    }
}

/// The rules that need nothing but the message.
#[expect(clippy::too_many_lines)]
fn check_shape(msg: &Message) -> Result<(), InvalidMessage> {
    if msg.term >= TERM_LIMIT {
        return Err(InvalidMessage::OutOfRange);
    }
    if msg.term == 0 && !matches!(msg.body, MessageBody::PreVoteResponse { granted: false }) {
        return Err(InvalidMessage::ZeroTerm);
    }
    let above = |what, term| InvalidMessage::TermAboveMessage {
        what,
        term,
        message_term: msg.term,
    };
    match &msg.body {
        MessageBody::PreVote { last_log_id } => {
            check_position(*last_log_id)?;
            // The sender's log is no newer than its term, one below the term it asks about.
            if last_log_id.term >= msg.term {
                return Err(above("the last log entry", last_log_id.term));
            }
        }
        MessageBody::RequestVote { last_log_id, .. } => {
            check_position(*last_log_id)?;
            if last_log_id.term > msg.term {
                return Err(above("the last log entry", last_log_id.term));
            }
        }
        MessageBody::Append {
            prev,
            entries,
            commit,
        } => {
            check_index(*commit)?;
            check_entries(*prev, entries, msg.term)?;
            check_configurations(entries)?;
        }
        MessageBody::RepairRequest {
            promised,
            last,
            terms,
            holds_last: _,
        } => {
            check_position(*promised)?;
            check_position(*last)?;
            check_former_terms(*promised, *last, terms)?;
        }
        MessageBody::RepairResponse(answer) => match answer {
            RepairAnswer::Entries { prev, entries } => {
                check_entries(*prev, entries, msg.term)?;
                check_configurations(entries)?;
            }
            RepairAnswer::Lacks { after } => check_position(*after)?,
            RepairAnswer::Committed { through, config } => {
                check_position(*through)?;
                if through.term > msg.term {
                    return Err(above("committed entry", through.term));
                }
                check_configuration(config)?;
            }
            RepairAnswer::Holds {
                after,
                through,
                config,
            } => {
                check_position(*after)?;
                check_position(*through)?;
                if through.term > msg.term {
                    return Err(above("held entry", through.term));
                }
                if through.index <= after.index || through.term < after.term {
                    return Err(InvalidMessage::HeldNotAfter {
                        after: *after,
                        through: *through,
                    });
                }
                check_configuration(config)?;
            }
            RepairAnswer::Unknown => {}
        },
        MessageBody::AppendResponse(result) => match *result {
            AppendResult::Success { match_index } => check_index(match_index)?,
            AppendResult::Conflict {
                rejected,
                hint_term,
                hint_index,
            } => {
                check_index(rejected)?;
                check_index(hint_index)?;
                if hint_term.is_some_and(|t| t >= TERM_LIMIT) {
                    return Err(InvalidMessage::OutOfRange);
                }
            }
        },
        MessageBody::Heartbeat { commit, .. } => check_index(*commit)?,
        MessageBody::InstallSnapshot { meta } => {
            check_position(meta.last)?;
            if meta.last.term > msg.term {
                return Err(above("the snapshot's last entry", meta.last.term));
            }
            if meta.membership.members().contains(&0) {
                return Err(InvalidMessage::BadConfiguration);
            }
            for t in &meta.term_history {
                check_position(*t)?;
                if t.index == 0 {
                    return Err(InvalidMessage::ImpossiblePosition(*t));
                }
            }
            if !term_history_fits(meta) {
                return Err(InvalidMessage::BadTermHistory);
            }
        }
        MessageBody::PreVoteResponse { .. }
        | MessageBody::VoteResponse { .. }
        | MessageBody::HeartbeatResponse { .. }
        | MessageBody::TimeoutNow => {}
    }
    Ok(())
}

fn check_configurations(entries: &[Entry]) -> Result<(), InvalidMessage> {
    for e in entries {
        if let EntryPayload::Membership(m) = &e.payload {
            check_configuration(m)?;
        }
    }
    Ok(())
}

fn check_configuration(config: &Membership) -> Result<(), InvalidMessage> {
    if config.voters.is_empty() || config.members().contains(&0) {
        return Err(InvalidMessage::BadConfiguration);
    }
    Ok(())
}

/// The most term starts a repair request may carry (a promise record keeps 16; one more for the
/// promised term's own, one for the clipped first).
pub const REPAIR_TERMS_MAX: usize = 32;

/// A repair request's term starts describe a log that continues `last` and ends at `promised`:
/// rising in term and index, after `last` and at most `promised` in both, the last one of
/// `promised.term`.
fn check_former_terms(promised: LogId, last: LogId, terms: &[LogId]) -> Result<(), InvalidMessage> {
    let rising = terms
        .windows(2)
        .all(|w| w[0].term < w[1].term && w[0].index < w[1].index);
    let within = terms
        .iter()
        .all(|t| t.index > last.index && t.index <= promised.index && t.term >= last.term);
    let ends = terms.last().is_some_and(|t| t.term == promised.term);
    if terms.len() > REPAIR_TERMS_MAX || !rising || !within || !ends {
        return Err(InvalidMessage::BadRepairTerms);
    }
    Ok(())
}

fn check_index(index: Index) -> Result<(), InvalidMessage> {
    if index >= INDEX_LIMIT {
        return Err(InvalidMessage::OutOfRange);
    }
    Ok(())
}

/// A position some honest log can hold: the sentinel 0/0 or an entry's, below the limits.
fn check_position(id: LogId) -> Result<(), InvalidMessage> {
    if id.term >= TERM_LIMIT || id.index >= INDEX_LIMIT {
        return Err(InvalidMessage::OutOfRange);
    }
    if (id.index == 0) != (id.term == 0) {
        return Err(InvalidMessage::ImpossiblePosition(id));
    }
    Ok(())
}

/// Whether `entries` can follow `prev` in the log of a leader of `term`. The core checks this too
/// before it appends anything (a gap or a falling term would break the log's invariants).
pub(crate) fn check_entries(
    prev: LogId,
    entries: &[Entry],
    term: Term,
) -> Result<(), InvalidMessage> {
    check_position(prev)?;
    if prev.term > term {
        return Err(InvalidMessage::TermAboveMessage {
            what: "the previous entry",
            term: prev.term,
            message_term: term,
        });
    }
    let mut before = prev;
    for e in entries {
        let id = e.log_id();
        check_position(id)?;
        if id.index == 0 {
            return Err(InvalidMessage::ImpossiblePosition(id));
        }
        if before.index.checked_add(1) != Some(id.index) {
            return Err(InvalidMessage::EntryGap {
                after: before.index,
                index: id.index,
            });
        }
        if id.term < before.term {
            return Err(InvalidMessage::EntryTermFalls {
                before: before.term,
                entry: id,
            });
        }
        if id.term > term {
            return Err(InvalidMessage::TermAboveMessage {
                what: "an entry",
                term: id.term,
                message_term: term,
            });
        }
        before = id;
    }
    Ok(())
}

/// Whether a snapshot's term history rises in both term and index and ends at or before its last
/// entry (anything else comes from another cluster incarnation or is corrupt, scenario S10).
pub(crate) fn term_history_fits(meta: &SnapshotMeta) -> bool {
    meta.term_history
        .windows(2)
        .all(|w| w[0].term < w[1].term && w[0].index < w[1].index)
        && meta
            .term_history
            .last()
            .is_none_or(|t| t.term <= meta.last.term && t.index <= meta.last.index)
}
