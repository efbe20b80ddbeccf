//! Node messages between the nodes of an `InProcessNetwork`: delivery to every peer or one, in
//! the order sent, never through the log; the receiving channel's bound; the size bound; and a
//! node cut off from its peers neither sends nor receives them.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::Count;
use keel_core::NodeId;
use keel_runtime::node_messages::{NodeMessage, NODE_MESSAGE_BYTES_MAX};
use keel_runtime::{ClientError, Node, NodeConfig};
use keel_transport::InProcessNetwork;
use tokio::sync::mpsc;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(20);

async fn cluster(
    dir: &std::path::Path,
    network: &InProcessNetwork,
    queue_max: usize,
) -> BTreeMap<NodeId, Node<Count>> {
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let mut config = NodeConfig::new(id, 7, dir.join(format!("n{id}")));
        config.transport.connector = Some(Arc::new(network.clone()));
        config.initial_members = vec![1, 2, 3];
        config.node_message_queue_max = queue_max;
        nodes.insert(id, Node::start(config, Count::default()).await.unwrap());
    }
    nodes
}

async fn next(rx: &mut mpsc::Receiver<NodeMessage>) -> NodeMessage {
    timeout(WAIT, rx.recv())
        .await
        .expect("in time")
        .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_messages_reach_every_peer_in_order_and_never_the_log() {
    let dir = common::scratch_dir("node-messages");
    let network = InProcessNetwork::new();
    let mut nodes = cluster(&dir, &network, 4096).await;
    let mut inboxes: BTreeMap<NodeId, _> = nodes
        .iter_mut()
        .map(|(&id, node)| (id, node.take_node_messages().expect("once")))
        .collect();
    assert!(nodes.get_mut(&1).unwrap().take_node_messages().is_none());

    // No leader needed: a node message does not go through Raft.
    let sender = nodes[&2].handle();
    for i in 0..1000u32 {
        let sent = sender
            .send_node_message(None, Bytes::from(i.to_le_bytes().to_vec()))
            .unwrap();
        assert_eq!((sent.queued, sent.dropped), (2, 0));
    }
    sender
        .send_node_message(Some(3), Bytes::from_static(b"only 3"))
        .unwrap();
    for id in [1, 3] {
        let rx = inboxes.get_mut(&id).unwrap();
        for i in 0..1000u32 {
            let m = next(rx).await;
            assert_eq!((m.from, &m.message[..]), (2, &i.to_le_bytes()[..]));
        }
    }
    assert_eq!(next(inboxes.get_mut(&3).unwrap()).await.message, "only 3");
    assert!(
        inboxes.get_mut(&2).unwrap().try_recv().is_err(),
        "not to itself"
    );
    let stats = sender.node_message_stats();
    assert_eq!((stats.sent, stats.send_dropped), (2001, 0));
    assert_eq!(nodes[&3].handle().node_message_stats().received, 1001);

    // Too long: refused, sent to nobody.
    let too_long = Bytes::from(vec![0; NODE_MESSAGE_BYTES_MAX + 1]);
    assert!(matches!(
        sender.send_node_message(None, too_long),
        Err(ClientError::Rejected(_))
    ));

    // Cut off: nothing leaves or arrives, and the sender counts what it could not send.
    network.isolate(1);
    let sent = (nodes[&1].handle())
        .send_node_message(None, Bytes::from_static(b"lost"))
        .unwrap();
    assert_eq!((sent.queued, sent.dropped), (0, 2));
    network.heal(1);
    nodes[&1]
        .handle()
        .send_node_message(Some(2), Bytes::from_static(b"back"))
        .unwrap();
    assert_eq!(next(inboxes.get_mut(&2).unwrap()).await.message, "back");
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_that_does_not_read_loses_messages_past_its_bound_not_memory() {
    let dir = common::scratch_dir("node-messages-bound");
    let network = InProcessNetwork::new();
    let mut nodes = cluster(&dir, &network, 8).await;
    let mut inbox = nodes.get_mut(&1).unwrap().take_node_messages().unwrap();
    let sender = nodes[&2].handle();
    for i in 0..100u32 {
        sender
            .send_node_message(Some(1), Bytes::from(i.to_le_bytes().to_vec()))
            .unwrap();
    }
    let receiver = nodes[&1].handle();
    timeout(WAIT, async {
        while receiver.node_message_stats().received + receiver.node_message_stats().receive_dropped
            < 100
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("all handled");
    assert_eq!(receiver.node_message_stats().received, 8);
    assert_eq!(receiver.node_message_stats().receive_dropped, 92);
    // The first ones, in order; the rest were dropped, not queued.
    for i in 0..8u32 {
        assert_eq!(&next(&mut inbox).await.message[..], &i.to_le_bytes()[..]);
    }
    assert!(inbox.try_recv().is_err());
    // A handle of a stopped node: Shutdown.
    let stopped = nodes[&3].handle();
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
    assert!(matches!(
        stopped.send_node_message(None, Bytes::new()),
        Err(ClientError::Shutdown)
    ));
}
