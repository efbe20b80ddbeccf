//! XREAD and XREADGROUP with BLOCK as the log applies their attempts (`RAFT.BLOCKED ... XREAD`):
//! the first attempt as the command, `$` resolved once, woken attempts serving one stream,
//! XREADGROUP delivering once and answering Redis's errors when its key or group went away, the
//! deadline, and the keys noted for the node's blocked clients.

use super::collections::{bulk, bulks, run};
use super::*;
use crate::command::blocking::{attempt_args, BlockingPop};
use crate::command::{Command, StreamRead, XRead};

fn words(line: &str) -> Vec<Bytes> {
    line.split(' ').map(b).collect()
}

fn attempt_as(log: &mut Log, deadline_ms: u64, woken: bool, command: &[Bytes]) -> Reply {
    let args = attempt_args(deadline_ms, woken, command);
    let Ok(Command::Write(write)) = Command::parse(&args) else {
        panic!("{command:?} is not an attempt");
    };
    log.seq += 1;
    let seq = log.seq;
    log.apply_logged(1, seq, write.into()).into_reply()
}

fn first(log: &mut Log, line: &str) -> Reply {
    attempt_as(log, 0, false, &words(line))
}

fn woken(log: &mut Log, command: &[Bytes]) -> Reply {
    attempt_as(log, 0, true, command)
}

/// The XREAD a client sent, as the session sees it.
fn blocking(line: &str) -> BlockingPop {
    match Command::parse(&words(line)) {
        Ok(Command::Read(crate::command::ReadCommand::Collection(typed))) => match typed.op {
            crate::command::CollectionRead::Stream(StreamRead::Read(read)) => {
                BlockingPop::stream_read(&read).expect("blocks")
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn entry(id: &str, fields: &[&str]) -> Reply {
    Reply::Array(vec![bulk(id), bulks(fields)])
}

fn served(key: &str, entries: Vec<Reply>) -> Reply {
    Reply::Keyed(vec![(bulk(key), Reply::Array(entries))])
}

#[test]
fn the_first_xread_attempt_resolves_dollar_and_woken_ones_serve_one_stream() {
    let mut log = Log::new();
    run(&mut log, "XADD a 5-0 f old");
    let line = "XREAD COUNT 10 BLOCK 0 STREAMS a b $ $";
    let pop = blocking(line);
    let answer = first(&mut log, line);
    assert_eq!(answer, bulks(&["5-0", "0-0"]), "what each $ stands for");
    let request = pop
        .resolved_request(&words(line), &answer)
        .expect("resolved");
    assert_eq!(request, words("XREAD COUNT 10 BLOCK 0 STREAMS a b 5-0 0-0"));
    assert_eq!(pop.resolved_request(&request, &Reply::Null), None);
    // Nothing new: the client waits.
    assert_eq!(woken(&mut log, &request), Reply::Null);
    run(&mut log, "XADD b 1-0 f x");
    run(&mut log, "XADD a 6-0 f new");
    // The first stream, in the command's order, with something after its ID: alone.
    assert_eq!(
        woken(&mut log, &request),
        served("a", vec![entry("6-0", &["f", "new"])])
    );
    // Explicit IDs: the first attempt reads as XREAD does, every stream with entries.
    assert_eq!(
        first(&mut log, "XREAD BLOCK 0 STREAMS a b 5-0 0-0"),
        Reply::Keyed(vec![
            (bulk("a"), Reply::Array(vec![entry("6-0", &["f", "new"])])),
            (bulk("b"), Reply::Array(vec![entry("1-0", &["f", "x"])])),
        ])
    );
    // Without `$`, nothing answers null, not IDs.
    assert_eq!(first(&mut log, "XREAD BLOCK 0 STREAMS a 6-0"), Reply::Null);
}

#[test]
fn a_woken_xread_passes_over_a_key_gone_or_of_another_kind_and_its_first_is_wrongtype() {
    let mut log = Log::new();
    run(&mut log, "XADD s 5-0 f v");
    run(&mut log, "SET str x");
    assert_eq!(
        first(&mut log, "XREAD BLOCK 0 STREAMS str $"),
        Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    let request = words("XREAD BLOCK 0 STREAMS str s 0-0 5-0");
    run(&mut log, "DEL s");
    assert_eq!(woken(&mut log, &request), Reply::Null);
    // Recreated with an entry after the client's ID: served.
    run(&mut log, "XADD s 7-0 f w");
    assert_eq!(
        woken(&mut log, &request),
        served("s", vec![entry("7-0", &["f", "w"])])
    );
}

#[test]
fn xreadgroup_waits_then_delivers_new_entries_once_to_one_consumer() {
    let mut log = Log::new();
    run(&mut log, "XGROUP CREATE s g $ MKSTREAM");
    let alice = words("XREADGROUP GROUP g alice BLOCK 0 STREAMS s >");
    let bob = words("XREADGROUP GROUP g bob COUNT 1 BLOCK 0 STREAMS s >");
    assert_eq!(attempt_as(&mut log, 0, false, &alice), Reply::Null);
    assert_eq!(attempt_as(&mut log, 0, false, &bob), Reply::Null);
    run(&mut log, "XADD s 1-0 f a");
    run(&mut log, "XADD s 2-0 f b");
    assert_eq!(
        woken(&mut log, &bob),
        served("s", vec![entry("1-0", &["f", "a"])])
    );
    assert_eq!(
        woken(&mut log, &alice),
        served("s", vec![entry("2-0", &["f", "b"])])
    );
    // Delivered: nothing is new any more, and each is pending for its consumer alone.
    assert_eq!(woken(&mut log, &alice), Reply::Null);
    let pending = run(&mut log, "XPENDING s g - + 10");
    let Reply::Array(pending) = pending else {
        panic!("{pending:?}")
    };
    assert_eq!(pending.len(), 2);
    // NOACK delivers without a pending entry.
    run(&mut log, "XADD s 3-0 f c");
    let noack = words("XREADGROUP GROUP g carol NOACK BLOCK 0 STREAMS s >");
    assert_eq!(
        woken(&mut log, &noack),
        served("s", vec![entry("3-0", &["f", "c"])])
    );
    assert_eq!(
        run(&mut log, "XPENDING s g - + 10 carol"),
        Reply::Array(Vec::new())
    );
}

#[test]
fn a_woken_xreadgroup_answers_redis_errors_when_its_key_or_group_went_away() {
    let mut log = Log::new();
    let request = words("XREADGROUP GROUP g alice BLOCK 0 STREAMS s >");
    let no_group =
        Reply::error("NOGROUP the consumer group this client was blocked on no longer exists");
    let no_stream = Reply::error("UNBLOCKED the stream key no longer exists");
    run(&mut log, "XGROUP CREATE s g $ MKSTREAM");
    run(&mut log, "XGROUP DESTROY s g");
    assert_eq!(woken(&mut log, &request), no_group);
    run(&mut log, "XGROUP CREATE s g $");
    run(&mut log, "DEL s");
    assert_eq!(woken(&mut log, &request), no_stream);
    run(&mut log, "SET s x");
    assert_eq!(woken(&mut log, &request), no_stream);
    // Its first attempt answers as XREADGROUP does without BLOCK.
    run(&mut log, "DEL s");
    let Reply::Error(error) = attempt_as(&mut log, 0, false, &request) else {
        panic!("an error")
    };
    assert!(error.starts_with("NOGROUP No such key 's'"), "{error}");
}

#[test]
fn an_attempt_applied_past_its_deadline_delivers_nothing() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    run(&mut log, "XGROUP CREATE s g $ MKSTREAM");
    run(&mut log, "XADD s 1-0 f a");
    log.stamp_ms = 5_001;
    let request = words("XREADGROUP GROUP g alice BLOCK 0 STREAMS s >");
    assert_eq!(attempt_as(&mut log, 5_000, true, &request), Reply::Null);
    assert_eq!(
        run(&mut log, "XPENDING s g - + 10"),
        Reply::Array(Vec::new())
    );
    assert_eq!(
        attempt_as(&mut log, 6_000, true, &request),
        served("s", vec![entry("1-0", &["f", "a"])])
    );
}

#[test]
fn only_commands_that_block_are_attempts() {
    for line in [
        "RAFT.BLOCKED 0 0 XREAD STREAMS s $",
        "RAFT.BLOCKED 0 0 XREADGROUP GROUP g c BLOCK 0 STREAMS s 0",
        "RAFT.BLOCKED 0 0 XADD s * f v",
    ] {
        assert!(Command::parse(&words(line)).is_err(), "{line}");
    }
    let read = XRead {
        count: 0,
        block_ms: None,
        group: None,
        no_ack: false,
        streams: vec![(b("s"), crate::command::ReadFrom::Last)],
    };
    assert!(BlockingPop::stream_read(&read).is_none(), "no BLOCK");
}

#[test]
fn stream_changes_and_whole_database_ones_are_noted_for_blocked_clients() {
    let mut log = Log::new();
    log.sm.collect_filled_keys(true);
    for line in [
        "XADD s 1-0 f v",
        "XGROUP CREATE s g $",
        "XGROUP DESTROY s g",
        "SET s x",
        "XADD t 1-0 f v",
        "DEL t",
        "XADD u 1-0 f v",
        "RENAME u v",
        "HSET h f v",
    ] {
        run(&mut log, line);
    }
    let filled: Vec<String> = log
        .sm
        .take_filled_keys()
        .iter()
        .map(|k| String::from_utf8_lossy(&k[4..]).into_owned())
        .collect();
    // With repeats (a new stream: created, and added to): a wake is once per key anyway.
    let noted = ["s", "s", "s", "s", "t", "t", "t", "u", "u", "u", "v"];
    assert_eq!(filled, noted);
    assert!(!log.sm.take_every_key_filled());
    for line in ["FLUSHDB", "SWAPDB 0 1", "FLUSHALL"] {
        run(&mut log, line);
        assert!(log.sm.take_every_key_filled(), "{line}");
    }
    log.sm.collect_filled_keys(false);
    run(&mut log, "FLUSHALL");
    assert!(!log.sm.take_every_key_filled());
}
