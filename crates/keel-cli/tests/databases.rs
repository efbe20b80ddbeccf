//! Databases in a three-node cluster of `keel serve` processes: SELECT on a follower (its writes
//! and reads forwarded to the leader in that database) and on the leader, a transaction with
//! SELECT inside, SWAPDB seen from every node, and a restart of every node from snapshots with
//! data outside database 0.

mod process;

use process::{Cluster, Node};
use redis::Value;

/// A connection to `node` in database `db`.
fn connect_in(node: &Node, db: u32) -> redis::Connection {
    process::eventually(
        &format!("a connection to node {} in db {db}", node.id),
        || {
            let mut con = node.connect().ok()?;
            redis::cmd("SELECT").arg(db).query::<()>(&mut con).ok()?;
            Some(con)
        },
    )
}

/// GET `key` in database `db` of `node`, retried while the cluster settles.
fn get_in(node: &Node, db: u32, key: &str) -> Option<String> {
    process::eventually(&format!("GET {key} in db {db} on node {}", node.id), || {
        let mut con = node.connect().ok()?;
        redis::cmd("SELECT").arg(db).query::<()>(&mut con).ok()?;
        redis::cmd("GET")
            .arg(key)
            .query::<Option<String>>(&mut con)
            .ok()
    })
}

#[test]
fn databases_are_replicated_forwarded_swapped_and_restored() {
    let mut cluster = Cluster::new("databases", &[1, 2, 3], &[], &["--snapshot-threshold", "8"]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();

    // SELECT on a follower: the write and the read go to the leader, in database 3.
    let mut on_follower = connect_in(cluster.node(follower), 3);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("three")
        .query(&mut on_follower)
        .unwrap();
    let got: Option<String> = redis::cmd("GET").arg("k").query(&mut on_follower).unwrap();
    assert_eq!(got.as_deref(), Some("three"));
    assert_eq!(
        get_in(cluster.node(leader), 0, "k"),
        None,
        "database 0 is another"
    );
    assert_eq!(
        get_in(cluster.node(leader), 3, "k").as_deref(),
        Some("three")
    );
    let err = redis::cmd("SELECT")
        .arg(16)
        .query::<()>(&mut on_follower)
        .unwrap_err();
    assert!(
        err.to_string().contains("DB index is out of range"),
        "{err}"
    );

    transaction_with_select(&mut on_follower, cluster.node(leader));
    swapdb_seen_everywhere(&cluster, leader);
    restart_from_snapshots(&mut cluster, leader);
}

/// A transaction with SELECT inside, on a follower's connection in database 3: the commands
/// after it run in database 5, and the connection is there after EXEC.
fn transaction_with_select(on_follower: &mut redis::Connection, leader: &Node) {
    let _: () = redis::cmd("MULTI").query(on_follower).unwrap();
    for args in [
        &["SET", "a", "in3"][..],
        &["SELECT", "5"],
        &["SET", "a", "in5"],
    ] {
        let queued: String = redis::cmd(args[0])
            .arg(&args[1..])
            .query(on_follower)
            .unwrap();
        assert_eq!(queued, "QUEUED");
    }
    let exec: Value = redis::cmd("EXEC").query(on_follower).unwrap();
    assert_eq!(
        exec,
        Value::Array(vec![Value::Okay, Value::Okay, Value::Okay])
    );
    let got: Option<String> = redis::cmd("GET").arg("a").query(on_follower).unwrap();
    assert_eq!(
        got.as_deref(),
        Some("in5"),
        "the connection is in database 5 after EXEC"
    );
    assert_eq!(get_in(leader, 3, "a").as_deref(), Some("in3"));
}

/// SWAPDB 3 5 on the leader, seen from every node and in INFO keyspace.
fn swapdb_seen_everywhere(cluster: &Cluster, leader: u64) {
    let mut on_leader = connect_in(cluster.node(leader), 0);
    let _: () = redis::cmd("SWAPDB")
        .arg(3)
        .arg(5)
        .query(&mut on_leader)
        .unwrap();
    for id in [1, 2, 3] {
        let node = cluster.node(id);
        assert_eq!(get_in(node, 5, "k").as_deref(), Some("three"), "node {id}");
        assert_eq!(get_in(node, 3, "a").as_deref(), Some("in5"), "node {id}");
        assert_eq!(get_in(node, 3, "k"), None, "node {id}");
    }
    let keyspace: String = redis::cmd("INFO")
        .arg("keyspace")
        .query(&mut on_leader)
        .unwrap();
    assert!(
        keyspace.contains("db3:keys=1,expires=0,avg_ttl=0"),
        "{keyspace}"
    );
    assert!(
        keyspace.contains("db5:keys=2,expires=0,avg_ttl=0"),
        "{keyspace}"
    );
}

/// Enough writes for every node to take a snapshot, then every node restarts from it: the same
/// state, databases 3 and 5 included.
fn restart_from_snapshots(cluster: &mut Cluster, leader: u64) {
    let mut on_leader = connect_in(cluster.node(leader), 0);
    for i in 0..20 {
        let _: () = redis::cmd("SET")
            .arg(format!("fill{i}"))
            .arg(i)
            .query(&mut on_leader)
            .unwrap();
    }
    let applied = cluster.node(leader).info_u64("applied_index").unwrap();
    let (_, digest) = cluster.converged(&[1, 2, 3], applied);
    for id in [1, 2, 3] {
        cluster.node_mut(id).kill();
    }
    for id in [1, 2, 3] {
        cluster.node_mut(id).spawn();
    }
    let (_, restarted) = cluster.converged(&[1, 2, 3], applied);
    assert_eq!(restarted, digest, "the same state after the restart");
    for id in [1, 2, 3] {
        let node = cluster.node(id);
        assert_eq!(get_in(node, 3, "a").as_deref(), Some("in5"), "node {id}");
        assert_eq!(get_in(node, 5, "k").as_deref(), Some("three"), "node {id}");
    }
}
