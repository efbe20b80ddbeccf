//! Expiry in a three-node cluster of `keel serve` processes: deadlines set through any node,
//! keys gone at their deadline for every node's reads, removed from every replica by the
//! leader's tick entries (active expiry) on an idle cluster, and kept across a restart of every
//! node.

mod process;

use std::time::{Duration, Instant};

use keel_resp::Reply;
use process::{info_field, raw_request, Cluster};

fn request(port: u16, args: &[&str]) -> Reply {
    process::eventually(&format!("{args:?} answered"), || {
        match raw_request(port, args) {
            Ok(Reply::Error(e)) if e.starts_with("TRYAGAIN") => None,
            Ok(reply) => Some(reply),
            Err(_) => None,
        }
    })
}

fn integer(port: u16, args: &[&str]) -> i64 {
    match request(port, args) {
        Reply::Integer(n) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// `db0:keys=N,expires=M,...` of `INFO keyspace` (0, 0 when the line is absent: no keys).
fn keyspace(port: u16) -> (u64, u64) {
    let Reply::Bulk(text) = request(port, &["INFO", "keyspace"]) else {
        panic!("INFO keyspace is a bulk string")
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("db0:")) else {
        return (0, 0);
    };
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    (field("keys"), field("expires"))
}

#[test]
#[expect(clippy::too_many_lines)]
fn keys_expire_on_every_node_and_ticks_remove_them_from_every_replica() {
    let mut cluster = Cluster::new("expiry", &[1, 2, 3], &[], &["--time-tick-ms", "50"]);
    let leader = cluster.leader();
    let ports: Vec<u16> = [1, 2, 3]
        .iter()
        .map(|&id| cluster.node(id).client_port)
        .collect();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let follower_port = cluster.node(follower).client_port;

    // A lease through a follower (forwarded), a lock-style SET NX PX, and a key that stays.
    assert_eq!(
        request(follower_port, &["SET", "lock", "token", "NX", "PX", "1500"]),
        Reply::OK
    );
    assert_eq!(
        request(follower_port, &["SET", "lock", "other", "NX", "PX", "1500"]),
        Reply::Null,
        "the lock is held"
    );
    assert_eq!(request(ports[0], &["SET", "keep", "v"]), Reply::OK);
    assert_eq!(integer(ports[1], &["EXPIRE", "keep", "100"]), 1);
    assert_eq!(integer(ports[2], &["PERSIST", "keep"]), 1);
    let set_at = Instant::now();
    for &port in &ports {
        let ttl = integer(port, &["PTTL", "lock"]);
        assert!((1..=1500).contains(&ttl), "PTTL {ttl}");
        assert_eq!(integer(port, &["TTL", "keep"]), -1);
    }
    // Until the deadline every node answers the value; after it, none does, and every replica
    // removes the key (the leader's ticks), with nothing else written meanwhile.
    process::eventually_within(
        "the lock to expire on every node",
        Duration::from_secs(30),
        || {
            let seen: Vec<Reply> = ports
                .iter()
                .map(|&port| request(port, &["GET", "lock"]))
                .collect();
            for reply in &seen {
                if *reply == Reply::Null && set_at.elapsed() < Duration::from_millis(1_000) {
                    panic!("the lock expired early, after {:?}", set_at.elapsed());
                }
            }
            seen.iter().all(|r| *r == Reply::Null).then_some(())
        },
    );
    assert!(set_at.elapsed() >= Duration::from_millis(1_000));
    for &port in &ports {
        process::eventually("the expired key removed from this replica", || {
            (keyspace(port) == (1, 0)).then_some(())
        });
        assert_eq!(integer(port, &["PTTL", "lock"]), -2);
    }
    // A transaction through a follower, with a command Redis queues that this node answers
    // (SELECT) between the data commands: forwarded whole, its replies in order.
    let mut con = cluster.node(follower).connect().expect("connect");
    let (selected, set, ttl): (String, String, i64) = process::eventually("a transaction", || {
        redis::pipe()
            .atomic()
            .cmd("SELECT")
            .arg(0)
            .cmd("SET")
            .arg("tx")
            .arg("1")
            .arg("EX")
            .arg(100)
            .cmd("TTL")
            .arg("tx")
            .query(&mut con)
            .ok()
    });
    assert_eq!((selected.as_str(), set.as_str(), ttl), ("OK", "OK", 100));
    // The lock is free again.
    assert_eq!(
        request(
            follower_port,
            &["SET", "lock", "other", "NX", "PX", "60000"]
        ),
        Reply::OK
    );

    // Deadlines survive a restart of every node, and replicas agree on the state afterwards.
    assert_eq!(
        request(ports[0], &["SET", "later", "v", "EX", "3600"]),
        Reply::OK
    );
    let (applied, _) = cluster.converged(&[1, 2, 3], 0);
    for id in [1, 2, 3] {
        cluster.node_mut(id).kill();
    }
    for id in [1, 2, 3] {
        cluster.node_mut(id).spawn();
    }
    cluster.converged(&[1, 2, 3], applied);
    for &port in &ports {
        let ttl = integer(port, &["TTL", "later"]);
        assert!((3_500..=3_600).contains(&ttl), "TTL {ttl}");
        assert_eq!(request(port, &["GET", "lock"]), Reply::bulk("other"));
        assert_eq!(keyspace(port).1, 3, "three keys with deadlines");
    }
    assert!(info_field(ports[0], "raft", "log_time_ms") > 0);
}
