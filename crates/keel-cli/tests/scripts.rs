//! Lua scripts in a three-node cluster of `keel serve` processes: the lock-release script on the
//! leader and on a follower, increments by script from many clients at once (each one applied
//! exactly once, atomically, though scripts run optimistically and retry), SCRIPT KILL of a
//! busy script that wrote (nothing of it applies) with `-BUSY` meanwhile, what scripts may not
//! call, and a clean shutdown while a script runs.

mod process;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use process::Cluster;
use redis::Value;

const RELEASE: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"#;

const INCREMENT: &str = r#"
local n = tonumber(redis.call("get", KEYS[1]) or "0") + 1
redis.call("set", KEYS[1], n)
return n"#;

fn eval<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    script: &str,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<T> {
    redis::cmd("EVAL")
        .arg(script)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query(con)
}

#[test]
#[expect(clippy::too_many_lines)]
fn scripts_release_locks_count_exactly_once_and_can_be_killed() {
    let mut cluster = Cluster::new("scripts", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();

    // The lock release script, on both kinds of node.
    for id in [leader, follower] {
        let mut con = cluster.node(id).connect().expect("connect");
        let lock = format!("lock{id}");
        let taken: Value = redis::cmd("SET")
            .arg(&lock)
            .arg("token-a")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut con)
            .unwrap();
        assert_eq!(taken, Value::Okay, "node {id}");
        let released: i64 = eval(&mut con, RELEASE, &[&lock], &["token-b"]).unwrap();
        assert_eq!(released, 0, "node {id}: not the holder's token");
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE)
            .query(&mut con)
            .unwrap();
        let released: i64 = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(&lock)
            .arg("token-a")
            .query(&mut con)
            .unwrap();
        assert_eq!(released, 1, "node {id}: the holder releases");
        let value: Option<String> = redis::cmd("GET").arg(&lock).query(&mut con).unwrap();
        assert_eq!(value, None, "node {id}");
    }

    // Concurrent increments by script, through the leader and a follower: every call that
    // answered a number applied exactly once, and the numbers are 1..=n.
    let clients: Vec<_> = (0..4)
        .map(|n| {
            let id = if n % 2 == 0 { leader } else { follower };
            let client = cluster.node(id).client();
            std::thread::spawn(move || {
                let mut con = client.get_connection().expect("connect");
                let mut seen = Vec::new();
                let mut retries = 0;
                for _ in 0..50 {
                    match eval::<i64>(&mut con, INCREMENT, &["counter"], &[]) {
                        Ok(n) => seen.push(n),
                        Err(error) if error.to_string().to_uppercase().contains("TRYAGAIN") => {
                            retries += 1
                        }
                        Err(error) => panic!("{error}"),
                    }
                }
                (seen, retries)
            })
        })
        .collect();
    let mut answered = BTreeSet::new();
    let mut calls = 0;
    for client in clients {
        let (seen, _retries) = client.join().expect("client");
        calls += seen.len();
        answered.extend(seen);
    }
    assert_eq!(answered.len(), calls, "no two calls saw the same count");
    assert_eq!(
        answered,
        (1..=calls as i64).collect::<BTreeSet<_>>(),
        "every answered increment applied once, in some order"
    );
    let mut con = cluster.node(leader).connect().unwrap();
    let total: i64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
    assert_eq!(total, calls as i64);
    assert!(
        calls >= 190,
        "reruns take turns, so nearly every call succeeds: {calls}"
    );

    // A busy script that wrote is killed: -BUSY meanwhile, nothing of it applies.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lua-time-limit")
        .arg(100)
        .query(&mut con)
        .unwrap();
    let client = cluster.node(leader).client();
    let busy = std::thread::spawn(move || {
        let mut con = client.get_connection().unwrap();
        eval::<Value>(
            &mut con,
            "redis.call('set', KEYS[1], 'half') while true do end",
            &["killed"],
            &[],
        )
    });
    let refused =
        process::eventually_within("-BUSY", Duration::from_secs(10), || {
            match redis::cmd("GET").arg("counter").query::<i64>(&mut con) {
                Err(error) if error.to_string().contains("BUSY") => Some(error),
                _ => None,
            }
        });
    assert!(
        refused.to_string().contains("busy running a script"),
        "{refused}"
    );
    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut con).unwrap();
    let killed = busy.join().unwrap().expect_err("killed");
    assert!(killed.to_string().contains("SCRIPT KILL"), "{killed}");
    let value: Option<String> = redis::cmd("GET").arg("killed").query(&mut con).unwrap();
    assert_eq!(value, None, "a killed script's writes are never proposed");
    let none: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("KILL").query(&mut con);
    let none = none.unwrap_err().to_string();
    assert!(none.to_uppercase().contains("NOTBUSY"), "{none}");

    // What a script may not call, and an error inside one.
    let keys: redis::RedisResult<Value> =
        eval(&mut con, "return redis.call('keys', '*')", &[], &[]);
    assert!(keys
        .unwrap_err()
        .to_string()
        .contains("cannot be called from a script"));
    let ro: redis::RedisResult<Value> = redis::cmd("EVAL_RO")
        .arg("return redis.call('set', KEYS[1], 'x')")
        .arg(1)
        .arg("ro")
        .query(&mut con);
    assert!(ro.unwrap_err().to_string().contains("read-only"));
    let started = Instant::now();
    let nested: Value = eval(&mut con, "return {1, 'two', {3}}", &[], &[]).unwrap();
    assert_eq!(
        nested,
        Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"two".to_vec()),
            Value::Array(vec![Value::Int(3)])
        ])
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // A script that never ends does not hold up a clean shutdown: the node kills its scripts as
    // it stops (none outlives the runtime its reads go through).
    let client = cluster.node(follower).client();
    let endless = std::thread::spawn(move || {
        let mut con = client.get_connection().unwrap();
        eval::<Value>(&mut con, "while true do end", &[], &[])
    });
    let mut con = cluster.node(follower).connect().unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(100)
        .query(&mut con)
        .unwrap();
    process::eventually_within("-BUSY on the follower", Duration::from_secs(10), || {
        match redis::cmd("PING").query::<String>(&mut con) {
            Err(error) if error.to_string().contains("BUSY") => Some(()),
            _ => None,
        }
    });
    cluster.node(follower).signal("TERM");
    let status = cluster
        .node_mut(follower)
        .wait_exit(Duration::from_secs(30));
    let status = status.expect("the node exits though a script runs");
    assert!(status.success(), "a clean exit: {status}");
    assert!(
        endless.join().unwrap().is_err(),
        "the script's client gets no reply"
    );
}
