//! End to end over real sockets: the protocol layer and state machine behind the test-only server,
//! `keel bench` against it and against a real redis-server, and the `keel` binary's flag checks.

mod support;

use std::process::Command;
use std::time::Duration;

use bytes::BytesMut;
use keel_bench::{self as bench, BenchConfig, BenchError, Stop};
use keel_resp::Reply;
use keel_resp::{parse_reply, Limits};
use support::{json_field, RedisServer, ServerOptions, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends raw bytes and collects `count` replies (or fewer if the server closes).
async fn exchange(stream: &mut TcpStream, send: &[u8], count: usize) -> Vec<Reply> {
    stream.write_all(send).await.unwrap();
    let mut input = BytesMut::new();
    let mut replies = Vec::new();
    while replies.len() < count {
        while let Some((reply, used)) = parse_reply(&input, &Limits::default()).unwrap() {
            let _ = input.split_to(used);
            replies.push(reply);
        }
        if replies.len() == count {
            break;
        }
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_buf(&mut input))
            .await
            .expect("reply in time")
            .unwrap();
        if read == 0 {
            break;
        }
    }
    replies
}

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.addr).await.unwrap()
}

fn config(server: &TestServer) -> BenchConfig {
    BenchConfig {
        targets: vec![server.addr.to_string()],
        connections: 4,
        pipeline: 4,
        keys: 100,
        read_ratio: 0.5,
        stop: Stop::Requests(2_000),
        reply_timeout: Duration::from_secs(5),
        ..BenchConfig::default()
    }
}

#[tokio::test]
async fn pipelined_commands_over_a_socket() {
    let server = TestServer::start(ServerOptions::default()).await;
    let mut c = connect(&server).await;
    let send = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n10\r\nINCRBY k 5\r\nGET k\r\nGET nope\r\nCAS k 15 x\r\nCAS k 15 y\r\nSET k v NX\r\nFOO bar\r\nDBSIZE\r\n";
    let replies = exchange(&mut c, send, 9).await;
    assert_eq!(
        replies,
        [
            Reply::OK,
            Reply::Integer(15),
            Reply::text("15"),
            Reply::Null,
            Reply::Integer(1),
            Reply::Integer(0),
            Reply::Null,
            Reply::error("ERR unknown command 'FOO', with args beginning with: 'bar' "),
            Reply::Integer(1),
        ]
    );
    // HELLO 3 switches this connection to RESP3: nulls become `_`.
    let replies = exchange(&mut c, b"HELLO 3\r\nGET nope\r\n", 2).await;
    assert!(matches!(replies[0], Reply::Map(_)));
    let mut raw = vec![0u8; 3];
    c.write_all(b"GET nope\r\n").await.unwrap();
    c.read_exact(&mut raw).await.unwrap();
    assert_eq!(raw, b"_\r\n");
    assert_eq!(exchange(&mut c, b"QUIT\r\n", 2).await, [Reply::OK]);
}

#[tokio::test]
async fn bad_input_closes_only_that_connection() {
    let server = TestServer::start(ServerOptions::default()).await;
    let mut good = connect(&server).await;
    assert_eq!(exchange(&mut good, b"SET a 1\r\n", 1).await, [Reply::OK]);
    let cases: [(&[u8], &str); 3] = [
        (
            b"*1\r\n$99999999999\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (
            b"*999999999\r\n",
            "ERR Protocol error: invalid multibulk length",
        ),
        (b"*1\r\n:1\r\n", "ERR Protocol error: expected '$', got ':'"),
    ];
    for (garbage, prefix) in cases {
        let mut bad = connect(&server).await;
        let replies = exchange(&mut bad, garbage, 2).await;
        assert_eq!(replies.len(), 1, "one error, then the connection closes");
        let Reply::Error(message) = &replies[0] else {
            panic!("{replies:?}")
        };
        assert!(message.starts_with(prefix), "{message}");
    }
    // The well-behaved connection and the data are untouched.
    assert_eq!(
        exchange(&mut good, b"GET a\r\n", 1).await,
        [Reply::text("1")]
    );
}

#[tokio::test]
async fn bench_counts_add_up_against_the_test_server() {
    let server = TestServer::start(ServerOptions::default()).await;
    let report = bench::run(&config(&server)).await.unwrap();
    assert!(report.connection_failures.is_empty(), "{report:?}");
    assert_eq!(report.all.replies, 2_000);
    assert_eq!(report.get.replies + report.set.replies, 2_000);
    assert!(
        report.get.replies > 500 && report.set.replies > 500,
        "{report:?}"
    );
    assert_eq!(report.all.errors, 0);
    assert_eq!(report.lost_requests, 0);
    let sm = server.state.sm.lock().unwrap();
    // Every SET was one applied write; GETs apply nothing.
    assert_eq!(sm.applied_index(), report.set.replies);
    assert!(sm.len() <= 100);
    let json = report.to_json();
    assert_eq!(json_field(&json, "requests"), "2000");
    assert_eq!(json_field(&json, "errors"), "0");
    assert!(report.to_table().contains("SET"));
}

#[tokio::test]
async fn bench_warmup_and_duration() {
    let server = TestServer::start(ServerOptions::default()).await;
    let config = BenchConfig {
        stop: Stop::After(Duration::from_millis(300)),
        warmup: Duration::from_millis(100),
        read_ratio: 0.0,
        ..config(&server)
    };
    let report = bench::run(&config).await.unwrap();
    assert!(report.all.replies > 0);
    assert!(
        report.elapsed >= Duration::from_millis(300),
        "{:?}",
        report.elapsed
    );
    assert!(report.elapsed < Duration::from_secs(5));
    // Warmup requests were sent but not counted.
    let applied = server.state.sm.lock().unwrap().applied_index();
    assert!(
        applied > report.set.replies,
        "{applied} vs {}",
        report.set.replies
    );
}

/// `--ttl-ms` and `--expire-ratio`: SETs with a TTL and PEXPIREs among the writes, all answered
/// without errors, and the keys written have deadlines.
#[tokio::test]
async fn bench_writes_with_ttls_and_expires() {
    let server = TestServer::start(ServerOptions::default()).await;
    let config = BenchConfig {
        ttl_ms: 60_000,
        expire_ratio: 0.3,
        ..config(&server)
    };
    let report = bench::run(&config).await.unwrap();
    assert_eq!(report.all.errors, 0, "{:?}", report.first_error);
    assert!(report.set.replies > 0);
    assert!(report.to_json().contains("\"ttl_ms\":60000"));
    let sm = server.state.sm.lock().unwrap();
    assert!(sm.keys_with_deadline() > 0);
    assert_eq!(
        sm.keys_with_deadline(),
        sm.len(),
        "every key was SET with a TTL"
    );
}

#[tokio::test]
async fn bench_counts_error_replies_without_stopping() {
    let options = ServerOptions {
        reject_writes: true,
        ..ServerOptions::default()
    };
    let server = TestServer::start(options).await;
    let report = bench::run(&config(&server)).await.unwrap();
    assert_eq!(report.all.replies, 2_000);
    assert_eq!(report.set.errors, report.set.replies);
    assert_eq!(report.get.errors, 0);
    assert!(report
        .first_error
        .as_deref()
        .unwrap()
        .starts_with("READONLY"));
    assert!(report.connection_failures.is_empty());
}

#[tokio::test]
async fn bench_reports_connection_failures() {
    let options = ServerOptions {
        close_after_requests: Some(50),
        ..ServerOptions::default()
    };
    let server = TestServer::start(options).await;
    let report = bench::run(&config(&server)).await.unwrap();
    assert_eq!(report.connection_failures.len(), 4, "{report:?}");
    assert!(report.connection_failures[0].contains("connection closed by the server"));
    assert!(report.all.replies < 2_000);

    // Nothing listening: a clear error before the run starts.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let config = BenchConfig {
        targets: vec![addr.clone()],
        ..config(&server)
    };
    match bench::run(&config).await {
        Err(BenchError::Connect { addr: a, .. }) => assert_eq!(a, addr),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bench_rejects_unbounded_or_invalid_settings() {
    let server = TestServer::start(ServerOptions::default()).await;
    for bad in [
        BenchConfig {
            connections: 0,
            ..config(&server)
        },
        BenchConfig {
            read_ratio: 1.5,
            ..config(&server)
        },
        BenchConfig {
            expire_ratio: 0.5,
            ..config(&server)
        },
        BenchConfig {
            stop: Stop::Requests(0),
            ..config(&server)
        },
        BenchConfig {
            targets: vec![],
            ..config(&server)
        },
    ] {
        assert!(matches!(
            bench::run(&bad).await,
            Err(BenchError::Invalid(_))
        ));
    }
}

fn keel() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel"))
}

#[test]
fn keel_bench_against_redis_server() {
    let redis = RedisServer::start();
    let output = keel()
        .args(["bench", "--addr", &format!("127.0.0.1:{}", redis.port)])
        .args(["--connections", "4", "--pipeline", "2", "--duration", "1s"])
        .args(["--read-ratio", "0.3", "--json", "--quiet", "--threads", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = stdout.trim();
    assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
    let requests: u64 = json_field(json, "requests").parse().unwrap();
    let gets: u64 = json_field(json, "get_requests").parse().unwrap();
    let sets: u64 = json_field(json, "set_requests").parse().unwrap();
    assert!(requests > 100, "{json}");
    assert_eq!(gets + sets, requests);
    assert_eq!(json_field(json, "errors"), "0");
    assert_eq!(json_field(json, "connection_failures"), "0");
    let p50: u64 = json_field(json, "p50_us").parse().unwrap();
    let p99: u64 = json_field(json, "p99_us").parse().unwrap();
    assert!(p50 > 0 && p50 <= p99, "{json}");
    let elapsed: f64 = json_field(json, "elapsed_s").parse().unwrap();
    assert!((1.0..5.0).contains(&elapsed), "{json}");
}

#[test]
fn keel_bench_reports_an_unreachable_server() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let output = keel()
        .args(["bench", "--addr", &addr, "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot connect to {addr}")),
        "{stderr}"
    );
}

#[test]
fn keel_bench_refuses_a_thread_count_out_of_range() {
    for threads in ["0", "65"] {
        let output = keel()
            .args(["bench", "--threads", threads, "--requests", "1"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "--threads {threads}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("--threads {threads} is out of range: 1 to 64")),
            "{stderr}"
        );
    }
}

#[test]
fn a_worker_thread_count_out_of_range_is_refused_before_anything_starts() {
    let dir = std::env::temp_dir().join(format!("keel-workers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = keel()
        .args(["up", "--worker-threads", "0"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--worker-threads 0 is out of range: 1 to 1024"),
        "{stderr}"
    );
    assert!(
        !dir.join("keel-data").exists(),
        "nothing is created when refused"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serve_rejects_incomplete_or_unsupported_settings() {
    let cases: [(&[&str], &str); 3] = [
        (&["serve", "--data-dir", "d"], "--id is required"),
        (
            &["serve", "--id", "1", "--initial-cluster", "1=a"],
            "--initial-cluster",
        ),
        (&["serve", "--id", "1", "--config", "keel.toml"], "--config"),
    ];
    for (args, expected) in cases {
        let output = keel().args(args).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// For checking by hand with redis-cli and redis-benchmark (not run by default):
/// `KEEL_TEST_PORT=7777 cargo test -p keel-cli --test end_to_end -- --ignored --nocapture serve_for_manual_checks`
/// serves for `KEEL_TEST_SERVE_SECS` seconds (default 60).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn serve_for_manual_checks() {
    let port: u16 = std::env::var("KEEL_TEST_PORT").map_or(7777, |p| p.parse().unwrap());
    let secs: u64 = std::env::var("KEEL_TEST_SERVE_SECS").map_or(60, |s| s.parse().unwrap());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let _server = TestServer::serve(listener, ServerOptions::default());
    println!("serving on 127.0.0.1:{port} for {secs} s");
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

/// MULTI ... EXEC over a socket, pipelined in one write, answered exactly as redis-server answers
/// the same bytes; on keel the whole transaction is one applied entry.
#[tokio::test]
async fn transactions_answer_like_redis_server() {
    let script: &[u8] = b"MULTI\r\nSET t 1\r\nINCR t\r\nGET t\r\nSET s text\r\nINCR s\r\n\
        MGET t s nope\r\nEXISTS t s nope\r\nSTRLEN s\r\nDBSIZE\r\nSET t x NX\r\nPING\r\n\
        ECHO hi\r\nAPPEND s !\r\nDEL s nope\r\nEXEC\r\n\
        MULTI\r\nSET u 1\r\nFOO bar\r\nGET\r\nSET v 1\r\nEXEC\r\nEXISTS u v\r\n\
        EXEC\r\nDISCARD\r\nMULTI\r\nMULTI\r\nINCR t\r\nDISCARD\r\nGET t\r\n\
        MULTI\r\nEXEC\r\nMULTI\r\nINCR t\r\nEXEC\r\n";
    let count = 35;
    let redis = RedisServer::start();
    let mut r = TcpStream::connect(("127.0.0.1", redis.port)).await.unwrap();
    let expected = exchange(&mut r, script, count).await;
    assert_eq!(expected.len(), count);

    let server = TestServer::start(ServerOptions::default()).await;
    let mut c = connect(&server).await;
    let applied_before = server.state.sm.lock().unwrap().applied_index();
    let replies = exchange(&mut c, script, count).await;
    for (i, (got, want)) in replies.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "reply {i}");
    }
    assert_eq!(replies.len(), count);
    assert_eq!(
        replies[15],
        Reply::Array(vec![
            Reply::OK,
            Reply::Integer(2),
            Reply::text("2"),
            Reply::OK,
            Reply::error("ERR value is not an integer or out of range"),
            Reply::Array(vec![Reply::text("2"), Reply::text("text"), Reply::Null]),
            Reply::Integer(2),
            Reply::Integer(4),
            Reply::Integer(2),
            Reply::Null,
            Reply::simple("PONG"),
            Reply::text("hi"),
            Reply::Integer(5),
            Reply::Integer(1),
        ])
    );
    assert_eq!(
        replies[21],
        Reply::error("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(
        replies[22],
        Reply::Integer(0),
        "an aborted transaction wrote nothing"
    );
    // Two non-empty EXECs, two entries.
    let applied_after = server.state.sm.lock().unwrap().applied_index();
    assert_eq!(applied_after, applied_before + 2);

    // In RESP3 the nulls inside EXEC's array are RESP3 nulls.
    c.write_all(b"HELLO 3\r\nMULTI\r\nGET nope\r\nEXEC\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    while !raw.ends_with(b"*1\r\n_\r\n") {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("reply in time")
            .unwrap();
        assert!(n > 0, "closed");
        raw.extend_from_slice(&buf[..n]);
    }
    assert!(raw.ends_with(b"+OK\r\n+QUEUED\r\n*1\r\n_\r\n"));
}

/// Commands as RESP arrays, so that empty arguments travel too.
fn resp(commands: &[&[&str]]) -> Vec<u8> {
    let mut out = Vec::new();
    for command in commands {
        out.extend_from_slice(format!("*{}\r\n", command.len()).as_bytes());
        for arg in *command {
            out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
    }
    out
}

/// The same reply with the elements of every array sorted: for KEYS and SCAN, whose order
/// differs between servers.
fn sorted(reply: &Reply) -> Reply {
    match reply {
        Reply::Array(items) => {
            let mut items: Vec<Reply> = items.iter().map(sorted).collect();
            items.sort_by_key(|item| format!("{item:?}"));
            Reply::Array(items)
        }
        other => other.clone(),
    }
}

/// The string and keyspace commands, answered exactly as redis-server 7.0 answers them (errors
/// included), apart from the order of KEYS and SCAN and the key RANDOMKEY picks.
#[tokio::test]
#[expect(clippy::too_many_lines)]
async fn string_and_keyspace_commands_answer_like_redis_server() {
    let script: &[&[&str]] = &[
        &["SET", "s", "foobar"],
        &["INCRBYFLOAT", "f", "1"],
        &["INCRBYFLOAT", "f", "0.25"],
        &["INCRBYFLOAT", "f", "-0.75"],
        &["INCRBYFLOAT", "f", "17179869184"],
        &["INCRBYFLOAT", "s", "1"],
        &["INCRBYFLOAT", "f", "+inf"],
        &["INCRBYFLOAT", "f", "x"],
        &["SETRANGE", "r", "1", "foo"],
        &["SETRANGE", "r", "0", ""],
        &["SETRANGE", "none", "5", ""],
        &["SETRANGE", "r", "-1", "x"],
        &["SETRANGE", "r", "536870910", "world"],
        &["GET", "r"],
        &["SETBIT", "b", "1", "1"],
        &["SETBIT", "b", "7", "1"],
        &["SETBIT", "b", "7", "0"],
        &["SETBIT", "b", "-1", "1"],
        &["SETBIT", "b", "0", "2"],
        &["GETBIT", "b", "1"],
        &["GETBIT", "b", "100"],
        &["GETBIT", "b", "4294967296"],
        &["GET", "b"],
        &["GETRANGE", "s", "0", "3"],
        &["GETRANGE", "s", "-4", "-1"],
        &["SUBSTR", "s", "5", "3"],
        &["GETRANGE", "nokey", "0", "-1"],
        &["GETRANGE", "s", "0", "x"],
        &["BITCOUNT", "s"],
        &["BITCOUNT", "s", "1", "-2"],
        &["BITCOUNT", "s", "3", "29", "BIT"],
        &["BITCOUNT", "s", "0"],
        &["BITCOUNT", "s", "0", "1", "hello"],
        &["SET", "a", "ohmytext"],
        &["SET", "c", "mynewtext"],
        &["LCS", "a", "c"],
        &["LCS", "a", "c", "LEN"],
        &["LCS", "a", "c", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"],
        &["LCS", "a", "c", "IDX"],
        &["LCS", "a", "c", "LEN", "IDX"],
        &["LCS", "a", "nokey"],
        &["RENAME", "s", "s2"],
        &["RENAME", "nokey", "x"],
        &["RENAMENX", "s2", "a"],
        &["RENAMENX", "s2", "s3"],
        &["RENAME", "s3", "s3"],
        &["RENAMENX", "s3", "s3"],
        &["COPY", "s3", "s4"],
        &["COPY", "s3", "s4"],
        &["COPY", "a", "s4", "REPLACE"],
        &["COPY", "s3", "s3"],
        &["COPY", "s3", "s5", "DB", "0"],
        &["COPY", "s3", "s5", "DB", "x"],
        &["GET", "s4"],
        &["TYPE", "s4"],
        &["TYPE", "nokey"],
        &["TOUCH", "s4", "s4", "nokey"],
        &["UNLINK", "s4", "nokey"],
        &["KEYS", "s*"],
        &["KEYS", "[ab]"],
        &["SCAN", "0", "COUNT", "1000"],
        &[
            "SCAN", "0", "MATCH", "s*", "COUNT", "1000", "TYPE", "string",
        ],
        &["SCAN", "0", "TYPE", "list"],
        &["SCAN", "x"],
        &["SCAN", "0", "COUNT", "0"],
        &["SCAN", "0", "MATCH"],
        &["MULTI"],
        &["GETRANGE", "a", "2", "3"],
        &["LCS", "a", "c", "IDX", "WITHMATCHLEN"],
        &["SETBIT", "a", "0", "1"],
        &["BITCOUNT", "a"],
        &["TYPE", "a"],
        &["KEYS", "a"],
        &["EXEC"],
        &["RANDOMKEY"],
    ];
    let count = script.len();
    let redis = RedisServer::start();
    let mut r = TcpStream::connect(("127.0.0.1", redis.port)).await.unwrap();
    let expected = exchange(&mut r, &resp(script), count).await;
    assert_eq!(expected.len(), count);

    let server = TestServer::start(ServerOptions::default()).await;
    let mut c = connect(&server).await;
    let replies = exchange(&mut c, &resp(script), count).await;
    assert_eq!(replies.len(), count);
    for (command, (got, want)) in script.iter().zip(replies.iter().zip(&expected)) {
        match command[0] {
            "KEYS" | "SCAN" => assert_eq!(sorted(got), sorted(want), "{command:?}"),
            "RANDOMKEY" => assert!(matches!(got, Reply::Bulk(_)), "{got:?}"),
            _ => assert_eq!(got, want, "{command:?}"),
        }
    }
}
