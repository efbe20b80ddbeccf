//! How the connection hands over the commands whose class depends on their arguments (SORT: a
//! write with STORE, a read without; SORT_RO: always a read), alone and inside MULTI.

use bytes::Bytes;

use crate::connection::{ClientConnection, Dispatch, NodeReport, Transaction};
use keel_redis::command::{
    CollectionRead, CollectionWrite, QueuedCommand, ReadCommand, WriteCommand,
};
use keel_resp::{Limits, Reply};

struct Node;

impl crate::connection::NodeInfo for Node {
    fn status(&self) -> NodeReport {
        NodeReport::default()
    }
}

fn run(conn: &mut ClientConnection, line: &str) -> Dispatch {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    conn.dispatch(&args, &Node)
}

fn queued() -> Dispatch {
    Dispatch::Reply(Reply::Simple("QUEUED".into()))
}

fn is_sort_store(dispatch: &Dispatch) -> bool {
    matches!(dispatch, Dispatch::Write(WriteCommand::Collection(typed))
        if matches!(typed.op, CollectionWrite::SortStore { .. }))
}

fn is_sort_read(dispatch: &Dispatch) -> bool {
    matches!(dispatch, Dispatch::Read(ReadCommand::Collection(typed))
        if matches!(typed.op, CollectionRead::Sort(_)))
}

#[test]
fn sort_is_a_write_only_with_store() {
    let mut c = ClientConnection::new(1, "127.0.0.1:5555", Limits::default());
    assert!(is_sort_read(&run(&mut c, "SORT l BY w_* GET # DESC")));
    assert!(is_sort_read(&run(&mut c, "SORT_RO l ALPHA LIMIT 0 5")));
    assert!(is_sort_store(&run(&mut c, "SORT l ALPHA STORE d")));
    assert!(is_sort_store(&run(&mut c, "sort l store d desc")));
    assert_eq!(
        run(&mut c, "SORT_RO l STORE d"),
        Dispatch::Reply(Reply::error("ERR syntax error"))
    );
}

#[test]
fn sort_inside_multi_joins_the_transaction_as_it_parses() {
    let mut c = ClientConnection::new(1, "127.0.0.1:5555", Limits::default());
    assert_eq!(run(&mut c, "MULTI"), Dispatch::Reply(Reply::OK));
    assert_eq!(run(&mut c, "SORT l STORE d"), queued());
    assert_eq!(run(&mut c, "SORT_RO d"), queued());
    let Dispatch::Exec(Transaction { commands, .. }) = run(&mut c, "EXEC") else {
        panic!("EXEC did not hand over the transaction")
    };
    assert!(
        matches!(&commands[0], QueuedCommand::Write(WriteCommand::Collection(typed))
        if matches!(typed.op, CollectionWrite::SortStore { .. }))
    );
    assert!(
        matches!(&commands[1], QueuedCommand::Read(ReadCommand::Collection(typed))
        if matches!(typed.op, CollectionRead::Sort(_)))
    );
    // A bad SORT aborts the transaction, as any command with a syntax error does.
    assert_eq!(run(&mut c, "MULTI"), Dispatch::Reply(Reply::OK));
    assert_eq!(
        run(&mut c, "SORT l LIMIT 0"),
        Dispatch::Reply(Reply::error("ERR syntax error"))
    );
    assert_eq!(
        run(&mut c, "EXEC"),
        Dispatch::Reply(Reply::error(
            "EXECABORT Transaction discarded because of previous errors."
        ))
    );
}
