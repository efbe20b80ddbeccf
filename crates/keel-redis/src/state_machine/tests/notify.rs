//! Keyspace events: the names and order Redis fires for each family (cases from Redis's
//! `unit/pubsub.tcl` and its `notifyKeyspaceEvent` call sites), expiry by tick and on write,
//! nothing noted while collecting is off, and the same state whether or not events are noted.

use super::collections::run;
use super::*;
use crate::notify::KeyEvent;

/// Runs `lines` with events noted; answers each event as `event key` (`@db` when not 0).
fn events(log: &mut Log, lines: &[&str]) -> Vec<String> {
    log.sm.collect_key_events(true);
    for line in lines {
        run(log, line);
    }
    named(log.sm.take_key_events())
}

fn named(events: Vec<KeyEvent>) -> Vec<String> {
    events
        .into_iter()
        .map(|e| {
            let key = String::from_utf8_lossy(&e.key).into_owned();
            match e.db {
                0 => format!("{} {key}", e.event),
                db => format!("{} {key}@{db}", e.event),
            }
        })
        .collect()
}

#[test]
fn strings_and_generic_commands() {
    let mut log = Log::new();
    assert_eq!(
        events(
            &mut log,
            &[
                "SET foo bar",
                "SET foo baz",
                "SET foo x NX",
                "EXPIRE foo 100",
                "PERSIST foo",
                "PERSIST foo",
                "DEL foo foo nope",
                "INCR n",
                "INCRBYFLOAT n 1.5",
                "APPEND n 0",
                "SETRANGE n 0 9",
                "SETBIT b 1 1",
                "MSET a 1 b 2",
                "GETDEL a",
                "GETDEL a",
                "SET e 1 EX 100",
            ]
        ),
        [
            "new foo",
            "set foo",
            "set foo",
            "expire foo",
            "persist foo",
            "del foo",
            "new n",
            "incrby n",
            "incrbyfloat n",
            "append n",
            "setrange n",
            "new b",
            "setbit b",
            "new a",
            "set a",
            "set b",
            "del a",
            "new e",
            "set e",
            "expire e",
        ]
    );
}

#[test]
fn renames_moves_and_copies_name_both_keys() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    run(&mut log, "SET k v");
    assert_eq!(
        events(
            &mut log,
            &[
                "RENAME k r",
                "RENAME nope x",
                "COPY r c",
                "MOVE c 2",
                "EXPIRE r 0"
            ]
        ),
        [
            "rename_from k",
            "new r",
            "rename_to r",
            "new c",
            "copy_to c",
            "move_from c",
            "new c@2",
            "move_to c@2",
            "del r",
        ]
    );
}

#[test]
fn lists_fire_push_pop_and_del_when_emptied() {
    let mut log = Log::new();
    assert_eq!(
        events(
            &mut log,
            &[
                "LPUSH l a",
                "RPUSH l a",
                "RPOP l",
                "LPUSHX nope a",
                "LSET l 0 b",
                "LINSERT l BEFORE b c",
                "LREM l 0 zz",
                "LMOVE l d LEFT RIGHT",
                "LTRIM l 1 0",
                "RPOP d",
                "RPOP d",
            ]
        ),
        [
            "new l",
            "lpush l",
            "rpush l",
            "rpop l",
            "lset l",
            "linsert l",
            "new d",
            "rpush d",
            "lpop l",
            "ltrim l",
            "del l",
            "rpop d",
            "del d",
        ]
    );
}

#[test]
fn sets_hashes_and_sorted_sets() {
    let mut log = Log::new();
    assert_eq!(
        events(
            &mut log,
            &[
                "SADD s a b c d",
                "SREM s x",
                "SADD s x y z",
                "SREM s x",
                "SINTERSTORE t s",
                "SINTERSTORE t nope",
                "HMSET h yes 1 no 0",
                "HINCRBY h yes 10",
                "HSETNX h yes 2",
                "HDEL h yes no",
                "ZADD z 1 a 2 b",
                "ZREM z x",
                "ZADD z 3 x",
                "ZADD z 3 x",
                "ZINCRBY z 1 x",
                "ZPOPMIN z",
                "ZREMRANGEBYSCORE z -inf +inf",
            ]
        ),
        [
            "new s",
            "sadd s",
            "sadd s",
            "srem s",
            "new t",
            "sinterstore t",
            "del t",
            "new h",
            "hset h",
            "hincrby h",
            "hdel h",
            "del h",
            "new z",
            "zadd z",
            "zadd z",
            "zincr z",
            "zpopmin z",
            "zrembyscore z",
            "del z",
        ]
    );
}

/// Redis's "stream events test".
#[test]
fn streams_fire_group_and_consumer_events() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    assert_eq!(
        events(
            &mut log,
            &[
                "XGROUP CREATE s g $ MKSTREAM",
                "XGROUP CREATECONSUMER s g Bob",
                "XADD s 1-1 f A",
                "XREADGROUP GROUP g Alice STREAMS s >",
                "XCLAIM s g Mike 0 1-1 FORCE",
                "XGROUP DELCONSUMER s g Lee",
                "XAUTOCLAIM s g Bob 0 1-1",
                "XGROUP DELCONSUMER s g Bob",
                "XDEL s 1-1",
                "XSETID s 5-0",
                "XADD s 6-0 f B",
                "XADD s MAXLEN 1 7-0 f C",
                "XADD s MAXLEN 5 8-0 f D",
            ]
        ),
        [
            "new s",
            "xgroup-create s",
            "xgroup-createconsumer s",
            "xadd s",
            "xgroup-createconsumer s",
            "xgroup-createconsumer s",
            "xgroup-delconsumer s",
            "xdel s",
            "xsetid s",
            "xadd s",
            "xadd s",
            "xtrim s",
            "xadd s",
        ]
    );
}

#[test]
fn expired_keys_fire_expired_from_ticks_and_writes() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    run(&mut log, "SET a 1 PX 100");
    run(&mut log, "SET b 1 PX 100");
    log.stamp_ms = 2_000;
    log.sm.collect_key_events(true);
    // A tick removes what expired; a write that finds a key expired removes it first.
    log.tick(&["a"]);
    run(&mut log, "SET b 2");
    assert_eq!(
        named(log.sm.take_key_events()),
        ["expired a", "expired b", "new b", "set b"]
    );
}

#[test]
fn transactions_note_every_write_and_nothing_is_noted_while_off() {
    let mut log = Log::new();
    log.sm.collect_key_events(true);
    log.exec(vec![
        QueuedCommand::Write(set("x", "1")),
        QueuedCommand::Select(3),
        QueuedCommand::Write(set("y", "1")),
    ]);
    assert_eq!(
        named(log.sm.take_key_events()),
        ["new x", "set x", "new y@3", "set y@3"]
    );
    log.sm.collect_key_events(false);
    run(&mut log, "SET x 2");
    assert!(log.sm.take_key_events().is_empty());
}

/// Noting events reads the state and never writes it: the same entries give the same state and
/// digest whether or not they were noted.
#[test]
fn noting_events_leaves_the_state_as_it_is() {
    let lines = [
        "SET a 1 PX 10",
        "LPUSH l a b",
        "RPOP l",
        "SADD s a",
        "HSET h f v",
        "ZADD z 1 m",
        "XADD x 1-1 f v",
        "XGROUP CREATE x g 0",
        "XREADGROUP GROUP g c STREAMS x >",
        "SET a 2",
        "RENAME h h2",
        "MOVE s 1",
    ];
    let mut noted = Log::new();
    let mut plain = Log::new();
    noted.sm.collect_key_events(true);
    for (i, line) in lines.iter().enumerate() {
        noted.stamp_ms = 1_000 + 10 * i as u64;
        plain.stamp_ms = noted.stamp_ms;
        assert_eq!(run(&mut noted, line), run(&mut plain, line), "{line}");
    }
    assert!(!noted.sm.take_key_events().is_empty());
    assert_eq!(noted.sm, plain.sm);
    assert_eq!(noted.sm.state_digest(), plain.sm.state_digest());
}
