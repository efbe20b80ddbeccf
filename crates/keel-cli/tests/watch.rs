//! WATCH in a three-node cluster of `keel serve` processes, on the leader and on a follower (whose
//! WATCH reads the watch point from the leader and whose transaction is forwarded with its
//! watched keys): EXEC runs when nothing changed, and answers null, running nothing, when
//! another client changed a watched key, deleted it, or it expired (the null array, as Redis).

mod process;

use process::Cluster;
use redis::Value;

/// WATCH key, GET key, MULTI, SET key new, EXEC; `meanwhile` runs between the GET and MULTI.
/// Returns EXEC's reply.
fn optimistic_update(
    con: &mut redis::Connection,
    key: &str,
    new: &str,
    meanwhile: impl FnOnce(),
) -> Value {
    let _: () = redis::cmd("WATCH").arg(key).query(con).expect("WATCH");
    let _: Option<String> = redis::cmd("GET").arg(key).query(con).expect("GET");
    meanwhile();
    let _: () = redis::cmd("MULTI").query(con).expect("MULTI");
    let queued: String = redis::cmd("SET").arg(key).arg(new).query(con).expect("SET");
    assert_eq!(queued, "QUEUED");
    redis::cmd("EXEC").query(con).expect("EXEC")
}

fn get(port_node: &process::Node, key: &str) -> Option<String> {
    process::get(port_node, key)
}

#[test]
fn watch_aborts_exec_exactly_when_a_watched_key_changed() {
    let cluster = Cluster::new("watch", &[1, 2, 3], &[], &["--time-tick-ms", "20"]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    for id in [leader, follower] {
        let node = cluster.node(id);
        let other = cluster.node(if id == leader { follower } else { leader });
        let key = format!("w{id}");
        process::set(other, &key, "0");
        let mut con = node.connect().expect("connect");

        // Nothing changed: the transaction runs.
        let ran = optimistic_update(&mut con, &key, "1", || {});
        assert_eq!(ran, Value::Array(vec![Value::Okay]), "node {id}");
        assert_eq!(get(other, &key).as_deref(), Some("1"));

        // Another client writes the key after WATCH: null, nothing ran.
        let aborted = optimistic_update(&mut con, &key, "2", || process::set(other, &key, "x"));
        assert_eq!(aborted, Value::Nil, "node {id}: changed since WATCH");
        assert_eq!(get(other, &key).as_deref(), Some("x"));

        // Deleted after WATCH: null.
        let aborted = optimistic_update(&mut con, &key, "3", || {
            let _: i64 = process::query(other, redis::cmd("DEL").arg(&key));
        });
        assert_eq!(aborted, Value::Nil, "node {id}: deleted since WATCH");
        assert_eq!(get(other, &key), None);

        // Expired after WATCH: null.
        let _: () = process::query(
            other,
            redis::cmd("SET").arg(&key).arg("short").arg("PX").arg(300),
        );
        let aborted = optimistic_update(&mut con, &key, "4", || {
            std::thread::sleep(std::time::Duration::from_millis(600));
        });
        assert_eq!(aborted, Value::Nil, "node {id}: expired since WATCH");
        assert_eq!(get(other, &key), None);

        // UNWATCH forgets: a change after it does not abort.
        let _: () = redis::cmd("WATCH").arg(&key).query(&mut con).unwrap();
        let _: () = redis::cmd("UNWATCH").query(&mut con).unwrap();
        process::set(other, &key, "y");
        let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
        let _: String = redis::cmd("SET")
            .arg(&key)
            .arg("5")
            .query(&mut con)
            .unwrap();
        let ran: Value = redis::cmd("EXEC").query(&mut con).unwrap();
        assert_eq!(ran, Value::Array(vec![Value::Okay]), "node {id}: unwatched");
        assert_eq!(get(other, &key).as_deref(), Some("5"));

        // On the wire: the null array, as Redis answers (RESP2 `*-1`, RESP3 `_`).
        for (hello, aborted) in [("HELLO 2", "*-1\r\n"), ("HELLO 3", "_\r\n")] {
            let mut raw = process::Raw::connect(node.client_port);
            raw.request(hello);
            assert_eq!(raw.request(&format!("WATCH {key}")), "+OK\r\n");
            process::set(other, &key, "z");
            assert_eq!(raw.request("MULTI"), "+OK\r\n");
            assert_eq!(raw.request(&format!("SET {key} 6")), "+QUEUED\r\n");
            assert_eq!(raw.request("EXEC"), aborted, "node {id}, {hello}");
        }
    }
}
