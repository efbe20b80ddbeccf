//! Tunables of one Raft node. Every bound the core enforces lives here, with its unit in its name.

use crate::types::NodeId;

/// The settings of one [`RaftNode`](crate::RaftNode), fixed for its lifetime. Times are in ticks,
/// whatever real time the runtime makes a tick ([`RaftNode::tick`](crate::RaftNode::tick)).
/// Start from [`Config::new`]; [`RaftNode::new`](crate::RaftNode::new) refuses what
/// [`Config::validate`] refuses.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's id: non-zero and unique in the cluster.
    pub id: NodeId,
    /// Seed of the node's private PRNG (election timeout jitter). The same seed and the same
    /// inputs give the same behaviour.
    pub seed: u64,
    /// A follower campaigns after hearing nothing for a random time in
    /// `[election_timeout_ticks, 2 * election_timeout_ticks)`.
    pub election_timeout_ticks: u32,
    /// A leader sends heartbeats (and retransmits to stalled followers) every this many ticks,
    /// and a commit index that moved without entries is written at the next such interval's end.
    /// Must be below `election_timeout_ticks`.
    pub heartbeat_interval_ticks: u32,
    /// Ask whether an election could be won before disturbing the cluster with a higher term.
    pub pre_vote: bool,
    /// A leader that has not heard from a quorum for an election timeout steps down, and voters
    /// that heard from a leader within the minimum election timeout ignore ordinary vote requests.
    ///
    /// With neither this nor `pre_vote`, a member removed while it could not hear the leader
    /// may never learn that it was removed and depose every later leader with its elections
    /// (Raft thesis 4.2.3); shut such a node down. Either one alone prevents it.
    pub check_quorum: bool,
    /// Flow control: the most entries one Append (or repair answer) carries.
    pub entries_per_message_max: usize,
    /// Flow control: the most bytes of entries one Append (or repair answer) carries, counted by
    /// [`Entry::size_bytes`](crate::Entry::size_bytes). The first entry goes even if it alone
    /// is larger, so any entry can be replicated.
    pub bytes_per_message_max: usize,
    /// Pipelining: Append messages in flight per follower.
    pub inflight_messages_max: usize,
    /// Batching while an Append is in flight. With this set, a further Append to the same
    /// follower leaves only if the message limits cut it short (more entries wait behind it, as
    /// in a follower's catch-up); one that would carry the log's tail waits for the answer, and
    /// entries proposed meanwhile leave with it. Fewer, larger messages and writes: each round
    /// to a follower then costs it one write and one fsync, instead of a second Append queueing
    /// behind the fsync in progress and the entries after it waiting for a third. Off, every
    /// batch leaves at once while the window allows: less waiting on long round trips at the
    /// cost of more, smaller messages.
    pub hold_partial_appends: bool,
    /// Bound on entries handed to the application in one `Ready`.
    pub apply_entries_max: usize,
    /// Bound on entries handed to the application and not yet reported applied: the length of
    /// the apply pipeline. Startup replay of millions of committed entries streams through it
    /// instead of being handed out at once.
    pub unapplied_entries_max: u64,
    /// Bound on proposals accepted but not yet committed; beyond it `propose` refuses.
    pub uncommitted_entries_max: usize,
    /// Bound on ReadIndex requests waiting on the leader.
    pub pending_reads_max: usize,
    /// Log entries kept below a snapshot's index when the log is compacted, so a follower that is
    /// slightly behind catches up from the log instead of by snapshot.
    pub snapshot_trailing_entries: u64,
    /// A snapshot transfer that has not been answered within this many ticks is abandoned and
    /// the follower probed again.
    pub snapshot_timeout_ticks: u32,
    /// Test-only switch for a deliberately broken protocol variant.
    #[cfg(feature = "mutations")]
    pub mutation: Option<crate::Mutation>,
}

impl Config {
    /// The defaults for node `id`, seeded with `id`: election timeouts drawn from `[10, 20)`
    /// ticks, a heartbeat every 2, pre-vote and check-quorum on.
    pub fn new(id: NodeId) -> Self {
        Config {
            id,
            seed: id,
            election_timeout_ticks: 10,
            heartbeat_interval_ticks: 2,
            pre_vote: true,
            check_quorum: true,
            entries_per_message_max: 512,
            bytes_per_message_max: 1 << 20,
            inflight_messages_max: 64,
            hold_partial_appends: true,
            apply_entries_max: 4096,
            unapplied_entries_max: 16_384,
            uncommitted_entries_max: 65_536,
            pending_reads_max: 65_536,
            snapshot_trailing_entries: 1024,
            snapshot_timeout_ticks: 200,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Refuses settings the node cannot run with
    /// ([`Error::InvalidConfig`](crate::Error::InvalidConfig)): node id 0, a zero heartbeat
    /// interval, an election timeout not above the heartbeat interval, or a zero bound on
    /// messages, the in-flight window, applies or uncommitted entries.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let bad = |why: &'static str| Err(crate::Error::InvalidConfig(why));
        if self.id == 0 {
            return bad("node id 0 is reserved");
        }
        if self.heartbeat_interval_ticks == 0 {
            return bad("heartbeat_interval_ticks must be positive");
        }
        if self.election_timeout_ticks <= self.heartbeat_interval_ticks {
            return bad("election_timeout_ticks must exceed heartbeat_interval_ticks");
        }
        if self.entries_per_message_max == 0
            || self.bytes_per_message_max == 0
            || self.inflight_messages_max == 0
            || self.apply_entries_max == 0
            || self.unapplied_entries_max == 0
            || self.uncommitted_entries_max == 0
            || self.pending_reads_max == 0
        {
            return bad(
                "message, in-flight, apply, uncommitted and pending-read bounds must be positive",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Config;

    /// Every bound 0 would refuse all its work forever (a read bound of 0 refused every read):
    /// each is refused at start instead.
    #[test]
    fn a_bound_of_zero_is_refused() {
        assert!(Config::new(1).validate().is_ok());
        let zeroed: [fn(&mut Config); 7] = [
            |c| c.entries_per_message_max = 0,
            |c| c.bytes_per_message_max = 0,
            |c| c.inflight_messages_max = 0,
            |c| c.apply_entries_max = 0,
            |c| c.unapplied_entries_max = 0,
            |c| c.uncommitted_entries_max = 0,
            |c| c.pending_reads_max = 0,
        ];
        for (i, zero) in zeroed.iter().enumerate() {
            let mut config = Config::new(1);
            zero(&mut config);
            assert!(config.validate().is_err(), "bound {i} at zero was accepted");
        }
    }
}
