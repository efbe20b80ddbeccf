use bytes::{Bytes, BytesMut};

use super::config::glob_match;
use super::*;
use crate::resp::{parse_reply, ProtocolVersion};

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

struct FakeNode(NodeStatus);

impl NodeInfo for FakeNode {
    fn status(&self) -> NodeStatus {
        self.0.clone()
    }
}

fn node() -> FakeNode {
    FakeNode(NodeStatus {
        node_id: 2,
        role: "follower".into(),
        term: 7,
        leader_id: Some(1),
        commit_index: 100,
        applied_index: 99,
        snapshot_index: 64,
        first_log_index: 65,
        last_log_index: 101,
        members: vec![
            MemberInfo {
                id: 1,
                peer_addr: "127.0.0.1:7001".into(),
                client_addr: "127.0.0.1:6001".into(),
                voter: true,
            },
            MemberInfo {
                id: 2,
                peer_addr: "127.0.0.1:7002".into(),
                client_addr: String::new(),
                voter: true,
            },
            MemberInfo {
                id: 4,
                peer_addr: "127.0.0.1:7004".into(),
                client_addr: "node4.example:6379".into(),
                voter: false,
            },
        ],
        state_digest: 0xdead_beef,
        log_time_ms: 1_700_000_000_123,
        clock_offset_ms: Some(-612),
        campaigns_held: true,
        clock_outlier: false,
        recovering_to: Some(150),
        follower_clock_offsets: Vec::new(),
        keys: 3,
        expires: 1,
        connected_clients: 1,
        maxclients: 10_000,
        client_query_buffers_bytes: 16_384,
        used_memory: 1_572_864,
        used_memory_rss: 10_485_760,
        maxmemory: 104_857_600,
        ..NodeStatus::default()
    })
}

fn conn() -> ClientConnection {
    ClientConnection::new(9, "127.0.0.1:5555", Limits::default())
}

fn run(conn: &mut ClientConnection, line: &str) -> Dispatch {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    conn.dispatch(&args, &node())
}

fn reply(conn: &mut ClientConnection, line: &str) -> Reply {
    match run(conn, line) {
        Dispatch::Reply(reply) => reply,
        other => panic!("{line}: {other:?}"),
    }
}

fn wire(conn: &ClientConnection, reply: &Reply) -> Vec<u8> {
    let mut out = BytesMut::new();
    conn.encode(reply, &mut out);
    out.to_vec()
}

fn map_get<'a>(reply: &'a Reply, key: &str) -> Option<&'a Reply> {
    let Reply::Map(pairs) = reply else {
        panic!("not a map: {reply:?}")
    };
    pairs.iter().find_map(|(k, v)| match k {
        Reply::Simple(s) if s == key => Some(v),
        Reply::Bulk(b) if b == key.as_bytes() => Some(v),
        _ => None,
    })
}

#[test]
fn hello_3_switches_to_resp3_and_hello_2_back() {
    let mut c = conn();
    assert_eq!(c.protocol(), ProtocolVersion::Resp2);
    let hello = reply(&mut c, "HELLO 3");
    assert_eq!(c.protocol(), ProtocolVersion::Resp3);
    assert_eq!(map_get(&hello, "proto"), Some(&Reply::Integer(3)));
    assert_eq!(map_get(&hello, "id"), Some(&Reply::Integer(9)));
    assert_eq!(map_get(&hello, "server"), Some(&Reply::text("keel")));
    assert_eq!(map_get(&hello, "mode"), Some(&Reply::text("standalone")));
    assert_eq!(map_get(&hello, "role"), Some(&Reply::text("master")));
    assert_eq!(map_get(&hello, "modules"), Some(&Reply::Array(vec![])));
    // In RESP3 it is a real map, and nulls are `_`.
    let encoded = wire(&c, &hello);
    assert!(encoded.starts_with(b"%7\r\n$6\r\nserver\r\n$4\r\nkeel\r\n"));
    assert_eq!(wire(&c, &Reply::Null), b"_\r\n");

    let hello = reply(&mut c, "HELLO 2");
    assert_eq!(c.protocol(), ProtocolVersion::Resp2);
    assert_eq!(map_get(&hello, "proto"), Some(&Reply::Integer(2)));
    // In RESP2 the same fields come as a flat array of 14.
    let encoded = wire(&c, &hello);
    assert!(encoded.starts_with(b"*14\r\n$6\r\nserver\r\n"));
    assert_eq!(wire(&c, &Reply::Null), b"$-1\r\n");
    // A bare HELLO reports without switching.
    let hello = reply(&mut c, "HELLO");
    assert_eq!(map_get(&hello, "proto"), Some(&Reply::Integer(2)));
}

#[test]
fn hello_auth_and_setname() {
    let mut c = conn();
    let denied = reply(&mut c, "HELLO 3 AUTH admin pw");
    assert!(matches!(&denied, Reply::Error(e) if e.starts_with("WRONGPASS")));
    // Nothing changed on failure.
    assert_eq!(c.protocol(), ProtocolVersion::Resp2);
    reply(&mut c, "HELLO 3 AUTH default anything SETNAME worker-1");
    assert_eq!(c.protocol(), ProtocolVersion::Resp3);
    assert_eq!(c.name().map(|n| n.as_ref()), Some(&b"worker-1"[..]));
    assert_eq!(
        reply(&mut c, "HELLO 4"),
        Reply::error("NOPROTO unsupported protocol version")
    );
}

/// With `requirepass`, nothing but AUTH, HELLO ... AUTH and QUIT runs before the password, in
/// Redis's words; a wrong password changes nothing.
#[test]
fn requirepass_gates_every_command_until_auth() {
    let mut c = conn().with_requirepass(Some(Bytes::from_static(b"s3cret")));
    for line in [
        "GET k",
        "SET k v",
        "PING",
        "INFO",
        "RAFT.MEMBER ADD 4 a:1",
        "NOSUCH x",
        "MULTI",
    ] {
        assert_eq!(
            reply(&mut c, line),
            Reply::error("NOAUTH Authentication required."),
            "{line}"
        );
    }
    assert!(
        matches!(reply(&mut c, "HELLO 3"), Reply::Error(e) if e.starts_with("NOAUTH HELLO must be called"))
    );
    let wrong = Reply::error("WRONGPASS invalid username-password pair or user is disabled.");
    assert_eq!(reply(&mut c, "AUTH nope"), wrong);
    assert_eq!(reply(&mut c, "AUTH admin s3cret"), wrong);
    assert_eq!(reply(&mut c, "HELLO 3 AUTH default nope"), wrong);
    assert_eq!(
        c.protocol(),
        ProtocolVersion::Resp2,
        "a failed HELLO changes nothing"
    );
    assert_eq!(
        reply(&mut c, "GET k"),
        Reply::error("NOAUTH Authentication required.")
    );
    assert_eq!(reply(&mut c, "AUTH s3cret"), Reply::OK);
    assert_eq!(
        run(&mut c, "GET k"),
        Dispatch::Read(ReadCommand::Get {
            key: Bytes::from_static(b"k")
        })
    );
    // The two-argument form and HELLO ... AUTH work as well.
    let mut d = conn().with_requirepass(Some(Bytes::from_static(b"s3cret")));
    assert_eq!(reply(&mut d, "AUTH default s3cret"), Reply::OK);
    let mut e = conn().with_requirepass(Some(Bytes::from_static(b"s3cret")));
    assert!(matches!(
        reply(&mut e, "HELLO 3 AUTH default s3cret"),
        Reply::Map(_)
    ));
    assert_eq!(e.protocol(), ProtocolVersion::Resp3);
    assert_eq!(reply(&mut e, "PING"), Reply::PONG);
    let mut q = conn().with_requirepass(Some(Bytes::from_static(b"s3cret")));
    assert_eq!(run(&mut q, "QUIT"), Dispatch::ReplyAndClose(Reply::OK));
}

/// Without a password, AUTH answers as Redis does: the one-argument form is an error (never a
/// silent `+OK`), the default user takes any password, other users none.
#[test]
fn auth_without_a_password_configured_answers_as_redis() {
    let mut c = conn();
    assert!(matches!(
        reply(&mut c, "AUTH anything"),
        Reply::Error(e) if e.starts_with("ERR AUTH <password> called without any password configured")
    ));
    assert_eq!(reply(&mut c, "AUTH default anything"), Reply::OK);
    assert!(matches!(reply(&mut c, "AUTH admin x"), Reply::Error(e) if e.starts_with("WRONGPASS")));
    assert!(
        matches!(reply(&mut c, "AUTH"), Reply::Error(e) if e.contains("wrong number of arguments"))
    );
    assert!(matches!(reply(&mut c, "AUTH a b c"), Reply::Error(e) if e.contains("syntax error")));
}

#[test]
fn client_subcommands() {
    let mut c = conn();
    assert_eq!(reply(&mut c, "CLIENT GETNAME"), Reply::Null);
    assert_eq!(reply(&mut c, "CLIENT SETNAME app"), Reply::OK);
    assert_eq!(reply(&mut c, "CLIENT GETNAME"), Reply::text("app"));
    assert_eq!(reply(&mut c, "CLIENT ID"), Reply::Integer(9));
    assert_eq!(reply(&mut c, "CLIENT SETINFO LIB-NAME redis-py"), Reply::OK);
    assert_eq!(reply(&mut c, "CLIENT SETINFO LIB-VER 5.0.1"), Reply::OK);
    let Reply::Bulk(info) = reply(&mut c, "CLIENT INFO") else {
        panic!()
    };
    let info = String::from_utf8(info.to_vec()).unwrap();
    assert!(
        info.starts_with("id=9 addr=127.0.0.1:5555 laddr= fd=-1 name=app age=0 idle=0 flags=N"),
        "{info}"
    );
    assert!(
        info.ends_with(
            "cmd=client|info user=default redir=-1 resp=2 lib-name=redis-py lib-ver=5.0.1\n"
        ),
        "{info}"
    );
}

/// A connection's record as the server makes it, at `10.0.0.1:<id>`.
fn record(id: u64) -> std::sync::Arc<super::ClientRecord> {
    let addr = format!("10.0.0.1:{id}");
    std::sync::Arc::new(super::ClientRecord::new(id, addr, String::new(), 3))
}

#[test]
fn client_list_shows_every_registered_connection_and_filters_by_id() {
    use super::ClientRegistry;
    use std::sync::Arc;
    let registry = Arc::new(ClientRegistry::default());
    let (mine, other) = (record(9), record(12));
    let _registrations = [
        registry.register(Arc::clone(&mine)),
        registry.register(Arc::clone(&other)),
    ];
    other.state().name = "worker".into();
    let mut c = conn().with_registry(mine, registry);
    let Reply::Bulk(list) = reply(&mut c, "CLIENT LIST") else {
        panic!()
    };
    let list = String::from_utf8(list.to_vec()).unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(lines[0].starts_with("id=9 ") && lines[0].contains("cmd=client|list"));
    assert!(lines[1].starts_with("id=12 ") && lines[1].contains(" name=worker "));
    assert!(lines[1].contains(" qbuf=0 ") && lines[1].contains(" cmd=NULL "));
    let Reply::Bulk(only) = reply(&mut c, "CLIENT LIST ID 12 99") else {
        panic!()
    };
    assert!(only.starts_with(b"id=12 ") && only.iter().filter(|&&b| b == b'\n').count() == 1);
    assert_eq!(reply(&mut c, "CLIENT LIST TYPE pubsub"), Reply::text(""));
    assert_eq!(
        reply(&mut c, "CLIENT LIST ID x"),
        Reply::error("ERR Invalid client ID")
    );
}

#[test]
fn client_kill_marks_the_matching_connections_and_counts_them() {
    use super::{ClientRecord, ClientRegistry};
    use std::sync::Arc;
    let registry = Arc::new(ClientRegistry::default());
    let (mine, first, second) = (record(9), record(12), record(13));
    let _registrations = [&mine, &first, &second].map(|r| registry.register(Arc::clone(r)));
    let mut c = conn().with_registry(Arc::clone(&mine), registry);
    let killed = |r: &ClientRecord| {
        let waiting = std::pin::pin!(r.killed());
        std::future::Future::poll(
            waiting,
            &mut std::task::Context::from_waker(std::task::Waker::noop()),
        )
        .is_ready()
    };
    assert_eq!(reply(&mut c, "CLIENT KILL ID 12"), Reply::Integer(1));
    assert!(killed(&first) && !killed(&second) && !killed(&mine));
    assert_eq!(reply(&mut c, "CLIENT KILL 10.0.0.1:13"), Reply::OK);
    assert_eq!(
        reply(&mut c, "CLIENT KILL 10.0.0.1:99"),
        Reply::error("ERR No such client")
    );
    assert_eq!(
        reply(&mut c, "CLIENT KILL TYPE pubsub SKIPME no"),
        Reply::Integer(0)
    );
    // 12 and 13 are killed already (their tasks would be closing them): not counted again.
    assert_eq!(reply(&mut c, "CLIENT KILL SKIPME yes"), Reply::Integer(0));
    assert!(!killed(&mine));
    assert_eq!(reply(&mut c, "CLIENT KILL SKIPME no"), Reply::Integer(1));
    assert!(killed(&mine));
    for (request, error) in [
        (
            "CLIENT KILL",
            "ERR wrong number of arguments for 'client|kill' command",
        ),
        ("CLIENT KILL ID 10 wrong_arg", "ERR syntax error"),
        ("CLIENT KILL ID 0", "ERR client-id should be greater than 0"),
        ("CLIENT KILL TYPE wrong", "ERR Unknown client type 'wrong'"),
        ("CLIENT KILL USER someone", "ERR No such user 'someone'"),
        ("CLIENT KILL SKIPME maybe", "ERR syntax error"),
    ] {
        assert_eq!(reply(&mut c, request), Reply::error(error), "{request}");
    }
}

#[test]
fn data_commands_are_handed_back() {
    let mut c = conn();
    assert!(matches!(run(&mut c, "SET k v"), Dispatch::Write(_)));
    assert!(matches!(run(&mut c, "GET k"), Dispatch::Read(_)));
    assert!(matches!(run(&mut c, "RAFT.SNAPSHOT"), Dispatch::Admin(_)));
    assert_eq!(run(&mut c, "QUIT"), Dispatch::ReplyAndClose(Reply::OK));
    assert_eq!(reply(&mut c, "PING"), Reply::PONG);
    assert_eq!(reply(&mut c, "PING hi"), Reply::text("hi"));
    assert_eq!(reply(&mut c, "ECHO hi"), Reply::text("hi"));
    assert_eq!(reply(&mut c, "SELECT 0"), Reply::OK);
    assert_eq!(
        reply(&mut c, "GET"),
        Reply::error("ERR wrong number of arguments for 'get' command")
    );
}

#[test]
fn command_introspection_shapes() {
    let mut c = conn();
    let count = reply(&mut c, "COMMAND COUNT");
    assert_eq!(
        count,
        Reply::Integer(crate::command::COMMAND_TABLE.len() as i64)
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
    for spec in crate::command::COMMAND_TABLE {
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
            crate::resp::encode(&r, version, &mut out);
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
    let mut c = conn().with_config(std::sync::Arc::new(super::SharedConfig::new(
        super::ConfigValues {
            maxclients: 900,
            timeout_seconds: 30,
            maxmemory: 100 * 1024 * 1024,
            protected_mode: false,
            ..super::ConfigValues::default()
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

// ---- MULTI / EXEC / DISCARD ----

const QUEUED_REPLY: Reply = Reply::Simple(std::borrow::Cow::Borrowed("QUEUED"));

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

#[test]
fn multi_queues_commands_and_exec_hands_them_over() {
    use crate::command::{QueuedCommand, ReadCommand};
    let mut c = conn();
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert!(c.in_transaction());
    for line in [
        "SET k 1", "INCR k", "GET k", "MGET k x", "PING", "PING hi", "ECHO e",
    ] {
        assert_eq!(reply(&mut c, line), QUEUED_REPLY, "{line}");
    }
    let Dispatch::Exec(tx) = run(&mut c, "exec") else {
        panic!("EXEC did not hand over the transaction")
    };
    assert!(!c.in_transaction());
    assert_eq!(tx.commands.len(), 7);
    assert_eq!(
        tx.commands[2],
        QueuedCommand::Read(ReadCommand::Get {
            key: Bytes::from_static(b"k")
        })
    );
    assert_eq!(tx.commands[4], QueuedCommand::Ping);
    assert_eq!(
        tx.commands[5],
        QueuedCommand::Echo(Bytes::from_static(b"hi"))
    );
    assert_eq!(
        tx.requests[1],
        args("INCR k"),
        "requests kept for forwarding"
    );
    // Back to normal: commands run at once again.
    assert!(matches!(run(&mut c, "SET k 2"), Dispatch::Write(_)));
}

#[test]
fn transaction_errors_abort_with_execabort() {
    let mut c = conn();
    let execabort = Reply::error("EXECABORT Transaction discarded because of previous errors.");
    // Unknown command, wrong arity, syntax error: each answered, and EXEC then aborts.
    for bad in ["FOO bar", "GET", "SET k v PX", "INCRBY k x"] {
        assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
        assert_eq!(reply(&mut c, "SET a 1"), QUEUED_REPLY);
        let error = reply(&mut c, bad);
        assert!(error.is_error(), "{bad}: {error:?}");
        // Later valid commands are still answered QUEUED (as Redis does).
        assert_eq!(reply(&mut c, "SET b 1"), QUEUED_REPLY);
        assert_eq!(reply(&mut c, "EXEC"), execabort, "{bad}");
        assert!(!c.in_transaction());
    }
    // Commands not allowed inside a transaction (they change the connection or the cluster)
    // abort it too.
    for not_allowed in [
        "HELLO 3",
        "CLIENT SETNAME x",
        "AUTH secret",
        "RAFT.SNAPSHOT",
        "CONFIG SET maxmemory 10",
    ] {
        assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
        assert_eq!(
            reply(&mut c, not_allowed),
            Reply::error("ERR Command not allowed inside a transaction"),
            "{not_allowed}"
        );
        assert_eq!(reply(&mut c, "EXEC"), execabort, "{not_allowed}");
    }
    // HELLO inside MULTI changed nothing.
    assert_eq!(c.protocol(), ProtocolVersion::Resp2);
    // An invalid CONFIG SET is queued with its error, which EXEC answers in its place.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "CONFIG SET maxmemory bla"), QUEUED_REPLY);
    let Reply::Array(replies) = reply(&mut c, "EXEC") else {
        panic!()
    };
    assert!(
        matches!(&replies[..], [Reply::Error(e)] if e.starts_with("ERR CONFIG SET failed")),
        "{replies:?}"
    );
}

/// What Redis queues, keel queues: commands this node answers are answered at once and their
/// replies take their places in EXEC's array, around the state machine's; WATCH inside a
/// transaction is an error that keeps it.
#[test]
fn local_commands_are_queued_and_spliced_into_exec_s_reply() {
    let mut c = conn();
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(
        reply(&mut c, "WATCH k"),
        Reply::error("ERR WATCH inside MULTI is not allowed")
    );
    for line in [
        "SELECT 0",
        "SET k 1",
        "CONFIG GET maxmemory",
        "GET k",
        "UNWATCH",
    ] {
        assert_eq!(reply(&mut c, line), QUEUED_REPLY, "{line}");
    }
    let Dispatch::Exec(tx) = run(&mut c, "EXEC") else {
        panic!("a transaction with data commands is proposed")
    };
    assert_eq!(tx.commands.len(), 2, "only the data commands are logged");
    assert_eq!(tx.requests.len(), 5, "all are forwarded");
    let positions: Vec<usize> = tx.local_replies.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, [0, 2, 4]);
    // The state machine answers the two data commands; the local replies go back in place.
    let applied = Reply::Array(vec![Reply::OK, Reply::bulk("1")]);
    let Reply::Array(all) = crate::connection::splice(applied, &tx.local_replies) else {
        panic!()
    };
    assert_eq!(all.len(), 5);
    assert_eq!(
        (&all[0], &all[1], &all[3], &all[4]),
        (&Reply::OK, &Reply::OK, &Reply::bulk("1"), &Reply::OK)
    );
    assert!(
        matches!(&all[2], Reply::Map(pair) if pair.len() == 1),
        "CONFIG GET's reply: {:?}",
        all[2]
    );
    // An error instead of the array (a duplicate, say) is answered as it is.
    let error = Reply::error("ERR x");
    assert_eq!(
        crate::connection::splice(error.clone(), &tx.local_replies),
        error
    );
    // Only local commands: answered at once, nothing proposed.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SELECT 0"), QUEUED_REPLY);
    assert_eq!(reply(&mut c, "CLIENT ID"), QUEUED_REPLY);
    assert!(matches!(
        reply(&mut c, "EXEC"),
        Reply::Array(replies) if replies.len() == 2 && replies[0] == Reply::OK
    ));
}

/// WATCH reads a watch point (a linearizable read); the keys are watched from it; EXEC carries
/// them in its log entry and ends the watch; UNWATCH and DISCARD forget them; a follower
/// forwards them ahead of the queued requests, and the leader takes them inside MULTI.
#[test]
fn watch_reads_a_watch_point_and_exec_carries_the_watched_keys() {
    let mut c = conn();
    // EXEC pipelined behind a WATCH not answered yet is refused, never run unwatched.
    assert_eq!(
        run(&mut c, "WATCH a"),
        Dispatch::Read(ReadCommand::WatchPoint)
    );
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SET a 1"), QUEUED_REPLY);
    assert!(matches!(
        reply(&mut c, "EXEC"),
        Reply::Error(e) if e.starts_with("EXECABORT EXEC sent before WATCH")
    ));
    let point = Reply::Array(vec![Reply::Integer(7), Reply::Integer(1_000)]);
    assert_eq!(c.watch_point(&[b("a")], &point), Reply::OK);
    assert_eq!(reply(&mut c, "UNWATCH"), Reply::OK);
    assert_eq!(
        run(&mut c, "WATCH a b"),
        Dispatch::Read(ReadCommand::WatchPoint)
    );
    assert_eq!(c.watch_point(&[b("a"), b("b")], &point), Reply::OK);
    assert_eq!(c.watched_keys(), 2);
    // An error instead of the point is WATCH's reply, and nothing is watched.
    let refused = Reply::error("TRYAGAIN no leader");
    assert_eq!(c.watch_point(&[b("c")], &refused), refused);
    assert_eq!(c.watched_keys(), 2);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SET a 1"), QUEUED_REPLY);
    let Dispatch::Exec(tx) = run(&mut c, "EXEC") else {
        panic!("EXEC proposes")
    };
    assert_eq!(c.watched_keys(), 0, "EXEC ends the watch");
    let watched = |key: &str| WatchedKey {
        key: b(key),
        index: 7,
        time_ms: 1_000,
    };
    assert_eq!(tx.watched, vec![watched("a"), watched("b")]);
    assert!(
        matches!(tx.logged(), LoggedCommand::WatchedExec { watched, commands }
        if watched.len() == 2 && commands.len() == 1)
    );
    let forwarded = tx.forwarded_requests();
    assert_eq!(forwarded.len(), 2);
    let line = |args: &Vec<Bytes>| {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line(&forwarded[0]), "RAFT.WATCHED a 7 1000 b 7 1000");
    assert_eq!(line(&forwarded[1]), "SET a 1");
    // The leader's side: RAFT.WATCHED inside MULTI sets the transaction's watched keys.
    let mut leader = conn();
    assert_eq!(reply(&mut leader, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut leader, &line(&forwarded[0])), Reply::OK);
    assert_eq!(reply(&mut leader, "SET a 1"), QUEUED_REPLY);
    let Dispatch::Exec(at_leader) = run(&mut leader, "EXEC") else {
        panic!("EXEC proposes")
    };
    assert_eq!(at_leader.watched, tx.watched);
    assert_eq!(at_leader.logged(), tx.logged());
    // UNWATCH and DISCARD forget; a transaction of local commands with watches still proposes.
    assert_eq!(c.watch_point(&[b("a")], &point), Reply::OK);
    assert_eq!(reply(&mut c, "UNWATCH"), Reply::OK);
    assert_eq!(c.watched_keys(), 0);
    assert_eq!(c.watch_point(&[b("a")], &point), Reply::OK);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "DISCARD"), Reply::OK);
    assert_eq!(c.watched_keys(), 0);
    assert_eq!(c.watch_point(&[b("a")], &point), Reply::OK);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SELECT 0"), QUEUED_REPLY);
    assert!(matches!(run(&mut c, "EXEC"), Dispatch::Exec(tx) if tx.commands.is_empty()));
}

#[test]
fn discard_nesting_and_control_outside_multi() {
    let mut c = conn();
    assert_eq!(
        reply(&mut c, "EXEC"),
        Reply::error("ERR EXEC without MULTI")
    );
    assert_eq!(
        reply(&mut c, "DISCARD"),
        Reply::error("ERR DISCARD without MULTI")
    );
    assert_eq!(
        reply(&mut c, "RAFT.WATCHED k 1 2"),
        Reply::error("ERR RAFT.WATCHED without MULTI")
    );
    assert_eq!(reply(&mut c, "UNWATCH"), Reply::OK);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SET k 1"), QUEUED_REPLY);
    // A nested MULTI is an error but does not abort the transaction.
    assert_eq!(
        reply(&mut c, "MULTI"),
        Reply::error("ERR MULTI calls can not be nested")
    );
    assert_eq!(reply(&mut c, "DISCARD"), Reply::OK);
    assert!(!c.in_transaction());
    assert_eq!(
        reply(&mut c, "EXEC"),
        Reply::error("ERR EXEC without MULTI")
    );
    // An empty transaction answers an empty array at once.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "exec"), Reply::Array(vec![]));
    // After a nested MULTI the transaction still executes.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert!(reply(&mut c, "MULTI").is_error());
    assert_eq!(reply(&mut c, "INCR n"), QUEUED_REPLY);
    assert!(matches!(run(&mut c, "EXEC"), Dispatch::Exec(tx) if tx.commands.len() == 1));
    // QUIT inside MULTI closes the connection.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(run(&mut c, "QUIT"), Dispatch::ReplyAndClose(Reply::OK));
}

#[test]
fn queued_commands_are_bounded() {
    let limits = Limits {
        multi_commands_max: 3,
        multi_bytes_max: 250,
        ..Limits::default()
    };
    let mut c = ClientConnection::new(1, "127.0.0.1:1", limits);
    let execabort = Reply::error("EXECABORT Transaction discarded because of previous errors.");
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    for _ in 0..3 {
        assert_eq!(reply(&mut c, "INCR n"), QUEUED_REPLY);
    }
    let error = reply(&mut c, "INCR n");
    assert_eq!(
        error,
        Reply::error(
            "ERR transaction too large: more than 3 queued commands (multi-commands-max); the \
             transaction is discarded at EXEC"
        )
    );
    assert_eq!(reply(&mut c, "EXEC"), execabort);

    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    // 14 bytes and 3 arguments: 14 + 3 x 32 = 110 counted each.
    assert_eq!(reply(&mut c, "SET k 0123456789"), QUEUED_REPLY);
    assert_eq!(reply(&mut c, "SET k 0123456789"), QUEUED_REPLY); // 220
    let Reply::Error(error) = reply(&mut c, "SET k 0123456789") else {
        panic!("over the byte bound")
    };
    assert!(error.contains("exceed 250 bytes"), "{error}");
    assert_eq!(reply(&mut c, "EXEC"), execabort);
    // The bounds apply per transaction.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SET k 0123456789"), QUEUED_REPLY);
    assert!(matches!(run(&mut c, "EXEC"), Dispatch::Exec(_)));
}

#[test]
fn transaction_commands_are_in_command_info() {
    let mut c = conn();
    let Reply::Array(info) = reply(&mut c, "COMMAND INFO multi exec discard watch unwatch") else {
        panic!("not an array")
    };
    assert_eq!(info.len(), 5);
    assert!(info.iter().all(|i| matches!(i, Reply::Array(_))));
}

#[test]
fn client_reply_hands_its_mode_to_the_server_once() {
    use crate::command::ReplyMode;
    let mut c = conn();
    assert_eq!(c.take_reply_mode(), None);
    for (request, mode) in [
        ("CLIENT REPLY OFF", ReplyMode::Off),
        ("CLIENT REPLY skip", ReplyMode::Skip),
        ("CLIENT REPLY ON", ReplyMode::On),
    ] {
        assert_eq!(reply(&mut c, request), Reply::OK);
        assert_eq!(c.take_reply_mode(), Some(mode), "{request}");
        assert_eq!(c.take_reply_mode(), None);
    }
    assert_eq!(
        reply(&mut c, "CLIENT REPLY MAYBE"),
        Reply::error("ERR syntax error")
    );
    assert_eq!(c.take_reply_mode(), None);
}

/// A connection of a node with a monitor; the monitor's queued lines, without their time.
fn monitored_pair() -> (ClientConnection, std::sync::Arc<ClientRecord>) {
    let registry = std::sync::Arc::new(ClientRegistry::default());
    let watcher = record(1);
    let client = record(2);
    std::mem::forget(registry.register(std::sync::Arc::clone(&watcher)));
    std::mem::forget(registry.register(std::sync::Arc::clone(&client)));
    let mut monitor = ClientConnection::new(1, "127.0.0.1:1", Limits::default()).with_registry(
        std::sync::Arc::clone(&watcher),
        std::sync::Arc::clone(&registry),
    );
    assert_eq!(reply(&mut monitor, "MONITOR"), Reply::OK);
    // Not a command it shows; only its own client's lines follow.
    monitor.show_to_monitors(true);
    let conn =
        ClientConnection::new(2, "127.0.0.1:2", Limits::default()).with_registry(client, registry);
    (conn, watcher)
}

/// Dispatches `line` and shows it as the server does for a request it accepts.
fn shown(conn: &mut ClientConnection, line: &str) -> Dispatch {
    let dispatch = run(conn, line);
    conn.show_to_monitors(true);
    dispatch
}

fn monitor_lines(watcher: &ClientRecord) -> Vec<String> {
    let event = futures_lite_poll(watcher.monitor.next());
    let Some(monitor::MonitorEvent::Lines(bytes)) = event else {
        return Vec::new();
    };
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .split_terminator("\r\n")
        .map(|line| {
            let (time, rest) = line.split_once(' ').unwrap();
            assert!(time.starts_with('+') && time.contains('.'), "{line}");
            rest.to_string()
        })
        .collect()
}

/// Polls a future once (the monitor's queue is ready or not; nothing here waits).
fn futures_lite_poll<F: std::future::Future>(future: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

#[test]
fn monitor_shows_what_runs_as_redis_shows_it() {
    let (mut c, watcher) = monitored_pair();
    assert!(matches!(shown(&mut c, "SET foo bar"), Dispatch::Write(_)));
    assert!(matches!(shown(&mut c, "GET foo"), Dispatch::Read(_)));
    // Refused before it runs: not shown. Administrative: not shown. A secret: redacted.
    shown(&mut c, "NOSUCH x");
    shown(&mut c, "CONFIG GET maxmemory");
    shown(&mut c, "AUTH sesame");
    assert_eq!(
        monitor_lines(&watcher),
        [
            "[0 10.0.0.1:2] \"SET\" \"foo\" \"bar\"",
            "[0 10.0.0.1:2] \"GET\" \"foo\"",
            "[0 10.0.0.1:2] \"AUTH\" \"(redacted)\"",
        ]
    );
    // A transaction: MULTI now, the queued commands when EXEC runs them, then EXEC.
    shown(&mut c, "MULTI");
    assert_eq!(monitor_lines(&watcher), ["[0 10.0.0.1:2] \"MULTI\""]);
    shown(&mut c, "SET foo bar");
    shown(&mut c, "PING");
    assert!(monitor_lines(&watcher).is_empty(), "queued, not run yet");
    assert!(matches!(shown(&mut c, "EXEC"), Dispatch::Exec(_)));
    assert_eq!(
        monitor_lines(&watcher),
        [
            "[0 10.0.0.1:2] \"SET\" \"foo\" \"bar\"",
            "[0 10.0.0.1:2] \"PING\"",
            "[0 10.0.0.1:2] \"EXEC\"",
        ]
    );
    // An aborted transaction shows MULTI and EXEC only.
    shown(&mut c, "MULTI");
    shown(&mut c, "SET foo bar");
    shown(&mut c, "syntax error");
    shown(&mut c, "EXEC");
    assert_eq!(
        monitor_lines(&watcher),
        ["[0 10.0.0.1:2] \"MULTI\"", "[0 10.0.0.1:2] \"EXEC\""]
    );
    // Refused by the server (past maxmemory): not shown.
    run(&mut c, "SET big value");
    c.show_to_monitors(false);
    assert!(monitor_lines(&watcher).is_empty());
}

#[test]
fn a_monitor_may_not_touch_keys_nor_monitor_inside_a_transaction() {
    let (mut c, watcher) = monitored_pair();
    let mut monitor = ClientConnection::new(1, "127.0.0.1:1", Limits::default())
        .with_registry(watcher, std::sync::Arc::new(ClientRegistry::default()));
    assert_eq!(
        reply(&mut monitor, "GET foo"),
        Reply::error("ERR Replica can't interact with the keyspace")
    );
    assert_eq!(reply(&mut monitor, "PING"), Reply::PONG);
    // Inside MULTI, MONITOR is answered at EXEC with Redis's error, the rest runs.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "MONITOR"), QUEUED);
    assert_eq!(reply(&mut c, "PING"), QUEUED);
    let Dispatch::Exec(transaction) = run(&mut c, "EXEC") else {
        panic!("EXEC of a PING is proposed");
    };
    assert_eq!(
        transaction.local_replies,
        [(
            0,
            Reply::error("ERR MONITOR isn't allowed for DENY BLOCKING client")
        )]
    );
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
