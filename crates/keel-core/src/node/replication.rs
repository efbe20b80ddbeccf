//! Log replication: the leader's Append pipeline and commit rule, the follower's consistency
//! check (Raft paper section 5.3, Figure 2), heartbeats, and the leader's write pacing.
//!
//! Followers are in Probe (one Append at a time, finding the match point with the conflict hint:
//! the follower names the term at the rejected index and that term's first index, or its last
//! index) or Replicate (pipelined up to `inflight_messages_max`: 64 in the core's default, 2 in
//! the runtime's; each message bounded by `entries_per_message_max` and
//! `bytes_per_message_max`). New proposals are batched: appending only marks replication
//! pending; `ready()` sends one batch per follower. With `hold_partial_appends` (the default),
//! only Appends the limits cut short are pipelined (a follower catching up); the log's tail waits
//! until the Appends in flight are answered and then leaves as one message, so each round costs a
//! follower one write and one fsync. A follower whose Appends stall for half an election timeout
//! is probed again (lost messages). A probe rejected at or below the follower's acknowledged
//! index means it lost acknowledged entries (S29); the leader resets its view and re-replicates.
//!
//! Commit advances only through an entry of the leader's term (Figure 8), counting the leader
//! itself only up to its `durable_index` (`maybe_commit`); while every follower's window is full,
//! new entries are written only with the Append that carries them (`write_limit`; the
//! persistence model is in `durability.rs`). A follower commits at most what the current request
//! proved to match (S15) and at most its last index (S29).

use super::{RaftNode, Role};
use crate::message::{AppendResult, FollowerClock, LeaderClock, Message, MessageBody};
use crate::progress::ReplicationState;
use crate::types::{Entry, Index, LogId, NodeId};

impl RaftNode {
    // ----- follower side -----

    pub(super) fn on_append_or_heartbeat(&mut self, msg: Message) {
        if self.role == Role::Leader {
            // No honest peer claims to lead this node's own term (election safety): the message
            // is forged or its sender broken. Ignored; following it would give the term two
            // leaders. A real violation is the simulator's checker's to find, not a crash here.
            return;
        }
        if self.role != Role::Follower {
            // A candidate that hears from a leader of its own term steps back (section 5.2).
            self.become_follower(self.term, Some(msg.from));
        }
        self.leader = Some(msg.from);
        self.election_elapsed_ticks = 0;
        match msg.body {
            MessageBody::Append {
                prev,
                entries,
                commit,
            } => self.on_append(msg.from, prev, entries, commit),
            MessageBody::Heartbeat {
                commit,
                read_round,
                clock,
            } => {
                // The leader sends min(match, commit), a prefix it believes this node holds. Trust
                // only the prefix an Append of this term proved: after a restart or a disk that
                // lost acknowledged writes, the log beyond it may hold stale entries (S29).
                let proven = self.leader_match.min(self.log.last_index());
                self.advance_commit_to(commit.min(proven));
                let reply = self.message(
                    msg.from,
                    MessageBody::HeartbeatResponse {
                        read_round,
                        lagging: commit > proven,
                        clock: FollowerClock {
                            echo_sent_at_ms: clock.sent_at_ms,
                            answered_at_ms: 0,
                        },
                    },
                );
                self.send_after_term_persisted(reply);
            }
            MessageBody::InstallSnapshot { meta } => self.on_install_snapshot(msg.from, meta),
            _ => unreachable!("only Append, Heartbeat and InstallSnapshot are routed here"),
        }
    }

    fn on_append(
        &mut self,
        leader: NodeId,
        prev: LogId,
        entries: Vec<Entry>,
        leader_commit: Index,
    ) {
        if crate::validate::check_entries(prev, &entries, self.term).is_err() {
            // Entries no leader of this term could send: a gap, falling terms, a term above the
            // leader's or one at the limits. Appending them would break the log's own
            // invariants, so nothing is taken and nothing answered.
            return;
        }
        let result = self.try_append(prev, entries, leader_commit);
        let reply = self.message(leader, MessageBody::AppendResponse(result));
        let success = matches!(result, AppendResult::Success { .. });
        if let AppendResult::Success { match_index } = result {
            self.leader_match = self.leader_match.max(match_index);
            self.note_acknowledged_leader();
        }
        if success && self.mutated(crate::Mutation::AckBeforeDurable) {
            self.messages.push(reply);
        } else {
            self.send_after_persist(reply);
        }
    }

    fn try_append(
        &mut self,
        prev: LogId,
        entries: Vec<Entry>,
        leader_commit: Index,
    ) -> AppendResult {
        // Entries at or below our commit index are already known to match the leader's (Leader
        // Completeness), whatever the leader's view of our position.
        if prev.index < self.commit {
            let skip = (self.commit - prev.index) as usize;
            if skip >= entries.len() {
                return AppendResult::Success {
                    match_index: self.commit,
                };
            }
            let prev = entries[skip - 1].log_id();
            let rest: Vec<Entry> = entries.into_iter().skip(skip).collect();
            return self.try_append(prev, rest, leader_commit);
        }
        if !self.log.matches(prev) {
            return self.conflict(prev.index);
        }
        let match_index = prev.index + entries.len() as Index;
        debug_assert!(
            entries
                .iter()
                .enumerate()
                .all(|(i, e)| e.index == prev.index + 1 + i as Index),
            "leader sent a gap"
        );
        self.merge_after(entries);
        // Only the prefix this request proved to match may be committed: stale entries beyond it
        // might belong to a deposed leader (scenario S15).
        self.advance_commit_to(leader_commit.min(match_index));
        AppendResult::Success { match_index }
    }

    /// Merges `entries`, which continue an entry this log holds, into the log: what already
    /// matches stays, the log is cut at the first entry that differs (never at or below the
    /// commit index), and the rest is appended. A follower's Append and a recovering node's
    /// repair (`repair.rs`) both end here.
    pub(super) fn merge_after(&mut self, entries: Vec<Entry>) {
        let mut entries = entries.into_iter().peekable();
        while entries.next_if(|e| self.log.matches(e.log_id())).is_some() {}
        if let Some(first) = entries.peek() {
            if first.index <= self.log.last_index() {
                assert!(
                    first.index > self.commit,
                    "leader {:?} would overwrite committed index {} (commit {})",
                    self.leader,
                    first.index,
                    self.commit
                );
                self.log.truncate_from(first.index);
                self.durability.truncated(first.index);
            }
        }
        for entry in entries {
            self.log.append(entry);
        }
    }

    fn conflict(&self, rejected: Index) -> AppendResult {
        let last = self.log.last_index();
        if rejected > last {
            return AppendResult::Conflict {
                rejected,
                hint_term: None,
                hint_index: last + 1,
            };
        }
        let term = self
            .log
            .term_at(rejected)
            .expect("index above commit and within the log is held");
        let first = self
            .log
            .first_index_of_term(term)
            .unwrap_or(rejected)
            .max(self.commit + 1);
        AppendResult::Conflict {
            rejected,
            hint_term: Some(term),
            hint_index: first,
        }
    }

    fn advance_commit_to(&mut self, index: Index) {
        if index > self.commit {
            self.commit = index;
        }
    }

    // ----- leader side -----

    pub(super) fn on_append_response(&mut self, from: NodeId, result: AppendResult) {
        if self.role != Role::Leader {
            return;
        }
        let last_index = self.log.last_index();
        let state = self.leader_state.as_mut().expect("leader has leader state");
        let Some(pr) = state.progress(from) else {
            return;
        };
        pr.heard();
        match result {
            AppendResult::Success { match_index } => {
                if match_index > last_index {
                    // Cannot happen with a correct follower: it acknowledged entries we never had.
                    return;
                }
                if pr.on_success(match_index) {
                    self.maybe_commit();
                }
                self.maybe_send_timeout_now(from);
            }
            AppendResult::Conflict {
                rejected,
                hint_term,
                hint_index,
            } => {
                if rejected > last_index {
                    // A rejected `prev` this leader never sent: its log only grows in its term.
                    return;
                }
                let stale = match pr.state {
                    // A rejection of something at or below what the follower acknowledged
                    // answers an older request that crossed the acknowledgement.
                    ReplicationState::Replicate => rejected <= pr.match_index,
                    ReplicationState::Probe => rejected + 1 != pr.next_index,
                    // An Append answered while the snapshot is on its way.
                    ReplicationState::Snapshot => true,
                };
                if stale {
                    return;
                }
                if rejected <= pr.match_index {
                    // A probe sent after the follower acknowledged `match_index` says it no
                    // longer holds it: it lost acknowledged entries (wiped or faulty disk, S29).
                    // Forget what it claimed; commit never moves back, so this costs only
                    // retransmission.
                    // Nothing it holds is proven any more: its log may end anywhere below
                    // `rejected`, or hold stale entries there.
                    pr.match_index = 0;
                }
                let mut next = match hint_term {
                    None => hint_index,
                    Some(t) => match self.log.first_index_of_term(t) {
                        // We hold entries of that term: the follower matches us at most to
                        // the end of it.
                        Some(_) => self
                            .log
                            .last_index_of_term_at_most(t)
                            .map_or(hint_index, |i| i + 1),
                        None => hint_index,
                    },
                };
                next = next.min(rejected).max(1);
                pr.become_probe(next);
            }
        }
        self.send_append(from);
    }

    pub(super) fn on_heartbeat_response(&mut self, from: NodeId, read_round: u64, lagging: bool) {
        if self.role != Role::Leader {
            return;
        }
        let leader_last = self.log.last_index();
        let state = self.leader_state.as_mut().expect("leader has leader state");
        if read_round > state.reads.current_round() {
            // A confirmation of a round not broadcast yet would confirm reads to come.
            return;
        }
        let Some(pr) = state.progress(from) else {
            return;
        };
        pr.heard();
        pr.read_round_acked = pr.read_round_acked.max(read_round);
        if lagging {
            // Probe where we believe it matches: its answer proves the match again, or (a
            // conflict at match_index) resets the progress.
            pr.become_probe(pr.match_index + 1);
        }
        let behind = lagging || pr.match_index < leader_last;
        self.advance_reads();
        if behind {
            self.send_append(from);
        }
    }

    /// On every heartbeat interval: heartbeats to all, retransmission to stalled followers.
    pub(super) fn on_heartbeat_tick(&mut self) {
        let stall_bound_ticks = (self.config.election_timeout_ticks / 2).max(1);
        let snapshot_timeout_ticks = self.config.snapshot_timeout_ticks;
        let interval = self.config.heartbeat_interval_ticks;
        let commit = self.commit;
        let state = self.leader_state.as_mut().expect("leader has leader state");
        let round = state.reads.current_round();
        let mut beats = Vec::with_capacity(state.progress.len());
        let mut resend = Vec::new();
        for (id, pr) in state.progress.iter_mut() {
            beats.push((
                *id,
                MessageBody::Heartbeat {
                    commit: commit.min(pr.match_index),
                    read_round: round,
                    clock: LeaderClock::default(),
                },
            ));
            match pr.state {
                ReplicationState::Probe => {
                    // The probe may have been lost: allow another.
                    pr.probe_sent = false;
                    resend.push(*id);
                }
                ReplicationState::Replicate if !pr.inflight.is_empty() => {
                    pr.stalled_ticks += interval;
                    if pr.stalled_ticks >= stall_bound_ticks {
                        let next = pr.match_index + 1;
                        pr.become_probe(next);
                        resend.push(*id);
                    }
                }
                ReplicationState::Replicate => {}
                ReplicationState::Snapshot => {
                    pr.stalled_ticks += interval;
                    if pr.stalled_ticks >= snapshot_timeout_ticks {
                        pr.probe_after_snapshot();
                        resend.push(*id);
                    }
                }
            }
        }
        for (id, body) in beats {
            self.send(id, body);
        }
        for id in resend {
            self.send_append(id);
        }
    }

    /// How far the log is handed to storage now: all of it, except on a leader that needs another
    /// voter for a quorum while every follower it replicates to has its window of Appends full.
    /// Then entries proposed meanwhile wait for the next Append before they are written here too,
    /// and leave in one write with it. Written earlier, they would cost this node a write and an
    /// fsync of their own without committing sooner: no quorum holds them before a follower does.
    /// Under load this cuts the leader's writes by a third (each is two I/Os, a write and a
    /// flush, often on the disk its followers wait for too; docs/performance-log.md). The leader's
    /// write still starts with the Append, in parallel with replication.
    ///
    /// The limit may fall (a follower replicating again from a lower index) below entries
    /// already written; those stay written (`Durability::issue`).
    pub(super) fn write_limit(&self) -> Index {
        let last = self.log.last_index();
        let Some(state) = self.leader_state.as_ref() else {
            return last;
        };
        let id = self.id;
        let alone_is_quorum =
            self.log
                .membership()
                .quorum_index(|p| if p == id { Index::MAX } else { 0 })
                == Index::MAX;
        if alone_is_quorum {
            return last;
        }
        // A follower in Probe or Snapshot gets no pipelined Appends: it does not hold writes back.
        let sent = state
            .progress
            .iter()
            .map(|(_, pr)| match pr.state {
                ReplicationState::Replicate => pr.next_index - 1,
                _ => last,
            })
            .max()
            .unwrap_or(last);
        // The commit index is persisted with the entries: never past what is written.
        sent.max(self.commit).min(last)
    }

    /// Sends what accumulated since the last `Ready`: new entries to every follower (one batch
    /// each, pipelined) and a ReadIndex round if one was requested.
    pub(super) fn flush_leader_sends(&mut self) {
        let state = self.leader_state.as_mut().expect("leader has leader state");
        if std::mem::take(&mut state.replicate_pending) {
            let ids: Vec<NodeId> = state.progress.iter().map(|(id, _)| *id).collect();
            for id in ids {
                self.send_append(id);
            }
        }
        self.flush_read_round();
    }

    /// Sends Appends to `to` while the window allows and there is something to send. In Probe,
    /// sends one (possibly empty) Append to find the match point.
    pub(super) fn send_append(&mut self, to: NodeId) {
        let last_index = self.log.last_index();
        loop {
            let inflight_max = self.config.inflight_messages_max;
            // A commit may have just removed this leader from the configuration.
            let Some(state) = self.leader_state.as_mut() else {
                return;
            };
            let Some(pr) = state.progress(to) else {
                return;
            };
            if !pr.can_send(inflight_max) {
                return;
            }
            let probing = pr.state == ReplicationState::Probe;
            if !probing && pr.next_index > last_index {
                return;
            }
            let next = pr.next_index;
            let prev_index = next - 1;
            let Some(prev_term) = self.log.term_at(prev_index) else {
                // The entries this follower needs were purged: send the snapshot instead
                // (scenario S11: also when the probe range is empty).
                self.start_snapshot_send(to);
                return;
            };
            let holding = !probing
                && self.config.hold_partial_appends
                && !pr.inflight.is_empty()
                && !self.log.exceeds_one_message(
                    next,
                    self.config.entries_per_message_max,
                    self.config.bytes_per_message_max,
                );
            if holding {
                // The tail waits for the Appends in flight to be answered (see the config).
                return;
            }
            let entries = self.log.slice(
                next,
                last_index,
                self.config.entries_per_message_max,
                self.config.bytes_per_message_max,
            );
            let sent_to = prev_index + entries.len() as Index;
            let has_entries = !entries.is_empty();
            let state = self.leader_state.as_mut().expect("leader has leader state");
            let pr = state.progress(to).expect("checked above");
            pr.sent(sent_to, has_entries);
            let body = MessageBody::Append {
                prev: LogId::new(prev_term, prev_index),
                entries,
                commit: self.commit,
            };
            self.send(to, body);
            if probing || !has_entries {
                return;
            }
        }
    }

    /// Advances the commit index to what a quorum holds durably, but only through an entry of the
    /// current term (Raft paper section 5.4.2, Figure 8).
    pub(super) fn maybe_commit(&mut self) {
        let durable = self.durability.durable_index();
        let id = self.id;
        let state = self.leader_state.as_ref().expect("leader has leader state");
        let quorum_index = self.log.membership().quorum_index(|p| {
            if p == id {
                durable
            } else {
                state
                    .progress
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map_or(0, |(_, pr)| pr.match_index)
            }
        });
        if quorum_index <= self.commit || quorum_index == Index::MAX {
            return;
        }
        let current_term = self.log.term_at(quorum_index) == Some(self.term);
        if !current_term && !self.mutated(crate::Mutation::CommitOldTerm) {
            return;
        }
        self.commit = quorum_index;
        self.on_commit_advanced();
    }

    fn maybe_send_timeout_now(&mut self, from: NodeId) {
        let last_index = self.log.last_index();
        let Some(state) = self.leader_state.as_mut() else {
            return;
        };
        let Some(t) = state.transfer.as_mut() else {
            return;
        };
        if t.target != from || t.timeout_now_sent {
            return;
        }
        let caught_up = state
            .progress
            .iter()
            .any(|(p, pr)| *p == from && pr.match_index == last_index);
        if caught_up {
            let t = state.transfer.as_mut().expect("checked above");
            t.timeout_now_sent = true;
            self.send(from, MessageBody::TimeoutNow);
        }
    }
}
