//! MONITOR: a monitoring connection is shown what other connections run, as Redis shows it
//! (transactions when EXEC runs them, AUTH redacted), and may neither touch keys nor monitor
//! inside a transaction. Apart from the other tests because it needs a registry with two
//! connections and its own helpers to read the monitor's queue.

use super::*;

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
    let Some(crate::connection::monitor::MonitorEvent::Lines(bytes)) = event else {
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
