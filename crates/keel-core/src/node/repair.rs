//! Recovery from storage damage when no leader can repair the node: fetching the lost entries from
//! any peer that holds them, and letting go of a promise no commit can have counted.
//!
//! A node whose disk lost entries it had acknowledged, up to `promised`, recovers
//! ([`RaftNode::start_recovering`]): it votes only for a candidate whose log reaches `promised`
//! and never campaigns, until its own log does. Normally the leader sends what it lacks. But the
//! only logs that reach `promised` may belong to nodes that cannot campaign (learners in their own
//! latest configuration, which another node's uncommitted one counts as voters), or to no node at
//! all (the node led the promised term and lost its own tail before any follower stored it). Then
//! no leader is ever elected, although plain Raft, whose node would not have lost its tail, elects
//! one. Two exchanges end that, with one message pair sent to every member whenever the
//! recovering node's election timer runs out (where it would have campaigned), as long as it has
//! acknowledged nothing to a leader since it restarted (a leader is repairing it then, and what it
//! acknowledged must stay).
//!
//! What the node knows of the log that held `promised` (the *former* log), `former_end`: its own
//! log through its commit index (committed entries are in every later log of every node), or
//! through its last entry of `promised.term` if that is further (see the first exchange below
//! for why). Its log beyond that may be stale: a disk that lost writes can bring back entries a
//! leader had replaced since.
//!
//! - **Repair from a peer.** A peer whose log holds an entry of `promised.term` at index `j`
//!   holds the former log through `j`: only that term's leader wrote entries of that term, it
//!   never changes them, and its log held `promised` after them, so by Log Matching the prefixes
//!   agree (entries of older terms could come from any branch and prove nothing). The peer also
//!   knows its own committed entries, which every later log holds. If it holds `former_end` too,
//!   it sends its entries after `former_end` through the further of the two, at most
//!   `promised.index` ([`RepairAnswer::Entries`]); the node replaces its log after `former_end`
//!   with them. When they reach `promised`, it is whole once they are durable, as when a leader
//!   repairs it. (A committed entry that differs from the former one at its index means none of
//!   the former entries from there on can ever be committed: taking it is what a leader would do.)
//! - **Release.** The former entries after `former_end` have terms from `former_end.term` to
//!   `promised.term`. Only a leader of an entry's own term commits it, and only those terms' leaders
//!   can count the node's acknowledgement of them. A peer *lacks* them when its log ends at or
//!   before `former_end.index`, or holds at `former_end.index + 1` an entry of a term outside that
//!   range (a log lacking the entry there lacks every later one, by Log Matching). It says so
//!   ([`RepairAnswer::Lacks`]) only from a term above `promised.term`, where it never again
//!   acknowledges anything to those leaders (a leaderless peer in an older term first moves to
//!   `promised.term + 1`, durably: always safe in Raft, and it disturbs no leader, as it has
//!   none). A committed entry stays in every whole log that acknowledged it. So once the peers
//!   lacking the former entries block every quorum of each configuration that can have counted
//!   the node's acknowledgement, none of them was committed with its help and none ever will be:
//!   the node lets go of the promise, durably ([`crate::Write::release_promise`]), and votes and
//!   campaigns on the log it holds, like any node that never received those entries. The
//!   configurations: the node's latest, which precedes the former entries in every log holding
//!   them; and, if that one is joint, its incoming half alone (the only change a leader may
//!   append before the joint one commits). A simple configuration's successors are joint (both
//!   halves must agree) or change learners only.
//!
//! A peer that is recovering itself answers neither way: it may have held the entries, and its
//! own log may have lost more than its promise shows (a promise record trails the log by a few
//! group commits). With two of three nodes damaged, repairing one from the other would let them
//! elect a leader between them that lacks what the third holds; they wait for it instead,
//! unavailable rather than wrong. The fault model is the storage faults' (README, "What the
//! repair assumes"): damaged nodes are a minority of every configuration that matters, and a
//! peer's log is whole unless it says it is recovering.

use super::RaftNode;
use crate::membership::Membership;
use crate::message::{MessageBody, RepairAnswer};
use crate::types::{Entry, Index, LogId, NodeId, Term, TERM_LIMIT};

/// What a recovering node tracks ([`RaftNode::start_recovering`]).
#[derive(Clone, Debug)]
pub(super) struct Recovery {
    /// The last entry it had acknowledged before its disk lost the tail.
    pub promised: LogId,
    /// The end of the longest prefix of its log known to be a prefix of the log that held
    /// `promised`: at the start, its commit index or its own last entry of `promised.term`,
    /// whichever is further; extended by repairs.
    pub former_end: LogId,
    /// The peers that reported lacking every former entry after `former_end`.
    pub lacking: Vec<NodeId>,
    /// It acknowledged an Append or a snapshot since it started recovering: a leader repairs it,
    /// and its log may no longer be replaced by a peer's.
    pub acknowledged_leader: bool,
    /// It let go of the promise; recovery ends once storage has lowered its promise record.
    pub released: bool,
}

impl Recovery {
    pub fn new(promised: LogId, former_end: LogId) -> Self {
        Recovery {
            promised,
            former_end,
            lacking: Vec::new(),
            acknowledged_leader: false,
            released: false,
        }
    }

    /// Whether it still asks peers, and takes their answers.
    fn asks(&self) -> bool {
        !self.acknowledged_leader && !self.released && self.former_end.index < self.promised.index
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
        let body = MessageBody::RepairRequest {
            promised: recovery.promised,
            last: recovery.former_end,
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

    pub(super) fn on_repair_request(&mut self, from: NodeId, promised: LogId, last: LogId) {
        if self.recovery.is_some() {
            // Its own log may have lost what it acknowledged (module documentation).
            self.answer_repair(from, RepairAnswer::Unknown);
            return;
        }
        let answer = match self.repair_entries(promised, last) {
            Some(entries) => RepairAnswer::Entries {
                prev: last,
                entries,
            },
            None if self.lacks_after(promised, last) => {
                if self.term <= promised.term {
                    let next_term = promised.term + 1;
                    if self.leader.is_some() || next_term >= TERM_LIMIT {
                        // A leader of the promised term (or an older one) is alive here: it
                        // repairs the requester itself.
                        self.answer_repair(from, RepairAnswer::Unknown);
                        return;
                    }
                    self.become_follower_keeping_timer(next_term, None);
                }
                RepairAnswer::Lacks { after: last }
            }
            None => RepairAnswer::Unknown,
        };
        self.answer_repair(from, answer);
    }

    fn answer_repair(&mut self, to: NodeId, answer: RepairAnswer) {
        let reply = self.message(to, MessageBody::RepairResponse(answer));
        // A Lacks answer promises the term it names.
        self.send_after_persist(reply);
    }

    /// The entries after `last` this log holds that the requester had, or that are committed:
    /// through the last entry of `promised.term` at or below `promised.index`, or through this
    /// node's commit index if that is further (at most `promised.index`), if this log holds
    /// `last` too and has not compacted what follows it.
    fn repair_entries(&self, promised: LogId, last: LogId) -> Option<Vec<Entry>> {
        let top = promised.index.min(self.log.last_index());
        let of_promised_term = self.last_entry_of_promised_term(promised);
        let through = of_promised_term.unwrap_or(0).max(self.commit.min(top));
        let held = self.log.matches(last) && last.index >= self.log.purged().index;
        if through <= last.index || !held {
            return None;
        }
        let entries = self.log.slice(
            last.index + 1,
            through,
            self.config.max_entries_per_message,
            self.config.max_bytes_per_message,
        );
        (!entries.is_empty()).then_some(entries)
    }

    /// The last index at or below `promised.index` where this log holds an entry of
    /// `promised.term`: this log and the one that held `promised` agree through it (module
    /// documentation).
    pub(super) fn last_entry_of_promised_term(&self, promised: LogId) -> Option<Index> {
        let top = promised.index.min(self.log.last_index());
        match self.log.term_of_any(top)? {
            t if t == promised.term => Some(top),
            t if t > promised.term => self
                .log
                .last_index_of_term_at_most(promised.term)
                .filter(|end| self.log.term_of_any(*end) == Some(promised.term)),
            _ => None,
        }
    }

    /// Whether this log holds none of the requester's former entries after `last`: they have
    /// terms from `last.term` to `promised.term`, and this log has nothing at `last.index + 1`
    /// or an entry of another term there.
    fn lacks_after(&self, promised: LogId, last: LogId) -> bool {
        match self.log.term_of_any(last.index + 1) {
            None => self.log.last_index() <= last.index,
            Some(t) => t < last.term || t > promised.term,
        }
    }

    pub(super) fn on_repair_response(&mut self, from: NodeId, term: Term, answer: RepairAnswer) {
        let early = self.mutated(crate::Mutation::ReleasePromiseEarly);
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
                        .is_some_and(|e| e.index <= recovery.promised.index)
                    && crate::validate::check_entries(prev, &entries, term).is_ok();
                if fits {
                    self.append_repair(entries);
                }
            }
            RepairAnswer::Lacks { after } => {
                let counts =
                    after == recovery.former_end && (term > recovery.promised.term || early);
                if !counts || recovery.lacking.contains(&from) {
                    return;
                }
                recovery.lacking.push(from);
                self.maybe_release_promise();
            }
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
            recovery.lacking.clear();
        }
    }

    /// Lets go of the promise once the members lacking the former entries block every quorum
    /// that can have counted this node's acknowledgement of them (module documentation).
    fn maybe_release_promise(&mut self) {
        let Some(recovery) = self.recovery.as_ref() else {
            return;
        };
        let lacking = &recovery.lacking;
        let blocked = |m: &Membership| !m.is_quorum(|id| !lacking.contains(&id));
        let config = self.log.membership();
        let incoming = Membership::new_voters(config.voters.iter().copied());
        let early = self.mutated(crate::Mutation::ReleasePromiseEarly);
        if early || (blocked(config) && (!config.is_joint() || blocked(&incoming))) {
            self.recovery.as_mut().expect("checked above").released = true;
            self.durability.release_promise();
        }
    }

    /// The promise this node let go of while recovering, once storage lowered its record: once
    /// (for the runtime's log).
    pub fn take_released_promise(&mut self) -> Option<LogId> {
        self.released_promise.take()
    }
}
