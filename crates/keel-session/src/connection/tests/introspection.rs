//! What a client asks about the server rather than the data: COMMAND's introspection replies,
//! CONFIG GET and SET (with its glob patterns), INFO's Raft fields, TIME, and SHUTDOWN refused.
//! Apart from the transaction and client tests because these answer from the node's settings and
//! status (`config.rs`, `info.rs`, `introspection.rs`), not from connection state.

use super::*;
use crate::connection::config::glob_match;
use keel_resp::{parse_reply, ProtocolVersion};

#[test]
fn command_introspection_shapes() {
    let mut c = conn();
    let count = reply(&mut c, "COMMAND COUNT");
    assert_eq!(
        count,
        Reply::Integer(keel_redis::command::COMMAND_TABLE.len() as i64)
    );
    let Reply::Array(all) = reply(&mut c, "COMMAND") else {
        panic!()
    };
    assert_eq!(Reply::Integer(all.len() as i64), count);
    let Reply::Array(info) = reply(&mut c, "COMMAND INFO get nosuch") else {
        panic!()
    };
    let Reply::Array(get) = &info[0] else {
        panic!()
    };
    assert_eq!(get.len(), 10);
    assert_eq!(get[0], Reply::text("get"));
    assert_eq!(get[1], Reply::Integer(2));
    assert_eq!(
        &get[3..6],
        [Reply::Integer(1), Reply::Integer(1), Reply::Integer(1)]
    );
    assert_eq!(info[1], Reply::Null);
    let docs = reply(&mut c, "COMMAND DOCS");
    let get_docs = map_get(&docs, "get").expect("docs for get");
    assert!(map_get(get_docs, "summary").is_some());
    for spec in keel_redis::command::COMMAND_TABLE {
        let docs = map_get(&docs, spec.name).expect("docs for every command");
        assert_ne!(
            map_get(docs, "summary"),
            Some(&Reply::text("")),
            "{}",
            spec.name
        );
    }
    // Every reply encodes and parses back in both protocol versions.
    for line in ["COMMAND", "COMMAND DOCS", "COMMAND LIST", "INFO"] {
        let r = reply(&mut c, line);
        for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
            let mut out = BytesMut::new();
            keel_resp::encode(&r, version, &mut out);
            let parsed = parse_reply(&out, &Limits::default()).unwrap();
            assert_eq!(parsed.map(|(_, n)| n), Some(out.len()), "{line}");
        }
    }
}

#[test]
fn config_get_answers_what_redis_benchmark_asks() {
    let mut c = conn();
    let save = reply(&mut c, "CONFIG GET save");
    assert_eq!(
        save,
        Reply::Map(vec![(Reply::text("save"), Reply::text(""))])
    );
    assert_eq!(wire(&c, &save), b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    let aof = reply(&mut c, "CONFIG GET appendonly");
    assert_eq!(map_get(&aof, "appendonly"), Some(&Reply::text("yes")));
    let Reply::Map(many) = reply(&mut c, "CONFIG GET append* SAVE") else {
        panic!()
    };
    let names: Vec<_> = many.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        names,
        [
            Reply::text("appendonly"),
            Reply::text("appendfsync"),
            Reply::text("save")
        ]
    );
    assert_eq!(reply(&mut c, "CONFIG GET nosuch"), Reply::Map(vec![]));
    let bulk = reply(&mut c, "CONFIG GET proto-max-bulk-len");
    assert_eq!(
        map_get(&bulk, "proto-max-bulk-len"),
        Some(&Reply::text("67108864"))
    );
}

#[test]
fn config_get_reports_the_node_settings() {
    let mut c = conn();
    let defaults = reply(
        &mut c,
        "CONFIG GET maxmemory* protected-mode maxclients timeout",
    );
    for (name, value) in [
        ("maxmemory", "0"),
        ("maxmemory-policy", "noeviction"),
        ("protected-mode", "yes"),
        ("maxclients", "10000"),
        ("timeout", "0"),
    ] {
        assert_eq!(
            map_get(&defaults, name),
            Some(&Reply::text(value)),
            "{name}"
        );
    }
    let mut c = conn().with_config(std::sync::Arc::new(crate::connection::SharedConfig::new(
        crate::connection::ConfigValues {
            maxclients: 900,
            timeout_seconds: 30,
            maxmemory: 100 * 1024 * 1024,
            protected_mode: false,
            ..crate::connection::ConfigValues::default()
        },
    )));
    let set = reply(&mut c, "CONFIG GET *");
    for (name, value) in [
        ("maxmemory", "104857600"),
        ("protected-mode", "no"),
        ("maxclients", "900"),
        ("timeout", "30"),
    ] {
        assert_eq!(map_get(&set, name), Some(&Reply::text(value)), "{name}");
    }
}

#[test]
fn info_reports_the_raft_fields() {
    let mut c = conn();
    let Reply::Bulk(info) = reply(&mut c, "INFO") else {
        panic!()
    };
    let text = String::from_utf8(info.to_vec()).unwrap();
    for line in [
        "# Raft",
        "node_id:2",
        "role:follower",
        "term:7",
        "leader_id:1",
        "commit_index:100",
        "applied_index:99",
        "snapshot_index:64",
        "first_log_index:65",
        "last_log_index:101",
        "members:1=127.0.0.1:7001,2=127.0.0.1:7002",
        "learners:4=127.0.0.1:7004",
        "client_addrs:1=127.0.0.1:6001,4=node4.example:6379",
        "state_digest:00000000deadbeef",
        "log_time_ms:1700000000123",
        "clock_offset_ms:-612",
        "campaigns_held:1",
        "heartbeat_gap_max_ms:41",
        "clock_outlier:0",
        "recovering:1",
        "recovering_to_index:150",
        "follower_clock_offsets_ms:",
        "db0:keys=3,expires=1,avg_ttl=0",
        "redis_version:7.0.0",
        "# Memory",
        "used_memory:1572864",
        "used_memory_human:1.50M",
        "used_memory_rss:10485760",
        "used_memory_rss_human:10.00M",
        "maxmemory:104857600",
        "maxmemory_human:100.00M",
        "maxmemory_policy:noeviction",
    ] {
        assert!(
            text.split("\r\n").any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let Reply::Bulk(raft) = reply(&mut c, "INFO raft") else {
        panic!()
    };
    assert!(raft.starts_with(b"# Raft\r\n"));
    assert!(!raft.windows(8).any(|w| w == b"# Server"));
    assert_eq!(reply(&mut c, "RAFT.STATUS"), Reply::Bulk(raft));
    assert_eq!(reply(&mut c, "INFO nosuchsection"), Reply::text(""));
}

#[test]
fn glob_patterns() {
    for (pattern, text, want) in [
        ("*", "save", true),
        ("save", "SAVE", true),
        ("sa?e", "save", true),
        ("append*", "appendonly", true),
        ("*only", "appendonly", true),
        ("a*e*y", "appendonly", true),
        ("[ab]ppend*", "appendonly", true),
        ("[^a]ppend*", "appendonly", false),
        ("[a-c]ave", "bave", true),
        ("\\*", "*", true),
        ("save", "saves", false),
        ("*x", "save", false),
        ("", "", true),
        ("[abc", "a", false),
    ] {
        assert_eq!(
            glob_match(pattern.as_bytes(), text.as_bytes()),
            want,
            "{pattern} vs {text}"
        );
    }
}

#[test]
fn time_shutdown_and_encoding_thresholds() {
    let mut c = conn();
    let Reply::Array(time) = reply(&mut c, "TIME") else {
        panic!("TIME answers an array")
    };
    let [Reply::Bulk(seconds), Reply::Bulk(micros)] = &time[..] else {
        panic!("{time:?}")
    };
    let seconds: u64 = std::str::from_utf8(seconds).unwrap().parse().unwrap();
    let micros: u64 = std::str::from_utf8(micros).unwrap().parse().unwrap();
    assert!(seconds > 1_700_000_000 && micros < 1_000_000);
    assert!(matches!(reply(&mut c, "SHUTDOWN"), Reply::Error(e) if e.contains("SIGTERM")));
    // SHUTDOWN and SAVE inside MULTI abort the transaction, as in Redis.
    for command in ["SHUTDOWN", "SAVE"] {
        assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
        assert_eq!(
            reply(&mut c, command),
            Reply::error("ERR Command not allowed inside a transaction")
        );
        assert!(matches!(reply(&mut c, "EXEC"), Reply::Error(e) if e.starts_with("EXECABORT")));
    }
    // The thresholds are accepted under either name and reported under both.
    assert_eq!(
        reply(&mut c, "CONFIG SET hash-max-ziplist-entries 1"),
        Reply::OK
    );
    let got = reply(&mut c, "CONFIG GET hash-max-*-entries");
    assert_eq!(
        map_get(&got, "hash-max-listpack-entries"),
        Some(&Reply::text("1"))
    );
    assert_eq!(
        map_get(&got, "hash-max-ziplist-entries"),
        Some(&Reply::text("1"))
    );
    assert!(matches!(
        reply(&mut c, "CONFIG SET zset-max-listpack-value x"),
        Reply::Error(e) if e.contains("integer")
    ));
}

/// The pub/sub commands as Redis 7.0 describes them: arity, flags, a shard channel where a key
/// would be, PUBSUB's subcommands, and the `@pubsub` category.
#[test]
fn command_info_describes_the_pubsub_commands() {
    let mut c = conn();
    let Reply::Array(info) = reply(&mut c, "COMMAND INFO publish spublish ssubscribe pubsub")
    else {
        panic!()
    };
    let fields = |at: usize| match &info[at] {
        Reply::Array(fields) => fields.clone(),
        other => panic!("{other:?}"),
    };
    let (publish, spublish, ssubscribe, pubsub) = (fields(0), fields(1), fields(2), fields(3));
    assert_eq!(
        (&publish[0], &publish[1]),
        (&Reply::text("publish"), &Reply::Integer(3))
    );
    let flags = format!("{:?}", publish[2]);
    assert!(
        flags.contains("pubsub") && flags.contains("fast"),
        "{flags}"
    );
    assert!(format!("{:?}", publish[6]).contains("@pubsub"));
    assert_eq!(
        &publish[3..6],
        [Reply::Integer(0), Reply::Integer(0), Reply::Integer(0)]
    );
    assert_eq!(
        &spublish[3..6],
        [Reply::Integer(1), Reply::Integer(1), Reply::Integer(1)]
    );
    assert!(format!("{:?}", spublish[8]).contains("not_key"));
    assert_eq!(ssubscribe[1], Reply::Integer(-2));
    assert_eq!(
        &ssubscribe[3..6],
        [Reply::Integer(1), Reply::Integer(-1), Reply::Integer(1)]
    );
    assert!(format!("{:?}", pubsub[9]).contains("pubsub|numsub"));
    let Reply::Array(names) = reply(&mut c, "COMMAND LIST FILTERBY ACLCAT pubsub") else {
        panic!()
    };
    // The eight commands and PUBSUB's six subcommands (PUBSUB itself has no category).
    assert_eq!(names.len(), 14, "{names:?}");
}
