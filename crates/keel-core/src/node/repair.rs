//! Recovery from storage damage when no leader can repair the node: fetching the lost entries from
//! any peer that holds them, and letting go of (or lowering) a promise no commit can have
//! counted.
//!
//! A node whose disk lost entries it had acknowledged, up to `promised`, recovers
//! ([`RaftNode::start_recovering`]): it votes only for a candidate whose log reaches `promised`
//! and never campaigns, until its own log does. Normally the leader sends what it lacks. But the
//! only logs that reach `promised` may belong to nodes that cannot campaign (learners in their own
//! latest configuration, which another node's uncommitted one counts as voters), or to no node at
//! all (the node led the promised term and lost its own tail before any follower stored it). Then
//! no leader is ever elected, although plain Raft, whose node would not have lost its tail, elects
//! one. The exchanges below end that, with one message pair sent to every member whenever the
//! recovering node's election timer runs out (where it would have campaigned), as long as it has
//! acknowledged nothing to a leader since it restarted (a leader is repairing it then, and what it
//! acknowledged must stay): a `RepairRequest` (the promise, where it asks from, what it knows of
//! the former log's terms, and `holds_last`) answered by a [`RepairAnswer`].
//!
//! What the node knows of the log that held `promised` (the *former* log): the first index of
//! each of its last terms, which the promise record keeps (`former.rs`: a log's entry of a term at
//! an index up to that term's last index in the former log is the former entry there), and its
//! own log through `former_end`: through its commit index (committed entries are in every later
//! log of every node), or through its last former entry if that is further. Its log beyond that
//! may be stale: a disk that lost writes can bring back entries a leader had replaced since.
//!
//! - **Repair from a peer.** A peer holding former entries after `former_end` holds the former log
//!   through the last of them (Log Matching). It also knows its own committed entries, which every
//!   later log holds. If it holds `former_end` too, uncompacted, it sends its entries after it
//!   through the further of the two, at most `promised.index` ([`RepairAnswer::Entries`]); the
//!   node replaces its log after `former_end` with them. When they reach `promised`, it is whole
//!   once they are durable, as when a leader repairs it. (A committed entry that differs from the
//!   former one at its index means none of the former entries from there on can ever be
//!   committed: taking it is what a leader would do.)
//! - **Committed beyond.** A peer whose commit index is beyond where the node asks from but that
//!   cannot send the entries (it compacted them into a snapshot) says where its commit index is,
//!   and the configuration in effect there ([`RepairAnswer::Committed`]). That entry is in every
//!   later log; the node asks from it instead (if it cannot be the former entry at its index, no
//!   former entry from there on was ever committed, and it lowers its promise to it at once).
//! - **Release, or lowering.** Past the point the node asks from (`former_end`, or a committed
//!   entry a peer reported), a peer *lacks* the former entries when its log ends there, or holds
//!   after it an entry of another term than the former one (where the former term is unknown:
//!   one outside the terms it can have). It says so ([`RepairAnswer::Lacks`]) only from a term
//!   above `promised.term`, where it never again acknowledges anything to the leaders of those
//!   entries' terms (a leaderless peer in an older term first moves to `promised.term + 1`,
//!   durably: always safe in Raft, and it disturbs no leader, as it has none). A committed entry
//!   stays in every whole log that acknowledged it. So once the peers lacking the former entries
//!   block every quorum of each configuration that can have counted the node's acknowledgement,
//!   none of them was committed with its help and none ever will be. The configurations: the one
//!   in effect at the point it asks from (every later one is reached through a joint
//!   configuration whose commit needs a quorum of it too); and, if that one is joint, its
//!   incoming half alone (the only change a leader appends once the joint one commits). From its
//!   own log, the node then lets go of the promise, durably ([`crate::Write::release_promise`]),
//!   and votes and campaigns on the log it holds, like any node that never received those
//!   entries. From a committed entry it does not hold, it lowers its promise to that entry,
//!   durably ([`crate::Write::lower_promise_to`]), and recovers to it: it votes only for logs at
//!   least as up to date as that entry, which hold every entry committed up to it (Leader
//!   Completeness), and the leader such a vote elects brings it there.
//! - **Holding part of the way.** A node asking from a committed entry it does not hold cannot
//!   take entries (it cannot append after an entry it lacks; only a leader's snapshot brings it
//!   there), so it says so (`holds_last`), and a peer that holds former entries after that point
//!   says instead how far: through its last former entry `h`, with the configuration in effect
//!   there ([`RepairAnswer::Holds`]), from a term above `promised.term` as for Lacks (which is
//!   "through the point asked from"). It holds none after `h` and acknowledges none to the old
//!   terms' leaders. The same argument, at `h` instead of the point asked from: once the peers
//!   holding through `h` or less block every quorum of the configuration in effect at `h` (and
//!   of its incoming half, if joint), the former entry after `h` was never committed, nor will
//!   be; the commit that first covers it needs such a quorum, as every change after `h` passes
//!   through a joint configuration with it. The node lowers its promise to the first such `h`
//!   (the candidates: the point asked from, then each `h` reported), durably, and goes on
//!   recovering to it, as a node that received the former log only through `h`: a log it really
//!   held, whose entries after the last commit no quorum can have counted. Without this, when
//!   every log reaching the promise belongs to a node that cannot win (simulator seeds 22974257,
//!   23274161, 23318452: a learner's, or none), no leader is ever elected.
//!
//! A peer that is recovering itself answers none of these: it may have held the entries, and its
//! own log may have lost more than its promise shows (a promise record trails the log by a few
//! group commits). With two of three nodes damaged, repairing one from the other would let them
//! elect a leader between them that lacks what the third holds; they wait for it instead,
//! unavailable rather than wrong. The fault model is the storage faults' (docs/disk-faults.md,
//! "What the repair assumes"): damaged nodes are a minority of every configuration that matters, and a
//! peer's log is whole unless it says it is recovering.

use super::former::FormerTerms;
use super::RaftNode;
use crate::membership::Membership;
use crate::message::{MessageBody, RepairAnswer};
use crate::types::{Entry, LogId, NodeId, Term, TERM_LIMIT};

/// What a recovering node tracks ([`RaftNode::start_recovering`]).
#[derive(Clone, Debug)]
pub(super) struct Recovery {
    /// What it knows of the former log: the promised entry, the last one it had acknowledged
    /// before its disk lost the tail, and its terms' first indexes.
    pub former: FormerTerms,
    /// The end of the longest prefix of its log known to be a prefix of the former log or
    /// committed: at the start, its commit index or its own last former entry (`former.rs`),
    /// whichever is further; extended by repairs.
    pub former_end: LogId,
    /// An entry beyond `former_end` a peer reported committed, which its log does not hold, and
    /// the configuration in effect there: where it asks from instead of `former_end`.
    pub committed: Option<(LogId, Membership)>,
    /// What peers reported holding of the former log after where it asks from (nothing, for a
    /// Lacks answer), one report per peer.
    pub held: Vec<Held>,
    /// It acknowledged an Append or a snapshot since it started recovering: a leader repairs it,
    /// and its log may no longer be replaced by a peer's.
    pub acknowledged_leader: bool,
    /// It let go of the promise; recovery ends once storage has lowered its promise record.
    pub released: bool,
    /// It lowered the promise to an entry committed in the cluster, which a leader brings it to.
    pub lowered: bool,
}

/// A peer's report of how far it holds the former log after where the node asks from, from a
/// term above the promised one ([`RepairAnswer::Lacks`], [`RepairAnswer::Holds`]).
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub from: NodeId,
    /// Its last former entry: where the node asks from, for a Lacks answer.
    pub through: LogId,
    /// The configuration in effect at `through` (a Holds answer's).
    pub config: Option<Membership>,
}

impl Recovery {
    pub fn new(former: FormerTerms, former_end: LogId) -> Self {
        Recovery {
            former,
            former_end,
            committed: None,
            held: Vec::new(),
            acknowledged_leader: false,
            released: false,
            lowered: false,
        }
    }

    pub fn promised(&self) -> LogId {
        self.former.promised()
    }

    /// Where it asks from: the committed entry a peer reported, or the end of its known prefix.
    fn base(&self) -> LogId {
        self.committed.as_ref().map_or(self.former_end, |(c, _)| *c)
    }

    /// Whether it still asks peers, and takes their answers.
    fn asks(&self) -> bool {
        !self.acknowledged_leader
            && !self.released
            && !self.lowered
            && self.former_end.index < self.promised().index
    }
}

impl RaftNode {
    /// This node's election timer ran out while it recovers: asks every member for repair.
    pub(super) fn ask_for_repair(&mut self) {
        self.leader = None;
        self.reset_election_timer();
        let Some(recovery) = self.recovery.as_ref().filter(|r| r.asks()) else {
            return;
        };
        let (promised, last) = (recovery.promised(), recovery.base());
        if promised.term < last.term {
            // A committed prefix in a later term than the promise: a leader of that term (or a
            // later one) brings this node there.
            return;
        }
        // Starts of terms below `last.term` (the former log diverged from the committed one
        // before it) say nothing a peer can use; they are the oldest, so what remains still
        // describes the former log from its first start on.
        let terms = recovery
            .former
            .after(last)
            .into_iter()
            .filter(|start| start.term >= last.term)
            .collect();
        let body = MessageBody::RepairRequest {
            promised,
            last,
            terms,
            holds_last: recovery.committed.is_none(),
        };
        let own_id = self.id;
        let members = self.log.membership().members();
        for to in members.into_iter().filter(|id| *id != own_id) {
            self.send(to, body.clone());
        }
    }

    /// This node acknowledged an Append or a snapshot from the leader.
    pub(super) fn note_acknowledged_leader(&mut self) {
        if let Some(recovery) = self.recovery.as_mut() {
            recovery.acknowledged_leader = true;
        }
    }

    pub(super) fn on_repair_request(
        &mut self,
        from: NodeId,
        promised: LogId,
        last: LogId,
        terms: Vec<LogId>,
        holds_last: bool,
    ) {
        if self.recovery.is_some() {
            // Its own log may have lost what it acknowledged (module documentation).
            self.answer_repair(from, RepairAnswer::Unknown);
            return;
        }
        let former = FormerTerms::received(promised, terms);
        let entries = holds_last
            .then(|| self.repair_entries(&former, last))
            .flatten();
        let answer = if let Some(entries) = entries {
            RepairAnswer::Entries {
                prev: last,
                entries,
            }
        } else if former.lacked_by(&self.log, last) {
            self.above_promised(promised, RepairAnswer::Lacks { after: last })
        } else if let Some(through) = self.committed_beyond(last) {
            RepairAnswer::Committed {
                through,
                config: self.log.membership_at(through.index).clone(),
            }
        } else if let Some(through) = self.former_held_beyond(&former, last) {
            let config = self.log.membership_at(through.index).clone();
            let holds = RepairAnswer::Holds {
                after: last,
                through,
                config,
            };
            self.above_promised(promised, holds)
        } else {
            RepairAnswer::Unknown
        };
        self.answer_repair(from, answer);
    }

    /// `answer`, a promise never to acknowledge entries of `promised.term` or older again, if
    /// this node's term is above it or may move there: a leaderless node moves to the next term
    /// (module documentation). Else (a leader of the promised term or an older one is alive
    /// here, and repairs the requester itself) Unknown.
    fn above_promised(&mut self, promised: LogId, answer: RepairAnswer) -> RepairAnswer {
        if self.term <= promised.term {
            let next_term = promised.term + 1;
            if self.leader.is_some() || next_term >= TERM_LIMIT {
                return RepairAnswer::Unknown;
            }
            self.become_follower_keeping_timer(next_term, None);
        }
        answer
    }

    /// This node's commit point, if beyond `last`.
    fn committed_beyond(&self, last: LogId) -> Option<LogId> {
        let term = self.log.term_of_any(self.commit)?;
        (self.commit > last.index).then_some(LogId::new(term, self.commit))
    }

    /// This log's last former entry, if beyond `last` and this log holds `last` (the
    /// requester's commit point or known prefix, which the former log then holds too).
    fn former_held_beyond(&self, former: &FormerTerms, last: LogId) -> Option<LogId> {
        let held = former.held_by(&self.log)?;
        (held.index > last.index && self.log.matches(last)).then_some(held)
    }

    fn answer_repair(&mut self, to: NodeId, answer: RepairAnswer) {
        let reply = self.message(to, MessageBody::RepairResponse(answer));
        // A Lacks or Holds answer promises the term it names.
        self.send_after_persist(reply);
    }

    /// The entries after `last` this log holds that the requester had, or that are committed:
    /// through its last former entry (`former.rs`), or through this node's commit index if that
    /// is further (at most the promised index), if this log holds `last` too and has not
    /// compacted what follows it.
    fn repair_entries(&self, former: &FormerTerms, last: LogId) -> Option<Vec<Entry>> {
        let top = former.promised().index.min(self.log.last_index());
        let held = former.held_by(&self.log).map_or(0, |end| end.index);
        let through = held.max(self.commit.min(top));
        let reachable = self.log.matches(last) && last.index >= self.log.purged().index;
        if through <= last.index || !reachable {
            return None;
        }
        let entries = self.log.slice(
            last.index + 1,
            through,
            self.config.entries_per_message_max,
            self.config.bytes_per_message_max,
        );
        (!entries.is_empty()).then_some(entries)
    }

    pub(super) fn on_repair_response(&mut self, from: NodeId, term: Term, answer: RepairAnswer) {
        let Some(recovery) = self.recovery.as_mut().filter(|r| r.asks()) else {
            return;
        };
        match answer {
            RepairAnswer::Entries { prev, entries } => {
                let fits = prev == recovery.former_end
                    && prev.index >= self.commit
                    && self.log.matches(prev)
                    && entries
                        .last()
                        .is_some_and(|e| e.index <= recovery.promised().index)
                    && crate::validate::check_entries(prev, &entries, term).is_ok();
                if fits {
                    self.append_repair(entries);
                }
            }
            RepairAnswer::Lacks { after } => self.note_held(from, term, after, after, None),
            RepairAnswer::Holds {
                after,
                through,
                config,
            } => self.note_held(from, term, after, through, Some(config)),
            RepairAnswer::Committed { through, config } => self.note_committed(through, config),
            RepairAnswer::Unknown => {}
        }
    }

    /// Replaces the log after the first repaired entry's predecessor (`former_end`, at or above
    /// the commit index) with `entries`, keeping what already matches: what differs is a stale
    /// tail that came back from before the damage, not the former log.
    fn append_repair(&mut self, entries: Vec<Entry>) {
        let end = entries.last().expect("checked non-empty").log_id();
        self.merge_after(entries);
        // The log may go on after `end` (a stale tail that matched so far): only what the peer
        // sent is known former.
        let recovery = self.recovery.as_mut().expect("recovering");
        if end != recovery.former_end {
            recovery.former_end = end;
            recovery.held.clear();
            if recovery
                .committed
                .as_ref()
                .is_some_and(|(c, _)| c.index <= end.index)
            {
                recovery.committed = None;
            }
        }
    }

    /// A peer reported `through` committed, with `config` in effect there, beyond where this
    /// node asks from. Committed, it is in every later log, so this node asks from there
    /// instead; if the former log cannot hold it, nothing after it in the former log was ever
    /// committed, and this node lets go at once.
    fn note_committed(&mut self, through: LogId, config: Membership) {
        let holds = self.log.matches(through);
        let recovery = self.recovery.as_mut().expect("asks");
        let base = recovery.base();
        if through.index <= base.index || through.index >= recovery.promised().index {
            return;
        }
        // The former log's term there is at least its term at `former_end` (terms rise).
        let differs = recovery
            .former
            .differs_from(through, recovery.former_end.term);
        recovery.held.clear();
        if holds {
            recovery.former_end = through;
            recovery.committed = None;
        } else {
            recovery.committed = Some((through, config));
        }
        if differs {
            self.let_go();
        }
    }

    /// A peer reported holding the former log after where this node asks from (`after`)
    /// through `through` and no further (`through` = `after`: a Lacks answer), from its `term`.
    fn note_held(
        &mut self,
        from: NodeId,
        term: Term,
        after: LogId,
        through: LogId,
        config: Option<Membership>,
    ) {
        let early = self.mutated(crate::Mutation::ReleasePromiseEarly);
        let Some(recovery) = self.recovery.as_mut() else {
            return;
        };
        let base = recovery.base();
        let promised = recovery.promised();
        // An entry of a term the former log cannot have there is not one of its entries (only
        // a hostile or confused peer reports one).
        let former = through == base
            || (through.index > base.index
                && through.index < promised.index
                && !recovery.former.differs_from(through, base.term));
        let counts = after == base && former && (term > promised.term || early);
        if !counts || recovery.held.iter().any(|held| held.from == from) {
            return;
        }
        recovery.held.push(Held {
            from,
            through,
            config,
        });
        if early {
            self.let_go();
        } else {
            self.maybe_lower();
        }
    }

    /// Lowers the promise to the first former entry `K` (from where this node asks on) after
    /// which the peers that hold no further block every quorum that can have counted its
    /// acknowledgement of the next (module documentation): none after `K` was ever committed.
    /// The candidates are where it asks from and each entry a peer holds through, with the
    /// configuration in effect there.
    fn maybe_lower(&mut self) {
        let Some(recovery) = self.recovery.as_ref() else {
            return;
        };
        let base = recovery.base();
        let base_config = match &recovery.committed {
            Some((_, config)) => config,
            None => self.log.membership_at(recovery.former_end.index),
        };
        let mut points: Vec<(LogId, &Membership)> = recovery
            .held
            .iter()
            .filter_map(|held| Some((held.through, held.config.as_ref()?)))
            .chain(std::iter::once((base, base_config)))
            .collect();
        points.sort_by_key(|(point, _)| point.index);
        let lowest = points.into_iter().find(|(point, config)| {
            let lacking =
                |id| (recovery.held.iter()).any(|h| h.from == id && h.through.index <= point.index);
            blocks_every_quorum(config, lacking)
        });
        match lowest {
            Some((point, _)) if point == base => self.let_go(),
            Some((point, _)) => self.lower_within(point),
            None => {}
        }
    }

    /// No former entry after `point`, one this node lacks, was ever committed, nor ever will be:
    /// it lowers its promise to `point` (durably) and goes on recovering to it, as a node that
    /// received the former log only through there.
    fn lower_within(&mut self, point: LogId) {
        let lowered = self.mutated(crate::Mutation::LowerPromiseTooFar);
        let recovery = self.recovery.as_mut().expect("recovering");
        let from = recovery.promised();
        let point = match lowered && point.index - 1 > recovery.base().index {
            // Test-only: one entry further, where a quorum may hold the next.
            true => LogId::new(
                recovery
                    .former
                    .term_at(point.index - 1)
                    .unwrap_or(point.term),
                point.index - 1,
            ),
            false => point,
        };
        recovery.former = recovery.former.lowered_to(point);
        recovery.held.clear();
        self.durability.lower_promise_to(point);
        let first = self.lowered_promise.map_or(from, |(first, _)| first);
        self.lowered_promise = Some((first, point));
        self.check_recovered();
    }

    /// No former entry after where this node asks from was committed with its help, nor ever
    /// will be. From its own log, it lets go of the promise, durably; from a committed entry it
    /// does not hold, it lowers the promise to that entry and recovers to it.
    fn let_go(&mut self) {
        let recovery = self.recovery.as_mut().expect("recovering");
        match recovery.committed.take() {
            Some((point, _)) => {
                let from = recovery.promised();
                recovery.former = FormerTerms::new(point, &[]);
                recovery.held.clear();
                // A leader brings it to `point` (module documentation).
                recovery.lowered = true;
                self.durability.lower_promise_to(point);
                self.lowered_promise = Some((from, point));
                self.check_recovered();
            }
            None => {
                recovery.released = true;
                self.durability.release_promise();
            }
        }
    }

    /// The promise this node let go of while recovering, once storage lowered its record: once
    /// (for the runtime's log).
    pub fn take_released_promise(&mut self) -> Option<LogId> {
        self.released_promise.take()
    }

    /// The promise this node lowered while recovering, and the committed entry it lowered it to:
    /// once (for the runtime's log).
    pub fn take_lowered_promise(&mut self) -> Option<(LogId, LogId)> {
        self.lowered_promise.take()
    }
}

/// Whether the members for which `lacking` holds block every quorum of `config` and, if it is
/// joint, of its incoming half alone: the quorums that can first commit anything after a point
/// where `config` is in effect (module documentation).
fn blocks_every_quorum(config: &Membership, lacking: impl Fn(NodeId) -> bool) -> bool {
    let blocked = |m: &Membership| !m.is_quorum(|id| !lacking(id));
    let incoming = Membership::new_voters(config.voters.iter().copied());
    blocked(config) && (!config.is_joint() || blocked(&incoming))
}
