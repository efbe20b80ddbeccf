//! Blocking pops in a three-node cluster of `keel serve` processes: a client blocked on any node
//! is woken by a push through any other, elements go to exactly one client each, clients of one
//! node are served in the order they blocked, timeouts are the client's own, a client that left
//! takes nothing, BLMOVE keeps what it takes, and inside MULTI nothing blocks; CLIENT UNBLOCK;
//! SWAPDB, MOVE, COPY and RENAME wake the clients of the database they fill, and only those.

mod process;

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use process::{Cluster, Node};
use redis::Value;

/// A client's BLPOP (or any blocking command) on its own thread: its reply and how long it took.
fn blocked(node: &Node, args: &[&str]) -> thread::JoinHandle<(Value, Duration)> {
    // No read timeout: it waits as long as the command does.
    let mut con = node.client().get_connection().expect("connect");
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    thread::spawn(move || {
        let started = Instant::now();
        // An error reply is a reply here, as its text.
        let reply: Value = command
            .query(&mut con)
            .unwrap_or_else(|e| Value::SimpleString(format!("error: {e}")));
        (reply, started.elapsed())
    })
}

/// Waits until `node` reports `count` blocked clients (INFO clients' `blocked_clients`).
fn wait_blocked(node: &Node, count: u64) {
    process::eventually(&format!("{count} blocked clients"), || {
        let info: String = process::query(node, redis::cmd("INFO").arg("clients"));
        (info.contains(&format!("blocked_clients:{count}\r\n"))).then_some(())
    });
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::BulkString(bytes) => vec![String::from_utf8_lossy(bytes).into_owned()],
        other => panic!("not a string or array: {other:?}"),
    }
}

#[test]
fn blocked_clients_on_every_node_are_served_by_pushes_through_any_node() {
    let cluster = Cluster::new("blocking", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();

    // One waiter per node, woken by a push through another node.
    for (id, pusher) in [
        (leader, followers[0]),
        (followers[0], leader),
        (followers[1], followers[0]),
    ] {
        let key = format!("q{id}");
        let waiter = blocked(cluster.node(id), &["BLPOP", "none", &key, "30"]);
        wait_blocked(cluster.node(id), 1);
        let _: i64 = process::query(
            cluster.node(pusher),
            redis::cmd("RPUSH").arg(&key).arg("job"),
        );
        let (reply, took) = waiter.join().unwrap();
        assert_eq!(strings(&reply), [key.clone(), "job".into()], "node {id}");
        assert!(took < Duration::from_secs(20), "node {id} took {took:?}");
        let left: i64 = process::query(cluster.node(id), redis::cmd("LLEN").arg(&key));
        assert_eq!(left, 0);
    }

    // Six waiters, two per node; one push of six elements: each element to exactly one client.
    let waiters: Vec<_> = [1, 2, 3, 1, 2, 3]
        .into_iter()
        .map(|id| blocked(cluster.node(id), &["BRPOP", "jobs", "30"]))
        .collect();
    for id in [1, 2, 3] {
        wait_blocked(cluster.node(id), 2);
    }
    let _: i64 = process::query(
        cluster.node(leader),
        redis::cmd("LPUSH")
            .arg("jobs")
            .arg(&["1", "2", "3", "4", "5", "6"]),
    );
    let mut taken = BTreeSet::new();
    for waiter in waiters {
        let (reply, _) = waiter.join().unwrap();
        let reply = strings(&reply);
        assert_eq!(reply[0], "jobs");
        assert!(
            taken.insert(reply[1].clone()),
            "{} delivered twice",
            reply[1]
        );
    }
    assert_eq!(taken.len(), 6);
    let left: i64 = process::query(cluster.node(leader), redis::cmd("LLEN").arg("jobs"));
    assert_eq!(left, 0);
}

/// Redis's "BRPOPLPUSH with multiple blocked clients": the first in line fails on its
/// destination (another kind of value), takes nothing, and the next in line gets the element.
fn a_failed_first_hands_on(cluster: &Cluster, node: &Node) {
    let leader = cluster.node(cluster.leader());
    let _: () = process::query(leader, redis::cmd("SET").arg("target1").arg("nolist"));
    let first = blocked(node, &["BRPOPLPUSH", "handed", "target1", "30"]);
    wait_blocked(node, 1);
    let second = blocked(node, &["BRPOPLPUSH", "handed", "target2", "30"]);
    wait_blocked(node, 2);
    let _: i64 = process::query(leader, redis::cmd("LPUSH").arg("handed").arg("foo"));
    let failed = first.join().unwrap();
    assert!(
        matches!(&failed.0, Value::SimpleString(e) if e.contains("WRONGTYPE")),
        "{failed:?}"
    );
    assert_eq!(strings(&second.join().unwrap().0), ["foo"]);
}

#[test]
fn one_node_serves_its_clients_in_the_order_they_blocked() {
    let cluster = Cluster::new("blocking-order", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let node = cluster.node(follower);
    let first = blocked(node, &["BLPOP", "fifo", "30"]);
    wait_blocked(node, 1);
    let second = blocked(node, &["BLPOP", "fifo", "30"]);
    wait_blocked(node, 2);
    let _: i64 = process::query(
        cluster.node(leader),
        redis::cmd("RPUSH").arg("fifo").arg("a"),
    );
    let (reply, _) = first.join().unwrap();
    assert_eq!(strings(&reply), ["fifo", "a"]);
    wait_blocked(node, 1);
    let _: i64 = process::query(
        cluster.node(leader),
        redis::cmd("RPUSH").arg("fifo").arg("b"),
    );
    let (reply, _) = second.join().unwrap();
    assert_eq!(strings(&reply), ["fifo", "b"]);
    a_failed_first_hands_on(&cluster, node);
}

#[test]
fn timeouts_leaving_clients_moves_and_transactions_behave_as_redis() {
    let cluster = Cluster::new("blocking-edges", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let node = cluster.node(follower);

    // The client's own timeout: null after it, not before.
    let (reply, took) = blocked(node, &["BZPOPMIN", "nothing", "0.5"])
        .join()
        .unwrap();
    assert_eq!(reply, Value::Nil);
    assert!(
        took >= Duration::from_millis(500),
        "timed out after {took:?}"
    );
    assert!(took < Duration::from_secs(10), "timed out after {took:?}");

    // A client that left takes nothing of what comes after it left.
    {
        use std::io::Write;
        let mut raw = std::net::TcpStream::connect(node.client_addr()).unwrap();
        raw.write_all(b"*3\r\n$5\r\nBLPOP\r\n$4\r\nleft\r\n$1\r\n0\r\n")
            .unwrap();
        wait_blocked(node, 1);
    }
    wait_blocked(node, 0);
    let _: i64 = process::query(
        cluster.node(leader),
        redis::cmd("RPUSH").arg("left").arg("x"),
    );
    thread::sleep(Duration::from_millis(500));
    let left: i64 = process::query(node, redis::cmd("LLEN").arg("left"));
    assert_eq!(left, 1, "a client that left took an element");

    // BLMOVE: the reliable queue keeps the element in its destination.
    let mover = blocked(node, &["BLMOVE", "src", "dst", "RIGHT", "LEFT", "30"]);
    wait_blocked(node, 1);
    let _: i64 = process::query(
        cluster.node(leader),
        redis::cmd("RPUSH").arg("src").arg("m"),
    );
    let (reply, _) = mover.join().unwrap();
    assert_eq!(strings(&reply), ["m"]);
    let dst: Vec<String> = process::query(node, redis::cmd("LRANGE").arg("dst").arg(0).arg(-1));
    assert_eq!(dst, ["m"]);

    inside_multi_nothing_blocks_and_errors_are_redis(node);
}

/// Inside MULTI nothing blocks: null for an empty key, the element for a full one; errors in
/// Redis's words.
fn inside_multi_nothing_blocks_and_errors_are_redis(node: &Node) {
    let mut con = node.connect().unwrap();
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let _: String = redis::cmd("BLPOP")
        .arg("empty")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let _: String = redis::cmd("RPUSH")
        .arg("full")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: String = redis::cmd("BLPOP")
        .arg("full")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let exec: Value = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(
        exec,
        Value::Array(vec![
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![
                Value::BulkString(b"full".to_vec()),
                Value::BulkString(b"x".to_vec())
            ]),
        ])
    );

    // Errors in Redis's words.
    let error = redis::cmd("BLPOP")
        .arg("k")
        .arg("-1")
        .query::<Value>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("timeout is negative"), "{error}");
}

/// `line` (split on spaces) on `raw`, whose reply must not be an error.
fn ok(raw: &mut process::Raw, line: &str) -> String {
    let reply = raw.request(line);
    assert!(!reply.starts_with('-'), "{line}: {reply}");
    reply
}

/// The id of `raw`'s connection (CLIENT ID).
fn client_id(raw: &mut process::Raw) -> String {
    let reply = ok(raw, "CLIENT ID");
    reply.trim_start_matches(':').trim_end().to_string()
}

#[test]
fn client_unblock_ends_a_wait_as_a_timeout_or_an_error_and_only_a_blocked_one() {
    let cluster = Cluster::new("blocking-unblock", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    for id in [leader, follower] {
        let node = cluster.node(id);
        let mut admin = process::Raw::connect(node.client_port);
        let mut waiter = process::Raw::connect(node.client_port);
        let waiter_id = client_id(&mut waiter);
        assert_eq!(
            admin.request(&format!("CLIENT UNBLOCK {waiter_id}")),
            ":0\r\n"
        );
        waiter.send(&["BLPOP", "unblocked", "0"]);
        wait_blocked(node, 1);
        let list = admin.request(&format!("CLIENT LIST ID {waiter_id}"));
        assert!(list.contains("flags=b "), "{list}");
        assert_eq!(
            admin.request(&format!("CLIENT UNBLOCK {waiter_id} TIMEOUT")),
            ":1\r\n"
        );
        assert_eq!(waiter.read_one("BLPOP"), "*-1\r\n");
        waiter.send(&["XREAD", "BLOCK", "0", "STREAMS", "unblocked-s", "$"]);
        wait_blocked(node, 1);
        assert_eq!(
            admin.request(&format!("CLIENT UNBLOCK {waiter_id} ERROR")),
            ":1\r\n"
        );
        assert_eq!(
            waiter.read_one("XREAD"),
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
        );
        wait_blocked(node, 0);
        // It took nothing: a push after it stays.
        let _: i64 = process::query(node, redis::cmd("RPUSH").arg("unblocked").arg("x"));
        assert_eq!(ok(&mut waiter, "LLEN unblocked"), ":1\r\n");
        ok(&mut waiter, "DEL unblocked");
        assert_eq!(
            admin.request("CLIENT UNBLOCK 1 MAYBE"),
            "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n"
        );
    }
}

#[test]
fn moves_swaps_copies_and_renames_wake_clients_of_their_database_only() {
    let cluster = Cluster::new("blocking-databases", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let node = cluster.node(follower);
    let mut writer = process::Raw::connect(cluster.node(leader).client_port);
    ok(&mut writer, "SELECT 1");
    let mut in_db0 = process::Raw::connect(node.client_port);
    let mut in_db1 = process::Raw::connect(node.client_port);
    ok(&mut in_db1, "SELECT 1");
    // A push in database 1 does not wake a client blocked on the same name in database 0; it
    // wakes the one blocked in database 1.
    in_db0.send(&["BLPOP", "k", "0"]);
    wait_blocked(node, 1);
    in_db1.send(&["BLPOP", "k", "0"]);
    wait_blocked(node, 2);
    ok(&mut writer, "RPUSH k one");
    assert_eq!(
        in_db1.read_one("BLPOP in 1"),
        "*2\r\n$1\r\nk\r\n$3\r\none\r\n"
    );
    thread::sleep(Duration::from_millis(300));
    wait_blocked(node, 1);
    // Each of these fills `k` of database 0 from database 1, and wakes the client there.
    for (setup, fill) in [
        ("RPUSH k swapped", "SWAPDB 0 1"),
        ("RPUSH k moved", "MOVE k 0"),
        ("RPUSH k copied", "COPY k k DB 0"),
    ] {
        ok(&mut writer, setup);
        ok(&mut writer, fill);
        let value = setup.rsplit(' ').next().unwrap();
        let reply = in_db0.read_one(fill);
        assert_eq!(
            reply,
            format!("*2\r\n$1\r\nk\r\n${}\r\n{value}\r\n", value.len()),
            "{fill}"
        );
        ok(&mut writer, "FLUSHALL");
        in_db0.send(&["BLPOP", "k", "0"]);
        wait_blocked(node, 1);
    }
    ok(&mut writer, "SELECT 0");
    ok(&mut writer, "RPUSH other renamed");
    ok(&mut writer, "RENAME other k");
    assert_eq!(
        in_db0.read_one("RENAME"),
        "*2\r\n$1\r\nk\r\n$7\r\nrenamed\r\n"
    );
}
