//! While a script is busy (`NodeInfo::script_busy`): `-BUSY` for what Redis refuses then, the
//! commands it lets through, and what a refusal does to a transaction.

use super::*;

struct BusyNode(bool);

impl NodeInfo for BusyNode {
    fn status(&self) -> NodeReport {
        NodeReport::default()
    }

    fn script_busy(&self) -> bool {
        self.0
    }
}

fn send(c: &mut ClientConnection, line: &str, busy: bool) -> Dispatch {
    let args: Vec<Bytes> = line.split(' ').map(b).collect();
    c.dispatch(&args, &BusyNode(busy))
}

fn busy_reply() -> Dispatch {
    Dispatch::Reply(Reply::error(keel_redis::script::BUSY))
}

#[test]
fn a_busy_node_refuses_data_commands_and_lets_kill_through() {
    let mut c = conn();
    assert_eq!(send(&mut c, "GET k", true), busy_reply());
    assert_eq!(send(&mut c, "SET k v", true), busy_reply());
    assert_eq!(send(&mut c, "EVAL return 1 0", true), busy_reply());
    assert_eq!(send(&mut c, "PING", true), busy_reply());
    assert_eq!(
        send(&mut c, "SCRIPT KILL", true),
        Dispatch::Script(keel_redis::command::ScriptCommand::Kill)
    );
    assert!(matches!(
        send(&mut c, "CLIENT ID", true),
        Dispatch::Reply(Reply::Integer(9))
    ));
    // A request that does not parse answers its own error.
    assert!(matches!(
        send(&mut c, "NOSUCH", true),
        Dispatch::Reply(Reply::Error(e)) if e.starts_with("ERR unknown command")
    ));
    assert!(matches!(send(&mut c, "GET k", false), Dispatch::Read(_)));
}

#[test]
fn a_command_refused_as_busy_aborts_the_transaction() {
    // MULTI passes; INCR is refused and marks the transaction; after the script, EXEC aborts.
    let mut c = conn();
    assert_eq!(send(&mut c, "MULTI", true), Dispatch::Reply(Reply::OK));
    assert_eq!(send(&mut c, "INCR xx", true), busy_reply());
    assert!(matches!(send(&mut c, "INCR xx", false), Dispatch::Reply(_)));
    assert_eq!(
        send(&mut c, "EXEC", false),
        Dispatch::Reply(CommandError::ExecAbort.to_reply())
    );
    assert!(!c.in_transaction());
}

#[test]
fn exec_while_busy_discards_the_transaction_with_the_reason() {
    let mut c = conn();
    assert_eq!(send(&mut c, "MULTI", false), Dispatch::Reply(Reply::OK));
    assert!(matches!(send(&mut c, "INCR xx", false), Dispatch::Reply(_)));
    let Dispatch::Reply(Reply::Error(error)) = send(&mut c, "EXEC", true) else {
        panic!("EXEC while busy is refused");
    };
    assert!(error.starts_with("EXECABORT"), "{error}");
    assert!(error.contains("BUSY"), "{error}");
    assert!(!c.in_transaction(), "the transaction is gone");
    assert!(matches!(
        send(&mut c, "PING hi", false),
        Dispatch::Reply(Reply::Bulk(_))
    ));
}
