use bytes::{Bytes, BytesMut};

use super::*;

mod busy;
mod clients;
mod collections;
mod hello_auth;
mod introspection;
mod monitor;
mod pubsub;
mod transactions;

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

struct FakeNode(NodeReport);

impl NodeInfo for FakeNode {
    fn status(&self) -> NodeReport {
        self.0.clone()
    }
}

fn node() -> FakeNode {
    FakeNode(NodeReport {
        node_id: 2,
        role: "follower".into(),
        term: 7,
        leader_id: Some(1),
        commit_index: 100,
        applied_index: 99,
        snapshot_index: 64,
        first_log_index: 65,
        last_log_index: 101,
        members: vec![
            MemberInfo {
                id: 1,
                peer_addr: "127.0.0.1:7001".into(),
                client_addr: "127.0.0.1:6001".into(),
                voter: true,
            },
            MemberInfo {
                id: 2,
                peer_addr: "127.0.0.1:7002".into(),
                client_addr: String::new(),
                voter: true,
            },
            MemberInfo {
                id: 4,
                peer_addr: "127.0.0.1:7004".into(),
                client_addr: "node4.example:6379".into(),
                voter: false,
            },
        ],
        state_digest: 0xdead_beef,
        log_time_ms: 1_700_000_000_123,
        clock_offset_ms: Some(-612),
        campaigns_held: true,
        heartbeat_gap_max_ms: 41,
        clock_outlier: false,
        recovering_to: Some(150),
        follower_clock_offsets: Vec::new(),
        keys: 3,
        expires: 1,
        connected_clients: 1,
        maxclients: 10_000,
        client_query_buffers_bytes: 16_384,
        used_memory: 1_572_864,
        used_memory_rss: 10_485_760,
        maxmemory: 104_857_600,
        ..NodeReport::default()
    })
}

fn conn() -> ClientConnection {
    ClientConnection::new(9, "127.0.0.1:5555", Limits::default())
}

fn run(conn: &mut ClientConnection, line: &str) -> Dispatch {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    conn.dispatch(&args, &node())
}

fn reply(conn: &mut ClientConnection, line: &str) -> Reply {
    match run(conn, line) {
        Dispatch::Reply(reply) => reply,
        other => panic!("{line}: {other:?}"),
    }
}

fn wire(conn: &ClientConnection, reply: &Reply) -> Vec<u8> {
    let mut out = BytesMut::new();
    conn.encode(reply, &mut out);
    out.to_vec()
}

fn map_get<'a>(reply: &'a Reply, key: &str) -> Option<&'a Reply> {
    let Reply::Map(pairs) = reply else {
        panic!("not a map: {reply:?}")
    };
    pairs.iter().find_map(|(k, v)| match k {
        Reply::Simple(s) if s == key => Some(v),
        Reply::Bulk(b) if b == key.as_bytes() => Some(v),
        _ => None,
    })
}

/// A connection's record as the server makes it, at `10.0.0.1:<id>`.
fn record(id: u64) -> std::sync::Arc<super::ClientRecord> {
    let addr = format!("10.0.0.1:{id}");
    std::sync::Arc::new(super::ClientRecord::new(id, addr, String::new(), 3))
}

#[test]
fn data_commands_are_handed_back() {
    let mut c = conn();
    assert!(matches!(run(&mut c, "SET k v"), Dispatch::Write(_)));
    assert!(matches!(run(&mut c, "GET k"), Dispatch::Read(_)));
    assert!(matches!(run(&mut c, "RAFT.SNAPSHOT"), Dispatch::Admin(_)));
    assert_eq!(run(&mut c, "QUIT"), Dispatch::ReplyAndClose(Reply::OK));
    assert_eq!(reply(&mut c, "PING"), Reply::PONG);
    assert_eq!(reply(&mut c, "PING hi"), Reply::text("hi"));
    assert_eq!(reply(&mut c, "ECHO hi"), Reply::text("hi"));
    assert_eq!(reply(&mut c, "SELECT 0"), Reply::OK);
    assert_eq!(
        reply(&mut c, "GET"),
        Reply::error("ERR wrong number of arguments for 'get' command")
    );
}
