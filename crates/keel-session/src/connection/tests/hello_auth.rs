//! HELLO's protocol switch and reply, and authentication: AUTH, HELLO ... AUTH, and `requirepass`
//! gating every other command until the password is given. Apart from the other connection tests
//! because they are about the state a connection starts in and what it takes to leave it.

use super::*;
use keel_resp::ProtocolVersion;

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
