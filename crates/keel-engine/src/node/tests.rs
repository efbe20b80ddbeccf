use std::net::SocketAddr;

use bytes::Bytes;
use keel_core::storage::{MemStorage, Storage};
use keel_core::{Config, Index, Message, NodeId, RaftNode, Role, SnapshotMeta, Term};

use super::{EngineLimits, NodeEngine, Shell};
use crate::apply::ApplyItem;
use crate::clock::ClockPolicy;
use crate::error::ClientError;

/// Records every effect, in order.
#[derive(Default)]
struct Recorder {
    effects: Vec<String>,
    applied_entries: Vec<(Index, Option<u32>)>,
}

impl Shell for Recorder {
    type Reply = u32;
    type Read = u32;
    type Snapshot = Index;

    fn send(&mut self, msg: Message) {
        self.effects.push(format!("send {}", msg.to));
    }
    fn open_snapshot(&mut self, meta: &SnapshotMeta) -> Index {
        meta.last.index
    }
    fn apply(&mut self, item: ApplyItem<u32, u32, Index>) {
        match item {
            ApplyItem::Entries(batch) => {
                for (e, reply) in batch {
                    self.applied_entries.push((e.index, reply));
                }
                self.effects.push("entries".into());
            }
            ApplyItem::Restore { snapshot, .. } => self.effects.push(format!("restore {snapshot}")),
            ApplyItem::Read(r) => self.effects.push(format!("read {r}")),
            ApplyItem::Snapshot => self.effects.push("snapshot".into()),
        }
    }
    fn answer(&mut self, reply: u32, error: ClientError) {
        self.effects.push(format!("answer {reply} {error:?}"));
    }
    fn refuse_read(&mut self, read: u32, error: ClientError) {
        self.effects.push(format!("refuse read {read} {error:?}"));
    }
    fn send_snapshot(&mut self, to: NodeId, _term: Term, meta: SnapshotMeta) {
        self.effects
            .push(format!("send snapshot {} to {to}", meta.last.index));
    }
    fn leader_addr(&self, _node: NodeId) -> Option<SocketAddr> {
        None
    }
}

const CLOCK: ClockPolicy = ClockPolicy {
    offset_ms_max: 500,
    hold_ms: 10_000,
};

fn limits() -> EngineLimits {
    EngineLimits {
        pending_proposals_max: 4,
        pending_reads_max: 2,
        entry_bytes_max: 16,
    }
}

/// A single-voter cluster's node, run until it leads, with its writes completed at once.
fn leader() -> (RaftNode, NodeEngine<u32, u32>, Recorder) {
    let state = MemStorage::new_cluster([1]).recover().unwrap();
    let mut raft = RaftNode::new(Config::new(1), state).unwrap();
    let mut engine = NodeEngine::new(1, limits(), CLOCK, 0, 0);
    let mut shell = Recorder::default();
    for _ in 0..100 {
        raft.tick();
        drain(&mut raft, &mut engine, &mut shell);
        if raft.role() == Role::Leader && raft.commit_index() > 0 {
            break;
        }
    }
    assert_eq!(raft.role(), Role::Leader);
    shell.effects.clear();
    shell.applied_entries.clear();
    (raft, engine, shell)
}

/// Runs the node to quiescence as a shell would: writes complete at once, entries apply at once.
fn drain(raft: &mut RaftNode, engine: &mut NodeEngine<u32, u32>, shell: &mut Recorder) {
    while raft.has_ready() {
        let mut ready = raft.ready();
        if let Some(write) = engine.start_ready(&mut ready, 0, shell) {
            shell.effects.push("persist".into());
            raft.persisted(write.id);
        }
        engine.finish_ready(raft, ready, shell);
        if let Some(&(last, _)) = shell.applied_entries.last() {
            raft.applied(last);
        }
        engine.check_replay_done(raft);
    }
}

#[test]
fn a_proposal_is_answered_by_the_entry_that_commits_at_its_index() {
    let (mut raft, mut engine, mut shell) = leader();
    let id = engine
        .propose(&mut raft, Bytes::from_static(b"x"), 7, &mut shell)
        .unwrap();
    assert_eq!(engine.pending_proposals(), 1);
    drain(&mut raft, &mut engine, &mut shell);
    assert_eq!(engine.pending_proposals(), 0);
    assert!(shell.applied_entries.contains(&(id.index, Some(7))));
}

#[test]
fn bounds_refuse_before_the_core_sees_the_proposal() {
    let (mut raft, mut engine, mut shell) = leader();
    let last = raft.log().last_index();
    let too_large = engine.propose(&mut raft, Bytes::from(vec![0; 17]), 1, &mut shell);
    assert!(matches!(too_large, Err(ClientError::Rejected(_))));
    for i in 0..4 {
        engine
            .propose(&mut raft, Bytes::from_static(b"x"), 10 + i, &mut shell)
            .unwrap();
    }
    let busy = engine.propose(&mut raft, Bytes::from_static(b"x"), 2, &mut shell);
    assert_eq!(busy, Err(ClientError::Busy("too many pending proposals")));
    assert_eq!(raft.log().last_index(), last + 4);
    assert!(shell.effects[0].starts_with("answer 1 Rejected"));
    assert!(shell.effects[1].starts_with("answer 2 Busy"));
}

#[test]
fn a_refused_proposal_refuses_the_rest_of_its_batch() {
    let (mut raft, mut engine, mut shell) = leader();
    let batch = vec![
        (Bytes::from_static(b"a"), 1),
        (Bytes::from(vec![0; 17]), 2),
        (Bytes::from_static(b"c"), 3),
    ];
    engine.propose_batch(&mut raft, batch, &mut shell);
    assert_eq!(engine.pending_proposals(), 1);
    assert!(shell.effects[0].starts_with("answer 2 Rejected"));
    assert!(shell.effects[1].starts_with("answer 3 Rejected"));
}

#[test]
fn a_read_waits_for_its_round_and_goes_behind_the_entries_it_needs() {
    let mut shell = Recorder::default();
    let mut config = Config::new(1);
    // Entries are handed out one at a time, as a lagging apply pipeline gets them.
    config.unapplied_entries_max = 1;
    let state = MemStorage::new_cluster([1]).recover().unwrap();
    let mut raft = RaftNode::new(config, state).unwrap();
    let mut engine = NodeEngine::new(1, limits(), CLOCK, 0, 0);
    while raft.role() != Role::Leader || raft.commit_index() == 0 {
        raft.tick();
        drain(&mut raft, &mut engine, &mut shell);
    }
    for i in 0..3 {
        engine
            .propose(&mut raft, Bytes::from_static(b"x"), i, &mut shell)
            .unwrap();
    }
    shell.effects.clear();
    shell.applied_entries.clear();
    // Committed, but nothing reported applied: the pipeline is handed only the first of the
    // three.
    while raft.has_ready() {
        let mut ready = raft.ready();
        if let Some(write) = engine.start_ready(&mut ready, 0, &mut shell) {
            raft.persisted(write.id);
        }
        engine.finish_ready(&raft, ready, &mut shell);
    }
    let commit = raft.commit_index();
    assert!(
        shell.applied_entries.last().map_or(0, |e| e.0) < commit,
        "{:?} {:?} {commit}",
        shell.effects,
        shell.applied_entries
    );
    engine.read(&mut raft, 5, &mut shell);
    let mut ready = raft.ready();
    engine.start_ready(&mut ready, 0, &mut shell);
    engine.finish_ready(&raft, ready, &mut shell);
    assert!(
        !shell.effects.contains(&"read 5".to_string()),
        "{:?}",
        shell.effects
    );
    assert_eq!(engine.pending_reads(), 1);
    // The pipeline catches up.
    raft.applied(shell.applied_entries.last().unwrap().0);
    drain(&mut raft, &mut engine, &mut shell);
    let read = shell.effects.iter().position(|e| e == "read 5").unwrap();
    let last_entries = shell.effects.iter().rposition(|e| e == "entries").unwrap();
    assert!(last_entries < read, "{:?}", shell.effects);
    assert_eq!(shell.applied_entries.last().unwrap().0, commit);
    assert_eq!(engine.pending_reads(), 0);
}

#[test]
fn reads_beyond_the_bound_and_on_a_follower_are_refused() {
    let (mut raft, mut engine, mut shell) = leader();
    engine.read(&mut raft, 1, &mut shell);
    engine.read(&mut raft, 2, &mut shell);
    engine.read(&mut raft, 3, &mut shell);
    assert_eq!(
        shell.effects,
        vec![format!(
            "refuse read 3 {:?}",
            ClientError::Busy("too many pending reads")
        )]
    );
    let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
    let mut follower = RaftNode::new(Config::new(2), state).unwrap();
    let mut engine = NodeEngine::<u32, u32>::new(2, limits(), CLOCK, 0, 0);
    let mut shell = Recorder::default();
    engine.read(&mut follower, 9, &mut shell);
    assert!(shell.effects[0].starts_with("refuse read 9 NotLeader"));
}

#[test]
fn a_leaders_appends_leave_before_its_write_is_handed_to_storage() {
    let state = MemStorage::new_cluster([1, 2]).recover().unwrap();
    let mut config = Config::new(1);
    config.pre_vote = false;
    let mut raft = RaftNode::new(config, state).unwrap();
    let mut engine = NodeEngine::<u32, u32>::new(1, limits(), CLOCK, 0, 0);
    let mut shell = Recorder::default();
    while raft.role() != Role::Candidate {
        raft.tick();
    }
    drain(&mut raft, &mut engine, &mut shell);
    raft.step(Message {
        from: 2,
        to: 1,
        term: raft.term(),
        body: keel_core::MessageBody::VoteResponse { granted: true },
    });
    assert_eq!(raft.role(), Role::Leader);
    shell.effects.clear();
    // The new leader's first Ready: its entry goes out to node 2 and to its own disk.
    let mut ready = raft.ready();
    let write = engine.start_ready(&mut ready, 0, &mut shell);
    assert!(write.is_some_and(|w| !w.entries.is_empty()));
    assert_eq!(shell.effects, vec!["send 2".to_string()]);
    engine.finish_ready(&raft, ready, &mut shell);
}

#[test]
fn stopping_answers_every_waiting_proposal_unknown() {
    let (mut raft, mut engine, mut shell) = leader();
    engine
        .propose(&mut raft, Bytes::from_static(b"x"), 4, &mut shell)
        .unwrap();
    engine.stop(&mut shell);
    assert_eq!(
        shell.effects.last().unwrap(),
        &format!("answer 4 {:?}", ClientError::Unknown)
    );
    assert_eq!(engine.pending_proposals(), 0);
}

#[test]
fn replay_ends_once_the_target_is_applied() {
    let state = MemStorage::new_cluster([1]).recover().unwrap();
    let raft = RaftNode::new(Config::new(1), state).unwrap();
    let mut engine = NodeEngine::<u32, u32>::new(1, limits(), CLOCK, 0, 0);
    assert!(engine.check_replay_done(&raft));
    assert!(!engine.check_replay_done(&raft), "only once");
    let mut waiting = NodeEngine::<u32, u32>::new(1, limits(), CLOCK, 0, 3);
    assert!(!waiting.check_replay_done(&raft));
    assert!(!waiting.serving());
}

#[test]
fn a_serving_follower_of_a_known_leader_refuses_every_proposal_alike() {
    let (raft, engine, shell) = leader();
    assert_eq!(
        engine.proposal_refusal(&raft, &shell),
        None,
        "a leader decides"
    );

    let state = MemStorage::new_cluster([1, 2, 3]).recover().unwrap();
    let mut follower = RaftNode::new(Config::new(2), state).unwrap();
    let replaying = NodeEngine::<u32, u32>::new(2, limits(), CLOCK, 0, 5);
    let mut engine = NodeEngine::<u32, u32>::new(2, limits(), CLOCK, 0, 0);
    let mut shell = Recorder::default();
    engine.check_replay_done(&follower);
    assert_eq!(
        engine.proposal_refusal(&follower, &shell),
        None,
        "no leader known yet"
    );
    follower.step(Message {
        from: 1,
        to: 2,
        term: 1,
        body: keel_core::MessageBody::Append {
            prev: follower.log().last_log_id(),
            entries: Vec::new(),
            commit: 0,
        },
    });
    drain(&mut follower, &mut engine, &mut shell);
    assert_eq!(follower.leader(), Some(1));
    let refusal = engine.proposal_refusal(&follower, &shell);
    assert_eq!(
        refusal,
        Some(ClientError::NotLeader {
            leader: Some(1),
            leader_addr: None
        })
    );
    // The same answer the node gives a proposal that reaches it.
    let proposed = engine.propose(&mut follower, Bytes::from_static(b"x"), 7, &mut shell);
    assert_eq!(proposed.err(), refusal);
    // Until replay is done the node answers for itself.
    assert_eq!(replaying.proposal_refusal(&follower, &shell), None);
}
