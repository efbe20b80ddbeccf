use std::time::Duration;

use keel_core::MessageBody;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const CLUSTER: u64 = 0xC0FFEE;
/// Generous: these bound a hang, they are not latency assertions.
const WAIT: Duration = Duration::from_secs(10);

async fn start(id: NodeId) -> (Transport, mpsc::Receiver<Inbound>) {
    start_with(TransportConfig::new(CLUSTER, id)).await
}

/// A transport on a loopback port of its own, and what it hands its node.
pub(super) async fn start_with(config: TransportConfig) -> (Transport, mpsc::Receiver<Inbound>) {
    let (tx, rx) = mpsc::channel(64);
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let t = Transport::bind(config, addr, tx).await.unwrap();
    (t, rx)
}

pub(super) fn heartbeat(from: NodeId, to: NodeId, round: u64) -> Message {
    Message {
        from,
        to,
        term: 1,
        body: MessageBody::Heartbeat {
            commit: 0,
            read_round: round,
            clock: Default::default(),
        },
    }
}

/// The next inbound item other than an announced peer address.
async fn next_inbound(rx: &mut mpsc::Receiver<Inbound>) -> Inbound {
    loop {
        match timeout(WAIT, rx.recv())
            .await
            .expect("in time")
            .expect("open")
        {
            Inbound::PeerAddress { .. } => {}
            other => return other,
        }
    }
}

async fn next_message(rx: &mut mpsc::Receiver<Inbound>) -> Message {
    match next_inbound(rx).await {
        Inbound::Message { message: m, .. } => m,
        other => panic!("unexpected {other:?}"),
    }
}

/// Waits until the peer closes the connection (read returns 0 or an error).
async fn closed_by_peer(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("closed in time")
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn two_transports_exchange_messages_in_order_with_their_groups() {
    let (a, mut a_rx) = start(1).await;
    let (b, mut b_rx) = start(2).await;
    a.set_peer(2, b.local_addr());
    b.set_peer(1, a.local_addr());
    // Each message arrives with the Raft group it was sent for.
    for round in 0..100 {
        a.send(round % 3, heartbeat(1, 2, round));
    }
    for round in 0..100 {
        match next_inbound(&mut b_rx).await {
            Inbound::Message { group, message } => {
                assert_eq!((group, message), (round % 3, heartbeat(1, 2, round)));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    b.send(0, heartbeat(2, 1, 7));
    assert_eq!(next_message(&mut a_rx).await, heartbeat(2, 1, 7));
    assert_eq!(a.dropped_messages(), 0);
}

/// A message connection announces the sender's listening address first, so a node that was
/// never told it (a member added through another node) can answer.
#[tokio::test]
async fn a_connection_announces_the_senders_address() {
    let (a, _a_rx) = start(1).await;
    let (b, mut b_rx) = start(2).await;
    a.set_peer(2, b.local_addr());
    a.send(0, heartbeat(1, 2, 0));
    match timeout(WAIT, b_rx.recv()).await.unwrap().unwrap() {
        Inbound::PeerAddress { from, addr } => {
            assert_eq!((from, addr), (1, a.local_addr()));
        }
        other => panic!("expected the address first, got {other:?}"),
    }
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 0));
}

#[tokio::test]
async fn snapshots_travel_on_their_own_connection_in_chunks() {
    let dir = std::env::temp_dir().join(format!("keel-transport-snap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let (a, _a_rx) = start(1).await;
    let (tx, mut b_rx) = mpsc::channel(64);
    let mut config = TransportConfig::new(CLUSTER, 2);
    config.snapshot_dir = Some(dst.clone());
    let b = Transport::bind(config, "127.0.0.1:0".parse().unwrap(), tx)
        .await
        .unwrap();
    a.set_peer(2, b.local_addr());
    let mut meta = keel_wal::bootstrap_meta([1, 2]);
    meta.last = keel_core::LogId::new(1, 5);
    meta.term_history = vec![keel_core::LogId::new(1, 1)];
    let data = vec![7u8; 3_000_000];
    let mut w = keel_wal::create_snapshot_file(&keel_wal::StdFs, &src, &meta).unwrap();
    std::io::Write::write_all(&mut w, &data).unwrap();
    let path = w.finish().unwrap();
    a.send_snapshot(0, 2, 5, meta.clone(), path.clone())
        .await
        .unwrap();
    match next_inbound(&mut b_rx).await {
        Inbound::Snapshot {
            group: 0,
            from,
            term,
            meta: m,
            path: received,
        } => {
            assert_eq!((from, term, m), (1, 5, meta));
            assert_eq!(
                std::fs::read(&received).unwrap(),
                std::fs::read(&path).unwrap()
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let sent = a.snapshot_counters().get();
    assert_eq!(sent.bytes_sent, std::fs::metadata(&path).unwrap().len());
    assert_eq!(b.snapshot_counters().get().receives_completed, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_full_queue_drops_instead_of_growing() {
    let (a, _rx) = start(1).await;
    // A peer address nobody listens on: the queue fills, then messages are dropped.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    a.set_peer(2, dead_addr);
    let n = TransportConfig::new(CLUSTER, 1).send_queue_messages_max as u64 + 100;
    for round in 0..n {
        a.send(0, heartbeat(1, 2, round));
    }
    assert!(a.dropped_messages() >= 100);
    a.send(0, heartbeat(1, 9, 0)); // unknown peer
    assert!(a.dropped_messages() >= 101);
}

#[tokio::test]
async fn wrong_cluster_id_is_refused() {
    let (b, mut b_rx) = start(2).await;
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    let mut buf = Vec::new();
    wire::encode_handshake(&Handshake::new(CLUSTER + 1, 1, Channel::Messages), &mut buf);
    wire::encode_message(0, &heartbeat(1, 2, 0), &mut buf);
    s.write_all(&buf).await.unwrap();
    closed_by_peer(&mut s).await;
    assert!(b_rx.try_recv().is_err(), "nothing delivered");
    assert_eq!(b.refused_connections(), 1);
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let (a, _a_rx) = start(1).await;
    let (b, mut b_rx) = start(2).await;
    // Garbage instead of a handshake, then a valid handshake followed by garbage, then a huge
    // length: each connection is closed, the listener keeps serving.
    for junk in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        {
            let mut v = Vec::new();
            wire::encode_handshake(&Handshake::new(CLUSTER, 1, Channel::Messages), &mut v);
            v.extend_from_slice(&[0xAB; 64]);
            v
        },
        {
            let mut v = Vec::new();
            wire::encode_handshake(&Handshake::new(CLUSTER, 1, Channel::Messages), &mut v);
            v.extend_from_slice(&u32::MAX.to_le_bytes());
            v.extend_from_slice(&[0; 4]);
            v
        },
    ] {
        let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
        s.write_all(&junk).await.unwrap();
        closed_by_peer(&mut s).await;
    }
    assert_eq!(b.refused_connections(), 3);
    a.set_peer(2, b.local_addr());
    a.send(0, heartbeat(1, 2, 42));
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 42));
}

fn heartbeat_response(from: NodeId, to: NodeId, round: u64) -> Message {
    Message {
        from,
        to,
        term: 1,
        body: MessageBody::HeartbeatResponse {
            read_round: round,
            lagging: false,
            clock: Default::default(),
        },
    }
}

/// S37: a member whose storage was replaced is not heard saying what it promised before (its
/// answers, votes, acknowledgements): its connection is refused at the first such message, and
/// it learns why (and logs it) instead of seeing only closed connections. What a leader sends
/// still passes, so a member that missed its removal can follow it once it was added back.
#[tokio::test]
async fn a_member_back_with_other_storage_is_not_heard_and_is_told_why() {
    let (b, mut b_rx) = start(2).await;
    b.configuration_changed(&ConfigurationChange {
        departed: Vec::new(),
        members: [1, 2].into_iter().collect(),
        history_skipped: false,
    });
    // Node 1, with storage `incarnation`, connecting to node 2.
    let node_1 = |incarnation| async move {
        let mut config = TransportConfig::new(CLUSTER, 1);
        config.incarnation = incarnation;
        let (tx, _rx) = mpsc::channel(64);
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        Transport::bind(config, addr, tx).await.unwrap()
    };
    let a = node_1(7).await;
    a.set_peer(2, b.local_addr());
    a.send(0, heartbeat_response(1, 2, 1));
    assert_eq!(next_message(&mut b_rx).await, heartbeat_response(1, 2, 1));
    assert_eq!(a.refusal_from(b.local_addr()), None);
    drop(a);

    // Node 1 again, with other storage: its heartbeat (it promises nothing) is heard...
    let a = node_1(8).await;
    a.set_peer(2, b.local_addr());
    a.send(0, heartbeat(1, 2, 2));
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 2));
    // ...its answers are not, and it is told why.
    let reason = timeout(WAIT, async {
        loop {
            a.send(0, heartbeat_response(1, 2, 3));
            if let Some(reason) = a.refusal_from(b.local_addr()) {
                break reason;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("told in time");
    assert!(reason.contains("other storage"), "{reason}");
    assert!(reason.contains("add it back"), "{reason}");
    assert!(b.refused_connections() >= 1);
    while let Ok(inbound) = b_rx.try_recv() {
        match inbound {
            Inbound::Message { message: m, .. } => assert!(
                !matches!(m.body, MessageBody::HeartbeatResponse { .. }),
                "an answer of the replaced storage was delivered: {m:?}"
            ),
            Inbound::PeerAddress { .. } => {}
            other => panic!("{other:?}"),
        }
    }

    // Once it left the configuration, its new storage is heard.
    b.configuration_changed(&ConfigurationChange {
        departed: vec![1],
        members: [2].into_iter().collect(),
        history_skipped: false,
    });
    drop(a);
    let a = node_1(8).await;
    a.set_peer(2, b.local_addr());
    a.send(0, heartbeat_response(1, 2, 4));
    assert_eq!(next_message(&mut b_rx).await, heartbeat_response(1, 2, 4));
}

#[tokio::test]
async fn reconnects_after_the_peer_restarts() {
    let (a, _a_rx) = start(1).await;
    let (b, b_rx) = start(2).await;
    let addr = b.local_addr();
    a.set_peer(2, addr);
    drop(b);
    drop(b_rx);
    // Restart on the same port (the OS may need a moment to release it).
    let (tx, mut b_rx) = mpsc::channel(64);
    let b2 = loop {
        match Transport::bind(TransportConfig::new(CLUSTER, 2), addr, tx.clone()).await {
            Ok(t) => break t,
            Err(_) => sleep(Duration::from_millis(20)).await,
        }
    };
    // Keep sending until one arrives: messages sent into the dead connection are lost.
    let got = timeout(WAIT, async {
        let mut round = 0;
        loop {
            a.send(0, heartbeat(1, 2, round));
            round += 1;
            tokio::select! {
                m = b_rx.recv() => if !matches!(m, Some(Inbound::PeerAddress { .. })) {
                    break m;
                },
                _ = sleep(Duration::from_millis(20)) => {}
            }
        }
    })
    .await
    .expect("reconnected in time");
    assert!(matches!(got, Some(Inbound::Message { .. })));
    drop(b2);
}

fn append(from: NodeId, to: NodeId, index: u64, payload_bytes: usize) -> Message {
    let payload: Vec<u8> = (0..payload_bytes).map(|i| (i % 253) as u8).collect();
    Message {
        from,
        to,
        term: 1,
        body: MessageBody::Append {
            prev: keel_core::LogId::new(1, index - 1),
            entries: vec![keel_core::Entry {
                term: 1,
                index,
                payload: keel_core::EntryPayload::Normal(Bytes::from(payload)),
            }],
            commit: 0,
        },
    }
}

/// An Append larger than the receiver's frame bound arrives in parts, and a heartbeat queued
/// behind it overtakes it (it goes out after the first part), while Appends keep their order.
#[tokio::test]
async fn a_large_append_travels_in_parts_and_heartbeats_overtake_it() {
    let (a, _a_rx) = start(1).await;
    let (b, mut b_rx) = start(2).await;
    let large = append(1, 2, 1, 20 << 20);
    assert!(large_body_exceeds_frame_bound(&large));
    let next = append(1, 2, 2, 100);
    // Queued before the connection exists (nothing runs until this test awaits): the sender
    // finds all three at once.
    a.set_peer(2, b.local_addr());
    a.send(0, large.clone());
    a.send(0, heartbeat(1, 2, 1));
    a.send(0, next.clone());
    a.send(0, heartbeat(1, 2, 2));
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 1));
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 2));
    assert_eq!(next_message(&mut b_rx).await, large);
    assert_eq!(next_message(&mut b_rx).await, next);
    assert_eq!(a.dropped_messages(), 0);
}

fn large_body_exceeds_frame_bound(msg: &Message) -> bool {
    let mut out = Vec::new();
    wire::encode_message(0, msg, &mut out);
    out.len() > FRAME_SIZE_BYTES_MAX_DEFAULT as usize
}

/// A message in parts longer than the receiver's message bound closes the connection on its
/// first part; nothing of it reaches the node, and later messages still arrive (reconnection).
#[tokio::test]
async fn a_message_above_the_receivers_bound_is_refused() {
    let (a, _a_rx) = start(1).await;
    let mut config = TransportConfig::new(CLUSTER, 2);
    config.message_size_bytes_max = 1 << 20;
    let (b, mut b_rx) = start_with(config).await;
    a.set_peer(2, b.local_addr());
    a.send(0, append(1, 2, 1, 2 << 20));
    let fits = append(1, 2, 1, 512 << 10);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        a.send(0, fits.clone());
        match timeout(Duration::from_millis(200), b_rx.recv()).await {
            Ok(Some(Inbound::Message { message: m, .. })) => {
                assert_eq!(m, fits, "only the message within the bound arrives");
                break;
            }
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => panic!("closed"),
        }
        assert!(tokio::time::Instant::now() < deadline, "nothing arrived");
    }
}

/// Connections that never finish their handshake (a port scanner, or someone holding
/// connections open) cannot keep a member out: beyond `handshakes_pending_max` the oldest is
/// closed, long before its handshake timeout, and a member's connection gets through.
#[tokio::test]
async fn idle_connections_cannot_crowd_out_a_member() {
    let mut config = TransportConfig::new(CLUSTER, 2);
    config.handshakes_pending_max = 4;
    config.handshake_timeout_ms = 60_000;
    let (b, mut b_rx) = start_with(config).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(b.local_addr()).await.unwrap());
    }
    let (a, _a_rx) = start(1).await;
    a.set_peer(2, b.local_addr());
    a.send(0, heartbeat(1, 2, 7));
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 7));
    // The member's connection took the oldest idle one's place.
    closed_by_peer(&mut idle[0]).await;
    assert!(b.refused_connections() >= 1);
    // More idle connections push out the others, never the member's finished handshake.
    for _ in 0..8 {
        idle.push(TcpStream::connect(b.local_addr()).await.unwrap());
    }
    for stream in &mut idle[1..4] {
        closed_by_peer(stream).await;
    }
    a.send(0, heartbeat(1, 2, 8));
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 8));
}

/// Beyond `inbound_connections_max` open connections a new one is closed at once.
#[tokio::test]
async fn open_connections_are_bounded() {
    let mut config = TransportConfig::new(CLUSTER, 2);
    config.inbound_connections_max = 3;
    config.handshake_timeout_ms = 60_000;
    let (b, _b_rx) = start_with(config).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(TcpStream::connect(b.local_addr()).await.unwrap());
    }
    let mut extra = TcpStream::connect(b.local_addr()).await.unwrap();
    closed_by_peer(&mut extra).await;
    assert!(b.refused_connections() >= 1);
}

/// A frame arriving a few bytes at a time is read whole (into spare capacity, the body never
/// zeroed first); one cut short in its body is an error, a stream ending between frames is not.
#[tokio::test]
async fn a_frame_is_read_whole_from_pieces_and_a_cut_one_is_an_error() {
    let msg = heartbeat(1, 2, 7);
    let mut frame = Vec::new();
    wire::encode_message(0, &msg, &mut frame);
    let (mut tx, mut rx) = tokio::io::duplex(3);
    let sent = frame.clone();
    let writer = tokio::spawn(async move {
        tx.write_all(&sent).await.unwrap();
        tx.write_all(&sent[..sent.len() - 1]).await.unwrap();
    });
    let max = 1 << 20;
    let body = read_frame(&mut rx, max).await.unwrap().expect("a frame");
    assert_eq!(
        body,
        wire::decode_body(Bytes::from(frame[FRAME_HEADER_SIZE_BYTES..].to_vec())).unwrap()
    );
    match read_frame(&mut rx, max).await {
        Err(TransportError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
        other => panic!("a frame cut short must be an error, got {other:?}"),
    }
    writer.await.unwrap();
    let (tx, mut rx) = tokio::io::duplex(3);
    drop(tx);
    assert!(
        read_frame(&mut rx, max).await.unwrap().is_none(),
        "a clean end"
    );
}
