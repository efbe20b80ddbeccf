//! One seed from start to verdict: faults for a number of steps, then healing, then the liveness,
//! convergence and linearizability checks.
//!
//! The event loop and the nemesis: crashes, partitions of every shape, membership changes,
//! leadership transfers, clock jumps, storage faults (`storage_faults.rs`) and disk wipes
//! (`wipe.rs`). Membership changes of every size pick a kind first (add a learner, add a voter
//! directly, promote or remove a learner, remove a follower, remove the leader), then its
//! subject; a removed slot comes back with the disk it kept (a fresh disk comes only through
//! `wipe.rs`). Healing ends the faults and, in runs without pre-vote and check-quorum, shuts down
//! removed members: by a settled leader's configuration, or without one by what the committed
//! configuration and the logs that could still lead can need. Then the wait for convergence
//! (`converge.rs`).
//!
//! Every delivered message first passes the receiver's `HandshakeGate` (the sender's storage
//! incarnation travels with it), then `RaftNode::validate`: all nodes here are honest, so a
//! refusal is a violation.

use keel_core::{InvalidMessage, MembershipChange, NodeId, RaftNode, Role};
use rand::Rng;

use crate::invariants::Violation;
use crate::params::TICK_INTERVAL;
use crate::user::User;
use crate::world::{Event, World};

impl<U: User> World<U> {
    /// Runs the seed to its verdict but the history's: faults for `fault_steps` events, then
    /// healing, then the wait for convergence within its bound.
    pub(crate) fn run_to_end(&mut self, fault_steps: u64) {
        while self.steps < fault_steps && self.violation.is_none() {
            if !self.step() {
                break;
            }
        }
        if self.violation.is_none() {
            self.heal();
            // The bound depends on the logs of every node, so it is taken once the crashed ones are
            // back (they restart one unit after the healing).
            let healed_at = self.now;
            let mut deadline = None;
            let mut converged = false;
            while self.violation.is_none() && deadline.is_none_or(|d| self.now <= d) {
                if !self.step() {
                    break;
                }
                if deadline.is_none() && self.now > healed_at + 1 {
                    deadline = Some(healed_at + self.heal_bound());
                }
                if self.steps % 16 == 0 {
                    self.retire_removed();
                    self.repair_wiped();
                    if self.converged() {
                        converged = true;
                        break;
                    }
                }
            }
            if self.violation.is_none() && !converged && !self.converged() {
                let detail = self.describe_cluster();
                if let Some(ids) = self.damaged_not_whole() {
                    // The storage faults' own promise: every damaged member ends whole.
                    self.fail(Violation {
                        invariant: "damaged node whole",
                        detail: format!("{ids:?} still recovering at the bound: {detail}"),
                    });
                }
                self.fail(Violation {
                    invariant: "liveness after healing",
                    detail: format!("no convergence within the bound: {detail}"),
                });
            }
        }
    }

    /// Processes the next event. Returns false when nothing is left to do.
    #[expect(clippy::too_many_lines)]
    pub(crate) fn step(&mut self) -> bool {
        let Some((time, event)) = self.pop() else {
            return false;
        };
        debug_assert!(time >= self.now, "time goes forward");
        self.now = time;
        self.steps += 1;
        match event {
            Event::Tick(id) => {
                let idx = (id - 1) as usize;
                // A node still replaying its log does not tick (the runtime starts its ticker
                // only once it serves).
                let serving = self.serving(id);
                if let (Some(raft), true) = (self.nodes[idx].raft.as_mut(), serving) {
                    raft.tick();
                    self.clock_tick(id);
                    self.digest_event([2, id, 0, 0]);
                    self.drive(id);
                    U::ticked(self, id);
                }
                self.schedule(TICK_INTERVAL, Event::Tick(id));
            }
            Event::Deliver(msg, storage) => {
                let to = msg.to;
                let idx = (to - 1) as usize;
                // A partition also drops what was in flight when it began.
                let cut = self.blocked.contains(&(msg.from, to));
                if !cut
                    && self.nodes.get(idx).is_some_and(|n| n.raft.is_some())
                    && !self.serving(to)
                {
                    // Still replaying: the runtime leaves peer messages queued until it serves.
                    let delay = self.rng.random_range(1..=self.params.net_delay_max);
                    self.schedule(delay, Event::Deliver(msg, storage));
                } else if !cut
                    && self.nodes.get(idx).is_some_and(|n| n.raft.is_some())
                    && self.hears(to, &msg, storage)
                {
                    let (from, term) = (msg.from, msg.term);
                    self.digest_event([1, from, to, term]);
                    self.trace_line(|| format!("deliver n{from}->n{to} t{term} {}", short(&msg)));
                    let raft = self.nodes[idx].raft.as_mut().expect("checked");
                    // Every node here is honest: what the runtime's validator would drop must
                    // never be sent, however the network delays, duplicates or reorders it.
                    match raft.validate(&msg) {
                        Ok(()) => {
                            let reading = keel_engine::ClockWatch::reading(&msg);
                            raft.step(msg);
                            if let Some(reading) = reading {
                                self.clock_heard(to, from, term, reading);
                            }
                            self.drive(to);
                        }
                        Err(e @ InvalidMessage::AnswerFromFutureTerm { .. })
                            if self.nodes[idx].storage > 1 =>
                        {
                            // An answer to what the node asked before its disk was wiped: the
                            // runtime's validator drops it, rightly.
                            self.trace_line(|| format!("n{to} drops {msg:?}: {e} (wiped since)"));
                        }
                        Err(e) => {
                            let detail = format!("n{to} refused {msg:?}: {e}");
                            self.violate("peer message validation", detail);
                        }
                    }
                }
            }
            Event::DiskWork { node, incarnation } => self.disk_work(node, incarnation),
            Event::Crash(id) => self.crash(id),
            Event::Restart(id) => {
                let idx = (id - 1) as usize;
                if self.nodes[idx].raft.is_none() && !self.nodes[idx].retired {
                    self.trace_line(|| format!("restart n{id}"));
                    self.start_node(id);
                }
            }
            Event::ClientWake { client, generation } => U::client_wake(self, client, generation),
            Event::ClientDeadline {
                client,
                history_index,
            } => U::client_deadline(self, client, history_index),
            Event::Nemesis => {
                if !self.healing {
                    self.nemesis();
                    let next = self.rng.random_range(1..=2 * self.params.nemesis_interval);
                    self.schedule(next, Event::Nemesis);
                }
            }
            Event::Apply { node, incarnation } => self.apply_batch(node, incarnation),
            Event::SnapshotSaved {
                node,
                incarnation,
                meta,
                data,
            } => self.snapshot_saved(node, incarnation, meta, data),
            Event::Transfer(event) => self.transfer_event(event),
            Event::User(event) => U::event(self, event),
            Event::HealPartition { generation } => {
                if generation == self.partition_generation && !self.blocked.is_empty() {
                    self.blocked.clear();
                    self.trace_line(|| "partition healed".to_string());
                }
            }
        }
        U::after_event(self);
        true
    }

    /// The receiver's handshake decision (keel-engine's gate, as the runtime's transport asks it
    /// of each connection): a peer back with other storage is not heard.
    fn hears(&mut self, to: NodeId, msg: &keel_core::Message, storage: u64) -> bool {
        let from = msg.from;
        if let keel_core::MessageBody::InstallSnapshot { meta } = &msg.body {
            // The transport hands the core an install only with the snapshot durable beside it:
            // a late copy (see `snapshot_adopted`) for a disk wiped since has nothing beside it.
            if self.nodes[(to - 1) as usize].disk.snapshot_index() < meta.last.index {
                self.trace_line(|| format!("n{to} drops an install of a snapshot it lacks"));
                return false;
            }
        }
        let current = self.nodes[(from - 1) as usize].storage;
        let gate = &mut self.nodes[(to - 1) as usize].gate;
        let heard = if storage == current {
            gate.hears_message(from, storage, &msg.body)
        } else {
            gate.hears_earlier_life(from, storage)
        };
        if !heard {
            self.trace_line(|| format!("n{to} refuses n{from}: other storage"));
        }
        heard
    }

    /// Ends every fault: partitions heal, crashed nodes restart, the network stops losing.
    pub(crate) fn heal(&mut self) {
        self.healing = true;
        self.blocked.clear();
        self.trace_line(|| "heal".to_string());
        for id in 1..=self.params.node_count as NodeId {
            if self.nodes[(id - 1) as usize].raft.is_none() {
                self.schedule(1, Event::Restart(id));
            }
        }
    }

    /// After healing, with neither pre-vote nor check-quorum: shuts down for good every node
    /// outside the cluster's configuration once that configuration is settled (or, with no
    /// leader to settle it, once no configuration that is or can still be committed needs it:
    /// `members_still_needed`), as an operator does with a removed server. Such a node may never hear that the joint configuration was
    /// left (no leader of the new one sends to it), so it stays a voter in its own eyes, and
    /// each of its elections deposes the leader: the disruption the Raft thesis (section 4.2.3)
    /// answers with pre-vote or with ignoring vote requests while a leader is heard
    /// (check-quorum's lease). Liveness is promised with either (the runtime enables both); with
    /// both off, it is demanded of the cluster without its removed members.
    pub(crate) fn retire_removed(&mut self) {
        if self.params.pre_vote || self.params.check_quorum {
            return;
        }
        let Some(members) = self
            .settled_members()
            .or_else(|| self.members_still_needed())
        else {
            return;
        };
        for id in 1..=self.params.node_count as NodeId {
            let node = &self.nodes[(id - 1) as usize];
            // Nodes that never joined (empty spare slots) hold no configuration to act on.
            let joined = node.raft.as_ref().is_some_and(|r| r.status().term > 0);
            if members.contains(&id) || node.retired || !joined {
                continue;
            }
            self.trace_line(|| format!("retire n{id} (removed; no pre-vote, no check-quorum)"));
            self.nodes[(id - 1) as usize].retired = true;
            self.crash(id);
        }
    }

    /// The members of a configuration no later leader can undo, if there is one now: a
    /// leader's whose term no member of it has passed (every member up, so its term is known),
    /// which has committed an entry of that term (no entry missing from its log can commit after
    /// that, and its log holds every entry of its term), and whose latest configuration is
    /// committed and not joint. Taking the leader of the highest term instead retired a learner
    /// a later leader still had (seed 716358: a stale leader, still leading term 36 while its
    /// members had moved to term 39 and added the learner; the next leader waited for it
    /// forever).
    fn settled_members(&self) -> Option<std::collections::BTreeSet<NodeId>> {
        let settled = |leader: &RaftNode| {
            let commit = leader.commit_index();
            if leader.role() != Role::Leader
                || leader.log().term_at(commit) != Some(leader.term())
                || leader.log().membership_index() > commit
            {
                return None;
            }
            let membership = leader.membership();
            if membership.is_joint() {
                return None;
            }
            let members = membership.members();
            let passed = members.iter().any(|&id| {
                self.nodes[(id - 1) as usize]
                    .raft
                    .as_ref()
                    .is_none_or(|r| r.term() > leader.term())
            });
            (!passed).then_some(members)
        };
        self.nodes
            .iter()
            .filter_map(|n| n.raft.as_ref())
            .find_map(settled)
    }

    /// Without a settled leader: the nodes a configuration committed now, or committed by a
    /// later leader, can still need. Those are the members of the latest configuration known
    /// committed (applied somewhere) and of every configuration entry after it in the log of a
    /// node that could still lead (one that holds the committed entry at that index: Raft's
    /// leader completeness); while healing the nemesis is off, so no other configuration can
    /// arise (a leader finishing a joint change only drops members). Of a committed joint
    /// configuration's outgoing half, only as many of the members it removes are kept as its
    /// majority needs: the others' removal is decided (any leader leaves the joint
    /// configuration by itself), so an operator may shut them down. Seed 439 needs that: in
    /// C({3,4},{3,4,6}), n6 (behind, unable to win) kept deposing every leader of n3 and n4
    /// before it could commit anything, with neither pre-vote nor check-quorum to stop it.
    /// Nothing is decided while a node is down (its log could name another configuration), and
    /// a damaged member is not counted among those that stay.
    fn members_still_needed(&self) -> Option<std::collections::BTreeSet<NodeId>> {
        if self.nodes.iter().any(|n| n.raft.is_none() && !n.retired) {
            return None;
        }
        let (index, membership) = self.membership.committed();
        let term = self.checker.committed_term(index)?;
        let mut needed = membership.voters.clone();
        needed.extend(membership.learners.iter().copied());
        // A damaged member that stays counts for nothing: recovering, it refuses its vote to
        // every log short of its promise, which the whole members may all be (seed 1950: in
        // C({1,2,3,4},{1,3,4}) with node 1 recovering, nodes 3 and 4 needed node 2).
        let staying = membership
            .outgoing
            .intersection(&membership.voters)
            .filter(|id| !self.storage.is_damaged(**id))
            .count();
        let majority = membership.outgoing.len() / 2 + 1;
        needed.extend(
            membership
                .outgoing
                .difference(&membership.voters)
                .take(majority.saturating_sub(staying)),
        );
        for raft in self.nodes.iter().filter_map(|n| n.raft.as_ref()) {
            let log = raft.log();
            if index != 0 && log.term_of_any(index) != Some(term) {
                continue;
            }
            for i in (index + 1).max(log.first_index())..=log.last_index() {
                if let Some(keel_core::Entry {
                    payload: keel_core::EntryPayload::Membership(m),
                    ..
                }) = log.entry(i)
                {
                    needed.extend(m.members());
                }
            }
        }
        Some(needed)
    }

    pub(crate) fn leader(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter_map(|n| n.raft.as_ref())
            .find(|r| r.role() == Role::Leader)
            .map(|r| r.id())
    }

    fn random_up_node(&mut self) -> Option<NodeId> {
        let up: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|n| n.raft.is_some())
            .map(|n| n.id)
            .collect();
        if up.is_empty() {
            None
        } else {
            Some(up[self.rng.random_range(0..up.len())])
        }
    }

    /// One adversarial action, chosen by the seed's weights.
    fn nemesis(&mut self) {
        self.repair_wiped();
        let p = &self.params;
        let weights = [
            p.crash_weight,
            p.partition_weight,
            p.membership_weight,
            p.transfer_weight,
            p.clock_jump_weight,
            p.wipe_weight,
            p.storage_fault_weight,
        ];
        let total: u32 = weights.iter().sum();
        if total == 0 {
            return;
        }
        let mut roll = self.rng.random_range(0..total);
        let mut action = 0;
        for (i, w) in weights.iter().enumerate() {
            if roll < *w {
                action = i;
                break;
            }
            roll -= w;
        }
        match action {
            0 => {
                if let Some(id) = self.random_up_node() {
                    self.crash(id);
                }
            }
            1 => self.partition(),
            2 => self.change_membership(),
            3 => self.transfer(),
            4 => self.clock_jump(),
            5 => self.wipe(),
            _ => self.storage_fault(),
        }
    }

    pub(crate) fn partition(&mut self) {
        let shape = self.rng.random_range(0..4);
        self.partition_shape(shape);
    }

    /// Shapes: 0 isolates a random node, 1 the leader, 2 splits the cluster in two random sides,
    /// 3 cuts one node off in one direction only.
    pub(crate) fn partition_shape(&mut self, shape: u32) {
        let n = self.params.node_count as NodeId;
        let ids: Vec<NodeId> = (1..=n).collect();
        self.blocked.clear();
        match shape {
            0 | 1 => {
                // Isolate one node (the leader, for shape 1), both ways.
                let victim = match (shape, self.leader()) {
                    (1, Some(l)) => l,
                    _ => self.rng.random_range(1..=n),
                };
                for &o in &ids {
                    if o != victim {
                        self.blocked.insert((victim, o));
                        self.blocked.insert((o, victim));
                    }
                }
                self.trace_line(|| format!("partition isolate n{victim}"));
            }
            2 => {
                // Split into two random sides.
                let side: Vec<bool> = ids.iter().map(|_| self.rng.random_bool(0.5)).collect();
                for (i, &a) in ids.iter().enumerate() {
                    for (j, &b) in ids.iter().enumerate() {
                        if side[i] != side[j] {
                            self.blocked.insert((a, b));
                        }
                    }
                }
                self.trace_line(|| format!("partition split {side:?}"));
            }
            _ => {
                // One-way: a node can send but not receive (or the reverse).
                let victim = self.rng.random_range(1..=n);
                let inbound = self.rng.random_bool(0.5);
                for &o in &ids {
                    if o != victim {
                        if inbound {
                            self.blocked.insert((o, victim));
                        } else {
                            self.blocked.insert((victim, o));
                        }
                    }
                }
                self.trace_line(|| format!("partition one-way n{victim} inbound={inbound}"));
            }
        }
        self.partition_generation += 1;
        let et = u64::from(self.params.election_timeout_ticks) * TICK_INTERVAL;
        let duration = self.rng.random_range(et..=6 * et);
        let generation = self.partition_generation;
        self.schedule(duration, Event::HealPartition { generation });
    }

    fn change_membership(&mut self) {
        let Some(leader) = self.leader() else { return };
        let n = self.params.node_count as NodeId;
        let membership = self.nodes[(leader - 1) as usize]
            .raft
            .as_ref()
            .expect("leader is up")
            .membership()
            .clone();
        if self.params.every_size {
            return self.change_membership_any_size(leader, &membership);
        }
        // The member whose disk is being replaced is moved by `repair_wiped` alone.
        let replacing = self.wiped.map(|w| w.id);
        let candidates: Vec<MembershipChange> = (1..=n)
            .filter(|&id| Some(id) != replacing)
            .filter_map(|id| {
                if membership.learners.contains(&id) {
                    Some(MembershipChange::AddVoter(id))
                } else if !membership.contains(id) {
                    Some(MembershipChange::AddLearner(id))
                } else if membership.voters.len() > self.voters_beside_damage().max(3) {
                    Some(MembershipChange::Remove(id))
                } else {
                    None
                }
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let change = candidates[self.rng.random_range(0..candidates.len())].clone();
        self.propose_membership(leader, change);
    }

    /// Membership of every size (`Params::every_size`): first a kind of change, uniformly among
    /// those the configuration allows, then its subject. The kinds: add a learner, add a voter
    /// directly, promote a learner, remove a learner, remove a voter that is not the leader,
    /// remove the leader. Choosing the kind first keeps the rare ones (the leader's removal, a
    /// learner's) as frequent as the common ones, and growing as likely as shrinking, so the
    /// voters wander over every size from one to the number of slots.
    ///
    /// Any slot outside the configuration may be added, including one removed earlier: such a
    /// node kept its disk (its term, its vote and its log), exactly as a member cut off by a
    /// partition for the whole time would have, which Raft handles. A removed node is never
    /// given a fresh disk under its old id: forgetting its vote would let it vote twice in one
    /// term (the checker's one-vote-per-term invariant would see it).
    fn change_membership_any_size(&mut self, leader: NodeId, membership: &keel_core::Membership) {
        use MembershipChange::{AddLearner, AddVoter, Remove};
        let n = self.params.node_count as NodeId;
        // The member whose disk is being replaced is moved by `repair_wiped` alone.
        let free = |id: &NodeId| self.wiped.is_none_or(|w| w.id != *id);
        let absent: Vec<NodeId> = (1..=n)
            .filter(|&id| !membership.contains(id))
            .filter(free)
            .collect();
        let learners: Vec<NodeId> = membership.learners.iter().copied().filter(free).collect();
        let followers: Vec<NodeId> = membership
            .voters
            .iter()
            .copied()
            .filter(|&id| id != leader)
            .filter(free)
            .collect();
        // While a wiped member is on its way back, the others keep a majority without it.
        let min_voters = if self.wiped.is_some() {
            self.params.min_voters.max(3)
        } else {
            self.params.min_voters
        };
        // While storage faults have damaged nodes, the others keep a majority without them.
        let min_voters = min_voters.max(self.voters_beside_damage());
        let can_shrink = membership.voters.len() > min_voters;
        let leader_is_voter = membership.voters.contains(&leader) && free(&leader);
        let kinds: Vec<u8> = [
            (0, !absent.is_empty()),
            (1, !absent.is_empty()),
            (2, !learners.is_empty()),
            (3, !learners.is_empty()),
            (4, can_shrink && !followers.is_empty()),
            (5, can_shrink && leader_is_voter),
        ]
        .into_iter()
        .filter_map(|(kind, allowed)| allowed.then_some(kind))
        .collect();
        if kinds.is_empty() {
            return;
        }
        let kind = kinds[self.rng.random_range(0..kinds.len())];
        let mut pick = |ids: &[NodeId]| ids[self.rng.random_range(0..ids.len())];
        let change = match kind {
            0 => AddLearner(pick(&absent)),
            1 => AddVoter(pick(&absent)),
            2 => AddVoter(pick(&learners)),
            3 => Remove(pick(&learners)),
            4 => Remove(pick(&followers)),
            _ => Remove(leader),
        };
        self.propose_membership(leader, change);
    }

    pub(crate) fn propose_membership(&mut self, leader: NodeId, change: MembershipChange) {
        let raft = self.nodes[(leader - 1) as usize]
            .raft
            .as_mut()
            .expect("leader is up");
        let result = raft.propose_membership(change.clone());
        self.trace_line(|| format!("membership {change:?} via n{leader}: {result:?}"));
        self.drive(leader);
    }

    fn transfer(&mut self) {
        let Some(leader) = self.leader() else { return };
        let raft = self.nodes[(leader - 1) as usize]
            .raft
            .as_mut()
            .expect("leader is up");
        let voters: Vec<NodeId> = raft
            .membership()
            .voters
            .iter()
            .copied()
            .filter(|v| *v != leader)
            .collect();
        if voters.is_empty() {
            return;
        }
        let to = voters[self.rng.random_range(0..voters.len())];
        let raft = self.nodes[(leader - 1) as usize]
            .raft
            .as_mut()
            .expect("leader is up");
        let result = raft.transfer_leadership(to);
        self.trace_line(|| format!("transfer n{leader}->n{to}: {result:?}"));
        self.drive(leader);
    }

    fn clock_jump(&mut self) {
        let Some(id) = self.random_up_node() else {
            return;
        };
        let ticks = self
            .rng
            .random_range(1..=self.params.election_timeout_ticks);
        self.trace_line(|| format!("clock jump n{id} +{ticks} ticks"));
        for _ in 0..ticks {
            if let Some(raft) = self.nodes[(id - 1) as usize].raft.as_mut() {
                raft.tick();
            }
            self.drive(id);
        }
    }
}

fn short(msg: &keel_core::Message) -> String {
    use keel_core::MessageBody as B;
    match &msg.body {
        B::Append {
            prev,
            entries,
            commit,
        } => {
            format!("append prev {prev} n={} commit {commit}", entries.len())
        }
        other => format!("{other:?}"),
    }
}
