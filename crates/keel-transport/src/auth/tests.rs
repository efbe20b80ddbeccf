//! Transports with a cluster secret: who is heard, who is refused before anything it says
//! reaches the node, and that frames after the handshake cannot be forged or replayed.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::wire::auth::{Initiator, SessionKeys, NONCE_BYTES};
use crate::*;

const CLUSTER: u64 = 0xC0FFEE;
/// Generous: these bound a hang, they are not latency assertions.
const WAIT: Duration = Duration::from_secs(10);

fn secret(fill: u8) -> ClusterSecret {
    ClusterSecret::new(&[fill; 40]).unwrap()
}

fn config(id: NodeId, secret: Option<ClusterSecret>) -> TransportConfig {
    let mut config = TransportConfig::new(CLUSTER, id);
    config.cluster_secret = secret;
    config
}

use crate::tests::{heartbeat, start_with as start};

async fn next_message(rx: &mut mpsc::Receiver<Inbound>) -> Message {
    loop {
        match timeout(WAIT, rx.recv()).await.expect("in time").unwrap() {
            Inbound::PeerAddress { .. } => {}
            Inbound::Message { message: m, .. } => return m,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn nodes_with_the_same_secret_talk_both_ways_and_learn_addresses() {
    let (a, mut a_rx) = start(config(1, Some(secret(7)))).await;
    let (b, mut b_rx) = start(config(2, Some(secret(7)))).await;
    a.set_peer(2, b.local_addr());
    b.set_peer(1, a.local_addr());
    for round in 0..300 {
        a.send(0, heartbeat(1, 2, round));
    }
    match timeout(WAIT, b_rx.recv()).await.unwrap().unwrap() {
        Inbound::PeerAddress { from, addr } => assert_eq!((from, addr), (1, a.local_addr())),
        other => panic!("expected the address first, got {other:?}"),
    }
    for round in 0..300 {
        assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, round));
    }
    b.send(0, heartbeat(2, 1, 9));
    assert_eq!(next_message(&mut a_rx).await, heartbeat(2, 1, 9));
    assert_eq!((a.refused_connections(), b.refused_connections()), (0, 0));
}

/// Waits until `a` has a refusal (or failed proof) noted for `b`.
async fn refusal(a: &Transport, b: &Transport, to: NodeId, from: NodeId) -> String {
    timeout(WAIT, async {
        loop {
            a.send(0, heartbeat(from, to, 0));
            if let Some(reason) = a.refusal_from(b.local_addr()) {
                break reason;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("refused in time")
}

#[tokio::test]
async fn another_secret_or_none_is_refused_before_the_node_hears_anything() {
    let (b, mut b_rx) = start(config(2, Some(secret(7)))).await;
    // Another secret: each side finds the other's proof wrong.
    let (a, _a_rx) = start(config(1, Some(secret(8)))).await;
    a.set_peer(2, b.local_addr());
    let reason = refusal(&a, &b, 2, 1).await;
    assert!(reason.contains("proof does not match"), "{reason}");
    // No secret: refused at the handshake, and told only that.
    let (c, _c_rx) = start(config(3, None)).await;
    c.set_peer(2, b.local_addr());
    let reason = refusal(&c, &b, 2, 3).await;
    assert_eq!(
        reason,
        "authentication failed: this node requires the cluster secret"
    );
    // A secret, to a node without one.
    let (d, mut d_rx) = start(config(4, None)).await;
    let (e, _e_rx) = start(config(5, Some(secret(7)))).await;
    e.set_peer(4, d.local_addr());
    let reason = refusal(&e, &d, 4, 5).await;
    assert_eq!(
        reason,
        "authentication failed: this node has no cluster secret"
    );

    assert!(b.refused_connections() >= 2);
    assert!(d.refused_connections() >= 1);
    // Not a message, not even an announced address, reached either node.
    sleep(Duration::from_millis(200)).await;
    assert!(b_rx.try_recv().is_err(), "node 2 heard nothing");
    assert!(d_rx.try_recv().is_err(), "node 4 heard nothing");
    assert!(b.client_addrs().get(3).is_none() && b.client_addrs().get(1).is_none());
}

/// A client that knows the secret, speaking the exchange by hand: the session keys, and the
/// connection after the handshake.
async fn authenticated_client(to: &Transport, s: &ClusterSecret) -> (SessionKeys, TcpStream) {
    let mut stream = TcpStream::connect(to.local_addr()).await.unwrap();
    let hello = Handshake::new(CLUSTER, 1, Channel::Messages);
    let initiator = Initiator::new(s.clone(), hello, [0x5A; NONCE_BYTES], 2);
    let mut buf = Vec::new();
    wire::encode_handshake_body(initiator.hello_body(), &mut buf);
    stream.write_all(&buf).await.unwrap();
    // Read frame by frame without a buffer: nothing after the challenge is consumed.
    let Some(Body::AuthChallenge(challenge)) = read_frame(&mut stream, 4096).await.unwrap() else {
        panic!("expected a challenge")
    };
    let (response, keys) = initiator.on_challenge(&challenge).unwrap();
    buf.clear();
    wire::encode_response(&response, &mut buf);
    stream.write_all(&buf).await.unwrap();
    (keys, stream)
}

/// One record holding a heartbeat frame, sealed with `keys`.
fn record(keys: &mut SessionKeys, round: u64) -> Vec<u8> {
    let mut frame = Vec::new();
    wire::encode_message(0, &heartbeat(1, 2, round), &mut frame);
    let mut out = Vec::new();
    keys.to_responder.seal_record(&frame, &mut out);
    out
}

#[tokio::test]
async fn a_replayed_or_tampered_record_closes_the_connection_unread() {
    let s = secret(7);
    let (b, mut b_rx) = start(config(2, Some(s.clone()))).await;

    // The genuine record is heard; the same record again (a replay) is refused.
    let (mut keys, mut stream) = authenticated_client(&b, &s).await;
    let first = record(&mut keys, 1);
    stream.write_all(&first).await.unwrap();
    assert_eq!(next_message(&mut b_rx).await, heartbeat(1, 2, 1));
    stream.write_all(&first).await.unwrap();
    stream.write_all(&record(&mut keys, 2)).await.unwrap();
    closed(&mut stream).await;
    assert_eq!(b.refused_connections(), 1);

    // A record with one payload bit flipped (its CRC fixed up would not help: the tag covers it).
    let (mut keys, mut stream) = authenticated_client(&b, &s).await;
    let mut tampered = record(&mut keys, 3);
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    stream.write_all(&tampered).await.unwrap();
    closed(&mut stream).await;
    assert_eq!(b.refused_connections(), 2);

    // Frames without a record around them, after a valid exchange (enough of them to fill the
    // record their first bytes would announce; until then the reader waits, like for any
    // record not yet complete).
    let (_, mut stream) = authenticated_client(&b, &s).await;
    let mut plain = Vec::new();
    for round in 4..10 {
        wire::encode_message(0, &heartbeat(1, 2, round), &mut plain);
    }
    stream.write_all(&plain).await.unwrap();
    closed(&mut stream).await;
    assert_eq!(b.refused_connections(), 3);

    sleep(Duration::from_millis(200)).await;
    assert!(
        matches!(b_rx.try_recv(), Err(_) | Ok(Inbound::PeerAddress { .. })),
        "nothing but the genuine heartbeat delivered"
    );
}

#[tokio::test]
async fn crafted_connections_without_the_secret_are_refused_and_told_nothing() {
    let (b, mut b_rx) = start(config(2, Some(secret(7)))).await;
    // A plain handshake followed by a message: refused at the handshake.
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    let mut buf = Vec::new();
    wire::encode_handshake(&Handshake::new(CLUSTER, 1, Channel::Messages), &mut buf);
    wire::encode_message(0, &heartbeat(1, 2, 0), &mut buf);
    s.write_all(&buf).await.unwrap();
    let told = read_frame(&mut s, 4096).await.unwrap();
    let Some(Body::Refusal(reason)) = told else {
        panic!("expected a refusal, got {told:?}")
    };
    assert!(reason.starts_with("authentication failed"), "{reason}");
    // No cluster id, no node id: no number at all.
    assert!(!reason.contains(|c: char| c.is_ascii_digit()), "{reason}");
    // An authenticated handshake, then a message instead of the proof.
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    let initiator = Initiator::new(
        secret(9),
        Handshake::new(CLUSTER, 1, Channel::Messages),
        [1; NONCE_BYTES],
        2,
    );
    buf.clear();
    wire::encode_handshake_body(initiator.hello_body(), &mut buf);
    wire::encode_message(0, &heartbeat(1, 2, 0), &mut buf);
    s.write_all(&buf).await.unwrap();
    assert!(matches!(
        read_frame(&mut s, 4096).await.unwrap(),
        Some(Body::AuthChallenge(_))
    ));
    assert_eq!(
        read_frame(&mut s, 4096).await.unwrap(),
        Some(Body::Refusal(
            "authentication failed: this node requires the cluster secret".into()
        ))
    );
    assert_eq!(b.refused_connections(), 2);
    assert!(b_rx.try_recv().is_err(), "nothing delivered");
}

#[tokio::test]
async fn a_wrong_cluster_id_is_not_told_the_real_one() {
    for secret in [None, Some(secret(7))] {
        let (b, _b_rx) = start(config(2, secret.clone())).await;
        let mut other = config(1, secret);
        other.cluster_id = CLUSTER + 1;
        let (a, _a_rx) = start(other).await;
        a.set_peer(2, b.local_addr());
        let reason = refusal(&a, &b, 2, 1).await;
        assert!(reason.contains(&format!("{:#x}", CLUSTER + 1)), "{reason}");
        assert!(!reason.contains(&format!("{CLUSTER:#x}")), "{reason}");
    }
}

#[tokio::test]
async fn a_snapshot_travels_sealed() {
    let dir = std::env::temp_dir().join(format!("keel-auth-snap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let (a, _a_rx) = start(config(1, Some(secret(7)))).await;
    let mut receiving = config(2, Some(secret(7)));
    receiving.snapshot_dir = Some(dst.clone());
    let (b, mut b_rx) = start(receiving).await;
    a.set_peer(2, b.local_addr());
    let mut meta = keel_wal::bootstrap_meta([1, 2]);
    meta.last = keel_core::LogId::new(1, 5);
    meta.term_history = vec![keel_core::LogId::new(1, 1)];
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut w = keel_wal::create_snapshot_file(&keel_wal::StdFs, &src, &meta).unwrap();
    std::io::Write::write_all(&mut w, &data).unwrap();
    let path = w.finish().unwrap();
    a.send_snapshot(0, 2, 5, meta.clone(), path.clone())
        .await
        .unwrap();
    let inbound = loop {
        match timeout(WAIT, b_rx.recv()).await.unwrap().unwrap() {
            Inbound::PeerAddress { .. } => {} // node 1's message connection
            other => break other,
        }
    };
    match inbound {
        Inbound::Snapshot {
            from,
            meta: m,
            path: received,
            ..
        } => {
            assert_eq!((from, m), (1, meta.clone()));
            assert_eq!(
                std::fs::read(&received).unwrap(),
                std::fs::read(&path).unwrap()
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // To a node with another secret it does not go at all.
    let (c, _c_rx) = start(config(3, Some(secret(8)))).await;
    a.set_peer(3, c.local_addr());
    let sent = a.send_snapshot(0, 3, 5, meta, path).await;
    assert!(
        matches!(sent, Err(TransportError::Auth(AuthError::BadProof))),
        "{sent:?}"
    );
    assert_eq!(c.snapshot_counters().get().bytes_received, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits until the peer closes the connection (read returns 0 or an error).
async fn closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 256];
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

#[test]
fn a_secret_file_loses_one_trailing_newline_and_must_hold_32_bytes() {
    let dir = std::env::temp_dir().join(format!("keel-secret-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        path
    };
    let key = [b'k'; 32];
    let lf = load_cluster_secret(&write("lf", &[&key[..], b"\n"].concat())).unwrap();
    let crlf = load_cluster_secret(&write("crlf", &[&key[..], b"\r\n"].concat())).unwrap();
    let bare = load_cluster_secret(&write("bare", &key)).unwrap();
    // The same secret either way: proofs made with one check under the others.
    for (a, b) in [(&lf, &bare), (&crlf, &bare)] {
        let i = Initiator::new(
            a.clone(),
            Handshake::new(CLUSTER, 1, Channel::Messages),
            [1; NONCE_BYTES],
            2,
        );
        let h = match wire::decode_body(Bytes::copy_from_slice(i.hello_body())).unwrap() {
            Body::Handshake(h) => h,
            other => panic!("{other:?}"),
        };
        let r =
            wire::auth::Responder::new(b.clone(), &h, i.hello_body(), 2, [2; NONCE_BYTES]).unwrap();
        assert!(i.on_challenge(r.challenge()).is_ok());
    }
    // 31 bytes and a newline is too short; so is a missing file.
    let short = load_cluster_secret(&write("short", &[&key[..31], b"\n"].concat())).unwrap_err();
    assert!(short.contains("at least 32"), "{short}");
    assert!(load_cluster_secret(&dir.join("missing")).is_err());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let open = write("open", &key);
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o604)).unwrap();
        let e = load_cluster_secret(&open).unwrap_err();
        assert!(e.contains("other users"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
