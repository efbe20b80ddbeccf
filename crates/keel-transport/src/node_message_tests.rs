//! Node messages over TCP: delivery to one peer or all, order with Raft traffic between them,
//! the per-peer bounds, and a malformed node message refused like any bad frame.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::tests::{heartbeat, start_with};
use super::*;

const CLUSTER: u64 = 0xC0FFEE;
const WAIT: Duration = Duration::from_secs(10);

async fn start(id: NodeId) -> (Transport, mpsc::Receiver<Inbound>) {
    start_with(TransportConfig::new(CLUSTER, id)).await
}

/// The next node message, skipping Raft messages and addresses.
async fn next_node_message(rx: &mut mpsc::Receiver<Inbound>) -> (NodeId, Bytes) {
    loop {
        match timeout(WAIT, rx.recv())
            .await
            .expect("in time")
            .expect("open")
        {
            Inbound::NodeMessage { from, message } => return (from, message),
            Inbound::Message { .. } | Inbound::PeerAddress { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn node_messages_arrive_in_order_among_raft_messages_at_one_peer_or_all() {
    let (a, _a_rx) = start(1).await;
    let (b, mut b_rx) = start(2).await;
    let (c, mut c_rx) = start(3).await;
    a.set_peer(2, b.local_addr());
    a.set_peer(3, c.local_addr());
    for i in 0..300u32 {
        let sent = a.send_node_message(None, Bytes::from(i.to_le_bytes().to_vec()));
        assert_eq!(
            sent,
            NodeMessageSent {
                queued: 2,
                dropped: 0
            }
        );
        a.send(0, heartbeat(1, 2, u64::from(i)));
    }
    let only_c = a.send_node_message(Some(3), Bytes::from_static(b"to c"));
    assert_eq!(only_c.queued, 1);
    for rx in [&mut b_rx, &mut c_rx] {
        for i in 0..300u32 {
            let (from, message) = next_node_message(rx).await;
            assert_eq!((from, &message[..]), (1, &i.to_le_bytes()[..]));
        }
    }
    assert_eq!(
        next_node_message(&mut c_rx).await.1,
        Bytes::from_static(b"to c")
    );
    // The longest message travels whole; an empty one too.
    let longest = Bytes::from(vec![7u8; wire::NODE_MESSAGE_BYTES_MAX]);
    a.send_node_message(Some(2), longest.clone());
    a.send_node_message(Some(2), Bytes::new());
    assert_eq!(next_node_message(&mut b_rx).await.1, longest);
    assert!(next_node_message(&mut b_rx).await.1.is_empty());
    assert_eq!(a.dropped_node_messages(), 0);
}

#[tokio::test]
async fn node_messages_are_bounded_per_peer_and_never_crowd_out_raft_messages() {
    let mut config = TransportConfig::new(CLUSTER, 1);
    config.node_message_queue_messages_max = 10;
    config.node_message_queue_bytes_max = 1000;
    let (a, _rx) = start_with(config).await;
    // Nobody listens: the queue fills.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    a.set_peer(2, dead_addr);
    let mut queued = 0;
    for _ in 0..50 {
        queued += a.send_node_message(None, Bytes::from_static(b"x")).queued;
    }
    assert_eq!(queued, 10, "the message bound");
    assert_eq!(a.dropped_node_messages(), 40);
    // Raft messages still have their whole share of the queue.
    for round in 0..100 {
        a.send(0, heartbeat(1, 2, round));
    }
    assert_eq!(a.dropped_messages(), 0);
    // Too long for the wire, or for a peer that is not one: dropped, counted.
    let too_long = Bytes::from(vec![0u8; wire::NODE_MESSAGE_BYTES_MAX + 1]);
    assert_eq!(a.send_node_message(None, too_long).dropped, 1);
    assert_eq!(a.send_node_message(Some(9), Bytes::new()).dropped, 1);
    assert_eq!(a.dropped_node_messages(), 42);

    // The byte bound, on a fresh peer: 900 bytes fit, 200 more do not.
    let mut config = TransportConfig::new(CLUSTER, 1);
    config.node_message_queue_bytes_max = 1000;
    let (a, _rx) = start_with(config).await;
    a.set_peer(2, dead_addr);
    assert_eq!(
        a.send_node_message(None, Bytes::from(vec![0; 900])).queued,
        1
    );
    assert_eq!(
        a.send_node_message(None, Bytes::from(vec![0; 200])).dropped,
        1
    );
    assert_eq!(
        a.send_node_message(None, Bytes::from(vec![0; 100])).queued,
        1
    );
}

/// A node message longer than the bound closes that connection (counted, the peer told why);
/// nothing of it reaches the node, and the next connection is served.
#[tokio::test]
async fn a_malformed_node_message_is_refused_like_a_bad_frame() {
    let (b, mut b_rx) = start(2).await;
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    let mut buf = Vec::new();
    wire::encode_handshake(&Handshake::new(CLUSTER, 1, Channel::Messages), &mut buf);
    let body = vec![wire::BODY_NODE_MESSAGE; wire::NODE_MESSAGE_BYTES_MAX + 2];
    wire::encode_handshake_body(&body, &mut buf); // any body in a frame
    s.write_all(&buf).await.unwrap();
    let mut rd = RecordReader::plain(BufReader::new(s));
    match timeout(WAIT, read_frame(&mut rd, 4096)).await.unwrap() {
        Ok(Some(Body::Refusal(reason))) => assert!(reason.contains("exceeds"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(b.refused_connections(), 1);
    while let Ok(item) = b_rx.try_recv() {
        assert!(
            !matches!(item, Inbound::NodeMessage { .. }),
            "nothing delivered"
        );
    }
    let (a, _a_rx) = start(1).await;
    a.set_peer(2, b.local_addr());
    a.send_node_message(Some(2), Bytes::from_static(b"fine"));
    assert_eq!(
        next_node_message(&mut b_rx).await,
        (1, Bytes::from_static(b"fine"))
    );
}
