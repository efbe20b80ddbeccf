//! `maxmemory` with `noeviction`, decided on the leader: past the limit, writes that may grow
//! memory are refused with Redis's `-OOM ...` on every node (followers forward them, so the
//! leader's figure decides), while reads and DEL go on; DEL makes room again.

mod process;

use keel_resp::Reply;
use process::{info_field, raw_request, Cluster};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const MAXMEMORY: u64 = 256 * 1024;
const VALUE_BYTES: usize = 1000;

fn ok(reply: Result<Reply, String>) -> bool {
    matches!(reply, Ok(Reply::Simple(s)) if s == "OK")
}

/// A line of `INFO memory` on `port`.
fn memory_field(port: u16, key: &str) -> u64 {
    info_field(port, "memory", key)
}

#[test]
#[expect(clippy::too_many_lines)]
fn writes_are_refused_past_maxmemory_and_del_makes_room() {
    let mut cluster = Cluster::new(
        "maxmemory",
        &[1, 2, 3],
        &[],
        &["--maxmemory", "256kb", "--maxmemory-policy", "noeviction"],
    );
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let (leader_port, follower_port) = (
        cluster.node(leader).client_port,
        cluster.node(follower).client_port,
    );
    match raw_request(follower_port, &["CONFIG", "GET", "maxmemory"]).unwrap() {
        Reply::Array(pair) => assert_eq!(pair[1], Reply::bulk(MAXMEMORY.to_string())),
        other => panic!("{other:?}"),
    }

    // Fill through the follower (every write forwarded) until the leader refuses.
    let value = "v".repeat(VALUE_BYTES);
    let mut written = 0;
    let refused = loop {
        let key = format!("key-{written:05}");
        match raw_request(follower_port, &["SET", &key, &value]) {
            Ok(Reply::Simple(s)) if s == "OK" => written += 1,
            Ok(Reply::Error(e)) if e.starts_with("TRYAGAIN") => continue,
            other => break other,
        }
        assert!(written < 1_000, "1,000 writes of 1 KB and no refusal");
    };
    assert_eq!(refused, Ok(Reply::error(OOM)));
    // Refused once the data passed the limit: not earlier (each pair is counted as its bytes
    // plus 64), and not much later (only writes already in flight may pass it).
    let pair = (VALUE_BYTES + 9 + 64) as u64;
    assert!(
        written as u64 * pair > MAXMEMORY && written as u64 * pair <= MAXMEMORY + 2 * pair,
        "refused after {written} writes"
    );
    let used = memory_field(leader_port, "used_memory");
    assert!(used > MAXMEMORY, "used_memory {used}");
    assert_eq!(memory_field(leader_port, "maxmemory"), MAXMEMORY);
    assert!(memory_field(leader_port, "used_memory_rss") > used);

    // Every kind of growing write is refused on every node, a transaction with one as a whole;
    // reads, and transactions that do not grow, go on.
    for id in [1, 2, 3] {
        let port = cluster.node(id).client_port;
        for request in [
            &["SET", "another", "v"][..],
            &["INCR", "counter"],
            &["APPEND", "key-00000", "more"],
            &["MSET", "a", "1", "b", "2"],
        ] {
            assert_eq!(
                raw_request(port, request),
                Ok(Reply::error(OOM)),
                "{request:?} on node {id}"
            );
        }
        assert_eq!(
            raw_request(port, &["GET", "key-00000"]),
            Ok(Reply::bulk(value.clone()))
        );
        assert_eq!(
            raw_request(port, &["DBSIZE"]),
            Ok(Reply::Integer(written as i64))
        );
    }

    // DEL is allowed and makes room: writes succeed again, through the follower too.
    let keys: Vec<String> = (0..10).map(|i| format!("key-{i:05}")).collect();
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    assert_eq!(raw_request(follower_port, &del), Ok(Reply::Integer(10)));
    assert!(memory_field(leader_port, "used_memory") <= MAXMEMORY);
    assert!(ok(raw_request(follower_port, &["SET", "after-del", "v"])));
    assert_eq!(
        raw_request(leader_port, &["INCR", "counter"]),
        Ok(Reply::Integer(1))
    );
    for node in &mut cluster.nodes {
        node.assert_alive();
    }
}
