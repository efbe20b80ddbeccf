//! Nodes of one process on an `InProcessNetwork` (`TransportConfig::connector`): a cluster that
//! elects, replicates and fails over when its leader is cut off, and a learner that catches up
//! by a snapshot copied over the network, all without a socket.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{propose_at_leader, wait_applied, Count};
use keel_core::NodeId;
use keel_runtime::{Node, NodeConfig};
use keel_transport::InProcessNetwork;

const WAIT: Duration = Duration::from_secs(20);

fn config(id: NodeId, dir: &Path, network: &InProcessNetwork) -> NodeConfig {
    let mut config = NodeConfig::new(id, 7, dir.join(format!("n{id}")));
    config.transport.connector = Some(Arc::new(network.clone()));
    // Nothing kept below a snapshot: a node behind it can only install one.
    config.raft.snapshot_trailing_entries = 0;
    config
}

async fn count_at_leader(nodes: &BTreeMap<NodeId, Node<Count>>) -> u64 {
    let leader = common::leader(nodes, WAIT).await;
    nodes[&leader].handle().read(|c: &Count| c.0).await.unwrap()
}

/// The serving leader other than `excluded` (which is cut off and may still believe it leads).
async fn leader_other_than(nodes: &BTreeMap<NodeId, Node<Count>>, excluded: NodeId) -> NodeId {
    tokio::time::timeout(WAIT, async {
        loop {
            for (&id, node) in nodes {
                let status = node.handle().status().await.unwrap();
                if id != excluded && status.serving && status.raft.role == keel_core::Role::Leader {
                    return id;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a new leader among the nodes still connected")
}

/// Adds `learner` (node `id`) at the leader, asking again while an old leader that is back on the network
/// still believes it leads; returns the leader that added it.
async fn add_learner(
    nodes: &BTreeMap<NodeId, Node<Count>>,
    id: NodeId,
    learner: &Node<Count>,
) -> NodeId {
    tokio::time::timeout(WAIT, async {
        loop {
            let leader = common::leader(nodes, WAIT).await;
            match nodes[&leader]
                .handle()
                .add_learner(id, learner.peer_addr())
                .await
            {
                Ok(()) => return leader,
                Err(e) => eprintln!("add_learner at {leader}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the learner is added")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_in_one_process_fails_over_and_installs_snapshots_without_sockets() {
    let dir = common::scratch_dir("in-process");
    let network = InProcessNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let mut config = config(id, &dir, &network);
        config.initial_members = vec![1, 2, 3];
        nodes.insert(id, Node::start(config, Count::default()).await.unwrap());
    }
    assert_eq!(network.nodes(), vec![1, 2, 3]);
    for _ in 0..10 {
        propose_at_leader(&nodes, Bytes::from_static(b"+1"), WAIT).await;
    }

    // The leader is cut off: the other two elect one of themselves and go on.
    let first = common::leader(&nodes, WAIT).await;
    network.isolate(first);
    let second = leader_other_than(&nodes, first).await;
    for _ in 0..5 {
        nodes[&second]
            .handle()
            .propose(Bytes::from_static(b"+1"))
            .await
            .unwrap();
    }
    let snapshot_at = nodes[&second].handle().snapshot_now().await.unwrap();
    nodes[&second]
        .handle()
        .propose(Bytes::from_static(b"+1"))
        .await
        .unwrap();

    // Back on the network, the old leader follows; a learner added now installs the snapshot.
    network.heal(first);
    let learner = Node::start(config(4, &dir, &network), Count::default())
        .await
        .unwrap();
    let leader = add_learner(&nodes, 4, &learner).await;
    let commit = nodes[&leader].handle().status().await.unwrap().raft.commit;
    for node in nodes.values().chain([&learner]) {
        wait_applied(&node.handle(), commit, WAIT).await;
    }
    let learner_status = learner.handle().status().await.unwrap();
    assert!(
        learner_status.raft.snapshot.index >= snapshot_at,
        "the learner installed the snapshot at {snapshot_at}: {:?}",
        learner_status.raft.snapshot
    );
    let sent = nodes[&leader].snapshot_transfer_stats();
    assert!(sent.sends_completed >= 1, "sent over the network: {sent:?}");
    assert_eq!(count_at_leader(&nodes).await, 16);
    learner.stop().await;
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
}

/// A member configured for another Raft group is neither heard nor hears: the two others elect
/// and commit without it, and both sides count what they dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_group_is_neither_heard_nor_hears() {
    let dir = common::scratch_dir("in-process-groups");
    let network = InProcessNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let mut config = config(id, &dir, &network);
        config.group = if id == 3 { 8 } else { 7 };
        config.initial_members = vec![1, 2, 3];
        nodes.insert(id, Node::start(config, Count::default()).await.unwrap());
    }
    for _ in 0..3 {
        propose_at_leader(&nodes, Bytes::from_static(b"+1"), WAIT).await;
    }
    let leader = common::leader(&nodes, WAIT).await;
    assert_ne!(leader, 3, "node 3 has no votes in group 8");
    assert_eq!(nodes[&leader].handle().watch().borrow().group, 7);
    assert_eq!(nodes[&3].handle().watch().borrow().group, 8);
    // Node 3 drops the leader's heartbeats; the others drop its campaigns.
    let (outsider, leading) = tokio::time::timeout(WAIT, async {
        loop {
            let outsider = nodes[&3].handle().status().await.unwrap();
            let leading = nodes[&leader].handle().status().await.unwrap();
            if outsider.refused_messages > 0 && leading.refused_messages > 0 {
                return (outsider, leading);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("both sides drop the other group's messages");
    assert!(leading.raft.commit >= 3, "{:?}", leading.raft);
    assert_eq!(
        outsider.raft.commit, 0,
        "node 3 heard nothing: {:?}",
        outsider.raft
    );
    assert_eq!(outsider.raft.leader, None);
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
}
