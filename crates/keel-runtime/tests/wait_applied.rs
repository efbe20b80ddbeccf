//! `Handle::wait_applied`: a follower's handle resolves once its state machine applied what the
//! leader committed, a handle waits no longer than its deadline for an index the log does not
//! reach, and a stopped node's handle answers `Shutdown`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::Count;
use keel_core::NodeId;
use keel_runtime::{ClientError, Node, NodeConfig};
use keel_transport::InProcessNetwork;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_waits_until_it_applied_what_the_leader_committed() {
    let dir = common::scratch_dir("wait-applied");
    let network = InProcessNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let mut config = NodeConfig::new(id, 7, dir.join(format!("n{id}")));
        config.transport.connector = Some(Arc::new(network.clone()));
        config.initial_members = vec![1, 2, 3];
        nodes.insert(id, Node::start(config, Count::default()).await.unwrap());
    }
    let leader = common::leader(&nodes, WAIT).await;
    let follower: NodeId = *nodes.keys().find(|&&id| id != leader).unwrap();
    let mut last = 0;
    for _ in 0..20 {
        let proposal = nodes[&leader]
            .handle()
            .propose_tracked(Bytes::from_static(b"+1"))
            .await
            .unwrap();
        last = proposal.log_id().index;
        proposal.wait().await.unwrap();
    }
    let handle = nodes[&follower].handle().with_request_timeout(WAIT);
    let applied = handle
        .wait_applied(last)
        .await
        .expect("the follower catches up");
    assert!(applied >= last, "applied {applied}, waited for {last}");
    // What the follower applied is the leader's state: a local read there sees all 20.
    let status = handle.status().await.unwrap();
    assert!(status.raft.applied >= last);

    // An index the log does not reach: the handle's deadline, not a hang.
    let short = handle.with_request_timeout(Duration::from_millis(100));
    assert_eq!(
        short.wait_applied(last + 1_000).await,
        Err(ClientError::Unknown)
    );

    let stopped = nodes.remove(&follower).unwrap();
    stopped.shutdown().await;
    assert_eq!(
        handle.wait_applied(last + 1_000).await,
        Err(ClientError::Shutdown)
    );
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
}
