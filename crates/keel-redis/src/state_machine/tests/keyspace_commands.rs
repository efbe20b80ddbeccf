//! RENAME, RENAMENX, COPY, TYPE, TOUCH, RANDOMKEY, KEYS and SCAN, checked against the cases of
//! Redis's test suite (`keyspace.tcl`, `scan.tcl`), with expiry and WATCH tokens.

use super::expiry::{pttl, set_px, watched_now, T0};
use super::*;
use crate::command::{ScanArgs, TypeFilter};

fn rename(key: &str, new_key: &str, only_if_absent: bool) -> WriteCommand {
    WriteCommand::Rename {
        key: b(key),
        new_key: b(new_key),
        only_if_absent,
    }
}

fn copy(source: &str, destination: &str, replace: bool) -> WriteCommand {
    WriteCommand::Copy {
        source: b(source),
        destination: b(destination),
        replace,
        db: None,
    }
}

fn del(key: &str) -> WriteCommand {
    WriteCommand::Del { keys: vec![b(key)] }
}

fn keys(sm: &KvStateMachine, pattern: &str) -> Vec<String> {
    texts(sm.read(&ReadCommand::Keys {
        pattern: b(pattern),
    }))
}

fn texts(reply: Reply) -> Vec<String> {
    let Reply::Array(items) = reply else {
        panic!("an array: {reply:?}")
    };
    items
        .into_iter()
        .map(|item| match item {
            Reply::Bulk(data) => String::from_utf8(data.to_vec()).unwrap(),
            other => panic!("a bulk string: {other:?}"),
        })
        .collect()
}

/// One SCAN call: the next cursor and the keys.
fn scan(sm: &KvStateMachine, args: &ScanArgs) -> (u64, Vec<String>) {
    let Reply::Array(mut parts) = sm.read(&ReadCommand::Scan(args.clone())) else {
        panic!("SCAN answers an array")
    };
    let keys = texts(parts.pop().unwrap());
    let [Reply::Bulk(cursor)] = &parts[..] else {
        panic!("a cursor: {parts:?}")
    };
    (std::str::from_utf8(cursor).unwrap().parse().unwrap(), keys)
}

/// A whole scan; `between` runs after every call (the writes of other clients).
fn scan_all(log: &mut Log, args: ScanArgs, mut between: impl FnMut(&mut Log)) -> Vec<String> {
    let mut args = ScanArgs { cursor: 0, ..args };
    let mut found = Vec::new();
    loop {
        let (next, keys) = scan(&log.sm, &args);
        found.extend(keys);
        if next == 0 {
            return found;
        }
        between(log);
        args.cursor = next;
    }
}

fn all_keys(count: u32) -> ScanArgs {
    ScanArgs {
        cursor: 0,
        pattern: None,
        count,
        types: TypeFilter::Any,
    }
}

fn populate(log: &mut Log, n: usize) {
    let pairs = (0..n)
        .map(|i| (b(&format!("key:{i}")), b(&i.to_string())))
        .collect();
    log.apply(WriteCommand::MSet { pairs });
}

#[test]
fn rename_moves_the_value_and_its_deadline() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set("mykey", "hello"));
    assert_eq!(log.apply(rename("mykey", "mykey1", false)), WriteReply::Ok);
    assert_eq!(log.apply(rename("mykey1", "mykey2", false)), WriteReply::Ok);
    assert_eq!(log.get("mykey2"), Some(&b"hello"[..]));
    assert_eq!(log.get("mykey"), None);
    log.apply(set("mykey", "a"));
    log.apply(set("mykey2", "b"));
    log.apply(rename("mykey2", "mykey", false));
    assert_eq!(
        (log.get("mykey"), log.get("mykey2")),
        (Some(&b"b"[..]), None)
    );
    // RENAMENX
    log.apply(set("mykey", "foobar"));
    assert_eq!(
        log.apply(rename("mykey", "mykey2", true)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get("mykey2"), Some(&b"foobar"[..]));
    log.apply(set("mykey", "foo"));
    assert_eq!(
        log.apply(rename("mykey", "mykey2", true)),
        WriteReply::Integer(0)
    );
    assert_eq!(
        (log.get("mykey"), log.get("mykey2")),
        (Some(&b"foo"[..]), Some(&b"foobar"[..]))
    );
    // Errors and the same key.
    let no_such_key = WriteReply::Error(WriteError::NoSuchKey);
    assert_eq!(no_such_key.to_reply(), Reply::error("ERR no such key"));
    assert_eq!(log.apply(rename("nokey", "foobar", false)), no_such_key);
    assert_eq!(log.apply(rename("nokey", "foobar", true)), no_such_key);
    assert_eq!(log.apply(rename("mykey", "mykey", false)), WriteReply::Ok);
    assert_eq!(
        log.apply(rename("mykey", "mykey", true)),
        WriteReply::Integer(0)
    );
    assert_eq!(log.get("mykey"), Some(&b"foo"[..]));
    log.apply(del("mykey"));
    assert_eq!(log.apply(rename("mykey", "mykey", false)), no_such_key);
    // The deadline moves; the target's is not inherited.
    log.apply(set_px("vol", "foo", 100_000));
    log.apply(rename("vol", "vol2", false));
    assert_eq!(pttl(&log.sm, "vol2"), Reply::Integer(100_000));
    log.apply(set("plain", "foo"));
    log.apply(set_px("target", "bar", 100_000));
    log.apply(rename("plain", "target", false));
    assert_eq!(pttl(&log.sm, "target"), Reply::Integer(-1));
    assert_eq!(log.sm.keys_with_deadline(), 1, "only vol2's");
    // An expired source is no such key.
    log.apply(set_px("brief", "x", 10));
    log.stamp_ms = T0 + 10;
    assert_eq!(log.apply(rename("brief", "other", false)), no_such_key);
    assert_eq!(log.get("other"), None);
}

#[test]
fn rename_changes_both_watch_tokens_and_keeps_replicas_equal() {
    let mut log = Log::new();
    log.apply(set("src", "v"));
    log.apply(set("dst", "old"));
    let (src, dst) = (watched_now(&log, "src"), watched_now(&log, "dst"));
    log.apply(rename("src", "dst", false));
    assert!(
        log.sm.watched_changed(&src),
        "the source's removal is a change"
    );
    assert!(log.sm.watched_changed(&dst));
    let restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).unwrap();
    assert_eq!(restored, log.sm);
    assert!(restored.watched_changed(&src));
    assert!(!restored.watched_changed(&watched_now(&log, "src")));
    let mut fresh = Log::new();
    fresh.apply(set("dst", "v"));
    assert_eq!(fresh.sm.state_digest(), log.sm.state_digest());
}

#[test]
fn copy_copies_the_value_and_deadline() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set("mykey", "foobar"));
    assert_eq!(
        log.apply(copy("mykey", "mynewkey", false)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get("mynewkey"), Some(&b"foobar"[..]));
    assert_eq!(log.sm.read(&ReadCommand::DbSize), Reply::Integer(2));
    log.apply(set("mykey2", "hello"));
    assert_eq!(
        log.apply(copy("mykey2", "mynewkey", false)),
        WriteReply::Integer(0)
    );
    assert_eq!(
        log.apply(copy("mykey2", "mynewkey", true)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get("mynewkey"), Some(&b"hello"[..]));
    // Independent copies.
    log.apply(set("mynewkey", "hoge"));
    assert_eq!(log.get("mykey2"), Some(&b"hello"[..]));
    log.apply(set_px("mykey", "foobar", 100_000));
    log.apply(copy("mykey", "mynewkey", true));
    assert_eq!(pttl(&log.sm, "mynewkey"), Reply::Integer(100_000));
    log.apply(set("mykey", "foobar"));
    log.apply(copy("mykey", "mynewkey", true));
    assert_eq!(pttl(&log.sm, "mynewkey"), Reply::Integer(-1));
    assert_eq!(
        log.apply(copy("missing", "mynewkey", true)),
        WriteReply::Integer(0)
    );
    assert_eq!(log.get("mynewkey"), Some(&b"foobar"[..]));
    // An expired source is missing; an expired destination is free.
    log.apply(set_px("brief", "x", 10));
    log.apply(set_px("stale", "y", 10));
    log.stamp_ms = T0 + 10;
    assert_eq!(log.apply(copy("brief", "z", false)), WriteReply::Integer(0));
    assert_eq!(
        log.apply(copy("mykey", "stale", false)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get("stale"), Some(&b"foobar"[..]));
}

#[test]
fn type_touch_and_randomkey() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    let key_type = |sm: &KvStateMachine, key| sm.read(&ReadCommand::Type { key: b(key) });
    assert_eq!(log.sm.read(&ReadCommand::RandomKey), Reply::Null);
    log.apply(set("x", "10"));
    log.apply(del("x"));
    assert_eq!(log.sm.read(&ReadCommand::RandomKey), Reply::Null);
    log.apply(set("foo", "x"));
    log.apply(set("bar", "y"));
    assert_eq!(key_type(&log.sm, "foo"), Reply::simple("string"));
    assert_eq!(key_type(&log.sm, "nothing"), Reply::simple("none"));
    let drawn: Vec<Reply> = (0..100)
        .map(|_| log.sm.read(&ReadCommand::RandomKey))
        .collect();
    for key in ["foo", "bar"] {
        assert!(drawn.contains(&Reply::text(key)), "{key} never drawn");
    }
    assert_eq!(drawn.len(), 100);
    assert!(drawn
        .iter()
        .all(|k| [Reply::text("foo"), Reply::text("bar")].contains(k)));
    // Expired keys are never drawn, nor typed.
    log.apply(WriteCommand::FlushAll);
    log.apply(set_px("gone", "1", 10));
    log.stamp_ms = T0 + 10;
    log.tick(&[]);
    assert_eq!(log.sm.read(&ReadCommand::RandomKey), Reply::Null);
    assert_eq!(key_type(&log.sm, "gone"), Reply::simple("none"));
}

#[test]
fn keys_match_glob_patterns_exactly_and_skip_expired_keys() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    for key in ["key_x", "key_y", "key_z", "foo_a", "foo_b", "foo_c"] {
        log.apply(set(key, "hello"));
    }
    assert_eq!(keys(&log.sm, "foo*"), ["foo_a", "foo_b", "foo_c"]);
    assert_eq!(
        keys(&log.sm, "*"),
        ["foo_a", "foo_b", "foo_c", "key_x", "key_y", "key_z"]
    );
    assert!(keys(&log.sm, "FOO*").is_empty(), "case-sensitive");
    assert_eq!(keys(&log.sm, "key_[xy]"), ["key_x", "key_y"]);
    log.apply(set_px("foo_d", "x", 10));
    log.stamp_ms = T0 + 10;
    log.tick(&[]);
    assert_eq!(keys(&log.sm, "foo*"), ["foo_a", "foo_b", "foo_c"]);
    log.apply(WriteCommand::FlushAll);
    log.apply(set("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "1"));
    let pattern = "a*".repeat(20) + "b";
    assert!(keys(&log.sm, &pattern).is_empty());
}

#[test]
fn scan_returns_every_key_in_pages_of_count() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    populate(&mut log, 1000);
    log.apply(set_px("expired", "x", 10));
    log.stamp_ms = T0 + 10;
    log.tick(&[]);
    let mut found = scan_all(&mut log, all_keys(10), |_| {});
    found.sort();
    found.dedup();
    assert_eq!(found.len(), 1000);
    let (next, page) = scan(&log.sm, &all_keys(5));
    assert_eq!(page.len(), 5);
    assert_ne!(next, 0);
    let (next, page) = scan(&log.sm, &all_keys(SCAN_COUNT_MAX));
    assert_eq!((next, page.len()), (0, 1000));
    let matching = ScanArgs {
        pattern: Some(b("key:1??")),
        ..all_keys(10)
    };
    assert_eq!(scan_all(&mut log, matching, |_| {}).len(), 100);
    let lists = ScanArgs {
        types: TypeFilter::Only(crate::kind::Kind::List),
        ..all_keys(10)
    };
    assert!(scan_all(&mut log, lists, |_| {}).is_empty());
    let strings = ScanArgs {
        pattern: Some(b("key:*")),
        ..all_keys(10)
    };
    assert_eq!(scan_all(&mut log, strings, |_| {}).len(), 1000);
}

#[test]
fn scan_returns_every_key_present_throughout_whatever_changes_meanwhile() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    populate(&mut log, 100);
    // Other keys come and go between the calls: none of the 100 may be missed.
    let mut step = 0u64;
    let found = scan_all(&mut log, all_keys(3), |log| {
        step += 1;
        for j in 0..10 {
            log.apply(set(&format!("added:{}", (step * 7 + j) % 1000), "foo"));
        }
        log.apply(del(&format!("added:{}", step % 1000)));
    });
    let mut originals: Vec<&String> = found.iter().filter(|k| k.starts_with("key:")).collect();
    originals.sort();
    let total = originals.len();
    originals.dedup();
    assert_eq!(originals.len(), 100);
    assert_eq!(
        total, 100,
        "each exactly once: none was removed and added again"
    );
}

#[test]
fn a_cursor_from_one_replica_continues_on_another() {
    let mut one = Log::new();
    let mut two = Log::new();
    for log in [&mut one, &mut two] {
        populate(log, 50);
    }
    let (cursor, first) = scan(&one.sm, &all_keys(20));
    let (_, rest) = scan(
        &two.sm,
        &ScanArgs {
            cursor,
            ..all_keys(1000)
        },
    );
    let mut all: Vec<String> = first.into_iter().chain(rest).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 50);
}
