//! The safety invariants of docs/SCENARIOS.md, checked after every simulated step: election
//! safety, log matching, state-machine safety, leader completeness, monotonic commit, exactly-once
//! apply, one vote per term, the state digest at every applied index, and campaigning only as a
//! voter (of the latest configuration, or of the latest committed one while a later one leaves
//! the node out). Configuration agreement is checked where entries apply (`host.rs`).
//!
//! Each check keeps a small global registry so the work per step is proportional to what changed:
//! entries are registered by (index, term) the first time any node holds them, committed entries by
//! index the first time any node commits them, and every later observation is compared against
//! those records.

/// The checker's maps are keyed by small integers and looked up several times per step: a
/// multiply-rotate hash (FxHash) instead of SipHash, which needs no protection from adversarial
/// keys here.
type HashMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

#[derive(Default)]
struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

use keel_core::{Entry, EntryPayload, Index, LogId, NodeId, RaftNode, Role, Term};

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

pub fn entry_hash(e: &Entry) -> u64 {
    // FNV-1a over the payload: stable across runs (no random hasher state).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    match &e.payload {
        EntryPayload::Noop => eat(b"noop"),
        EntryPayload::Normal(data) => eat(data),
        EntryPayload::Membership(m) => {
            eat(b"membership");
            for set in [&m.voters, &m.outgoing, &m.learners] {
                for id in set {
                    eat(&id.to_le_bytes());
                }
                eat(b"|");
            }
        }
    }
    h
}

#[derive(Default)]
struct NodeWatch {
    /// Entries up to this position were checked against the registry (reset on truncation).
    checked: LogId,
    /// Highest commit index seen in the current incarnation.
    commit: Index,
    /// Last index applied in the current state machine lifetime.
    applied: Index,
    /// Terms in which this node was seen as leader (to run the completeness check once).
    led_term: Term,
}

/// An entry some node has committed.
#[derive(Clone, Copy)]
struct Committed {
    term: Term,
    hash: u64,
    /// The lowest term of a node seen holding it committed: no earlier than the term whose leader
    /// committed it (every node that learns a commit index is in that term or a later one), so
    /// the leader of this term (which committed it, or came after its commit) and of every later
    /// one must hold the entry. A leader elected late in an earlier term need not: Raft's leader
    /// completeness is for the terms after the commit.
    committed_by_term: Term,
}

#[derive(Default)]
pub struct Checker {
    leaders: HashMap<Term, NodeId>,
    /// (index, term) -> (payload hash, term of the previous index).
    entries: HashMap<LogId, (u64, Term)>,
    /// Committed entries by index. Index 0 unused.
    committed: Vec<Committed>,
    /// Granted votes seen on the wire: (voter, its storage incarnation, term) -> candidate. A
    /// voter whose disk was wiped forgot its votes: the one-vote rule holds per incarnation,
    /// and the peers' refusal of the new one is what keeps a second vote from counting.
    votes: HashMap<(NodeId, u64, Term), NodeId>,
    watch: HashMap<NodeId, NodeWatch>,
    /// State-machine digest by applied index, as first observed on any node (S24).
    digests: HashMap<Index, (NodeId, u64)>,
    /// A digest of what applying the entry at an index answered, as first observed on any node.
    answers: HashMap<Index, (NodeId, u64)>,
}

/// Records `value` for `index` if it is the first, or compares it with the first: on a
/// difference, the node that recorded the first and its value.
fn agree(
    seen: &mut HashMap<Index, (NodeId, u64)>,
    id: NodeId,
    index: Index,
    value: u64,
) -> Result<(), (NodeId, u64)> {
    let (first, expected) = *seen.entry(index).or_insert((id, value));
    if expected == value {
        Ok(())
    } else {
        Err((first, expected))
    }
}

impl Checker {
    /// The node seen leading `term`, if any was.
    pub fn leader_of(&self, term: Term) -> Option<NodeId> {
        self.leaders.get(&term).copied()
    }

    /// The term of the entry committed at `index`, if registered.
    pub fn committed_term(&self, index: Index) -> Option<Term> {
        self.committed.get(index as usize).map(|c| c.term)
    }

    pub fn committed_max(&self) -> Index {
        self.committed.len().saturating_sub(1) as Index
    }

    /// The node restarted: its in-memory progress starts over (the durable part is checked by
    /// the caller against what was persisted).
    pub fn restarted(&mut self, id: NodeId, restored_to: Index) {
        let w = self.watch.entry(id).or_default();
        w.checked = LogId::ZERO;
        w.commit = 0;
        w.applied = restored_to;
    }

    /// The state machine of `id` was replaced by a snapshot at `index`: it must move forward,
    /// and the next entry it applies must follow the snapshot.
    pub fn restored(&mut self, id: NodeId, index: Index) -> Result<(), Violation> {
        let w = self.watch.entry(id).or_default();
        if index <= w.applied {
            return violation(
                "applied index monotonic",
                format!(
                    "node {id} restored a snapshot at {index} after applying {}",
                    w.applied
                ),
            );
        }
        w.applied = index;
        Ok(())
    }

    /// The state machine of `id` is at `index` with `digest` (after an apply, a restore or a
    /// restart). Replicas must agree at every index (S24: an applied index that ran ahead of the
    /// state it describes — an entry skipped on replay — shows up as a different digest).
    pub fn state_digest(&mut self, id: NodeId, index: Index, digest: u64) -> Result<(), Violation> {
        agree(&mut self.digests, id, index, digest).map_err(|(first, expected)| Violation {
            invariant: "state digest",
            detail: format!(
                "node {id} has state digest {digest:016x} at applied index {index}, node {first} \
                 had {expected:016x}"
            ),
        })
    }

    /// The snapshot `id` took at `index`, restored into a fresh state machine, has `digest`: it
    /// must be the state every replica had at that index (a snapshot that leaves out part of
    /// the state, or a restore that rebuilds it differently, shows up here).
    pub fn round_trip(&mut self, id: NodeId, index: Index, digest: u64) -> Result<(), Violation> {
        let Some(&(first, expected)) = self.digests.get(&index) else {
            return Ok(()); // no replica's state at that index was recorded
        };
        if expected == digest {
            return Ok(());
        }
        violation(
            "snapshot round trip",
            format!(
                "node {id}'s snapshot at index {index} restores to state digest {digest:016x}, \
                 but node {first} had {expected:016x} there"
            ),
        )
    }

    /// Applying the entry at `index` on `id` answered what `answer` digests. Every replica
    /// applies the same entry to the same state, so all must answer alike: an answer that
    /// differs comes from an apply that reads something besides the state and the entry.
    pub fn apply_answer(&mut self, id: NodeId, index: Index, answer: u64) -> Result<(), Violation> {
        agree(&mut self.answers, id, index, answer).map_err(|(first, expected)| Violation {
            invariant: "apply answers agree",
            detail: format!(
                "node {id} answered {answer:016x} to the entry at index {index}, node {first} \
                 answered {expected:016x}"
            ),
        })
    }

    /// A granted vote left `voter` (node, storage incarnation) for `candidate` in `term`.
    pub fn vote_granted(
        &mut self,
        (voter, storage): (NodeId, u64),
        term: Term,
        candidate: NodeId,
    ) -> Result<(), Violation> {
        match self.votes.insert((voter, storage, term), candidate) {
            Some(prev) if prev != candidate => violation(
                "one vote per term",
                format!("node {voter} voted for {prev} and {candidate} in term {term}"),
            ),
            _ => Ok(()),
        }
    }

    /// The state machine of `id` applied `entry`.
    pub fn applied(&mut self, id: NodeId, entry: &Entry) -> Result<(), Violation> {
        let w = self.watch.entry(id).or_default();
        if entry.index != w.applied + 1 {
            return violation(
                "exactly-once apply",
                format!("node {id} applied {} after {}", entry.index, w.applied),
            );
        }
        w.applied = entry.index;
        // The applying node's term is not known here; a node's commit index registered the
        // entry first, with its term.
        self.check_committed(id, entry.index, entry.term, entry_hash(entry), Term::MAX)
    }

    fn check_committed(
        &mut self,
        id: NodeId,
        index: Index,
        term: Term,
        hash: u64,
        observer_term: Term,
    ) -> Result<(), Violation> {
        let i = index as usize;
        if i < self.committed.len() {
            let c = &mut self.committed[i];
            c.committed_by_term = c.committed_by_term.min(observer_term);
            let t = c.term;
            if t != term || c.hash != hash {
                return violation(
                    "state machine safety",
                    format!("node {id} has {term}/{index} committed, but {t}/{index} was committed before"),
                );
            }
        } else if i == self.committed.len() || (self.committed.is_empty() && i == 1) {
            if self.committed.is_empty() {
                self.committed.push(Committed {
                    term: 0,
                    hash: 0,
                    committed_by_term: 0,
                });
            }
            self.committed.push(Committed {
                term,
                hash,
                committed_by_term: observer_term,
            });
        }
        // Beyond the next unregistered index (this node got there by snapshot): nothing to
        // compare with yet; a node that commits the gap entry by entry registers it.
        Ok(())
    }

    /// Checks one live node after a step.
    #[expect(clippy::too_many_lines)]
    pub fn check_node(&mut self, node: &RaftNode) -> Result<(), Violation> {
        let id = node.id();
        let log = node.log();
        // The fields of `node.status()` this needs, without cloning the membership.
        let status = StatusView {
            role: node.role(),
            term: node.term(),
            commit: node.commit_index(),
            applied: node.applied_index(),
            last_log_id: log.last_log_id(),
            membership: node.membership(),
        };
        if status.applied > status.commit || status.commit > status.last_log_id.index {
            return violation(
                "index order",
                format!(
                    "node {id}: applied {} commit {} last {}",
                    status.applied, status.commit, status.last_log_id.index
                ),
            );
        }
        // Election safety.
        if status.role == Role::Leader {
            match self.leaders.insert(status.term, id) {
                Some(other) if other != id => {
                    return violation(
                        "election safety",
                        format!("nodes {other} and {id} both led term {}", status.term),
                    )
                }
                _ => {}
            }
        }
        // Campaigning only as the configuration allows: as a voter of the latest configuration,
        // or of the latest one the node knows committed while a later one leaves it out (Raft
        // thesis section 4.2.2: it may still be needed to elect the leader that commits the
        // later one). A learner, a node never added, and a node that knows its removal
        // committed never campaign.
        if matches!(status.role, Role::Candidate | Role::PreCandidate)
            && !status.membership.is_voter(id)
            && !log.membership_at(status.commit).is_voter(id)
        {
            return violation(
                "membership",
                format!(
                    "node {id} campaigns but is not a voter of {:?} nor of {:?} committed at {}",
                    status.membership,
                    log.membership_at(status.commit),
                    status.commit
                ),
            );
        }
        let w = self.watch.entry(id).or_default();
        // Log matching: every (index, term) names one entry with one predecessor term.
        if !log.matches(w.checked) {
            w.checked = LogId::new(log.term_at(status.commit).unwrap_or(0), status.commit);
            if !log.matches(w.checked) {
                w.checked = log.purged();
            }
        }
        let from = w.checked.index + 1;
        let last = status.last_log_id.index;
        let mut prev_term = w.checked.term;
        for i in from..=last {
            let e = log.entry(i).expect("within the log");
            let hash = entry_hash(e);
            match self.entries.get(&e.log_id()) {
                Some(&(h, p)) if h != hash || p != prev_term => {
                    return violation(
                        "log matching",
                        format!(
                            "node {id} holds {} with another payload or predecessor",
                            e.log_id()
                        ),
                    )
                }
                Some(_) => {}
                None => {
                    self.entries.insert(e.log_id(), (hash, prev_term));
                }
            }
            prev_term = e.term;
        }
        let w = self.watch.get_mut(&id).expect("inserted above");
        w.checked = status.last_log_id;
        // Commit is monotonic within an incarnation, and every newly committed entry agrees with
        // what was committed before.
        if status.commit < w.commit {
            return violation(
                "monotonic commit",
                format!(
                    "node {id} commit went from {} to {}",
                    w.commit, status.commit
                ),
            );
        }
        let old_commit = w.commit;
        w.commit = status.commit;
        for i in (old_commit + 1)..=status.commit {
            let Some(e) = log.entry(i) else { continue };
            let (term, hash) = (e.term, entry_hash(e));
            self.check_committed(id, i, term, hash, status.term)?;
        }
        // Leader completeness, once per (node, term) it leads: every entry committed by then in
        // this term or an earlier one.
        let w = self.watch.get_mut(&id).expect("inserted above");
        if status.role == Role::Leader && w.led_term != status.term {
            w.led_term = status.term;
            for (i, c) in self.committed.iter().enumerate().skip(1) {
                let term = c.term;
                if c.committed_by_term <= status.term && log.term_of_any(i as Index) != Some(term) {
                    return violation(
                        "leader completeness",
                        format!(
                            "node {id} leads term {} without committed entry {term}/{i}",
                            status.term
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

/// What [`Checker::check_node`] reads of a node's status.
struct StatusView<'a> {
    role: Role,
    term: Term,
    commit: Index,
    applied: Index,
    last_log_id: LogId,
    membership: &'a keel_core::Membership,
}

/// Search budget of a run's linearizability check: far more than a healthy history needs, so
/// running out is reported as a failure (a checker that gives up silently proves nothing).
const LINEARIZABILITY_BUDGET_STEPS: u64 = 50_000_000;

/// A run's client history is linearizable under its model, or the violation that explains why
/// not.
pub(crate) fn linearizable<M: crate::linearizability::Model>(
    history: &crate::linearizability::History<M>,
) -> Result<(), Violation> {
    use crate::linearizability::{check, SearchBudget, Verdict};
    match check(history, SearchBudget::steps(LINEARIZABILITY_BUDGET_STEPS)) {
        Verdict::Linearizable => Ok(()),
        other => Err(Violation {
            invariant: "linearizability",
            detail: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    //! Each check must be able to fail: feed it states that break it.

    use bytes::Bytes;
    use keel_core::storage::{MemStorage, Storage};
    use keel_core::{Config, HardState};

    use super::*;

    fn entry(term: Term, index: Index, data: &'static [u8]) -> Entry {
        Entry {
            term,
            index,
            payload: EntryPayload::Normal(Bytes::from_static(data)),
        }
    }

    fn hard_state(term: Term, commit: Index) -> HardState {
        HardState {
            term,
            vote: None,
            commit,
        }
    }

    #[test]
    fn state_digest_catches_replicas_that_differ_at_one_index() {
        let mut c = Checker::default();
        assert!(c.state_digest(1, 5, 0xaa).is_ok());
        assert!(c.state_digest(2, 5, 0xaa).is_ok());
        assert!(c.state_digest(2, 6, 0xbb).is_ok());
        let v = c.state_digest(3, 5, 0xab).unwrap_err();
        assert_eq!(v.invariant, "state digest");
        assert!(v.detail.contains("node 3"), "{v}");
    }

    /// A node of a three-voter cluster whose durable log is `entries` with `commit`.
    fn node(id: NodeId, entries: Vec<Entry>, term: Term, commit: Index) -> RaftNode {
        let disk = MemStorage::with_log([1, 2, 3], entries, hard_state(term, commit));
        RaftNode::new(Config::new(id), disk.recover().unwrap()).unwrap()
    }

    /// A single-voter node that has won an election in its first term.
    fn leader(entries: Vec<Entry>, commit: Index) -> RaftNode {
        let term = entries.last().map_or(0, |e| e.term);
        let disk = MemStorage::with_log([1], entries, hard_state(term, commit));
        let mut n = RaftNode::new(Config::new(1), disk.recover().unwrap()).unwrap();
        // Replay what it had committed first: a restarted node campaigns only after that.
        let replay = n.ready();
        if let Some(e) = replay.committed.last() {
            n.applied(e.index);
        }
        n.campaign();
        let rd = n.ready();
        n.persisted(rd.write.expect("vote is written").id);
        assert_eq!(n.role(), Role::Leader);
        n
    }

    #[test]
    fn healthy_nodes_pass() {
        let mut c = Checker::default();
        let log = vec![entry(1, 1, b"a"), entry(1, 2, b"b")];
        c.check_node(&node(1, log.clone(), 1, 2)).unwrap();
        c.check_node(&node(2, log[..1].to_vec(), 1, 1)).unwrap();
        c.applied(1, &log[0]).unwrap();
        c.applied(1, &log[1]).unwrap();
        c.vote_granted((2, 1), 5, 1).unwrap();
        c.vote_granted((2, 1), 5, 1).unwrap();
        // Its disk wiped, node 2 has forgotten that vote: a second one is the new storage's
        // (whether it counts is for the candidates' handshake gates).
        c.vote_granted((2, 2), 5, 3).unwrap();
    }

    #[test]
    fn double_vote_is_caught() {
        let mut c = Checker::default();
        c.vote_granted((2, 1), 5, 1).unwrap();
        let v = c.vote_granted((2, 1), 5, 3).unwrap_err();
        assert_eq!(v.invariant, "one vote per term");
    }

    #[test]
    fn apply_gap_and_repeat_are_caught() {
        let mut c = Checker::default();
        c.applied(1, &entry(1, 1, b"a")).unwrap();
        assert_eq!(
            c.applied(1, &entry(1, 3, b"c")).unwrap_err().invariant,
            "exactly-once apply"
        );
        let mut c = Checker::default();
        c.applied(1, &entry(1, 1, b"a")).unwrap();
        assert!(c.applied(1, &entry(1, 1, b"a")).is_err());
    }

    #[test]
    fn conflicting_applies_are_caught() {
        let mut c = Checker::default();
        c.applied(1, &entry(1, 1, b"a")).unwrap();
        let v = c.applied(2, &entry(2, 1, b"z")).unwrap_err();
        assert_eq!(v.invariant, "state machine safety");
    }

    #[test]
    fn log_matching_violation_is_caught() {
        let mut c = Checker::default();
        c.check_node(&node(1, vec![entry(1, 1, b"a"), entry(2, 2, b"b")], 2, 0))
            .unwrap();
        // Same (index, term) with another payload.
        let v = c
            .check_node(&node(2, vec![entry(1, 1, b"a"), entry(2, 2, b"X")], 2, 0))
            .unwrap_err();
        assert_eq!(v.invariant, "log matching");
        // Same (index, term) with another predecessor.
        let mut c = Checker::default();
        c.check_node(&node(1, vec![entry(1, 1, b"a"), entry(2, 2, b"b")], 2, 0))
            .unwrap();
        let v = c
            .check_node(&node(3, vec![entry(2, 1, b"q"), entry(2, 2, b"b")], 2, 0))
            .unwrap_err();
        assert_eq!(v.invariant, "log matching");
    }

    #[test]
    fn conflicting_commits_are_caught() {
        let mut c = Checker::default();
        c.check_node(&node(1, vec![entry(1, 1, b"a")], 1, 1))
            .unwrap();
        let v = c
            .check_node(&node(2, vec![entry(2, 1, b"b")], 2, 1))
            .unwrap_err();
        assert_eq!(v.invariant, "state machine safety");
    }

    #[test]
    fn leader_without_a_committed_entry_is_caught() {
        let mut c = Checker::default();
        // Another node committed two entries of term 1 ...
        c.check_node(&node(2, vec![entry(1, 1, b"a"), entry(1, 2, b"b")], 1, 2))
            .unwrap();
        // ... and a leader holds only the first.
        let v = c
            .check_node(&leader(vec![entry(1, 1, b"a")], 1))
            .unwrap_err();
        assert_eq!(v.invariant, "leader completeness");
    }

    /// Raft's leader completeness covers the terms after an entry's commit. A candidate of an
    /// earlier term may still win late (a delayed vote) without the entry: not a violation
    /// (simulator seed 611887: a term-25 leader elected after a term-26 leader committed 24/181).
    #[test]
    fn a_leader_of_a_term_before_the_commit_need_not_hold_the_entry() {
        let mut c = Checker::default();
        // A node in term 3 holds two entries of term 1 committed ...
        c.check_node(&node(2, vec![entry(1, 1, b"a"), entry(1, 2, b"b")], 3, 2))
            .unwrap();
        // ... and the leader of term 2 holds only the first.
        c.check_node(&leader(vec![entry(1, 1, b"a")], 1)).unwrap();
        // A leader of a later term (4) without it is caught.
        let v = c
            .check_node(&leader(vec![entry(1, 1, b"a"), entry(3, 2, b"c")], 1))
            .unwrap_err();
        assert_eq!(v.invariant, "leader completeness");
    }

    #[test]
    fn two_leaders_in_one_term_are_caught() {
        let mut c = Checker::default();
        c.leaders.insert(2, 7);
        let v = c
            .check_node(&leader(vec![entry(1, 1, b"a")], 1))
            .unwrap_err();
        assert_eq!(v.invariant, "election safety");
    }

    #[test]
    fn commit_going_backwards_is_caught() {
        let mut c = Checker::default();
        let log = vec![entry(1, 1, b"a"), entry(1, 2, b"b")];
        c.check_node(&node(1, log.clone(), 1, 2)).unwrap();
        let v = c.check_node(&node(1, log, 1, 1)).unwrap_err();
        assert_eq!(v.invariant, "monotonic commit");
    }
}
