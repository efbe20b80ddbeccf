//! How far each node's wall clock is from its leader's, measured on heartbeats, and the hold on
//! the campaigns of a node whose clock is too far off.
//!
//! Why it matters: keel-redis judges expiry by the time leaders stamp on the entries they propose
//! (its "log time"), never by a replica's clock. A leader whose clock is ahead makes deadlines
//! come early, one that is behind makes them come late; bounding how far the clock of any node
//! that may lead is from its predecessor's bounds how much a TTL can shrink or stretch across a
//! failover (docs/time.md, "Locks and leases").
//!
//! **Measurement.** The leader writes its clock `t1` into every heartbeat; the follower's
//! response echoes `t1` and carries the follower's clock `t3` when it answered; the leader reads
//! its clock `t4` when the response arrives. In the leader's time the response was sent between
//! `t1` and `t4`, so the follower's offset (its clock minus the leader's) lies in
//! `[t3 - t4, t3 - t1]` whatever the network's delays. The leader keeps, per follower, the value
//! of that interval nearest zero: an offset it reports is one the follower has at least (a slow
//! network widens the interval and so hides offsets, it never invents one).
//!
//! **Hold.** The leader tells each follower its offset in the next heartbeat. A follower whose
//! offset exceeds `offset_ms_max` holds its campaigns (`RaftNode::hold_campaigns`: it starts no
//! election, votes as usual) until a heartbeat reports a smaller one, or until `hold_ms` pass
//! without any report: so if the leader with the good clock dies, a node with a bad one does not
//! replace it while others can; and if all of them are held by a leader that then died, they
//! campaign after `hold_ms` rather than never.
//!
//! **Outlier.** A leader whose clock a majority of the voters disagree with (each offset beyond
//! the bound; the leader agrees with itself) is the one that is off: it reports no offsets, so
//! no follower holds its campaigns because of the leader's clock, and it says so in its status
//! (its own campaigns need no hold: it already leads).
//!
//! **Heartbeat gaps.** A follower also keeps the longest time it went between two heartbeats of
//! the same leader in the same term, by its own clock ([`ClockStatus::heartbeat_gap_max_ms`]):
//! what its election timer saw of the leader's liveness. A gap near the minimum election timeout
//! is an election about to happen; the large-value tests assert it stays well below.
//!
//! **Wiring.** `NodeEngine::start_ready` stamps outgoing heartbeats; the shell hands
//! `NodeEngine::clock()` the readings of the messages it steps and its clock at every tick (holds
//! age then). [`ClockEvent`]s are for the shell to log, [`ClockStatus`] for INFO. With the
//! `clock-offset-midpoint` mutation the leader keeps the middle of the interval instead, which a
//! lopsided network can push beyond the truth.

use std::collections::BTreeMap;

use keel_core::{FollowerClock, Message, MessageBody, NodeId, RaftNode, Role, Term};

/// The bound on clock offsets and how long a measurement holds campaigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockPolicy {
    /// The largest offset from the leader's clock a node may have and still campaign; 0 turns
    /// the check off (offsets are still measured and reported).
    pub offset_ms_max: u64,
    /// How long a measurement stays current without a newer one.
    pub hold_ms: u64,
}

impl ClockPolicy {
    /// The runtime's default `offset_ms_max`, in ms.
    pub const OFFSET_MS_MAX_DEFAULT: u64 = 500;
}

/// A change worth a log line, reported by [`ClockWatch::heard`] and [`ClockWatch::tick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockEvent {
    /// This node's offset from `leader`'s clock exceeds the bound: it holds its campaigns.
    Held {
        /// The leader that measured the offset.
        leader: NodeId,
        /// The offset it reported: this node's clock minus the leader's, in ms.
        offset_ms: i64,
    },
    /// Its campaigns are released: a smaller offset was reported, or none for `hold_ms`.
    Released {
        /// The current measurement, if any (none after `hold_ms` without a report).
        offset_ms: Option<i64>,
    },
    /// This leader's clock is beyond the bound from `disagreeing` of its `voters`' clocks.
    Outlier {
        /// The voters whose current offset from this leader exceeds the bound.
        disagreeing: usize,
        /// How many voters the configuration in effect has (its incoming half, while joint).
        voters: usize,
    },
    /// This leader's clock agrees with a majority of its voters' again (or it stopped leading).
    NoLongerOutlier,
}

/// What [`ClockWatch::status`] reports (INFO raft, `keel status`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClockStatus {
    /// This node's offset from its leader's clock, as the leader last measured it (current only).
    pub offset_ms: Option<i64>,
    /// Whether this node's campaigns are held for its clock.
    pub campaigns_held: bool,
    /// As leader: whether its clock disagrees with a majority of its voters'.
    pub outlier: bool,
    /// As leader: each follower's current measured offset.
    pub follower_offsets: Vec<(NodeId, i64)>,
    /// The longest time between two heartbeats of the same leader in the same term this node
    /// received, by its clock, in ms (0: never two).
    pub heartbeat_gap_max_ms: u64,
}

/// The clock readings of a received message (see [`ClockWatch::reading`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockReading {
    /// A heartbeat: the sender's report of this node's offset.
    Heartbeat {
        /// The leader's measurement of this node's clock minus its own, in ms; `None` when it
        /// has none or is the outlier.
        your_offset_ms: Option<i64>,
    },
    /// A heartbeat's response.
    Response(FollowerClock),
}

#[derive(Clone, Copy, Debug)]
struct Measured {
    offset_ms: i64,
    at_ms: u64,
}

/// One node's clock measurements and its campaign hold (see the module documentation).
#[derive(Debug)]
pub struct ClockWatch {
    policy: ClockPolicy,
    /// As leader: each follower's offset, measured at the leader's clock `at_ms`.
    followers: BTreeMap<NodeId, Measured>,
    /// The offset the leader reported to this node, received at this node's clock `at_ms`.
    own: Option<(NodeId, Measured)>,
    held: bool,
    outlier: bool,
    /// The last heartbeat received from a leader: its sender, term and this node's clock then.
    last_heartbeat: Option<(NodeId, Term, u64)>,
    heartbeat_gap_max_ms: u64,
    #[cfg(feature = "mutations")]
    mutation: Option<keel_core::Mutation>,
}

impl ClockWatch {
    /// No measurement yet and no hold.
    pub fn new(policy: ClockPolicy) -> Self {
        ClockWatch {
            policy,
            followers: BTreeMap::new(),
            own: None,
            held: false,
            outlier: false,
            last_heartbeat: None,
            heartbeat_gap_max_ms: 0,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: a deliberately broken variant (`keel_core::Mutation::ClockOffsetMidpoint`).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<keel_core::Mutation>) {
        self.mutation = mutation;
    }

    fn reports_midpoint(&self) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.mutation == Some(keel_core::Mutation::ClockOffsetMidpoint)
        }
        #[cfg(not(feature = "mutations"))]
        {
            false
        }
    }

    fn current(&self, m: &Measured, now_ms: u64) -> bool {
        // A clock stepped back reads as "just measured": the hold then lasts a little longer.
        now_ms.saturating_sub(m.at_ms) < self.policy.hold_ms
    }

    fn beyond_bound(&self, offset_ms: i64) -> bool {
        self.policy.offset_ms_max > 0 && offset_ms.unsigned_abs() > self.policy.offset_ms_max
    }

    /// Writes this node's clock readings into an outgoing message.
    pub fn stamp(&self, msg: &mut Message, now_ms: u64) {
        match &mut msg.body {
            MessageBody::Heartbeat { clock, .. } => {
                clock.sent_at_ms = now_ms;
                clock.your_offset_ms = match self.followers.get(&msg.to) {
                    Some(m) if !self.outlier && self.current(m, now_ms) => Some(m.offset_ms),
                    _ => None,
                };
            }
            MessageBody::HeartbeatResponse { clock, .. } => clock.answered_at_ms = now_ms,
            _ => {}
        }
    }

    /// The readings of a received message, taken before it is stepped into the core.
    pub fn reading(msg: &Message) -> Option<ClockReading> {
        match &msg.body {
            MessageBody::Heartbeat { clock, .. } => Some(ClockReading::Heartbeat {
                your_offset_ms: clock.your_offset_ms,
            }),
            MessageBody::HeartbeatResponse { clock, .. } if clock.echo_sent_at_ms != 0 => {
                Some(ClockReading::Response(*clock))
            }
            _ => None,
        }
    }

    /// A message from `from` in `term` carrying `reading` was stepped into `raft`; `now_ms` is
    /// this node's clock. Readings count only from this term's leader, or by this term's leader.
    pub fn heard(
        &mut self,
        raft: &mut RaftNode,
        from: NodeId,
        term: Term,
        reading: ClockReading,
        now_ms: u64,
    ) -> Vec<ClockEvent> {
        if term == raft.term() {
            match reading {
                ClockReading::Heartbeat { your_offset_ms } if raft.leader() == Some(from) => {
                    self.heartbeat_from(from, term, now_ms);
                    self.own = your_offset_ms.map(|offset_ms| {
                        (
                            from,
                            Measured {
                                offset_ms,
                                at_ms: now_ms,
                            },
                        )
                    });
                }
                ClockReading::Response(clock)
                    if raft.role() == Role::Leader && clock.echo_sent_at_ms <= now_ms =>
                {
                    let answered = i128::from(clock.answered_at_ms);
                    let earliest = answered - i128::from(now_ms);
                    let latest = answered - i128::from(clock.echo_sent_at_ms);
                    let reported = if self.reports_midpoint() {
                        (earliest + latest) / 2
                    } else {
                        0i128.clamp(earliest, latest)
                    };
                    let offset_ms = reported.clamp(i64::MIN.into(), i64::MAX.into()) as i64;
                    self.followers.insert(
                        from,
                        Measured {
                            offset_ms,
                            at_ms: now_ms,
                        },
                    );
                }
                _ => {}
            }
        }
        self.tick(raft, now_ms)
    }

    /// Notes a heartbeat of the current leader, received at `now_ms`, and the gap since the
    /// previous one of the same leader and term.
    fn heartbeat_from(&mut self, leader: NodeId, term: Term, now_ms: u64) {
        if let Some((previous, previous_term, at_ms)) = self.last_heartbeat {
            if previous == leader && previous_term == term {
                let gap_ms = now_ms.saturating_sub(at_ms);
                self.heartbeat_gap_max_ms = self.heartbeat_gap_max_ms.max(gap_ms);
            }
        }
        self.last_heartbeat = Some((leader, term, now_ms));
    }

    /// Re-decides the hold and the outlier state at `now_ms` (measurements age out).
    pub fn tick(&mut self, raft: &mut RaftNode, now_ms: u64) -> Vec<ClockEvent> {
        let mut events = Vec::new();
        let leading = raft.role() == Role::Leader;
        if !leading {
            self.followers.clear();
        }

        let held_by = self
            .own
            .filter(|(_, m)| self.current(m, now_ms))
            .filter(|(_, m)| !leading && self.beyond_bound(m.offset_ms));
        if held_by.is_some() != self.held {
            self.held = held_by.is_some();
            events.push(match held_by {
                Some((leader, m)) => ClockEvent::Held {
                    leader,
                    offset_ms: m.offset_ms,
                },
                None => ClockEvent::Released {
                    offset_ms: self.status(now_ms).offset_ms,
                },
            });
        }
        if raft.campaigns_held() != self.held {
            raft.hold_campaigns(self.held);
        }

        let voters = &raft.membership().voters;
        let disagreeing = self
            .followers
            .iter()
            .filter(|(id, m)| {
                voters.contains(id) && self.current(m, now_ms) && self.beyond_bound(m.offset_ms)
            })
            .count();
        let outlier = leading && disagreeing > voters.len() / 2;
        if outlier != self.outlier {
            self.outlier = outlier;
            events.push(if outlier {
                ClockEvent::Outlier {
                    disagreeing,
                    voters: voters.len(),
                }
            } else {
                ClockEvent::NoLongerOutlier
            });
        }
        events
    }

    /// The measurements still current at `now_ms` (this node's clock), and the hold and
    /// outlier state as last decided.
    pub fn status(&self, now_ms: u64) -> ClockStatus {
        ClockStatus {
            offset_ms: self
                .own
                .filter(|(_, m)| self.current(m, now_ms))
                .map(|(_, m)| m.offset_ms),
            campaigns_held: self.held,
            outlier: self.outlier,
            follower_offsets: self
                .followers
                .iter()
                .filter(|(_, m)| self.current(m, now_ms))
                .map(|(id, m)| (*id, m.offset_ms))
                .collect(),
            heartbeat_gap_max_ms: self.heartbeat_gap_max_ms,
        }
    }
}

#[cfg(test)]
mod tests;
