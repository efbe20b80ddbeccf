//! The safety invariants of SCENARIOS.md, checked after every simulated step.
//!
//! Each check keeps a small global registry so the work per step is proportional to what changed:
//! entries are registered by (index, term) the first time any node holds them, committed entries by
//! index the first time any node commits them, and every later observation is compared against
//! those records.

use std::collections::HashMap;

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

#[derive(Default)]
pub struct Checker {
    leaders: HashMap<Term, NodeId>,
    /// (index, term) -> (payload hash, term of the previous index).
    entries: HashMap<LogId, (u64, Term)>,
    /// Committed entries by index: (term, payload hash). Index 0 unused.
    committed: Vec<(Term, u64)>,
    /// Granted votes seen on the wire: (voter, term) -> candidate.
    votes: HashMap<(NodeId, Term), NodeId>,
    watch: HashMap<NodeId, NodeWatch>,
}

impl Checker {
    pub fn max_committed(&self) -> Index {
        self.committed.len().saturating_sub(1) as Index
    }

    /// The node restarted: its in-memory progress starts over (the durable part is checked by
    /// the caller against what was persisted).
    pub fn restarted(&mut self, id: NodeId) {
        let w = self.watch.entry(id).or_default();
        w.checked = LogId::ZERO;
        w.commit = 0;
        w.applied = 0;
    }

    /// A granted vote left `voter` for `candidate` in `term`.
    pub fn vote_granted(
        &mut self,
        voter: NodeId,
        term: Term,
        candidate: NodeId,
    ) -> Result<(), Violation> {
        match self.votes.insert((voter, term), candidate) {
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
        self.check_committed(id, entry.index, entry.term, entry_hash(entry))
    }

    fn check_committed(
        &mut self,
        id: NodeId,
        index: Index,
        term: Term,
        hash: u64,
    ) -> Result<(), Violation> {
        let i = index as usize;
        if i < self.committed.len() {
            let (t, h) = self.committed[i];
            if t != term || h != hash {
                return violation(
                    "state machine safety",
                    format!("node {id} has {term}/{index} committed, but {t}/{index} was committed before"),
                );
            }
        } else if i == self.committed.len() || (self.committed.is_empty() && i == 1) {
            if self.committed.is_empty() {
                self.committed.push((0, 0));
            }
            self.committed.push((term, hash));
        } else {
            // A commit beyond the next unregistered index: register the gap later, when a node
            // that commits it in order reports it. Committing skips nothing: the caller walks
            // every index from the previous commit.
            return violation(
                "commit registry",
                format!(
                    "node {id} committed {index} before {} was registered",
                    self.committed.len()
                ),
            );
        }
        Ok(())
    }

    /// Checks one live node after a step.
    pub fn check_node(&mut self, node: &RaftNode) -> Result<(), Violation> {
        let id = node.id();
        let status = node.status();
        let log = node.log();
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
        // Campaigning only as the configuration allows.
        if matches!(status.role, Role::Candidate | Role::PreCandidate)
            && !status.membership.is_voter(id)
        {
            return violation(
                "membership",
                format!(
                    "node {id} campaigns but is not a voter of {:?}",
                    status.membership
                ),
            );
        }
        let w = self.watch.entry(id).or_default();
        // Log matching: every (index, term) names one entry with one predecessor term.
        if !log.matches(w.checked) {
            w.checked = LogId::new(log.term_at(status.commit).unwrap_or(0), status.commit);
            if !log.matches(w.checked) {
                w.checked = log.snapshot();
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
            self.check_committed(id, i, term, hash)?;
        }
        // Leader completeness, once per (node, term) it leads.
        let w = self.watch.get_mut(&id).expect("inserted above");
        if status.role == Role::Leader && w.led_term != status.term {
            w.led_term = status.term;
            for (i, &(term, _)) in self.committed.iter().enumerate().skip(1) {
                if log.term_of_any(i as Index) != Some(term) {
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
