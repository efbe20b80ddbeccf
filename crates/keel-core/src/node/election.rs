//! Elections: terms, pre-vote, votes, check-quorum leases and leadership transfer's TimeoutNow
//! (Raft paper section 5.2, thesis sections 3.10, 6.2, 9.6).
//!
//! A recovering node (`start_recovering`: its disk lost entries it had acknowledged) starts no
//! election and votes only for a log reaching its promise, until its durable log does
//! (`repair.rs`). A node whose clock is too far off its leader's holds its campaigns
//! (`hold_campaigns`, decided by keel-engine's clock watch) but votes as usual.

use super::{LeaderState, RaftNode, Role};
use crate::membership::VoteResult;
use crate::message::{FollowerClock, Message, MessageBody};
use crate::progress::Progress;
use crate::types::{EntryPayload, NodeId, Term};

impl RaftNode {
    /// Applies the term rules common to every message. Returns whether the message should be
    /// handled further.
    pub(super) fn step_term(&mut self, msg: &Message) -> bool {
        if msg.term > self.term {
            match msg.body {
                // A pre-vote never changes anyone's term; a granted pre-vote response echoes the
                // term the pre-candidate would campaign in.
                MessageBody::PreVote { .. } => return true,
                MessageBody::PreVoteResponse { granted: true } => return true,
                // A repair request asks; the responder answers in its own term (repair.rs).
                MessageBody::RepairRequest { .. } => return true,
                MessageBody::RequestVote { transfer, .. } if !transfer && self.in_lease() => {
                    // A leader we heard from recently is alive: a node that cannot hear it must
                    // not depose it (thesis 4.2.3). Ignore without adopting the term.
                    return false;
                }
                _ => {
                    let leader = match msg.body {
                        MessageBody::Append { .. }
                        | MessageBody::Heartbeat { .. }
                        | MessageBody::TimeoutNow => Some(msg.from),
                        _ => None,
                    };
                    if matches!(
                        msg.body,
                        MessageBody::RequestVote { .. } | MessageBody::VoteResponse { .. }
                    ) {
                        // Only a current leader or a granted vote restarts the election timer
                        // (thesis 3.4; a grant restarts it in `on_vote_request`). A candidate
                        // whose log cannot win — a stale member that keeps campaigning — would
                        // otherwise restart the timers of the nodes that could, so that it
                        // always times out first and takes its own vote before their request
                        // reaches it: no leader, ever (without pre-vote). Its refusal carries
                        // its newer term back to the candidate that could win: adopting that
                        // term must not restart that candidate's timer either, or it would
                        // always campaign just after the stale one again (simulator seed 1029:
                        // the stale member ran one term ahead for eighteen elections).
                        self.become_follower_keeping_timer(msg.term, leader);
                    } else {
                        self.become_follower(msg.term, leader);
                    }
                }
            }
        } else if msg.term < self.term {
            if matches!(
                msg.body,
                MessageBody::RepairRequest { .. } | MessageBody::RepairResponse(_)
            ) {
                // Entries are the responder's log whatever its term; a Lacks answer counts only
                // from a term above the promise's, which the handler checks (repair.rs).
                return true;
            }
            // Tell a stale leader or candidate about the newer term so it steps down; with
            // check-quorum and pre-vote it might otherwise never learn of it.
            let reply = match msg.body {
                MessageBody::Append { .. } | MessageBody::Heartbeat { .. } => {
                    Some(MessageBody::HeartbeatResponse {
                        read_round: 0,
                        lagging: false,
                        clock: FollowerClock::default(),
                    })
                }
                MessageBody::PreVote { .. } => {
                    Some(MessageBody::PreVoteResponse { granted: false })
                }
                MessageBody::RequestVote { .. } => {
                    Some(MessageBody::VoteResponse { granted: false })
                }
                _ => None,
            };
            if let Some(body) = reply {
                // It carries our term, which must be durable before anyone learns of it.
                let reply = self.message(msg.from, body);
                self.send_after_persist(reply);
            }
            return false;
        }
        true
    }

    /// Whether this node heard from a live leader within the minimum election timeout.
    pub(super) fn in_lease(&self) -> bool {
        self.config.check_quorum
            && self.leader.is_some()
            && self.election_elapsed_ticks < self.config.election_timeout_ticks
    }

    pub(super) fn tick_election(&mut self) {
        self.election_elapsed_ticks += 1;
        if self.election_elapsed_ticks >= self.randomized_election_timeout_ticks {
            if self.may_start_election() {
                self.start_election(false);
            } else if self.recovery.is_some() {
                // Where it would have campaigned (repair.rs).
                self.ask_for_repair();
            }
        }
    }

    /// Starts a pre-vote round (if enabled and not a transfer) or an election.
    pub(super) fn start_election(&mut self, transfer: bool) {
        if self.config.pre_vote && !transfer {
            self.role = Role::PreCandidate;
            self.leader = None;
            self.votes.clear();
            self.votes.push((self.id, true));
            self.reset_election_timer();
            let last_log_id = self.log.last_log_id();
            let voters: Vec<NodeId> = self.other_voters();
            for to in voters {
                let msg = Message {
                    from: self.id,
                    to,
                    term: self.term + 1,
                    body: MessageBody::PreVote { last_log_id },
                };
                self.messages.push(msg);
            }
            self.tally_votes();
        } else {
            self.campaign_now(transfer);
        }
    }

    fn campaign_now(&mut self, transfer: bool) {
        self.become_follower(self.term + 1, None);
        self.role = Role::Candidate;
        self.vote = Some(self.id);
        let last_log_id = self.log.last_log_id();
        for to in self.other_voters() {
            // The vote for ourselves must be durable before anyone can count on our candidacy.
            let msg = self.message(
                to,
                MessageBody::RequestVote {
                    last_log_id,
                    transfer,
                },
            );
            self.send_after_persist(msg);
        }
        self.tally_votes();
    }

    fn other_voters(&self) -> Vec<NodeId> {
        self.log
            .membership()
            .members()
            .into_iter()
            .filter(|id| *id != self.id && self.log.membership().is_voter(*id))
            .collect()
    }

    pub(super) fn on_vote_request(&mut self, msg: Message) {
        let (last_log_id, pre_vote) = match msg.body {
            MessageBody::PreVote { last_log_id } => (last_log_id, true),
            MessageBody::RequestVote { last_log_id, .. } => (last_log_id, false),
            _ => unreachable!("only vote requests are routed here"),
        };
        let transfer = matches!(msg.body, MessageBody::RequestVote { transfer: true, .. });
        let can_vote = self.vote == Some(msg.from)
            || (self.vote.is_none() && self.leader.is_none())
            || (pre_vote && msg.term > self.term);
        let lease_blocks = pre_vote && self.in_lease() && !transfer;
        let up_to_date = last_log_id >= self.log.last_log_id();
        // A recovering node's own log is shorter than what it acknowledged: the candidate must
        // reach that too.
        let reaches_promise = self
            .recovering()
            .is_none_or(|promised| last_log_id >= promised)
            || self.mutated(crate::Mutation::VoteBelowPromise);
        let granted = can_vote && up_to_date && reaches_promise && !lease_blocks;
        if pre_vote {
            let term = if granted { msg.term } else { self.term };
            self.send_after_persist(Message {
                from: self.id,
                to: msg.from,
                term,
                body: MessageBody::PreVoteResponse { granted },
            });
            return;
        }
        if granted {
            self.vote = Some(msg.from);
            self.reset_election_timer();
        }
        let reply = self.message(msg.from, MessageBody::VoteResponse { granted });
        if self.mutated(crate::Mutation::VoteBeforeDurable) {
            self.messages.push(reply);
        } else {
            self.send_after_persist(reply);
        }
    }

    pub(super) fn on_vote_response(
        &mut self,
        from: NodeId,
        term: Term,
        body: &MessageBody,
        granted: bool,
    ) {
        let expected = match body {
            MessageBody::PreVoteResponse { .. } => {
                self.role == Role::PreCandidate && (!granted || term == self.term + 1)
            }
            _ => self.role == Role::Candidate && term == self.term,
        };
        if !expected {
            return;
        }
        match self.votes.iter_mut().find(|(id, _)| *id == from) {
            Some(slot) => slot.1 = granted,
            None => self.votes.push((from, granted)),
        }
        self.tally_votes();
    }

    /// Counts the votes of the current (pre-)election and acts on the outcome. A candidate's vote
    /// for itself counts only once it is durable.
    pub(super) fn tally_votes(&mut self) {
        let self_vote_durable = match self.role {
            Role::PreCandidate => true,
            Role::Candidate => {
                let hs = self.durability.durable_hard_state();
                hs.term == self.term && hs.vote == Some(self.id)
            }
            _ => return,
        };
        let id = self.id;
        let votes = &self.votes;
        let result = self.log.membership().vote_result(|voter| {
            if voter == id {
                self_vote_durable.then_some(true)
            } else {
                votes.iter().find(|(v, _)| *v == voter).map(|(_, g)| *g)
            }
        });
        match (result, self.role) {
            (VoteResult::Won, Role::PreCandidate) => self.campaign_now(false),
            (VoteResult::Won, Role::Candidate) => self.become_leader(),
            (VoteResult::Lost, _) => {
                // A lost election steps down but keeps the timer started with the campaign
                // (Raft's candidate waits out its timeout). Restarting it would hand the next
                // race to whoever refused: a stale member that keeps campaigning, one vote short
                // of any majority, refuses the candidate that could win in the term both
                // campaigned in, then times out first again, term after term (simulator seed
                // 21044417: 120 elections, no leader).
                self.become_follower_keeping_timer(self.term, None);
            }
            _ => {}
        }
    }

    fn become_leader(&mut self) {
        debug_assert_eq!(self.role, Role::Candidate);
        self.role = Role::Leader;
        self.leader = Some(self.id);
        self.votes.clear();
        self.election_elapsed_ticks = 0;
        self.heartbeat_elapsed_ticks = 0;
        self.leader_state = Some(Box::new(LeaderState {
            progress: Vec::new(),
            transfer: None,
            reads: Default::default(),
            replicate_pending: false,
        }));
        self.sync_progress_with_membership();
        // A leader can commit entries of earlier terms only through an entry of its own
        // (Raft paper section 5.4.2), and serves reads only after that (section 8).
        self.append_entry(EntryPayload::Noop);
    }

    /// Keeps the leader's progress table equal to the members of the effective configuration.
    pub(super) fn sync_progress_with_membership(&mut self) {
        let members = self.log.membership().members();
        let next = self.log.last_index() + 1;
        let id = self.id;
        let Some(state) = self.leader_state.as_mut() else {
            return;
        };
        state.progress.retain(|(p, _)| members.contains(p));
        for m in members {
            if m != id && !state.progress.iter().any(|(p, _)| *p == m) {
                state.progress.push((m, Progress::new(next)));
            }
        }
        state.progress.sort_by_key(|(p, _)| *p);
    }

    pub(super) fn on_timeout_now(&mut self) {
        if self.role != Role::Leader && self.may_start_election() {
            self.start_election(true);
        }
    }

    pub(super) fn tick_leader(&mut self) {
        self.election_elapsed_ticks += 1;
        let et = self.config.election_timeout_ticks;
        let state = self.leader_state.as_mut().expect("leader has leader state");
        for (_, pr) in state.progress.iter_mut() {
            pr.silent_ticks = pr.silent_ticks.saturating_add(1);
        }
        if let Some(t) = state.transfer.as_mut() {
            t.elapsed_ticks += 1;
            if t.elapsed_ticks >= et {
                state.transfer = None;
            }
        }
        if self.election_elapsed_ticks < et {
            return;
        }
        self.election_elapsed_ticks = 0;
        if self.config.check_quorum {
            let id = self.id;
            let active = |p: NodeId| {
                p == id
                    || state
                        .progress
                        .iter()
                        .any(|(q, pr)| *q == p && pr.recent_active)
            };
            let quorum = self.log.membership().is_quorum(active);
            for (_, pr) in state.progress.iter_mut() {
                pr.recent_active = false;
            }
            if !quorum {
                self.become_follower(self.term, None);
            }
        }
    }
}
