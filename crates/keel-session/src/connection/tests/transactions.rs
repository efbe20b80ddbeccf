//! MULTI / EXEC / DISCARD and WATCH: what a connection queues, what EXEC hands to the server
//! (with the local commands' replies spliced into its array), the errors that abort a transaction,
//! the watched keys EXEC carries, and the bounds on what is queued. Apart from the other tests
//! because the transaction state is a concern of its own (`Transaction` in `connection/mod.rs`).

use super::*;
use keel_resp::ProtocolVersion;

const QUEUED_REPLY: Reply = Reply::Simple(std::borrow::Cow::Borrowed("QUEUED"));

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

#[test]
fn multi_queues_commands_and_exec_hands_them_over() {
    use keel_redis::command::{QueuedCommand, ReadCommand};
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
        "UNWATCH",
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
    assert_eq!(reply(&mut c, "UNWATCH"), QUEUED_REPLY);
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
        db: 0,
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
    assert_eq!(reply(&mut c, "CONFIG GET maxmemory"), QUEUED_REPLY);
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
fn a_transaction_that_queues_a_script_goes_to_the_script_runner_at_exec() {
    use keel_redis::command::{ScriptCommand, ScriptedExec};
    let mut c = conn();
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SET k 1"), QUEUED_REPLY);
    assert_eq!(reply(&mut c, "EVAL return 1 0"), QUEUED_REPLY);
    assert_eq!(reply(&mut c, "UNWATCH"), QUEUED_REPLY);
    assert_eq!(reply(&mut c, "SCRIPT EXISTS abc"), QUEUED_REPLY);
    let words = |line: &str| -> Vec<Bytes> { line.split(' ').map(b).collect() };
    let expected = ScriptedExec {
        requests: ["SET k 1", "EVAL return 1 0", "UNWATCH", "SCRIPT EXISTS abc"]
            .map(words)
            .to_vec(),
        local_replies: vec![(2, Reply::OK)],
        watched: Vec::new(),
    };
    assert_eq!(
        run(&mut c, "EXEC"),
        Dispatch::Script(ScriptCommand::Exec(Box::new(expected)))
    );
    assert!(!c.in_transaction());
    // SCRIPT KILL is refused inside a transaction, as in Redis; a script in an aborted one is
    // never run.
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert!(matches!(reply(&mut c, "SCRIPT KILL"), Reply::Error(_)));
    assert_eq!(reply(&mut c, "EVAL return 1 0"), QUEUED_REPLY);
    assert!(matches!(reply(&mut c, "EXEC"), Reply::Error(e) if e.starts_with("EXECABORT")));
}

/// SELECT per connection: out of range refused in Redis's words; inside MULTI it is queued, the
/// commands after it run in its database, and the connection is there after EXEC (not after
/// DISCARD, nor after an aborted transaction).
#[test]
fn select_is_the_connection_s_and_runs_at_exec_inside_multi() {
    let mut c = conn();
    assert_eq!(c.db(), 0);
    assert_eq!(reply(&mut c, "SELECT 15"), Reply::OK);
    assert_eq!(c.db(), 15);
    assert_eq!(
        reply(&mut c, "SELECT 16"),
        Reply::error("ERR DB index is out of range")
    );
    assert_eq!(
        reply(&mut c, "SWAPDB 0 16"),
        Reply::error("ERR DB index is out of range")
    );
    assert_eq!(
        reply(&mut c, "MOVE k 99"),
        Reply::error("ERR DB index is out of range")
    );
    assert_eq!(c.db(), 15);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    for line in ["SET k 1", "SELECT 3", "GET k"] {
        assert_eq!(reply(&mut c, line), QUEUED_REPLY, "{line}");
    }
    assert_eq!(c.db(), 15, "SELECT runs at EXEC");
    let Dispatch::Exec(tx) = run(&mut c, "EXEC") else {
        panic!("a transaction with data commands is proposed")
    };
    assert_eq!(tx.commands[1], QueuedCommand::Select(3));
    assert_eq!(c.db(), 3);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(reply(&mut c, "SELECT 5"), QUEUED_REPLY);
    assert_eq!(reply(&mut c, "DISCARD"), Reply::OK);
    assert_eq!(c.db(), 3);
    assert_eq!(reply(&mut c, "MULTI"), Reply::OK);
    assert_eq!(
        reply(&mut c, "SELECT 99"),
        Reply::error("ERR DB index is out of range")
    );
    assert!(matches!(
        run(&mut c, "EXEC"),
        Dispatch::Reply(Reply::Error(_))
    ));
    assert_eq!(c.db(), 3);
}
