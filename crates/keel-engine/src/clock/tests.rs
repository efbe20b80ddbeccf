use keel_core::storage::{MemStorage, Storage};
use keel_core::{Config, LeaderClock, Message, MessageBody, RaftNode, Role};

use super::*;

const POLICY: ClockPolicy = ClockPolicy {
    offset_ms_max: 500,
    hold_ms: 10_000,
};
const BASE_MS: u64 = 1_700_000_000_000;

/// Three nodes whose clocks read the true time plus `offsets_ms`, exchanging messages at once
/// (a network without delay) or with every delivery `delay_ms` late. A node not `up` neither
/// ticks, sends nor receives.
struct Trio {
    nodes: Vec<(RaftNode, ClockWatch)>,
    offsets_ms: [i64; 3],
    up: [bool; 3],
    now_ms: u64,
    delay_ms: u64,
    events: Vec<(NodeId, ClockEvent)>,
}

impl Trio {
    fn new(offsets_ms: [i64; 3], policy: ClockPolicy) -> Trio {
        let nodes = (1..=3)
            .map(|id| {
                let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
                let raft = RaftNode::new(Config::new(id), state).unwrap();
                (raft, ClockWatch::new(policy))
            })
            .collect();
        Trio {
            nodes,
            offsets_ms,
            up: [true; 3],
            now_ms: 0,
            delay_ms: 0,
            events: Vec::new(),
        }
    }

    fn clock(&self, id: NodeId) -> u64 {
        (BASE_MS + self.now_ms).saturating_add_signed(self.offsets_ms[(id - 1) as usize])
    }

    /// Runs every node's output to quiescence.
    fn settle(&mut self) {
        loop {
            let mut sent = Vec::new();
            for id in self.up_nodes() {
                let clock = self.clock(id);
                let (raft, watch) = &mut self.nodes[(id - 1) as usize];
                while raft.has_ready() {
                    let mut ready = raft.ready();
                    for mut msg in ready.messages.drain(..) {
                        watch.stamp(&mut msg, clock);
                        sent.push(msg);
                    }
                    if let Some(write) = ready.write.take() {
                        raft.persisted(write.id);
                    }
                    if let Some(last) = ready.committed.last() {
                        raft.applied(last.index);
                    }
                }
            }
            if sent.is_empty() {
                return;
            }
            self.now_ms += self.delay_ms;
            for msg in sent {
                self.deliver(msg);
            }
        }
    }

    fn up_nodes(&self) -> Vec<NodeId> {
        (1..=3).filter(|id| self.up[(id - 1) as usize]).collect()
    }

    fn deliver(&mut self, msg: Message) {
        let to = msg.to;
        if !self.up[(to - 1) as usize] {
            return;
        }
        let clock = self.clock(to);
        let (raft, watch) = &mut self.nodes[(to - 1) as usize];
        let reading = ClockWatch::reading(&msg);
        let (from, term) = (msg.from, msg.term);
        raft.step(msg);
        if let Some(reading) = reading {
            for e in watch.heard(raft, from, term, reading, clock) {
                self.events.push((to, e));
            }
        }
    }

    /// Advances time by `ms`, one tick of 10 ms at a time.
    fn run_ms(&mut self, ms: u64) {
        for _ in 0..ms / 10 {
            self.now_ms += 10;
            for id in self.up_nodes() {
                let clock = self.clock(id);
                let (raft, watch) = &mut self.nodes[(id - 1) as usize];
                raft.tick();
                for e in watch.tick(raft, clock) {
                    self.events.push((id, e));
                }
            }
            self.settle();
        }
    }

    fn elect(&mut self, id: NodeId) {
        self.nodes[(id - 1) as usize].0.campaign();
        self.settle();
        assert_eq!(self.raft(id).role(), Role::Leader);
    }

    fn raft(&self, id: NodeId) -> &RaftNode {
        &self.nodes[(id - 1) as usize].0
    }

    fn status(&self, id: NodeId) -> ClockStatus {
        self.nodes[(id - 1) as usize].1.status(self.clock(id))
    }
}

#[test]
fn the_leader_measures_each_followers_offset_within_the_round_trip() {
    let mut trio = Trio::new([0, 800, -300], POLICY);
    trio.delay_ms = 5;
    trio.elect(1);
    trio.run_ms(1_000);
    let offsets = trio.status(1).follower_offsets;
    assert_eq!(offsets.len(), 2, "{offsets:?}");
    for (id, offset) in offsets {
        let truth = trio.offsets_ms[(id - 1) as usize];
        // The interval is one round trip wide; the value nearest zero is at most that far in.
        assert!(
            offset.abs() <= truth.abs() && truth.abs() - offset.abs() <= 10,
            "n{id}: measured {offset}, truth {truth}"
        );
        assert_eq!(offset.signum(), truth.signum());
    }
    // Each follower was told its own.
    let told = trio.status(2).offset_ms.unwrap();
    assert!((790..=800).contains(&told), "{told}");
    let told = trio.status(3).offset_ms.unwrap();
    assert!((-300..=-290).contains(&told), "{told}");
}

#[test]
fn a_slow_network_never_invents_an_offset() {
    // Clocks in step, every delivery 400 ms late: the interval is [-800, 800] wide around 0.
    let mut trio = Trio::new([0, 0, 0], POLICY);
    trio.delay_ms = 400;
    trio.elect(1);
    trio.run_ms(3_000);
    assert_eq!(trio.status(1).follower_offsets, vec![(2, 0), (3, 0)]);
    assert!(!trio.raft(2).campaigns_held() && !trio.raft(3).campaigns_held());
}

#[test]
fn a_follower_beyond_the_bound_holds_its_campaigns_while_reports_say_so() {
    let mut trio = Trio::new([0, 900, 100], POLICY);
    trio.elect(1);
    trio.run_ms(1_000);
    assert!(trio.raft(2).campaigns_held(), "{:?}", trio.status(2));
    assert!(!trio.raft(3).campaigns_held());
    assert!(trio
        .events
        .iter()
        .any(|(id, e)| *id == 2 && matches!(e, ClockEvent::Held { leader: 1, .. })));

    // The leader dies: node 3 campaigns, node 2 does not (it votes).
    let before = trio.raft(2).term();
    trio.up[0] = false;
    trio.run_ms(3_000);
    assert_eq!(trio.raft(3).role(), Role::Leader, "node 3 took over");
    assert!(trio.raft(2).term() > before);
    assert_ne!(trio.raft(2).role(), Role::Leader);
}

#[test]
fn a_hold_ends_with_a_smaller_offset_or_after_hold_ms_without_reports() {
    let mut trio = Trio::new([0, -700, 0], POLICY);
    trio.elect(1);
    trio.run_ms(500);
    assert!(trio.raft(2).campaigns_held());
    // The follower's clock is corrected: the next measurements release it.
    trio.offsets_ms[1] = -100;
    trio.run_ms(500);
    assert!(!trio.raft(2).campaigns_held());
    assert!(trio
        .events
        .iter()
        .any(|(id, e)| *id == 2 && matches!(e, ClockEvent::Released { .. })));

    // Held again, then the reports stop (the watch alone, no heartbeats): released after hold_ms.
    let mut watch = ClockWatch::new(POLICY);
    let mut raft = {
        let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
        RaftNode::new(Config::new(2), state).unwrap()
    };
    let beat = Message {
        from: 1,
        to: 2,
        term: 1,
        body: MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: LeaderClock {
                sent_at_ms: BASE_MS,
                your_offset_ms: Some(-700),
            },
        },
    };
    let reading = ClockWatch::reading(&beat).unwrap();
    raft.step(beat);
    watch.heard(&mut raft, 1, 1, reading, BASE_MS);
    assert!(raft.campaigns_held());
    assert!(watch.tick(&mut raft, BASE_MS + 9_999).is_empty());
    assert!(raft.campaigns_held());
    assert_eq!(
        watch.tick(&mut raft, BASE_MS + 10_000),
        vec![ClockEvent::Released { offset_ms: None }]
    );
    assert!(!raft.campaigns_held());
}

#[test]
fn a_leader_whose_clock_a_majority_disagrees_with_reports_no_offsets() {
    let mut trio = Trio::new([5_000, 0, 100], POLICY);
    trio.elect(1);
    trio.run_ms(1_000);
    let status = trio.status(1);
    assert!(status.outlier, "{status:?}");
    assert_eq!(status.follower_offsets.len(), 2);
    assert!(trio.events.contains(&(
        1,
        ClockEvent::Outlier {
            disagreeing: 2,
            voters: 3
        }
    )));
    // No follower holds its campaigns because of the leader's clock.
    assert!(!trio.raft(2).campaigns_held() && !trio.raft(3).campaigns_held());
    assert_eq!(trio.status(2).offset_ms, None);
}

#[test]
fn a_report_counts_only_from_the_leader_of_the_current_term() {
    let mut watch = ClockWatch::new(POLICY);
    let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
    let mut raft = RaftNode::new(Config::new(2), state).unwrap();
    let beat = |term| Message {
        from: 1,
        to: 2,
        term,
        body: MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: LeaderClock {
                sent_at_ms: BASE_MS,
                your_offset_ms: Some(9_000),
            },
        },
    };
    raft.step(beat(3));
    // A stale leader of term 2 reports an offset: the core refuses the heartbeat, the watch too.
    let stale = beat(2);
    let reading = ClockWatch::reading(&stale).unwrap();
    raft.step(stale);
    assert!(watch.heard(&mut raft, 1, 2, reading, BASE_MS).is_empty());
    assert!(!raft.campaigns_held());
    // Another node of this term is not its leader.
    assert!(watch.heard(&mut raft, 3, 3, reading, BASE_MS).is_empty());
    assert!(!raft.campaigns_held());
    // The leader of term 3 is heard.
    assert!(!watch.heard(&mut raft, 1, 3, reading, BASE_MS).is_empty());
    assert!(raft.campaigns_held());
}

#[test]
fn a_zero_bound_measures_but_never_holds() {
    let policy = ClockPolicy {
        offset_ms_max: 0,
        ..POLICY
    };
    let mut trio = Trio::new([0, 60_000, -60_000], policy);
    trio.elect(1);
    trio.run_ms(1_000);
    assert_eq!(trio.status(1).follower_offsets.len(), 2);
    assert!(!trio.status(1).outlier);
    assert!(!trio.raft(2).campaigns_held() && !trio.raft(3).campaigns_held());
    assert_eq!(trio.status(2).offset_ms, Some(60_000));
}

#[test]
fn a_follower_keeps_the_longest_gap_between_its_leaders_heartbeats() {
    let mut trio = Trio::new([0, 0, 0], POLICY);
    trio.elect(1);
    // Heartbeats every 2 ticks of 10 ms.
    trio.run_ms(200);
    assert_eq!(trio.status(2).heartbeat_gap_max_ms, 20);
    // Time passes 70 ms with no tick anywhere (the leader's task stalled): a 90 ms gap.
    trio.now_ms += 70;
    trio.run_ms(100);
    assert_eq!(trio.status(3).heartbeat_gap_max_ms, 90);
    assert_eq!(trio.status(2).heartbeat_gap_max_ms, 90);
    // A new leader's first heartbeat is no gap, whatever the silence before it.
    trio.up[0] = false;
    trio.run_ms(400);
    let new_leader = (2..=3)
        .find(|&id| trio.raft(id).role() == Role::Leader)
        .expect("a new leader");
    let follower = 5 - new_leader;
    trio.run_ms(100);
    assert!(trio.status(follower).heartbeat_gap_max_ms <= 90);
}
