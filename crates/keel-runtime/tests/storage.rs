//! Nodes on a log storage of the embedder's (`Node::start_with_storage`): the in-memory storage
//! in a cluster (replication, snapshots, a learner that installs one), a persistent one across a
//! restart, a crash between a snapshot file and its record, and the starts that are refused.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{free_addr, propose_at_leader, scratch_dir, wait_applied, Count};
use keel_core::storage::{MemStorage, Storage};
use keel_core::{NodeId, RecoveredState, SnapshotMeta, Write};
use keel_runtime::{Node, NodeConfig, StartError};
use keel_wal::{StdFs, Wal, WalConfig};

const WAIT: Duration = Duration::from_secs(20);

fn config(id: NodeId, dir: &Path, peers: &BTreeMap<NodeId, std::net::SocketAddr>) -> NodeConfig {
    let mut config = NodeConfig::new(id, 7, dir.join(format!("n{id}")));
    config.peer_listen_addr = peers[&id];
    config.peers = peers.clone();
    config
}

fn snapshot_files(data_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir.join("snapshots"))
        .expect("the snapshot directory")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snap"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_on_in_memory_storage_replicates_snapshots_and_installs() {
    let dir = scratch_dir("mem-storage");
    let peers: BTreeMap<NodeId, _> = (1..=4).map(|id| (id, free_addr())).collect();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let mut config = config(id, &dir, &peers);
        config.initial_members = vec![1, 2, 3];
        // Nothing kept below a snapshot: a node added later can only catch up by installing one.
        config.raft.snapshot_trailing_entries = 0;
        let node = Node::start_with_storage(config, Count::default(), MemStorage::default())
            .await
            .expect("start on the in-memory storage");
        nodes.insert(id, node);
    }
    for _ in 0..20 {
        propose_at_leader(&nodes, Bytes::from_static(b"+1"), WAIT).await;
    }
    let leader = common::leader(&nodes, WAIT).await;
    let snapshot_at = nodes[&leader].handle().snapshot_now().await.unwrap();
    assert!(snapshot_at >= 20, "snapshot at {snapshot_at}");
    for _ in 0..5 {
        propose_at_leader(&nodes, Bytes::from_static(b"+1"), WAIT).await;
    }
    let leader = common::leader(&nodes, WAIT).await;
    let status = nodes[&leader].handle().status().await.unwrap();
    assert!(
        status.raft.snapshot.index >= 20,
        "the leader's log starts after its snapshot"
    );
    let leader_dir = dir.join(format!("n{leader}"));
    assert!(
        snapshot_files(&leader_dir).len() >= 2,
        "the bootstrap snapshot and the one taken: {:?}",
        snapshot_files(&leader_dir)
    );

    // A learner on an empty in-memory storage: the entries it needs are compacted, so it
    // installs the leader's snapshot (received into its own snapshot directory, recorded in its
    // storage) and then follows the log.
    let learner = Node::start_with_storage(
        config(4, &dir, &peers),
        Count::default(),
        MemStorage::default(),
    )
    .await
    .expect("start the learner");
    nodes[&leader]
        .handle()
        .add_learner(4, peers[&4])
        .await
        .expect("add the learner");
    let commit = nodes[&leader].handle().status().await.unwrap().raft.commit;
    wait_applied(&learner.handle(), commit, WAIT).await;
    let learner_status = learner.handle().status().await.unwrap();
    assert!(
        learner_status.raft.snapshot.index >= 20,
        "the learner installed a snapshot: {:?}",
        learner_status.raft.snapshot
    );
    assert!(!snapshot_files(&dir.join("n4")).is_empty());
    let count = nodes[&leader].handle().read(|c: &Count| c.0).await;
    assert_eq!(count.unwrap(), 25);
    learner.stop().await;
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
}

/// A WAL in a directory of its own, used as an embedder's storage would be.
fn wal_storage(dir: &Path) -> Wal<StdFs> {
    Wal::open(StdFs, dir, WalConfig::default())
        .expect("open the WAL")
        .0
}

fn one_voter(dir: &Path) -> NodeConfig {
    let mut config = NodeConfig::new(1, 7, dir.join("n1"));
    config.peer_listen_addr = free_addr();
    config.initial_members = vec![1];
    config
}

async fn count(node: &Node<Count>) -> u64 {
    node.handle().read(|c: &Count| c.0).await.unwrap()
}

async fn propose(node: &Node<Count>, n: usize) {
    common::wait_leading(&node.handle(), WAIT).await;
    for _ in 0..n {
        node.handle()
            .propose(Bytes::from_static(b"+1"))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_a_persistent_storage_restarts_where_it_was() {
    let dir = scratch_dir("own-storage");
    let log_dir = dir.join("log");
    let node = Node::start_with_storage(one_voter(&dir), Count::default(), wal_storage(&log_dir))
        .await
        .unwrap();
    propose(&node, 10).await;
    let snapshot_at = node.handle().snapshot_now().await.unwrap();
    propose(&node, 5).await;
    node.shutdown().await;

    let node = Node::start_with_storage(one_voter(&dir), Count::default(), wal_storage(&log_dir))
        .await
        .unwrap();
    common::wait_leading(&node.handle(), WAIT).await;
    assert_eq!(
        count(&node).await,
        15,
        "restored from the snapshot, then replayed"
    );
    let status = node.handle().status().await.unwrap();
    assert_eq!(status.raft.snapshot.index, snapshot_at);
    assert_eq!(
        status.replay.target_index - snapshot_at,
        status.replay.entries,
        "only the entries after the snapshot were replayed"
    );
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

/// A storage whose `record_snapshot` is lost for every snapshot but the bootstrap one: what a
/// crash after the snapshot file was renamed into place, and before it was recorded, leaves.
struct RecordLost(Wal<StdFs>);

impl Storage for RecordLost {
    type Error = keel_wal::WalError;
    fn recover(&self) -> Result<RecoveredState, Self::Error> {
        self.0.recover()
    }
    fn write(&mut self, write: &Write) -> Result<(), Self::Error> {
        Storage::write(&mut self.0, write)
    }
    fn record_snapshot(&mut self, meta: &SnapshotMeta) -> Result<(), Self::Error> {
        match meta.last.index {
            0 => self.0.record_snapshot(meta),
            _ => Ok(()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_file_its_storage_never_recorded_is_recorded_at_start() {
    let dir = scratch_dir("record-lost");
    let log_dir = dir.join("log");
    let node = Node::start_with_storage(
        one_voter(&dir),
        Count::default(),
        RecordLost(wal_storage(&log_dir)),
    )
    .await
    .unwrap();
    propose(&node, 10).await;
    let snapshot_at = node.handle().snapshot_now().await.unwrap();
    propose(&node, 2).await;
    node.shutdown().await;
    assert_eq!(wal_storage(&log_dir).snapshot().index, 0, "never recorded");

    let node = Node::start_with_storage(one_voter(&dir), Count::default(), wal_storage(&log_dir))
        .await
        .unwrap();
    common::wait_leading(&node.handle(), WAIT).await;
    assert_eq!(count(&node).await, 12);
    node.shutdown().await;
    assert_eq!(
        wal_storage(&log_dir).snapshot().index,
        snapshot_at,
        "recorded at start"
    );
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_that_would_forget_a_vote_or_a_snapshot_are_refused() {
    let dir = scratch_dir("refused");
    let log_dir = dir.join("log");
    let node = Node::start_with_storage(one_voter(&dir), Count::default(), wal_storage(&log_dir))
        .await
        .unwrap();
    propose(&node, 3).await;
    let snapshot_at = node.handle().snapshot_now().await.unwrap();
    node.shutdown().await;

    // An empty storage in a data directory a node has used: it may have voted.
    let refused =
        Node::start_with_storage(one_voter(&dir), Count::default(), MemStorage::default()).await;
    match refused {
        Err(e @ StartError::Storage(_)) => {
            assert!(e.to_string().contains("ran before"), "{e}");
            assert!(!e.is_retryable());
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("an empty storage started in a used data directory"),
    }

    // The storage records a snapshot whose file is gone.
    let file = dir
        .join("n1/snapshots")
        .join(keel_wal::snapshot_file_name(keel_core::LogId::new(
            node_term(&log_dir),
            snapshot_at,
        )));
    std::fs::remove_file(&file).expect("the snapshot file");
    let refused =
        Node::start_with_storage(one_voter(&dir), Count::default(), wal_storage(&log_dir)).await;
    match refused {
        Err(e @ StartError::Storage(_)) => assert!(e.to_string().contains("data is lost"), "{e}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("started without the data of its recorded snapshot"),
    }
    common::remove_scratch_dir(&dir);
}

/// The term of the snapshot the storage in `log_dir` records.
fn node_term(log_dir: &Path) -> u64 {
    wal_storage(log_dir).snapshot().term
}
