//! The stream commands over a socket, answered exactly as redis-server 7.0 answers the same
//! script, in RESP2 and in RESP3 (XREAD's and XREADGROUP's streams are a map in RESP3, XINFO's
//! records too). The script names its IDs and reads no idle or delivery times: keel takes those
//! from the log's time, redis-server from its clock.

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
