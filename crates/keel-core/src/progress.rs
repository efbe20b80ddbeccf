//! The leader's view of one follower's replication (etcd-raft's `tracker` in spirit).
//!
//! Per follower: the match and next indexes, the state ([`ReplicationState`]: Probe, one Append
//! at a time; Replicate, pipelined; Snapshot, waiting for a transfer), the in-flight window of
//! Appends, the ticks since it last answered (`RaftNode::progress` reports it
//! `recently_active` when it answered within an election timeout), and the snapshot on its way
//! (`pending_snapshot`: after a failed transfer the follower is probed from just after it, as in
//! etcd-raft, never from the match index, which would ask a follower the leader never heard from
//! for purged entries, and so send the snapshot again, forever).

use std::collections::VecDeque;

use crate::types::Index;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationState {
    /// The follower's position is unknown: one Append at a time until one is accepted.
    Probe,
    /// The follower is known to match up to `match_index`: Appends are pipelined up to the
    /// in-flight window.
    Replicate,
    /// The follower needs entries this leader purged: a snapshot is being streamed to it.
    Snapshot,
}

#[derive(Clone, Debug)]
pub struct Progress {
    /// Highest index known to be durably replicated on the follower.
    pub match_index: Index,
    /// Next index to send.
    pub next_index: Index,
    pub state: ReplicationState,
    /// In Probe: an Append is outstanding, wait for its answer or the next heartbeat.
    pub probe_sent: bool,
    /// Last index of each Append in flight, ascending (Replicate only).
    pub inflight: VecDeque<Index>,
    /// Heard from since the last check-quorum round.
    pub recent_active: bool,
    /// Leader ticks since the follower last answered (`u32::MAX`: never, under this leader).
    /// Unlike `recent_active`, not reset in rounds: it says whether the follower is up *now*.
    pub silent_ticks: u32,
    /// Highest ReadIndex round the follower confirmed.
    pub read_round_acked: u64,
    /// Ticks since the follower last acknowledged progress while Appends were in flight; after
    /// a bound the leader assumes them lost and probes again.
    pub stalled_ticks: u32,
    /// In Snapshot: the last index of the snapshot on its way.
    pub pending_snapshot: Index,
}

impl Progress {
    /// The follower answered.
    pub fn heard(&mut self) {
        self.recent_active = true;
        self.silent_ticks = 0;
    }

    pub fn new(next_index: Index) -> Self {
        Progress {
            match_index: 0,
            next_index,
            state: ReplicationState::Probe,
            probe_sent: false,
            inflight: VecDeque::new(),
            recent_active: false,
            silent_ticks: u32::MAX,
            read_round_acked: 0,
            stalled_ticks: 0,
            pending_snapshot: 0,
        }
    }

    /// Whether another Append with entries may be sent now.
    pub fn can_send(&self, inflight_max: usize) -> bool {
        match self.state {
            ReplicationState::Probe => !self.probe_sent,
            ReplicationState::Replicate => self.inflight.len() < inflight_max,
            ReplicationState::Snapshot => false,
        }
    }

    /// Records an accepted Append up to `index`. Returns whether `match_index` moved.
    pub fn on_success(&mut self, index: Index) -> bool {
        self.stalled_ticks = 0;
        self.probe_sent = false;
        while self.inflight.front().is_some_and(|&i| i <= index) {
            self.inflight.pop_front();
        }
        if self.state != ReplicationState::Replicate {
            self.state = ReplicationState::Replicate;
            self.inflight.clear();
        }
        if index > self.match_index {
            self.match_index = index;
            self.next_index = self.next_index.max(index + 1);
            true
        } else {
            false
        }
    }

    /// Falls back to probing from `next_index`.
    pub fn become_probe(&mut self, next_index: Index) {
        self.state = ReplicationState::Probe;
        self.probe_sent = false;
        self.inflight.clear();
        self.stalled_ticks = 0;
        self.next_index = next_index.max(self.match_index + 1);
    }

    /// The snapshot transfer failed or timed out: probe from just after the snapshot that was on
    /// its way. A follower that already holds it (received before, or its log reached that far,
    /// so the receiver refused it as not needed) accepts the probe; one that does not rejects it
    /// and is sent a snapshot again. Probing from the match index instead would ask a follower
    /// the leader has heard nothing from for purged entries: the snapshot again, forever.
    pub fn probe_after_snapshot(&mut self) {
        debug_assert_eq!(self.state, ReplicationState::Snapshot);
        let next = (self.match_index + 1).max(self.pending_snapshot + 1);
        self.become_probe(next);
    }

    /// The snapshot ending at `snapshot_index` is on its way; no Appends until the follower
    /// answers or the transfer fails.
    pub fn become_snapshot(&mut self, snapshot_index: Index) {
        self.state = ReplicationState::Snapshot;
        self.pending_snapshot = snapshot_index;
        self.probe_sent = false;
        self.inflight.clear();
        self.stalled_ticks = 0;
    }

    /// Notes an Append that ends at `last_index` was sent.
    pub fn sent(&mut self, last_index: Index, has_entries: bool) {
        match self.state {
            ReplicationState::Probe => self.probe_sent = true,
            ReplicationState::Replicate => {
                if has_entries {
                    self.inflight.push_back(last_index);
                    self.next_index = last_index + 1;
                }
            }
            ReplicationState::Snapshot => unreachable!("no Appends while a snapshot is in flight"),
        }
    }
}
