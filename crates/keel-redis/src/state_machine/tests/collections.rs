//! Lists, hashes and sets: Redis's replies (cases from Redis's `type/list.tcl`, `type/hash.tcl`
//! and `type/set.tcl`), WRONGTYPE both ways, and the state machine's bookkeeping: digest,
//! snapshots, versions for WATCH, counted bytes, empty collections removed.

use super::expiry::watched_now;
use super::*;
use crate::command::Command;

/// Runs one command line as the next entry of `log` (a write) or as a read of its state.
pub(super) fn run(log: &mut Log, line: &str) -> Reply {
    let args: Vec<Bytes> = line.split(' ').map(b).collect();
    match Command::parse(&args).unwrap_or_else(|e| panic!("{line}: {e}")) {
        Command::Write(write) => {
            log.seq += 1;
            let seq = log.seq;
            log.apply_logged(1, seq, write.into()).into_reply()
        }
        Command::Read(read) => log.sm.read(&read),
        other => panic!("{line} is {other:?}"),
    }
}

pub(super) fn bulks(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|i| Reply::Bulk(b(i))).collect())
}

pub(super) fn bulk(item: &str) -> Reply {
    Reply::Bulk(b(item))
}

/// What Redis answers as a set.
fn members(items: &[&str]) -> Reply {
    Reply::Set(items.iter().map(|i| Reply::Bulk(b(i))).collect())
}

fn double(text: &str) -> Reply {
    Reply::Double(b(text))
}

/// `WITHSCORES`: members with their scores.
fn scored(pairs: &[(&str, &str)]) -> Reply {
    Reply::Pairs(pairs.iter().map(|(m, s)| (bulk(m), double(s))).collect())
}

/// `reply` as a RESP2 and as a RESP3 client reads it.
fn wire(reply: &Reply) -> (String, String) {
    let encoded = |version| {
        let mut out = bytes::BytesMut::new();
        keel_resp::encode(reply, version, &mut out);
        String::from_utf8(out.to_vec()).expect("text")
    };
    (
        encoded(keel_resp::ProtocolVersion::Resp2),
        encoded(keel_resp::ProtocolVersion::Resp3),
    )
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn list_commands_answer_as_redis() {
    let mut log = Log::new();
    assert_eq!(run(&mut log, "LPUSH l b a"), Reply::Integer(2));
    assert_eq!(run(&mut log, "RPUSH l c d"), Reply::Integer(4));
    assert_eq!(run(&mut log, "LRANGE l 0 -1"), bulks(&["a", "b", "c", "d"]));
    assert_eq!(run(&mut log, "LRANGE l -2 100"), bulks(&["c", "d"]));
    assert_eq!(run(&mut log, "LRANGE l 3 1"), bulks(&[]));
    assert_eq!(run(&mut log, "LINDEX l -1"), bulk("d"));
    assert_eq!(run(&mut log, "LINDEX l 4"), Reply::Null);
    assert_eq!(run(&mut log, "LLEN l"), Reply::Integer(4));
    assert_eq!(run(&mut log, "LPUSHX missing a"), Reply::Integer(0));
    assert_eq!(run(&mut log, "EXISTS missing"), Reply::Integer(0));
    assert_eq!(run(&mut log, "LSET l 1 B"), Reply::OK);
    assert_eq!(
        run(&mut log, "LSET l 9 x"),
        Reply::error("ERR index out of range")
    );
    assert_eq!(
        run(&mut log, "LSET nolist 0 x"),
        Reply::error("ERR no such key")
    );
    assert_eq!(run(&mut log, "LINSERT l BEFORE c x"), Reply::Integer(5));
    assert_eq!(run(&mut log, "LINSERT l AFTER zz x"), Reply::Integer(-1));
    assert_eq!(run(&mut log, "LINSERT nolist AFTER a x"), Reply::Integer(0));
    assert_eq!(
        run(&mut log, "LRANGE l 0 -1"),
        bulks(&["a", "B", "x", "c", "d"])
    );
    assert_eq!(run(&mut log, "RPUSH l x a x"), Reply::Integer(8));
    assert_eq!(run(&mut log, "LREM l -2 x"), Reply::Integer(2));
    assert_eq!(
        run(&mut log, "LRANGE l 0 -1"),
        bulks(&["a", "B", "x", "c", "d", "a"])
    );
    assert_eq!(run(&mut log, "LREM l 0 a"), Reply::Integer(2));
    assert_eq!(run(&mut log, "LTRIM l 1 -1"), Reply::OK);
    assert_eq!(run(&mut log, "LRANGE l 0 -1"), bulks(&["x", "c", "d"]));
    assert_eq!(run(&mut log, "LPOP l"), bulk("x"));
    assert_eq!(run(&mut log, "RPOP l 5"), bulks(&["d", "c"]));
    // The last element gone, the key is gone.
    assert_eq!(run(&mut log, "EXISTS l"), Reply::Integer(0));
    assert_eq!(run(&mut log, "LPOP l"), Reply::Null);
    // With a count, a missing key is the null array (RESP2 `*-1`), as in Redis.
    assert_eq!(run(&mut log, "LPOP l 2"), Reply::NullArray);
    assert_eq!(run(&mut log, "RPOP l 0"), Reply::NullArray);
    assert_eq!(run(&mut log, "RPUSH src 1 2 3"), Reply::Integer(3));
    assert_eq!(run(&mut log, "RPOPLPUSH src dst"), bulk("3"));
    assert_eq!(run(&mut log, "LMOVE src dst LEFT RIGHT"), bulk("1"));
    assert_eq!(run(&mut log, "LRANGE dst 0 -1"), bulks(&["3", "1"]));
    // A list moved onto itself rotates.
    assert_eq!(run(&mut log, "RPOPLPUSH dst dst"), bulk("1"));
    assert_eq!(run(&mut log, "LRANGE dst 0 -1"), bulks(&["1", "3"]));
    assert_eq!(run(&mut log, "TYPE dst"), Reply::simple("list"));
}

#[test]
fn hash_commands_answer_as_redis() {
    let mut log = Log::new();
    assert_eq!(run(&mut log, "HSET h a 1 b 2"), Reply::Integer(2));
    assert_eq!(run(&mut log, "HSET h a 10 c 3"), Reply::Integer(1));
    assert_eq!(run(&mut log, "HMSET h d 4"), Reply::OK);
    assert_eq!(run(&mut log, "HSETNX h a 99"), Reply::Integer(0));
    assert_eq!(run(&mut log, "HSETNX h e 5"), Reply::Integer(1));
    assert_eq!(run(&mut log, "HGET h a"), bulk("10"));
    assert_eq!(run(&mut log, "HGET h zz"), Reply::Null);
    assert_eq!(
        run(&mut log, "HMGET h a zz b"),
        Reply::Array(vec![bulk("10"), Reply::Null, bulk("2")])
    );
    assert_eq!(run(&mut log, "HLEN h"), Reply::Integer(5));
    assert_eq!(run(&mut log, "HEXISTS h c"), Reply::Integer(1));
    assert_eq!(run(&mut log, "HSTRLEN h a"), Reply::Integer(2));
    assert_eq!(run(&mut log, "HKEYS h"), bulks(&["a", "b", "c", "d", "e"]));
    assert_eq!(run(&mut log, "HVALS h"), bulks(&["10", "2", "3", "4", "5"]));
    let Reply::Map(all) = run(&mut log, "HGETALL h") else {
        panic!("a map")
    };
    assert_eq!(all[0], (bulk("a"), bulk("10")));
    assert_eq!(run(&mut log, "HINCRBY h a 5"), Reply::Integer(15));
    assert_eq!(run(&mut log, "HINCRBY h new -3"), Reply::Integer(-3));
    assert_eq!(run(&mut log, "HSET h s abc"), Reply::Integer(1));
    assert_eq!(
        run(&mut log, "HINCRBY h s 1"),
        Reply::error("ERR hash value is not an integer")
    );
    assert_eq!(
        run(&mut log, "HSET h big 9223372036854775807"),
        Reply::Integer(1)
    );
    assert_eq!(
        run(&mut log, "HINCRBY h big 1"),
        Reply::error("ERR increment or decrement would overflow")
    );
    assert_eq!(run(&mut log, "HINCRBYFLOAT h f 1.5"), bulk("1.5"));
    assert_eq!(run(&mut log, "HINCRBYFLOAT h f 0.25"), bulk("1.75"));
    assert_eq!(
        run(&mut log, "HINCRBYFLOAT h s 1"),
        Reply::error("ERR hash value is not a float")
    );
    assert_eq!(run(&mut log, "HDEL h a zz b"), Reply::Integer(2));
    assert_eq!(run(&mut log, "TYPE h"), Reply::simple("hash"));
    let fields = ["c", "d", "e", "new", "s", "big", "f"];
    assert_eq!(
        run(&mut log, &format!("HDEL h {}", fields.join(" "))),
        Reply::Integer(7)
    );
    assert_eq!(run(&mut log, "EXISTS h"), Reply::Integer(0));
}

#[test]
fn set_commands_answer_as_redis() {
    let mut log = Log::new();
    assert_eq!(run(&mut log, "SADD s c a b a"), Reply::Integer(3));
    assert_eq!(run(&mut log, "SADD s a d"), Reply::Integer(1));
    assert_eq!(run(&mut log, "SMEMBERS s"), members(&["a", "b", "c", "d"]));
    assert_eq!(run(&mut log, "SISMEMBER s b"), Reply::Integer(1));
    assert_eq!(
        run(&mut log, "SMISMEMBER s b zz"),
        Reply::Array(vec![Reply::Integer(1), Reply::Integer(0)])
    );
    assert_eq!(run(&mut log, "SCARD s"), Reply::Integer(4));
    assert_eq!(run(&mut log, "SREM s d zz"), Reply::Integer(1));
    assert_eq!(run(&mut log, "SADD t b c e"), Reply::Integer(3));
    assert_eq!(run(&mut log, "SINTER s t"), members(&["b", "c"]));
    assert_eq!(
        run(&mut log, "SUNION s t missing"),
        members(&["a", "b", "c", "e"])
    );
    assert_eq!(run(&mut log, "SDIFF s t"), members(&["a"]));
    assert_eq!(run(&mut log, "SINTER s missing"), members(&[]));
    assert_eq!(run(&mut log, "SINTERCARD 2 s t"), Reply::Integer(2));
    assert_eq!(run(&mut log, "SINTERCARD 2 s t LIMIT 1"), Reply::Integer(1));
    assert_eq!(run(&mut log, "SUNIONSTORE u s t"), Reply::Integer(4));
    assert_eq!(run(&mut log, "SMEMBERS u"), members(&["a", "b", "c", "e"]));
    // The destination is replaced whatever it held, and an empty result removes it.
    run(&mut log, "SET str x");
    assert_eq!(
        run(&mut log, "SINTERSTORE str s missing"),
        Reply::Integer(0)
    );
    assert_eq!(run(&mut log, "EXISTS str"), Reply::Integer(0));
    assert_eq!(run(&mut log, "SMOVE s t a"), Reply::Integer(1));
    assert_eq!(run(&mut log, "SMOVE s t zz"), Reply::Integer(0));
    assert_eq!(run(&mut log, "SMEMBERS t"), members(&["a", "b", "c", "e"]));
    assert_eq!(run(&mut log, "SMEMBERS missing"), members(&[]));
    assert!(matches!(run(&mut log, "SRANDMEMBER t -3"), Reply::Array(drawn) if drawn.len() == 3));
    // SPOP removes what it answers, the same members on every replica.
    let (mut one, mut two) = (Log::new(), Log::new());
    for line in ["SADD p 1 2 3 4 5 6", "SPOP p 2", "SPOP p"] {
        assert_eq!(run(&mut one, line), run(&mut two, line));
    }
    assert_eq!(run(&mut one, "SCARD p"), Reply::Integer(3));
    assert_eq!(one.sm.state_digest(), two.sm.state_digest());
    assert_eq!(run(&mut one, "TYPE p"), Reply::simple("set"));
    assert!(matches!(run(&mut one, "SPOP p 2"), Reply::Set(popped) if popped.len() == 2));
    assert_eq!(run(&mut one, "SPOP missing 2"), members(&[]));
}

#[test]
fn every_command_refuses_a_key_of_another_kind_and_set_replaces_any() {
    let mut log = Log::new();
    run(&mut log, "RPUSH l a");
    run(&mut log, "SET s v");
    run(&mut log, "HSET h f v");
    let wrong = Reply::error(WRONGTYPE);
    for line in [
        "GET l",
        "INCR l",
        "APPEND l x",
        "SETRANGE l 0 x",
        "GETRANGE l 0 1",
        "STRLEN l",
        "GETDEL l",
        "GETEX l PERSIST",
        "SET l x GET",
        "SETBIT l 1 1",
        "GETBIT l 1",
        "BITCOUNT l",
        "INCRBYFLOAT l 1",
        "LPUSH s x",
        "LRANGE s 0 -1",
        "LPOP h",
        "HSET l f v",
        "HGET s f",
        "SADD h m",
        "SMEMBERS l",
        "SINTER l h",
        "RPOPLPUSH l h",
        "SMOVE h s m",
    ] {
        assert_eq!(run(&mut log, line), wrong, "{line}");
    }
    assert_eq!(
        run(&mut log, "MGET s l"),
        Reply::Array(vec![bulk("v"), Reply::Null])
    );
    assert_eq!(
        run(&mut log, "LCS s l"),
        Reply::error("WRONGTYPE The specified keys must contain string values")
    );
    // Nothing changed, and a plain SET replaces a list.
    assert_eq!(run(&mut log, "LRANGE l 0 -1"), bulks(&["a"]));
    assert_eq!(run(&mut log, "SET l now-a-string"), Reply::OK);
    assert_eq!(run(&mut log, "GET l"), bulk("now-a-string"));
    assert_eq!(run(&mut log, "TYPE l"), Reply::simple("string"));
    assert_eq!(log.sm.used_bytes(), {
        let mut fresh = Log::new();
        run(&mut fresh, "SET l now-a-string");
        run(&mut fresh, "SET s v");
        run(&mut fresh, "HSET h f v");
        fresh.sm.used_bytes()
    });
}

/// A sequence touching every command of the three kinds, and some keys twice over.
const SCRIPT: &[&str] = &[
    "RPUSH l a b c",
    "LPUSH l z",
    "LSET l 2 B",
    "LINSERT l AFTER B x",
    "LREM l 1 a",
    "HSET h f1 v1 f2 v2",
    "HINCRBY h n 7",
    "HINCRBYFLOAT h x 0.5",
    "SADD s m1 m2 m3",
    "SREM s m2",
    "SADD t m3 m4",
    "SUNIONSTORE u s t",
    "LMOVE l l2 RIGHT LEFT",
    "SMOVE t s m4",
    "COPY l lcopy",
    "RENAME h h2",
    "HDEL h2 f1",
    "SPOP u",
    "LTRIM l 0 1",
    "EXPIRE s 100",
    "ZADD zs 1 a 2 b 3 c",
    "ZINCRBY zs 5 a",
    "ZREM zs b",
    "ZPOPMIN zs",
    "COPY zs zs2",
];

#[test]
fn replicas_agree_snapshots_round_trip_and_every_change_moves_the_digest() {
    let mut one = Log::new();
    let mut two = Log::new();
    let mut digests = vec![one.sm.state_digest()];
    for (at, line) in SCRIPT.iter().enumerate() {
        run(&mut one, line);
        run(&mut two, line);
        if at == SCRIPT.len() / 2 {
            // One replica catches up from a snapshot halfway.
            two.sm = KvStateMachine::from_snapshot(&two.sm.snapshot()).unwrap();
        }
        assert_eq!(one.sm.state_digest(), two.sm.state_digest(), "after {line}");
        assert!(
            !digests.contains(&one.sm.state_digest()),
            "{line} moved nothing"
        );
        digests.push(one.sm.state_digest());
    }
    let restored = KvStateMachine::from_snapshot(&one.sm.snapshot()).unwrap();
    assert_eq!(restored, one.sm);
    assert_eq!(restored.state_digest(), one.sm.state_digest());
    assert_eq!(restored.used_bytes(), one.sm.used_bytes());
    // A state built in another order holds the same content: the same digest.
    let mut other = Log::new();
    for line in ["SADD s b a", "HSET h y 2 x 1", "RPUSH l 1 2"] {
        run(&mut other, line);
    }
    let mut same = Log::new();
    for line in [
        "RPUSH l 1 2",
        "HSET h x 1",
        "SADD s a",
        "HSET h y 2",
        "SADD s b",
    ] {
        run(&mut same, line);
    }
    assert_eq!(other.sm.state_digest(), same.sm.state_digest());
    // The empty state again: every collection removed leaves digest and bytes at zero.
    for line in ["DEL l h", "SREM s a b"] {
        run(&mut same, line);
    }
    assert_eq!((same.sm.dbs[0].digest, same.sm.used_bytes()), (0, 0));
}

#[test]
fn copies_are_independent_and_snapshot_views_keep_what_they_saw() {
    let mut log = Log::new();
    run(&mut log, "RPUSH l a b");
    run(&mut log, "COPY l c");
    let view = log.sm.snapshot_view();
    let seen = view.encode();
    run(&mut log, "RPUSH c x");
    run(&mut log, "LPOP l");
    assert_eq!(run(&mut log, "LRANGE l 0 -1"), bulks(&["b"]));
    assert_eq!(run(&mut log, "LRANGE c 0 -1"), bulks(&["a", "b", "x"]));
    assert_eq!(view.encode(), seen);
    let then = KvStateMachine::from_snapshot(&seen).unwrap();
    assert_eq!(
        then.read(&ReadCommand::Type { key: b("c") }),
        Reply::simple("list")
    );
}

#[test]
fn a_watched_collection_changes_only_when_its_content_does() {
    let mut log = Log::new();
    run(&mut log, "SADD s a");
    run(&mut log, "RPUSH l a");
    let s = watched_now(&log, "s");
    let l = watched_now(&log, "l");
    // Adding a member already there changes nothing.
    run(&mut log, "SADD s a");
    assert!(!log.sm.watched_changed(&s));
    run(&mut log, "RPUSH l b");
    assert!(log.sm.watched_changed(&l));
    // Emptied, the key is removed: a change too.
    let l = watched_now(&log, "l");
    run(&mut log, "LPOP l 2");
    assert!(log.sm.watched_changed(&l));
}

#[test]
fn collection_commands_travel_in_the_log_as_their_arguments() {
    let args: Vec<Bytes> = "RPUSH k a b".split(' ').map(b).collect();
    let Ok(Command::Write(write)) = Command::parse(&args) else {
        panic!()
    };
    let entry = LogCommand::new(1, 1, 0, write.clone()).encode();
    assert_eq!(
        LogCommand::decode(&entry).unwrap().command,
        LoggedCommand::Write(write.clone())
    );
    let read_args: Vec<Bytes> = "LRANGE k 0 -1".split(' ').map(b).collect();
    let Ok(Command::Read(read)) = Command::parse(&read_args) else {
        panic!()
    };
    let exec = LoggedCommand::Exec(vec![QueuedCommand::Write(write), QueuedCommand::Read(read)]);
    let entry = LogCommand::new(1, 2, 0, exec.clone()).encode();
    assert_eq!(LogCommand::decode(&entry).unwrap().command, exec);
    // Arguments that parse to another kind of command, or not at all, are refused.
    for forged in ["SET k v", "LRANGE k 0 -1", "RPUSH k", "NOSUCH x"] {
        let mut entry = LogCommand::new(1, 3, 0, set("k", "v")).encode_to_vec();
        entry.truncate(25);
        entry.push(128);
        let words: Vec<&str> = forged.split(' ').collect();
        entry.extend_from_slice(&(words.len() as u32).to_le_bytes());
        for word in words {
            entry.extend_from_slice(&(word.len() as u32).to_le_bytes());
            entry.extend_from_slice(word.as_bytes());
        }
        assert_eq!(
            LogCommand::decode(&Bytes::from(entry.clone())),
            Err(DecodeError::InvalidArguments(128)),
            "{forged}"
        );
    }
}

#[test]
fn scan_and_type_see_every_kind() {
    let mut log = Log::new();
    for line in ["SET s v", "RPUSH l a", "HSET h f v", "SADD t m"] {
        run(&mut log, line);
    }
    for (kind, key) in [("string", "s"), ("list", "l"), ("hash", "h"), ("set", "t")] {
        assert_eq!(
            run(&mut log, &format!("SCAN 0 COUNT 100 TYPE {kind}")),
            Reply::Array(vec![bulk("0"), bulks(&[key])])
        );
    }
    assert_eq!(
        run(&mut log, "SCAN 0 TYPE zset"),
        Reply::Array(vec![bulk("0"), bulks(&[])])
    );
    assert_eq!(run(&mut log, "DBSIZE"), Reply::Integer(4));
}

#[test]
fn a_snapshot_of_the_format_before_collections_still_restores() {
    let mut log = Log::new();
    log.stamp_ms = super::expiry::T0;
    run(&mut log, "SET a 1");
    run(&mut log, "SET b 2 PX 5000");
    let v4 = snapshot::encode_version(&log.sm, 4);
    assert_eq!(&v4[8..12], &4u32.to_le_bytes());
    let restored = KvStateMachine::from_snapshot(&v4).unwrap();
    assert_eq!(restored, log.sm);
    assert_eq!(restored.state_digest(), log.sm.state_digest());
    // A collection in format 6 with a damaged kind tag is refused, not guessed at.
    run(&mut log, "RPUSH l x");
    let good = log.sm.snapshot();
    let at = good
        .windows(2)
        .position(|w| w == b"l\x01")
        .expect("the list's key and tag")
        + 1;
    let mut bad = good.clone();
    bad[at] = 9;
    bad.truncate(bad.len() - 4);
    let crc = crc32c::crc32c(&bad);
    bad.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        KvStateMachine::from_snapshot(&bad),
        Err(SnapshotError::Malformed("unknown kind of value"))
    );
}

#[test]
fn object_memory_usage_and_srandmember() {
    let mut log = Log::new();
    for line in [
        "SET n 123",
        "SET s hello",
        "RPUSH l a",
        "SADD i 1 2",
        "SADD t a",
        "HSET h f v",
    ] {
        run(&mut log, line);
    }
    for (key, encoding) in [
        ("n", "int"),
        ("s", "embstr"),
        ("l", "listpack"),
        ("i", "intset"),
        ("t", "hashtable"),
        ("h", "listpack"),
    ] {
        assert_eq!(
            run(&mut log, &format!("OBJECT ENCODING {key}")),
            bulk(encoding)
        );
    }
    assert_eq!(run(&mut log, "OBJECT ENCODING missing"), Reply::Null);
    assert_eq!(run(&mut log, "OBJECT REFCOUNT l"), Reply::Integer(1));
    let pair = map::PAIR_OVERHEAD_BYTES as i64;
    assert_eq!(
        run(&mut log, "MEMORY USAGE s"),
        Reply::Integer(1 + 5 + pair)
    );
    assert_eq!(run(&mut log, "MEMORY USAGE missing SAMPLES 5"), Reply::Null);
    assert_eq!(run(&mut log, "SRANDMEMBER t"), bulk("a"));
    assert_eq!(run(&mut log, "SRANDMEMBER missing"), Reply::Null);
    assert_eq!(run(&mut log, "SRANDMEMBER i 0"), bulks(&[]));
    let Reply::Array(distinct) = run(&mut log, "SRANDMEMBER i 5") else {
        panic!()
    };
    assert_eq!(distinct.len(), 2);
    assert_ne!(distinct[0], distinct[1]);
    let Reply::Array(repeated) = run(&mut log, "SRANDMEMBER i -5") else {
        panic!()
    };
    assert_eq!(repeated.len(), 5);
    assert!(repeated.iter().all(|m| *m == bulk("1") || *m == bulk("2")));
    assert_eq!(run(&mut log, "SRANDMEMBER missing -3"), bulks(&[]));
}

#[test]
#[expect(clippy::too_many_lines)]
fn sorted_set_commands_answer_as_redis() {
    let mut log = Log::new();
    assert_eq!(run(&mut log, "ZADD z 1 a 2 b 3 c"), Reply::Integer(3));
    assert_eq!(run(&mut log, "ZADD z CH 1 a 5 b 4 d"), Reply::Integer(2));
    assert_eq!(run(&mut log, "ZADD z NX 9 a 6 e"), Reply::Integer(1));
    assert_eq!(run(&mut log, "ZADD z XX 0 a 9 new"), Reply::Integer(0));
    assert_eq!(run(&mut log, "ZSCORE z a"), double("0"));
    assert_eq!(run(&mut log, "ZSCORE z new"), Reply::Null);
    assert_eq!(run(&mut log, "ZADD z GT CH 1 a -1 c"), Reply::Integer(1));
    assert_eq!(run(&mut log, "ZADD z LT CH 2 a 0.5 e"), Reply::Integer(1));
    assert_eq!(run(&mut log, "ZADD z INCR 2.5 a"), double("3.5"));
    assert_eq!(run(&mut log, "ZADD z NX INCR 1 a"), Reply::Null);
    assert_eq!(run(&mut log, "ZINCRBY z -1 a"), double("2.5"));
    // a 2.5, b 5, c 3, d 4, e 0.5
    assert_eq!(
        run(&mut log, "ZRANGE z 0 -1 WITHSCORES"),
        scored(&[
            ("e", "0.5"),
            ("a", "2.5"),
            ("c", "3"),
            ("d", "4"),
            ("b", "5")
        ])
    );
    assert_eq!(run(&mut log, "ZREVRANGE z 0 1"), bulks(&["b", "d"]));
    assert_eq!(run(&mut log, "ZRANGEBYSCORE z (2.5 4"), bulks(&["c", "d"]));
    assert_eq!(
        run(&mut log, "ZRANGEBYSCORE z -inf +inf LIMIT 1 2"),
        bulks(&["a", "c"])
    );
    assert_eq!(run(&mut log, "ZREVRANGEBYSCORE z 4 3"), bulks(&["d", "c"]));
    assert_eq!(run(&mut log, "ZRANGE z 4 (3 BYSCORE REV"), bulks(&["d"]));
    assert_eq!(run(&mut log, "ZRANK z c"), Reply::Integer(2));
    assert_eq!(run(&mut log, "ZREVRANK z c"), Reply::Integer(2));
    assert_eq!(run(&mut log, "ZRANK z zz"), Reply::Null);
    assert_eq!(run(&mut log, "ZCOUNT z 3 +inf"), Reply::Integer(3));
    assert_eq!(run(&mut log, "ZCARD z"), Reply::Integer(5));
    assert_eq!(
        run(&mut log, "ZMSCORE z b zz"),
        Reply::Array(vec![double("5"), Reply::Null])
    );
    assert_eq!(
        run(&mut log, "ZPOPMIN z"),
        Reply::Array(vec![bulk("e"), double("0.5")])
    );
    assert_eq!(
        run(&mut log, "ZPOPMAX z 2"),
        scored(&[("b", "5"), ("d", "4")])
    );
    assert_eq!(run(&mut log, "ZREM z a zz"), Reply::Integer(1));
    assert_eq!(run(&mut log, "ZADD lex 0 a 0 b 0 c 0 d"), Reply::Integer(4));
    assert_eq!(run(&mut log, "ZRANGEBYLEX lex [b (d"), bulks(&["b", "c"]));
    assert_eq!(
        run(&mut log, "ZRANGE lex + - BYLEX REV LIMIT 0 2"),
        bulks(&["d", "c"])
    );
    assert_eq!(run(&mut log, "ZREMRANGEBYRANK lex 0 1"), Reply::Integer(2));
    assert_eq!(
        run(&mut log, "ZREMRANGEBYSCORE lex -inf +inf"),
        Reply::Integer(2)
    );
    assert_eq!(run(&mut log, "EXISTS lex"), Reply::Integer(0));
    assert_eq!(
        run(&mut log, "ZADD z INCR 1 x"),
        double("1"),
        "INCR creates the member"
    );
    assert_eq!(run(&mut log, "ZADD inf 0 m"), Reply::Integer(1));
    assert_eq!(run(&mut log, "ZINCRBY inf +inf m"), double("inf"));
    assert_eq!(
        run(&mut log, "ZINCRBY inf -inf m"),
        Reply::error("ERR resulting score is not a number (NaN)")
    );
    assert_eq!(run(&mut log, "TYPE z"), Reply::simple("zset"));
    assert_eq!(run(&mut log, "OBJECT ENCODING z"), bulk("listpack"));
    // Errors in Redis's words, and the state round-trips through a snapshot.
    for (line, error) in [
        (
            "ZADD z NX XX 1 a",
            "ERR XX and NX options at the same time are not compatible",
        ),
        (
            "ZADD z GT LT 1 a",
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            "ZADD z INCR 1 a 2 b",
            "ERR INCR option supports a single increment-element pair",
        ),
        ("ZADD z nan a", "ERR value is not a valid float"),
        ("ZRANGEBYSCORE z x 1", "ERR min or max is not a float"),
        (
            "ZPOPMIN z -1",
            "ERR value is out of range, must be positive",
        ),
        ("LPOP z -1", "ERR value is out of range, must be positive"),
        ("SPOP z 1 2", "ERR syntax error"),
        (
            "OBJECT FREQ z",
            "ERR unknown subcommand 'FREQ'. Try OBJECT HELP.",
        ),
        (
            "ZRANGE z 0 1 LIMIT 0 1",
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
    ] {
        let args: Vec<Bytes> = line.split(' ').map(b).collect();
        assert_eq!(
            Command::parse(&args).map_err(|e| e.to_string()),
            Err(error.to_string()),
            "{line}"
        );
    }
    assert_eq!(run(&mut log, "LPUSH z x"), Reply::error(WRONGTYPE));
    let restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).unwrap();
    assert_eq!(restored, log.sm);
    assert_eq!(restored.state_digest(), log.sm.state_digest());
}

/// The replies that RESP3 types changed: in RESP2 the bytes keel always sent, in RESP3 what
/// Redis sends (doubles, sets, member-score pairs; ZPOPMIN without a count stays flat).
#[test]
fn resp3_types_encode_as_redis_and_resp2_is_unchanged() {
    let mut log = Log::new();
    run(&mut log, "ZADD z 1.5 a 2 b 1e300 c");
    run(&mut log, "SADD s x y");
    run(&mut log, "HSET h f v");
    for (line, resp2, resp3) in [
        ("ZSCORE z a", "$3\r\n1.5\r\n", ",1.5\r\n"),
        ("ZSCORE z missing", "$-1\r\n", "_\r\n"),
        ("ZINCRBY z 1 b", "$1\r\n3\r\n", ",3\r\n"),
        ("ZADD z INCR -0.25 b", "$4\r\n2.75\r\n", ",2.75\r\n"),
        ("ZADD z XX INCR 1 nobody", "$-1\r\n", "_\r\n"),
        (
            "ZMSCORE z a missing",
            "*2\r\n$3\r\n1.5\r\n$-1\r\n",
            "*2\r\n,1.5\r\n_\r\n",
        ),
        (
            "ZRANGE z 0 1 WITHSCORES",
            "*4\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nb\r\n$4\r\n2.75\r\n",
            "*2\r\n*2\r\n$1\r\na\r\n,1.5\r\n*2\r\n$1\r\nb\r\n,2.75\r\n",
        ),
        (
            "ZREVRANGEBYSCORE z +inf 2 WITHSCORES LIMIT 1 1",
            "*2\r\n$1\r\nb\r\n$4\r\n2.75\r\n",
            "*1\r\n*2\r\n$1\r\nb\r\n,2.75\r\n",
        ),
        ("ZRANGE z 0 0", "*1\r\n$1\r\na\r\n", "*1\r\n$1\r\na\r\n"),
        (
            "ZPOPMIN z",
            "*2\r\n$1\r\na\r\n$3\r\n1.5\r\n",
            "*2\r\n$1\r\na\r\n,1.5\r\n",
        ),
        (
            "ZPOPMIN z 1",
            "*2\r\n$1\r\nb\r\n$4\r\n2.75\r\n",
            "*1\r\n*2\r\n$1\r\nb\r\n,2.75\r\n",
        ),
        ("ZPOPMIN missing", "*0\r\n", "*0\r\n"),
        ("ZPOPMAX missing 2", "*0\r\n", "*0\r\n"),
        (
            "SMEMBERS s",
            "*2\r\n$1\r\nx\r\n$1\r\ny\r\n",
            "~2\r\n$1\r\nx\r\n$1\r\ny\r\n",
        ),
        (
            "SUNION s missing",
            "*2\r\n$1\r\nx\r\n$1\r\ny\r\n",
            "~2\r\n$1\r\nx\r\n$1\r\ny\r\n",
        ),
        ("SDIFF missing s", "*0\r\n", "~0\r\n"),
        (
            "HGETALL h",
            "*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            "%1\r\n$1\r\nf\r\n$1\r\nv\r\n",
        ),
    ] {
        let (two, three) = wire(&run(&mut log, line));
        assert_eq!((two.as_str(), three.as_str()), (resp2, resp3), "{line}");
    }
    // The huge score keeps its every digit, as before: the shortest text that reads back.
    let (two, three) = wire(&run(&mut log, "ZSCORE z c"));
    let digits = format!("1{}", "0".repeat(300));
    assert_eq!(two, format!("$301\r\n{digits}\r\n"));
    assert_eq!(three, format!(",{digits}\r\n"));
}

/// A reply holding RESP3 types survives the apply result's encoding (an EXEC's array of them).
#[test]
fn resp3_types_survive_an_exec_reply() {
    let exec = ApplyReply::Exec(vec![
        double("2.5"),
        members(&["a", "b"]),
        scored(&[("a", "1"), ("b", "inf")]),
        Reply::Verbatim(b("text")),
        Reply::Map(vec![(bulk("k"), members(&[]))]),
    ]);
    assert_eq!(ApplyReply::decode(&exec.to_bytes()), Some(exec.clone()));
    let value = ApplyReply::Value(double("-inf"));
    assert_eq!(ApplyReply::decode(&value.to_bytes()), Some(value));
}
