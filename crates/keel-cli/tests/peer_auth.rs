//! Peer authentication end to end (issue 17): a three-node `keel serve` cluster with
//! `--cluster-secret-file` serves writes through every node, while crafted peer connections
//! without the secret (frames built with `keel_transport::wire`'s encoder) are refused at the
//! handshake, told nothing about the cluster, and change nothing.

mod process;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use keel_core::{Message, MessageBody};
use keel_transport::wire::{self, auth, Body, Channel, ClusterSecret, Handshake};
use process::{get, set, Cluster};

/// The cluster id `keel serve` uses by default ("keel").
const DEFAULT_CLUSTER_ID: u64 = 0x6b65_656c;

fn write_secret(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// Frames decoded from `bytes` (whole frames only).
fn frames(bytes: &[u8]) -> Vec<Body> {
    let mut buf = Bytes::copy_from_slice(bytes);
    let mut out = Vec::new();
    while let Some((body, used)) = wire::decode_frame(&buf, 1 << 16).unwrap() {
        out.push(body);
        buf = buf.slice(used..);
    }
    out
}

/// Reads until the peer closes (or 10 s pass).
fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads one whole frame.
fn read_one(stream: &mut TcpStream) -> Body {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 1];
    loop {
        if let Some(body) = frames(&got).into_iter().next() {
            return body;
        }
        let n = stream.read(&mut chunk).expect("a frame in time");
        assert!(n > 0, "closed before a whole frame");
        got.extend_from_slice(&chunk[..n]);
    }
}

fn heartbeat(from: u64, to: u64, term: u64) -> Message {
    Message {
        from,
        to,
        term,
        body: MessageBody::Heartbeat {
            commit: 0,
            read_round: 0,
            clock: Default::default(),
        },
    }
}

/// The refusal a connection got, checked to say nothing about the cluster.
fn refusal_of(bytes: &[u8]) -> String {
    let bodies = frames(bytes);
    let Some(Body::Refusal(reason)) = bodies.last() else {
        panic!("expected a refusal, got {bodies:?}")
    };
    assert!(reason.starts_with("authentication failed"), "{reason}");
    assert!(
        !reason.contains(|c: char| c.is_ascii_digit()),
        "no cluster id or node id in {reason:?}"
    );
    reason.clone()
}

#[test]
#[expect(clippy::too_many_lines)]
fn a_cluster_with_a_secret_serves_and_refuses_peers_without_it() {
    let mut cluster = Cluster::stopped("peer-auth", &[1, 2, 3], &[], &[]);
    let secret_file = cluster.dir.path().join("cluster-secret");
    // As docs/operating.md ("Peer authentication") says to make one: random bytes, base64, one
    // trailing newline.
    write_secret(
        &secret_file,
        "q6Yw0m8C1oY0kQ4n2S7b3U1c9Zx5Lr8Vt2Hg6Jd4Pa0Fe3Ks=\n",
    );
    for id in 1..=3 {
        let node = cluster.node_mut(id);
        node.set_arg("--cluster-secret-file", &secret_file.display().to_string());
        node.spawn();
    }
    let leader = cluster.leader();
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for &id in &followers {
        set(cluster.node(id), &format!("via-{id}"), "written");
    }
    for id in 1..=3 {
        for &via in &followers {
            let key = format!("via-{via}");
            assert_eq!(get(cluster.node(id), &key).as_deref(), Some("written"));
        }
    }
    let terms: Vec<u64> = (1..=3)
        .map(|id| cluster.node(id).info_u64("term").unwrap())
        .collect();

    // Without the secret: a plain handshake claiming to be the leader, then heartbeats of a
    // later and of an absurd term, to each follower. Refused at the handshake.
    for &to in &followers {
        let mut frames_out = Vec::new();
        let hello = Handshake::new(DEFAULT_CLUSTER_ID, leader, Channel::Messages);
        wire::encode_handshake(&hello, &mut frames_out);
        for term in [terms[0] + 100, u64::MAX / 2] {
            wire::encode_message(0, &heartbeat(leader, to, term), &mut frames_out);
        }
        let mut stream = TcpStream::connect(cluster.node(to).peer_addr()).unwrap();
        let _ = stream.write_all(&frames_out); // the node may close before reading it all
        let reason = refusal_of(&read_to_close(&mut stream));
        assert_eq!(
            reason,
            "authentication failed: this node requires the cluster secret"
        );
    }
    // With another secret: the node's challenge arrives, its proof does not check out under
    // the wrong secret, and neither a made-up proof nor the node's own (reflected) passes.
    let wrong = ClusterSecret::new(b"not the secret of this cluster, but long enough").unwrap();
    for reflect in [false, true] {
        let to = followers[0];
        let hello = Handshake::new(DEFAULT_CLUSTER_ID, leader, Channel::Messages);
        let initiator = auth::Initiator::new(wrong.clone(), hello, [7; auth::NONCE_BYTES], to);
        let mut out = Vec::new();
        wire::encode_handshake_body(initiator.hello_body(), &mut out);
        let mut stream = TcpStream::connect(cluster.node(to).peer_addr()).unwrap();
        stream.write_all(&out).unwrap();
        let Body::AuthChallenge(challenge) = read_one(&mut stream) else {
            panic!("expected a challenge")
        };
        assert_eq!(challenge.responder, to);
        assert!(initiator.on_challenge(&challenge).is_err(), "wrong secret");
        let proof = if reflect {
            challenge.proof
        } else {
            [0x55; auth::PROOF_BYTES]
        };
        out.clear();
        wire::encode_response(&wire::Response { proof }, &mut out);
        wire::encode_message(0, &heartbeat(leader, to, terms[0] + 100), &mut out);
        let _ = stream.write_all(&out);
        assert_eq!(
            refusal_of(&read_to_close(&mut stream)),
            "authentication failed"
        );
    }

    // Nothing changed: same terms, same leader, and the cluster keeps committing.
    std::thread::sleep(Duration::from_millis(500));
    for id in 1..=3 {
        assert_eq!(
            cluster.node(id).info_u64("term").unwrap(),
            terms[id as usize - 1],
            "node {id}'s term"
        );
    }
    assert_eq!(cluster.leader(), leader);
    set(cluster.node(followers[1]), "after", "still committing");
    assert_eq!(
        get(cluster.node(leader), "after").as_deref(),
        Some("still committing")
    );
    for id in 1..=3 {
        let log = std::fs::read_to_string(&cluster.node(id).log).unwrap();
        assert!(!log.contains("peers are not authenticated"), "node {id}");
    }
}

/// Runs `keel serve` with `secret_file` and returns its stderr (it must fail).
fn serve_fails_with(args: &[String], secret_file: &Path) -> String {
    let mut args = args.to_vec();
    args.extend([
        "--cluster-secret-file".into(),
        secret_file.display().to_string(),
    ]);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(&args)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(!output.status.success(), "keel serve started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_short_or_world_readable_secret_file_is_refused_at_startup() {
    let cluster = Cluster::stopped("peer-auth-bad-file", &[1], &[], &[]);
    let args = cluster.node(1).args.clone();
    let short = cluster.dir.path().join("short");
    write_secret(&short, "only-twenty-bytes!!!\n");
    let stderr = serve_fails_with(&args, &short);
    assert!(stderr.contains("--cluster-secret-file"), "{stderr}");
    assert!(stderr.contains("at least 32"), "{stderr}");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let open = cluster.dir.path().join("open");
        write_secret(&open, &"x".repeat(40));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let stderr = serve_fails_with(&args, &open);
        assert!(stderr.contains("chmod 600"), "{stderr}");
    }
}
