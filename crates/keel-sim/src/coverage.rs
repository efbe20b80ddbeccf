//! What a run's membership changes covered: the committed configurations by number of voters and
//! the committed changes between them (the leader's removal, learners added, promoted and
//! removed, removed nodes added back). Counted so that tests can assert the nemesis still draws
//! every size and transition (`tests/simulator.rs`), and a sweep prints the totals.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use keel_core::{Index, Membership, NodeId, SnapshotMeta};

/// Counts over one run, or summed over many (`add`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipCoverage {
    /// Committed configurations that are not joint (the bootstrap one included), by number of
    /// voters.
    pub sizes: BTreeMap<usize, u64>,
    /// Committed changes of voters, by (voters before, voters after): one per joint
    /// configuration, whose outgoing half is the configuration it leaves.
    pub transitions: BTreeMap<(usize, usize), u64>,
    /// Joint configurations that remove the leader that appended them.
    pub leader_removed: u64,
    /// Nodes made learners, learners made voters, learners removed.
    pub learner_added: u64,
    pub learner_promoted: u64,
    pub learner_removed: u64,
    /// Nodes made voters without having been learners first.
    pub voter_added_directly: u64,
    /// Nodes added back after an earlier removal (with the disk they kept).
    pub removed_readded: u64,
}

impl MembershipCoverage {
    pub fn add(&mut self, other: &MembershipCoverage) {
        for (size, n) in &other.sizes {
            *self.sizes.entry(*size).or_default() += n;
        }
        for (t, n) in &other.transitions {
            *self.transitions.entry(*t).or_default() += n;
        }
        self.leader_removed += other.leader_removed;
        self.learner_added += other.learner_added;
        self.learner_promoted += other.learner_promoted;
        self.learner_removed += other.learner_removed;
        self.voter_added_directly += other.voter_added_directly;
        self.removed_readded += other.removed_readded;
    }

    pub fn transition(&self, from: usize, to: usize) -> u64 {
        self.transitions.get(&(from, to)).copied().unwrap_or(0)
    }
}

impl fmt::Display for MembershipCoverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sizes")?;
        for (size, n) in &self.sizes {
            write!(f, " {size}:{n}")?;
        }
        write!(f, " transitions")?;
        for ((from, to), n) in &self.transitions {
            write!(f, " {from}->{to}:{n}")?;
        }
        write!(
            f,
            " leader_removed={} learner_added={} learner_promoted={} learner_removed={} \
             voter_added_directly={} removed_readded={}",
            self.leader_removed,
            self.learner_added,
            self.learner_promoted,
            self.learner_removed,
            self.voter_added_directly,
            self.removed_readded
        )
    }
}

/// Follows the committed configurations as the first node to apply each one sees it. A snapshot
/// restore beyond that point moves it to the snapshot's configuration: changes inside the jump
/// go uncounted, and none is ever attributed to the wrong pair of configurations.
pub(crate) struct MembershipTracker {
    /// The configuration at `index`.
    index: Index,
    current: Membership,
    /// Nodes that were members once and were removed.
    removed: BTreeSet<NodeId>,
    pub coverage: MembershipCoverage,
}

impl MembershipTracker {
    pub fn new(initial_voters: usize) -> MembershipTracker {
        let current = Membership::new_voters(1..=initial_voters as NodeId);
        let mut coverage = MembershipCoverage::default();
        coverage.sizes.insert(initial_voters, 1);
        MembershipTracker {
            index: 0,
            current,
            removed: BTreeSet::new(),
            coverage,
        }
    }

    /// A node applied the configuration entry at `index`; `leader` led the entry's term.
    pub fn applied(&mut self, index: Index, next: &Membership, leader: Option<NodeId>) {
        if index <= self.index {
            return;
        }
        let old = std::mem::replace(&mut self.current, next.clone());
        self.index = index;
        let c = &mut self.coverage;
        if next.is_joint() {
            *c.transitions
                .entry((next.outgoing.len(), next.voters.len()))
                .or_default() += 1;
            if leader.is_some_and(|l| next.outgoing.contains(&l) && !next.voters.contains(&l)) {
                c.leader_removed += 1;
            }
        } else {
            *c.sizes.entry(next.voters.len()).or_default() += 1;
        }
        let (before, after) = (old.members(), next.members());
        for id in after.difference(&before) {
            if self.removed.remove(id) {
                c.removed_readded += 1;
            }
        }
        for &id in &next.learners {
            if !before.contains(&id) {
                c.learner_added += 1;
            }
        }
        for &id in &next.voters {
            if old.learners.contains(&id) {
                c.learner_promoted += 1;
            } else if !before.contains(&id) {
                c.voter_added_directly += 1;
            }
        }
        for &id in &old.learners {
            if !after.contains(&id) {
                c.learner_removed += 1;
            }
        }
        self.removed.extend(before.difference(&after));
    }

    /// The highest index known applied (so committed) that set a configuration, or a
    /// snapshot's, and that configuration.
    pub fn committed(&self) -> (Index, &Membership) {
        (self.index, &self.current)
    }

    /// A node restored the snapshot `meta`.
    pub fn restored(&mut self, meta: &SnapshotMeta) {
        if meta.last.index > self.index {
            self.index = meta.last.index;
            self.current = (*meta.membership).clone();
        }
    }
}
