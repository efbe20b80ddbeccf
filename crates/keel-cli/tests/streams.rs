//! The stream commands over a socket, answered exactly as redis-server 7.0 answers the same
//! script, in RESP2 and in RESP3 (XREAD's and XREADGROUP's streams are a map in RESP3, XINFO's
//! records too). The script names its IDs and reads no idle or delivery times: keel takes those
//! from the log's time, redis-server from its clock.
//!
//! Then XREAD and XREADGROUP with BLOCK in a three-node cluster of `keel serve` processes: on
//! the leader and on a follower, in RESP2 and RESP3, `$`, `>` with consumers getting disjoint
//! entries, timeouts, a client that leaves consuming nothing, and Redis's errors for a stream
//! or group that went away while a client waited.

mod process;
mod support;

use std::time::Duration;

use bytes::BytesMut;
use keel_resp::{parse_reply, Limits, Reply};
use support::{RedisServer, ServerOptions, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `commands` as RESP arrays and collects one reply each.
async fn exchange(stream: &mut TcpStream, commands: &[&[&str]]) -> Vec<Reply> {
    let mut out = Vec::new();
    for command in commands {
        out.extend_from_slice(format!("*{}\r\n", command.len()).as_bytes());
        for arg in *command {
            out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
    }
    stream.write_all(&out).await.unwrap();
    let (mut input, mut replies) = (BytesMut::new(), Vec::new());
    while replies.len() < commands.len() {
        while let Some((reply, used)) = parse_reply(&input, &Limits::default()).unwrap() {
            let _ = input.split_to(used);
            replies.push(reply);
        }
        if replies.len() == commands.len() {
            break;
        }
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_buf(&mut input))
            .await
            .expect("reply in time")
            .unwrap();
        assert!(read > 0, "closed after {} replies", replies.len());
    }
    replies
}

const SCRIPT: &[&[&str]] = &[
    &["XADD", "s", "1-1", "a", "1"],
    &["XADD", "s", "1-*", "b", "2"],
    &["XADD", "s", "5", "c", "3", "d", "4"],
    &["XADD", "s", "5-0", "x", "y"],
    &["XADD", "s", "0-0", "x", "y"],
    &["XADD", "s", "bad", "x", "y"],
    &["XADD", "s", "*", "x"],
    &["XADD", "nos", "NOMKSTREAM", "9-0", "x", "y"],
    &["EXISTS", "nos"],
    &[
        "XADD", "s", "MAXLEN", "=", "3", "LIMIT", "2", "9-0", "x", "y",
    ],
    &["XADD", "s", "MINID", "~", "2", "10-0", "e", "5"],
    &["XLEN", "s"],
    &["XRANGE", "s", "-", "+"],
    &["XRANGE", "s", "(5-0", "+", "COUNT", "1"],
    &["XREVRANGE", "s", "+", "-", "COUNT", "2"],
    &["XRANGE", "s", "-", "+", "COUNT", "0"],
    &["XRANGE", "nokey", "-", "+"],
    &["XTRIM", "s", "MAXLEN", "10"],
    &["XTRIM", "s"],
    &["XDEL", "s", "1-2", "99-0"],
    &["XSETID", "s", "1-0"],
    &[
        "XSETID",
        "s",
        "20-0",
        "ENTRIESADDED",
        "9",
        "MAXDELETEDID",
        "3-0",
    ],
    &["XINFO", "STREAM", "s"],
    &["TYPE", "s"],
    &["OBJECT", "ENCODING", "s"],
    &["XGROUP", "CREATE", "s", "g", "0"],
    &["XGROUP", "CREATE", "s", "g", "0"],
    &["XGROUP", "CREATE", "nokey", "g", "$"],
    &["XGROUP", "CREATE", "mk", "g", "$", "MKSTREAM"],
    &["XGROUP", "CREATECONSUMER", "s", "g", "zed"],
    &[
        "XREADGROUP",
        "GROUP",
        "g",
        "alice",
        "COUNT",
        "1",
        "STREAMS",
        "s",
        ">",
    ],
    &[
        "XREADGROUP",
        "GROUP",
        "g",
        "bob",
        "STREAMS",
        "s",
        "mk",
        ">",
        ">",
    ],
    &["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"],
    &["XREADGROUP", "GROUP", "nog", "alice", "STREAMS", "s", ">"],
    &["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "$"],
    &["XPENDING", "s", "g"],
    &["XACK", "s", "g", "1-1", "77-0"],
    &["XCLAIM", "s", "g", "carol", "0", "5-0", "JUSTID"],
    &["XCLAIM", "s", "g", "carol", "0", "9-0"],
    &["XDEL", "s", "9-0"],
    &["XAUTOCLAIM", "s", "g", "dave", "0", "0", "COUNT", "10"],
    &["XAUTOCLAIM", "s", "g", "dave", "0", "0", "COUNT", "0"],
    &["XGROUP", "DELCONSUMER", "s", "g", "dave"],
    &["XINFO", "GROUPS", "s"],
    &["XGROUP", "SETID", "s", "g", "$", "ENTRIESREAD", "2"],
    &["XINFO", "GROUPS", "s"],
    &["XGROUP", "DESTROY", "s", "g"],
    &["XREAD", "COUNT", "2", "STREAMS", "s", "mk", "0", "0"],
    &["XREAD", "STREAMS", "s", "$"],
    &["XREAD", "STREAMS", "s", ">"],
    &["XREAD", "STREAMS", "s"],
    &["XINFO", "STREAM", "nokey"],
    &["XINFO", "HELP"],
    &["SET", "str", "x"],
    &["XADD", "str", "*", "a", "1"],
    &["XREAD", "STREAMS", "str", "0"],
];

#[tokio::test]
async fn stream_commands_answer_like_redis_server() {
    let redis = RedisServer::start();
    let server = TestServer::start(ServerOptions::default()).await;
    for hello in ["2", "3"] {
        let mut script: Vec<&[&str]> = vec![&["FLUSHALL"]];
        let hello_command = ["HELLO", hello];
        script.push(&hello_command);
        script.extend_from_slice(SCRIPT);
        let mut r = TcpStream::connect(("127.0.0.1", redis.port)).await.unwrap();
        let expected = exchange(&mut r, &script).await;
        let mut c = TcpStream::connect(server.addr).await.unwrap();
        let replies = exchange(&mut c, &script).await;
        // HELLO's reply names each server.
        for (command, (got, want)) in script.iter().zip(replies.iter().zip(&expected)).skip(2) {
            assert_eq!(got, want, "RESP{hello} {command:?}");
        }
    }
}

/// Waits until `node` reports `count` blocked clients (INFO clients' `blocked_clients`).
fn wait_blocked(node: &process::Node, count: u64) {
    process::eventually(&format!("{count} blocked clients"), || {
        let info = process::raw_request(node.client_port, &["INFO", "clients"]).ok()?;
        let Reply::Bulk(info) = info else { return None };
        let info = String::from_utf8_lossy(&info).into_owned();
        info.contains(&format!("blocked_clients:{count}\r\n"))
            .then_some(())
    });
}

/// How far `node`'s log reached, from `INFO replication` (the largest of its offsets, which are
/// log indexes: its last index on a leader, its applied index on a follower).
fn log_position(node: &process::Node) -> u64 {
    let Ok(Reply::Bulk(info)) = process::raw_request(node.client_port, &["INFO", "replication"])
    else {
        return 0;
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.ends_with("repl_offset"))
        .filter_map(|(_, value)| value.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// A connection to `node` speaking RESP `hello` (2 or 3).
fn speaking(node: &process::Node, hello: &str) -> process::Raw {
    let mut raw = process::Raw::connect(node.client_port);
    let greeting = raw.request(&format!("HELLO {hello}"));
    assert!(!greeting.starts_with('-'), "{greeting}");
    raw
}

/// One stream's entries as XREAD and XREADGROUP answer them, byte for byte: an array of
/// `[key, entries]` in RESP2, a map in RESP3; each entry `[id, [field, value]]`.
fn one_stream(hello: &str, key: &str, entries: &[(&str, &str, &str)]) -> String {
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let mut out = if hello == "3" {
        format!("%1\r\n{}", bulk(key))
    } else {
        format!("*1\r\n*2\r\n{}", bulk(key))
    };
    out += &format!("*{}\r\n", entries.len());
    for (id, field, value) in entries {
        out += &format!("*2\r\n{}*2\r\n{}{}", bulk(id), bulk(field), bulk(value));
    }
    out
}

fn null_array(hello: &str) -> &'static str {
    if hello == "3" {
        "_\r\n"
    } else {
        "*-1\r\n"
    }
}

/// `line` (split on spaces) on `node`, on a fresh connection.
fn run(node: &process::Node, line: &str) -> Reply {
    let args: Vec<&str> = line.split(' ').collect();
    process::raw_request(node.client_port, &args).expect(line)
}

#[test]
fn blocked_xread_and_xreadgroup_are_served_on_leader_and_follower_in_both_protocols() {
    let cluster = process::Cluster::new("xread-block", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let writer = cluster.node(leader);
    for (id, hello) in [
        (leader, "2"),
        (follower, "3"),
        (leader, "3"),
        (follower, "2"),
    ] {
        let node = cluster.node(id);
        let key = format!("s{id}r{hello}");
        run(writer, &format!("XADD {key} 1-0 f old"));
        // `$`: after what was last when the client blocked, never the old entry.
        let mut client = speaking(node, hello);
        client.send(&["XREAD", "BLOCK", "0", "STREAMS", "other", &key, "$", "$"]);
        wait_blocked(node, 1);
        run(writer, &format!("XADD {key} 2-0 f new"));
        let reply = client.read_one("XREAD BLOCK 0");
        assert_eq!(
            reply,
            one_stream(hello, &key, &[("2-0", "f", "new")]),
            "node {id} RESP{hello}"
        );
        // XREADGROUP `>`: new entries, delivered (pending) to the consumer.
        run(writer, &format!("XGROUP CREATE {key} g $"));
        client.send(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            &key,
            ">",
        ]);
        wait_blocked(node, 1);
        run(writer, &format!("XADD {key} 3-0 f next"));
        let reply = client.read_one("XREADGROUP BLOCK 0");
        assert_eq!(
            reply,
            one_stream(hello, &key, &[("3-0", "f", "next")]),
            "node {id} RESP{hello}"
        );
        let pending = run(writer, &format!("XPENDING {key} g"));
        assert!(
            matches!(&pending, Reply::Array(p) if p[0] == Reply::Integer(1)),
            "{pending:?}"
        );
        // A timeout: the null array of the protocol, after the timeout and not before.
        let started = std::time::Instant::now();
        let reply = client.request(&format!("XREAD BLOCK 300 STREAMS {key} $"));
        assert_eq!(reply, null_array(hello));
        assert!(started.elapsed() >= Duration::from_millis(300));
        let reply = client.request(&format!("XREADGROUP GROUP g c BLOCK 200 STREAMS {key} >"));
        assert_eq!(reply, null_array(hello));
    }
}

#[test]
fn consumers_get_disjoint_entries_and_one_that_left_consumes_nothing() {
    let cluster = process::Cluster::new("xreadgroup-block", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let (writer, other) = (cluster.node(leader), cluster.node(follower));
    run(writer, "XGROUP CREATE q g $ MKSTREAM");
    // A client that leaves while blocked takes nothing of what comes after.
    {
        let mut gone = process::Raw::connect(other.client_port);
        gone.send(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "gone",
            "BLOCK",
            "0",
            "STREAMS",
            "q",
            ">",
        ]);
        wait_blocked(other, 1);
    }
    wait_blocked(other, 0);
    run(writer, "XADD q 1-0 f a");
    std::thread::sleep(Duration::from_millis(300));
    let pending = run(writer, "XPENDING q g");
    assert!(
        matches!(&pending, Reply::Array(p) if p[0] == Reply::Integer(0)),
        "{pending:?}"
    );
    // Two consumers, one per node, COUNT 1 each; two entries: one each, none twice.
    let mut one = speaking(writer, "2");
    let mut two = speaking(other, "2");
    run(writer, "XGROUP SETID q g $");
    for (client, name, node) in [(&mut one, "one", writer), (&mut two, "two", other)] {
        client.send(&[
            "XREADGROUP",
            "GROUP",
            "g",
            name,
            "COUNT",
            "1",
            "BLOCK",
            "0",
            "STREAMS",
            "q",
            ">",
        ]);
        wait_blocked(node, 1);
    }
    run(writer, "XADD q 2-0 f b");
    run(writer, "XADD q 3-0 f c");
    let got = [one.read_one("one"), two.read_one("two")];
    let b = one_stream("2", "q", &[("2-0", "f", "b")]);
    let c = one_stream("2", "q", &[("3-0", "f", "c")]);
    assert!(got == [b.clone(), c.clone()] || got == [c, b], "{got:?}");
    let pending = run(writer, "XPENDING q g");
    assert!(
        matches!(&pending, Reply::Array(p) if p[0] == Reply::Integer(2)),
        "{pending:?}"
    );
    gone_streams_and_groups_answer_redis_errors(writer, other);
}

/// A blocked XREADGROUP whose group is destroyed answers NOGROUP; whose stream is deleted or
/// replaced, UNBLOCKED (Redis 7.0's words); a blocked XREAD waits on through both.
fn gone_streams_and_groups_answer_redis_errors(writer: &process::Node, node: &process::Node) {
    let mut client = speaking(node, "2");
    let mut reader = speaking(node, "2");
    reader.send(&["XREAD", "BLOCK", "0", "STREAMS", "gone", "$"]);
    wait_blocked(node, 1);
    for (change, error) in [
        (
            "XGROUP DESTROY gone g",
            "-NOGROUP the consumer group this client was blocked on no longer exists\r\n",
        ),
        ("DEL gone", "-UNBLOCKED the stream key no longer exists\r\n"),
        ("FLUSHDB", "-UNBLOCKED the stream key no longer exists\r\n"),
    ] {
        run(writer, "XGROUP CREATE gone g $ MKSTREAM");
        let before = log_position(node);
        client.send(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "gone",
            ">",
        ]);
        wait_blocked(node, 2);
        // Counted as blocked once it registered: its first attempt must also be in the log, or
        // the change overtakes it and it answers XREADGROUP's own error for a missing group
        // instead of a blocked client's.
        process::eventually("the blocked XREADGROUP's first attempt", || {
            (log_position(node) > before).then_some(())
        });
        run(writer, change);
        assert_eq!(client.read_one(change), error);
    }
    // The XREAD waited through all of it, and is served by an entry after its `$` (0-0).
    run(writer, "XADD gone 5-0 f v");
    assert_eq!(
        reader.read_one("XREAD"),
        one_stream("2", "gone", &[("5-0", "f", "v")])
    );
}
