//! The blocking pops as the log applies them: what an attempt of a waiting client
//! (`RAFT.BLOCKED`) and the forms that never wait (MULTI, scripts, LMPOP, ZMPOP) answer, keys in
//! order, WRONGTYPE, the deadline in the log's time, what a retried attempt answers, and the
//! keys noted for the node's blocked clients.

use super::collections::{bulk, bulks, run};
use super::*;
use crate::command::Command;

fn array(items: Vec<Reply>) -> Reply {
    Reply::Array(items)
}

fn double(text: &str) -> Reply {
    Reply::Double(b(text))
}

#[test]
fn pops_serve_the_first_key_that_holds_something_in_redis_shapes() {
    let mut log = Log::new();
    run(&mut log, "RPUSH b 1 2 3");
    run(&mut log, "ZADD z 1 one 2 two 3 three");
    assert_eq!(run(&mut log, "BLPOP a b 0"), bulks(&["b", "1"]));
    assert_eq!(run(&mut log, "BRPOP a b 5"), bulks(&["b", "3"]));
    assert_eq!(run(&mut log, "BRPOPLPUSH b dst 0"), bulk("2"));
    assert_eq!(run(&mut log, "LRANGE dst 0 -1"), bulks(&["2"]));
    assert_eq!(run(&mut log, "EXISTS b"), Reply::Integer(0));
    assert_eq!(run(&mut log, "BLMOVE dst b LEFT RIGHT 0"), bulk("2"));
    assert_eq!(
        run(&mut log, "BZPOPMIN none z 0"),
        array(vec![bulk("z"), bulk("one"), double("1")])
    );
    assert_eq!(
        run(&mut log, "BZMPOP 0 2 none z MAX COUNT 5"),
        array(vec![
            bulk("z"),
            array(vec![
                array(vec![bulk("three"), double("3")]),
                array(vec![bulk("two"), double("2")]),
            ]),
        ])
    );
    run(&mut log, "RPUSH l a b c");
    assert_eq!(
        run(&mut log, "LMPOP 2 none l RIGHT COUNT 2"),
        array(vec![bulk("l"), bulks(&["c", "b"])])
    );
    assert_eq!(
        run(&mut log, "BLMPOP 0 1 l LEFT"),
        array(vec![bulk("l"), bulks(&["a"])])
    );
    // Nothing anywhere: the forms that do not wait answer null at once.
    run(&mut log, "DEL b");
    for line in [
        "BLPOP l b 1",
        "LMPOP 1 l LEFT",
        "ZMPOP 1 z MIN",
        "BZPOPMAX z 1",
    ] {
        assert_eq!(run(&mut log, line), Reply::NullArray, "{line}");
    }
    assert_eq!(run(&mut log, "BLMOVE l x LEFT LEFT 0"), Reply::Null);
}

#[test]
fn a_key_of_another_kind_met_first_is_wrongtype_and_later_ones_are_not_looked_at() {
    let mut log = Log::new();
    run(&mut log, "SET s x");
    run(&mut log, "RPUSH l 1");
    let wrongtype =
        Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(run(&mut log, "BLPOP s l 0"), wrongtype);
    assert_eq!(run(&mut log, "BLPOP l s 0"), bulks(&["l", "1"]));
    assert_eq!(run(&mut log, "BZPOPMAX s 0"), wrongtype);
    // A woken client's attempt passes over a key that became another kind meanwhile (Redis
    // would not have woken it); its first attempt answers WRONGTYPE as the command does.
    assert_eq!(
        attempt_as(&mut log, 0, false, "BLPOP s l 0"),
        ApplyReply::Write(WriteReply::Error(WriteError::WrongType))
    );
    assert_eq!(
        attempt_as(&mut log, 0, true, "BLPOP s l 0"),
        ApplyReply::Write(WriteReply::Nil)
    );
}

/// The first attempt a waiting client's node proposes for `command`, with `deadline_ms`.
fn attempt(log: &mut Log, deadline_ms: u64, command: &str) -> ApplyReply {
    attempt_as(log, deadline_ms, false, command)
}

fn attempt_as(log: &mut Log, deadline_ms: u64, woken: bool, command: &str) -> ApplyReply {
    let command: Vec<Bytes> = command.split(' ').map(b).collect();
    let args = crate::command::blocking::attempt_args(deadline_ms, woken, &command);
    let Ok(Command::Write(write)) = Command::parse(&args) else {
        panic!("{command:?} is not a write");
    };
    log.seq += 1;
    let seq = log.seq;
    log.apply_logged(1, seq, write.into())
}

#[test]
fn an_attempt_answers_nil_when_nothing_serves_it_and_takes_nothing_past_its_deadline() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    assert_eq!(
        attempt(&mut log, 5_000, "BLPOP q 0"),
        ApplyReply::Write(WriteReply::Nil)
    );
    run(&mut log, "RPUSH q a b");
    assert_eq!(
        attempt(&mut log, 5_000, "BLPOP q 0"),
        ApplyReply::Value(bulks(&["q", "a"]))
    );
    // Applied at a log time past its deadline: the client gave up, nothing is taken.
    log.stamp_ms = 5_001;
    assert_eq!(
        attempt(&mut log, 5_000, "BLPOP q 0"),
        ApplyReply::Write(WriteReply::Nil)
    );
    assert_eq!(run(&mut log, "LRANGE q 0 -1"), bulks(&["b"]));
    // Deadline 0: none.
    assert_eq!(
        attempt(&mut log, 0, "BRPOPLPUSH q d 0"),
        ApplyReply::Value(bulk("b"))
    );
}

#[test]
fn a_retried_attempt_answers_nil_again_or_applied_before_but_never_pops_twice() {
    let mut log = Log::new();
    let command: Vec<Bytes> = "RAFT.BLOCKED 0 0 BLPOP q 0".split(' ').map(b).collect();
    let Ok(Command::Write(write)) = Command::parse(&command) else {
        panic!("not a write");
    };
    let empty = log.apply_logged(7, 1, write.clone().into());
    assert_eq!(empty, ApplyReply::Write(WriteReply::Nil));
    run(&mut log, "RPUSH q a b");
    // The same request again (a forwarding node retrying): the remembered null, nothing popped.
    assert_eq!(
        log.apply_logged(7, 1, write.clone().into()),
        ApplyReply::Write(WriteReply::Nil)
    );
    assert_eq!(run(&mut log, "LLEN q"), Reply::Integer(2));
    let popped = log.apply_logged(7, 2, write.clone().into());
    assert_eq!(popped, ApplyReply::Value(bulks(&["q", "a"])));
    assert_eq!(
        log.apply_logged(7, 2, write.into()),
        ApplyReply::AppliedBefore
    );
    assert_eq!(run(&mut log, "LRANGE q 0 -1"), bulks(&["b"]));
}

#[test]
fn writes_that_fill_lists_and_sorted_sets_are_noted_only_while_collecting() {
    let mut log = Log::new();
    run(&mut log, "RPUSH before x");
    assert!(log.sm.take_filled_keys().is_empty());
    log.sm.collect_filled_keys(true);
    for line in [
        "RPUSH l a",
        "LPUSH l b",
        "ZADD z 1 m",
        "SADD s m",
        "HSET h f v",
        "SET str v",
        "LPOP l",
        "RPOPLPUSH l dst",
        "SUNIONSTORE u s",
        "COPY z z2",
    ] {
        run(&mut log, line);
    }
    let filled: Vec<String> = log
        .sm
        .take_filled_keys()
        .iter()
        .map(|k| {
            // Named with their database (0 here).
            assert_eq!(k[..4], 0u32.to_le_bytes());
            String::from_utf8_lossy(&k[4..]).into_owned()
        })
        .collect();
    assert_eq!(filled, ["l", "l", "z", "dst", "z2"]);
    // Equal states whatever they collected.
    let mut other = log.sm.clone();
    other.collect_filled_keys(false);
    assert_eq!(other, log.sm);
    log.sm.collect_filled_keys(false);
    run(&mut log, "RPUSH l c");
    assert!(log.sm.take_filled_keys().is_empty());
}
