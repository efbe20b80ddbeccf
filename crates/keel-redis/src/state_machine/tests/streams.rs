//! Streams in the state machine: IDs and delivery times from the log's time, the digest equal
//! on replicas that apply the same entries, snapshots of groups and their pending entries, the
//! older snapshot format, errors, and the replies' RESP2 and RESP3 shapes.

use super::collections::{bulk, run};
use super::*;
use crate::command::Command;

fn id(text: &str) -> Reply {
    bulk(text)
}

fn entry(at: &str, fields: &[&str]) -> Reply {
    Reply::Array(vec![id(at), super::collections::bulks(fields)])
}

/// A log whose entries are stamped `ms`.
fn at(log: &mut Log, ms: u64, line: &str) -> Reply {
    log.stamp_ms = ms;
    run(log, line)
}

#[test]
fn xadd_takes_its_ids_from_the_log_time() {
    let mut log = Log::new();
    assert_eq!(at(&mut log, 1_000, "XADD s * a 1"), id("1000-0"));
    assert_eq!(at(&mut log, 1_000, "XADD s * a 2"), id("1000-1"));
    // The log's time never goes back; an explicit later ID moves the next ones past it.
    assert_eq!(at(&mut log, 1_000, "XADD s 5000-7 a 3"), id("5000-7"));
    assert_eq!(at(&mut log, 2_000, "XADD s * a 4"), id("5000-8"));
    assert_eq!(at(&mut log, 6_000, "XADD s * a 5"), id("6000-0"));
    assert_eq!(
        run(&mut log, "XRANGE s - + COUNT 2"),
        Reply::Array(vec![
            entry("1000-0", &["a", "1"]),
            entry("1000-1", &["a", "2"])
        ])
    );
    assert_eq!(run(&mut log, "XLEN s"), Reply::Integer(5));
    assert_eq!(run(&mut log, "TYPE s"), Reply::simple("stream"));
    assert_eq!(run(&mut log, "OBJECT ENCODING s"), bulk("stream"));
}

#[test]
fn delivery_and_idle_times_are_the_log_time() {
    let mut log = Log::new();
    at(&mut log, 100, "XADD s 1-0 f v");
    at(&mut log, 100, "XGROUP CREATE s g 0");
    at(&mut log, 1_000, "XREADGROUP GROUP g alice STREAMS s >");
    // A read runs at the state's time: 500 ms after the delivery.
    at(&mut log, 1_500, "XADD other * f v");
    let pending = run(&mut log, "XPENDING s g - + 10");
    assert_eq!(
        pending,
        Reply::Array(vec![Reply::Array(vec![
            id("1-0"),
            bulk("alice"),
            Reply::Integer(500),
            Reply::Integer(1),
        ])])
    );
    assert_eq!(
        at(&mut log, 1_600, "XCLAIM s g bob 200 1-0 JUSTID"),
        Reply::Array(vec![id("1-0")])
    );
    assert_eq!(
        at(&mut log, 1_650, "XCLAIM s g carol 200 1-0 JUSTID"),
        Reply::Array(vec![])
    );
}

const SCRIPT: &[&str] = &[
    "XADD s * a 1",
    "XADD s * b 2",
    "XADD s * c 3",
    "XGROUP CREATE s g 0",
    "XGROUP CREATE s h $ ENTRIESREAD 3",
    "XREADGROUP GROUP g alice COUNT 2 STREAMS s >",
    "XREADGROUP GROUP g bob STREAMS s >",
    "XDEL s 0-1",
    "XACK s g 0-0",
    "XGROUP CREATECONSUMER s h idle",
    "XAUTOCLAIM s g carol 0 0 COUNT 1",
    "XADD t MAXLEN 0 * x y",
];

#[test]
fn replicas_applying_the_same_entries_hold_the_same_digest_and_snapshot() {
    let (mut one, mut two) = (Log::new(), Log::new());
    for (n, line) in SCRIPT.iter().enumerate() {
        let ms = 10_000 + n as u64 * 7;
        let (a, b) = (at(&mut one, ms, line), at(&mut two, ms, line));
        assert_eq!(a, b, "{line}");
        assert_eq!(one.sm.state_digest(), two.sm.state_digest(), "{line}");
        if n == 6 {
            // One replica restores from a snapshot midway, as a lagging follower does.
            two.sm = KvStateMachine::from_snapshot(&two.sm.snapshot()).unwrap();
        }
    }
    assert_eq!(one.sm.snapshot(), two.sm.snapshot());
    let restored = KvStateMachine::from_snapshot(&one.sm.snapshot()).unwrap();
    assert_eq!(restored.state_digest(), one.sm.state_digest());
    let full = "XINFO STREAM s FULL";
    let read = |sm: &KvStateMachine| {
        let Command::Read(read) =
            Command::parse(&full.split(' ').map(b).collect::<Vec<_>>()).unwrap()
        else {
            panic!("a read")
        };
        sm.read(&read)
    };
    assert_eq!(read(&restored), read(&one.sm));
    // An empty stream (MAXLEN 0) is a key, in snapshots too.
    assert_eq!(
        run(
            &mut Log {
                sm: restored,
                index: 100,
                seq: 100,
                stamp_ms: 0
            },
            "XLEN t"
        ),
        Reply::Integer(0)
    );
    // The digest sees the group state, not only the entries.
    at(&mut one, 20_000, "XACK s g 0-0 10000-0");
    assert_ne!(one.sm.state_digest(), two.sm.state_digest());
}

#[test]
fn a_version_5_snapshot_restores_without_its_streams() {
    let mut log = Log::new();
    run(&mut log, "SET k v");
    run(&mut log, "XADD s 1-0 f v");
    let v5 = snapshot::encode_version(&log.sm, 5);
    let restored = KvStateMachine::from_snapshot(&v5).unwrap();
    assert_eq!(restored.get(b"k"), Some(&b"v"[..]));
    assert!(restored.live(b"s").is_none());
    // A stream in a snapshot that says format 5 is refused: kind 5 came with format 6.
    let mut relabelled = log.sm.snapshot();
    relabelled[8..12].copy_from_slice(&5u32.to_le_bytes());
    relabelled.truncate(relabelled.len() - 4);
    let crc = crc32c::crc32c(&relabelled);
    relabelled.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        KvStateMachine::from_snapshot(&relabelled),
        Err(SnapshotError::Malformed("unknown kind of value"))
    );
}

/// Runs `line`, or answers its parse error as a client would see it.
fn try_run(log: &mut Log, line: &str) -> Reply {
    match Command::parse(&line.split(' ').map(b).collect::<Vec<_>>()) {
        Err(e) => e.to_reply(),
        Ok(_) => run(log, line),
    }
}

#[test]
fn stream_errors_are_redis_words() {
    let mut log = Log::new();
    let error = |text: &str| Reply::error(text.to_string());
    assert_eq!(
        try_run(&mut log, "XADD s 0-0 a 1"),
        error("ERR The ID specified in XADD must be greater than 0-0")
    );
    assert_eq!(run(&mut log, "EXISTS s"), Reply::Integer(0));
    run(&mut log, "XADD s 5-0 a 1");
    assert_eq!(
        run(&mut log, "XADD s 4-0 a 1"),
        error("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    );
    assert_eq!(
        run(&mut log, "XREADGROUP GROUP nog c STREAMS s >"),
        error("NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option")
    );
    assert_eq!(
        run(&mut log, "XGROUP CREATE missing g 0"),
        error("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.")
    );
    run(&mut log, "XGROUP CREATE s g 0");
    assert_eq!(
        run(&mut log, "XGROUP CREATE s g 0"),
        error("BUSYGROUP Consumer Group name already exists")
    );
    run(&mut log, "SET str x");
    assert_eq!(
        run(&mut log, "XADD str * a 1"),
        error("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(
        run(&mut log, "XSETID missing 1-0"),
        error("ERR no such key")
    );
    assert_eq!(run(&mut log, "XREAD STREAMS s 9-0"), Reply::NullArray);
}

#[test]
fn xread_streams_are_a_map_in_resp3_and_pairs_in_resp2() {
    let mut log = Log::new();
    run(&mut log, "XADD s 1-0 f v");
    let reply = run(&mut log, "XREAD STREAMS s 0");
    let mut out = bytes::BytesMut::new();
    keel_resp::encode(&reply, keel_resp::ProtocolVersion::Resp2, &mut out);
    assert_eq!(
        &out[..],
        b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    out.clear();
    keel_resp::encode(&reply, keel_resp::ProtocolVersion::Resp3, &mut out);
    assert!(out.starts_with(b"%1\r\n$1\r\ns\r\n*1\r\n"));
    out.clear();
    keel_resp::encode(
        &Reply::NullArray,
        keel_resp::ProtocolVersion::Resp2,
        &mut out,
    );
    assert_eq!(&out[..], b"*-1\r\n");
}
