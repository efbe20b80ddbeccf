use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_core::log::RaftLog;
use keel_core::{Entry, EntryPayload, LogId, Membership};
use keel_wal::simfs::SimFs;
use keel_wal::Fs;

use super::*;

fn dir() -> PathBuf {
    PathBuf::from("/node")
}

fn sim_fs() -> SimFs {
    let fs = SimFs::new();
    fs.create_dir_all(&dir()).unwrap();
    fs
}

fn hello(node_id: NodeId, incarnation: u64) -> PeerHello {
    PeerHello {
        cluster_id: 7,
        node_id,
        incarnation: Some(incarnation),
        advertised_addr: Some("10.0.0.2:7000".parse().unwrap()),
        client_addr: Some("10.0.0.2:6379".into()),
    }
}

fn members(ids: &[NodeId]) -> ConfigurationChange {
    ConfigurationChange {
        departed: Vec::new(),
        members: ids.iter().copied().collect(),
        history_skipped: false,
    }
}

fn gate(fs: &SimFs) -> HandshakeGate<SimFs> {
    let mut gate = HandshakeGate::load(7, 1, fs.clone(), Some(dir())).unwrap();
    gate.configuration_changed(&members(&[1, 2, 3]));
    gate
}

#[test]
fn first_seen_is_remembered_across_a_crash_and_a_change_is_refused() {
    let fs = sim_fs();
    let mut a = gate(&fs);
    assert!(a.admit(&hello(2, 77)).is_ok());
    assert!(a.admit(&hello(2, 77)).is_ok());
    assert!(a.admit(&hello(3, 5)).is_ok());
    // The record was synced before the peer was heard: a crash right after keeps it.
    fs.crash();
    let mut b = gate(&fs);
    assert_eq!(
        b.admit(&hello(2, 78)),
        Err(Refusal::StorageChanged {
            node: 2,
            known: 77,
            got: 78
        }),
        "a wiped member is refused after a restart"
    );
    b.configuration_changed(&ConfigurationChange {
        departed: vec![2],
        members: [1, 3].into_iter().collect(),
        history_skipped: false,
    });
    b.configuration_changed(&members(&[1, 2, 3]));
    assert!(
        b.admit(&hello(2, 78)).is_ok(),
        "once removed, new storage is heard"
    );
    let mut c = gate(&fs);
    assert!(!c.hears(2, 77));
    assert!(c.hears(3, 5));
    assert!(c.incarnations().take_persist_error().is_none());
}

#[test]
fn an_unreadable_record_refuses_to_load() {
    let fs = sim_fs();
    let path = dir().join(INCARNATIONS_FILE_NAME);
    let mut f = fs.create(&path).unwrap();
    keel_wal::FileHandle::write_at(&mut f, b"something else\n", 0).unwrap();
    let refusal = |fs: &SimFs| match HandshakeGate::load(7, 1, fs.clone(), Some(dir())) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("an unreadable record was loaded"),
    };
    // Each refusal says what is wrong, in its own words.
    assert!(
        refusal(&fs).ends_with(": unknown header"),
        "{}",
        refusal(&fs)
    );
    fs.remove_file(&path).unwrap();
    let mut f = fs.create(&path).unwrap();
    keel_wal::FileHandle::write_at(&mut f, b"keel-peer-incarnations 1\n2 x\n", 0).unwrap();
    assert!(
        refusal(&fs).ends_with(": unreadable line \"2 x\""),
        "{}",
        refusal(&fs)
    );
}

#[test]
fn another_cluster_is_refused_before_its_incarnation_is_remembered() {
    let fs = sim_fs();
    let mut g = gate(&fs);
    let mut stranger = hello(2, 77);
    stranger.cluster_id = 8;
    assert_eq!(
        g.admit(&stranger),
        Err(Refusal::WrongCluster {
            expected: 7,
            got: 8
        })
    );
    assert!(
        g.admit(&hello(2, 99)).is_ok(),
        "the stranger's incarnation was not remembered"
    );
}

#[test]
fn addresses_are_adopted_only_from_an_admitted_peer_and_never_for_oneself() {
    let fs = sim_fs();
    let mut g = gate(&fs);
    let admitted = g.admit(&hello(2, 77)).unwrap();
    assert_eq!(admitted.client_addr.as_deref(), Some("10.0.0.2:6379"));
    assert_eq!(admitted.peer_addr, Some("10.0.0.2:7000".parse().unwrap()));
    assert!(g.admit(&hello(2, 78)).is_err());
    assert_eq!(g.admit(&hello(1, 5)).unwrap(), Admission::default());
    let known = Some("10.0.0.9:7000".parse().unwrap());
    assert!(adopts_peer_addr(1, 2, None));
    assert!(!adopts_peer_addr(1, 2, known), "a given address wins");
    assert!(!adopts_peer_addr(1, 1, None));
}

#[test]
fn in_memory_gate_enforces_without_files() {
    let fs = sim_fs();
    let mut g = HandshakeGate::load(7, 1, fs.clone(), None).unwrap();
    g.configuration_changed(&members(&[1, 2]));
    assert!(g.hears(2, 1));
    assert!(!g.hears(2, 2));
    assert!(fs
        .paths()
        .iter()
        .all(|p| !p.starts_with(Path::new("/node/peer"))));
}

#[test]
fn nothing_is_known_of_a_node_outside_the_configuration() {
    let fs = sim_fs();
    let mut g = gate(&fs);
    assert!(g.hears(3, 5));
    // Restarted after a crash that came between the write of node 3's removal and its
    // observation: the configuration the node starts with does not list 3.
    let mut g = HandshakeGate::load(7, 1, fs.clone(), Some(dir())).unwrap();
    assert_eq!(g.incarnations().known(3), Some(5));
    g.configuration_changed(&members(&[1, 2]));
    assert_eq!(g.incarnations().known(3), None);
    let g = HandshakeGate::load(7, 1, fs, Some(dir())).unwrap();
    assert!(g.hears_earlier_life(3, 6), "forgotten durably");
}

#[test]
fn a_removed_member_still_running_is_heard_but_not_remembered() {
    let fs = sim_fs();
    let mut g = gate(&fs);
    assert!(g.hears(2, 77));
    g.configuration_changed(&ConfigurationChange {
        departed: vec![2],
        members: [1, 3].into_iter().collect(),
        history_skipped: false,
    });
    // Its old process still talks (it may not know it was removed yet): heard, not pinned.
    assert!(g.hears(2, 77));
    assert_eq!(g.incarnations().known(2), None);
    // Rebuilt with a new disk and added back: its new storage is heard, then pinned.
    g.configuration_changed(&members(&[1, 2, 3]));
    assert!(g.hears(2, 78));
    assert!(
        !g.hears(2, 77),
        "the old process is refused once the new one is known"
    );
}

fn config_entry(index: u64, voters: &[NodeId]) -> Entry {
    Entry {
        term: 1,
        index,
        payload: EntryPayload::Membership(Arc::new(Membership::new_voters(voters.iter().copied()))),
    }
}

#[test]
fn a_member_removed_and_added_back_in_one_batch_is_seen_leaving() {
    let mut log = RaftLog::new(
        LogId::default(),
        Arc::new(Membership::new_voters([1, 2, 3])),
        Vec::new(),
    );
    let mut watch = DepartedMembers::new(&log);
    assert_eq!(watch.current(), members(&[1, 2, 3]));
    assert_eq!(watch.observe(&log), None);
    log.append(config_entry(1, &[1, 3]));
    log.append(config_entry(2, &[1, 2, 3]));
    let departed = |change: Option<ConfigurationChange>| change.map(|c| c.departed);
    assert_eq!(departed(watch.observe(&log)), Some(vec![2]));
    assert_eq!(watch.observe(&log), None, "reported once");
    log.append(config_entry(3, &[1, 2]));
    assert_eq!(
        watch.observe(&log),
        Some(ConfigurationChange {
            departed: vec![3],
            members: [1, 2].into_iter().collect(),
            history_skipped: false,
        })
    );
    // A truncation back to a configuration with 3: nothing skipped.
    log.truncate_from(3);
    let truncated = watch.observe(&log).unwrap();
    assert!(truncated.departed.is_empty() && !truncated.history_skipped);
    // A snapshot replacing the log: what it covers was never seen here.
    log.reset_to(
        LogId { term: 2, index: 9 },
        Arc::new(Membership::new_voters([2, 3])),
        Vec::new(),
    );
    let installed = watch.observe(&log).unwrap();
    assert_eq!(installed.departed, vec![1]);
    assert!(installed.history_skipped);
}

#[test]
fn a_snapshot_that_skipped_history_forgets_every_incarnation() {
    let fs = sim_fs();
    let mut g = gate(&fs);
    assert!(g.hears(2, 77));
    assert!(g.hears(3, 5));
    // Member 2 may have been removed and added back with a new disk within what the snapshot
    // covers: its new storage is heard.
    let mut change = members(&[1, 2, 3]);
    change.history_skipped = true;
    g.configuration_changed(&change);
    assert!(g.hears(2, 78));
    assert!(g.hears(3, 6));
    assert!(!g.hears(2, 77));
}

#[test]
fn from_changed_storage_only_what_promises_nothing_is_heard() {
    use keel_core::{AppendResult, LogId, MessageBody, RepairAnswer};
    let fs = sim_fs();
    let mut g = gate(&fs);
    assert!(g.hears(2, 77));
    let asks = [
        MessageBody::Heartbeat {
            commit: 3,
            read_round: 1,
            clock: Default::default(),
        },
        MessageBody::Append {
            prev: LogId::default(),
            entries: Vec::new(),
            commit: 3,
        },
        MessageBody::TimeoutNow,
        MessageBody::RequestVote {
            last_log_id: LogId::default(),
            transfer: false,
        },
        MessageBody::PreVote {
            last_log_id: LogId::default(),
        },
    ];
    for body in &asks {
        assert!(g.hears_message(2, 78, body), "{body:?}");
    }
    let promises = [
        MessageBody::VoteResponse { granted: true },
        MessageBody::PreVoteResponse { granted: true },
        MessageBody::AppendResponse(AppendResult::Success { match_index: 3 }),
        MessageBody::HeartbeatResponse {
            read_round: 1,
            lagging: false,
            clock: Default::default(),
        },
        // A repair request claims a promise its sender's new storage cannot have made (and may
        // move a leaderless node's term); a lacks answer promises the answerer's log and term.
        MessageBody::RepairRequest {
            promised: LogId::new(2, 5),
            last: LogId::default(),
            terms: vec![LogId::new(2, 5)],
            holds_last: true,
        },
        MessageBody::RepairResponse(RepairAnswer::Lacks {
            after: LogId::default(),
        }),
        MessageBody::RepairResponse(RepairAnswer::Holds {
            after: LogId::default(),
            through: LogId::new(1, 1),
            config: keel_core::Membership::new_voters([1]),
        }),
    ];
    for body in &promises {
        assert!(!g.hears_message(2, 78, body), "{body:?}");
        assert!(g.hears_message(2, 77, body), "the known storage: {body:?}");
    }
    // A message of an earlier life is heard unless another storage is known, and never pinned.
    assert!(g.hears_earlier_life(2, 77));
    assert!(!g.hears_earlier_life(2, 76));
    assert!(g.hears_earlier_life(3, 1));
    assert_eq!(g.incarnations().known(3), None);
}
