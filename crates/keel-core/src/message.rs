//! Messages between Raft nodes. The core neither encodes nor sends them; the runtime's transport
//! and the simulator's network do.

use crate::membership::Membership;
use crate::types::{Entry, Index, LogId, NodeId, SnapshotMeta, Term};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub from: NodeId,
    pub to: NodeId,
    /// The sender's term. For a pre-vote request it is the term the sender would campaign in;
    /// for a granted pre-vote response it echoes that term.
    pub term: Term,
    pub body: MessageBody,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageBody {
    /// Asks whether an election in `term` could be won, without disturbing anyone (thesis 9.6).
    PreVote {
        last_log_id: LogId,
    },
    PreVoteResponse {
        granted: bool,
    },
    /// `transfer` marks an election started by TimeoutNow, which voters honour even while they
    /// believe a leader is alive.
    RequestVote {
        last_log_id: LogId,
        transfer: bool,
    },
    VoteResponse {
        granted: bool,
    },
    Append {
        prev: LogId,
        entries: Vec<Entry>,
        commit: Index,
    },
    AppendResponse(AppendResult),
    /// Keeps followers from campaigning, carries a commit index the follower is known to hold
    /// (`min(match, commit)`), and confirms leadership for ReadIndex rounds (`read_round`).
    Heartbeat {
        commit: Index,
        read_round: u64,
        clock: LeaderClock,
    },
    /// `lagging`: the heartbeat's commit index is beyond what this node has proven to match
    /// the leader in this term (it restarted, or lost entries it had acknowledged, S29); the
    /// leader should probe it.
    HeartbeatResponse {
        read_round: u64,
        lagging: bool,
        clock: FollowerClock,
    },
    /// Tells the leadership-transfer target to campaign at once.
    TimeoutNow,
    /// A snapshot is ready for the follower: its data was streamed beside this message by the
    /// transport (chunked, checksummed, resumable) and is durable on the receiver before the
    /// transport hands this to the core. The reply is an `AppendResponse`.
    InstallSnapshot {
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
        promised: LogId,
        last: LogId,
        terms: Vec<LogId>,
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
    Entries { prev: LogId, entries: Vec<Entry> },
    /// The responder's log holds none of the entries the requester had after `after` (the
    /// request's `last`), and its term (the message's) is above the promised term, so it will
    /// never acknowledge one to that term's leader: no commit of them can count on it.
    Lacks { after: LogId },
    /// The responder's log holds the entries the requester had after `after` (the request's
    /// `last`) through `through` and none after it, in effect there the configuration `config`,
    /// and its term (the message's) is above the promised term, so it will never acknowledge a
    /// later one to that term's leader: [`RepairAnswer::Lacks`] from `through` on. Sent when the
    /// requester cannot take entries after `after`.
    Holds {
        after: LogId,
        through: LogId,
        config: Membership,
    },
    /// The responder's commit index is `through`, beyond the request's `last`, in effect there
    /// the configuration `config`, and it cannot send the entries (it compacted them): the
    /// requester may ask from there instead.
    Committed { through: LogId, config: Membership },
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendResult {
    /// The follower's log matches the leader's up to `match_index`, durably.
    Success { match_index: Index },
    /// The follower does not hold `rejected` (the request's `prev`). `hint` is where the leader
    /// should look next: the follower's last index if its log is shorter, otherwise the term of
    /// the follower's entry at `rejected.index` with the first index of that term.
    Conflict {
        rejected: Index,
        hint_term: Option<Term>,
        hint_index: Index,
    },
}
