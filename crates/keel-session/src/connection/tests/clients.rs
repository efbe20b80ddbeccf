//! The CLIENT subcommands: a connection's name, id and INFO line, CLIENT LIST and CLIENT KILL over
//! the node's registry of connections, and CLIENT REPLY's mode handed to the server. Grouped
//! because they all concern the connection records (`connection/clients.rs`) rather than data.

use super::*;

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

#[test]
fn client_list_shows_every_registered_connection_and_filters_by_id() {
    use crate::connection::ClientRegistry;
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
    use crate::connection::{ClientRecord, ClientRegistry};
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
fn client_reply_hands_its_mode_to_the_server_once() {
    use keel_redis::command::ReplyMode;
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
