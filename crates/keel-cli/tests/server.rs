//! Three `keel serve` processes on loopback, spoken to over RESP: election, writes on the leader
//! and on followers, convergence of `state_digest`, kill -9 of the leader, restart and catch-up.
//!
//! Every wait is a retry loop with a generous deadline; nothing asserts a latency.
//!
//! Each node's stdout and stderr go to `node-<id>.log` in the cluster's directory, with role and
//! term changes logged (`--log-level`); when a test fails, the directory is kept and its path
//! printed, with each running node's `RAFT.STATUS`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::BytesMut;
use keel_resp::Reply;
use keel_resp::{encode_request, parse_reply, Limits};

mod process;

use process::{eventually, free_port, raw_get as get, raw_request as request, raw_set as set};

struct Cluster {
    nodes: Vec<NodeProcess>,
    root: PathBuf,
}

struct NodeProcess {
    id: u64,
    client_port: u16,
    args: Vec<String>,
    /// Where the process's stdout and stderr go (appended to across restarts).
    log: PathBuf,
    child: Option<Child>,
}

/// The node logs' filter: elections step by step (role and term changes), peer connections.
const LOG_LEVEL: &str = "keel_runtime=debug,keel_transport=debug,info";

impl NodeProcess {
    fn spawn(&mut self) {
        if let Some(dir) = self.log.parent() {
            std::fs::create_dir_all(dir).expect("create the cluster directory");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the node log");
        let child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(&self.args)
            .args(["--log-level", LOG_LEVEL])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("clone the log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start keel serve");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
    }

    /// `RAFT.STATUS` as key/value pairs.
    fn status(&self) -> Option<Vec<(String, String)>> {
        match request(self.client_port, &["RAFT.STATUS"]).ok()? {
            Reply::Bulk(text) => Some(
                String::from_utf8_lossy(&text)
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            _ => None,
        }
    }

    fn field(&self, key: &str) -> Option<String> {
        self.status()?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            for node in self.nodes.iter().filter(|n| n.child.is_some()) {
                eprintln!("node {} RAFT.STATUS: {:?}", node.id, node.status());
            }
        }
        for node in &mut self.nodes {
            node.kill();
        }
        if failed {
            eprintln!(
                "kept the cluster's data and logs (node-<id>.log) in {}",
                self.root.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

impl Cluster {
    fn start() -> Cluster {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root = std::env::temp_dir().join(format!("keel-server-{}-{nanos}", std::process::id()));
        let ids = [1u64, 2, 3];
        let client_ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
        let peer_ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
        let list = |ports: &[u16]| {
            ids.iter()
                .zip(ports)
                .map(|(id, port)| format!("{id}=127.0.0.1:{port}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let initial_cluster = list(&peer_ports);
        let client_peers = list(&client_ports);
        let mut nodes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let args = vec![
                "serve".to_string(),
                "--id".into(),
                id.to_string(),
                "--data-dir".into(),
                root.join(format!("node-{id}")).display().to_string(),
                "--client-addr".into(),
                format!("127.0.0.1:{}", client_ports[i]),
                "--peer-addr".into(),
                format!("127.0.0.1:{}", peer_ports[i]),
                "--initial-cluster".into(),
                initial_cluster.clone(),
                "--client-peers".into(),
                client_peers.clone(),
                "--snapshot-threshold".into(),
                "64".into(),
            ];
            nodes.push(NodeProcess {
                id,
                client_port: client_ports[i],
                args,
                log: root.join(format!("node-{id}.log")),
                child: None,
            });
        }
        let mut cluster = Cluster { nodes, root };
        for node in &mut cluster.nodes {
            node.spawn();
        }
        cluster
    }

    /// The index of a running node that reports itself leader.
    fn leader(&self) -> usize {
        eventually("a leader", || {
            self.nodes
                .iter()
                .position(|n| n.child.is_some() && n.field("role").as_deref() == Some("leader"))
        })
    }

    /// Every running node at the same applied index with the same digest, and at least `applied`.
    fn converged(&self, applied: u64) -> (u64, String) {
        eventually("convergence", || {
            let views: Vec<(u64, String)> = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| {
                    Some((
                        n.field("applied_index")?.parse().ok()?,
                        n.field("state_digest")?,
                    ))
                })
                .collect::<Option<_>>()?;
            let first = views[0].clone();
            (first.0 >= applied && views.iter().all(|v| *v == first)).then_some(first)
        })
    }
}

#[test]
fn three_processes_elect_replicate_survive_kill_and_catch_up() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader();
    let leader_port = cluster.nodes[leader].client_port;

    set(leader_port, "a", "1");
    assert_eq!(get(leader_port, "a"), Reply::bulk("1"));

    // A follower forwards to the leader (or, if it cannot, says who leads).
    let follower = (leader + 1) % 3;
    let follower_port = cluster.nodes[follower].client_port;
    // The follower may still be starting (its client port not yet open): connection errors retry.
    let reply = eventually("the follower's answer to SET", || {
        request(follower_port, &["SET", "b", "2"]).ok()
    });
    match reply {
        Reply::Simple(s) if s == "OK" => {}
        Reply::Error(e) if e.starts_with("TRYAGAIN") => set(leader_port, "b", "2"),
        other => panic!("SET on a follower: {other:?}"),
    }
    assert_eq!(get(follower_port, "b"), Reply::bulk("2"));
    for i in 0..100 {
        set(follower_port, &format!("k{i}"), &i.to_string());
    }
    let (applied, digest) = cluster.converged(0);
    assert_ne!(digest, "0000000000000000");

    // kill -9 the leader: the others elect a new one and take writes.
    let old = cluster.nodes[leader].id;
    cluster.nodes[leader].kill();
    let new_leader = cluster.leader();
    assert_ne!(cluster.nodes[new_leader].id, old);
    let new_port = cluster.nodes[new_leader].client_port;
    set(new_port, "c", "3");
    assert_eq!(get(new_port, "a"), Reply::bulk("1"));
    assert_eq!(get(new_port, "c"), Reply::bulk("3"));

    // The old leader restarts and catches up to the same digest at the same applied index.
    cluster.nodes[leader].spawn();
    let (applied_after, digest_after) = cluster.converged(applied + 1);
    assert!(applied_after > applied);
    assert_ne!(digest_after, digest);
    let restarted_port = cluster.nodes[leader].client_port;
    assert_eq!(get(restarted_port, "c"), Reply::bulk("3"));
    assert_eq!(get(restarted_port, "k99"), Reply::bulk("99"));
}

/// Sends raw bytes and reads replies until `count` arrived or the server closed.
fn exchange(port: u16, send: &[u8], count: usize) -> Vec<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    stream.write_all(send).unwrap();
    let mut input = Vec::new();
    let mut replies = Vec::new();
    let mut chunk = [0u8; 4096];
    while replies.len() < count {
        while let Some((reply, used)) = parse_reply(&input, &Limits::default()).unwrap() {
            input.drain(..used);
            replies.push(reply);
        }
        if replies.len() == count {
            break;
        }
        let n = stream.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        input.extend_from_slice(&chunk[..n]);
    }
    replies
}

#[test]
#[expect(clippy::too_many_lines)]
fn one_node_pipelines_in_order_and_survives_bad_input() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = std::env::temp_dir().join(format!("keel-server1-{}-{nanos}", std::process::id()));
    let (client_port, peer_port) = (free_port(), free_port());
    let mut node = NodeProcess {
        id: 1,
        client_port,
        args: vec![
            "serve".into(),
            "--id".into(),
            "1".into(),
            "--data-dir".into(),
            root.join("node-1").display().to_string(),
            "--client-addr".into(),
            format!("127.0.0.1:{client_port}"),
            "--initial-cluster".into(),
            format!("1=127.0.0.1:{peer_port}"),
        ],
        log: root.join("node-1.log"),
        child: None,
    };
    node.spawn();
    let cluster = Cluster {
        nodes: vec![node],
        root,
    };
    cluster.leader();
    set(client_port, "x", "0");

    // Pipelined: replies in request order.
    let mut pipeline = BytesMut::new();
    encode_request(&["INCR", "x"], &mut pipeline);
    encode_request(&["GET", "x"], &mut pipeline);
    encode_request(&["INCRBY", "x", "10"], &mut pipeline);
    encode_request(&["GET", "missing"], &mut pipeline);
    encode_request(&["CAS", "x", "11", "done"], &mut pipeline);
    encode_request(&["GET", "x"], &mut pipeline);
    let replies = exchange(client_port, &pipeline, 6);
    assert_eq!(
        replies,
        vec![
            Reply::Integer(1),
            Reply::bulk("1"),
            Reply::Integer(11),
            Reply::Null,
            Reply::Integer(1),
            Reply::bulk("done"),
        ]
    );

    // RESP3 after HELLO 3.
    let mut hello = BytesMut::new();
    encode_request(&["HELLO", "3"], &mut hello);
    encode_request(&["GET", "missing"], &mut hello);
    let replies = exchange(client_port, &hello, 2);
    assert!(matches!(replies[0], Reply::Map(_)), "{replies:?}");
    assert_eq!(replies[1], Reply::Null);

    // Malformed input: an error, then that connection (only) is closed.
    let replies = exchange(client_port, b"*2\r\n$3\r\nGET\r\n$-5\r\n", 2);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(matches!(&replies[0], Reply::Error(e) if e.starts_with("ERR Protocol error")));
    let replies = exchange(client_port, b"*1\r\n$99999999999\r\n", 2);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(get(client_port, "x"), Reply::bulk("done"));

    // Admin: a snapshot, and INFO's fields.
    assert!(matches!(
        request(client_port, &["RAFT.SNAPSHOT"]).unwrap(),
        Reply::Integer(i) if i > 0
    ));
    let status = cluster.nodes[0].status().unwrap();
    for key in [
        "node_id",
        "role",
        "term",
        "leader_id",
        "commit_index",
        "applied_index",
        "snapshot_index",
        "first_log_index",
        "last_log_index",
        "members",
        "state_digest",
        "log_time_ms",
    ] {
        assert!(status.iter().any(|(k, _)| k == key), "{key}: {status:?}");
    }
    let Reply::Bulk(info) = request(client_port, &["INFO"]).unwrap() else {
        panic!("INFO");
    };
    assert!(String::from_utf8_lossy(&info).contains("role:leader"));
}
