//! Lua scripts in a three-node cluster of `keel serve` processes: the lock-release script on the
//! leader and on a follower, increments by script from many clients at once (each one applied
//! exactly once, atomically, though scripts run optimistically and retry), SCRIPT KILL of a
//! busy script that wrote (nothing of it applies) with `-BUSY` meanwhile, what scripts may not
//! call, and a clean shutdown while a script runs. Then, compared byte for byte with a
//! redis-server 7.0: scripts using the libraries Redis embeds (`cjson`, `cmsgpack`, `struct`,
//! `bit`), and transactions that queue scripts (run at EXEC, on the leader and through a
//! follower, WATCH included; one log entry each).

mod process;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use process::{Cluster, Raw};
use redis::Value;
use support::RedisServer;

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

/// Scripts using the libraries Redis embeds (`cjson`, `cmsgpack`, `struct`, `bit`), their
/// errors included: each answered by keel exactly as by redis-server 7.0, byte for byte.
const LIBRARY_SCRIPTS: &[&str] = &[
    "return cjson.encode({1,2,3})",
    "return cjson.encode({})",
    r#"return cjson.encode("a\"b\\c/d\n\r\t\b\f\1\127\200é")"#,
    "return cjson.encode({[1]=1,[3]=3, x=1})",
    "return cjson.encode({1,2,nil,4})",
    "return cjson.encode({a={b={1.5,2^53, 1e300, 0.1, -0, 1/3, 100, -1e-7, 123456789012345678}}})",
    "return cjson.encode({[1]=1,[20]=2})",
    "return cjson.encode({[1]=1,[10]=2})",
    "return cjson.encode({one=1, two=2, three=3, four=4, five=5, six=6, seven=7, [8]=8})",
    "return cjson.encode(0/0)",
    "return cjson.encode({[true]=1})",
    "return cjson.encode(redis.call)",
    "return cjson.encode()",
    "return {pcall(cjson.encode)}",
    "return {cjson.encode_invalid_numbers(true), cjson.encode(0/0), cjson.encode(-1/0)}",
    "return {cjson.encode_invalid_numbers('maybe')}",
    "return {cjson.encode_number_precision(3), cjson.encode(3.14159)}",
    "return {cjson.encode_max_depth(2), pcall(cjson.encode, {{{1}}})}",
    "return {cjson.encode_sparse_array(true, 3, 5), cjson.encode({[1]=1,[20]=2})}",
    "return {cjson.encode_sparse_array(nil, -1)}",
    "return {cjson.decode_invalid_numbers(false), pcall(cjson.decode, '0x10')}",
    r#"return table.concat(cjson.decode("[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]"), " ")"#,
    r#"return cjson.decode('"\\u00e9\\ud83d\\ude00\\n\\/"')"#,
    "return cjson.decode('[1,2')",
    r#"return cjson.decode('{"a" 1}')"#,
    r#"return cjson.decode('"\\ud800"')"#,
    r"return cjson.decode('1\0garbage')",
    "return {cjson.decode('0x10'), cjson.decode('+5'), cjson.decode('01'), tostring(cjson.decode('-inf'))}",
    "return {cjson.decode_max_depth(2), pcall(cjson.decode, '[[[1]]]')}",
    r#"return cjson.encode(cjson.decode('{"a":[1,2,{"b":null}],"c":"d","e":{"f":true}}'))"#,
    "return cjson.decode('[null, true, false]')[1] == cjson.null",
    "cjson.encode = 1",
    "return cmsgpack.pack(1, -1, 127, 128, 255, 256, 65535, 65536, 2^32-1, 2^32, -32, -33, \
     -128, -129, -32768, -32769, -2^31, -2^31-1, 2^63, -2^63, 0.5, 0.1, 1e300, 1/0, -0.0)",
    "return cmsgpack.pack('', string.rep('x', 31), string.rep('y', 32), string.rep('z', 256))",
    "return cmsgpack.pack({}, {1,2}, {a=1}, {1, nil, 3}, true, false, nil, {[1]=1, [2]=2, x=3})",
    "return cmsgpack.pack({s='x', n=1, t={1, {a={b=2}}}, f=1.5, k={[10]=1}})",
    "local a = {y=5} local b = {x=a} a.x = b return cmsgpack.pack(a)",
    "return {pcall(cmsgpack.pack)}",
    "return {cmsgpack.unpack(cmsgpack.pack(1, 'two', 3.5, true, {4, 5}))}",
    "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}",
    "return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 1)}",
    "return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), -1)}",
    r"return cmsgpack.unpack('\193')",
    r"return cmsgpack.unpack('\205\1')",
    r"return {cmsgpack.unpack('\207\255\255\255\255\255\255\255\255\211\128\0\0\0\0\0\0\0\208\128')}",
    "return {bit.tobit(2^32+5), bit.tobit(-1), bit.tobit(1.5), bit.tobit(2.5), bit.tobit('7')}",
    "return {bit.band(0xff, 0x0f, 0x3), bit.bor(1,2,4,8,16,32,64,128), bit.bxor(1,2), \
     bit.bnot(0), bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-256, 4), \
     bit.rol(0x12345678, 8), bit.ror(0x12345678, 8), bit.bswap(0x12345678)}",
    "return {bit.tohex(65535), bit.tohex(-1), bit.tohex(255, 2), bit.tohex(255, -4)}",
    "return bit.tohex(65535, 'x')",
    "return {pcall(bit.band, 1, nil)}",
    "return {struct.pack('>i2', 258), struct.pack('<i', -2), struct.pack('>I3', 65539), \
     struct.pack('!4 b i', 1, 2), struct.pack('s', 'hi'), struct.pack('c0', 'hello'), \
     struct.pack('>d', 1.5), struct.pack('<f', 0.5), struct.pack('>i16', -1)}",
    r"return {struct.unpack('>I3 b B', '\0\1\3\255\255')}",
    r"return {struct.unpack('b c0 s', '\3abcde\0')}",
    "return {struct.size('i'), struct.size('!8 b d'), struct.size('>hHlLT')}",
    "return struct.pack('c6', 'hello')",
    "return struct.pack('q', 1)",
    "return struct.pack('i')",
    "return {struct.unpack('c2', 'abc', 3)}",
    "return struct.size('s')",
    "return {set={a=true, b=true, c=true}}",
    "return {map={a=1, b={set={x=true, [2]=true}}}, set={ignored=true}}",
    "return {true, false, 1}",
    "redis.setresp(3) return {true, false, 1}",
];

/// What scripts answer a RESP3 client: maps, sets, doubles and booleans, as Redis 7.0 gives
/// them.
const RESP3_SCRIPTS: &[&str] = &[
    "return {map={a=1, b='two', c={1, 2}}}",
    "return {set={a=true, b=true, c=true, [1]=true}}",
    "return {double=3.5}",
    "return {1, {set={x=true}}, {map={k={double=0.1}}}}",
    "redis.setresp(3) return {map={n=cjson.decode('[1,2]')}}",
    "redis.setresp(3) return {true, false, {map={t=true}}}",
    "return {true, false}",
];

/// Sends `args` on each connection and checks the replies are the same bytes.
fn same_reply(redis: &mut Raw, keel: &mut Raw, args: &[&str], what: &str) -> String {
    redis.send(args);
    keel.send(args);
    let expected = redis.read_one(what);
    let got = keel.read_one(what);
    assert_eq!(got, expected, "{what}");
    got
}

#[test]
fn library_scripts_answer_as_redis_server() {
    let redis = RedisServer::start();
    let cluster = Cluster::new("script-libraries", &[1], &[], &[]);
    let leader = cluster.leader();
    let (mut expected, mut got) = (
        Raw::connect(redis.port),
        Raw::connect(cluster.node(leader).client_port),
    );
    for script in LIBRARY_SCRIPTS {
        same_reply(&mut expected, &mut got, &["EVAL", script, "0"], script);
        // Redis keeps cjson's settings until its Lua state is reset; keel's last one script.
        same_reply(&mut expected, &mut got, &["SCRIPT", "FLUSH"], script);
    }
    for raw in [&mut expected, &mut got] {
        raw.send(&["HELLO", "3"]);
        raw.read_one("HELLO 3");
    }
    for script in RESP3_SCRIPTS {
        same_reply(&mut expected, &mut got, &["EVAL", script, "0"], script);
    }
}

/// One step of a transaction session: on connection 0 or 1, a request.
type Step<'a> = (usize, &'a [&'a str]);

/// Transactions that queue scripts, as Redis runs them: at EXEC, with the other commands;
/// a script's error in its place in EXEC's array; WATCH as for any transaction.
const TRANSACTIONS: &[Step] = &[
    (0, &["SET", "{p}n", "1"]),
    (0, &["MULTI"]),
    (0, &["INCR", "{p}n"]),
    (
        0,
        &[
            "EVAL",
            "return redis.call('incrby', KEYS[1], ARGV[1])",
            "1",
            "{p}n",
            "10",
        ],
    ),
    (
        0,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'x') return redis.call('get', KEYS[2])",
            "2",
            "{p}s",
            "{p}n",
        ],
    ),
    (0, &["GET", "{p}s"]),
    (0, &["EXEC"]),
    (0, &["MULTI"]),
    (0, &["SET", "{p}a", "1"]),
    (
        0,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'written') error('boom')",
            "1",
            "{p}b",
        ],
    ),
    (
        0,
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "{p}s"],
    ),
    (0, &["EVAL", "return {", "0"]),
    (
        0,
        &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
    ),
    (
        0,
        &[
            "EVAL_RO",
            "return redis.call('set', KEYS[1], 'no')",
            "1",
            "{p}c",
        ],
    ),
    (0, &["MGET", "{p}a", "{p}b", "{p}c"]),
    (0, &["EXEC"]),
    (0, &["MULTI"]),
    (0, &["SCRIPT", "LOAD", "return 'loaded'"]),
    (
        0,
        &["EVALSHA", "b534286061d4b9e4026607613b95c06c06015ae8", "0"],
    ),
    (
        0,
        &[
            "EVAL",
            "return cjson.encode({KEYS[1] == nil, ARGV[1]})",
            "0",
            "x",
        ],
    ),
    (0, &["EXEC"]),
    (0, &["WATCH", "{p}w"]),
    (1, &["SET", "{p}w", "changed"]),
    (0, &["MULTI"]),
    (
        0,
        &[
            "EVAL",
            "return redis.call('set', KEYS[1], 'script')",
            "1",
            "{p}w",
        ],
    ),
    (0, &["EXEC"]),
    (0, &["GET", "{p}w"]),
    (0, &["WATCH", "{p}w"]),
    (0, &["MULTI"]),
    (
        0,
        &[
            "EVAL",
            "return redis.call('set', KEYS[1], 'script')",
            "1",
            "{p}w",
        ],
    ),
    (0, &["EXEC"]),
    (0, &["GET", "{p}w"]),
    (0, &["MULTI"]),
    (0, &["EVAL", "return 1"]),
    (0, &["EXEC"]),
];

/// Runs [`TRANSACTIONS`] on redis-server and on keel node `port` (keys prefixed `prefix`).
fn transactions_compare(redis_port: u16, port: u16, prefix: &str) {
    let mut redis = [Raw::connect(redis_port), Raw::connect(redis_port)];
    let mut keel = [Raw::connect(port), Raw::connect(port)];
    for (connection, step) in TRANSACTIONS {
        let args: Vec<String> = step.iter().map(|a| a.replace("{p}", prefix)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let what = format!("{prefix}: {step:?}");
        let (r, k) = (&mut redis[*connection], &mut keel[*connection]);
        r.send(&args);
        k.send(&args);
        let expected = r.read_one(&what);
        assert_eq!(k.read_one(&what), expected, "{what}");
    }
}

#[test]
fn scripts_in_transactions_run_at_exec_as_in_redis_server() {
    let redis = RedisServer::start();
    let cluster = Cluster::new("script-transactions", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    transactions_compare(redis.port, cluster.node(leader).client_port, "lead:");
    // On a follower: the transaction goes to the leader whole, and answers the same.
    transactions_compare(redis.port, cluster.node(follower).client_port, "follow:");
    // One entry for the whole transaction: a script's write and a command's apply together.
    let port = cluster.node(leader).client_port;
    let applied = || process::info_field(port, "raft", "applied_index");
    let before = applied();
    let mut keel = cluster.node(follower).connect().unwrap();
    let (set, script): (String, i64) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("pipe:k")
        .arg("5")
        .cmd("EVAL")
        .arg(INCREMENT)
        .arg(1)
        .arg("pipe:k")
        .query(&mut keel)
        .unwrap();
    assert_eq!((set.as_str(), script), ("OK", 6));
    assert_eq!(applied(), before + 1, "one log entry");
}
