//! SORT, SORT_RO and SORT ... STORE: Redis's replies (cases from Redis's `unit/sort.tcl`), the
//! deterministic order where Redis leaves it open, the result bound, and STORE as a write (its
//! destination's version for WATCH, the digest, replicas agreeing).

use super::collections::{bulk, bulks, run};
use super::expiry::watched_now;
use super::*;
use crate::command::Command;

fn lines(log: &mut Log, lines: &[&str]) {
    for line in lines {
        run(log, line);
    }
}

#[test]
fn sort_orders_lists_sets_and_sorted_sets_as_redis() {
    let mut log = Log::new();
    lines(
        &mut log,
        &[
            "RPUSH floats 1.1 5.10 3.10 7.44 2.1 5.75 6.12 0.25 1.15",
            "LPUSH ints 2 1 4 3 5",
            "SADD set 10 9 100 -1",
            "ZADD z 1 a 5 b 2 c 10 d 3 e",
        ],
    );
    // "SORT regression for issue #19, sorting floats".
    assert_eq!(
        run(&mut log, "SORT floats"),
        bulks(&["0.25", "1.1", "1.15", "2.1", "3.10", "5.10", "5.75", "6.12", "7.44"])
    );
    assert_eq!(run(&mut log, "SORT set"), bulks(&["-1", "9", "10", "100"]));
    assert_eq!(
        run(&mut log, "SORT set DESC"),
        bulks(&["100", "10", "9", "-1"])
    );
    assert_eq!(
        run(&mut log, "SORT set ALPHA"),
        bulks(&["-1", "10", "100", "9"])
    );
    assert_eq!(
        run(&mut log, "SORT z ALPHA DESC"),
        bulks(&["e", "d", "c", "b", "a"])
    );
    // BY nosort keeps the native order: a list's, a sorted set's by score.
    assert_eq!(
        run(&mut log, "SORT ints BY nosort"),
        bulks(&["5", "3", "4", "1", "2"])
    );
    assert_eq!(
        run(&mut log, "SORT z BY nosort DESC"),
        bulks(&["d", "b", "e", "c", "a"])
    );
    assert_eq!(
        run(&mut log, "SORT z BY nosort LIMIT 0 2"),
        bulks(&["a", "c"])
    );
    assert_eq!(
        run(&mut log, "SORT z BY nosort DESC LIMIT 0 2"),
        bulks(&["d", "b"])
    );
    assert_eq!(run(&mut log, "SORT z BY nosort LIMIT 5 10"), bulks(&[]));
    assert_eq!(
        run(&mut log, "SORT z BY nosort LIMIT -10 100"),
        bulks(&["a", "c", "e", "b", "d"])
    );
    // A set has no native order: its members' byte order, reversed by DESC.
    assert_eq!(
        run(&mut log, "SORT set BY nosort DESC"),
        bulks(&["9", "100", "10", "-1"])
    );
    // LIMIT as Redis clamps it: a count of 0 is nothing, a negative count is the rest.
    assert_eq!(run(&mut log, "SORT ints LIMIT 1 2"), bulks(&["2", "3"]));
    assert_eq!(run(&mut log, "SORT ints LIMIT 3 -1"), bulks(&["4", "5"]));
    assert_eq!(run(&mut log, "SORT ints LIMIT 0 0"), bulks(&[]));
    assert_eq!(run(&mut log, "SORT ints LIMIT 9 1"), bulks(&[]));
    assert_eq!(run(&mut log, "SORT_RO ints DESC LIMIT 0 1"), bulks(&["5"]));
    assert_eq!(run(&mut log, "SORT missing"), bulks(&[]));
}

#[test]
fn sort_by_and_get_patterns_read_strings_and_hash_fields() {
    let mut log = Log::new();
    lines(
        &mut log,
        &[
            "RPUSH l 1 2 3",
            "MSET w_1 30 w_2 10 w_3 20 name_1 one name_3 three",
            "HSET o_1 w 3 n uno",
            "HSET o_2 w 1 n dos",
            "HSET o_3 w 2",
        ],
    );
    assert_eq!(run(&mut log, "SORT l BY w_*"), bulks(&["2", "3", "1"]));
    assert_eq!(
        run(&mut log, "SORT l BY o_*->w DESC"),
        bulks(&["1", "3", "2"])
    );
    assert_eq!(
        run(&mut log, "SORT l BY w_* GET # GET name_* GET o_*->n"),
        Reply::Array(vec![
            bulk("2"),
            Reply::Null,
            bulk("dos"),
            bulk("3"),
            bulk("three"),
            Reply::Null,
            bulk("1"),
            bulk("one"),
            bulk("uno"),
        ])
    );
    // A pattern without `*` names no key: every GET answers null.
    assert_eq!(
        run(&mut log, "SORT l GET foo"),
        Reply::Array(vec![Reply::Null; 3])
    );
    // "SORT GET with pattern ending with just -> does not get hash field": `x:a->` is a key.
    lines(&mut log, &["DEL l", "LPUSH l a", "SET x:a-> 100"]);
    assert_eq!(run(&mut log, "SORT l BY num GET x:*->"), bulks(&["100"]));
    // A value BY names that is missing, or of another kind, sorts as 0; ties go by the elements'
    // bytes ("SORT BY sub-sorts lexicographically if score is the same"), reversed by DESC.
    lines(
        &mut log,
        &[
            "SADD s b a c aa",
            "SET score_b 1",
            "SET score_c -1",
            "RPUSH score_aa x",
        ],
    );
    assert_eq!(
        run(&mut log, "SORT s BY score_*"),
        bulks(&["c", "a", "aa", "b"])
    );
    assert_eq!(
        run(&mut log, "SORT s BY score_* DESC"),
        bulks(&["b", "aa", "a", "c"])
    );
    // ALPHA BY: a missing value sorts first.
    assert_eq!(
        run(&mut log, "SORT s BY score_* ALPHA"),
        bulks(&["a", "aa", "c", "b"])
    );
}

#[test]
fn sort_refuses_what_redis_refuses() {
    let mut log = Log::new();
    lines(
        &mut log,
        &[
            "SADD nums 1 2 not-a-double",
            "SADD ok 1 2",
            "SET score_2 nope",
            "HSET h f v",
        ],
    );
    let not_double = Reply::error("ERR One or more scores can't be converted into double");
    assert_eq!(run(&mut log, "SORT nums"), not_double);
    assert_eq!(run(&mut log, "SORT ok BY score_*"), not_double);
    assert_eq!(run(&mut log, "SORT nums STORE dst"), not_double);
    assert_eq!(run(&mut log, "EXISTS dst"), Reply::Integer(0));
    assert_eq!(
        run(&mut log, "SORT nums ALPHA"),
        bulks(&["1", "2", "not-a-double"])
    );
    let wrong_type = Reply::error(WriteError::WrongType.to_string());
    assert_eq!(run(&mut log, "SORT h"), wrong_type);
    assert_eq!(run(&mut log, "SORT score_2"), wrong_type);
    for (line, error) in [
        ("SORT ok LIMIT 1", "ERR syntax error"),
        (
            "SORT ok LIMIT a 1",
            "ERR value is not an integer or out of range",
        ),
        ("SORT ok BOGUS", "ERR syntax error"),
        ("SORT_RO ok STORE dst", "ERR syntax error"),
        ("SORT ok GET", "ERR syntax error"),
    ] {
        let args: Vec<Bytes> = line.split(' ').map(b).collect();
        assert_eq!(
            Command::parse(&args).map_err(|e| e.to_string()),
            Err(error.to_string()),
            "{line}"
        );
    }
}

#[test]
fn sort_store_writes_a_list_and_an_empty_result_removes_the_destination() {
    let mut log = Log::new();
    lines(
        &mut log,
        &["RPUSH src 3 1 2", "SET dst old", "EXPIRE dst 100"],
    );
    assert_eq!(run(&mut log, "SORT src DESC STORE dst"), Reply::Integer(3));
    assert_eq!(run(&mut log, "LRANGE dst 0 -1"), bulks(&["3", "2", "1"]));
    assert_eq!(run(&mut log, "TTL dst"), Reply::Integer(-1));
    // GET's missing values are stored as empty strings.
    assert_eq!(
        run(&mut log, "SORT src GET # GET nothing_* STORE dst"),
        Reply::Integer(6)
    );
    assert_eq!(
        run(&mut log, "LRANGE dst 0 -1"),
        bulks(&["1", "", "2", "", "3", ""])
    );
    // The key sorted may be the destination.
    assert_eq!(run(&mut log, "SORT src STORE src"), Reply::Integer(3));
    assert_eq!(run(&mut log, "LRANGE src 0 -1"), bulks(&["1", "2", "3"]));
    // "SORT with STORE removes key if result is empty", a change WATCH sees ("EXEC fail on
    // WATCHed key modified by SORT with STORE even if the result is empty").
    let watched = watched_now(&log, "dst");
    assert!(!log.sm.watched_changed(&watched));
    assert_eq!(run(&mut log, "SORT emptylist STORE dst"), Reply::Integer(0));
    assert_eq!(run(&mut log, "EXISTS dst"), Reply::Integer(0));
    assert!(log.sm.watched_changed(&watched));
    // Nothing to remove, nothing created.
    let watched = watched_now(&log, "zap");
    assert_eq!(
        run(&mut log, "SORT src ALPHA LIMIT 10 10 STORE zap"),
        Reply::Integer(0)
    );
    assert_eq!(run(&mut log, "EXISTS zap"), Reply::Integer(0));
    assert!(!log.sm.watched_changed(&watched));
}

#[test]
fn sort_store_replicates_through_the_log_and_replicas_agree() {
    let script = [
        "SADD s 5 3 9 1",
        "MSET w_5 1 w_3 2 w_9 3 w_1 4",
        "SORT s BY w_* DESC GET # GET w_* STORE out",
        "SORT s STORE s",
    ];
    let mut a = Log::new();
    let mut b2 = Log::new();
    lines(&mut a, &script);
    lines(&mut b2, &script);
    assert_eq!(a.sm.state_digest(), b2.sm.state_digest());
    assert_eq!(
        run(&mut a, "LRANGE out 0 -1"),
        bulks(&["1", "4", "9", "3", "3", "2", "5", "1"])
    );
    assert_eq!(run(&mut a, "TYPE s"), Reply::Simple("list".into()));
    // The state, the new list included, survives a snapshot.
    let restored = KvStateMachine::from_snapshot(&a.sm.snapshot()).expect("restores");
    assert_eq!(restored, a.sm);
}

#[test]
fn sort_results_are_bounded() {
    let mut log = Log::new();
    // 130 GETs of one 1 MiB value (shared, not copied) make a result past the 128 MiB bound.
    let set_big = vec![b("SET"), b("big"), Bytes::from(vec![b'x'; 1 << 20])];
    match Command::parse(&set_big).expect("valid") {
        Command::Write(write) => {
            log.apply(write);
        }
        other => panic!("{other:?}"),
    }
    run(&mut log, &format!("RPUSH l{}", " ig".repeat(130)));
    let too_large = Reply::error(WriteError::SortTooLarge.to_string());
    assert_eq!(run(&mut log, "SORT l ALPHA GET b*"), too_large);
    assert_eq!(run(&mut log, "SORT l ALPHA GET b* STORE dst"), too_large);
    assert_eq!(run(&mut log, "EXISTS dst"), Reply::Integer(0));
    match run(&mut log, "SORT l ALPHA GET b* LIMIT 0 100") {
        Reply::Array(items) => assert_eq!(items.len(), 100),
        other => panic!("{other:?}"),
    }
}
