//! keel-core: the Raft consensus protocol as a pure state machine.
//!
//! No I/O, no clock, no threads, no async, no randomness of its own: time arrives as
//! [`RaftNode::tick`], messages as [`RaftNode::step`], storage and state-machine progress as
//! completions ([`RaftNode::persisted`], [`RaftNode::applied`]), and everything the node wants done
//! comes out of [`RaftNode::ready`]. See ARCHITECTURE.md for the map.
//!
//! With the `mutations` feature (enabled only by keel-sim), `Config::mutation` switches on a
//! deliberately broken variant ([`Mutation`]); keel-engine and keel-wal branch on the same enum
//! (the Redis server's variants are keel-redis's own), and the simulator's tests show that it
//! catches each.

#![deny(missing_docs)]

pub mod codec;
pub mod config;
mod durability;
pub mod log;
pub mod membership;
pub mod message;
mod node;
mod progress;
mod rng;
pub mod storage;
pub mod types;
mod validate;

pub use config::Config;
pub use durability::Write;
pub use membership::{Membership, MembershipChange};
pub use message::{AppendResult, FollowerClock, LeaderClock, Message, MessageBody, RepairAnswer};
pub use node::{
    CommitStatus, FollowerProgress, ProposeError, RaftNode, ReadError, ReadState, Ready,
    RecoveredState, Role, Status,
};

pub use types::{
    Entry, EntryPayload, GroupId, HardState, Index, LogId, NodeId, SnapshotMeta, Term, INDEX_LIMIT,
    TERM_LIMIT,
};
pub use validate::InvalidMessage;

/// Errors from constructing a node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// [`Config::validate`] refused the configuration; the text names the rule it broke.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// The [`RecoveredState`] contradicts itself: a log that is not contiguous or whose terms
    /// fall, or an applied index below the snapshot or beyond the last entry. The text says
    /// which, with the indexes.
    #[error("recovered state is corrupt: {0}")]
    Corrupt(String),
}

/// Deliberately broken protocol variants, so the simulator can show that it catches each one.
/// The enum always exists; only the `mutations` feature compiles the fields that select a variant
/// (`Config::mutation` here, its like in keel-engine and keel-wal), so without it no variant can
/// be switched on. Never enabled in the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Commit an entry of a previous term by counting its replicas (Raft paper Figure 8).
    CommitOldTerm,
    /// Grant a vote before the vote is durable.
    VoteBeforeDurable,
    /// Acknowledge appended entries before they are durable.
    AckBeforeDurable,
    /// Serve ReadIndex before the leader committed an entry of its term.
    ReadWithoutTermCommit,
    /// Accept a snapshot by comparing its index with the applied index instead of the commit
    /// index (the NuRaft bug of scenario S01).
    InstallBelowCommit,
    /// Keep log entries after a snapshot whose last (index, term) the log does not hold.
    KeepConflictingSuffix,
    // Runtime variants: branches in keel-engine and keel-wal code that the server runs too
    // (compiled out without the feature). The Redis server's own are `keel_redis::Mutation`.
    /// A snapshot restore overtakes committed entries still queued in the apply pipeline.
    ApplySnapshotOverPending,
    /// The storage worker reports a write durable before its sync.
    StorageCompleteBeforeSync,
    /// A resumed snapshot transfer starts one chunk after the offset the receiver holds.
    SnapshotResumeSkipsChunk,
    /// The handshake gate never forgets a member's storage incarnation when the member leaves
    /// the configuration (nor after a snapshot skipped its history): a member added back with
    /// a new disk is refused for good.
    KeepDepartedIncarnations,
    /// The leader reports a follower's clock offset as the middle of its measured interval,
    /// which a slow or lopsided network can move beyond the truth, instead of the value nearest
    /// zero.
    ClockOffsetMidpoint,
    /// A node recovering from storage damage (`RaftNode::start_recovering`) grants votes as if
    /// its log still held what it had promised: to candidates whose logs stop below it.
    VoteBelowPromise,
    /// keel-wal's recovery trusts a log that ends below the promise record (a disk that lost
    /// writes it had reported flushed): the lost tail is not reported as damage, so the node
    /// starts as if whole, on the term and vote its shorter log holds.
    TrustDamagedTail,
    /// A recovering node never leaves the recovering state, whatever its log holds: safe, but it
    /// never campaigns again (the simulator's `damaged node whole` invariant).
    RecoveryNeverEnds,
    /// keel-wal prunes the bootstrap snapshot like any other: a node whose newer snapshots are
    /// all damaged and set aside replays its log under an empty configuration (the simulator's
    /// `configuration agreement` invariant).
    PruneBootstrapSnapshot,
    /// A recovering node lets go of its promise on the first peer that reports lacking the
    /// entries, whatever its term and whatever the quorums (keel-core's `repair.rs`).
    ReleasePromiseEarly,
    /// A recovering node that lowers its promise to a former entry it lacks
    /// (keel-core's `repair.rs`) lowers it one entry further, below an entry a quorum may hold.
    LowerPromiseTooFar,
}

impl Mutation {
    /// Every variant, in declaration order: what the simulator's tests run one by one.
    pub const ALL: [Mutation; 17] = [
        Mutation::CommitOldTerm,
        Mutation::VoteBeforeDurable,
        Mutation::AckBeforeDurable,
        Mutation::ReadWithoutTermCommit,
        Mutation::InstallBelowCommit,
        Mutation::KeepConflictingSuffix,
        Mutation::ApplySnapshotOverPending,
        Mutation::StorageCompleteBeforeSync,
        Mutation::SnapshotResumeSkipsChunk,
        Mutation::KeepDepartedIncarnations,
        Mutation::ClockOffsetMidpoint,
        Mutation::VoteBelowPromise,
        Mutation::TrustDamagedTail,
        Mutation::RecoveryNeverEnds,
        Mutation::PruneBootstrapSnapshot,
        Mutation::ReleasePromiseEarly,
        Mutation::LowerPromiseTooFar,
    ];

    /// The variant's kebab-case name: how keel-sim's `--mutation` names it on the command line
    /// and in the replay command it prints.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::CommitOldTerm => "commit-old-term",
            Mutation::VoteBeforeDurable => "vote-before-durable",
            Mutation::AckBeforeDurable => "ack-before-durable",
            Mutation::ReadWithoutTermCommit => "read-without-term-commit",
            Mutation::InstallBelowCommit => "install-below-commit",
            Mutation::KeepConflictingSuffix => "keep-conflicting-suffix",
            Mutation::ApplySnapshotOverPending => "apply-snapshot-over-pending",
            Mutation::StorageCompleteBeforeSync => "storage-complete-before-sync",
            Mutation::SnapshotResumeSkipsChunk => "snapshot-resume-skips-chunk",
            Mutation::KeepDepartedIncarnations => "keep-departed-incarnations",
            Mutation::ClockOffsetMidpoint => "clock-offset-midpoint",
            Mutation::VoteBelowPromise => "vote-below-promise",
            Mutation::TrustDamagedTail => "trust-damaged-tail",
            Mutation::RecoveryNeverEnds => "recovery-never-ends",
            Mutation::PruneBootstrapSnapshot => "prune-bootstrap-snapshot",
            Mutation::ReleasePromiseEarly => "release-promise-early",
            Mutation::LowerPromiseTooFar => "lower-promise-too-far",
        }
    }

    /// The variant whose [`Mutation::name`] is `name`; `None` for any other string.
    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }
}
