//! Messages between Raft nodes. The core neither encodes nor sends them; the runtime's transport
//! and the simulator's network do.

use crate::membership::Membership;
use crate::types::{Entry, Index, LogId, NodeId, SnapshotMeta, Term};

/// One message between two nodes of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The sender. Never 0, and never the receiver
    /// ([`RaftNode::validate`](crate::RaftNode::validate) refuses both).
    pub from: NodeId,
    /// The receiver; a node ignores a message addressed to another.
    pub to: NodeId,
    /// The sender's term. For a pre-vote request it is the term the sender would campaign in;
    /// for a granted pre-vote response it echoes that term.
    pub term: Term,
    /// What the message says.
    pub body: MessageBody,
}

/// What a [`Message`] says: the requests and answers of the Raft protocol, plus repair of a
/// node whose storage lost what it had acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageBody {
    /// Asks whether an election in `term` could be won, without disturbing anyone (thesis 9.6).
    PreVote {
        /// The sender's last log position, for the "at least as up to date" check.
        last_log_id: LogId,
    },
    /// The answer to a `PreVote`. A grant carries the term asked about; a refusal carries the
    /// responder's own term (0 from a node that never had one).
    PreVoteResponse {
        /// Whether the responder would vote for the sender in that term.
        granted: bool,
    },
    /// `transfer` marks an election started by TimeoutNow, which voters honour even while they
    /// believe a leader is alive.
    RequestVote {
        /// The candidate's last log position, for the "at least as up to date" check.
        last_log_id: LogId,
        /// The election was started by `TimeoutNow`.
        transfer: bool,
    },
    /// The answer to a `RequestVote`. It leaves only once the vote it reports is durable.
    VoteResponse {
        /// Whether the responder voted for the candidate in the message's term.
        granted: bool,
    },
    /// Log replication (Raft paper Figure 2's AppendEntries): entries that continue `prev` in
    /// the leader's log. An Append without entries probes where the follower's log matches.
    Append {
        /// The entry just before `entries`, which the receiver must hold for them to be taken.
        prev: LogId,
        /// Entries from `prev.index + 1` on, contiguous, bounded by the leader's
        /// `entries_per_message_max` and `bytes_per_message_max`.
        entries: Vec<Entry>,
        /// The leader's commit index. A follower commits at most what this message proved its log
        /// to share with the leader's.
        commit: Index,
    },
    /// The answer to an `Append` or an `InstallSnapshot`. A success leaves only once what it
    /// acknowledges is durable.
    AppendResponse(AppendResult),
    /// Keeps followers from campaigning, carries a commit index the follower is known to hold
    /// (`min(match, commit)`), and confirms leadership for ReadIndex rounds (`read_round`).
    Heartbeat {
        /// A commit index the follower holds the entries for, as far as the leader knows.
        commit: Index,
        /// The latest ReadIndex round the leader broadcast (0 before its first).
        read_round: u64,
        /// The leader's wall-clock readings; all zero as the core sends them.
        clock: LeaderClock,
    },
    /// `lagging`: the heartbeat's commit index is beyond what this node has proven to match
    /// the leader in this term (it restarted, or lost entries it had acknowledged, S29); the
    /// leader should probe it.
    HeartbeatResponse {
        /// The heartbeat's `read_round`, echoed: the follower confirms the leader up to that
        /// round. 0 in the bare answer a node sends a stale leader to tell it its newer term.
        read_round: u64,
        /// Whether the heartbeat's commit index lies beyond the prefix this node has proven to
        /// match the leader's log in this term; false in the bare answer to a stale leader.
        lagging: bool,
        /// The readings for the leader's clock-offset measurement.
        clock: FollowerClock,
    },
    /// Tells the leadership-transfer target to campaign at once.
    TimeoutNow,
    /// A snapshot is ready for the follower: its data was streamed beside this message by the
    /// transport (chunked, checksummed, resumable) and is durable on the receiver before the
    /// transport hands this to the core. The reply is an `AppendResponse`.
    InstallSnapshot {
        /// What the snapshot covers: its last entry, the configuration and term history there.
        meta: SnapshotMeta,
    },
    /// A node recovering from storage damage (`RaftNode::start_recovering`) that hears no leader
    /// asks a peer for what it lost: `promised` is the entry it had acknowledged, `last` the end
    /// of the part of its log known to be a prefix of the log that held `promised` (or an entry
    /// a peer reported committed), `terms` what it knows of that log after `last`: the first
    /// index of each of its terms, rising, the last one of `promised.term` (the first may be
    /// clipped to `last.index + 1`; node/repair.rs). `holds_last`: the requester holds `last`
    /// and can append entries after it (false when `last` is a committed entry it lacks, which
    /// only a leader's snapshot can bring). It changes nobody's term by itself (a leaderless
    /// peer that lacks the entries may move to the term after `promised.term`, see
    /// [`RepairAnswer::Lacks`]).
    RepairRequest {
        /// The last entry the requester had acknowledged before its storage lost it.
        promised: LogId,
        /// Where the requester asks from.
        last: LogId,
        /// The first index of each term of the lost log after `last`, rising (at most 32).
        terms: Vec<LogId>,
        /// Whether the requester holds `last` and can take entries after it.
        holds_last: bool,
    },
    /// The answer to a `RepairRequest`, in the responder's term.
    RepairResponse(RepairAnswer),
}

/// What a peer can do for a recovering node (node/repair.rs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepairAnswer {
    /// Entries of the responder's log after `prev` (the request's `last`, which the requester
    /// holds), through at most the requester's promised index: entries of the log the requester
    /// had (the responder holds an entry of one of its terms at or before that term's last index
    /// in it, which only that term's leader wrote, and Log Matching makes the prefix before it
    /// the requester's own), or committed ones.
    Entries {
        /// The entry the answer continues: the request's `last`.
        prev: LogId,
        /// The responder's entries from `prev.index + 1` on, within its message bounds.
        entries: Vec<Entry>,
    },
    /// The responder's log holds none of the entries the requester had after `after` (the
    /// request's `last`), and its term (the message's) is above the promised term, so it will
    /// never acknowledge one to that term's leader: no commit of them can count on it.
    Lacks {
        /// The request's `last`.
        after: LogId,
    },
    /// The responder's log holds the entries the requester had after `after` (the request's
    /// `last`) through `through` and none after it, in effect there the configuration `config`,
    /// and its term (the message's) is above the promised term, so it will never acknowledge a
    /// later one to that term's leader: [`RepairAnswer::Lacks`] from `through` on. Sent when the
    /// requester cannot take entries after `after`.
    Holds {
        /// The request's `last`.
        after: LogId,
        /// The responder's last entry of the requester's former log; after `after`.
        through: LogId,
        /// The configuration in effect at `through`.
        config: Membership,
    },
    /// The responder's commit index is `through`, beyond the request's `last`, in effect there
    /// the configuration `config`, and it cannot send the entries (it compacted them): the
    /// requester may ask from there instead.
    Committed {
        /// The responder's commit index, with that entry's term.
        through: LogId,
        /// The configuration in effect at `through`.
        config: Membership,
    },
    /// None of these can be said: the responder is recovering too, or holds entries of older
    /// terms where the requester's lost ones were.
    Unknown,
}

/// The wall-clock readings a heartbeat carries, in ms since the Unix epoch, from which the leader
/// measures each follower's clock offset (keel-engine's `clock` module). The core has no wall
/// clock: it sends zeros, the runtime writes the readings on the way out, and the core only
/// echoes `sent_at_ms` in the response. Zero means "not measured".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderClock {
    /// The leader's clock when it sent the heartbeat.
    pub sent_at_ms: u64,
    /// The leader's latest measurement of the receiver's clock minus its own, the value of the
    /// measurement's interval nearest zero (so it never overstates an offset); `None` when it has
    /// none, or when its own clock is the one a majority of voters disagree with.
    pub your_offset_ms: Option<i64>,
}

/// The readings a heartbeat's response carries (see [`LeaderClock`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowerClock {
    /// The heartbeat's `sent_at_ms`, echoed by the core.
    pub echo_sent_at_ms: u64,
    /// The follower's clock when it sent the response.
    pub answered_at_ms: u64,
}

/// A follower's answer to an `Append` or an `InstallSnapshot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendResult {
    /// The follower's log matches the leader's up to `match_index`, durably.
    Success {
        /// For an Append, the last index the request proved to match: its last entry's, or the
        /// follower's commit index if that is further. For an install, the snapshot's last
        /// index, or the follower's commit index if the snapshot does not reach beyond it.
        match_index: Index,
    },
    /// The follower does not hold the entry at `rejected` (the request's `prev`). The hint is
    /// where the leader should look next (fast backtracking): one past the follower's last index
    /// if its log is shorter, otherwise the term of the follower's entry at `rejected` with the
    /// first index of that term.
    Conflict {
        /// The index of the request's `prev`.
        rejected: Index,
        /// The term of the follower's entry at `rejected`; `None` when its log ends before it.
        hint_term: Option<Term>,
        /// With `hint_term`, the first index of that term in the follower's log (never at or
        /// below its commit index); without, the follower's last index plus one.
        hint_index: Index,
    },
}
