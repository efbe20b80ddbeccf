//! RESP3 on every node (issue 44): a follower answers a RESP3 client byte for byte as the leader
//! does (maps, doubles, sets, member-score pairs), for forwarded writes, reads, transactions and
//! scripts, and a RESP2 client as before, also after a connection switches protocols with HELLO;
//! redis-py 8 (RESP3) reads a leaderboard from a follower.

mod process;

use std::io::Write;

use bytes::BytesMut;
use keel_resp::encode_request;
use process::{eventually, run_program, Cluster, Raw};

/// Every command the comparison sends, `{p}` standing for a key prefix of its own per run: the
/// replies hold no key names, so two runs on the same data answer the same bytes.
const SESSION: &[&str] = &[
    "HSET {p}h f1 v1 f2 v2",
    "HGETALL {p}h",
    "ZADD {p}z 1 alice 2.5 bob 10 carol 0.1 dave",
    "ZRANGE {p}z 0 -1 WITHSCORES",
    "ZREVRANGE {p}z 0 1 WITHSCORES",
    "ZRANGEBYSCORE {p}z 1 +inf WITHSCORES LIMIT 0 2",
    "ZSCORE {p}z bob",
    "ZSCORE {p}z nobody",
    "ZINCRBY {p}z 0.2 dave",
    "ZADD {p}z INCR 5 bob",
    "ZMSCORE {p}z alice bob nobody",
    "ZPOPMIN {p}z",
    "ZPOPMIN {p}z 2",
    "ZPOPMAX {p}z 5",
    "SADD {p}s x y z",
    "SMEMBERS {p}s",
    "SINTER {p}s {p}s",
    "SPOP {p}s 0",
    "CONFIG GET maxmemory*",
    "MULTI",
    "ZINCRBY {p}m 2 m",
    "ZADD {p}m INCR 0.5 m",
    "SMEMBERS {p}s",
    "HGETALL {p}h",
    "EXEC",
    "EVAL return\\redis.call('ZSCORE',KEYS[1],'m') 1 {p}m",
    "EVAL redis.setresp(3);return\\redis.call('ZSCORE',KEYS[1],'m') 1 {p}m",
    "EVAL return\\{double=0.1} 0",
];

/// Runs [`SESSION`] on `raw` with the key prefix `prefix`: the replies, in order.
fn session(raw: &mut Raw, prefix: &str) -> Vec<String> {
    SESSION
        .iter()
        .map(|line| {
            // A backslash stands for a space inside one argument (a script).
            let request = line.replace("{p}", prefix);
            let args: Vec<String> = request.split(' ').map(|a| a.replace('\\', " ")).collect();
            let mut out = BytesMut::new();
            encode_request(&args, &mut out);
            raw.stream.write_all(&out).expect("write");
            raw.read_one(line)
        })
        .collect()
}

/// The replies of one connection to node `port`: RESP2, then after `HELLO 3`, then after
/// `HELLO 2` again (the link to the leader follows each switch).
fn replies(port: u16, run: &str) -> [Vec<String>; 3] {
    let mut raw = Raw::connect(port);
    let first = session(&mut raw, &format!("{run}:2:"));
    assert!(raw.request("HELLO 3").starts_with('%'));
    let resp3 = session(&mut raw, &format!("{run}:3:"));
    assert!(raw.request("HELLO 2").starts_with('*'));
    let again = session(&mut raw, &format!("{run}:2again:"));
    [first, resp3, again]
}

fn reply_to<'a>(replies: &'a [String], line: &str) -> &'a str {
    let at = SESSION.iter().position(|l| *l == line).expect("in SESSION");
    &replies[at]
}

/// RESP3's types, as Redis 7 answers them.
const RESP3_REPLIES: &[(&str, &str)] = &[
    (
        "HGETALL {p}h",
        "%2\r\n$2\r\nf1\r\n$2\r\nv1\r\n$2\r\nf2\r\n$2\r\nv2\r\n",
    ),
    (
        "ZREVRANGE {p}z 0 1 WITHSCORES",
        "*2\r\n*2\r\n$5\r\ncarol\r\n,10\r\n*2\r\n$3\r\nbob\r\n,2.5\r\n",
    ),
    ("ZSCORE {p}z bob", ",2.5\r\n"),
    ("ZSCORE {p}z nobody", "_\r\n"),
    ("ZINCRBY {p}z 0.2 dave", ",0.30000000000000004\r\n"),
    ("ZADD {p}z INCR 5 bob", ",7.5\r\n"),
    ("ZMSCORE {p}z alice bob nobody", "*3\r\n,1\r\n,7.5\r\n_\r\n"),
    (
        "ZPOPMIN {p}z",
        "*2\r\n$4\r\ndave\r\n,0.30000000000000004\r\n",
    ),
    (
        "ZPOPMIN {p}z 2",
        "*2\r\n*2\r\n$5\r\nalice\r\n,1\r\n*2\r\n$3\r\nbob\r\n,7.5\r\n",
    ),
    ("SMEMBERS {p}s", "~3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n"),
    ("SPOP {p}s 0", "~0\r\n"),
    (
        "EXEC",
        "*4\r\n,2\r\n,2.5\r\n~3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n\
         %2\r\n$2\r\nf1\r\n$2\r\nv1\r\n$2\r\nf2\r\n$2\r\nv2\r\n",
    ),
    // A script reads in RESP2 unless it asks for RESP3 (then a double answers a double).
    (
        "EVAL return\\redis.call('ZSCORE',KEYS[1],'m') 1 {p}m",
        "$3\r\n2.5\r\n",
    ),
    (
        "EVAL redis.setresp(3);return\\redis.call('ZSCORE',KEYS[1],'m') 1 {p}m",
        ",2.5\r\n",
    ),
    ("EVAL return\\{double=0.1} 0", ",0.10000000000000001\r\n"),
];

/// RESP2 as keel always answered: flat arrays, scores as bulk strings.
const RESP2_REPLIES: &[(&str, &str)] = &[
    (
        "ZREVRANGE {p}z 0 1 WITHSCORES",
        "*4\r\n$5\r\ncarol\r\n$2\r\n10\r\n$3\r\nbob\r\n$3\r\n2.5\r\n",
    ),
    ("ZSCORE {p}z bob", "$3\r\n2.5\r\n"),
    ("ZSCORE {p}z nobody", "$-1\r\n"),
    ("SMEMBERS {p}s", "*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n"),
    (
        "ZPOPMIN {p}z 2",
        "*4\r\n$5\r\nalice\r\n$1\r\n1\r\n$3\r\nbob\r\n$3\r\n7.5\r\n",
    ),
    (
        "EVAL return\\{double=0.1} 0",
        "$19\r\n0.10000000000000001\r\n",
    ),
];

#[test]
fn a_follower_answers_every_protocol_byte_for_byte_as_the_leader() {
    let cluster = Cluster::new("resp3", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let follower_port = cluster.node(follower).client_port;
    // The first forwarded write may race an election that just settled elsewhere.
    eventually("a write through the follower", || {
        let reply = Raw::connect(follower_port).request("SET ready 1");
        (reply == "+OK\r\n").then_some(())
    });
    let on_leader = replies(cluster.node(leader).client_port, "leader");
    let on_follower = replies(follower_port, "follower");
    for (phase, (l, f)) in ["RESP2", "RESP3", "RESP2 again"]
        .iter()
        .zip(on_leader.iter().zip(&on_follower))
    {
        for (line, (l, f)) in SESSION.iter().zip(l.iter().zip(f)) {
            assert_eq!(l, f, "{phase}: {line}: leader and follower differ");
        }
    }
    let [two, three, two_again] = &on_leader;
    assert_eq!(two, two_again, "RESP2 after RESP3 answers as before");
    for (line, want) in RESP3_REPLIES {
        assert_eq!(reply_to(three, line), *want, "RESP3: {line}");
    }
    assert!(reply_to(three, "CONFIG GET maxmemory*").starts_with('%'));
    for (line, want) in RESP2_REPLIES {
        assert_eq!(reply_to(two, line), *want, "RESP2: {line}");
    }
    let py = run_program(
        "python3",
        &["-c", LEADERBOARD, &follower_port.to_string()],
        None,
    );
    assert!(py.0.contains("leaderboard ok"), "{py:?}");
}

/// redis-py 8 speaks RESP3 by default (protocol=3 asked for explicitly, for older versions): a
/// leaderboard read on a follower unpacks into (member, score) pairs.
const LEADERBOARD: &str = r#"
import sys
import redis
r = redis.Redis(port=int(sys.argv[1]), protocol=3)
r.zadd("board", {"alice": 10, "bob": 7.5, "carol": 12})
r.zincrby("board", 0.5, "bob")
top = [(member.decode(), score) for member, score in r.zrevrange("board", 0, -1, withscores=True)]
assert top == [("carol", 12.0), ("alice", 10.0), ("bob", 8.0)], top
assert r.zscore("board", "bob") == 8.0
r.sadd("tags", "a", "b")
assert r.smembers("tags") == {b"a", b"b"}
assert r.hset("user", mapping={"name": "ann"}) == 1
assert r.hgetall("user") == {b"name": b"ann"}
print("leaderboard ok")
"#;
